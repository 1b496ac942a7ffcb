"""``where``, the elementwise ternary primitive: ``a`` where a condition holds, else ``b``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...amp import PROMOTE
from ...creation import full
from ...dispatch import apply, define, is_tensor, scalar_value
from ...dtypes import DType, bool_, promote_types, scalar_dtype
from ...errors import DTypeError
from ...shapes import broadcast_shapes
from ._define import _tensor_arg, ones_like_scalar

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = ["where"]


def _where_vjp(g: Tensor, out: Tensor, cond: Tensor, a: Tensor, b: Tensor) -> tuple[Any, ...]:
    zero = ones_like_scalar(g, 0.0)
    return None, (where(cond, g, zero) if a._rg else None), (where(cond, zero, g) if b._rg else None)


WHERE = define("where", kind="elementwise_ternary", primitive=True, vjp=_where_vjp, autocast=PROMOTE)


def where(condition: Any, a: Any, b: Any) -> Tensor:
    """Elementwise ``a`` where ``condition`` else ``b`` (all three broadcast)."""
    like = next((t for t in (condition, a, b) if is_tensor(t)), None)
    cond = _tensor_arg(condition, "where", like)
    if cond._dtype is not bool_:
        raise DTypeError(f"where: condition must be a bool tensor, got {cond._dtype}; compare first, e.g. x > 0")
    if is_tensor(a) and is_tensor(b):
        dt = promote_types(a._dtype, b._dtype, "where")
    elif is_tensor(a):
        dt = scalar_dtype(a._dtype, b, "where")
    elif is_tensor(b):
        dt = scalar_dtype(b._dtype, a, "where")
    else:
        a = _tensor_arg(a, "where", cond)
        dt = a._dtype
        if not is_tensor(b):
            dt = scalar_dtype(dt, b, "where")
    a = _as_dtype_on(a, dt, cond)
    b = _as_dtype_on(b, dt, cond)
    shape = broadcast_shapes(cond._shape, a._shape, b._shape, op="where")
    return apply(WHERE, (cond, a, b), {}, shape, dt)


def _as_dtype_on(x: Any, dt: DType, like: Tensor) -> Tensor:
    if is_tensor(x):
        return x if x._dtype is dt else x.astype(dt)
    return full((), scalar_value(x, dt, "where"), dtype=dt, device=like._device)

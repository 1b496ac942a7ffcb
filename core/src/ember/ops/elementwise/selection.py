"""``where``, the elementwise ternary primitive: ``a`` where a condition holds, else ``b``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import dispatch as _dispatch
from ...amp import PROMOTE
from ...creation import FULL
from ...device import check_dtype
from ...dispatch import apply, create, define, is_tensor, scalar_value
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
    T = _dispatch._TENSOR
    ta, tb = type(a) is T, type(b) is T
    if type(condition) is T:
        cond = condition
    else:
        cond = _tensor_arg(condition, "where", a if ta else b if tb else None)
    if cond._dtype is not bool_:
        raise DTypeError(f"where: condition must be a bool tensor, got {cond._dtype}; compare first, e.g. x > 0")
    if ta and tb:
        dt = a._dtype if a._dtype is b._dtype else promote_types(a._dtype, b._dtype, "where")
    elif ta:
        dt = a._dtype
        if not ((type(b) is float or type(b) is int) and dt.kind == "f"):  # else scalar_dtype's answer is dt
            dt = scalar_dtype(dt, b, "where")
    elif tb:
        dt = scalar_dtype(b._dtype, a, "where")
    else:
        a = _tensor_arg(a, "where", cond)
        dt = a._dtype
        if not is_tensor(b):
            dt = scalar_dtype(dt, b, "where")
    if type(a) is not T or a._dtype is not dt:
        a = _as_dtype_on(a, dt, cond)
    if type(b) is not T or b._dtype is not dt:
        b = _as_dtype_on(b, dt, cond)
    cs, sa, sb = cond._shape, a._shape, b._shape
    if cs == sa and (sb == cs or not sb):  # the common case (a mask, a tensor, a scalar): no broadcast to work out
        shape = cs
    else:
        shape = broadcast_shapes(cs, sa, sb, op="where")
    return apply(WHERE, (cond, a, b), {}, shape, dt)


def _as_dtype_on(x: Any, dt: DType, like: Tensor) -> Tensor:
    """``x`` as a tensor of ``dt``: a tensor cast, a Python scalar a 0-d ``full`` on ``like``'s device."""
    if type(x) is _dispatch._TENSOR:
        return x if x._dtype is dt else x.astype(dt)
    dev = like._device
    if dt.kind == "c":  # the only dtype a scalar brings that no operand has (a complex scalar, real tensors)
        check_dtype(dev, dt, "where")
    value = float(x) if dt.kind == "f" and (type(x) is float or type(x) is int) else scalar_value(x, dt, "where")
    return create(FULL, dev, (), {"shape": (), "value": value, "dtype": dt}, (), dt)

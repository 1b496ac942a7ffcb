"""The cast primitive behind ``Tensor.astype`` and ``ember.astype``, with its gradient rule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...dispatch import apply, define
from ...dtypes import DType
from .complex import real

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = ["astype_op"]

CAST = define(
    "cast",
    kind="elementwise_unary",
    primitive=True,
    vjp=lambda g, out, x, dtype: _cast_vjp(g, x),
)


def _cast_vjp(g: Tensor, x: Tensor) -> tuple[Any]:
    # a real input cast to complex moved along the real axis only: its gradient is real(g)
    kind = x._dtype.kind
    if kind == "f":
        return ((real(g) if g._dtype.kind == "c" else g).astype(x._dtype),)
    return (g.astype(x._dtype) if kind == "c" else None,)


def astype_op(x: Tensor, dtype: DType) -> Tensor:
    """Dispatch the cast primitive (callers check device support)."""
    if x._dtype is dtype:
        return x
    return apply(CAST, (x,), {"dtype": dtype}, x._shape, dtype)

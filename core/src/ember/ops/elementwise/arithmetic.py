"""Arithmetic: negation, absolute value and sign, the four operations, floor division and remainder,
maximum and minimum (and ``clip`` over them), ``reciprocal`` and ``square``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...dispatch import binary
from ...dtypes import FLOAT_OR_COMPLEX, NUMERIC, NUMERIC_OR_COMPLEX
from ...errors import DTypeError
from ._define import _needs, _reject, _tensor_arg, _unary, _zero_grad, binary_op, unary_op
from .complex import _cj
from .selection import where

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = [
    "negative", "positive", "abs", "sign", "reciprocal", "square",
    "add", "subtract", "multiply", "divide", "floor_divide", "remainder", "maximum", "minimum", "clip",
]  # fmt: skip

# -- unary -------------------------------------------------------------------------------

NEG = unary_op("neg", NUMERIC_OR_COMPLEX, vjp=lambda g, y, x: (-g,))


def _abs_vjp(g: Tensor, y: Tensor, x: Tensor) -> tuple[Any]:
    if x._dtype.kind != "c":
        return (g * sign(x),)
    # |z|: the gradient is g * z / |z| (0 at z = 0, as PyTorch's sgn), written with a division
    # rather than sign() so that it differentiates again (z / |z| is not piecewise constant)
    zero = y == 0
    return (g * where(zero, 0.0, x / where(zero, 1.0, y)),)


ABS = unary_op("abs", NUMERIC_OR_COMPLEX, vjp=_abs_vjp)
SIGN = unary_op("sign", NUMERIC_OR_COMPLEX, vjp=_zero_grad)
RECIPROCAL = unary_op("reciprocal", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (-g * _cj(y * y),))
SQUARE = unary_op("square", NUMERIC_OR_COMPLEX, composite=lambda x: x * x, vjp=lambda g, y, x: (g * 2 * _cj(x),))


def negative(x: Any) -> Tensor:
    """Elementwise ``-x``."""
    return _unary(NEG, x)


def positive(x: Any) -> Tensor:
    """Elementwise ``+x`` (returns ``x``)."""
    x = _tensor_arg(x, "positive")
    if x._dtype not in NUMERIC_OR_COMPLEX:
        raise _reject("positive", NUMERIC_OR_COMPLEX, x._dtype)
    return x


def abs(x: Any) -> Tensor:
    """Elementwise absolute value."""
    return _unary(ABS, x)


def sign(x: Any) -> Tensor:
    """Elementwise -1, 0 or 1 (NaN stays NaN)."""
    return _unary(SIGN, x)


def reciprocal(x: Any) -> Tensor:
    return _unary(RECIPROCAL, x)


def square(x: Any) -> Tensor:
    return _unary(SQUARE, x)


# -- binary ------------------------------------------------------------------------------


def _add_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    return g, g


def _sub_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    return g, (-g if _needs(b) else None)


def _mul_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    return (g * _cj(b) if _needs(a) else None), (g * _cj(a) if _needs(b) else None)


def _div_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    ga = g / _cj(b) if _needs(a) else None
    gb = -g * _cj(a / (b * b)) if _needs(b) else None
    return ga, gb


def _max_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    # ties share the gradient equally, as in PyTorch
    share = where(a == b, 0.5, where(a > b, 1.0, 0.0)).astype(g._dtype)
    return (g * share if _needs(a) else None), (g * (1 - share) if _needs(b) else None)


def _min_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    share = where(a == b, 0.5, where(a < b, 1.0, 0.0)).astype(g._dtype)
    return (g * share if _needs(a) else None), (g * (1 - share) if _needs(b) else None)


def _remainder_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    return (g if _needs(a) else None), (-g * floor_divide(a, b) if _needs(b) else None)


ADD = binary_op("add", NUMERIC_OR_COMPLEX, vjp=_add_vjp)
SUB = binary_op("sub", NUMERIC_OR_COMPLEX, vjp=_sub_vjp)
MUL = binary_op("mul", NUMERIC_OR_COMPLEX, vjp=_mul_vjp)
DIV = binary_op("div", FLOAT_OR_COMPLEX, vjp=_div_vjp)
FLOORDIV = binary_op("floordiv", NUMERIC, vjp=lambda g, out, a, b: (None, None))
REMAINDER = binary_op("remainder", NUMERIC, vjp=_remainder_vjp)
MAXIMUM = binary_op("maximum", NUMERIC, vjp=_max_vjp)
MINIMUM = binary_op("minimum", NUMERIC, vjp=_min_vjp)


def add(a: Any, b: Any) -> Tensor:
    """Elementwise ``a + b`` with broadcasting."""
    return binary(ADD, a, b)


def subtract(a: Any, b: Any) -> Tensor:
    return binary(SUB, a, b)


def multiply(a: Any, b: Any) -> Tensor:
    return binary(MUL, a, b)


def divide(a: Any, b: Any) -> Tensor:
    """True division (floating-point tensors; use ``//`` for integers)."""
    return binary(DIV, a, b)


def floor_divide(a: Any, b: Any) -> Tensor:
    """Floor of ``a / b`` (Python's ``//``).

    Integer division by zero follows the Array API: the result is implementation-defined, not an
    error (checking would read every divisor back from a GPU). The cpu backend gives 0; floats give
    ``inf``/``nan`` as IEEE 754 says.
    """
    return binary(FLOORDIV, a, b)


def remainder(a: Any, b: Any) -> Tensor:
    """Remainder with the sign of the divisor (Python's ``%``).

    An integer remainder by zero is implementation-defined, as in the Array API (0 on cpu), not an error.
    """
    return binary(REMAINDER, a, b)


def maximum(a: Any, b: Any) -> Tensor:
    return binary(MAXIMUM, a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return binary(MINIMUM, a, b)


def clip(x: Any, min: Any = None, max: Any = None) -> Tensor:
    """Clamp values into ``[min, max]`` (either bound may be None, a scalar or a tensor)."""
    x = _tensor_arg(x, "clip")
    if x._dtype not in NUMERIC:
        raise _reject("clip", NUMERIC, x._dtype)
    out = x
    if min is not None:
        out = maximum(out, min)
    if max is not None:
        out = minimum(out, max)
    if out._dtype is not x._dtype:
        raise DTypeError(f"clip: bounds would change the dtype from {x._dtype} to {out._dtype}")
    return out

"""Trigonometric and hyperbolic functions and their inverses, ``atan2`` and ``hypot``, and
``angle``, the argument of a complex number (``atan2(imag, real)``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...dispatch import binary
from ...dtypes import FLOAT, FLOAT_OR_COMPLEX
from ._define import _needs, _unary, _zero_grad, binary_op, ones_like_scalar, unary_op
from .arithmetic import abs, sign
from .comparison import isinf
from .complex import _cj, conj, imag, real
from .exponential import _rsqrt_any, exp, expm1, log, log1p, sqrt
from .selection import where

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = [
    "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "hypot",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "angle",
]  # fmt: skip

SIN = unary_op("sin", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g * _cj(cos(x)),))
COS = unary_op("cos", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (-g * _cj(sin(x)),))
TANH = unary_op("tanh", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g * _cj(1 - y * y),))


def sin(x: Any) -> Tensor:
    return _unary(SIN, x)


def cos(x: Any) -> Tensor:
    return _unary(COS, x)


def tanh(x: Any) -> Tensor:
    return _unary(TANH, x)


# composite unary ops: defined in terms of the primitives, each with its own gradient rule
def _asinh(x: Tensor) -> Tensor:
    a = abs(x)
    # a + a**2 / (1 + sqrt(1 + a**2)), divided through by a so that a**2 cannot overflow
    return sign(x) * log1p(a + a / (1 / a + sqrt(1 + 1 / (a * a))))


TAN = unary_op("tan", FLOAT_OR_COMPLEX, composite=lambda x: sin(x) / cos(x), vjp=lambda g, y, x: (g * _cj(1 + y * y),))
ASIN = unary_op(
    "asin",
    FLOAT_OR_COMPLEX,
    composite=lambda x: atan2(x, sqrt((1 - x) * (1 + x))),
    vjp=lambda g, y, x: (g * _cj(_rsqrt_any((1 - x) * (1 + x))),),
)
ACOS = unary_op(
    "acos",
    FLOAT_OR_COMPLEX,
    composite=lambda x: atan2(sqrt((1 - x) * (1 + x)), x),
    vjp=lambda g, y, x: (-g * _cj(_rsqrt_any((1 - x) * (1 + x))),),
)
ATAN = unary_op(
    "atan",
    FLOAT_OR_COMPLEX,
    composite=lambda x: atan2(x, ones_like_scalar(x, 1.0)),
    vjp=lambda g, y, x: (g / _cj(1 + x * x),),
)
SINH = unary_op(
    "sinh", FLOAT_OR_COMPLEX, composite=lambda x: (expm1(x) - expm1(-x)) * 0.5, vjp=lambda g, y, x: (g * _cj(cosh(x)),)
)
COSH = unary_op(
    "cosh", FLOAT_OR_COMPLEX, composite=lambda x: (exp(x) + exp(-x)) * 0.5, vjp=lambda g, y, x: (g * _cj(sinh(x)),)
)
ASINH = unary_op("asinh", FLOAT_OR_COMPLEX, composite=_asinh, vjp=lambda g, y, x: (g * _cj(_rsqrt_any(x * x + 1)),))
ACOSH = unary_op(
    "acosh",
    FLOAT_OR_COMPLEX,
    composite=lambda x: log(x + sqrt((x - 1) * (x + 1))),
    vjp=lambda g, y, x: (g * _cj(_rsqrt_any((x - 1) * (x + 1))),),
)
ATANH = unary_op(
    "atanh",
    FLOAT_OR_COMPLEX,
    composite=lambda x: 0.5 * log1p(2 * x / (1 - x)),
    vjp=lambda g, y, x: (g / _cj((1 - x) * (1 + x)),),
)


def tan(x: Any) -> Tensor:
    return _unary(TAN, x)


def asin(x: Any) -> Tensor:
    return _unary(ASIN, x)


def acos(x: Any) -> Tensor:
    return _unary(ACOS, x)


def atan(x: Any) -> Tensor:
    return _unary(ATAN, x)


def sinh(x: Any) -> Tensor:
    return _unary(SINH, x)


def cosh(x: Any) -> Tensor:
    return _unary(COSH, x)


def asinh(x: Any) -> Tensor:
    return _unary(ASINH, x)


def acosh(x: Any) -> Tensor:
    return _unary(ACOSH, x)


def atanh(x: Any) -> Tensor:
    return _unary(ATANH, x)


# -- binary ------------------------------------------------------------------------------


def _atan2_vjp(g: Tensor, out: Tensor, y: Any, x: Any) -> tuple[Any, Any]:
    denom = x * x + y * y
    return (g * x / denom if _needs(y) else None), (-g * y / denom if _needs(x) else None)


ATAN2 = binary_op("atan2", FLOAT, vjp=_atan2_vjp)
HYPOT = binary_op(
    "hypot", FLOAT, composite=lambda a, b: where(isinf(a) | isinf(b), math.inf, sqrt(a * a + b * b))
)  # IEEE: hypot(inf, nan) is inf


def atan2(a: Any, b: Any) -> Tensor:
    return binary(ATAN2, a, b)


def hypot(a: Any, b: Any) -> Tensor:
    return binary(HYPOT, a, b)


# -- the argument of a complex number ------------------------------------------------------


def _angle_vjp(g: Tensor, y: Tensor, x: Tensor) -> tuple[Any]:
    if x._dtype.kind != "c":
        return _zero_grad(g, y, x)  # 0 or pi: piecewise constant
    # atan2(im, re): d/dre = -im / |z|^2, d/dim = re / |z|^2, so the gradient is g * 1j z / |z|^2
    # (0 at z = 0, as PyTorch gives)
    r2 = real(x * conj(x))
    zero = r2 == 0
    return (g * where(zero, 0.0, x * 1j / where(zero, 1.0, r2)),)


ANGLE = unary_op("angle", FLOAT_OR_COMPLEX, composite=lambda x: atan2(imag(x), real(x)), vjp=_angle_vjp)


def angle(x: Any, /) -> Tensor:
    """The argument of each element in radians, in (-pi, pi], as the real dtype of ``x``
    (numpy's and PyTorch's ``angle``; 0 or pi for real tensors)."""
    return _unary(ANGLE, x)

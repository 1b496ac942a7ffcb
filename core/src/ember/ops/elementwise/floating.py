"""Sign bits and neighbours of floating-point numbers (Array API): ``signbit``, ``copysign`` and
``nextafter``, composites any backend runs; cpu has them natively."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...creation import full_like
from ...dispatch import binary
from ...dtypes import FLOAT, finfo
from ._define import _needs, _unary, binary_op, unary_op
from .arithmetic import abs, maximum, reciprocal, sign
from .comparison import isinf, isnan
from .exponential import log2, pow
from .rounding import floor
from .selection import where

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = ["signbit", "copysign", "nextafter"]


def _signbit(x: Tensor) -> Tensor:
    # -0.0 is told from +0.0 by the sign of 1 / x; a NaN's sign bit cannot be read through
    # comparisons, so the composite calls every NaN positive (backends with bit access do better)
    return (x < 0) | ((x == 0) & (reciprocal(x) < 0))


SIGNBIT = unary_op("signbit", FLOAT, composite=_signbit, bool_out=True)


def signbit(x: Any) -> Tensor:
    """Whether the sign bit of each element is set (True for -0.0 and negative numbers)."""
    return _unary(SIGNBIT, x)


def _copysign(a: Tensor, b: Tensor) -> Tensor:
    mag = abs(a)
    return where(signbit(b), -mag, mag)


def _copysign_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    # d/da |a| * s(b) = sign(a) * s(b): +1 where the signs agree, -1 where they differ
    flips = where(signbit(a) != signbit(b), -1.0, 1.0).astype(g._dtype) if _needs(a) else None
    return (g * flips if flips is not None else None), (g * 0.0 if _needs(b) else None)


COPYSIGN = binary_op("copysign", FLOAT, composite=_copysign, vjp=_copysign_vjp)


def copysign(a: Any, b: Any) -> Tensor:
    """The magnitude of ``a`` with the sign of ``b``, elementwise."""
    return binary(COPYSIGN, a, b)


#: (explicit mantissa bits, smallest normal exponent) of each floating dtype, for nextafter
_FLOAT_LAYOUT = {"float16": (10, -14), "bfloat16": (7, -126), "float32": (23, -126), "float64": (52, -1022)}


def _nextafter(a: Tensor, b: Tensor) -> Tensor:
    mant, emin = _FLOAT_LAYOUT[a._dtype.name]
    two = full_like(a, 2.0)
    ax = abs(a)
    e = floor(log2(where(ax == 0, 1.0, ax)))
    e = where(pow(two, e) > ax, e - 1, where(pow(two, e + 1) <= ax, e + 1, e))  # log2 may round
    e = maximum(e, float(emin))
    up = pow(two, e - mant)  # the spacing above |a|
    at_power = (ax == pow(two, e)) & (e > emin)
    down = where(at_power, up * 0.5, up)  # the spacing below |a| halves at a power of two
    away = (b > a) == (a > 0)  # moving away from zero
    step = where(away, up, down)
    out = where(b > a, a + step, a - step)
    tiny = full_like(a, 2.0 ** (emin - mant))  # the smallest subnormal
    out = where(a == 0, where(b > 0, tiny, -tiny), out)
    out = where(isinf(a), sign(a) * finfo(a._dtype).max, out)
    return where(isnan(a) | isnan(b), math.nan, where(a == b, b, out))


# a step to a neighbour, not a function to differentiate (PyTorch defines no gradient either)
NEXTAFTER = binary_op("nextafter", FLOAT, composite=_nextafter, differentiable=False)


def nextafter(a: Any, b: Any) -> Tensor:
    """The next representable value after ``a`` toward ``b``, elementwise (IEEE 754 nextafter).

    The composite assumes the device keeps subnormal numbers (results next to 0 are subnormal).
    """
    return binary(NEXTAFTER, a, b)

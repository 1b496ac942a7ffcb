"""Tensor's elementwise methods (``x.exp()``, ``x.clip(0, 1)``, ``x.relu()``...): thin forwards
to the functions of :mod:`ember.ops.elementwise` and :mod:`ember.ops.nn`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..ops.elementwise import (
    abs,
    acos,
    acosh,
    asin,
    asinh,
    atan,
    atanh,
    ceil,
    clip,
    cos,
    cosh,
    erf,
    exp,
    exp2,
    expm1,
    floor,
    isfinite,
    isinf,
    isnan,
    log,
    log1p,
    log2,
    log10,
    logical_not,
    maximum,
    minimum,
    negative,
    pow,
    reciprocal,
    round,
    rsqrt,
    sign,
    sin,
    sinh,
    sqrt,
    square,
    tan,
    tanh,
    trunc,
)
from ..ops.nn import gelu, log_softmax, relu, sigmoid, silu, softmax, softplus

if TYPE_CHECKING:  # annotations only: ember.tensor builds its class from this module (.importlinter)
    from ..tensor import Tensor

__all__ = ["ElementwiseMethods"]


class ElementwiseMethods:
    """Elementwise math and activations, one forward per op."""

    __slots__ = ()

    def abs(self) -> Tensor:
        return abs(self)

    def neg(self) -> Tensor:
        return negative(self)

    def sign(self) -> Tensor:
        return sign(self)

    def exp(self) -> Tensor:
        return exp(self)

    def exp2(self) -> Tensor:
        return exp2(self)

    def expm1(self) -> Tensor:
        return expm1(self)

    def log(self) -> Tensor:
        return log(self)

    def log2(self) -> Tensor:
        return log2(self)

    def log10(self) -> Tensor:
        return log10(self)

    def log1p(self) -> Tensor:
        return log1p(self)

    def sqrt(self) -> Tensor:
        return sqrt(self)

    def rsqrt(self) -> Tensor:
        return rsqrt(self)

    def square(self) -> Tensor:
        return square(self)

    def sin(self) -> Tensor:
        return sin(self)

    def cos(self) -> Tensor:
        return cos(self)

    def tan(self) -> Tensor:
        return tan(self)

    def asin(self) -> Tensor:
        return asin(self)

    def acos(self) -> Tensor:
        return acos(self)

    def atan(self) -> Tensor:
        return atan(self)

    def sinh(self) -> Tensor:
        return sinh(self)

    def cosh(self) -> Tensor:
        return cosh(self)

    def tanh(self) -> Tensor:
        return tanh(self)

    def asinh(self) -> Tensor:
        return asinh(self)

    def acosh(self) -> Tensor:
        return acosh(self)

    def atanh(self) -> Tensor:
        return atanh(self)

    def erf(self) -> Tensor:
        return erf(self)

    def floor(self) -> Tensor:
        return floor(self)

    def ceil(self) -> Tensor:
        return ceil(self)

    def round(self) -> Tensor:
        return round(self)

    def trunc(self) -> Tensor:
        return trunc(self)

    def reciprocal(self) -> Tensor:
        return reciprocal(self)

    def isnan(self) -> Tensor:
        return isnan(self)

    def isinf(self) -> Tensor:
        return isinf(self)

    def isfinite(self) -> Tensor:
        return isfinite(self)

    def logical_not(self) -> Tensor:
        return logical_not(self)

    def pow(self, other: Any) -> Tensor:
        return pow(self, other)

    def maximum(self, other: Any) -> Tensor:
        return maximum(self, other)

    def minimum(self, other: Any) -> Tensor:
        return minimum(self, other)

    def clip(self, min: Any = None, max: Any = None) -> Tensor:
        return clip(self, min, max)

    clamp = clip

    def relu(self) -> Tensor:
        return relu(self)

    def gelu(self, approximate: str = "none") -> Tensor:
        return gelu(self, approximate=approximate)

    def silu(self) -> Tensor:
        return silu(self)

    def sigmoid(self) -> Tensor:
        return sigmoid(self)

    def softplus(self) -> Tensor:
        return softplus(self)

    def softmax(self, axis: int = -1) -> Tensor:
        return softmax(self, axis=axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        return log_softmax(self, axis=axis)

"""Powers, exponentials and logarithms: ``pow``, ``sqrt``, ``rsqrt``, ``exp`` and its variants,
``log`` and its variants, ``logaddexp``, and ``erf`` (whose derivative is an exponential)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ...dispatch import binary, is_tensor
from ...dtypes import FLOAT, FLOAT_OR_COMPLEX, NUMERIC_OR_COMPLEX
from ._define import _needs, _unary, binary_op, unary_op
from .arithmetic import abs, maximum, reciprocal
from .comparison import isinf
from .complex import _cj
from .selection import where

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = ["pow", "sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "logaddexp", "erf"]

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _rsqrt_any(x: Tensor) -> Tensor:
    """1 / sqrt(x) for real or complex ``x`` (``rsqrt`` is defined for real dtypes only)."""
    return rsqrt(x) if x._dtype.kind != "c" else reciprocal(sqrt(x))


EXP = unary_op("exp", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g * _cj(y),))
LOG = unary_op("log", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g / _cj(x),))
SQRT = unary_op("sqrt", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g * 0.5 / _cj(y),))
RSQRT = unary_op("rsqrt", FLOAT, vjp=lambda g, y, x: (g * -0.5 * y * y * y,))
ERF = unary_op("erf", FLOAT, vjp=lambda g, y, x: (g * _TWO_OVER_SQRT_PI * exp(-(x * x)),))


def exp(x: Any) -> Tensor:
    """Elementwise e ** x."""
    return _unary(EXP, x)


def log(x: Any) -> Tensor:
    """Elementwise natural logarithm."""
    return _unary(LOG, x)


def sqrt(x: Any) -> Tensor:
    """Elementwise square root."""
    return _unary(SQRT, x)


def rsqrt(x: Any) -> Tensor:
    """Elementwise 1 / sqrt(x)."""
    return _unary(RSQRT, x)


def erf(x: Any) -> Tensor:
    """Elementwise Gauss error function."""
    return _unary(ERF, x)


# composite unary ops: defined in terms of the primitives, each with its own gradient rule
def _expm1(x: Tensor) -> Tensor:
    u = exp(x)
    um1 = u - 1
    # Kahan's trick keeps relative accuracy where exp(x) rounds to 1; u = inf stays inf
    return where(u == 1, x, where(um1 == -1, -1.0, where(isinf(u), u, um1 * x / log(u))))


def _log1p(x: Tensor) -> Tensor:
    u = 1 + x
    return where(u == 1, x, where(u == math.inf, u, log(u) * x / (u - 1)))


EXP2 = unary_op("exp2", FLOAT, composite=lambda x: exp(x * _LN2), vjp=lambda g, y, x: (g * y * _LN2,))
EXPM1 = unary_op("expm1", FLOAT_OR_COMPLEX, composite=_expm1, vjp=lambda g, y, x: (g * _cj(y + 1),))
LOG2 = unary_op("log2", FLOAT_OR_COMPLEX, composite=lambda x: log(x) / _LN2, vjp=lambda g, y, x: (g / _cj(x * _LN2),))
LOG10 = unary_op(
    "log10", FLOAT_OR_COMPLEX, composite=lambda x: log(x) / _LN10, vjp=lambda g, y, x: (g / _cj(x * _LN10),)
)
LOG1P = unary_op("log1p", FLOAT_OR_COMPLEX, composite=_log1p, vjp=lambda g, y, x: (g / _cj(1 + x),))


def exp2(x: Any) -> Tensor:
    return _unary(EXP2, x)


def expm1(x: Any) -> Tensor:
    """exp(x) - 1, accurate for small x."""
    return _unary(EXPM1, x)


def log2(x: Any) -> Tensor:
    return _unary(LOG2, x)


def log10(x: Any) -> Tensor:
    return _unary(LOG10, x)


def log1p(x: Any) -> Tensor:
    """log(1 + x), accurate for small x."""
    return _unary(LOG1P, x)


# -- binary ------------------------------------------------------------------------------


def _pow_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    ga = gb = None
    if _needs(a):
        if not is_tensor(b) and b == 0:
            ga = g * 0
        else:
            ga = g * _cj(b * pow(a, b - 1))
    if _needs(b):
        # d/db a**b = a**b log a; define it as 0 where a == 0 (the limit for b > 0)
        safe = where(a == 0, 1, a) if is_tensor(a) else a
        gb = g * _cj(out * log(safe))
    return ga, gb


POW = binary_op("pow", NUMERIC_OR_COMPLEX, vjp=_pow_vjp)
LOGADDEXP = binary_op(
    "logaddexp", FLOAT,
    # equal arguments (equal infinities included, where a - b is NaN) add log(2)
    composite=lambda a, b: maximum(a, b) + log1p(exp(where(a == b, 0.0, -abs(a - b)))),
)  # fmt: skip


def pow(a: Any, b: Any) -> Tensor:
    return binary(POW, a, b)


def logaddexp(a: Any, b: Any) -> Tensor:
    return binary(LOGADDEXP, a, b)

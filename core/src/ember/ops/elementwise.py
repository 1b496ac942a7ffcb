"""Elementwise ops: each op's dtype rule, definition and gradient rule side by side.

Public functions carry the Array API names (``negative``, ``subtract``...); the dispatch
names are the short primitive names of DESIGN.md (``neg``, ``sub``...). Python scalars are
weakly typed; tensor dtypes promote by the Array API table.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..amp import PROMOTE
from ..creation import asarray, full, full_like
from ..dispatch import Op, apply, binary, define, is_tensor, operand_message, scalar_value, swaps
from ..dtypes import (
    ANY,
    ANY_OR_COMPLEX,
    BOOL,
    FLOAT,
    FLOAT_OR_COMPLEX,
    INT,
    INT_OR_BOOL,
    NUMERIC,
    NUMERIC_OR_COMPLEX,
    DType,
    bool_,
    category_error,
    finfo,
    promote_types,
    real_dtype,
    scalar_dtype,
)
from ..errors import DTypeError, InvalidArgumentError, NotImplementedOpError, ShapeError
from ..shapes import broadcast_shapes

if TYPE_CHECKING:
    from ..tensor import Tensor

__all__ = [
    "add", "subtract", "multiply", "divide", "floor_divide", "remainder", "pow",
    "maximum", "minimum", "atan2", "hypot", "logaddexp",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "logical_not",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_invert",
    "bitwise_left_shift", "bitwise_right_shift",
    "negative", "positive", "abs", "sign", "exp", "exp2", "expm1", "log", "log2", "log10",
    "log1p", "sqrt", "rsqrt", "square", "sin", "cos", "tan", "asin", "acos", "atan",
    "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "floor", "ceil", "round",
    "trunc", "reciprocal", "isnan", "isinf", "isfinite", "clip", "where", "astype_op",
    "signbit", "copysign", "nextafter", "conj", "real", "imag", "angle",
]  # fmt: skip

#: op name -> (accepted dtypes, result is bool): the elementwise dtype rules, as held by each Op
RULES: dict[str, tuple[frozenset[DType], bool]] = {}

__all__ += ["BOOL", "INT", "FLOAT", "NUMERIC", "INT_OR_BOOL", "ANY"]  # the categories, re-exported
__all__ += ["FLOAT_OR_COMPLEX", "NUMERIC_OR_COMPLEX", "ANY_OR_COMPLEX"]


def _needs(t: Any) -> bool:
    """Whether ``t`` is a tensor whose gradient is wanted."""
    return is_tensor(t) and t._rg


_reject = category_error


def _cj(v: Any) -> Any:
    """The conjugate of a derivative factor, for the vjp rules: complex tensors and Python
    complex numbers are conjugated, real ones pass unchanged (no extra op on a real graph).

    Gradients follow PyTorch's convention (docs/architecture.md): for a real loss L of z = x + iy,
    ``z.grad = dL/dx + 1j * dL/dy``, so a holomorphic f gives ``grad_in = grad_out * conj(f'(z))``.
    """
    if is_tensor(v):
        return conj(v) if v._dtype.kind == "c" else v
    if isinstance(v, complex):
        return v.conjugate()
    return v


def _rsqrt_any(x: Tensor) -> Tensor:
    """1 / sqrt(x) for real or complex ``x`` (``rsqrt`` is defined for real dtypes only)."""
    return rsqrt(x) if x._dtype.kind != "c" else reciprocal(sqrt(x))


def _tensor_arg(x: Any, op: str, like: Tensor | None = None) -> Tensor:
    if is_tensor(x):
        return x
    try:
        return asarray(x, device=None if like is None else like._device)
    except (DTypeError, ShapeError, InvalidArgumentError) as exc:
        raise type(exc)(operand_message(op, x, exc)) from None


# -- unary -------------------------------------------------------------------------------


def unary_op(
    name: str,
    accepts: frozenset[DType],
    *,
    vjp: Any = None,
    composite: Any = None,
    bool_out: bool = False,
    differentiable: bool = True,
) -> Op:
    """Define an elementwise unary op with its dtype rule."""
    return _elementwise(
        name, "elementwise_unary", "(a) -> handle", accepts, vjp, composite, bool_out, differentiable and not bool_out
    )


def _elementwise(
    name: str,
    kind: str,
    signature: str,
    accepts: frozenset[DType],
    vjp: Any,
    composite: Any,
    bool_out: bool,
    differentiable: bool,
) -> Op:
    """Register an elementwise op: a primitive without a composite, else a composite a backend may
    implement natively with ``name`` + ``signature``; its dtype rule is kept in :data:`RULES` too."""
    op = define(
        name,
        kind=kind,
        native=None if composite is None else name + signature,
        primitive=composite is None,
        composite=composite,
        vjp=vjp,
        differentiable=differentiable,
        accepts=accepts,
        bool_out=bool_out,
    )
    RULES[name] = (accepts, bool_out)
    return op


def _unary(op: Op, x: Any) -> Tensor:
    if not is_tensor(x):
        x = _tensor_arg(x, op.name)
    dt = x._dtype
    if dt not in op.accepts:
        raise _reject(op.name, op.accepts, dt)
    out = bool_ if op.bool_out else real_dtype(dt) if op.name in _REAL_RESULT else dt
    return apply(op, (x,), {}, x._shape, out)


#: unary ops whose result is real for a complex input (``abs``, ``real``, ``imag``, ``angle``)
_REAL_RESULT = frozenset(("abs", "real", "imag", "angle"))


def _zero_grad(g: Tensor, y: Tensor, x: Tensor) -> tuple[Any]:
    return (g * 0.0,)  # piecewise constant: zero almost everywhere (PyTorch gives zeros too)


_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)

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
EXP = unary_op("exp", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g * _cj(y),))
LOG = unary_op("log", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g / _cj(x),))
SQRT = unary_op("sqrt", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g * 0.5 / _cj(y),))
RSQRT = unary_op("rsqrt", FLOAT, vjp=lambda g, y, x: (g * -0.5 * y * y * y,))
SIN = unary_op("sin", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g * _cj(cos(x)),))
COS = unary_op("cos", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (-g * _cj(sin(x)),))
TANH = unary_op("tanh", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (g * _cj(1 - y * y),))
ERF = unary_op("erf", FLOAT, vjp=lambda g, y, x: (g * _TWO_OVER_SQRT_PI * exp(-(x * x)),))
FLOOR = unary_op("floor", NUMERIC, vjp=_zero_grad)
CEIL = unary_op("ceil", NUMERIC, vjp=_zero_grad)
ROUND = unary_op("round", NUMERIC_OR_COMPLEX, vjp=_zero_grad)
TRUNC = unary_op("trunc", NUMERIC, vjp=_zero_grad)
RECIPROCAL = unary_op("reciprocal", FLOAT_OR_COMPLEX, vjp=lambda g, y, x: (-g * _cj(y * y),))
ISNAN = unary_op("isnan", NUMERIC_OR_COMPLEX, bool_out=True)
ISINF = unary_op("isinf", NUMERIC_OR_COMPLEX, bool_out=True)
LOGICAL_NOT = unary_op("logical_not", BOOL, bool_out=True)
BITWISE_NOT = unary_op("bitwise_not", INT_OR_BOOL, differentiable=False)


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


def sin(x: Any) -> Tensor:
    return _unary(SIN, x)


def cos(x: Any) -> Tensor:
    return _unary(COS, x)


def tanh(x: Any) -> Tensor:
    return _unary(TANH, x)


def erf(x: Any) -> Tensor:
    """Elementwise Gauss error function."""
    return _unary(ERF, x)


def floor(x: Any) -> Tensor:
    return _unary(FLOOR, x)


def ceil(x: Any) -> Tensor:
    return _unary(CEIL, x)


def round(x: Any) -> Tensor:
    """Round half to even, elementwise."""
    return _unary(ROUND, x)


def trunc(x: Any) -> Tensor:
    return _unary(TRUNC, x)


def reciprocal(x: Any) -> Tensor:
    return _unary(RECIPROCAL, x)


def isnan(x: Any) -> Tensor:
    return _unary(ISNAN, x)


def isinf(x: Any) -> Tensor:
    return _unary(ISINF, x)


def logical_not(x: Any) -> Tensor:
    return _unary(LOGICAL_NOT, x)


def bitwise_invert(x: Any) -> Tensor:
    """Elementwise ``~x`` (logical not for booleans)."""
    return _unary(BITWISE_NOT, x)


# composite unary ops: defined in terms of the primitives, each with its own gradient rule
def _expm1(x: Tensor) -> Tensor:
    u = exp(x)
    um1 = u - 1
    # Kahan's trick keeps relative accuracy where exp(x) rounds to 1; u = inf stays inf
    return where(u == 1, x, where(um1 == -1, -1.0, where(isinf(u), u, um1 * x / log(u))))


def _log1p(x: Tensor) -> Tensor:
    u = 1 + x
    return where(u == 1, x, where(u == math.inf, u, log(u) * x / (u - 1)))


def _asinh(x: Tensor) -> Tensor:
    a = abs(x)
    # a + a**2 / (1 + sqrt(1 + a**2)), divided through by a so that a**2 cannot overflow
    return sign(x) * log1p(a + a / (1 / a + sqrt(1 + 1 / (a * a))))


EXP2 = unary_op("exp2", FLOAT, composite=lambda x: exp(x * _LN2), vjp=lambda g, y, x: (g * y * _LN2,))
EXPM1 = unary_op("expm1", FLOAT_OR_COMPLEX, composite=_expm1, vjp=lambda g, y, x: (g * _cj(y + 1),))
LOG2 = unary_op("log2", FLOAT_OR_COMPLEX, composite=lambda x: log(x) / _LN2, vjp=lambda g, y, x: (g / _cj(x * _LN2),))
LOG10 = unary_op(
    "log10", FLOAT_OR_COMPLEX, composite=lambda x: log(x) / _LN10, vjp=lambda g, y, x: (g / _cj(x * _LN10),)
)
LOG1P = unary_op("log1p", FLOAT_OR_COMPLEX, composite=_log1p, vjp=lambda g, y, x: (g / _cj(1 + x),))
SQUARE = unary_op("square", NUMERIC_OR_COMPLEX, composite=lambda x: x * x, vjp=lambda g, y, x: (g * 2 * _cj(x),))
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
ISFINITE = unary_op("isfinite", NUMERIC_OR_COMPLEX, composite=lambda x: logical_not(isnan(x) | isinf(x)), bool_out=True)


def ones_like_scalar(x: Tensor, value: float) -> Tensor:
    """A tensor of ``x``'s shape, dtype and device filled with ``value``."""
    return full_like(x, value)


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


def square(x: Any) -> Tensor:
    return _unary(SQUARE, x)


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


def isfinite(x: Any) -> Tensor:
    return _unary(ISFINITE, x)


# -- binary ------------------------------------------------------------------------------

#: ops whose operands may be swapped, and the op to use when they are
_SWAPPED = {
    "add": "add", "mul": "mul", "maximum": "maximum", "minimum": "minimum", "eq": "eq",
    "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "logical_and": "logical_and",
    "logical_or": "logical_or", "logical_xor": "logical_xor", "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
}  # fmt: skip


def binary_op(
    name: str,
    accepts: frozenset[DType],
    *,
    vjp: Any = None,
    composite: Any = None,
    bool_out: bool = False,
    differentiable: bool = True,
) -> Op:
    """Define an elementwise binary op with its dtype rule."""
    differentiable = differentiable and (vjp is not None or (composite is not None and not bool_out))
    signature = "(a, b) -> handle  # b may be a Python scalar"
    op = _elementwise(name, "elementwise_binary", signature, accepts, vjp, composite, bool_out, differentiable)
    swapped = _SWAPPED.get(name)
    if swapped is not None:
        swaps(name, swapped)
    return op


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


def _max_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    # ties share the gradient equally, as in PyTorch
    share = where(a == b, 0.5, where(a > b, 1.0, 0.0)).astype(g._dtype)
    return (g * share if _needs(a) else None), (g * (1 - share) if _needs(b) else None)


def _min_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    share = where(a == b, 0.5, where(a < b, 1.0, 0.0)).astype(g._dtype)
    return (g * share if _needs(a) else None), (g * (1 - share) if _needs(b) else None)


def _atan2_vjp(g: Tensor, out: Tensor, y: Any, x: Any) -> tuple[Any, Any]:
    denom = x * x + y * y
    return (g * x / denom if _needs(y) else None), (-g * y / denom if _needs(x) else None)


def _remainder_vjp(g: Tensor, out: Tensor, a: Any, b: Any) -> tuple[Any, Any]:
    return (g if _needs(a) else None), (-g * floor_divide(a, b) if _needs(b) else None)


ADD = binary_op("add", NUMERIC_OR_COMPLEX, vjp=_add_vjp)
SUB = binary_op("sub", NUMERIC_OR_COMPLEX, vjp=_sub_vjp)
MUL = binary_op("mul", NUMERIC_OR_COMPLEX, vjp=_mul_vjp)
DIV = binary_op("div", FLOAT_OR_COMPLEX, vjp=_div_vjp)
FLOORDIV = binary_op("floordiv", NUMERIC, vjp=lambda g, out, a, b: (None, None))
REMAINDER = binary_op("remainder", NUMERIC, vjp=_remainder_vjp)
POW = binary_op("pow", NUMERIC_OR_COMPLEX, vjp=_pow_vjp)
MAXIMUM = binary_op("maximum", NUMERIC, vjp=_max_vjp)
MINIMUM = binary_op("minimum", NUMERIC, vjp=_min_vjp)
ATAN2 = binary_op("atan2", FLOAT, vjp=_atan2_vjp)
EQ = binary_op("eq", ANY_OR_COMPLEX, bool_out=True)
NE = binary_op("ne", ANY_OR_COMPLEX, bool_out=True)
LT = binary_op("lt", NUMERIC, bool_out=True)
LE = binary_op("le", NUMERIC, bool_out=True)
GT = binary_op("gt", NUMERIC, bool_out=True)
GE = binary_op("ge", NUMERIC, bool_out=True)
LOGICAL_AND = binary_op("logical_and", BOOL, bool_out=True)
LOGICAL_OR = binary_op("logical_or", BOOL, bool_out=True)
LOGICAL_XOR = binary_op("logical_xor", BOOL, bool_out=True)
BITWISE_AND = binary_op("bitwise_and", INT_OR_BOOL)
BITWISE_OR = binary_op("bitwise_or", INT_OR_BOOL)
BITWISE_XOR = binary_op("bitwise_xor", INT_OR_BOOL)
HYPOT = binary_op(
    "hypot", FLOAT, composite=lambda a, b: where(isinf(a) | isinf(b), math.inf, sqrt(a * a + b * b))
)  # IEEE: hypot(inf, nan) is inf
LOGADDEXP = binary_op(
    "logaddexp", FLOAT,
    # equal arguments (equal infinities included, where a - b is NaN) add log(2)
    composite=lambda a, b: maximum(a, b) + log1p(exp(where(a == b, 0.0, -abs(a - b)))),
)  # fmt: skip
LSHIFT = binary_op("bitwise_left_shift", INT, composite=lambda a, b: a * pow(full_like_int(a, 2), b))


# a >> b as two floor divisions by 2**(b // 2) and 2**(b - b // 2): 2**b itself overflows a
# signed dtype when b = bits - 1
def _right_shift(a: Tensor, b: Tensor) -> Tensor:
    # a shift of the bit width or more gives what shifting bit by bit would: the sign (0 or -1),
    # so the shift is clamped to bits - 1 for signed dtypes and gives 0 for unsigned ones
    bits = a._dtype.bits
    s = minimum(b, bits - 1)
    out = floor_divide(floor_divide(a, pow(full_like_int(a, 2), s // 2)), pow(full_like_int(a, 2), s - s // 2))
    return where(b >= bits, 0, out) if a._dtype.kind == "u" else out


RSHIFT = binary_op("bitwise_right_shift", INT, composite=_right_shift)


def full_like_int(x: Tensor, value: int) -> Tensor:
    return full_like(x, value)


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


def pow(a: Any, b: Any) -> Tensor:
    return binary(POW, a, b)


def maximum(a: Any, b: Any) -> Tensor:
    return binary(MAXIMUM, a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return binary(MINIMUM, a, b)


def atan2(a: Any, b: Any) -> Tensor:
    return binary(ATAN2, a, b)


def hypot(a: Any, b: Any) -> Tensor:
    return binary(HYPOT, a, b)


def logaddexp(a: Any, b: Any) -> Tensor:
    return binary(LOGADDEXP, a, b)


def equal(a: Any, b: Any) -> Tensor:
    return binary(EQ, a, b)


def not_equal(a: Any, b: Any) -> Tensor:
    return binary(NE, a, b)


def less(a: Any, b: Any) -> Tensor:
    return binary(LT, a, b)


def less_equal(a: Any, b: Any) -> Tensor:
    return binary(LE, a, b)


def greater(a: Any, b: Any) -> Tensor:
    return binary(GT, a, b)


def greater_equal(a: Any, b: Any) -> Tensor:
    return binary(GE, a, b)


def logical_and(a: Any, b: Any) -> Tensor:
    return binary(LOGICAL_AND, a, b)


def logical_or(a: Any, b: Any) -> Tensor:
    return binary(LOGICAL_OR, a, b)


def logical_xor(a: Any, b: Any) -> Tensor:
    return binary(LOGICAL_XOR, a, b)


def bitwise_and(a: Any, b: Any) -> Tensor:
    return binary(BITWISE_AND, a, b)


def bitwise_or(a: Any, b: Any) -> Tensor:
    return binary(BITWISE_OR, a, b)


def bitwise_xor(a: Any, b: Any) -> Tensor:
    return binary(BITWISE_XOR, a, b)


def bitwise_left_shift(a: Any, b: Any) -> Tensor:
    """``a << b`` for non-negative shifts smaller than the bit width."""
    return binary(LSHIFT, a, b)


def bitwise_right_shift(a: Any, b: Any) -> Tensor:
    """``a >> b`` (arithmetic for signed integers)."""
    return binary(RSHIFT, a, b)


# -- complex parts: a backend that holds complex tensors computes these natively -------------


def _complex_part(name: str, real_input: Any) -> Any:
    """The composite of ``conj``/``real``/``imag``: ``real_input(x)`` for real tensors. A complex
    tensor reaches it only on a backend that holds complex dtypes without computing this op."""

    def composite(x: Tensor) -> Tensor:
        if x._dtype.kind != "c":
            return real_input(x)
        raise NotImplementedOpError(
            f"{x._device.backend.name} backend holds {x._dtype} tensors but does not implement {name!r}; "
            f"a backend with complex dtypes declares conj, real and imag natively"
        )

    return composite


def _imag_vjp(g: Tensor, y: Tensor, x: Tensor) -> tuple[Any]:
    # imag(x + iy) = y: dL/dy = g, so the gradient is 1j * g (zero for a real input)
    return (g * 1j,) if x._dtype.kind == "c" else _zero_grad(g, y, x)


# conj(z): the gradient is conj(g); real(z): g itself (a real g, made complex by the graph)
CONJ = unary_op("conj", NUMERIC_OR_COMPLEX, composite=_complex_part("conj", lambda x: x), vjp=lambda g, y, x: (_cj(g),))
REAL = unary_op("real", NUMERIC_OR_COMPLEX, composite=_complex_part("real", lambda x: x), vjp=lambda g, y, x: (g,))
IMAG = unary_op("imag", NUMERIC_OR_COMPLEX, composite=_complex_part("imag", lambda x: full_like(x, 0)), vjp=_imag_vjp)


def conj(x: Any, /) -> Tensor:
    """The complex conjugate, elementwise (real tensors are returned as they are)."""
    return _unary(CONJ, x)


def real(x: Any, /) -> Tensor:
    """The real part, elementwise, as the real dtype of ``x`` (``complex64`` -> ``float32``)."""
    return _unary(REAL, x)


def imag(x: Any, /) -> Tensor:
    """The imaginary part, elementwise, as the real dtype of ``x`` (zeros for real tensors)."""
    return _unary(IMAG, x)


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


# -- sign bits and neighbours (Array API): composites any backend runs; cpu has them natively --


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


# -- where, clip, cast -------------------------------------------------------------------


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

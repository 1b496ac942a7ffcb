"""Elementwise ops: each op's dtype rule, definition and gradient rule side by side.

Public functions carry the Array API names (``negative``, ``subtract``...); the dispatch
names are the short primitive names of DESIGN.md (``neg``, ``sub``...). Python scalars are
weakly typed; tensor dtypes promote by the Array API table.

This package is the index; the ops live in modules by family: :mod:`.arithmetic`,
:mod:`.exponential` (powers, exponentials, logarithms), :mod:`.trigonometric`, :mod:`.comparison`
(comparisons, logic, classification), :mod:`.rounding`, :mod:`.bitwise`, :mod:`.floating` (sign
bits and neighbours), :mod:`.complex` (complex parts), :mod:`.selection` (``where``) and
:mod:`.cast`; :mod:`._define` holds how an op is defined and the dtype rules, :data:`RULES`.
"""

from __future__ import annotations

from ...dtypes import (
    ANY,
    ANY_OR_COMPLEX,
    BOOL,
    FLOAT,
    FLOAT_OR_COMPLEX,
    INT,
    INT_OR_BOOL,
    NUMERIC,
    NUMERIC_OR_COMPLEX,
)
from ._define import RULES, _needs, _reject, _tensor_arg, binary_op, full_like_int, ones_like_scalar, unary_op  # noqa: F401  (re-exported)
from .arithmetic import (  # noqa: F401  (re-exported)
    ABS,
    ADD,
    DIV,
    FLOORDIV,
    MAXIMUM,
    MINIMUM,
    MUL,
    NEG,
    RECIPROCAL,
    REMAINDER,
    SIGN,
    SQUARE,
    SUB,
    abs,
    add,
    clip,
    divide,
    floor_divide,
    maximum,
    minimum,
    multiply,
    negative,
    positive,
    reciprocal,
    remainder,
    sign,
    square,
    subtract,
)
from .bitwise import (  # noqa: F401  (re-exported)
    BITWISE_AND,
    BITWISE_NOT,
    BITWISE_OR,
    BITWISE_XOR,
    LSHIFT,
    RSHIFT,
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
)
from .cast import CAST, astype_op  # noqa: F401  (re-exported)
from .comparison import (  # noqa: F401  (re-exported)
    EQ,
    GE,
    GT,
    ISFINITE,
    ISINF,
    ISNAN,
    LE,
    LOGICAL_AND,
    LOGICAL_NOT,
    LOGICAL_OR,
    LOGICAL_XOR,
    LT,
    NE,
    equal,
    greater,
    greater_equal,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    not_equal,
)
from .complex import CONJ, IMAG, REAL, _cj, conj, imag, real  # noqa: F401  (re-exported)
from .exponential import (  # noqa: F401  (re-exported)
    ERF,
    EXP,
    EXP2,
    EXPM1,
    LOG,
    LOG1P,
    LOG2,
    LOG10,
    LOGADDEXP,
    POW,
    RSQRT,
    SQRT,
    erf,
    exp,
    exp2,
    expm1,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    pow,
    rsqrt,
    sqrt,
)
from .floating import COPYSIGN, NEXTAFTER, SIGNBIT, copysign, nextafter, signbit  # noqa: F401  (re-exported)
from .rounding import CEIL, FLOOR, ROUND, TRUNC, ceil, floor, round, trunc  # noqa: F401  (re-exported)
from .selection import WHERE, where  # noqa: F401  (re-exported)
from .trigonometric import (  # noqa: F401  (re-exported)
    ACOS,
    ACOSH,
    ANGLE,
    ASIN,
    ASINH,
    ATAN,
    ATAN2,
    ATANH,
    COS,
    COSH,
    HYPOT,
    SIN,
    SINH,
    TAN,
    TANH,
    acos,
    acosh,
    angle,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    cos,
    cosh,
    hypot,
    sin,
    sinh,
    tan,
    tanh,
)

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

__all__ += ["BOOL", "INT", "FLOAT", "NUMERIC", "INT_OR_BOOL", "ANY"]  # the categories, re-exported
__all__ += ["FLOAT_OR_COMPLEX", "NUMERIC_OR_COMPLEX", "ANY_OR_COMPLEX"]

"""Comparisons, logical operators and classification (``isnan``, ``isinf``, ``isfinite``): the
elementwise ops whose result is bool, none of them differentiable."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...dispatch import binary
from ...dtypes import ANY_OR_COMPLEX, BOOL, NUMERIC, NUMERIC_OR_COMPLEX
from ._define import _unary, binary_op, unary_op

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = [
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_and", "logical_or", "logical_xor", "logical_not", "isnan", "isinf", "isfinite",
]  # fmt: skip

ISNAN = unary_op("isnan", NUMERIC_OR_COMPLEX, bool_out=True)
ISINF = unary_op("isinf", NUMERIC_OR_COMPLEX, bool_out=True)
LOGICAL_NOT = unary_op("logical_not", BOOL, bool_out=True)
ISFINITE = unary_op("isfinite", NUMERIC_OR_COMPLEX, composite=lambda x: logical_not(isnan(x) | isinf(x)), bool_out=True)

EQ = binary_op("eq", ANY_OR_COMPLEX, bool_out=True)
NE = binary_op("ne", ANY_OR_COMPLEX, bool_out=True)
LT = binary_op("lt", NUMERIC, bool_out=True)
LE = binary_op("le", NUMERIC, bool_out=True)
GT = binary_op("gt", NUMERIC, bool_out=True)
GE = binary_op("ge", NUMERIC, bool_out=True)
LOGICAL_AND = binary_op("logical_and", BOOL, bool_out=True)
LOGICAL_OR = binary_op("logical_or", BOOL, bool_out=True)
LOGICAL_XOR = binary_op("logical_xor", BOOL, bool_out=True)


def isnan(x: Any) -> Tensor:
    return _unary(ISNAN, x)


def isinf(x: Any) -> Tensor:
    return _unary(ISINF, x)


def isfinite(x: Any) -> Tensor:
    return _unary(ISFINITE, x)


def logical_not(x: Any) -> Tensor:
    return _unary(LOGICAL_NOT, x)


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

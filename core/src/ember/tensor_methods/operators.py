"""Tensor's Python operators (``x + y``, ``x @ y``, ``x == y``, ``x[i]``...): each forwards to
its op function in :mod:`ember.ops`, the four arithmetic ones straight to dispatch's binary road.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..dispatch import binary
from ..ops.elementwise import (
    ADD,
    DIV,
    MUL,
    SUB,
    abs,
    add,
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    divide,
    equal,
    floor_divide,
    greater,
    greater_equal,
    less,
    less_equal,
    multiply,
    negative,
    not_equal,
    positive,
    pow,
    remainder,
    subtract,
)
from ..ops.indexing import getitem, setitem
from ..ops.linalg import matmul

#: Python numbers a reflected ``+``/``*`` takes as the right operand (``2 * x`` is ``x * 2``)
_NUMBERS = frozenset((int, float))

if TYPE_CHECKING:  # annotations only: ember.tensor builds its class from this module (.importlinter)
    from ..tensor import Tensor

__all__ = ["Operators"]


class Operators:
    """Arithmetic, bitwise, comparison and indexing operators, and ``matmul``."""

    __slots__ = ()

    __hash__ = object.__hash__

    # -- operators -----------------------------------------------------------------------
    # the four arithmetic operators call dispatch's binary road themselves (a frame less per op, W1);
    # ``2 * x`` and ``2 + x`` go straight to ``x * 2`` and ``x + 2``, as binary would swap them
    def __add__(self, other: Any) -> Tensor:
        return binary(ADD, self, other)

    def __radd__(self, other: Any) -> Tensor:
        return binary(ADD, self, other) if type(other) in _NUMBERS else add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return binary(SUB, self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return subtract(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return binary(MUL, self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return binary(MUL, self, other) if type(other) in _NUMBERS else multiply(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return binary(DIV, self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return divide(other, self)

    def __floordiv__(self, other: Any) -> Tensor:
        return floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return floor_divide(other, self)

    def __mod__(self, other: Any) -> Tensor:
        return remainder(self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return remainder(other, self)

    def __pow__(self, other: Any) -> Tensor:
        return pow(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return pow(other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return matmul(other, self)

    def __neg__(self) -> Tensor:
        return negative(self)

    def __pos__(self) -> Tensor:
        return positive(self)

    def __abs__(self) -> Tensor:
        return abs(self)

    def __invert__(self) -> Tensor:
        return bitwise_invert(self)

    def __and__(self, other: Any) -> Tensor:
        return bitwise_and(self, other)

    def __rand__(self, other: Any) -> Tensor:
        return bitwise_and(other, self)

    def __or__(self, other: Any) -> Tensor:
        return bitwise_or(self, other)

    def __ror__(self, other: Any) -> Tensor:
        return bitwise_or(other, self)

    def __xor__(self, other: Any) -> Tensor:
        return bitwise_xor(self, other)

    def __rxor__(self, other: Any) -> Tensor:
        return bitwise_xor(other, self)

    def __lshift__(self, other: Any) -> Tensor:
        return bitwise_left_shift(self, other)

    def __rshift__(self, other: Any) -> Tensor:
        return bitwise_right_shift(self, other)

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return equal(self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return not_equal(self, other)

    def __lt__(self, other: Any) -> Tensor:
        return less(self, other)

    def __le__(self, other: Any) -> Tensor:
        return less_equal(self, other)

    def __gt__(self, other: Any) -> Tensor:
        return greater(self, other)

    def __ge__(self, other: Any) -> Tensor:
        return greater_equal(self, other)

    def __getitem__(self, key: Any) -> Tensor:
        return getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        setitem(self, key, value)

    def matmul(self, other: Any) -> Tensor:
        return matmul(self, other)

"""Bitwise ops on integers (and booleans): not, and, or, xor, and the two shifts, which are
composites of integer powers and floor divisions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...dispatch import binary
from ...dtypes import INT, INT_OR_BOOL
from ._define import _unary, binary_op, full_like_int, unary_op
from .arithmetic import floor_divide, minimum
from .exponential import pow
from .selection import where

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = [
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_invert", "bitwise_left_shift", "bitwise_right_shift",
]  # fmt: skip

BITWISE_NOT = unary_op("bitwise_not", INT_OR_BOOL, differentiable=False)
BITWISE_AND = binary_op("bitwise_and", INT_OR_BOOL)
BITWISE_OR = binary_op("bitwise_or", INT_OR_BOOL)
BITWISE_XOR = binary_op("bitwise_xor", INT_OR_BOOL)
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


def bitwise_invert(x: Any) -> Tensor:
    """Elementwise ``~x`` (logical not for booleans)."""
    return _unary(BITWISE_NOT, x)


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

"""Rounding to integral values: ``floor``, ``ceil``, ``round`` (half to even) and ``trunc``;
piecewise constant, so their gradient is zero."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...dtypes import NUMERIC, NUMERIC_OR_COMPLEX
from ._define import _unary, _zero_grad, unary_op

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = ["floor", "ceil", "round", "trunc"]

FLOOR = unary_op("floor", NUMERIC, vjp=_zero_grad)
CEIL = unary_op("ceil", NUMERIC, vjp=_zero_grad)
ROUND = unary_op("round", NUMERIC_OR_COMPLEX, vjp=_zero_grad)
TRUNC = unary_op("trunc", NUMERIC, vjp=_zero_grad)


def floor(x: Any) -> Tensor:
    return _unary(FLOOR, x)


def ceil(x: Any) -> Tensor:
    return _unary(CEIL, x)


def round(x: Any) -> Tensor:
    """Round half to even, elementwise."""
    return _unary(ROUND, x)


def trunc(x: Any) -> Tensor:
    return _unary(TRUNC, x)

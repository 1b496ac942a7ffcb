"""Tensor's reduction methods (``x.sum()``, ``x.mean(axis=0)``, ``x.norm()``...): thin forwards
to the functions of :mod:`ember.ops.reduction`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..ops.linalg import vector_norm
from ..ops.reduction import all, any, argmax, argmin, cumulative_sum, logsumexp, max, mean, min, prod, std, sum, var

if TYPE_CHECKING:  # annotations only: ember.tensor builds its class from this module (.importlinter)
    from ..tensor import Tensor

__all__ = ["ReductionMethods"]


class ReductionMethods:
    """Reductions over axes, one forward per op."""

    __slots__ = ()

    def sum(self, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
        return sum(self, axis=axis, keepdims=keepdims, dtype=dtype)

    def prod(self, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
        return prod(self, axis=axis, keepdims=keepdims, dtype=dtype)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return mean(self, axis=axis, keepdims=keepdims)

    def var(self, axis: Any = None, keepdims: bool = False, correction: float = 0.0) -> Tensor:
        return var(self, axis=axis, keepdims=keepdims, correction=correction)

    def std(self, axis: Any = None, keepdims: bool = False, correction: float = 0.0) -> Tensor:
        return std(self, axis=axis, keepdims=keepdims, correction=correction)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return min(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return argmin(self, axis=axis, keepdims=keepdims)

    def any(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return any(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return all(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis: int | None = None) -> Tensor:
        return cumulative_sum(self, axis=axis)

    def logsumexp(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return logsumexp(self, axis=axis, keepdims=keepdims)

    def norm(self, ord: Any = 2, axis: Any = None, keepdims: bool = False) -> Tensor:
        return vector_norm(self, axis=axis, keepdims=keepdims, ord=ord)

"""Tensor's indexing and sorting methods (``x.gather(...)``, ``x.masked_fill(...)``, ``x.topk(k)``...):
thin forwards to the functions of :mod:`ember.ops.indexing` and :mod:`ember.ops.linalg`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..ops.elementwise import where
from ..ops.indexing import scatter_add, take, take_along_axis
from ..ops.linalg import argsort, sort, topk

if TYPE_CHECKING:  # annotations only: ember.tensor builds its class from this module (.importlinter)
    from ..tensor import Tensor

__all__ = ["IndexingMethods"]


class IndexingMethods:
    """Gathering, scattering, masking and sorting."""

    __slots__ = ()

    def gather(self, index: Tensor, axis: int) -> Tensor:
        return take_along_axis(self, index, axis)

    def take(self, indices: Any, axis: int | None = None) -> Tensor:
        return take(self, indices, axis)

    def scatter_add(self, index: Tensor, values: Tensor, axis: int) -> Tensor:
        return scatter_add(self, index, values, axis)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        return where(mask, value, self)

    def sort(self, axis: int = -1, descending: bool = False) -> Tensor:
        return sort(self, axis=axis, descending=descending)

    def argsort(self, axis: int = -1, descending: bool = False) -> Tensor:
        return argsort(self, axis=axis, descending=descending)

    def topk(self, k: int, axis: int = -1, largest: bool = True) -> tuple[Tensor, Tensor]:
        return topk(self, k, axis=axis, largest=largest)

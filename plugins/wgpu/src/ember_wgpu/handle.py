"""Handles: a pooled GPU buffer viewed through an :class:`ember.views.View`.

The buffer is an :class:`ember.memory.Block` of the runtime's pool: it returns to the pool
when the last view on it dies. :class:`WgpuArray` is what ember's core holds: element
strides (0 = broadcast, negative = flipped) and an element offset over that block. reshape
(where numpy would not copy), permute, expand, slice and flip make new views without
touching memory; nothing writes into a buffer after the op that created it, so views are safe
to share, except a fused kernel taking the lazy layer's in-place offer, which it does only when
no other view holds the block (backend.py ``_in_place``).
"""

from __future__ import annotations

from typing import Any

from ember.dtypes import DType
from ember.memory import Block
from ember.views import View

__all__ = ["WgpuArray"]


class WgpuArray(View):
    """A tensor on a WGPU device: ``storage`` (None when empty) viewed with ``shape``, ``strides``, ``offset``."""

    __slots__ = ("storage", "dtype", "__weakref__")

    def __init__(
        self,
        storage: Block[Any] | None,
        shape: tuple[int, ...],
        dtype: DType,
        strides: tuple[int, ...] | None = None,
        offset: int = 0,
    ) -> None:
        View.__init__(self, shape, strides, offset)
        self.storage = storage
        self.dtype = dtype

    def with_layout(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> WgpuArray:
        return WgpuArray(self.storage, shape, self.dtype, strides, offset)

    @property
    def buffer(self) -> Any:
        return self.storage.raw if self.storage is not None else None

    def __repr__(self) -> str:
        return f"WgpuArray(shape={self.shape}, dtype={self.dtype}, strides={self.strides}, offset={self.offset})"

"""Handles: a pooled GPU buffer plus a shape/strides/offset view of it.

:class:`Storage` owns one buffer and returns it to the pool when the last view on it dies.
:class:`WgpuArray` is what ember's core holds: a view (element strides, possibly 0 for
broadcast or negative for flips, and an element offset) over a Storage. reshape of a
contiguous view, permute, expand, slice and flip make new views without touching memory;
nothing ever writes into a buffer after the op that created it, so views are safe to share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.dtypes import DType

from .codegen.program import contiguous_strides

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["Storage", "WgpuArray"]


class Storage:
    """One pooled buffer; released to the pool when garbage-collected."""

    __slots__ = ("buffer", "runtime", "__weakref__")

    def __init__(self, buffer: Any, runtime: Runtime) -> None:
        self.buffer = buffer
        self.runtime = runtime

    def __del__(self) -> None:
        try:
            self.runtime.release(self.buffer)
        except Exception:  # interpreter shutdown: the device is going away anyway
            pass


class WgpuArray:
    """A tensor on a WGPU device: ``storage`` viewed with ``shape``, ``strides``, ``offset``."""

    __slots__ = ("storage", "shape", "strides", "offset", "dtype", "__weakref__")

    def __init__(
        self,
        storage: Storage | None,
        shape: tuple[int, ...],
        dtype: DType,
        strides: tuple[int, ...] | None = None,
        offset: int = 0,
    ) -> None:
        self.storage = storage
        self.shape = shape
        self.dtype = dtype
        self.strides = contiguous_strides(shape) if strides is None else strides
        self.offset = offset

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def buffer(self) -> Any:
        return self.storage.buffer if self.storage is not None else None

    def is_contiguous(self) -> bool:
        """C-contiguous over its shape (size-1 axes may have any stride)."""
        step = 1
        for d, s in zip(reversed(self.shape), reversed(self.strides)):
            if d != 1 and s != step:
                return False
            step *= d
        return True

    def view(self, shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> WgpuArray:
        return WgpuArray(self.storage, shape, self.dtype, strides, offset)

    def span(self) -> tuple[int, int]:
        """(first, last + 1) element index the view touches in its buffer (size > 0)."""
        lo = hi = self.offset
        for d, s in zip(self.shape, self.strides):
            if d > 1:
                if s > 0:
                    hi += (d - 1) * s
                else:
                    lo += (d - 1) * s
        return lo, hi + 1

    def __repr__(self) -> str:
        return f"WgpuArray(shape={self.shape}, dtype={self.dtype}, strides={self.strides}, offset={self.offset})"

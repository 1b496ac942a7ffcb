"""CuPy's allocations go through ``ember.memory.BufferPool``: one pool per GPU.

CuPy asks its allocator for every array it creates (ember's handles, and CuPy's own temporaries
inside a kernel). :class:`DevicePools` is that allocator: it takes a block from the GPU's pool
and hands CuPy a pointer that owns the block, so the buffer returns to the pool's free list the
moment CuPy drops the array. CuPy's own memory pool is not used, so ``memory_stats()`` counts
every byte ember's process holds on the GPU through CuPy.

Freed buffers are reused at once: every array of a device is written and read on that device's
one stream, in order (another stream, through ``ember_cuda.use_stream``, must be synchronised by
its user before buffers cross). What the pool keeps follows the device's strategy (ember.memory):
``adaptive``, the default, releases buffers that stay empty; ``static`` gives nothing back while
training runs (``cudaFree`` stalls the GPU). Either way, when an allocation fails the pool
releases its free buffers and tries once more; ``device.backend.empty_cache()`` releases them too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ember.memory import Block, BufferPool

from .errors import DeviceMemoryError, human

__all__ = ["DevicePools"]


class DevicePools:
    """The CuPy allocator over one :class:`BufferPool` per GPU (installed with ``install()``)."""

    def __init__(self, cp: Any) -> None:
        self._cp = cp
        self._pools: dict[int, BufferPool[Any]] = {}
        #: while a CUDA graph is captured, its private pool (index -> pool)
        self._private: dict[int, BufferPool[Any]] = {}
        self._oom = (cp.cuda.memory.OutOfMemoryError, cp.cuda.runtime.CUDARuntimeError)
        self._status_oom = 2  # cudaErrorMemoryAllocation
        self._unowned = cp.cuda.memory.UnownedMemory
        self._pointer = cp.cuda.memory.MemoryPointer
        self._get_device = cp.cuda.runtime.getDevice

    def pool(self, index: int) -> BufferPool[Any]:
        pool = self._pools.get(index)
        if pool is None:
            # the strategy is the device's (Device.cuda(i, memory=...) or EMBER_MEMORY); cudaFree
            # synchronises the GPU, so adaptive's releases are what its step time pays for
            # adaptive carves small blocks out of pages: a block is the page's pointer plus an offset
            pool = self._pools[index] = BufferPool(
                self._allocator(index),
                _release,
                cache_limit=None,
                device=f"cuda:{index}",
                sub_allocate=lambda page, offset, nbytes: self._pointer(page, offset),
                alignment=512,  # CuPy's allocation unit
            )
        return pool

    def _allocator(self, index: int) -> Any:
        cp = self._cp

        def allocate(nbytes: int) -> Any:
            try:
                with cp.cuda.Device(index):
                    return cp.cuda.memory.Memory(nbytes)
            except self._oom as exc:
                if getattr(exc, "status", self._status_oom) != self._status_oom:
                    raise
                raise MemoryError(str(exc)) from None

        return allocate

    def install(self) -> None:
        """Make this CuPy's allocator (for every thread: CuPy's allocator is process-wide)."""
        self._cp.cuda.set_allocator(self.malloc)

    def malloc(self, nbytes: int) -> Any:
        """CuPy's allocator protocol: ``nbytes`` -> a MemoryPointer that owns a pooled block."""
        index = self._get_device()
        pool = self._private.get(index) or self._pools.get(index) or self.pool(index)
        try:
            block: Block[Any] = pool.acquire(nbytes)
        except MemoryError as exc:  # the pool released its cache and retried (ember.errors.OutOfMemoryError)
            raise self.out_of_memory(index, nbytes, exc) from None
        mem = self._unowned(block.raw.ptr, block.nbytes, block, index)
        return self._pointer(mem, 0)

    @contextmanager
    def private(self, index: int) -> Iterator[BufferPool[Any]]:
        """Inside the block, device ``index`` allocates from a new pool of its own (a CUDA graph's:
        the buffers a graph writes on replay must never be handed to other tensors)."""
        # static, and no device label: a graph's buffers are never released while it lives, nor
        # switched to another strategy by Device(..., memory=)
        pool: BufferPool[Any] = BufferPool(self._allocator(index), _release, cache_limit=None, strategy="static")
        self._private[index] = pool
        try:
            yield pool
        finally:
            del self._private[index]

    def out_of_memory(self, index: int, nbytes: int, cause: BaseException | None = None) -> DeviceMemoryError:
        pool = self.pool(index)
        try:
            free, total = self._cp.cuda.runtime.memGetInfo()
            gpu = f"the GPU has {human(free)} free of {human(total)}. "
        except Exception:  # reporting must not fail on a GPU in trouble
            gpu = ""
        said = f" The pool: {cause}" if cause is not None and str(cause) else ""
        fix = "" if pool.strategy == "exclusive" else ", Device.cuda(i, memory='exclusive')"
        return DeviceMemoryError(
            f"cuda:{index}: out of memory allocating {nbytes} bytes. "
            f"ember holds {human(pool.reserved)} reserved ({pool.strategy}), {human(pool.in_use)} of it in live "
            f"tensors; {gpu}Try a smaller batch or model, free tensors you no longer need (del x), use "
            f"float16/bfloat16 (em.autocast){fix}, or call device.backend.empty_cache() to give cached "
            f"buffers back.{said}"
        )


def _release(raw: Any) -> None:
    """Dropping CuPy's Memory object frees the buffer (cudaFree)."""
    del raw

"""Device buffers: a pool keyed by size class, and the counters behind ``memory_stats()``.

A :class:`Block` owns one ``cl.Buffer``. When the last handle using it goes away, the
buffer returns to the pool's free list for its size class instead of being released, so the
next op of a similar size reuses it without calling the driver. The command queue is in
order, so a buffer handed out again is written only after every kernel queued before that
still reads it. Size classes are four steps per power of two (at most 25% slack).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyopencl as cl

from .errors import DeviceMemoryError, driver_errors

__all__ = ["Block", "BufferPool", "size_class"]

_MIN_CLASS = 256


def size_class(nbytes: int) -> int:
    """The pool's size class for a request of ``nbytes`` (>= the request, <= 1.25x + 256)."""
    if nbytes <= _MIN_CLASS:
        return _MIN_CLASS
    top = 1 << (nbytes - 1).bit_length()  # next power of two
    step = max(_MIN_CLASS, top >> 3)  # 8 steps between top/2 and top -> at most 1.25x
    return -(-nbytes // step) * step


class Block:
    """One device buffer; returns itself to its pool when garbage collected."""

    __slots__ = ("buf", "nbytes", "pool", "__weakref__")

    def __init__(self, buf: cl.Buffer, nbytes: int, pool: BufferPool) -> None:
        self.buf = buf
        self.nbytes = nbytes
        self.pool = pool

    def __del__(self) -> None:
        try:
            self.pool.release(self.buf, self.nbytes)
        except Exception:  # interpreter shutdown: the context may be gone already
            pass


class BufferPool:
    """Allocates device buffers through free lists keyed by size class."""

    def __init__(self, context: cl.Context, label: str, max_alloc: int, enabled: bool = True) -> None:
        self.context = context
        self.label = label
        self.max_alloc = max_alloc
        self.enabled = enabled
        self._free: dict[int, list[cl.Buffer]] = {}
        self.in_use = 0
        self.cached = 0
        self.peak_in_use = 0
        self.peak_reserved = 0
        self.allocs = 0
        self.reuses = 0
        self.on_pressure: Callable[[], None] | None = None

    @property
    def reserved(self) -> int:
        return self.in_use + self.cached

    def alloc(self, nbytes: int) -> Block:
        """A block of at least ``nbytes`` bytes (a fresh or reused buffer)."""
        size = size_class(nbytes) if self.enabled else max(nbytes, 1)
        free = self._free.get(size)
        if free:
            buf = free.pop()
            self.cached -= size
            self.reuses += 1
        else:
            buf = self._new(size)
        self.in_use += size
        if self.in_use > self.peak_in_use:
            self.peak_in_use = self.in_use
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        return Block(buf, size, self)

    def _new(self, size: int) -> cl.Buffer:
        if size > self.max_alloc:
            raise DeviceMemoryError(
                f"{self.label}: cannot allocate {size / 2**20:.1f} MiB in one buffer: the device allows at "
                f"most {self.max_alloc / 2**20:.1f} MiB per allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE). "
                f"Split the tensor or use a smaller batch."
            )
        for attempt in range(2):
            try:
                with driver_errors(f"allocating {size} bytes", self.label, self.stats):
                    buf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size)
                self.allocs += 1
                return buf
            except DeviceMemoryError:
                if attempt or not self.cached:
                    raise
                self.empty()
        raise AssertionError("unreachable")  # pragma: no cover

    def release(self, buf: cl.Buffer, size: int) -> None:
        self.in_use -= size
        if self.enabled:
            self._free.setdefault(size, []).append(buf)
            self.cached += size
        else:
            buf.release()

    def empty(self) -> None:
        """Give every cached (unused) buffer back to the driver."""
        for bufs in self._free.values():
            for buf in bufs:
                buf.release()
        self._free.clear()
        self.cached = 0

    def stats(self) -> dict[str, Any]:
        return {
            "in_use_bytes": self.in_use,
            "cached_bytes": self.cached,
            "reserved_bytes": self.reserved,
            "peak_in_use_bytes": self.peak_in_use,
            "peak_reserved_bytes": self.peak_reserved,
            "driver_allocations": self.allocs,
            "pool_reuses": self.reuses,
            "pool": "size-class free lists" if self.enabled else "off",
        }

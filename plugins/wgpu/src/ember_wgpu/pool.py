"""The buffer pool: buffers are reused by size class instead of created and destroyed per op.

Sizes round up to a class (256-byte steps below 64 KiB, then four classes per power of two),
so a training step that frees and re-allocates the same shapes finds its buffers again. A
freed buffer goes back to its class at once: commands recorded later in the same batch run
after the commands that used it, so reuse on the GPU timeline is safe. Uploads through
``queue.write_buffer`` are not ordered that way; :meth:`acquire` therefore skips buffers the
unsubmitted batch still references when asked to (``avoid``). Free buffers are destroyed by
:meth:`trim`, which the runtime calls only right after a submit.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

__all__ = ["BufferPool", "size_class"]

#: keep at most this many bytes of free buffers cached; beyond, freed buffers are destroyed
DEFAULT_CACHE_LIMIT = 2 << 30


def size_class(nbytes: int) -> int:
    """The allocation size for a request of ``nbytes`` (at least 16, a multiple of 16)."""
    n = max(int(nbytes), 16)
    if n <= 65536:
        return -(-n // 256) * 256 if n > 256 else -(-n // 16) * 16
    top = 1 << (n - 1).bit_length()  # next power of two
    quarter = top // 8
    return -(-n // quarter) * quarter


class BufferPool:
    """Free buffers by size class, with byte counts and peaks for ``memory_stats``."""

    def __init__(self, create: Callable[[int], Any], max_binding: int, cache_limit: int = DEFAULT_CACHE_LIMIT) -> None:
        self._create = create
        self._max_binding = max_binding
        self.cache_limit = cache_limit
        self._free: dict[int, list[Any]] = {}
        self.reserved = 0  # bytes of every buffer the pool created and has not destroyed
        self.in_use = 0  # bytes handed out and not yet released
        self.free_bytes = 0
        self.peak_reserved = 0
        self.peak_in_use = 0
        self.hits = 0
        self.misses = 0
        self._pending_destroy: list[Any] = []
        # every buffer handed out, so it is never garbage itself: when a handle dies inside a
        # reference cycle, the cycle collector finalizes all of its members, and a buffer
        # finalized there would be released by wgpu-py while the pool takes it back
        self._live: dict[int, Any] = {}

    def acquire(self, nbytes: int, avoid: Collection[int] = ()) -> Any:
        """A buffer of at least ``nbytes`` (reused when one is free and not in ``avoid``)."""
        size = size_class(nbytes)
        if size > self._max_binding >= nbytes:
            size = -(-max(nbytes, 16) // 16) * 16
        bucket = self._free.get(size)
        buf = None
        if bucket:
            if not avoid:
                buf = bucket.pop()
            else:
                for k in range(len(bucket) - 1, -1, -1):
                    if bucket[k].uid not in avoid:
                        buf = bucket.pop(k)
                        break
        if buf is not None:
            self.hits += 1
            self.free_bytes -= size
        else:
            self.misses += 1
            buf = self._create(size)
            self.reserved += size
            self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.in_use += size
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        self._live[buf.uid] = buf
        return buf

    def release(self, buf: Any) -> None:
        """Give a buffer back (called when the last handle on it dies)."""
        if self._live.pop(buf.uid, None) is None:
            return
        size = buf.size
        self.in_use -= size
        if self.free_bytes + size > self.cache_limit:
            self._pending_destroy.append(buf)
            return
        self._free.setdefault(size, []).append(buf)
        self.free_bytes += size

    def trim(self, everything: bool = False) -> list[Any]:
        """Buffers to destroy now: those over the cache limit, or every free one."""
        doomed = self._pending_destroy
        self._pending_destroy = []
        if everything:
            for bucket in self._free.values():
                doomed.extend(bucket)
            self._free.clear()
            self.free_bytes = 0
        for buf in doomed:
            self.reserved -= buf.size
        return doomed

    def stats(self) -> dict[str, Any]:
        return {
            "reserved_bytes": self.reserved,
            "in_use_bytes": self.in_use,
            "free_bytes": self.free_bytes,
            "peak_reserved_bytes": self.peak_reserved,
            "peak_in_use_bytes": self.peak_in_use,
            "pool_hits": self.hits,
            "pool_misses": self.misses,
        }

    def reset_peaks(self) -> None:
        self.peak_reserved = self.reserved
        self.peak_in_use = self.in_use

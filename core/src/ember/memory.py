"""Device memory for device backends: a size-class buffer pool and the ``MemoryStats`` schema.

A backend hands :class:`BufferPool` two callables over its API's raw buffers,
``allocate(nbytes) -> raw`` and ``release(raw)``, and gets :class:`Block` s back. A block
owns one raw buffer; when the block is garbage collected the buffer returns to the free
list of its size class, and the next request of that class reuses it without calling the
driver. Free buffers beyond ``cache_limit`` bytes, and every free buffer after
:meth:`BufferPool.empty`, are released to the driver: at once, or, with
``defer_release=True``, when the backend calls :meth:`BufferPool.trim` (a queue that records
commands and submits them later may only destroy a buffer after the submit).

Every device's ``memory_stats()`` returns one :class:`MemoryStats` dict:

| key                   | type                 | meaning                                                   |
|-----------------------|----------------------|-----------------------------------------------------------|
| ``reserved_bytes``    | int or None          | bytes taken from the driver, not given back (in use + cached) |
| ``in_use_bytes``      | int or None          | bytes of the buffers live tensors hold                    |
| ``peak_reserved_bytes`` | int or None        | the largest ``reserved_bytes`` so far (or since ``reset_peaks``) |
| ``peak_in_use_bytes`` | int or None          | the largest ``in_use_bytes`` so far                       |
| ``allocations``       | int or None          | buffers allocated from the driver (the pools' misses)     |
| ``frees``             | int or None          | buffers released to the driver                            |
| ``pools``             | dict[str, PoolStats] | per pool (``"device"``...), each with a per-size-class breakdown |
| ``note``              | str                  | how to read the numbers, or why they are None; may be empty |
| ``extra``             | dict[str, Any]       | backend-specific counters (kernel cache, submits...)      |

A backend that cannot measure (numpy manages the CPU backend's memory) returns
:func:`unmeasured_stats`: the same keys, None counters, the reason in ``note``. With several
pools the top-level peaks are the sum of the pools' peaks: an upper bound, exact for one pool.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypedDict, TypeVar

__all__ = [
    "MemoryStats",
    "PoolStats",
    "SizeClassStats",
    "Block",
    "BufferPool",
    "size_class",
    "unmeasured_stats",
    "measured_stats",
    "DEFAULT_CACHE_LIMIT",
]

Raw = TypeVar("Raw")

#: free buffers a pool keeps for reuse, in bytes, unless the backend chooses another limit
DEFAULT_CACHE_LIMIT = 2 << 30


class SizeClassStats(TypedDict):
    """Buffers of one size class: ``in_use`` handed out, ``cached`` free for reuse."""

    in_use: int
    cached: int


class PoolStats(TypedDict):
    """One pool: its byte counts and peaks, hits and misses, and buffers per size class (bytes)."""

    reserved_bytes: int
    in_use_bytes: int
    cached_bytes: int
    peak_reserved_bytes: int
    peak_in_use_bytes: int
    hits: int
    misses: int
    frees: int
    cache_limit_bytes: int | None
    size_classes: dict[int, SizeClassStats]


class MemoryStats(TypedDict):
    """What ``Device.memory_stats()`` returns on every device (the table in the module docstring)."""

    reserved_bytes: int | None
    in_use_bytes: int | None
    peak_reserved_bytes: int | None
    peak_in_use_bytes: int | None
    allocations: int | None
    frees: int | None
    pools: dict[str, PoolStats]
    note: str
    extra: dict[str, Any]


def size_class(nbytes: int) -> int:
    """The allocation size for a request of ``nbytes``: a multiple of 16, at most 25% (or 255 bytes) more.

    16-byte steps up to 256 bytes, 256-byte steps up to 64 KiB, then four classes per power of two.
    """
    n = max(int(nbytes), 1)
    if n <= 256:
        step = 16
    elif n <= 65536:
        step = 256
    else:
        step = (1 << (n - 1).bit_length()) >> 3  # an eighth of the next power of two
    return -(-n // step) * step


#: size_class of the request sizes seen so far (a program asks for few distinct sizes; capped)
_CLASSES: dict[int, int] = {}
_CLASSES_MAX = 65536


def _class_of(nbytes: int) -> int:
    """:func:`size_class`, remembered in ``_CLASSES``."""
    size = size_class(nbytes)
    if len(_CLASSES) < _CLASSES_MAX and type(nbytes) is int and nbytes > 0:
        _CLASSES[nbytes] = size
    return size


class Block(Generic[Raw]):
    """One pooled buffer (``raw``, ``nbytes`` of it usable); it returns to its pool when collected."""

    __slots__ = ("raw", "nbytes", "_pool", "_token", "__weakref__")

    def __init__(self, raw: Raw, nbytes: int, pool: BufferPool[Raw], token: int) -> None:
        self.raw = raw
        self.nbytes = nbytes
        self._pool = pool
        self._token = token

    def __del__(self) -> None:
        try:
            self._pool._give_back(self._token, self.nbytes)
        except Exception:  # interpreter shutdown: the device may be gone already
            pass

    def __repr__(self) -> str:
        return f"<Block {self.nbytes} bytes>"


class BufferPool(Generic[Raw]):
    """Free lists of raw device buffers keyed by size class, with the counters of :class:`PoolStats`.

    ``allocate(nbytes)`` must raise :class:`MemoryError` (or a subclass) when the device is
    full: the pool then calls ``on_pressure()`` (e.g. submit queued work), releases its free
    buffers and tries once more; a second failure propagates. ``max_class`` caps the rounding
    (a request that fits under it is never rounded above it).
    """

    def __init__(
        self,
        allocate: Callable[[int], Raw],
        release: Callable[[Raw], None],
        *,
        cache_limit: int | None = DEFAULT_CACHE_LIMIT,
        max_class: int | None = None,
        defer_release: bool = False,
        on_pressure: Callable[[], None] | None = None,
    ) -> None:
        self._allocate = allocate
        self._release = release
        #: bytes of free buffers kept for reuse (None: no limit; 0: release every freed buffer)
        self.cache_limit = cache_limit
        self.max_class = max_class
        self.defer_release = defer_release
        self.on_pressure = on_pressure
        self._free: dict[int, list[Raw]] = {}
        self._doomed: list[tuple[Raw, int]] = []  # waiting for release (over the limit, or emptied)
        # every buffer handed out, by token: a raw buffer is never garbage itself, so when a block
        # dies inside a reference cycle the collector cannot free the buffer while the pool takes it back
        self._live: dict[int, tuple[Raw, int]] = {}
        self._tokens = itertools.count()
        self.reserved = 0
        self.in_use = 0
        self.cached = 0
        self.peak_reserved = 0
        self.peak_in_use = 0
        self.hits = 0
        self.misses = 0
        self.frees = 0

    # -- handing out and taking back ---------------------------------------------------------
    def acquire(self, nbytes: int, avoid: Callable[[Raw], bool] | None = None) -> Block[Raw]:
        """A block of at least ``nbytes``: a free buffer of its class unless ``avoid(raw)`` is true, else a new one."""
        # every device op of every pooled backend comes through here: the common case (a free
        # buffer of a size seen before) is a few dict and list operations, nothing more
        size = _CLASSES.get(nbytes) or _class_of(nbytes)
        if self.max_class is not None and size > self.max_class >= nbytes:
            size = -(-max(nbytes, 1) // 16) * 16
        bucket = self._free.get(size) if avoid is None else None
        if bucket:
            raw = bucket.pop()
            self.cached -= size
            self.hits += 1
        else:
            raw = self._take_free(size, avoid) if avoid is not None else None
            if raw is None:
                raw = self._new(size)
                self.misses += 1
            else:
                self.hits += 1
        in_use = self.in_use = self.in_use + size
        if in_use > self.peak_in_use:
            self.peak_in_use = in_use
        token = next(self._tokens)
        self._live[token] = (raw, size)
        return Block(raw, size, self, token)

    def _take_free(self, size: int, avoid: Callable[[Raw], bool] | None) -> Raw | None:
        bucket = self._free.get(size)
        if not bucket:
            return None
        if avoid is None:
            raw = bucket.pop()
        else:
            for k in range(len(bucket) - 1, -1, -1):
                if not avoid(bucket[k]):
                    raw = bucket.pop(k)
                    break
            else:
                return None
        self.cached -= size
        return raw

    def _new(self, size: int) -> Raw:
        try:
            raw = self._allocate(size)
        except MemoryError:
            if not (self._free or self._doomed):
                raise
            if self.on_pressure is not None:
                self.on_pressure()
            self.empty()
            self.trim()
            raw = self._allocate(size)
        self.reserved += size
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        return raw

    def _give_back(self, token: int, size: int) -> None:
        """Called by a dying block: its buffer goes to the free list, or to release over the limit."""
        entry = self._live.pop(token, None)
        if entry is None:
            return
        raw = entry[0]
        self.in_use -= size
        if self.cache_limit is not None and self.cached + size > self.cache_limit:
            self._doomed.append((raw, size))
            if not self.defer_release:
                self.trim()
            return
        bucket = self._free.get(size)
        if bucket is None:
            self._free[size] = [raw]
        else:
            bucket.append(raw)
        self.cached += size

    # -- giving memory back to the driver -------------------------------------------------------
    def trim(self) -> int:
        """Release the buffers waiting for release (over the cache limit, or emptied); returns how many."""
        doomed, self._doomed = self._doomed, []
        for raw, size in doomed:
            self.reserved -= size
            self.frees += 1
            self._release(raw)
        return len(doomed)

    def empty(self) -> int:
        """Release every free buffer (now, or at the next :meth:`trim` with ``defer_release``); returns how many."""
        count = 0
        for size, bucket in self._free.items():
            self._doomed.extend((raw, size) for raw in bucket)
            count += len(bucket)
        self._free.clear()
        self.cached = 0
        if not self.defer_release:
            self.trim()
        return count

    # -- counters ---------------------------------------------------------------------------
    def reset_peaks(self) -> None:
        """Start the peaks again from the current values."""
        self.peak_reserved = self.reserved
        self.peak_in_use = self.in_use

    def stats(self) -> PoolStats:
        in_use_count = Counter(size for _, size in self._live.values())  # counted here, not per acquire
        sizes = sorted(set(self._free) | set(in_use_count))
        return {
            "reserved_bytes": self.reserved,
            "in_use_bytes": self.in_use,
            "cached_bytes": self.cached,
            "peak_reserved_bytes": self.peak_reserved,
            "peak_in_use_bytes": self.peak_in_use,
            "hits": self.hits,
            "misses": self.misses,
            "frees": self.frees,
            "cache_limit_bytes": self.cache_limit,
            "size_classes": {
                s: {"in_use": in_use_count.get(s, 0), "cached": len(self._free.get(s, ()))} for s in sizes
            },
        }


def measured_stats(
    pools: Mapping[str, BufferPool[Any]], *, note: str = "", extra: Mapping[str, Any] | None = None
) -> MemoryStats:
    """The :class:`MemoryStats` of a backend whose memory is its ``pools`` (name -> pool)."""
    per_pool = {name: pool.stats() for name, pool in pools.items()}
    return {
        "reserved_bytes": sum(p["reserved_bytes"] for p in per_pool.values()),
        "in_use_bytes": sum(p["in_use_bytes"] for p in per_pool.values()),
        "peak_reserved_bytes": sum(p["peak_reserved_bytes"] for p in per_pool.values()),
        "peak_in_use_bytes": sum(p["peak_in_use_bytes"] for p in per_pool.values()),
        "allocations": sum(p["misses"] for p in per_pool.values()),
        "frees": sum(p["frees"] for p in per_pool.values()),
        "pools": per_pool,
        "note": note,
        "extra": dict(extra or {}),
    }


def unmeasured_stats(note: str, *, extra: Mapping[str, Any] | None = None) -> MemoryStats:
    """The :class:`MemoryStats` of a backend that cannot measure: None counters, the reason in ``note``."""
    return {
        "reserved_bytes": None,
        "in_use_bytes": None,
        "peak_reserved_bytes": None,
        "peak_in_use_bytes": None,
        "allocations": None,
        "frees": None,
        "pools": {},
        "note": note,
        "extra": dict(extra or {}),
    }

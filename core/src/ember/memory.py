"""Device memory for device backends: one buffer pool with three strategies, and the ``MemoryStats`` schema.

A backend hands :class:`BufferPool` two callables over its API's raw buffers,
``allocate(nbytes) -> raw`` and ``release(raw)``, and gets :class:`Block` s back. A block
owns one raw buffer; when the block is garbage collected the buffer returns to the pool.
What the pool does then is its *strategy* (docs/memory.md):

* ``exclusive``: every request allocates a buffer of its size (16 or 512 bytes granularity) and
  every freed buffer is released: reserved equals in use; the driver is called for every tensor.
* ``static``: requests round up to a fixed ladder of size classes (:func:`size_class`, at most
  25% more) and freed buffers stay cached for the next request of their class (up to
  ``cache_limit`` bytes), like a caching allocator.
* ``adaptive`` (the default): requests round to the fine granularity of ``exclusive``; freed
  buffers are cached by exact size; small buffers (<= ``SMALL_LIMIT``) live in a pool of their
  own, never handed to large requests nor large ones to them. The pool records its peak in use;
  before a miss would push reserved above ``(1 + HEADROOM)`` times that peak it hands the
  request a larger free buffer early, else releases free buffers (the most recently freed:
  a training loop needs those again last).
  Buffers that stay empty for twice the longest reuse gap it has seen are released, so
  reserved memory tracks memory in use as the program changes phase. Where the backend can
  address an offset in a buffer (``sub_allocate=``: cuda, opencl), small blocks are carved out
  of pages (one driver buffer serves many blocks); a block that goes back merges with the free
  ranges beside it, and a page all of whose blocks came back is released like a free buffer.

The strategy of a new pool is ``strategy=``, else the one chosen for its ``device`` label
(``Device("opencl:0", memory="static")`` calls :func:`set_device_strategy`), else
``EMBER_MEMORY`` (ember.config). Out of memory, the pool calls ``on_pressure()``, releases its
free buffers, retries once, and then raises :class:`ember.errors.OutOfMemoryError` saying what
was asked, what is reserved and in use, and what to try.

Every device's ``memory_stats()`` returns one :class:`MemoryStats` dict:

| key                   | type                 | meaning                                                   |
|-----------------------|----------------------|-----------------------------------------------------------|
| ``reserved_bytes``    | int or None          | bytes taken from the driver, not given back (in use + cached + slack) |
| ``in_use_bytes``      | int or None          | bytes live tensors asked for, rounded (static: its class) |
| ``peak_reserved_bytes`` | int or None        | the largest ``reserved_bytes`` so far (or since ``reset_peaks``) |
| ``peak_in_use_bytes`` | int or None          | the largest ``in_use_bytes`` so far                       |
| ``allocations``       | int or None          | buffers allocated from the driver (the pools' misses)     |
| ``frees``             | int or None          | buffers released to the driver                            |
| ``pools``             | dict[str, PoolStats] | per pool (``"device"``...), each with a per-size breakdown |
| ``strategy``          | str or None          | the pools' strategy (None where ember does not pool)      |
| ``note``              | str                  | how to read the numbers, or why they are None; may be empty |
| ``extra``             | dict[str, Any]       | backend-specific counters (kernel cache, submits...)      |

A backend that cannot measure (numpy manages the CPU backend's memory) returns
:func:`unmeasured_stats`: the same keys, None counters, the reason in ``note``. With several
pools the top-level peaks are the sum of the pools' peaks: an upper bound, exact for one pool.
"""

from __future__ import annotations

import itertools
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Generic, TypedDict, TypeVar

from . import config
from .errors import InvalidArgumentError, OutOfMemoryError

__all__ = [
    "MemoryStats",
    "PoolStats",
    "SizeClassStats",
    "Block",
    "BufferPool",
    "DeviceMemory",
    "STRATEGIES",
    "size_class",
    "fine_size",
    "set_device_strategy",
    "device_strategy",
    "unmeasured_stats",
    "measured_stats",
    "DEFAULT_CACHE_LIMIT",
    "SMALL_LIMIT",
    "HEADROOM",
    "PAGE_SIZE",
]

Raw = TypeVar("Raw")

#: free buffers a pool keeps for reuse, in bytes, unless the backend chooses another limit
DEFAULT_CACHE_LIMIT = 2 << 30

#: the pool strategies (module docstring); ``EMBER_MEMORY`` and ``Device(..., memory=)`` name one
STRATEGIES = config.MEMORY_STRATEGIES

#: adaptive: requests up to this many bytes are small (their own free lists)
SMALL_LIMIT = 1 << 20

#: adaptive: reserved memory may exceed the peak in use by this fraction before the pool reuses
#: larger buffers early or releases empty ones instead of allocating
HEADROOM = 0.04

#: adaptive with sub-allocation: the largest page small blocks are carved from (a quarter of it at most)
PAGE_SIZE = 2 << 20

#: adaptive: a size's free buffers are released once unused for this many acquires, at least
_MIN_IDLE = 4096


class SizeClassStats(TypedDict):
    """Buffers of one size: ``in_use`` handed out (by the size counted in use), ``cached`` free for reuse."""

    in_use: int
    cached: int


class PoolStats(TypedDict):
    """One pool: its strategy, byte counts and peaks, hits and misses, and buffers per size (bytes)."""

    strategy: str
    reserved_bytes: int
    in_use_bytes: int
    cached_bytes: int
    peak_reserved_bytes: int
    peak_in_use_bytes: int
    hits: int
    misses: int
    frees: int
    cache_limit_bytes: int | None
    small_cached_bytes: int
    pages: int
    carved: int
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
    strategy: str | None
    note: str
    extra: dict[str, Any]


def size_class(nbytes: int) -> int:
    """The static ladder: a multiple of 16 for ``nbytes``, at most 25% (or 255 bytes) more.

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


def fine_size(nbytes: int) -> int:
    """The adaptive and exclusive rounding: 16-byte steps up to 512 bytes, then 512-byte steps."""
    n = max(int(nbytes), 1)
    step = 16 if n <= 512 else 512
    return -(-n // step) * step


#: size_class / fine_size of the request sizes seen so far (a program asks for few distinct sizes; capped)
_CLASSES: dict[int, int] = {}
_FINE: dict[int, int] = {}
_CLASSES_MAX = 65536


def _class_of(nbytes: int) -> int:
    """:func:`size_class`, remembered in ``_CLASSES``."""
    size = size_class(nbytes)
    if len(_CLASSES) < _CLASSES_MAX and type(nbytes) is int and nbytes > 0:
        _CLASSES[nbytes] = size
    return size


def _fine_of(nbytes: int) -> int:
    """:func:`fine_size`, remembered in ``_FINE``."""
    size = fine_size(nbytes)
    if len(_FINE) < _CLASSES_MAX and type(nbytes) is int and nbytes > 0:
        _FINE[nbytes] = size
    return size


# -- the strategy of each device, and the pools of each device -------------------------------
_DEVICE_STRATEGY: dict[str, str] = {}
_DEVICE_POOLS: dict[str, weakref.WeakSet[BufferPool[Any]]] = {}


def _check_strategy(name: Any, what: str) -> str:
    if not isinstance(name, str) or name.strip().lower() not in STRATEGIES:
        raise InvalidArgumentError(f"{what}={name!r}: expected one of {', '.join(repr(s) for s in STRATEGIES)}")
    return name.strip().lower()


def set_device_strategy(device: str, strategy: str) -> None:
    """Use ``strategy`` for the pools of ``device`` (a label such as ``"opencl:0"``): those made
    from now on, and those that exist (their cached buffers are released first)."""
    name = _check_strategy(strategy, "memory")
    _DEVICE_STRATEGY[device] = name
    for pool in list(_DEVICE_POOLS.get(device, ())):
        pool.set_strategy(name)


def device_strategy(device: str) -> str:
    """The strategy the pools of ``device`` use: the one set for it, else ``EMBER_MEMORY``."""
    return _DEVICE_STRATEGY.get(device) or config.memory_strategy()


class DeviceMemory:
    """``Device.memory``: the strategy of one device's pools, a dry run, and releasing the cache."""

    __slots__ = ("device", "_load")

    def __init__(self, device: str, load: Callable[[], Any]) -> None:
        self.device = device
        self._load = load  # loads the device's backend (which makes its pools)

    def pools(self) -> list[BufferPool[Any]]:
        """The pools the device's backend made (none for a backend ember does not pool)."""
        self._load()
        return list(_DEVICE_POOLS.get(self.device, ()))

    @property
    def strategy(self) -> str:
        return device_strategy(self.device)

    @strategy.setter
    def strategy(self, name: str) -> None:
        set_device_strategy(self.device, name)

    @contextmanager
    def dry_run(self) -> Iterator[None]:
        """Run one representative step inside: the pools then plan for its peak (:meth:`BufferPool.dry_run`)."""
        with _all_dry_run(self.pools()):
            yield

    def empty_cache(self) -> int:
        """Release every cached buffer of the device's pools; returns how many."""
        count = 0
        for pool in self.pools():
            count += pool.empty()
            pool.trim()
        return count

    def __repr__(self) -> str:
        return f"<DeviceMemory {self.device} strategy={self.strategy!r}>"


@contextmanager
def _all_dry_run(pools: list[BufferPool[Any]]) -> Iterator[None]:
    if not pools:
        yield
        return
    with pools[0].dry_run(), _all_dry_run(pools[1:]):
        yield


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
            self._pool._give_back(self._token)
        except Exception:  # interpreter shutdown: the device may be gone already
            pass

    def __repr__(self) -> str:
        return f"<Block {self.nbytes} bytes>"


class _Page(Generic[Raw]):
    """One driver buffer that blocks are carved from: its free ranges (offset -> length, and end -> offset
    to merge neighbours), the bytes carved, and when it was last touched (in the pool's acquires)."""

    __slots__ = ("raw", "size", "small", "free", "ends", "used", "largest", "touched")

    def __init__(self, raw: Raw, size: int, small: bool) -> None:
        self.raw = raw
        self.size = size
        self.small = small
        self.free: dict[int, int] = {0: size}
        self.ends: dict[int, int] = {size: 0}
        self.used = 0
        self.largest = size
        self.touched = 0

    def fit(self, length: int) -> tuple[int, int] | None:
        """The smallest free range of at least ``length`` bytes: (its length, its offset)."""
        best: tuple[int, int] | None = None
        for offset, have in self.free.items():
            if have >= length and (best is None or have < best[0]):
                best = (have, offset)
                if have == length:
                    break
        return best

    def take(self, offset: int, length: int) -> None:
        """Carve ``length`` bytes from the start of the free range at ``offset``."""
        have = self.free.pop(offset)
        del self.ends[offset + have]
        if have > length:
            self.free[offset + length] = have - length
            self.ends[offset + have] = offset + length
        self.used += length
        self.largest = max(self.free.values(), default=0)

    def give(self, offset: int, length: int) -> None:
        """Return a carved range, merged with the free ranges on either side."""
        self.used -= length
        end = offset + length
        after = self.free.pop(end, None)
        if after is not None:
            del self.ends[end + after]
            end += after
        before = self.ends.pop(offset, None)
        if before is not None:
            del self.free[before]
            offset = before
        self.free[offset] = end - offset
        self.ends[end] = offset
        if end - offset > self.largest:
            self.largest = end - offset


class BufferPool(Generic[Raw]):
    """Free lists of raw device buffers keyed by size, run by one strategy, with the counters of :class:`PoolStats`.

    ``allocate(nbytes)`` must raise :class:`MemoryError` (or a subclass) when the device is
    full: the pool then calls ``on_pressure()`` (e.g. submit queued work), releases its free
    buffers and tries once more; a second failure raises :class:`~ember.errors.OutOfMemoryError`.
    ``max_class`` caps the rounding (a request that fits under it is never rounded above it).
    ``device`` is the label of the device (``"cuda:0"``) whose strategy the pool follows.
    ``defer_release``: True keeps every buffer to release until :meth:`trim`; a callable
    ``busy(raw)`` keeps only those it says are busy (wgpu: referenced by the open batch).
    ``sub_allocate(page, offset, nbytes) -> raw``: a view into a driver buffer, so that adaptive
    carves small blocks out of pages (offsets a multiple of ``alignment``); ``sub_release(raw)``
    drops a view (optional). Not with ``defer_release``.
    """

    def __init__(
        self,
        allocate: Callable[[int], Raw],
        release: Callable[[Raw], None],
        *,
        cache_limit: int | None = DEFAULT_CACHE_LIMIT,
        max_class: int | None = None,
        defer_release: bool | Callable[[Raw], bool] = False,
        on_pressure: Callable[[], None] | None = None,
        strategy: str | None = None,
        device: str | None = None,
        sub_allocate: Callable[[Raw, int, int], Raw] | None = None,
        sub_release: Callable[[Raw], None] | None = None,
        alignment: int = 256,
    ) -> None:
        self._allocate = allocate
        self._release = release
        #: bytes of free buffers kept for reuse (None: no limit; 0: release every freed buffer)
        self.cache_limit = cache_limit
        self.max_class = max_class
        self.defer_release = defer_release
        self.on_pressure = on_pressure
        self.device = device
        self._free: dict[int, list[Raw]] = {}
        self._doomed: list[tuple[Raw, int]] = []  # waiting for release (over the limit, or emptied)
        # every buffer handed out, by token -> (raw, its size, the bytes counted in use): a raw buffer
        # is never garbage itself, so when a block dies inside a reference cycle the collector cannot
        # free the buffer while the pool takes it back
        self._live: dict[int, tuple[Raw, int, int]] = {}
        self._tokens = itertools.count()
        self.reserved = 0
        self.in_use = 0
        self.cached = 0
        self.peak_reserved = 0
        self.peak_in_use = 0
        self.hits = 0
        self.misses = 0
        self.frees = 0
        # adaptive's record: the peak in use it plans for (not reset by reset_peaks), when each
        # size's free list was last touched (in acquires), and the longest reuse gap seen
        self._high = 0
        self._clock = 0
        self._touched: dict[int, int] = {}
        self._gap = 0
        self._slack = 0  # bytes of live buffers beyond what they count in use (larger buffers reused early)
        self._next_scan = _MIN_IDLE
        # sub-allocation (adaptive, where the backend can address an offset in a buffer): pages are
        # driver buffers that blocks are carved from; a retired block's range goes back to its page
        if sub_allocate is not None and defer_release:
            raise InvalidArgumentError("BufferPool: sub_allocate= cannot be combined with defer_release=")
        if alignment < 1 or alignment & (alignment - 1):
            raise InvalidArgumentError(f"BufferPool: alignment={alignment!r}: expected a power of two")
        self._sub = sub_allocate
        self._sub_release = sub_release
        self.alignment = alignment
        self._pages: list[_Page[Raw]] = []
        self._where: dict[int, tuple[_Page[Raw], int, int]] = {}  # id(view) -> (its page, offset, length)
        self.carved = 0  # blocks carved out of pages (requests served without a driver call)
        self.strategy = ""
        self._keep = True
        self._fine = False
        self.set_strategy(strategy or (device_strategy(device) if device is not None else config.memory_strategy()))
        if device is not None:
            _DEVICE_POOLS.setdefault(device, weakref.WeakSet()).add(self)

    def set_strategy(self, strategy: str) -> None:
        """Switch to ``strategy`` (``STRATEGIES``); free buffers are released first, live ones come back under it."""
        name = _check_strategy(strategy, "strategy")
        if name == self.strategy:
            return
        self.empty()
        self.strategy = name
        self._keep = name != "exclusive"  # cache freed buffers
        self._fine = name != "static"  # round finely (else the size-class ladder)
        self._high = self.in_use

    # -- handing out and taking back ---------------------------------------------------------
    def acquire(self, nbytes: int, avoid: Callable[[Raw], bool] | None = None) -> Block[Raw]:
        """A block of at least ``nbytes``: a free buffer of its size unless ``avoid(raw)`` is true, else a new one."""
        # every device op of every pooled backend comes through here: the common case (a free
        # buffer of a size seen before) is a few dict and list operations, nothing more
        if self._fine:
            size = _FINE.get(nbytes) or _fine_of(nbytes)
        else:
            size = _CLASSES.get(nbytes) or _class_of(nbytes)
            if self.max_class is not None and size > self.max_class >= nbytes:
                size = -(-max(nbytes, 1) // 16) * 16
        clock = self._clock = self._clock + 1
        bucket = self._free.get(size) if avoid is None else None
        if bucket:
            raw = bucket.pop()
            self.cached -= size
            self.hits += 1
            gap = clock - self._touched.get(size, clock)
            if gap > self._gap:
                self._gap = gap
            self._touched[size] = clock
            have = size
        else:
            raw, have = self._miss(size, avoid)
        in_use = self.in_use = self.in_use + size
        if in_use > self.peak_in_use:
            self.peak_in_use = in_use
        if in_use > self._high:
            self._high = in_use
        if clock >= self._next_scan:
            self._release_idle()
        token = next(self._tokens)
        self._live[token] = (raw, have, size)
        return Block(raw, have, self, token)

    def _miss(self, size: int, avoid: Callable[[Raw], bool] | None) -> tuple[Raw, int]:
        """No free buffer of ``size`` (that ``avoid`` allows): reuse, make room, or allocate; -> (raw, its size)."""
        raw = self._take_free(size, avoid) if avoid is not None else None
        if raw is not None:
            self.hits += 1
            self._touched[size] = self._clock
            return raw, size
        if self._sub is not None and size <= SMALL_LIMIT and self.strategy == "adaptive" and self._carves(size):
            return self._miss_paged(size)
        if self.strategy == "adaptive" and self.cached:
            target = int(max(self._high, self.in_use + size) * (1 + HEADROOM))
            # what is reserved once the buffers waiting for a deferred release (wgpu's, until a submit) go
            held = self.reserved - sum(s for _, s in self._doomed) if self._doomed else self.reserved
            if held + size > target:
                found = self._take_larger(size, avoid, int(self._high * HEADROOM) - self._slack)
                if found is not None:
                    self.hits += 1
                    self._slack += found[1] - size
                    return found
                self._make_room(held + size - target, size)
        self.misses += 1
        return self._new(size), size

    # -- sub-allocation: blocks carved out of pages --------------------------------------------
    def _miss_paged(self, size: int) -> tuple[Raw, int]:
        """adaptive, a small request, with pages: carve ``size`` from a free range; else, past the headroom,
        return cached small blocks to their pages until a range fits (no driver call); else a new page."""
        length = -(-size // self.alignment) * self.alignment
        small = True
        found = self._carve(length, small)
        if found is None and self.cached:
            target = int(max(self._high, self.in_use + size) * (1 + HEADROOM))
            if self.reserved + self._page_size() > target:
                found = self._split_cached(length, small)
                if found is None:  # make room as without pages: large cached buffers go to the driver
                    self._make_room(self.reserved + self._page_size() - target, size)
                    self._drop_empty_pages(self.reserved + self._page_size() - target)
        if found is None:
            self.misses += 1
            grow = self._page_size()
            page = _Page(self._new(grow), grow, small)
            self._pages.append(page)
            found = self._carve(length, small)
            assert found is not None  # a new page holds its first block
        else:
            self.hits += 1
        page, offset = found
        raw = self._sub(page.raw, offset, size)  # type: ignore[misc]
        self._where[id(raw)] = (page, offset, length)
        self.carved += 1
        page.touched = self._clock
        return raw, size

    def _page_size(self) -> int:
        """A new page: half the headroom over the peak in use (a power of two, 16 KiB to ``PAGE_SIZE``),
        so a page's unused tail stays within the headroom."""
        return min(PAGE_SIZE, 1 << max(14, int(self._high * HEADROOM / 2).bit_length() - 1))

    def _carves(self, size: int) -> bool:
        """Whether ``size`` is carved from a page: once the smallest page fits in half the headroom
        (a peak in use of 800 KiB or more), and a quarter of a page at most (a larger block would
        leave pages too fragmented for reserved to follow in use; it gets a buffer of its own)."""
        return self._high * HEADROOM >= 2 << 14 and 4 * size <= self._page_size()

    def _carve(self, length: int, small: bool) -> tuple[_Page[Raw], int] | None:
        """The best-fitting free range of ``length`` bytes or more in a page of its kind, split: (page, offset)."""
        best: tuple[int, _Page[Raw], int] | None = None
        for page in self._pages:
            if page.small is small and page.largest >= length:
                got = page.fit(length)
                if got is not None and (best is None or got[0] < best[0]):
                    best = (got[0], page, got[1])
                    if got[0] == length:
                        break
        if best is None:
            return None
        _, page, offset = best
        page.take(offset, length)
        return page, offset

    def _split_cached(self, length: int, small: bool) -> tuple[_Page[Raw], int] | None:
        """Return cached blocks of pages of this kind to their pages, the most recently freed first
        (a loop needs those again last), until a free range fits ``length``."""
        order = sorted(
            (s for s, b in self._free.items() if b and (s <= SMALL_LIMIT) == small),
            key=lambda s: -self._touched.get(s, 0),
        )
        for have in order:
            bucket = self._free[have]
            while bucket:
                self.cached -= have
                self._retire(bucket.pop(), have)
                found = self._carve(length, small)
                if found is not None:
                    return found
        return None

    def _drop_empty_pages(self, excess: int | None = None, before: int | None = None) -> int:
        """Release empty pages (all, or until ``excess`` bytes went; only those untouched since
        ``before``); returns how many."""
        count = 0
        for page in list(self._pages):
            if excess is not None and excess <= 0:
                break
            if page.used or (before is not None and page.touched >= before):
                continue
            self._pages.remove(page)
            self.reserved -= page.size
            self.frees += 1
            self._release(page.raw)
            count += 1
            if excess is not None:
                excess -= page.size
        return count

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

    def _take_larger(self, size: int, avoid: Callable[[Raw], bool] | None, budget: int) -> tuple[Raw, int] | None:
        """adaptive: the smallest free buffer larger than ``size`` on its side of ``SMALL_LIMIT``, at most
        ``budget`` bytes larger (the slack it adds stays within half the headroom)."""
        small = size <= SMALL_LIMIT
        fits = (s for s, b in self._free.items() if b and size < s <= size + budget and (s <= SMALL_LIMIT) == small)
        for have in sorted(fits):
            raw = self._take_free(have, avoid)
            if raw is not None:
                self._touched[have] = self._clock
                return raw, have
        return None

    def _make_room(self, excess: int, size: int) -> None:
        """adaptive: release free buffers until ``excess`` bytes went: large before small (for a large
        request), and the most recently freed first, which a loop needs again last (the idle scan
        takes those that stay empty); never one ``defer_release`` says is busy."""
        small = size <= SMALL_LIMIT
        order = sorted(
            (s for s, b in self._free.items() if b),
            key=lambda s: ((s <= SMALL_LIMIT) and not small, -self._touched.get(s, 0)),
        )
        busy = self.defer_release if callable(self.defer_release) else None
        excess = self._release_from(order, excess, busy)
        if excess > 0 and busy is not None and self.on_pressure is not None:
            self.on_pressure()  # wgpu: submit the open batch; its buffers are then free to release
            self._release_from([s for s in order if self._free.get(s)], excess, busy)

    def _release_from(self, order: list[int], excess: int, busy: Callable[[Raw], bool] | None) -> int:
        """Release free buffers of the sizes in ``order`` (not busy ones) until ``excess`` bytes went; the rest."""
        for have in order:
            bucket = self._free[have]
            for k in range(len(bucket) - 1, -1, -1):
                if excess <= 0:
                    break
                if busy is not None and busy(bucket[k]):
                    continue  # released only after the submit: kept, it stays reusable until then
                self.cached -= have
                excess -= have
                self._retire(bucket.pop(k), have)
            if excess <= 0:
                break
        return excess

    def _release_idle(self) -> None:
        """adaptive: release the free buffers of sizes unused for twice the longest reuse gap seen."""
        horizon = max(_MIN_IDLE, 2 * self._gap)
        self._next_scan = self._clock + horizon // 2
        if self.strategy != "adaptive" or not self.cached:
            return
        stale = self._clock - horizon
        for have, bucket in self._free.items():
            if bucket and self._touched.get(have, 0) < stale:
                self.cached -= have * len(bucket)
                for raw in bucket:
                    self._retire(raw, have)
                bucket.clear()
        if self._pages:
            self._drop_empty_pages(before=stale)

    def _new(self, size: int) -> Raw:
        try:
            raw = self._allocate(size)
        except MemoryError as first:
            freed = self.cached + sum(s for _, s in self._doomed) + sum(p.size for p in self._pages if not p.used)
            if not freed:  # nothing cached to give back: retrying cannot help
                raise self._out_of_memory(size, 0, first) from first
            if self.on_pressure is not None:
                self.on_pressure()
            self.empty()
            self.trim()
            try:
                raw = self._allocate(size)
            except MemoryError as exc:
                raise self._out_of_memory(size, freed, exc) from exc
        self.reserved += size
        if self.reserved > self.peak_reserved:
            self.peak_reserved = self.reserved
        return raw

    def _out_of_memory(self, size: int, freed: int, exc: BaseException) -> OutOfMemoryError:
        where = f"{self.device}: " if self.device else ""
        retry = (
            f"it released {_human(freed)} of cached buffers and retried, and the device still refused"
            if freed
            else "it had no cached buffers to release, and the device refused"
        )
        fix = "Try a smaller batch or model, or free tensors you no longer need (del x)"
        if self.strategy != "exclusive":
            fix += (
                f"; memory='exclusive' (Device({self.device or '...'!r}, memory='exclusive') or "
                f"EMBER_MEMORY=exclusive) keeps no cached buffers and rounds less"
            )
        return OutOfMemoryError(
            f"{where}out of memory allocating {_human(size)} ({size} bytes asked after rounding): the pool "
            f"({self.strategy}) holds {_human(self.reserved)} reserved, {_human(self.in_use)} of it in use by "
            f"live tensors; {retry} ({str(exc).strip() or type(exc).__name__}). {fix}."
        )

    def _give_back(self, token: int) -> None:
        """Called by a dying block: its buffer goes to the free list, or to release."""
        entry = self._live.pop(token, None)
        if entry is None:
            return
        raw, have, counted = entry
        self.in_use -= counted
        if have != counted:
            self._slack -= have - counted
        limit = self.cache_limit
        if self._keep and limit is not None and self.cached + have > limit and have <= limit:
            # a full cache gives up the sizes returned least recently, not the buffer a loop is
            # using now (else a loop after a workload that filled the cache with other sizes makes
            # and destroys every buffer on every step: W6 after W4 on wgpu, 1.66 -> 17 ms)
            stale = sorted((c for c, b in self._free.items() if b and c != have), key=lambda c: self._touched.get(c, 0))
            busy = self.defer_release if callable(self.defer_release) else None
            self._release_from(stale, self.cached + have - limit, busy)
        if not self._keep or (limit is not None and self.cached + have > limit):
            self._retire(raw, have)
            return
        bucket = self._free.get(have)
        if bucket is None:
            self._free[have] = [raw]
        else:
            bucket.append(raw)
        self.cached += have
        self._touched[have] = self._clock

    # -- giving memory back to the driver -------------------------------------------------------
    def _retire(self, raw: Raw, size: int) -> None:
        """Release ``raw`` now, or, with ``defer_release`` (True, or true for it), at the next :meth:`trim`."""
        if self._where:
            where = self._where.pop(id(raw), None)
            if where is not None:  # a carved block: its range goes back to its page (no driver call)
                page, offset, length = where
                page.give(offset, length)
                page.touched = self._clock
                if self._sub_release is not None:
                    self._sub_release(raw)
                if not page.used and self.strategy != "adaptive":  # only adaptive keeps empty pages
                    self._pages.remove(page)
                    self.reserved -= page.size
                    self.frees += 1
                    self._release(page.raw)
                return
        defer = self.defer_release
        if defer is True or (defer and defer(raw)):
            self._doomed.append((raw, size))
            return
        self.reserved -= size
        self.frees += 1
        self._release(raw)

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
        free, self._free = self._free, {}
        self.cached = 0
        for size, bucket in free.items():
            for raw in bucket:
                self._retire(raw, size)
            count += len(bucket)
        if self._pages:
            self._drop_empty_pages()
        return count

    @contextmanager
    def dry_run(self) -> Iterator[None]:
        """Measure the peak in use of the code inside; afterwards adaptive plans for exactly that peak
        (its headroom above it) and releases cached buffers beyond it. Nothing needs this: adaptive
        learns the peak as the program runs; a dry run fixes it before training starts."""
        start, self._high = self._high, self.in_use
        try:
            yield
        except BaseException:
            self._high = max(start, self._high)
            raise
        if self.strategy == "adaptive":
            target = int(self._high * (1 + HEADROOM))
            if self.reserved > target:
                self._make_room(self.reserved - target, SMALL_LIMIT + 1)
                if self._pages:
                    self._drop_empty_pages(self.reserved - target)

    # -- counters ---------------------------------------------------------------------------
    def reset_peaks(self) -> None:
        """Start the peaks again from the current values."""
        self.peak_reserved = self.reserved
        self.peak_in_use = self.in_use

    def stats(self) -> PoolStats:
        in_use_count = Counter(counted for _, _, counted in self._live.values())  # counted here, not per acquire
        sizes = sorted(s for s in set(self._free) | set(in_use_count) if in_use_count.get(s) or self._free.get(s))
        return {
            "strategy": self.strategy,
            "reserved_bytes": self.reserved,
            "in_use_bytes": self.in_use,
            "cached_bytes": self.cached,
            "peak_reserved_bytes": self.peak_reserved,
            "peak_in_use_bytes": self.peak_in_use,
            "hits": self.hits,
            "misses": self.misses,
            "frees": self.frees,
            "cache_limit_bytes": self.cache_limit,
            "small_cached_bytes": sum(s * len(b) for s, b in self._free.items() if s <= SMALL_LIMIT),
            "pages": len(self._pages),
            "carved": self.carved,
            "size_classes": {
                s: {"in_use": in_use_count.get(s, 0), "cached": len(self._free.get(s, ()))} for s in sizes
            },
        }


def _human(n: int) -> str:
    """``n`` bytes for a message: ``1.5 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


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
        "strategy": "+".join(sorted({p["strategy"] for p in per_pool.values()})) or None,
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
        "strategy": None,
        "note": note,
        "extra": dict(extra or {}),
    }

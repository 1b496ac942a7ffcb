"""The buffer pool: :class:`BufferPool` hands out :class:`Block` s, each owning one raw buffer
that returns to the pool when the block is collected; what the pool keeps follows its strategy.

Its parts by concern: the free lists (:mod:`.freelists`), pages and sub-allocation
(:mod:`.pages`), driver allocations and out of memory (:mod:`.oom`), and the counters (:mod:`.stats`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Generic

from .. import config
from ..errors import InvalidArgumentError
from .freelists import _FreeLists
from .oom import _Allocation
from .pages import _Pages
from .plan import _Arena, _Planner
from .registry import _add_pool, device_strategy
from .stats import _Counters
from .strategies import (
    _CLASSES,
    _FINE,
    _MIN_IDLE,
    DEFAULT_CACHE_LIMIT,
    HEADROOM,
    SMALL_LIMIT,
    Raw,
    _check_strategy,
    _class_of,
    _fine_of,
)

if TYPE_CHECKING:  # annotations only: _Page types the pool's page list
    from .pages import _Page

__all__ = ["Block", "BufferPool"]

_new = object.__new__


class Block(Generic[Raw]):
    """One pooled buffer (``raw``, ``nbytes`` of it usable); it returns to its pool when collected."""

    # _at, _pos: the step plan's arena and position of a block handed out by acquire's planned path
    # (None: the pool's other paths, which it looks up by token)
    __slots__ = ("raw", "nbytes", "_pool", "_token", "_at", "_pos", "__weakref__")

    def __init__(self, raw: Raw, nbytes: int, pool: BufferPool[Raw], token: int) -> None:
        self.raw = raw
        self.nbytes = nbytes
        self._pool = pool
        self._token = token
        self._at: _Arena[Raw] | None = None
        self._pos = 0

    @property
    def pool(self) -> BufferPool[Raw]:
        """The pool this block returns to."""
        return self._pool

    def __del__(self) -> None:
        try:
            arena = self._at
            if arena is not None:  # a step plan's block (the common case of a planned step): its range is free again
                pool = self._pool
                entry = pool._live.pop(self._token, None)  # a planned token is always live
                if entry is not None:
                    pool.in_use -= entry[2]
                arena.live &= ~(1 << self._pos)
                arena.count -= 1
                if not arena.count and arena is not pool._arena:
                    pool._retire_arena(arena)
                return
            self._pool._give_back(self._token)
        except Exception:  # interpreter shutdown: the device may be gone already
            pass

    def __repr__(self) -> str:
        return f"<Block {self.nbytes} bytes>"


class BufferPool(_FreeLists[Raw], _Pages[Raw], _Planner[Raw], _Allocation[Raw], _Counters, Generic[Raw]):
    """Free lists of raw device buffers keyed by size, run by one strategy, with the counters of :class:`PoolStats`.

    ``allocate(nbytes)`` must raise :class:`MemoryError` (or a subclass) when the device is
    full: the pool then calls ``on_pressure()`` (e.g. submit queued work), releases its free
    buffers and tries once more; a second failure raises :class:`~ember.errors.OutOfMemoryError`.
    ``max_class`` caps the rounding (a request that fits under it is never rounded above it).
    ``device`` is the label of the device (``"cuda:0"``) whose strategy the pool follows.
    ``defer_release``: True keeps every buffer to release until :meth:`trim`; a callable
    ``busy(raw)`` keeps only those it says are busy (wgpu: referenced by the open batch, until it
    is submitted; the backend calls ``trim()`` then). It is asked about driver buffers only: whole
    buffers, and with sub-allocation empty pages and step plans' arenas (``busy(page)`` must say
    whether any range carved from it is busy), never a carved range, which goes back to its page
    without a driver call. Under ``adaptive``, a busy buffer released while an acquire makes room
    goes at once, after ``on_pressure()`` (which should make it idle: submit the batch).
    ``sub_allocate(page, offset, nbytes) -> raw``: a view into a driver buffer, so that adaptive
    carves small blocks out of pages (offsets a multiple of ``alignment``); ``sub_release(raw)``
    drops a view (optional).
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
        self._pressing = False  # inside an acquire's slow path: a busy buffer released goes after on_pressure()
        # every buffer handed out, by token -> (raw, its size, the bytes counted in use): a raw buffer
        # is never garbage itself, so when a block dies inside a reference cycle the collector cannot
        # free the buffer while the pool takes it back
        self._live: dict[int, tuple[Raw, int, int]] = {}
        self._next_token = 0  # the token of the next block handed out: one per acquire
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
        # of that, a whole-buffer plan's: token -> (the token its block is expected to die by, its slack)
        self._slacks: dict[int, tuple[int, int]] = {}
        self._next_scan = _MIN_IDLE
        # sub-allocation (adaptive, where the backend can address an offset in a buffer): pages are
        # driver buffers that blocks are carved from; a retired block's range goes back to its page
        if alignment < 1 or alignment & (alignment - 1):
            raise InvalidArgumentError(f"BufferPool: alignment={alignment!r}: expected a power of two")
        self._sub = sub_allocate
        self._sub_release = sub_release
        self.alignment = alignment
        self._pages: list[_Page[Raw]] = []
        self._where: dict[int, tuple[_Page[Raw], int, int]] = {}  # id(view) -> (its page, offset, length)
        self.carved = 0  # blocks carved out of pages (requests served without a driver call)
        # the step plan (adaptive, .plan): the arena its blocks are carved from (without sub-allocation:
        # its slots' whole buffers), arenas of dropped plans whose blocks still live, the planned blocks by token
        self._arena: _Arena[Raw] | None = None
        self._retired: list[_Arena[Raw]] = []
        self._planned_of: dict[int, tuple[_Arena[Raw], int]] = {}
        self._learn = False
        # repeats that ended (a loop inside a step), by (period, its sizes sorted) -> (start token, length)
        self._loops: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}
        self._plan_sig: tuple[int, tuple[int, ...]] = (0, ())  # the plan's, remembered if it is dropped
        self.planned = 0  # blocks served from a plan's arena
        self.plan_misses = 0  # planned requests whose range was still held (served another way)
        self.plan_drops = 0  # plans dropped because the program asked for other sizes
        self.plan_rejoins = 0  # requests the plan did not expect, after which it found its place again
        self.plan_refusals = 0  # plans not made: the arena beside the blocks outside it would pass the headroom
        self._plan_reset()
        self.strategy = ""
        self._keep = True
        self._fine = False
        self.set_strategy(strategy or (device_strategy(device) if device is not None else config.memory_strategy()))
        if device is not None:
            _add_pool(device, self)

    def set_strategy(self, strategy: str) -> None:
        """Switch to ``strategy`` (``STRATEGIES``); free buffers are released first, live ones come back under it."""
        name = _check_strategy(strategy, "strategy")
        if name == self.strategy:
            return
        self.empty()
        self._plan_reset()
        self._loops.clear()
        self.strategy = name
        self._learn = name == "adaptive"  # record requests to plan a step (an arena, or whole buffers)
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
        token = self._next_token
        self._next_token = token + 1
        if self._learn:
            plan = self._plan
            if plan is None:
                self._record(size, token)
            else:
                r = self._ppos
                arena = self._arena
                # a step plan's common case, inline: the planned size, past the lap's start, its range free
                if (
                    avoid is None
                    and r
                    and plan.sizes[r] == size
                    and arena is not None
                    and not arena.live & plan.masks[r]
                ):
                    view = arena.views[r]
                    if view is not None:
                        self._ppos = r + 1 if r + 1 < plan.period else 0
                        arena.live |= 1 << r
                        arena.count += 1
                        self.planned += 1
                        self.hits += 1
                        if self._sub is None:  # whole buffers: _hand_out's idle scan may be due
                            self._planned_of[token] = (arena, r)
                            return self._hand_out(view, size, size, token)
                        in_use = self.in_use = self.in_use + size  # _hand_out, inline
                        if in_use > self.peak_in_use:
                            self.peak_in_use = in_use
                        if in_use > self._high:
                            self._high = in_use
                        self._live[token] = (view, size, size)
                        block = _new(Block)  # Block(view, size, self, token), inline, and its place in the plan
                        block.raw = view
                        block.nbytes = size
                        block._pool = self
                        block._token = token
                        block._at = arena
                        block._pos = r
                        return block
                # every request advances the plan, one with avoid= too (else the plan's position drifts)
                self._pressing = True
                try:
                    raw = self._plan_acquire(size, token, avoid)
                finally:
                    self._pressing = False
                if raw is not None:
                    self.hits += 1
                    return self._hand_out(raw, size, size, token)
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
        elif self.defer_release:
            self._pressing = True  # making room here may release a busy buffer: on_pressure() first
            try:
                raw, have = self._miss(size, avoid)
            finally:
                self._pressing = False
        else:
            raw, have = self._miss(size, avoid)
        in_use = self.in_use = self.in_use + size  # _hand_out, inline: this is the hot path
        if in_use > self.peak_in_use:
            self.peak_in_use = in_use
        if in_use > self._high:
            self._high = in_use
        if clock >= self._next_scan:
            self._pressing = True
            try:
                self._release_idle()
            finally:
                self._pressing = False
        self._live[token] = (raw, have, size)
        block = _new(Block)  # Block(raw, have, self, token), inline: the hot path
        block.raw = raw
        block.nbytes = have
        block._pool = self
        block._token = token
        block._at = None
        block._pos = 0
        return block

    def _hand_out(self, raw: Raw, have: int, size: int, token: int) -> Block[Raw]:
        """Count ``size`` in use and wrap ``raw`` (``have`` bytes) in the block of ``token``."""
        in_use = self.in_use = self.in_use + size
        if in_use > self.peak_in_use:
            self.peak_in_use = in_use
        if in_use > self._high:
            self._high = in_use
        if self._sub is None and self._clock >= self._next_scan:  # a whole-buffer plan keeps cached buffers:
            self._pressing = True  # those of sizes the program stopped asking for still go when idle
            try:
                self._release_idle()
            finally:
                self._pressing = False
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
        if self.cached and self._arena is not None and self._arena.slots:  # a whole-buffer plan knows the lifetime
            found = self._take_planned_larger(size, avoid)
            if found is not None:
                self.hits += 1
                self._slack += found[1] - size
                return found
        if self.strategy == "adaptive" and self.cached:
            target = int(max(self._high, self.in_use + size) * (1 + HEADROOM))
            # what is reserved once the buffers waiting for a deferred release (wgpu's, until a submit) go
            held = self.reserved - sum([s for _, s in self._doomed]) if self._doomed else self.reserved
            if held + size > target:
                # the slack a larger buffer adds shares the headroom with the free ranges of pages (a page's
                # unused tail): together they stay within it (PoCL W4's step 2 reached 1.054x in use before)
                spare = sum([page.size - page.used for page in self._pages]) if self._pages else 0
                if self._arena is not None and self._arena.slots:  # whole-buffer slots idle now count the same
                    spare += self._slots_idle()
                found = self._take_larger(size, avoid, int(self._high * HEADROOM) - self._slack - spare)
                if found is not None:
                    self.hits += 1
                    self._slack += found[1] - size
                    return found
                self._make_room(held + size - target, size)
        self.misses += 1
        return self._new(size), size

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

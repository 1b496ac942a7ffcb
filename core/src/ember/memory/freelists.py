"""The free lists of a pool: taking a cached buffer (of its size, or larger), giving a dead
block's buffer back, and releasing cached buffers to the driver (over the cache limit, to make
room under adaptive's headroom, idle ones, or all of them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic

from .strategies import _MIN_IDLE, SMALL_LIMIT, Raw


class _FreeLists(Generic[Raw]):
    """BufferPool's free lists (``_free``: size -> raw buffers) and the buffers waiting for release (``_doomed``).

    Every driver buffer the pool gives back goes through :meth:`_release_driver`, the one place that
    asks ``defer_release``."""

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

    def _take_larger(
        self, size: int, avoid: Callable[[Raw], bool] | None, budget: int, cross: bool = False
    ) -> tuple[Raw, int] | None:
        """adaptive: the smallest free buffer larger than ``size`` on its side of ``SMALL_LIMIT`` (either,
        with ``cross``), at most ``budget`` bytes larger (the slack it adds stays within half the headroom)."""
        small = size <= SMALL_LIMIT
        fits = [
            s
            for s, b in self._free.items()
            if b and size < s <= size + budget and (cross or (s <= SMALL_LIMIT) == small)
        ]
        for have in sorted(fits):
            raw = self._take_free(have, avoid)
            if raw is not None:
                self._touched[have] = self._clock
                return raw, have
        return None

    def _make_room(self, excess: int, size: int) -> None:
        """adaptive: release free buffers until ``excess`` bytes went: large before small (for a large
        request), and the most recently freed first, which a loop needs again last (the idle scan
        takes those that stay empty). One ``defer_release`` says is busy is skipped, unless the pool
        can submit now (inside an acquire, with ``on_pressure``): then the order holds, and the first
        busy one submits the batch (:meth:`_release_driver`; skipping them releases buffers the loop
        needs sooner: lavapipe W3, 27 driver allocations a step instead of 25)."""
        small = size <= SMALL_LIMIT
        touched = self._touched
        # sorted by (large first for a large request, most recently freed first), ties in the free
        # lists' order (the index): one list of keys, not a generator and a key function per size
        order = [
            s
            for _, _, _, s in sorted(
                [
                    ((s <= SMALL_LIMIT) and not small, -touched.get(s, 0), i, s)
                    for i, (s, b) in enumerate(self._free.items())
                    if b
                ]
            )
        ]
        busy = self.defer_release if callable(self.defer_release) else None
        if busy is not None and self._pressing and self.on_pressure is not None:
            busy = None
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
                if busy is not None and id(bucket[k]) not in self._where and busy(bucket[k]):
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

    def _give_back(self, token: int) -> None:
        """Called by a dying block: its buffer goes to the free list, or to release."""
        entry = self._live.pop(token, None)
        if entry is None:
            return
        raw, have, counted = entry
        self.in_use -= counted
        planned = self._planned_of
        if planned:  # a step plan's block: its range of the arena is free again (no driver call)
            got = planned.pop(token, None)
            if got is not None:
                arena, r = got
                arena.live &= ~(1 << r)
                arena.count -= 1
                if not arena.count and arena is not self._arena:
                    self._retire_arena(arena)
                return
        if self._learn:  # when it died, in requests: the lifetime a step plan places it by
            i = token - self._base
            if 0 <= i < len(self._freed):
                self._freed[i] = self._next_token
        if have != counted:
            self._slack -= have - counted
            if self._slacks:
                self._slacks.pop(token, None)
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
                    self._release_driver(page.raw, page.size)
                return
        self._release_driver(raw, size)

    def _release_driver(self, raw: Raw, size: int) -> None:
        """Give the driver buffer ``raw`` back (a whole buffer, an empty page or an arena: never a carved
        range), or, where ``defer_release`` says it is busy, keep it (counted in reserved) for :meth:`trim`.
        Under ``adaptive`` inside an acquire (making room) a busy buffer goes now, ``on_pressure()`` first
        (wgpu: the open batch is submitted): deferred, it would stay held beside the buffer allocated next."""
        defer = self.defer_release
        if defer is True or (defer and defer(raw)):
            pressing = self._pressing and callable(defer) and self.on_pressure is not None
            if not pressing or self.strategy != "adaptive":
                self._doomed.append((raw, size))
                return
            self.on_pressure()
            if defer(raw):  # still busy after the submit: it waits for trim()
                self._doomed.append((raw, size))
                return
        self.reserved -= size
        self.frees += 1
        self._release(raw)

    @property
    def deferred(self) -> list[Raw]:
        """The driver buffers waiting for :meth:`trim` (``defer_release`` said they were busy)."""
        return [raw for raw, _ in self._doomed]

    def trim(self) -> int:
        """Release the buffers waiting for release (over the cache limit, or emptied), but those a callable
        ``defer_release`` still says are busy (called before the batch that uses them went); returns how many."""
        doomed, self._doomed = self._doomed, []
        busy = self.defer_release if callable(self.defer_release) else None
        count = 0
        for raw, size in doomed:
            if busy is not None and busy(raw):
                self._doomed.append((raw, size))
                continue
            self.reserved -= size
            self.frees += 1
            self._release(raw)
            count += 1
        return count

    def empty(self) -> int:
        """Release every free buffer (now, or at the next :meth:`trim` with ``defer_release``), and a step
        plan's arena if none of its blocks is alive (the pool plans again); returns how many."""
        count = self._empty_free()
        if self._arena is not None and not self._arena.count:
            self._plan_reset()
            count += 1
        return count

    def _empty_free(self) -> int:
        """Release every free buffer and empty page (not a plan's arena); returns how many."""
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

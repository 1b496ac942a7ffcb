"""adaptive's step plan: a training loop asks
for the same sizes in the same order every step, and frees them at the same points. The pool
records the sizes it is asked for and when each block dies; once the last period of requests
repeats the one before it (two identical steps), it places every block of a step that dies within
the step at an offset of one driver buffer, the *arena*, by the lifetimes it saw (:mod:`.placement`),
and from then on hands each request of the
step its planned range of the arena: no driver call, and reserved is the plan's extent, which is
the step's peak in use (blocks that outlive a step keep the pool's other paths).

The switch-over stays within adaptive's headroom: the plan starts at the position of the step where
least is in use (the blocks of the step before it, in other buffers, weigh least while the arena
waits for them), and is made only if the arena plus the most the period holds outside it fits
``1 + HEADROOM`` times the peak in use; else the pool keeps its ordinary paths and looks again
after 8 more periods.

A request the plan did not expect at its place, of a size it knows (a sync's read-back between
steps), is ridden through: the plan finds its place again (``_find_place``). A size it never asks
for means the program changed: the plan is dropped (the arena goes once its blocks are dead) and
the pool records again. A planned range still held by a block kept longer than it was last time
is not handed out twice: that request takes the pool's other paths; when that happens in
``MISSED_LAPS`` laps in a row, the blocks now live longer for good (a step that reads its loss back
every time, after steps that did not) and the plan is dropped without remembering it as a loop, so
the pool records the new lifetimes and plans again.

Without views (a backend that passes no ``sub_allocate``) the plan is of whole buffers: each
planned position gets a *slot*, one driver buffer kept across steps, shared by positions whose
lifetimes never overlap; only the slots that fit the headroom (in the first lap too) are kept, the
other positions take the pool's other paths, where a miss may take a larger free buffer whose slack fits
the headroom over the block's recorded lifetime (docs/memory.md, "Without views").

A loop inside the step (conv's per-sample loop repeats its requests batch-size times) also looks
like a period while it runs. The pool remembers each repeat that ended (a plan dropped, or a
candidate it passed over), by its sizes: when the same repeat starts again within ``MAX_PERIOD``
requests of the last one's start, the step around it is a plannable period, so the pool passes
over the loop (unless it now runs longer than last time) and goes on recording until the whole
step repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic

from .placement import _Plan, make_plan, quietest, rotate
from .strategies import HEADROOM, SMALL_LIMIT, Raw

#: the longest step (in requests) the pool plans for, and the shortest it takes for one
MAX_PERIOD = 2048
MIN_PERIOD = 8

#: laps in a row with a planned range still held (a block kept longer than recorded) after which the
#: lifetimes changed for good: the plan goes and the pool records again (not a loop that ended)
MISSED_LAPS = 3

#: the repeats that ended (loops inside a step) the pool remembers; more: it forgets them all
_MAX_LOOPS = 64


class _Arena(Generic[Raw]):
    """The driver buffer a plan's blocks are carved from (or, without views, its slots' whole buffers),
    and which positions hold a live block."""

    # live: a bit per position holding a live block; views: each position's view of the arena, made once
    # (whole buffers: its slot's buffer); slots: the whole buffers, by slot (empty for an arena)
    __slots__ = ("raw", "size", "live", "count", "views", "slots")

    def __init__(self, raw: Raw | None, size: int, period: int) -> None:
        self.raw = raw
        self.size = size
        self.live = 0
        self.views: list[Raw | None] = [None] * period
        self.count = 0
        self.slots: list[tuple[Raw, int]] = []


class _Planner(Generic[Raw]):
    """BufferPool's step plan: recording the requests, finding the period, serving from the arena."""

    def _plan_reset(self, cache: bool = False) -> None:
        """Forget the plan (its arena goes now, or when its last block dies) and record afresh;
        ``cache``: a whole-buffer plan's slots go to the free lists, not back to the driver."""
        self._plan: _Plan | None = None
        self._ppos = 0
        self._astray = 0  # requests since the plan lost its place (0: on it); _ppos is 0 meanwhile
        self._astray_from = 0  # the position where it lost it
        self._tail: list[int] = []  # the sizes of the last three requests while astray
        # while astray: the plan's positions by the sizes of the three requests ending there, and by size
        self._index: tuple[dict[tuple[int, int, int], list[int]], dict[int, list[int]]] | None = None
        self._active = False
        self._first_lap = False
        self._seq: list[int] = []
        self._freed: list[int] = []
        self._uses: list[int] = []  # bytes in use just before each recorded request
        self._base = self._next_token
        self._last: dict[tuple[int, int, int], int] = {}
        self._cand = 0
        self._run = 0
        self._need = 0  # the run past which the candidate is planned (its period; longer for a known loop)
        self._sig: tuple[int, tuple[int, ...]] | None = None  # a candidate passed over: its sizes, for _loops
        self._start = 0  # the token where the candidate's repeat began (it or its plan)
        self._hold = 0
        self._lap_misses = 0  # planned ranges still held in the current lap
        self._missed_laps = 0  # laps in a row with such a miss
        arena = self._arena
        self._arena = None
        if arena is not None:
            if arena.count:
                self._retired.append(arena)
            else:
                self._release_arena(arena, cache)

    def _release_arena(self, arena: _Arena[Raw], cache: bool = False) -> None:
        """Give an arena (none of its blocks alive) back to the driver, its views first; a whole-buffer
        plan's slots are ordinary buffers: with ``cache`` they go to the free lists (a dropped plan's
        buffers serve the requests recorded next, and the next plan's slots: no driver call)."""
        if arena.slots:  # whole buffers, no views
            slots, arena.slots, arena.views = arena.slots, [], []
            for raw, size in slots:
                limit = self.cache_limit
                if cache and self._keep and (limit is None or self.cached + size <= limit):
                    self._free.setdefault(size, []).append(raw)
                    self.cached += size
                    self._touched[size] = self._clock
                else:
                    self._release_driver(raw, size)
            return
        if self._sub_release is not None:
            for view in arena.views:
                if view is not None:
                    self._sub_release(view)
        arena.views = []
        self._release_driver(arena.raw, arena.size)

    def _record(self, size: int, token: int) -> None:
        """Note a request (while there is no plan) and look for a period: the requests since an earlier
        request of the same three sizes repeat the ones before them, a whole period long."""
        seq = self._seq
        n = token - self._base
        if token < self._hold:  # a refused plan: not again soon
            return
        if n != len(seq) or n >= 2 * MAX_PERIOD + 64:  # trim what no period can reach
            keep = seq[-2 * MAX_PERIOD :] if n == len(seq) else []
            self._freed = self._freed[len(self._freed) - len(keep) :] if keep else []
            self._uses = self._uses[len(self._uses) - len(keep) :] if keep else []
            seq = self._seq = keep
            self._base = token - len(seq)
            self._last = {}
            self._cand = self._run = 0
            self._sig = None
            n = len(seq)
        seq.append(size)
        self._freed.append(-1)
        self._uses.append(self.in_use)
        p = self._cand
        # the candidate holds: the common case, no key to look up (a short loop's candidate, a whole number
        # of its laps, may be longer than the record so far: seq[n - p] would then wrap to its end)
        if p and n >= p and seq[n - p] == size:
            self._run += 1
        else:
            if self._sig is not None:  # a loop passed over ended here: remembered, with how long it ran
                self._remember(self._sig, self._start, token)
                self._sig = None
            if n < 2:
                return
            key = (seq[n - 2], seq[n - 1], size)
            q = self._last.get(key)
            self._last[key] = n
            p = n - q if q is not None else 0
            if 0 < p < MIN_PERIOD:  # a short loop: plan a whole number of its laps
                p *= -(-MIN_PERIOD // p)
            if p > MAX_PERIOD:
                p = 0
            run = 0
            if p:  # how far back the repeat already goes
                k = n
                while k - p >= 0 and seq[k] == seq[k - p] and run <= p:
                    run += 1
                    k -= 1
            self._cand, self._run, self._need = p, run, p
        if p and self._run > self._need:
            if self._sig is None:
                if self._inner_loop(p, n, token):
                    return  # passed over: recording goes on until the step around it repeats
            else:  # a loop passed over before runs longer than it did then: the program changed
                self._plan_sig, self._sig = self._sig, None
            self._make_plan(n + 1 - 2 * p, p)

    def _inner_loop(self, p: int, n: int, token: int) -> bool:
        """Whether the candidate (two periods of ``p`` ending at ``n``) is a repeat that ended before
        and started again within ``MAX_PERIOD`` requests (a loop inside a longer step, which is then
        plannable): then it is passed over until it runs longer than it did last time."""
        sig = (p, tuple(sorted(self._seq[n + 1 - p : n + 1])))  # its sizes, whatever its phase
        start = token - self._run - p + 1
        self._start = start
        last = self._loops.get(sig)
        if last is None or start - last[0] > MAX_PERIOD or self._run + p > last[1]:
            self._plan_sig = sig
            return False
        self._sig = sig
        self._need = last[1] - p  # planned only if it holds past the length it ran last time
        return True

    def _remember(self, sig: tuple[int, tuple[int, ...]], start: int, end: int) -> None:
        """A repeat of ``sig`` that began at token ``start`` ended at ``end`` (a request it did not predict)."""
        loops = self._loops
        if len(loops) >= _MAX_LOOPS and sig not in loops:
            loops.clear()
        loops[sig] = (start, end - start)

    def _make_plan(self, start: int, p: int) -> None:
        """Plan the period of ``p`` requests recorded from ``start`` (the older of the two alike)."""
        sizes = self._seq[start : start + p]
        lifetimes: list[int | None] = []
        for j in range(p):
            freed = self._freed[start + j]
            life = freed - (self._base + start + j) if freed >= 0 else 0
            lifetimes.append(life if 0 < life < p else None)
        uses = self._uses[start + p : start + 2 * p]
        if len(uses) == p:  # the position where least is in use (planned or not): the switch-over holds least twice
            phase = min(range(p), key=lambda j: (uses[j], j))
        else:
            phase = quietest(sizes, lifetimes)
        sizes, lifetimes = rotate(sizes, lifetimes, phase)
        whole = self._sub is None
        fit = None  # the largest arena _fits takes: the placement searches longer while none does
        if not whole and len(uses) == p:
            outside, high = _outside(sizes, lifetimes, rotate(uses, uses, phase)[0], self._high)
            fit = int((1 + HEADROOM) * high) - max(outside, default=0)
        plan = make_plan(sizes, lifetimes, self.alignment, whole=whole, fit=fit)
        if not plan.planned:  # nothing placed (an empty plan has no positions to check)
            fits = False
        elif plan.slots and len(uses) == p:  # whole buffers: the slots that fit the headroom, lap one included
            fits = self._fit_slots(plan, rotate(uses, uses, phase)[0])
        else:
            fits = self._fits(plan, rotate(uses, uses, phase)[0] if len(uses) == p else None)
        if not plan.planned or not fits:
            self.plan_refusals += plan.planned > 0
            self._hold = self._next_token + 8 * p  # record again only after 8 more periods (a plan costs O(p^2))
            self._cand = self._run = 0
            return
        if plan.slots and len(uses) == p:
            self._set_peaks(plan, rotate(uses, uses, phase)[0])
        self._plan = plan
        self._ppos = (p - phase) % p  # the next request is the period's position 0, the plan's p - phase
        self._active = False
        self._seq = []
        self._freed = []
        self._uses = []

    def _fits(self, plan: _Plan, uses: list[int] | None) -> bool:
        """Whether the arena beside the most the period holds outside it (blocks that outlive a step)
        stays within adaptive's headroom over the peak in use: else the plan would reserve more than
        the pool does without it (the step's peak in use minus those blocks is less than the arena)."""
        if uses is None:
            return False
        outside, high = self._outside(plan, uses)
        return plan.extent + max(outside, default=0) <= (1 + HEADROOM) * high

    def _outside(self, plan: _Plan, uses: list[int]) -> tuple[list[int], int]:
        """Per position of the period, the bytes in use just after its request outside the plan's
        blocks; and the peak in use the plan is held to."""
        lives = [plan.lives[j] if k is not None else None for j, k in enumerate(plan.offsets)]
        return _outside(plan.sizes, lives, uses, self._high)

    def _fit_slots(self, plan: _Plan, uses: list[int]) -> bool:
        """A whole-buffer plan: drop slots (their positions take the ordinary paths) until the slots beside
        what is held outside them fit adaptive's headroom at every position, in the first lap too (where
        the blocks of the lap before, which will live in slots, are still in other buffers); each time the
        slot that lowers the most held at the worst position most, the one of fewest positions on a tie
        (O(slots x period): a 2048-request period plans in ~0.2 s here). Whether any slot is left.
        (On the recorded W4 CPU-size trace every slot kept would need 1.28x the step's planned peak.)"""
        outside, high = self._outside(plan, uses)
        budget = (1 + HEADROOM) * high
        p = plan.period
        n = len(plan.slots)
        # per slot, what dropping it adds to what is held outside the slots after each request: its
        # blocks, less those of the lap before still alive in the first lap (held outside then anyway);
        # built from difference arrays, so the cost is O(slots x period), not O(sum of lifetimes)
        lift = [[0] * (p + 1) for _ in range(n)]
        early = [0] * (p + 1)  # the blocks of the lap before still alive in the first lap, all slots
        members = [0] * n
        for j in range(p):
            k = plan.offsets[j]
            if k is None:
                continue
            members[k] += 1
            size, end = plan.sizes[j], j + plan.lives[j]
            row = lift[k]
            row[j] += size
            if end <= p:
                row[end] -= size
            else:  # wraps: alive from the lap's start too, where lap one holds it outside anyway (no gain)
                row[p] -= size
                early[0] += size
                early[end - p] -= size
        held = []  # held outside the slots after each request, the first lap's worst
        run = 0
        for t in range(p):
            run += early[t]
            held.append(outside[t] + run)
        gains = []
        for row in lift:
            run = 0
            gain = []
            for t in range(p):
                run += row[t]
                gain.append(run)
            gains.append(gain)
        keep = set(range(n))
        extent = plan.extent
        while keep:
            top = max(held)
            if extent + top <= budget:
                break
            t = held.index(top)  # the worst position: drop the slot that lowers it most (fewest positions on a tie)
            best = max(keep, key=lambda k: (plan.slots[k] - gains[k][t], -members[k], -k))
            keep.discard(best)
            extent -= plan.slots[best]
            held = list(map(int.__add__, held, gains[best]))
        if len(keep) < n:
            plan.keep_slots(sorted(keep))
        return bool(keep)

    def _set_peaks(self, plan: _Plan, uses: list[int]) -> None:
        """Whole buffers: per position, the most held (the kept slots beside what is in use outside them)
        over its block's recorded lifetime (a sparse table of maxima: O(period log period))."""
        outside, _ = self._outside(plan, uses)
        level = plan.levels = [plan.extent + x for x in outside]
        p = plan.period
        table = [level]
        width = 1
        while 2 * width <= p:
            prev = table[-1]
            table.append([max(prev[i], prev[i + width]) for i in range(len(prev) - width)])
            width *= 2
        peaks: list[int | None] = []
        for j in range(p):
            life = plan.lives[j]
            if not 0 < life < p:
                peaks.append(None)
                continue
            top = 0
            for lo, hi in ((j, min(j + life, p)), (0, j + life - p)):  # its lifetime, wrapped into the lap
                if hi > lo:
                    k = (hi - lo).bit_length() - 1
                    top = max(top, table[k][lo], table[k][hi - (1 << k)])
            peaks.append(top)
        plan.peaks = peaks

    def _take_planned_larger(self, size: int, avoid: Callable[[Raw], bool] | None) -> tuple[Raw, int] | None:
        """Whole buffers, a request the plan knows but its slots do not serve (not planned, or its slot still
        held): a larger free buffer (either side of ``SMALL_LIMIT``), if its slack beside the most the pool
        holds over the block's recorded lifetime, and the slack of the blocks alive then, stays within the
        headroom: no driver call, and the buffer a later request of its own size needs stays cached (the
        plain rule allows only the slack that fits at the step's peak, since it cannot tell when a block dies)."""
        plan = self._plan
        if plan is None or not plan.peaks or self._first_lap:
            return None
        p = plan.period
        r = self._ppos - 1 if self._ppos else p - 1  # this request's position (the plan advanced)
        top = plan.peaks[r]
        if top is None or plan.sizes[r] != size:
            return None
        # a slot's block whose slot is still held: its size is in the slot's bytes, not in what is held beside
        extra = size if plan.offsets[r] is not None else 0
        slacks = self._slacks
        now = self._next_token - 1  # this request's token
        if slacks and len(slacks) * plan.lives[r] <= 4096:  # a plan's slack weighs only until its block dies
            other = self._slack - sum([amount for _, amount in slacks.values()])
            ends = [(end if end > now else now + p, amount) for end, amount in slacks.values()]  # overdue: stays
            levels = plan.levels
            top = max(
                levels[(r + d) % p] + sum([amount for end, amount in ends if end > now + d])
                for d in range(plan.lives[r])
            )
            top += other
        else:
            top += self._slack
        top += extra
        found = self._take_larger(size, avoid, int(self._high * (1 + HEADROOM)) - top, cross=True)
        if found is not None:
            slacks[now] = (now + plan.lives[r], found[1] - size)
        return found

    def _plan_acquire(self, size: int, token: int, avoid: Callable[[Raw], bool] | None = None) -> Raw | None:
        """The planned block for this request, or None (not planned, its range still held or one
        ``avoid`` refuses, or the program changed: then the plan is dropped and the pool records
        again). Every request advances the plan's position, whichever way it is served; one it did
        not expect there is ridden through (:meth:`_find_place`)."""
        plan = self._plan
        if plan is None:
            return None
        r = self._ppos
        if self._astray or plan.sizes[r] != size:
            found = self._find_place(plan, size, token)
            if found is None:
                return None
            r = found
            if self._astray:  # still astray: a free range of this size, borrowed; the plan's place unchanged
                return self._serve(plan, r, size, token, avoid)
        self._ppos = r + 1 if r + 1 < plan.period else 0
        if r == 0:
            if not self._active:
                self._activate(plan)
            elif self._lap_done():  # the lifetimes changed for good: record them and plan again
                self.plan_drops += 1
                self._plan_reset(cache=True)
                self._record(size, token)
                return None
            elif self._first_lap:  # the buffers of the steps before the plan are dead by now
                self._first_lap = False
                if plan.slots:  # whole buffers: cached ones beyond the headroom go (blocks outside use the rest)
                    self._trim_to(0)
                else:
                    self._empty_free()
        return self._serve(plan, r, size, token, avoid)

    def _lap_done(self) -> bool:
        """A lap of the plan ended: whether its ranges were found still held in ``MISSED_LAPS`` laps in a row."""
        self._missed_laps = self._missed_laps + 1 if self._lap_misses else 0
        self._lap_misses = 0
        return self._missed_laps >= MISSED_LAPS

    def _serve(self, plan: _Plan, r: int, size: int, token: int, avoid: Callable[[Raw], bool] | None) -> Raw | None:
        """Position ``r``'s range of the arena for this request, or None (not planned, still held, avoided)."""
        arena = self._arena
        offset = plan.offsets[r]
        if offset is None or arena is None:
            return None
        if arena.live & plan.masks[r]:
            self.plan_misses += 1  # a block held longer than last time: this one takes another path
            self._lap_misses += 1
            return None
        view = arena.views[r]
        if view is None:
            view = arena.views[r] = self._sub(arena.raw, offset, size)  # type: ignore[misc]
        if avoid is not None and avoid(view):
            self.plan_misses += 1  # e.g. a range the open batch still uses, for an upload: another path
            return None
        arena.live |= 1 << r
        arena.count += 1
        self._planned_of[token] = (arena, r)
        self.planned += 1
        return view

    def _find_place(self, plan: _Plan, size: int, token: int) -> int | None:
        """A request the plan did not expect at its place (a sync's read-back, a step that ran another
        way once): the plan rides through it rather than being dropped. Returns the position to serve
        it from: where the plan's place is found again (where it was lost, when the requests astray
        came in between; else where the last three requests' sizes follow one another there), or,
        still astray, a position of its size whose range is free to borrow (None: none is; the
        ordinary paths serve it, as they serve the positions the plan leaves out). A size the plan
        never asks for, no place found within a period, or the place lost while none of the arena's
        blocks lives: the plan is dropped and the pool records again (None)."""
        p = plan.period
        if not self._astray:
            self._astray_from = r = self._ppos
            self._tail = [plan.sizes[r - 2], plan.sizes[r - 1]]  # (r - 1 and r - 2 wrap to the end)
            if self._index is None:
                follows: dict[tuple[int, int, int], list[int]] = {}
                of_size: dict[int, list[int]] = {}
                sizes = plan.sizes
                for j in range(p):
                    follows.setdefault((sizes[j - 2], sizes[j - 1], sizes[j]), []).append(j)
                    of_size.setdefault(sizes[j], [])
                    if plan.offsets[j] is not None:
                        of_size[sizes[j]].append(j)
                self._index = (follows, of_size)
        follows, of_size = self._index  # type: ignore[misc]
        tail = self._tail
        tail.append(size)
        if len(tail) > 3:
            del tail[0]
        self._astray += 1
        arena = self._arena
        # lost where no block of the arena is live (between steps, say): dropping costs nothing now (the
        # arena goes at once); riding through would keep it while the new program's buffers come
        ride = self._astray <= p and arena is not None and (self._astray > 1 or arena.count > 0)
        if ride:
            start = self._astray_from
            if plan.sizes[start] == size:  # the requests astray came in between: the plan goes on where it was
                here: list[int] | None = [start]
            else:  # some the plan expected did not come: on where the last three requests follow one another
                here = follows.get((tail[0], tail[1], tail[2]))
            if here:  # back on the plan (the place nearest after where it was lost)
                self._astray = 0
                self.plan_rejoins += 1
                return min(here, key=lambda j: (j - start) % p)
        if ride and size in of_size:  # a size the plan knows: a free range of it, or the ordinary paths
            self._ppos = 0  # acquire's inline path then asks here for every request until the place is found
            live, masks = arena.live, plan.masks  # type: ignore[union-attr]
            for j in of_size[size]:
                if not live & masks[j]:
                    return j
            return None
        # the program changed (a size the plan never asks for, or no place found within a period): the
        # plan goes, and the pool records again
        self.plan_drops += 1
        self._remember(self._plan_sig, self._start, token)  # a loop inside a step ends so: passed over next time
        self._plan_reset(cache=True)
        self._record(size, token)
        return None

    def _activate(self, plan: _Plan) -> None:
        """The plan's first position is next: free buffers go back to the driver, then the arena comes."""
        if plan.slots:
            self._activate_whole(plan)
            return
        self._empty_free()
        try:
            raw = self._new(plan.extent)
        except MemoryError:  # the device cannot hold the arena: the ordinary paths serve this request
            self.plan_refusals += 1
            self._plan_reset()
            self._hold = self._next_token + 8 * plan.period
            return
        self.misses += 1
        self._arena = _Arena(raw, plan.extent, plan.period)
        self._active = True
        self._first_lap = True

    def _activate_whole(self, plan: _Plan) -> None:
        """The plan's first position is next, without views: each slot takes a free buffer of its size
        (no driver call), other free buffers go back to the driver as far as the headroom needs for the
        slots left, which then get new ones (blocks outside the plan keep reusing the rest)."""
        arena: _Arena[Raw] = _Arena(None, 0, plan.period)
        taken: list[Raw | None] = [self._take_free(size, None) for size in plan.slots]
        self._trim_to(sum(size for raw, size in zip(taken, plan.slots) if raw is None))
        try:
            for k, size in enumerate(plan.slots):
                if taken[k] is None:
                    taken[k] = self._new(size)
                    self.misses += 1
        except MemoryError:  # the device cannot hold the slots: the ordinary paths serve this request
            for k, raw in enumerate(taken):
                if raw is not None:
                    self._release_driver(raw, plan.slots[k])
            self.plan_refusals += 1
            self._plan_reset()
            self._hold = self._next_token + 8 * plan.period
            return
        arena.slots = [(raw, size) for raw, size in zip(taken, plan.slots)]  # type: ignore[misc]
        arena.size = plan.extent
        for j, k in enumerate(plan.offsets):
            if k is not None:
                arena.views[j] = taken[k]
        self._arena = arena
        self._active = True
        self._first_lap = True

    def _slots_idle(self) -> int:
        """Bytes of a whole-buffer plan's slots not holding a live block now (the arena's idle part)."""
        arena, plan = self._arena, self._plan
        if arena is None or plan is None:
            return 0
        used, live, sizes = 0, arena.live, plan.sizes
        while live:
            low = live & -live
            used += sizes[low.bit_length() - 1]
            live ^= low
        return arena.size - used

    def _trim_to(self, more: int) -> None:
        """Release cached buffers until ``more`` bytes fit within adaptive's headroom over the peak in use."""
        excess = self.reserved + more - int(self._high * (1 + HEADROOM))
        if excess > 0 and self.cached:
            self._make_room(excess, SMALL_LIMIT + 1)

    def _retire_arena(self, arena: _Arena[Raw]) -> None:
        """The last block of a dropped plan's arena died: the arena goes back to the driver (whole
        buffers: to the free lists)."""
        self._retired.remove(arena)
        self._release_arena(arena, cache=True)


def _outside(sizes: list[int], lives: list[int | None], uses: list[int], high: int) -> tuple[list[int], int]:
    """Per position of a period, the bytes in use just after its request outside the planned blocks
    (``lives[j]`` not None), given ``uses`` (in use before each request); and the peak in use the plan
    is held to (at least ``high``)."""
    p = len(sizes)
    delta = [0] * (p + 1)  # bytes of planned blocks in use after each request of the period
    for j in range(p):
        life = lives[j]
        if life is None:
            continue
        delta[j] += sizes[j]
        if j + life <= p:
            delta[j + life] -= sizes[j]
        else:
            delta[p] -= sizes[j]
            delta[0] += sizes[j]
            delta[j + life - p] -= sizes[j]
    planned = 0
    outside = [0] * p
    for j in range(p):
        planned += delta[j]
        after = uses[j] + sizes[j]
        high = max(high, after)
        outside[j] = after - planned
    return outside, high

"""Where a step plan's blocks go (:mod:`.plan` decides when to plan and serves the plan): given one
period of requests, their sizes and lifetimes, an offset in one buffer for each block that dies
within the period (largest first and other orders, then random ones where that packs tighter, each
at the lowest offset free over its lifetime), or without views, whole-buffer slots shared by blocks whose
lifetimes never overlap; the position to start the plan at; the period rotated to start there."""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["make_plan", "rotate", "quietest"]


class _Plan:
    """A placement of one period of requests: per position, its size and (planned blocks) its offset,
    its length, and the positions whose ranges overlap it; ``extent`` is the arena's size."""

    __slots__ = (
        "period", "sizes", "offsets", "lengths", "lives", "overlaps", "masks", "extent", "planned", "slots",
        "peaks", "levels",
    )  # fmt: skip

    def __init__(
        self, sizes: list[int], lifetimes: list[int | None], alignment: int, whole: bool = False, fit: int | None = None
    ) -> None:
        p = self.period = len(sizes)
        self.sizes = sizes
        self.lives = [life or 0 for life in lifetimes]
        self.slots: list[int] = []  # whole buffers: each slot's size (``offsets`` then holds slot indices)
        # whole buffers: per position, the most the pool must hold (slots + in use outside them) over its
        # block's recorded lifetime, or None (it outlives the period): what a larger free buffer may add
        self.peaks: list[int | None] = []
        self.levels: list[int] = []  # whole buffers: per position, the slots beside what is in use outside them
        if whole:
            self._place_whole(lifetimes)
            return
        lengths = self.lengths = [-(-s // alignment) * alignment for s in sizes]
        lives = self.lives
        order = [j for j in range(p) if lifetimes[j] is not None]
        memo = (tuple(lengths), tuple(lives))  # a refused plan's period comes again: placed once
        offsets, extent = _PLACED.get(memo) or _placement(lengths, lives, order, p, fit)
        if len(_PLACED) >= _MAX_PLACED:
            _PLACED.clear()
        _PLACED[memo] = (offsets, extent)
        self.offsets = list(offsets)
        self.extent = extent
        self.planned = len(order)
        self.overlaps: list[tuple[int, ...]] = [()] * p
        spans = [(self.offsets[j], self.offsets[j] + self.lengths[j], j) for j in order]  # type: ignore[operator]
        spans.sort()
        for a, (lo, hi, j) in enumerate(spans):
            near = []
            for lo2, _hi2, i in spans[a + 1 :]:
                if lo2 >= hi:
                    break
                near.append(i)
            for _lo2, hi2, i in spans[:a]:
                if hi2 > lo:
                    near.append(i)
            self.overlaps[j] = tuple(near)
        # per position, the bit of itself and of every position whose range overlaps it: one AND with the
        # arena's live bits says whether the range is free (the hot path: no loop over the overlaps)
        self.masks = [0] * p
        for j in order:
            mask = 1 << j
            for i in self.overlaps[j]:
                mask |= 1 << i
            self.masks[j] = mask

    def _place_whole(self, lifetimes: list[int | None]) -> None:
        """Without views: each planned position gets a *slot*, one whole driver buffer reused every lap,
        shared by positions whose lifetimes never overlap; largest first, each into the smallest slot
        at least its size that is free over its lifetime, else a new slot of its size. ``offsets[j]``
        is j's slot, ``masks[j]`` the bits of every position of that slot, ``extent`` the slots' sum."""
        p = self.period
        self.lengths = list(self.sizes)
        self.offsets = [None] * p
        members: list[list[tuple[int, int]]] = []  # per slot: (start, lifetime) of its positions
        order = sorted((j for j in range(p) if lifetimes[j] is not None), key=lambda j: (-self.sizes[j], j))
        by_size: list[int] = []  # slot indices, sorted by slot size (smallest first)
        for j in order:
            life = lifetimes[j] or 0
            n = self.sizes[j]
            chosen = None
            for k in by_size:
                if self.slots[k] < n:
                    continue
                if all((s - j) % p >= life and (j - s) % p >= life2 for s, life2 in members[k]):
                    chosen = k
                    break
            if chosen is None:
                chosen = len(self.slots)
                self.slots.append(n)
                members.append([])
                by_size.append(chosen)
                by_size.sort(key=lambda k: (self.slots[k], k))
            members[chosen].append((j, life))
            self.offsets[j] = chosen
        self.extent = sum(self.slots)
        self.planned = len(order)
        self.masks = [0] * p
        self.overlaps = [()] * p
        for group in members:
            mask = 0
            for j, _ in group:
                mask |= 1 << j
            for j, _ in group:
                self.masks[j] = mask
                self.overlaps[j] = tuple(i for i, _ in group if i != j)

    def keep_slots(self, keep: list[int]) -> None:
        """Whole buffers: keep only the slots ``keep`` (renumbered in that order); the other slots'
        positions move into a kept slot at least their size that is free over their lifetime (largest
        first), else are no longer planned."""
        index = {k: i for i, k in enumerate(keep)}
        members: list[list[int]] = [[] for _ in keep]
        dropped = []
        for j, k in enumerate(self.offsets):
            if k is None:
                continue
            i = self.offsets[j] = index.get(k)
            if i is None:
                dropped.append(j)
                self.masks[j] = 0
                self.overlaps[j] = ()
            else:
                members[i].append(j)
        self.slots = [self.slots[k] for k in keep]
        p = self.period
        for j in sorted(dropped, key=lambda j: (-self.sizes[j], j)):  # into a kept slot free over its lifetime
            life = self.lives[j]
            fits = [
                i
                for i in range(len(keep))
                if self.slots[i] >= self.sizes[j]
                and all((s - j) % p >= life and (j - s) % p >= self.lives[s] for s in members[i])
            ]
            if fits:
                i = min(fits, key=lambda i: (self.slots[i], i))
                members[i].append(j)
                self.offsets[j] = i
        for group in members:
            mask = 0
            for j in group:
                mask |= 1 << j
            for j in group:
                self.masks[j] = mask
                self.overlaps[j] = tuple(i for i in group if i != j)
        self.extent = sum(self.slots)
        self.planned = sum(k is not None for k in self.offsets)


#: the orders :class:`_Plan` places an arena's blocks in (sort keys of length, lifetime, position)
_ORDERS: tuple[Callable[[int, int, int], tuple[int, ...]], ...] = (
    lambda n, life, j: (-n, -life, j),
    lambda n, life, j: (-n, j),
    lambda n, life, j: (-n * life, -n, j),
    lambda n, life, j: (-life, -n, j),
)


def _placement(
    lengths: list[int], lives: list[int], order: list[int], p: int, fit: int | None = None
) -> tuple[list[int | None], int]:
    """The arena offsets of the blocks in ``order`` and the arena's extent, the least of several orders'
    (``fit``: the largest extent the pool would take; while none fits, more orders are tried)."""
    floor = _peak(lengths, lives, order, p)
    offsets: list[int | None] = []
    extent = -1
    # largest first, the longer-lived of equal sizes lower, packs most steps tightly (every W3 and
    # W4 trace of the GPUs to the peak); where short-lived large blocks cut the arena into gaps
    # (conv's chunked columns: 9% over the peak on cuda W3), largest size x lifetime first or the
    # longest-lived first reach it: each is tried until one does. Then, while none has, random
    # orders, every fourth largest first with sizes jittered (a seeded generator: the same plan
    # every run): lavapipe's W3 at CPU size, whose one long-lived block must lie under the large
    # short-lived ones, is 5.2% over the peak by every fixed order, 0-4.7% by 256 random ones.
    # Past ``TRIES`` random orders the search goes on only while the arena would not fit (``fit``):
    # wgpu W3 at GPU size (lavapipe as a GPU) needed ~250 random orders to come within 3% of its peak.
    keys = [lambda j, key=key: key(lengths[j], lives[j], j) for key in _ORDERS]
    rng = random.Random(len(order))
    base, most = _tries(len(order))
    for t in range(len(keys) + most):
        if t >= len(keys) + base and (fit is None or extent <= fit):
            break
        if t < len(keys):
            tried_order = sorted(order, key=keys[t])
        elif t % 4 == 0:
            tried_order = sorted(order, key=lambda j: (-lengths[j] * (1 + JITTER * rng.random()), j))
        else:
            tried_order = rng.sample(order, len(order))
        tried, top = _place(lengths, lives, tried_order, p)
        if extent < 0 or top < extent:
            offsets, extent = tried, top
        if extent <= floor:
            break
    return offsets, extent


#: placements made lately, by (lengths, lifetimes): a plan refused for the headroom is looked for again
#: after 8 periods, and the same period's placement is not worked out again
_PLACED: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[list[int | None], int]] = {}
_MAX_PLACED = 16

#: how much largest-first's sizes are jittered by (a factor up to 1 + JITTER) in every fourth of the
#: plan's extra tries (the others random orders), and the work those tries may take (their count times
#: the blocks squared): whatever the arena, up to TRIES within _WORK (a period of 62 blocks gets 256
#: tries, ~70 ms on a 2-core EPYC; one of 500, 6 (~100 ms); one over 1,224, none); while it does not fit
#: the pool's headroom, up to MAX_TRIES within _MORE_WORK (38 blocks: 2,048 tries, ~0.3 s)
JITTER = 0.5
TRIES, _WORK = 256, 1_500_000
MAX_TRIES, _MORE_WORK = 2048, 4_000_000


def _tries(blocks: int) -> tuple[int, int]:
    """The tries after the fixed orders: made whatever the arena, and the most while it does not fit."""
    square = max(1, blocks * blocks)
    return min(TRIES, _WORK // square), min(MAX_TRIES, _MORE_WORK // square)


def _place(lengths: list[int], lives: list[int], order: list[int], p: int) -> tuple[list[int | None], int]:
    """Offsets of the blocks in ``order``, each at the lowest offset free over its lifetime (positions
    mod ``p``), and the arena's extent."""
    offsets: list[int | None] = [None] * p
    placed: list[tuple[int, int, int, int]] = []  # (start, lifetime, offset, end)
    extent = 0
    for j in order:
        life = lives[j]
        n = lengths[j]
        busy = sorted(
            [(o, e) for (s, life2, o, e) in placed if (s - j) % p < life or (j - s) % p < life2]
        )  # the ranges of blocks alive at some point of this block's lifetime
        offset = 0
        for lo, hi in busy:
            if offset + n <= lo:
                break
            offset = max(offset, hi)
        placed.append((j, life, offset, offset + n))
        offsets[j] = offset
        extent = max(extent, offset + n)
    return offsets, extent


def _peak(lengths: list[int], lives: list[int], order: list[int], p: int) -> int:
    """The most the blocks in ``order`` hold at once over the period: no placement's extent is less."""
    delta = [0] * (p + 1)
    for j in order:
        n, end = lengths[j], j + lives[j]
        delta[j] += n
        if end <= p:
            delta[end] -= n
        else:
            delta[p] -= n
            delta[0] += n
            delta[end - p] -= n
    top = load = 0
    for t in range(p):
        load += delta[t]
        top = max(top, load)
    return top


def make_plan(
    sizes: list[int], lifetimes: list[int | None], alignment: int, whole: bool = False, fit: int | None = None
) -> _Plan:
    """The placement of one period: ``sizes[j]`` asked at position j, dead ``lifetimes[j]`` requests
    later (None: it outlives the period, not planned); ``whole``: into whole buffers (slots), not one arena;
    ``fit``: the largest arena the pool would take (the search goes on longer while none fits)."""
    return _Plan(sizes, lifetimes, alignment, whole, fit)


def rotate(sizes: list[int], lifetimes: list[int | None], phase: int) -> tuple[list[int], list[int | None]]:
    """The period seen from position ``phase`` on."""
    return sizes[phase:] + sizes[:phase], lifetimes[phase:] + lifetimes[:phase]


def quietest(sizes: list[int], lifetimes: list[int | None]) -> int:
    """The position where the planned blocks alive (those that started before it) weigh least: the
    plan starts there, so the blocks of the step before it, held in other buffers, are fewest."""
    p = len(sizes)
    delta = [0] * (p + 1)
    for j, life in enumerate(lifetimes):
        if life is None:
            continue
        end = j + life
        delta[j] += sizes[j]
        if end <= p:
            delta[end] -= sizes[j]
        else:
            delta[p] -= sizes[j]
            delta[0] += sizes[j]
            delta[end - p] -= sizes[j]
    best, best_load, load = 0, None, 0
    for j in range(p):
        load += delta[j]
        if best_load is None or load < best_load:
            best, best_load = j, load
    return best

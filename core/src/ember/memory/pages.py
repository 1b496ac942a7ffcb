"""Sub-allocation (adaptive, where the backend can address an offset in a buffer): small blocks
carved out of pages, one driver buffer each; a block that goes back merges with the free ranges
beside it, and an empty page is released like a free buffer."""

from __future__ import annotations

from typing import Generic

from ..errors import EmberError
from .strategies import HEADROOM, PAGE_SIZE, SMALL_LIMIT, Raw


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


class _Pages(Generic[Raw]):
    """BufferPool's sub-allocation: carving small blocks from its pages (``_pages``, ``_where``)."""

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
            grow = max(self._page_size(), length)  # a backend's large alignment cannot outgrow the page
            page = _Page(self._new(grow), grow, small)
            self._pages.append(page)
            found = self._carve(length, small)
            if found is None:  # a new page is at least as large as the block: its one free range fits
                raise EmberError(f"BufferPool: a new page of {grow} bytes did not hold a block of {length} bytes")
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
            self._release_driver(page.raw, page.size)
            count += 1
            if excess is not None:
                excess -= page.size
        return count

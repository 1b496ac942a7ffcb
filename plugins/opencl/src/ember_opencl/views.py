"""The sub-buffers (views) the pool carves out of larger buffers, and the order they go back in.

NVIDIA's OpenCL driver (580.159 on an H100) crashes in ``clReleaseMemObject`` when a view that kernels
have used is released while a *younger* view lying inside it is still alive; identical ranges, disjoint
views, unused views and releases in the reverse of the order made never crashed
(``scripts/sub_buffer_probe.py``'s ``arena_*`` and ``three_*`` scenarios, ``three_inside`` the smallest:
plugins/cuda/logs/h100-2026-12-07-fifth/call4). A step plan's arena has exactly such views (one range
serves several blocks of the step at different times), which is what crashed ember there.

So every view is released by one rule: only once no younger view overlapping it is unreleased (the
overlapping ones go youngest first), and a parent buffer only after all its views. A view holds no
memory of its own, so keeping its handle a little longer costs nothing; a dead view waits at most
until the younger views over its range die.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["ViewLedger"]


class ViewLedger:
    """Views by parent in the order made; :meth:`sweep` releases the dead ones the rule lets go."""

    def __init__(self) -> None:
        #: parent handle -> its unreleased views as [start, end, view, dead], in the order made
        self._views: dict[int, list[list[Any]]] = {}
        self._parent_of: dict[int, int] = {}  # view handle -> its parent's handle
        self._held: dict[int, Any] = {}  # parent handle -> the parent, released after its views
        self._dirty: set[int] = set()  # parents with a view marked dead or held since the last sweep
        self.made = self.released = 0
        self.pending = 0  # views marked dead, not yet released
        self.closed = False  # after :meth:`release_all`: every view gone, nothing recorded any more

    def make(self, parent: Any, offset: int, nbytes: int) -> Any:
        """A view of ``nbytes`` at ``offset`` of ``parent`` (pyopencl's sub-region), recorded."""
        view = parent.get_sub_region(offset, nbytes)
        key = parent.int_ptr
        self._views.setdefault(key, []).append([offset, offset + nbytes, view, False])
        self._parent_of[view.int_ptr] = key
        self.made += 1
        return view

    def is_view(self, buf: Any) -> bool:
        """Whether ``buf`` is an unreleased view this ledger made."""
        return buf.int_ptr in self._parent_of

    def dead(self, view: Any) -> None:
        """The pool is done with ``view``: it goes at the first :meth:`sweep` the rule allows."""
        if self.closed:
            return
        key = self._parent_of[view.int_ptr]
        for record in self._views[key]:
            if record[2] is view:
                record[3] = True
                self.pending += 1
                self._dirty.add(key)
                return
        raise KeyError(view)

    def hold(self, parent: Any) -> bool:
        """Whether ``parent`` still has unreleased views: then it is kept, and released by the sweep that
        releases its last view, after it (True); else the caller releases it now (False)."""
        if self.closed:
            return False
        key = parent.int_ptr
        if key not in self._views:
            return False
        self._held[key] = parent
        self._dirty.add(key)
        return True

    @property
    def due(self) -> bool:
        """Whether a sweep may have something to release."""
        return bool(self._dirty)

    @property
    def held_bytes(self) -> int:
        """Bytes of the parents held for their views."""
        return sum(int(p.size) for p in self._held.values())

    def sweep(self, release: Callable[[Any], None]) -> int:
        """Release (through ``release``) every dead view no younger unreleased view overlaps, youngest
        first, and each held parent whose views are all gone; the number of views released."""
        count = 0
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            views = self._views.get(key)
            if views is not None:
                keep: list[list[Any]] = []
                younger: list[tuple[int, int]] = []  # ranges of the younger views still unreleased
                for record in reversed(views):
                    start, end, view, is_dead = record
                    if is_dead and all(end <= a or b <= start for a, b in younger):
                        del self._parent_of[view.int_ptr]
                        release(view)
                        count += 1
                    else:
                        keep.append(record)
                        younger.append((start, end))
                if keep:
                    keep.reverse()
                    self._views[key] = keep
                    continue
                del self._views[key]
            parent = self._held.pop(key, None)
            if parent is not None:
                release(parent)
        self.released += count
        self.pending -= count
        return count

    def release_all(self, release: Callable[[Any], None]) -> None:
        """At the process's exit (the queue finished): every view, alive or dead, youngest first, then the
        held parents. Left to the garbage collector, the views would go in whatever order their last
        references die (the crash's trigger); after this the ledger records nothing."""
        self.closed = True
        for key, views in self._views.items():
            for record in reversed(views):
                release(record[2])
                self.released += 1
            parent = self._held.pop(key, None)
            if parent is not None:
                release(parent)
        for parent in self._held.values():
            release(parent)
        self._views.clear()
        self._parent_of.clear()
        self._held.clear()
        self._dirty.clear()
        self.pending = 0

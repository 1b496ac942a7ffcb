"""Allocating from the driver, and running out of memory: the pool calls ``on_pressure()``,
releases its free buffers, retries once, and then raises :class:`~ember.errors.OutOfMemoryError`
saying what was asked, what is reserved and in use, and what to try."""

from __future__ import annotations

from typing import Generic

from ..errors import OutOfMemoryError
from .strategies import Raw


class _Allocation(Generic[Raw]):
    """BufferPool's driver allocations: the retry under memory pressure and the error after it."""

    def _new(self, size: int) -> Raw:
        try:
            raw = self._allocate(size)
        except MemoryError as first:
            freed = self.cached + sum(s for _, s in self._doomed) + sum(p.size for p in self._pages if not p.used)
            arena = self._arena  # a step plan's arena none of whose blocks is alive goes with empty()
            if arena is not None and not arena.count:
                freed += arena.size
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


def _human(n: int) -> str:
    """``n`` bytes for a message: ``1.5 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"

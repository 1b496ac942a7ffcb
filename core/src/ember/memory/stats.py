"""The ``MemoryStats`` schema (the table in ember.memory's docstring): one pool's counters as
:class:`PoolStats`, a backend's as :class:`MemoryStats`, measured from its pools or not at all."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypedDict

from .strategies import SMALL_LIMIT

if TYPE_CHECKING:  # annotations only: .pool imports this module (a cycle)
    from .pool import BufferPool

__all__ = ["SizeClassStats", "PlanStats", "PoolStats", "MemoryStats", "measured_stats", "unmeasured_stats"]


class SizeClassStats(TypedDict):
    """Buffers of one size: ``in_use`` handed out (by the size counted in use), ``cached`` free for reuse."""

    in_use: int
    cached: int


class PlanStats(TypedDict):
    """adaptive's step plan: its period in requests (0: none now), blocks it served, requests whose range
    was still held, plans dropped and refused, and unexpected requests it found its place again after."""

    period: int
    planned: int
    misses: int
    drops: int
    refusals: int
    rejoins: int


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
    plan: PlanStats
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


class _Counters:
    """BufferPool's counters: its peaks, and its :class:`PoolStats`."""

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
            "plan": {
                "period": self._plan.period if self._plan is not None else 0,
                "planned": self.planned,
                "misses": self.plan_misses,
                "drops": self.plan_drops,
                "refusals": self.plan_refusals,
                "rejoins": self.plan_rejoins,
            },
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

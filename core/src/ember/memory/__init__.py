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
  address an offset in a buffer (``sub_allocate=``: cuda, opencl, wgpu), small blocks are carved out
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

The package's modules, by concern: :mod:`.strategies` (names, tunables, rounding), :mod:`.pool`
(the pool and its blocks), :mod:`.freelists`, :mod:`.pages` (sub-allocation), :mod:`.plan` (adaptive's
step plan: a repeating step's blocks in one buffer) and :mod:`.placement` (where its blocks go), :mod:`.oom`,
:mod:`.stats` (the schema) and :mod:`.registry` (which strategy each device's pools follow, and
which pools each device has: :func:`set_device_strategy`). This module is their index, and holds
:class:`DeviceMemory`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .pool import Block, BufferPool
from .registry import device_pools, device_strategy, set_device_strategy
from .stats import MemoryStats, PlanStats, PoolStats, SizeClassStats, measured_stats, unmeasured_stats
from .strategies import (  # noqa: F401  (Raw re-exported: the type of a raw buffer)
    DEFAULT_CACHE_LIMIT,
    HEADROOM,
    PAGE_SIZE,
    SMALL_LIMIT,
    STRATEGIES,
    Raw,
    fine_size,
    size_class,
)

__all__ = [
    "MemoryStats",
    "PlanStats",
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


class DeviceMemory:
    """``Device.memory``: the strategy of one device's pools, a dry run, and releasing the cache."""

    __slots__ = ("device", "_load")

    def __init__(self, device: str, load: Callable[[], Any]) -> None:
        self.device = device
        self._load = load  # loads the device's backend (which makes its pools)

    def pools(self) -> list[BufferPool[Any]]:
        """The pools the device's backend made (none for a backend ember does not pool)."""
        self._load()
        return device_pools(self.device)

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

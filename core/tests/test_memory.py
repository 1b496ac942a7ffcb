"""ember.memory: the size-class pool against a fake allocator, its counters, and the MemoryStats schema."""

from __future__ import annotations

import gc
import typing

import pytest

import ember as em
from ember.backend import Backend
from ember.memory import BufferPool, MemoryStats, measured_stats, size_class, unmeasured_stats


class FakeDevice:
    """Hands out numbered buffers and remembers which are alive; can be made to run out of memory."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.live: dict[int, int] = {}  # buffer id -> bytes
        self.next_id = 0
        self.calls = 0

    def allocate(self, nbytes: int) -> int:
        self.calls += 1
        if self.capacity is not None and sum(self.live.values()) + nbytes > self.capacity:
            raise MemoryError(f"fake device: {nbytes} bytes do not fit")
        self.next_id += 1
        self.live[self.next_id] = nbytes
        return self.next_id

    def release(self, raw: int) -> None:
        del self.live[raw]  # a double release fails here


def make_pool(device: FakeDevice | None = None, **kw) -> tuple[BufferPool, FakeDevice]:
    device = device or FakeDevice()
    kw.setdefault("strategy", "static")  # the size-class ladder these tests spell out
    return BufferPool(device.allocate, device.release, **kw), device


@pytest.mark.parametrize("n", [1, 15, 16, 17, 255, 256, 257, 1000, 1024, 4097, 65536, 65537, 10**6, 3 * 2**30 + 1])
def test_size_class_bounds(n):
    c = size_class(n)
    assert c >= n and c % 16 == 0
    assert c <= max(n + 255, n * 1.25)


def test_size_classes_are_few_per_power_of_two():
    classes = {size_class(n) for n in range(2**20 + 1, 2**21 + 1, 997)}
    assert len(classes) == 4  # steps of an eighth of 2 MiB between 1 and 2 MiB


def test_freed_block_is_reused_without_the_driver():
    pool, dev = make_pool()
    a = pool.acquire(1000)
    raw = a.raw
    del a
    b = pool.acquire(1010)  # same size class
    assert b.raw == raw and dev.calls == 1
    assert (pool.hits, pool.misses) == (1, 1)


def test_other_size_class_allocates():
    pool, dev = make_pool()
    a = pool.acquire(1000)
    del a
    pool.acquire(5000)
    assert dev.calls == 2 and pool.misses == 2 and pool.hits == 0


def test_counters_and_peaks():
    pool, dev = make_pool()
    a = pool.acquire(1000)  # class 1024
    b = pool.acquire(3000)  # class 3072
    assert (pool.in_use, pool.reserved, pool.cached) == (4096, 4096, 0)
    del a
    assert (pool.in_use, pool.reserved, pool.cached) == (3072, 4096, 1024)
    c = pool.acquire(100)  # class 112: a new buffer, reserved grows past the old peak
    assert pool.reserved == 4096 + 112 and pool.peak_reserved == 4208
    assert pool.peak_in_use == 4096
    del b, c
    assert pool.in_use == 0 and pool.cached == pool.reserved == 4208
    assert sum(dev.live.values()) == pool.reserved  # the pool's byte count is what the driver holds
    pool.reset_peaks()
    assert pool.peak_in_use == 0 and pool.peak_reserved == 4208


def test_stats_break_down_by_size_class():
    pool, _ = make_pool()
    keep = [pool.acquire(1000), pool.acquire(1000)]
    gone = pool.acquire(3000)
    del gone
    stats = pool.stats()
    assert stats["size_classes"] == {1024: {"in_use": 2, "cached": 0}, 3072: {"in_use": 0, "cached": 1}}
    assert stats["in_use_bytes"] == 2048 and stats["cached_bytes"] == 3072
    del keep


def test_cache_limit_releases_what_does_not_fit():
    pool, dev = make_pool(cache_limit=2048)
    blocks = [pool.acquire(1024) for _ in range(3)]
    del blocks
    assert pool.cached == 2048 and len(dev.live) == 2 and pool.frees == 1
    assert pool.reserved == 2048


def test_cache_limit_zero_is_no_pool():
    pool, dev = make_pool(cache_limit=0)
    a = pool.acquire(1024)
    del a
    assert dev.live == {} and pool.reserved == 0 and pool.frees == 1


def test_deferred_release_waits_for_trim():
    pool, dev = make_pool(cache_limit=0, defer_release=True)
    a = pool.acquire(1024)
    del a
    assert len(dev.live) == 1 and pool.reserved == 1024  # not released before the backend says so
    assert pool.trim() == 1
    assert dev.live == {} and pool.reserved == 0


def test_empty_releases_every_free_buffer():
    pool, dev = make_pool()
    keep = pool.acquire(64)
    for n in (1000, 5000, 70000):
        pool.acquire(n)  # freed at once
    assert pool.empty() == 3
    assert list(dev.live.values()) == [64] and pool.cached == 0 and pool.reserved == 64
    del keep


def test_deferred_empty_releases_at_trim():
    pool, dev = make_pool(defer_release=True)
    pool.acquire(1000)
    pool.empty()
    assert len(dev.live) == 1
    pool.trim()
    assert dev.live == {}


def test_avoid_skips_busy_buffers():
    pool, dev = make_pool()
    a, b = pool.acquire(1024), pool.acquire(1024)
    busy = a.raw
    del a, b
    c = pool.acquire(1024, avoid=lambda raw: raw == busy)
    assert c.raw != busy and dev.calls == 2
    d = pool.acquire(1024, avoid=lambda raw: raw == busy)  # only the busy one is left: a new buffer
    assert d.raw != busy and dev.calls == 3


def test_out_of_memory_releases_the_cache_and_retries():
    dev = FakeDevice(capacity=4096)
    calls = []
    pool, _ = make_pool(dev, on_pressure=lambda: calls.append("pressure"))
    a = pool.acquire(3000)
    del a  # 3072 cached
    b = pool.acquire(2000)  # 3072 + 2048 > capacity: the cache goes, then it fits
    assert calls == ["pressure"] and pool.cached == 0 and list(dev.live.values()) == [2048]
    with pytest.raises(MemoryError):
        pool.acquire(4000)  # nothing cached to give back: the driver's error propagates
    assert pool.in_use == 2048
    del b


def test_max_class_caps_rounding():
    pool, dev = make_pool(max_class=100_000)
    a = pool.acquire(99_000)  # the class would be 114688
    assert a.nbytes == 99_008 and dev.live[a.raw] == 99_008


class FinalizedBuffer:
    """A raw buffer whose finalizer frees device memory, as wgpu-py's and pyopencl's do."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.finalized = False

    def __del__(self) -> None:
        self.finalized = True


def test_block_in_a_reference_cycle_returns_a_live_buffer():
    pool = BufferPool(FinalizedBuffer, lambda raw: None)

    class Handle:
        pass

    h = Handle()
    h.block = pool.acquire(512)
    h.me = h  # garbage only the cycle collector finds: it finalizes everything it can reach from there
    del h
    gc.collect()
    assert pool.in_use == 0 and pool.cached == 512
    reused = pool.acquire(512).raw
    assert pool.hits == 1 and not reused.finalized  # the pool kept the buffer alive, so nothing freed it


def _check_schema(stats: MemoryStats) -> None:
    hints = typing.get_type_hints(MemoryStats)
    assert set(stats) == set(hints)
    for key in ("reserved_bytes", "in_use_bytes", "peak_reserved_bytes", "peak_in_use_bytes", "allocations", "frees"):
        assert stats[key] is None or isinstance(stats[key], int), key
    assert isinstance(stats["pools"], dict) and isinstance(stats["note"], str) and isinstance(stats["extra"], dict)


def test_measured_stats_sum_the_pools():
    p1, _ = make_pool()
    p2, _ = make_pool()
    keep = [p1.acquire(1024), p2.acquire(2048)]
    p1.acquire(4096)  # freed: cached
    stats = measured_stats({"device": p1, "staging": p2}, note="n", extra={"submits": 3})
    _check_schema(stats)
    assert stats["in_use_bytes"] == 3072 and stats["reserved_bytes"] == 1024 + 4096 + 2048
    assert stats["allocations"] == 3 and stats["frees"] == 0
    assert stats["pools"]["staging"]["in_use_bytes"] == 2048 and stats["extra"] == {"submits": 3}
    del keep


def test_unmeasured_stats_and_the_backend_default():
    stats = unmeasured_stats("numpy owns it", extra={"peak_rss_bytes": 5})
    _check_schema(stats)
    assert stats["in_use_bytes"] is None and stats["note"] == "numpy owns it"
    default = Backend(em.Device.cpu()).memory_stats()
    _check_schema(default)  # the contract's default spells out the same schema
    assert default["in_use_bytes"] is None and default["note"]


def test_cpu_device_reports_the_schema():
    stats = em.Device.cpu().memory_stats()
    _check_schema(stats)
    assert stats["in_use_bytes"] is None and "numpy" in stats["note"]
    assert stats["extra"]["peak_rss_bytes"] is None or stats["extra"]["peak_rss_bytes"] > 0

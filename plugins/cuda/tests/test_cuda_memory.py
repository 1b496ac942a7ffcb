"""The pool strategies of ember.memory on a real GPU: what each keeps, that the strategy follows
``Device.cuda(i, memory=...)``, and that out of memory names the strategy and what to try. They need an
NVIDIA GPU and CuPy; elsewhere they skip with the reason the backend gives."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from ember_cuda import runtime

import ember as em
from ember.errors import EmberError

pytestmark = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)

MIB = 2**20


@pytest.fixture
def pool():
    dev = em.Device.cuda(0)
    before = dev.memory.strategy
    (pool,) = dev.memory.pools()
    yield dev, pool
    em.Device.cuda(0, memory=before)
    gc.collect()


def _settle(dev):
    gc.collect()
    dev.synchronize()


@pytest.mark.parametrize("strategy", ["adaptive", "static", "exclusive"])
def test_a_tensor_returns_its_buffer_under_each_strategy(pool, strategy):
    dev, p = pool
    assert em.Device.cuda(0, memory=strategy) is dev and p.strategy == strategy
    _settle(dev)
    base = dev.memory_stats()
    x = em.ones((1 << 20,), dtype="float32", device=dev)  # 4 MiB
    np.testing.assert_array_equal(x[:3].numpy(), np.ones(3, np.float32))
    during = dev.memory_stats()
    assert during["in_use_bytes"] - base["in_use_bytes"] >= 4 * MIB and during["strategy"] == strategy
    del x
    _settle(dev)
    after = dev.memory_stats()
    assert after["in_use_bytes"] == base["in_use_bytes"]
    if strategy == "exclusive":
        assert after["reserved_bytes"] == after["in_use_bytes"]  # nothing cached
    else:
        assert after["reserved_bytes"] >= after["in_use_bytes"] + 4 * MIB  # kept for the next request
        y = em.ones((1 << 20,), dtype="float32", device=dev)
        assert dev.memory_stats()["allocations"] == after["allocations"]  # reused, no cudaMalloc
        del y


def test_adaptive_training_reserves_close_to_its_peak(pool):
    dev, p = pool
    em.Device.cuda(0, memory="adaptive")
    _settle(dev)
    p.reset_peaks()
    ad = dev.autodiff()
    model = em.nn.Sequential(em.nn.Linear(512, 2048), em.nn.ReLU(), em.nn.Linear(2048, 10)).to(ad)
    opt = em.optim.AdamW(model.parameters(), lr=1e-3)
    x = em.random.normal(shape=(256, 512), key=em.random.key(0), device=ad)
    y = em.tensor([i % 10 for i in range(256)], device=ad)
    for _ in range(10):
        opt.zero_grad()
        em.cross_entropy(model(x), y).backward()
        opt.step()
    _settle(dev)
    stats = dev.memory_stats()
    assert stats["peak_reserved_bytes"] <= 1.05 * stats["peak_in_use_bytes"], stats


def test_out_of_memory_names_the_strategy_and_what_to_try(pool):
    dev, _ = pool
    em.Device.cuda(0, memory="static")
    total = dev.memory_stats()["extra"]["driver_total_bytes"]
    expected = r"out of memory allocating .*reserved \(static\).*memory='exclusive'"
    with pytest.raises(MemoryError, match=expected) as info:
        em.zeros((total // 2,), dtype="float32", device=dev).realize()  # twice the GPU's memory (zeros is deferred)
    assert isinstance(info.value, EmberError)


def test_adaptive_carves_small_tensors_out_of_one_page(pool):
    """Small blocks are pointer + offset views of one cudaMalloc'd page: few driver allocations, and
    each tensor keeps its own values (the views do not overlap)."""
    dev, p = pool
    em.Device.cuda(0, memory="adaptive")
    _settle(dev)
    peak = em.ones((1 << 20,), dtype="float32", device=dev).realize()  # a 4 MiB peak: pages fit in the headroom
    del peak
    dev.memory.empty_cache()  # nothing in the free lists: every request below is carved
    before = dev.memory_stats()
    carved = p.carved
    xs = [em.full((64,), float(i), dtype="float32", device=dev).realize() for i in range(32)]  # 256 bytes each
    stats = dev.memory_stats()
    assert p.carved - carved >= 32
    assert stats["allocations"] - before["allocations"] <= 2, stats
    for i, x in enumerate(xs):
        np.testing.assert_array_equal(x.numpy(), np.full(64, float(i), np.float32))
    del xs, x  # the loop variable holds the last tensor too
    _settle(dev)
    assert dev.memory_stats()["in_use_bytes"] == before["in_use_bytes"]

"""memory_stats() follows ember.memory.MemoryStats on every device, and memory returns to its baseline
once tensors are dropped (where the backend can tell)."""

from __future__ import annotations

import gc
from typing import Any

import pytest

import ember as em

#: keys a backend's ``memory_stats()`` may use for the bytes its live tensors hold
IN_USE_KEYS = ("in_use_bytes", "bytes_in_use", "allocated_bytes", "in_use")

#: the MemoryStats schema, written out here so that the suite checks it rather than reads it from core
COUNTERS = ("reserved_bytes", "in_use_bytes", "peak_reserved_bytes", "peak_in_use_bytes", "allocations", "frees")
POOL_COUNTERS = (
    "reserved_bytes",
    "in_use_bytes",
    "cached_bytes",
    "peak_reserved_bytes",
    "peak_in_use_bytes",
    "hits",
    "misses",
    "frees",
)


def _in_use(device: em.Device) -> tuple[str | None, dict]:
    stats = device.memory_stats()
    for key in IN_USE_KEYS:
        if isinstance(stats.get(key), int):
            return key, stats
    return None, stats


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def test_memory_stats_is_a_dict(device):
    stats = device.memory_stats()
    assert isinstance(stats, dict), f"memory_stats() returned {type(stats).__name__}, expected a dict"


def test_memory_stats_schema(device):
    stats = device.memory_stats()
    where = f"{device.kind}:{device.index} memory_stats()"
    missing = [k for k in (*COUNTERS, "pools", "note", "extra") if k not in stats]
    assert not missing, f"{where} lacks {', '.join(missing)} (ember.memory.MemoryStats)"
    for key in COUNTERS:
        assert stats[key] is None or _is_count(stats[key]), f"{where}[{key!r}] = {stats[key]!r}: not None or a count"
    assert isinstance(stats["note"], str), f"{where}['note'] is {type(stats['note']).__name__}, not str"
    assert isinstance(stats["extra"], dict), f"{where}['extra'] is {type(stats['extra']).__name__}, not dict"
    assert isinstance(stats["pools"], dict), f"{where}['pools'] is {type(stats['pools']).__name__}, not dict"
    if stats["in_use_bytes"] is None:
        assert stats["note"], f"{where} reports no byte counts and no note saying why"
        return
    assert stats["peak_in_use_bytes"] >= stats["in_use_bytes"], f"{where}: peak in use below in use"
    assert stats["reserved_bytes"] >= stats["in_use_bytes"], f"{where}: reserves less than it has in use"
    assert stats["peak_reserved_bytes"] >= stats["reserved_bytes"], f"{where}: peak reserved below reserved"
    in_pools = 0
    for name, pool in stats["pools"].items():
        assert isinstance(name, str) and isinstance(pool, dict), f"{where}['pools'][{name!r}]"
        for key in POOL_COUNTERS:
            assert _is_count(pool.get(key)), f"{where}['pools'][{name!r}][{key!r}] = {pool.get(key)!r}"
        limit = pool.get("cache_limit_bytes", "missing")
        assert limit is None or _is_count(limit), f"{where}['pools'][{name!r}]['cache_limit_bytes'] = {limit!r}"
        classes = pool.get("size_classes")
        assert isinstance(classes, dict), f"{where}['pools'][{name!r}]['size_classes'] is not a dict"
        held = 0
        for size, count in classes.items():
            assert _is_count(size) and _is_count(count.get("in_use")) and _is_count(count.get("cached")), (
                f"{where}['pools'][{name!r}]['size_classes'][{size!r}] = {count!r}"
            )
            held += size * count["in_use"]
        assert held == pool["in_use_bytes"], f"{where}: pool {name!r} size classes hold {held}, in use says so"
        in_pools += pool["in_use_bytes"]
    if stats["pools"]:
        assert in_pools == stats["in_use_bytes"], f"{where}: pools hold {in_pools} in use, the total says otherwise"


def test_memory_returns_to_baseline(device):
    key, stats = _in_use(device)
    if key is None:
        note = f"; the backend says: {stats['note']}" if isinstance(stats.get("note"), str) else ""
        pytest.skip(
            f"{device.kind}:{device.index} memory_stats() does not count bytes in use "
            f"({', '.join(IN_USE_KEYS)}: absent or None){note}"
        )
    gc.collect()
    device.synchronize()
    baseline = device.memory_stats()[key]
    x = em.ones((512, 1024), device=device)
    y = (x @ x.mT).sum(axis=0) + x[:, :512].exp().sum(axis=1)
    device.synchronize()
    during = device.memory_stats()
    assert during[key] > baseline, f"{key} did not grow while 2 MiB of tensors were alive ({baseline} -> {during[key]})"
    if key == "in_use_bytes" and isinstance(during.get("peak_in_use_bytes"), int):
        assert during["peak_in_use_bytes"] >= during[key], "peak_in_use_bytes is below in_use_bytes"
    del x, y
    gc.collect()
    device.synchronize()
    after = device.memory_stats()[key]
    assert after <= baseline, f"{key} is {after} after the tensors were dropped, above the baseline {baseline}"


def _stats(device: em.Device, key: str) -> tuple[int, int | None]:
    gc.collect()
    device.synchronize()
    stats = device.memory_stats()
    reserved = stats.get("reserved_bytes")
    return stats[key], reserved if isinstance(reserved, int) else None


def _trainer(device: em.Device, batch: int, features: int, hidden: int, optimizer: Any) -> Any:
    """An MLP classifier (``features`` -> ``hidden`` -> 10) and a fixed batch on ``device``: a function
    that runs one training step with ``optimizer(parameters)`` and returns its loss."""
    x = em.random.normal(shape=(batch, features), key=em.random.key(0), device=device, dtype=em.float32)
    y = em.tensor([i % 10 for i in range(batch)], device=device)
    model = em.nn.Sequential(em.nn.Linear(features, hidden), em.nn.ReLU(), em.nn.Linear(hidden, 10)).to(device)
    opt = optimizer(model.parameters())

    def step() -> Any:
        opt.zero_grad()
        loss = em.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def test_fifty_training_steps_do_not_leak(ad_device):
    """An MLP trained 50 steps with AdamW: memory in use is the same after step 50 as after step 5
    (autodiff graphs and temporaries are freed each step), reserved memory stops growing after the
    first steps, and everything goes back once the model and optimizer are dropped."""
    key, stats = _in_use(ad_device)
    if key is None:
        note = f"; the backend says: {stats['note']}" if isinstance(stats.get("note"), str) else ""
        pytest.skip(f"{ad_device.kind}:{ad_device.index} memory_stats() does not count bytes in use{note}")
    baseline, _ = _stats(ad_device, key)
    step = _trainer(ad_device, 16, 32, 64, lambda params: em.optim.AdamW(params, lr=1e-3))
    seen = []
    for _ in range(50):
        loss = step()
        del loss
        seen.append(_stats(ad_device, key))
    in_use = [s[0] for s in seen]
    assert in_use[-1] == in_use[4], f"{key} grew from {in_use[4]} after step 5 to {in_use[-1]} after step 50: {in_use}"
    reserved = [s[1] for s in seen]
    if reserved[0] is not None:
        # reserved memory stops growing after the first steps (a pool may give some back later)
        assert max(reserved[10:]) <= max(reserved[:10]), f"reserved grew after step 10: {reserved}"
    del step  # the model, its optimizer and the batch
    after, _ = _stats(ad_device, key)
    assert after <= baseline, f"{key} is {after} once the model and optimizer are gone, above the baseline {baseline}"


def test_a_read_back_between_steps_does_not_unsettle_the_pool(ad_device):
    """A training loop that reads its loss back now and then (steps 8 and 13 of 24): once the first steps
    have passed, the device makes at most one driver allocation per read-back and none in the last eight
    steps. (A read-back used to drop an adaptive pool's step plan, and it then made and released 3-13
    buffers every step from there on: opencl and wgpu, views or whole buffers, 4 MiB weight gradients.)"""
    stats = ad_device.memory_stats()
    if not _is_count(stats.get("allocations")):
        pytest.skip(f"{ad_device.kind}:{ad_device.index} memory_stats() does not count driver allocations")
    if stats.get("strategy") == "exclusive":
        pytest.skip("memory='exclusive' allocates every buffer from the driver by design")
    step = _trainer(ad_device, 256, 2048, 512, lambda params: em.optim.SGD(params, lr=1e-2))
    allocations = []
    for i in range(24):
        loss = step()
        if i in (8, 13):
            loss.numpy()
        del loss
        allocations.append(ad_device.memory_stats()["allocations"])
    if allocations[-1] == 0:
        pytest.skip(f"{ad_device.kind}:{ad_device.index} makes no driver allocations it counts")
    assert allocations[-1] - allocations[7] <= 2, f"driver allocations per step after step 8's read-back: {allocations}"
    assert allocations[-1] == allocations[-8], f"driver allocations still growing in the last steps: {allocations}"

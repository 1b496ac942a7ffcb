"""Memory returns to its baseline once tensors are dropped (where the backend can tell)."""

from __future__ import annotations

import gc

import pytest

import ember as em

#: keys a backend's ``memory_stats()`` may use for the bytes its live tensors hold
IN_USE_KEYS = ("in_use_bytes", "bytes_in_use", "allocated_bytes", "in_use")


def _in_use(device: em.Device) -> tuple[str | None, dict]:
    stats = device.memory_stats()
    for key in IN_USE_KEYS:
        if isinstance(stats.get(key), int):
            return key, stats
    return None, stats


def test_memory_stats_is_a_dict(device):
    stats = device.memory_stats()
    assert isinstance(stats, dict), f"memory_stats() returned {type(stats).__name__}, expected a dict"


def test_memory_returns_to_baseline(device):
    key, stats = _in_use(device)
    if key is None:
        note = f"; the backend says: {stats['note']}" if isinstance(stats.get("note"), str) else ""
        pytest.skip(
            f"{device.kind}:{device.index} memory_stats() reports no bytes-in-use counter "
            f"(none of {', '.join(IN_USE_KEYS)}; keys: {', '.join(sorted(stats)) or 'none'}){note}"
        )
    gc.collect()
    device.synchronize()
    baseline = device.memory_stats()[key]
    x = em.ones((512, 1024), device=device)
    y = (x @ x.mT).sum(axis=0) + x[:, :512].exp().sum(axis=1)
    device.synchronize()
    during = device.memory_stats()[key]
    assert during > baseline, f"{key} did not grow while 2 MiB of tensors were alive ({baseline} -> {during})"
    del x, y
    gc.collect()
    device.synchronize()
    after = device.memory_stats()[key]
    assert after <= baseline, f"{key} is {after} after the tensors were dropped, above the baseline {baseline}"

"""adaptive's step plan (ember.memory.plan) on the recorded W3 / W4 traces: driver calls per step counted
from the fake driver (no wall clock), reserved within 1.05x of in use at every step including the switch-over,
the fallback when steps stop repeating, and nothing leaked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_memory_strategies import FakeDevice

from ember.memory import BufferPool

TRACES = Path(__file__).parent / "memory_traces"


def paged() -> tuple[BufferPool, FakeDevice]:
    """A pool over the fake device whose blocks are (page, offset, nbytes) views; ``dev.views`` counts the
    views made and ``dev.dropped`` those the pool dropped (each made view is dropped once its buffer goes)."""
    dev = FakeDevice()
    dev.views = dev.dropped = 0

    def view(page, offset, nbytes):
        dev.views += 1
        return (page, offset, nbytes, dev.views)

    def drop(raw):
        dev.dropped += 1

    pool = BufferPool(
        dev.allocate, dev.release, strategy="adaptive", cache_limit=None, sub_allocate=view, sub_release=drop
    )
    return pool, dev


def steps_of(trace: dict) -> list[list[list[int]]]:
    """The trace's events cut at its step_starts (event indices)."""
    starts = trace["step_starts"] + [len(trace["events"])]
    return [trace["events"][a:b] for a, b in zip(starts, starts[1:])]


def run_steps(
    pool: BufferPool, dev: FakeDevice, steps: list[list[list[int]]], live: dict, scale: int = 1
) -> list[dict]:
    """Replay steps; per step: driver allocations and frees, and the peaks of reserved and in use."""
    rows = []
    for events in steps:
        row = {"allocs": dev.allocs, "frees": dev.releases, "reserved": 0, "in_use": 0}
        for event in events:
            if len(event) == 2:
                live[event[0]] = pool.acquire(event[1] * scale)
            else:
                live.pop(event[0], None)
            row["reserved"] = max(row["reserved"], pool.reserved)
            row["in_use"] = max(row["in_use"], pool.in_use)
            assert pool.reserved <= 1.05 * pool.peak_in_use, (pool.reserved, pool.peak_in_use)
        row["allocs"] = dev.allocs - row["allocs"]
        row["frees"] = dev.releases - row["frees"]
        rows.append(row)
    return rows


@pytest.mark.parametrize("name", ["w3_batch64_steps.json", "w4_cpu_steps.json"])
def test_a_repeating_step_runs_without_driver_calls_within_the_headroom(name):
    trace = json.loads((TRACES / name).read_text())
    pool, dev = paged()
    live: dict = {}
    rows = run_steps(pool, dev, steps_of(trace), live)
    assert pool.planned > 0 and pool.plan_drops == 0
    assert [r["allocs"] + r["frees"] for r in rows[5:]] == [0] * (len(rows) - 5)  # steady state: none
    base_calls = sum(r["allocs"] + r["frees"] for r in rows[:2])
    assert base_calls > 0  # the first steps do call the driver: the plan is what removed the calls
    for r in rows:  # every step, the switch-over included
        assert r["reserved"] <= 1.05 * pool.peak_in_use, r
    assert pool.peak_reserved <= 1.05 * pool.peak_in_use
    live.clear()
    assert pool.in_use == 0 and pool.reserved == sum(dev.live.values())  # nothing leaked
    pool.empty()
    assert dev.live == {} and pool.reserved == 0  # the arena goes back once its blocks are dead
    assert dev.dropped == dev.views  # and every view of it (made once per position, reused every step)


def test_a_plan_that_would_pass_the_headroom_is_not_made():
    """W3 at batch 16 keeps ~1.7 MiB of blocks across steps (outside any plan) beside a 16.7 MiB step: the
    arena beside them would reserve ~1.09x the peak in use, so the pool stays with its ordinary paths."""
    trace = json.loads((TRACES / "w3_batch16.json").read_text())
    pool, dev = paged()
    live = {}
    for event in trace["events"]:
        if len(event) == 2:
            live[event[0]] = pool.acquire(event[1])
        else:
            live.pop(event[0], None)
        assert pool.reserved <= 1.05 * pool.peak_in_use
    assert pool.planned == 0 and pool.plan_refusals >= 1
    live.clear()
    assert pool.in_use == 0


@pytest.mark.parametrize("name", ["w3_batch64_steps.json", "w4_cpu_steps.json"])
def test_the_plan_is_dropped_when_steps_stop_repeating(name):
    """After the plan forms, a new batch size (every request twice as large) and then an eval-like step (the
    first half of a step, forward only, nothing kept): the plan goes, the pool records again, reserved stays
    within its headroom and everything comes back."""
    trace = json.loads((TRACES / name).read_text())
    steps = steps_of(trace)
    pool, dev = paged()
    live: dict = {}
    run_steps(pool, dev, steps, live)
    assert pool.planned > 0
    live.clear()
    base = pool.in_use
    planned = pool.planned
    ids = max(e[0] for e in trace["events"]) + 1
    shifted = [[[e[0] + ids, *e[1:]] for e in step] for step in steps[:2]]
    rows = run_steps(pool, dev, shifted, live, scale=2)
    assert pool.plan_drops >= 1 and pool.planned == planned  # nothing more served from the old plan
    assert all(r["reserved"] <= 1.05 * pool.peak_in_use for r in rows)
    live.clear()
    half = [e for e in steps[0][: len(steps[0]) // 2] if len(e) == 2]
    for event in half:  # an eval step: forward only, each result dropped at once
        pool.acquire(event[1])
    assert pool.in_use == base == 0 and pool.reserved == sum(dev.live.values())
    pool.empty()
    assert dev.live == {} and pool.reserved == 0


def test_an_arena_the_device_cannot_hold_leaves_the_ordinary_paths_serving():
    """A device that refuses any buffer over 8 MiB (the W4 step's arena is ~21 MiB, its largest block 4 MiB):
    no error reaches the program, the plan is refused and every request is served as without a plan."""
    trace = json.loads((TRACES / "w4_cpu_steps.json").read_text())
    pool, dev = paged()
    allocate = dev.allocate

    def refuse_large(nbytes: int) -> int:
        if nbytes > 8 << 20:
            raise MemoryError(f"fake device: {nbytes} bytes refused")
        return allocate(nbytes)

    pool._allocate = refuse_large
    live: dict = {}
    run_steps(pool, dev, steps_of(trace), live)
    assert pool.planned == 0 and pool.plan_refusals >= 1 and max(dev.live.values()) <= 8 << 20
    live.clear()
    assert pool.in_use == 0 and pool.reserved == sum(dev.live.values())

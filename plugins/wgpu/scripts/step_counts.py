"""What one training step asks of the WGPU runtime: dispatches, submits, parameter-arena writes,
waits, bind groups and buffers created, and Python calls (all, and those in ember_wgpu), per step.

Deterministic counts where wall-clock on a loaded host is noise. Run from the repository root:

    PYTHONPATH=$PYTHONPATH:. python plugins/wgpu/scripts/step_counts.py W2 W3 W4 --sizes quick

``--trace 40`` runs that many steps back to back, synchronized only after the warm-up (as
``benchmarks.spin`` does; ``--sync``: after each step, the warm-up's too, as the runner times
them; ``--check-first``: a check-size step before, as the runner), and prints each step's
wall, main-thread and whole-process CPU time beside what it asked of the runtime and the memory
pool (a plan dropped or refused, buffers made): a step that turns slow mid-run shows which counter
moved with it, and a wall time far above the main thread's CPU says the host waited (a sync, a
descheduled thread, another thread's spinning).

``--cprofile 20`` profiles that many synchronized steps after the warm-up with cProfile and prints
the functions by own time and by calls per step (to set beside the same on another adapter).

``--twins`` times synchronized steps alternating rounds of dispatches bound as the pool's buffers
ask (a read-write twin only where one driver buffer is read and written, as a step plan's arena
makes it) and of every dispatch bound read-write, and prints each one's median step and twin
dispatches per step: what a twin kernel costs the device (run beside ``EMBER_MEMORY=static``).

``--time 0,32,32:0`` times synchronized steps instead, alternating rounds of the runtime's
submit settings given in one process (``EVERY``, ``EVERY:GROUPS`` or ``EVERY:GROUPS:IDLE_US``:
``Runtime.set_submit_every``; 0 = submit at sync points only; IDLE_US: poll for an idle device at most
that often and submit to it then, 0 or absent: no polls), and prints each setting's median step time
(wall, this process's CPU time and the main thread's CPU time: the host's recording).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any


def _runtime_counters(rt: Any) -> dict[str, int]:
    pool = {"misses": rt.pool.misses}
    return {
        "dispatches": rt.dispatches,
        "submits": rt.submits,
        "arena_writes": rt.arena_writes,
        "waits": rt.waits,
        "pool_misses": int(pool.get("misses", 0)),
    }


def _case(name: str, device: str, sizes: str, batch: int | None) -> tuple[Any, Any, Counter[str], dict[str, int]]:
    """Workload ``name``'s ember step on ``device``: (the case, its runtime, a counter of bind groups
    the runtime makes from now on, the size it runs at)."""
    import ember as em
    from benchmarks.runner import WORKLOADS

    module = WORKLOADS[name]
    dev = em.Device(device)
    size = dict(module.SIZES[sizes])
    if batch is not None:
        size["batch"] = batch
    case = module.ember(dev, size)
    rt = dev.backend.rt
    made: Counter[str] = Counter()
    create_bg = rt.device.create_bind_group

    def counted_bg(*a: Any, **k: Any) -> Any:
        made["bind_groups"] += 1
        return create_bg(*a, **k)

    rt.device.create_bind_group = counted_bg
    return case, rt, made, size


def measure(name: str, device: str, sizes: str, batch: int | None, warmup: int, steps: int) -> dict[str, float]:
    """Per-step counters of workload ``name`` (averaged over ``steps`` after ``warmup``)."""
    import ember_wgpu

    case, rt, made, _ = _case(name, device, sizes, batch)
    for _ in range(warmup):
        out = case.step()
        case.sync()
        del out
    before = _runtime_counters(rt)
    made.clear()
    calls: Counter[str] = Counter()
    plugin = os.path.dirname(ember_wgpu.__file__) + os.sep

    def prof(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls["python"] += 1
            if frame.f_code.co_filename.startswith(plugin):
                calls["ember_wgpu"] += 1
        elif event == "c_call":
            calls["c"] += 1

    gc.collect()
    sys.setprofile(prof)
    try:
        for _ in range(steps):
            out = case.step()
            case.sync()
            del out
    finally:
        sys.setprofile(None)
    after = _runtime_counters(rt)
    row: dict[str, float] = {k: (after[k] - before[k]) / steps for k in after}
    row["bind_groups_made"] = made["bind_groups"] / steps
    for k, v in calls.items():
        row[f"calls_{k}"] = v / steps
    return row


def trace(
    name: str, device: str, sizes: str, batch: int | None, warmup: int, steps: int, sync: bool, check_first: bool
) -> None:
    """Each of ``steps`` steps after ``warmup`` (synchronized each with ``sync``, else only after the
    warm-up): its wall, main-thread and process CPU time (other threads spinning show as the
    difference), and the runtime's and pool's counters it moved."""
    if check_first:  # as the runner: one step at the check size, its result read back, before the case
        check, _, _, _ = _case(name, device, "check", None)
        check.step()
        check.sync()
        check.result()
        del check
    case, rt, made, _ = _case(name, device, sizes, batch)
    pool = rt.pool
    keys = ("misses", "planned", "plan_drops", "plan_refusals", "plan_misses")

    def counters() -> dict[str, int]:
        row = _runtime_counters(rt)
        row.update({f"pool_{k}": int(getattr(pool, k, 0)) for k in keys})
        row["bind_groups_made"] = made["bind_groups"]
        return row

    for _ in range(warmup):  # as the runner's warm-up with --sync (benchmarks.harness.time_case)
        case.step()
        if sync:
            case.sync()
    case.sync()
    gc.collect()
    for i in range(steps):
        before, t, p, w = counters(), time.thread_time(), time.process_time(), time.perf_counter()
        case.step()
        if sync:
            case.sync()
        cpu, proc, wall = time.thread_time() - t, time.process_time() - p, time.perf_counter() - w
        after = counters()
        moved = " ".join(f"{k}={after[k] - before[k]}" for k in after if after[k] != before[k])
        print(
            f"{name} step {i}: {wall * 1e3:.2f} ms wall, {cpu * 1e3:.2f} ms main-thread CPU, "
            f"{proc * 1e3:.2f} ms process CPU; {moved}"
        )
    case.sync()


def profile(name: str, device: str, sizes: str, batch: int | None, warmup: int, steps: int) -> None:
    """cProfile over ``steps`` synchronized steps after ``warmup``: own time and calls per step."""
    import cProfile
    import pstats

    case, _, _, size = _case(name, device, sizes, batch)
    for _ in range(warmup):
        case.step()
        case.sync()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        case.step()
        case.sync()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    rows = [
        (tt / steps * 1e3, nc / steps, f"{os.path.basename(f)}:{line}({fn})")
        for (f, line, fn), (_, nc, tt, _, _) in stats.items()
    ]
    total = sum(r[0] for r in rows)
    print(f"{name} {size}: {total:.2f} ms/step own time under cProfile, {sum(r[1] for r in rows):.0f} calls/step")
    for title, key in (("own time", 0), ("calls", 1)):
        print(f"  by {title}:")
        for ms, calls, where in sorted(rows, key=lambda r: -r[key])[:25]:
            print(f"    {ms:8.3f} ms {calls:8.1f} calls  {where}")


def time_settings(
    name: str, device: str, sizes: str, batch: int | None, settings: list[str], rounds: int, steps: int
) -> None:
    """Median step time of workload ``name`` under each ``submit_every`` in ``settings``, rounds alternated."""
    case, rt, _, size = _case(name, device, sizes, batch)
    for _ in range(3):
        case.step()
        case.sync()
    wall: dict[str, list[float]] = {s: [] for s in settings}
    cpu: dict[str, list[float]] = {s: [] for s in settings}
    host: dict[str, list[float]] = {s: [] for s in settings}
    subs: dict[str, int] = {s: 0 for s in settings}
    idle: dict[str, int] = {s: 0 for s in settings}
    from ember_wgpu.settings import submit_groups

    default_groups = submit_groups()  # the start-up setting (an earlier workload may have changed rt's)
    for _ in range(rounds):
        for s in settings:
            every, _, rest = s.partition(":")
            groups, _, idle_us = rest.partition(":")
            rt.set_submit_every(int(every), int(groups) if groups else default_groups, float(idle_us or 0))
            case.step()
            case.sync()
            before, idle_before = rt.submits, rt.idle_submits
            for _ in range(steps):
                t, c, h = time.perf_counter(), time.process_time(), time.thread_time()
                case.step()
                case.sync()
                wall[s].append(time.perf_counter() - t)
                cpu[s].append(time.process_time() - c)
                host[s].append(time.thread_time() - h)
            subs[s] += rt.submits - before
            idle[s] += rt.idle_submits - idle_before
    for s in settings:
        print(
            f"{name} {size} submit={s}: median {statistics.median(wall[s]) * 1e3:.3f} ms wall, "
            f"{statistics.median(cpu[s]) * 1e3:.3f} ms process CPU, "
            f"{statistics.median(host[s]) * 1e3:.3f} ms main-thread CPU, "
            f"{subs[s] / (rounds * steps):.1f} submits/step, "
            f"{idle[s] / (rounds * steps):.1f} of them to an idle device ({rounds}x{steps} steps)"
        )


def time_twins(name: str, device: str, sizes: str, batch: int | None, rounds: int, steps: int) -> None:
    """Median synchronized step of workload ``name`` with dispatches bound as the pool's buffers ask
    and with every dispatch bound read-write (its twin), rounds alternated."""
    case, rt, _, size = _case(name, device, sizes, batch)
    asked = rt.bound_as
    twins_only: Callable[[Any, Any], Any] = lambda pipe, buffers: rt.twin(pipe)  # noqa: E731
    record = rt.dispatch
    twins = Counter[str]()

    def counted(pipe: Any, params: bytes, buffers: Any, groups: Any, name: str = "") -> None:
        record(pipe, params, buffers, groups, name)
        found = rt._bg_cache.get((pipe.layout_key, len(params), tuple(b.uid for b in buffers)))
        twins[mode] += bool(found and found[1])

    rt.dispatch = counted
    wall: dict[str, list[float]] = {"as asked": [], "all twins": []}
    for _ in range(rounds):
        for mode in wall:
            rt.bound_as = asked if mode == "as asked" else twins_only
            rt._bg_cache.clear()  # its entries remember which pipeline they were made for
            rt._bg_by_uid.clear()
            case.step()
            case.sync()
            twins[mode] = 0
            planned, misses = rt.pool.planned, rt.pool.misses
            for _ in range(steps):
                t = time.perf_counter()
                case.step()
                case.sync()
                wall[mode].append(time.perf_counter() - t)
            made = (rt.pool.misses - misses) / steps
            print(
                f"  round {mode}: {statistics.median(wall[mode][-steps:]) * 1e3:.3f} ms, planned "
                f"{(rt.pool.planned - planned) / steps:.0f} and driver allocations {made:.1f} a step"
            )
    for mode, times in wall.items():
        print(
            f"{name} {size} memory={rt.pool.strategy} {mode}: median {statistics.median(times) * 1e3:.3f} ms "
            f"({min(times) * 1e3:.3f} min), {twins[mode] / steps:.0f} twin dispatches/step ({rounds}x{steps} steps)"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workloads", nargs="+")
    p.add_argument("--device", default="wgpu:0")
    p.add_argument("--sizes", default="quick")
    p.add_argument("--batch", type=int)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--trace", type=int, help="steps to trace one by one, unsynchronized after the warm-up")
    p.add_argument("--sync", action="store_true", help="--trace: synchronize after every step (as the runner)")
    p.add_argument("--check-first", action="store_true", help="--trace: a check-size step first, as the runner")
    p.add_argument("--cprofile", type=int, help="steps to profile with cProfile, synchronized, after the warm-up")
    p.add_argument("--time", help="comma-separated submit settings to time, alternated (e.g. 0,32,32:0)")
    p.add_argument("--twins", action="store_true", help="time steps bound as asked vs every dispatch read-write")
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args(argv)
    if args.trace:
        for name in args.workloads:
            trace(name, args.device, args.sizes, args.batch, args.warmup, args.trace, args.sync, args.check_first)
        return 0
    if args.cprofile:
        for name in args.workloads:
            profile(name, args.device, args.sizes, args.batch, args.warmup, args.cprofile)
        return 0
    if args.twins:
        for name in args.workloads:
            time_twins(name, args.device, args.sizes, args.batch, args.rounds, args.steps)
        return 0
    if args.time:
        settings = args.time.split(",")
        for name in args.workloads:
            time_settings(name, args.device, args.sizes, args.batch, settings, args.rounds, args.steps)
        return 0
    for name in args.workloads:
        row = measure(name, args.device, args.sizes, args.batch, args.warmup, args.steps)
        print(name, " ".join(f"{k}={v:.1f}" for k, v in row.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

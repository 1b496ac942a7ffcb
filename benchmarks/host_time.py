"""Host time per workload step where host work dominates: a tiny size on cpu, optionally on the
core path a GPU backend takes (``--like-gpu``, as :mod:`benchmarks.host_calls`).

``python -m benchmarks.host_time W3 --like-gpu [--batch 2] [--rounds 7] [--steps 200]``

Builds the ember case, warms it up, then times ``--rounds`` rounds of ``--steps`` steps (each
step followed by the device's synchronize) and prints the median and the minimum over rounds
of the mean step time in microseconds. Kernels of a tiny size cost little, so a change to the
core's per-op work shows; on a shared machine compare runs made alternately, not one pair.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from typing import Any

from .host_calls import prepared
from .runner import WORKLOADS


def time_rounds(step: Any, sync: Any, rounds: int, steps: int, clock: Any = time.perf_counter) -> list[float]:
    """Mean seconds per step of each round of ``steps`` steps (the collector off while timing),
    by ``clock`` (``time.thread_time``: this thread's CPU time, which other processes disturb less)."""
    out = []
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            t0 = clock()
            for _ in range(steps):
                r = step()
                sync()
                del r
            out.append((clock() - t0) / steps)
            gc.collect()
    finally:
        if enabled:
            gc.enable()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.host_time", description=__doc__.split("\n\n")[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--device", default="cpu")
    p.add_argument("--sizes", default="quick", help="size set of the workload (quick, cpu, gpu, check)")
    p.add_argument("--batch", type=int, help="override the size's batch")
    p.add_argument("--size", action="append", help="override one size key: KEY=INT (repeatable)")
    p.add_argument("--fusion", choices=("0", "1"), help="lazy layer off/on (default: the device's setting)")
    p.add_argument("--like-gpu", action="store_true", help="on cpu, take a GPU backend's core path (host_calls)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument(
        "--clock",
        choices=("wall", "thread"),
        default="thread",
        help="thread: this thread's CPU time (default; steadier on a shared machine, kernels run on it too "
        "where the backend's threads are 1), wall: perf_counter",
    )
    args = p.parse_args(argv)

    with prepared(args) as (device, size, case):
        clock = time.thread_time if args.clock == "thread" else time.perf_counter
        times = time_rounds(case.step, case.sync, args.rounds, args.steps, clock)
    us = sorted(t * 1e6 for t in times)
    path = " like-gpu" if args.like_gpu else ""
    print(
        f"{args.workload} {device} {size}{path} ({args.clock} clock): median {statistics.median(us):.1f} us/step, "
        f"min {us[0]:.1f} (rounds: {' '.join(f'{t:.0f}' for t in us)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""GPU time per kernel of a workload's ember step on an OpenCL device, from queue profiling events:
is a step bound by its kernels or by the host that queues them?

    python plugins/opencl/scripts/kernel_time.py W3 --device opencl:0 --sizes gpu [--steps 10] [--jit]
        [--by-grid] [--ops matmul] [--gaps 15] [--warm 3]

Opens the device with a profiling queue (pyopencl's CommandQueue wrapped before ember-opencl makes
its queue), records the event of every kernel ember-opencl launches (programs build before their
first launch here: EMBER_OPENCL_BUILD_THREADS=0), and prints per kernel name: launches per step,
GPU µs per step, and the sum beside the step's wall time. ``--jit`` times the em.jit replay instead
(its launches go through the same queue); ``--by-grid`` splits each name by launch grid; ``--ops matmul,...``
adds the GPU time of each call of those ops by operand shapes and strides; ``--gaps N`` the device's
idle time between kernels (queued late by the host, or not) and its N largest places. A probe
for the device machine, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from typing import Any

os.environ.setdefault("EMBER_OPENCL_BUILD_THREADS", "0")
sys.path.insert(0, os.getcwd())  # the repository root: benchmarks/

import queue_events  # noqa: E402  (profiling queues from here on)
from queue_events import EVENTS, gpu_us  # noqa: E402

#: with --by-grid, a kernel's name carries its launch grid (global, local): GEMMs of different
#: shapes then read apart (W4's 54 matmul launches a step are one line otherwise)
queue_events.BY_GRID = "--by-grid" in sys.argv


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("workload")
    p.add_argument("--device", default="opencl:0")
    p.add_argument("--sizes", default="gpu")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warm", type=int, default=3, help="synchronized steps before the timed ones")
    p.add_argument("--jit", action="store_true")
    p.add_argument("--by-grid", action="store_true", help="one line per kernel and launch grid")
    p.add_argument("--ops", default="", help="comma-separated ops (e.g. matmul): GPU time per call shape too")
    p.add_argument("--gaps", type=int, default=0, help="the N largest idle gaps between kernels, and why")
    args = p.parse_args()

    import ember as em
    from benchmarks.runner import WORKLOADS

    module = WORKLOADS[args.workload]
    dev = em.Device(args.device)
    calls: list[tuple[str, int, int]] = []  # (op and operand shapes, first event, end event) per call
    for op in filter(None, args.ops.split(",")):
        _watch(dev, op, calls)
    build = module.ember_jit if args.jit else module.ember
    case = build(dev, dict(module.SIZES[args.sizes]))
    step = case.step
    step()
    case.result()  # one read-back first, as the runner's check: a GPU then runs its tuned GEMMs, not the generic one
    for _ in range(args.warm):
        step()
        case.sync()
    EVENTS.clear()
    calls.clear()  # event ranges count from here
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    case.sync()
    wall = (time.perf_counter() - t0) / args.steps
    per: dict[str, list[float]] = defaultdict(list)
    for name, event in EVENTS:
        per[name].append(gpu_us(event))
    total = sum(sum(v) for v in per.values()) / args.steps
    span = (EVENTS[-1][1].profile.end - EVENTS[0][1].profile.start) * 1e-3 / args.steps if EVENTS else 0.0
    print(
        f"{args.workload} {dev} {'em.jit' if args.jit else 'eager'}: wall {wall * 1e3:.3f} ms/step, "
        f"kernels {len(EVENTS) / args.steps:.0f}/step, GPU busy {total / 1e3:.3f} ms/step, "
        f"first-to-last kernel span {span / 1e3:.3f} ms/step"
    )
    print(f"{'launches/step':>13} {'GPU us/step':>11}  kernel")
    for name, times in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        print(f"{len(times) / args.steps:13.1f} {sum(times) / args.steps:11.1f}  {name}")
    if args.gaps:
        _gaps(args.gaps, args.steps)
    if calls:
        by_call: dict[str, list[float]] = defaultdict(list)
        for what, lo, hi in calls:
            by_call[what].append(sum(gpu_us(e) for _, e in EVENTS[lo:hi]))
        print(f"\n{'calls/step':>13} {'GPU us/step':>11}  {'us/call':>8}  op (operand shapes : strides in elements)")
        for what, times in sorted(by_call.items(), key=lambda kv: -sum(kv[1])):
            n = len(times)
            print(f"{n / args.steps:13.1f} {sum(times) / args.steps:11.1f}  {sum(times) / n:8.1f}  {what}")
    return 0


def _gaps(top: int, steps: int) -> None:
    """Idle device time between consecutive kernels, split by cause: ``host`` when the next kernel
    was queued after the previous one ended (the host queued it late: Python, an allocation, a
    build), ``device`` otherwise (a copy or a wait the events do not show). Prints the totals per
    step and the ``top`` largest gaps by the kernels around them, summed over the steps."""
    idle = {"host": 0.0, "device": 0.0}
    where: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for (before, a), (after, b) in zip(EVENTS, EVENTS[1:]):
        gap = (b.profile.start - a.profile.end) * 1e-3
        if gap <= 0:
            continue
        cause = "host" if b.profile.queued > a.profile.end else "device"
        idle[cause] += gap
        where[(cause, before, after)].append(gap)
    print(
        f"\nidle between kernels: {idle['host'] / steps / 1e3:.3f} ms/step queued late by the host, "
        f"{idle['device'] / steps / 1e3:.3f} ms/step with the next kernel already queued"
    )
    print(f"{'gaps/step':>13} {'idle us/step':>12}  cause: kernel before -> kernel after")
    for (cause, before, after), gaps in sorted(where.items(), key=lambda kv: -sum(kv[1]))[:top]:
        print(f"{len(gaps) / steps:13.1f} {sum(gaps) / steps:12.1f}  {cause}: {before} -> {after}")


def _watch(dev: Any, op: str, calls: list[tuple[str, int, int]]) -> None:
    """Wrap ``op``'s native implementation on ``dev``: each call notes its operands' shapes and
    strides and the range of kernel events it queued (the GPU time of that call)."""
    impls = dev._state.impls
    impl = impls[op]
    if impl is None:
        print(f"(--ops: {op} has no native implementation on {dev}: its composite's kernels count instead)")
        return

    def shapes(a: Any) -> str:
        shape = getattr(a, "shape", None)
        if shape is None:
            return repr(a)
        strides = getattr(a, "strides", None)  # CLArray's are in elements
        return f"{tuple(shape)}:{tuple(strides) if strides is not None else '?'}"

    def watched(*args: Any, **params: Any) -> Any:
        lo = len(EVENTS)
        out = impl(*args, **params)
        calls.append((f"{op} " + " @ ".join(shapes(a) for a in args if hasattr(a, "shape")), lo, len(EVENTS)))
        return out

    impls[op] = watched


if __name__ == "__main__":
    raise SystemExit(main())

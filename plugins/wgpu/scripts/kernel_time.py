"""Device time per kernel of a workload's ember step on a WGPU adapter: is a step bound by its
kernels or by the host that records them, and which kernels?

    python plugins/wgpu/scripts/kernel_time.py W3 --device wgpu:0 --sizes gpu [--steps 3] [--by-grid] [--jit]

Where the adapter has ``timestamp-query`` (NVIDIA's and Mesa's Vulkan do), the timed steps are
recorded by ember-wgpu's timed recorder (``EMBER_WGPU_RECORDER=timed``): each dispatch in a compute
pass of its own whose start and end the GPU stamps, so a kernel's time is the device's own, small
kernels included, and the step's dispatches run back to back as usual (a pass boundary between
each). ``--round-trip`` (or an adapter without timestamps) times each dispatch alone instead:
submitted and waited for, less the same round trip of an empty one-workgroup kernel (tens of µs
of noise on a GPU). Prints per kernel name: launches per step and µs per step, beside the step's
wall time recorded as usual (one pass, the native recorder). A probe for the device machine, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict

sys.path.insert(0, os.getcwd())  # the repository root: benchmarks/

_EMPTY = (
    "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
    "@compute @workgroup_size(1) fn main() { y[0] = y[0] + 1.0; }"
)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("workload")
    p.add_argument("--device", default="wgpu:0")
    p.add_argument("--sizes", default="gpu")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warm", type=int, default=8, help="synchronized steps before any timing")
    p.add_argument("--by-grid", action="store_true", help="one line per kernel and workgroup grid")
    p.add_argument("--round-trip", action="store_true", help="each dispatch alone, less an empty one's round trip")
    p.add_argument("--jit", action="store_true", help="the workload's em.jit step (its replays), not the eager one")
    args = p.parse_args()
    if not args.round_trip:
        os.environ["EMBER_WGPU_RECORDER"] = "timed"  # the device opens with timestamp-query where it has it

    import ember as em
    from benchmarks.runner import WORKLOADS
    from ember_wgpu.recorder import NativeRecorder, TimedRecorder

    module = WORKLOADS[args.workload]
    dev = em.Device(args.device)
    rt = dev.backend.rt
    stamps = "timestamp-query" in rt.device.features and not args.round_trip
    timed = rt.recorder if stamps else None
    rt.recorder = NativeRecorder(rt.device, rt.queue)  # the usual recording, for the wall time
    if args.jit and not hasattr(module, "ember_jit"):
        p.error(f"{args.workload} has no em.jit step")
    case = (module.ember_jit if args.jit else module.ember)(dev, dict(module.SIZES[args.sizes]))
    case.step()
    case.result()  # one read-back first, as the runner's check (tuned GEMMs from here on)
    for _ in range(args.warm):  # past the memory pool's first steps (adaptive plans a step after ~5)
        case.step()
        case.sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        case.step()
    case.sync()
    wall = (time.perf_counter() - t0) / args.steps

    per: dict[str, list[float]] = defaultdict(list)
    if stamps:
        assert isinstance(timed, TimedRecorder)
        rt.recorder = timed
        t0 = time.perf_counter()
        for _ in range(args.steps):
            case.step()
        case.sync()
        stamped_wall = (time.perf_counter() - t0) / args.steps
        for label, grid, ns in timed.take():
            per[f"{label} {grid}" if args.by_grid else label].append(ns * 1e-9)
        how = (
            f"GPU timestamps, a pass each, {stamped_wall * 1e3:.3f} ms/step so recorded; "
            f"{timed.untimed} untimed, timestamp period {timed.period} ns"
        )
    else:
        how = _round_trip(rt, case, args, per)
    launches = sum(len(v) for v in per.values()) / args.steps
    busy = sum(sum(v) for v in per.values()) / args.steps
    mode = "em.jit" if args.jit else "eager"
    print(
        f"{args.workload} {dev} ({rt.name}) {mode}: {wall * 1e3:.3f} ms/step recorded as usual; "
        f"{launches:.0f} dispatches/step, their device time {busy * 1e3:.3f} ms/step ({how})"
    )
    print(f"{'launches/step':>13} {'us/step':>9} {'us/launch':>9}  kernel")
    for name, times in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        n = len(times) / args.steps
        print(f"{n:13.1f} {sum(times) / args.steps * 1e6:9.1f} {statistics.median(times) * 1e6:9.1f}  {name}")
    return 0


def _round_trip(rt, case, args, per) -> str:  # type: ignore[no-untyped-def]
    """Each dispatch of ``args.steps`` steps submitted and waited for alone, less an empty kernel's
    round trip, into ``per``; answers how it was timed."""
    from ember.dtypes import float32

    dispatch = rt.dispatch
    empty = rt.pipeline("kernel_time_empty", _EMPTY, ("w",))
    buf = rt.empty((4,), float32)
    trips = []
    for _ in range(50):
        rt.synchronize()
        t = time.perf_counter()
        dispatch(empty, bytes(16), [buf.buffer], (1, 1, 1), "empty")
        rt.synchronize()
        trips.append(time.perf_counter() - t)
    trip = statistics.median(trips)

    def timed(pipe, params, buffers, groups, name=""):  # type: ignore[no-untyped-def]
        rt.synchronize()
        t = time.perf_counter()
        dispatch(pipe, params, buffers, groups, name)
        rt.synchronize()
        key = name or pipe.name
        per[f"{key} {tuple(groups)}" if args.by_grid else key].append(time.perf_counter() - t - trip)

    rt.dispatch = timed
    try:
        for _ in range(args.steps):
            case.step()
        case.sync()
    finally:
        del rt.dispatch
    return (
        f"each alone, less an empty kernel's round trip {trip * 1e6:.1f} µs, "
        f"spread {min(trips) * 1e6:.1f}-{max(trips) * 1e6:.1f}"
    )


if __name__ == "__main__":
    raise SystemExit(main())

"""Device time per kernel of a workload's ember step on a WGPU adapter: is a step bound by its
kernels or by the host that records them, and which kernels?

    python plugins/wgpu/scripts/kernel_time.py W3 --device wgpu:0 --sizes gpu [--steps 3] [--by-grid]

Each dispatch of the timed steps is submitted and waited for alone (``synchronize`` before and
after it) and its wall time is taken, less the same round trip of an empty one-workgroup kernel
(the median of 50, printed): a kernel's time to within the spread of that round trip (tens of
µs on a GPU), so small kernels read as ~0. Prints per kernel name: launches per step and µs per
step, beside the step's own time when recorded as usual. A probe for the device machine, not a
test (per-dispatch timestamps would need a compute pass per dispatch in ember's native recorder).
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
    p.add_argument("--by-grid", action="store_true", help="one line per kernel and workgroup grid")
    args = p.parse_args()

    import ember as em
    from benchmarks.runner import WORKLOADS
    from ember.dtypes import float32

    module = WORKLOADS[args.workload]
    dev = em.Device(args.device)
    rt = dev.backend.rt
    case = module.ember(dev, dict(module.SIZES[args.sizes]))
    case.step()
    case.result()  # one read-back first, as the runner's check (tuned GEMMs from here on)
    for _ in range(3):
        case.step()
        case.sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        case.step()
    case.sync()
    wall = (time.perf_counter() - t0) / args.steps

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

    per: dict[str, list[float]] = defaultdict(list)

    def timed(pipe, params, buffers, groups, name=""):  # type: ignore[no-untyped-def]
        rt.synchronize()
        t = time.perf_counter()
        dispatch(pipe, params, buffers, groups, name)
        rt.synchronize()
        key = name or pipe.name
        per[f"{key} {tuple(groups)}" if args.by_grid else key].append(time.perf_counter() - t - trip)

    rt.dispatch = timed  # type: ignore[method-assign]
    try:
        for _ in range(args.steps):
            case.step()
        case.sync()
    finally:
        del rt.dispatch
    launches = sum(len(v) for v in per.values()) / args.steps
    busy = sum(sum(v) for v in per.values()) / args.steps
    print(
        f"{args.workload} {dev} eager: {wall * 1e3:.3f} ms/step recorded as usual; {launches:.0f} dispatches/step, "
        f"their device time {busy * 1e3:.3f} ms/step (each alone, less an empty kernel's round trip "
        f"{trip * 1e6:.1f} µs, spread {min(trips) * 1e6:.1f}-{max(trips) * 1e6:.1f})"
    )
    print(f"{'launches/step':>13} {'us/step':>9}  kernel")
    for name, times in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        print(f"{len(times) / args.steps:13.1f} {sum(times) / args.steps * 1e6:9.1f}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

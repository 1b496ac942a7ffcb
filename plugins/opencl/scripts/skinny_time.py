"""The skinny GEMM (``ember_opencl.skinny``) against the split-K tiled path (``matmul.SKINNY = False``)
on W2's narrow products at batch 4096, in one process on one device:

    python plugins/opencl/scripts/skinny_time.py --device opencl:0 [--size 4096] [--n 10,16] [--iters 50]
        [--groups 2,4] [--min-slice 256,128] [--configs m:64x4x4x32,k:128x2x2x32]

Per product (A row-major: the last layer's forward; A a transposed view: its weight gradient hT @ g)
and per N: the tiled path's GPU µs per call from queue profiling events (the median over ``--iters``
calls of the call's kernels summed: the tiled GEMM and its split-K sum), synchronised wall µs per
call (best of 5 rounds of ``--iters``) and A's bytes over the GPU time; then the skinny path's, for
each work-group shape (``skinny.CONFIGS``'s, then ``--configs``'s for that layout) and each setting
of ``skinny.GROUPS_PER_CU`` and ``skinny.MIN_SLICE`` asked for (the K slices), with the
skinny kernel's own share, the ratio to the tiled time, and the largest difference from the tiled
result relative to its largest value. Programs are built before timing. ``--as-gpu`` takes a CPU device's GPU paths
(PoCL: checks the script, times nothing of interest). A probe for the device machine, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

os.environ.setdefault("EMBER_OPENCL_BUILD_THREADS", "0")  # (built before the first launch)
os.environ.setdefault("EMBER_AUTOTUNE", "0")

import numpy as np  # noqa: E402
from queue_events import EVENTS, gpu_us  # noqa: E402  (profiling queues from here on)


def _operands(rt: Any, m: int, k: int, n: int, transposed: bool, rng: Any) -> tuple[Any, Any]:
    from ember.dtypes import as_dtype

    f32 = as_dtype("float32")
    host = rng.standard_normal((k, m) if transposed else (m, k)).astype(np.float32)
    a = rt.upload(host, f32)
    if transposed:
        a = a.with_layout((m, k), (1, m), 0)
    return a, rt.upload(rng.standard_normal((k, n)).astype(np.float32), f32)


def _measure(rt: Any, fn: Any, iters: int) -> tuple[float, float, float, Any]:
    """(GPU µs per call: the median of the calls' summed kernel times; of that, the skinny kernel's;
    wall µs per call; a result)."""
    out = fn()
    rt.finish()
    per_call, own = [], []
    for _ in range(iters):
        lo = len(EVENTS)
        fn()
        rt.finish()
        times = [gpu_us(e) for _, e in EVENTS[lo:]]
        per_call.append(sum(times))
        own.append(sum(t for t, (k, _) in zip(times, EVENTS[lo:]) if k == "ember_skinny"))
    wall = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        rt.finish()
        wall = min(wall, (time.perf_counter() - start) / iters * 1e6)
    EVENTS.clear()
    return statistics.median(per_call), statistics.median(own), wall, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--size", type=int, default=4096, help="W2's batch and hidden size (M and K)")
    ap.add_argument("--n", default="10", help="comma-separated output widths")
    ap.add_argument("--groups", default="2", help="comma-separated skinny.GROUPS_PER_CU values to try")
    ap.add_argument("--min-slice", default="256", help="comma-separated skinny.MIN_SLICE values to try")
    ap.add_argument(
        "--configs",
        default="",
        help="comma-separated work-group shapes to try besides the default, TMIxVWxTKIxTK[p] (p: prefetch), "
        "each for the layout it names: m:64x4x4x32,k:128x2x2x16p",
    )
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--as-gpu", action="store_true", help="a CPU device takes a GPU's paths")
    args = ap.parse_args()
    import ember as em
    from ember_opencl import matmul as mm
    from ember_opencl import skinny

    rt = em.Device(args.device).backend.rt
    if args.as_gpu:
        rt.is_cpu = False
    print(f"{rt.device.name.strip()} ({rt.compute_units} compute units)")
    rng = np.random.default_rng(0)
    size = args.size
    settings = [(int(g), int(s)) for g in args.groups.split(",") for s in args.min_slice.split(",")]
    default = dict(skinny.CONFIGS)
    shapes: dict[str, list[Any]] = {mode: [cfg] for mode, cfg in default.items()}
    for spec in filter(None, args.configs.split(",")):
        mode, dims = spec.split(":")
        tmi, vw, tki, tk = (int(x) for x in dims.rstrip("p").split("x"))
        shapes[mode].append(skinny.Config(tmi, vw, tki, tk, pf=dims.endswith("p")))
    for n in (int(x) for x in args.n.split(",")):
        for transposed in (False, True):
            a, b = _operands(rt, size, size, n, transposed, rng)
            what = f"({size}, {size}):{a.strides} @ ({size}, {n}):{b.strides}"
            mm.SKINNY = False
            base, _, wall, out = _measure(rt, lambda a=a, b=b: mm.matmul(rt, a, b), args.iters)
            ref = rt.download(out).astype(np.float64)
            print(
                f"{what}  tiled: GPU {base:8.1f} us  wall {wall:8.1f} us  A at {size * size * 4 / base / 1e3:5.0f} GB/s"
            )
            mm.SKINNY = True
            mode = "m" if transposed else "k"
            for cfg, (groups, min_slice) in ((c, gs) for c in shapes[mode] for gs in settings):
                skinny.GROUPS_PER_CU, skinny.MIN_SLICE = groups, min_slice
                skinny.CONFIGS[mode] = cfg
                mm._PLANS.clear()  # (the plan's slices follow these settings)
                calls = skinny.CALLS
                gpu, own, wall, out = _measure(rt, lambda a=a, b=b: mm.matmul(rt, a, b), args.iters)
                assert skinny.CALLS > calls, "the skinny kernel did not run"
                p = next(v for v in mm._PLANS.values() if isinstance(v, skinny.SkinnyPlan))
                got = rt.download(out).astype(np.float64)
                diff = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
                tag = f"{cfg.tmi}x{cfg.vw}x{cfg.tki}x{cfg.tk}{'p' if cfg.pf else ''}"
                print(
                    f"  skinny {tag} groups/CU {groups} min slice {min_slice} ({p.slices} slices): GPU {gpu:7.1f} us "
                    f"(kernel {own:7.1f}, A at {size * size * 4 / own / 1e3:5.0f} GB/s), wall {wall:7.1f} us, "
                    f"{gpu / base:.3f} x tiled, max rel diff {diff:.1e}"
                )


if __name__ == "__main__":
    main()

"""Every GEMM tiling of the tuner's family on one product with the layouts a workload gives it:

    python plugins/opencl/scripts/gemm_layout_time.py --device opencl:0 [--products w2] [--iters 10]
        [--top 8] [--splits 2,4,8] [--as-gpu]

The tuner (``ember_opencl.tune``) times each shape class on row-major operands; a training step
reaches the same GEMM with a transposed operand (``x.T @ g``, ``g @ W.T``), which changes the
kernel's loads. For each product of ``--products`` (``w2``: W2's GEMMs at batch and hidden 4096,
``w4``: W4's at GPU size, or ``MxKxN[:tA][:tB]`` items joined by commas) this prints the default
path's GPU time (the plan matmul would run: tuned choice, split-K, skinny), with ``--splits`` the
product as that many K slices and their sum (``matmul._split_k``), and the ``--top`` fastest
tilings, each timed as the tuner times it (``matmul.as_tuned_runs``: a deep product of few tiles in
its K slices, said on its line): GPU µs per call from queue profiling events (median of ``--iters``),
TFLOP/s, and the largest difference from the default result relative to its largest value. A probe for the device
machine, not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

os.environ.setdefault("EMBER_OPENCL_BUILD_THREADS", "0")

import numpy as np  # noqa: E402
from queue_events import EVENTS, gpu_us  # noqa: E402  (profiling queues from here on)

PRESETS = {
    # W2 at GPU size: forward x @ W.T, input gradient g @ W, weight gradient g.T @ x (layers 1 and 2)
    "w2": "4096x4096x4096:tB,4096x4096x4096,4096x4096x4096:tA,4096x784x4096:tB,784x4096x4096:tA",
    # W4's twelve products at GPU size as kernel_time.py --ops matmul lists them (batches folded to 16384 rows)
    "w4": "16384x1024x4096:tB,16384x4096x1024:tB,16384x1024x4096,4096x16384x1024:tA,16384x4096x1024,"
    "1024x16384x3072:tA,1024x16384x4096:tA,16384x3072x1024:tB,16384x1024x3072,1024x16384x1024:tA,"
    "16384x1024x1024:tB,16384x1024x1024",
}


def _parse(item: str) -> tuple[int, int, int, bool, bool]:
    dims, *flags = item.split(":")
    m, k, n = (int(x) for x in dims.split("x"))
    return m, k, n, "tA" in flags, "tB" in flags


def _operand(rt: Any, rows: int, cols: int, transposed: bool, rng: Any) -> Any:
    from ember.dtypes import as_dtype

    host = rng.standard_normal((cols, rows) if transposed else (rows, cols)).astype(np.float32)
    arr = rt.upload(host, as_dtype("float32"))
    return arr.with_layout((rows, cols), (1, rows), 0) if transposed else arr


def _gpu_us(rt: Any, fn: Any, iters: int) -> tuple[float, Any]:
    out = fn()
    rt.finish()
    times = []
    for _ in range(iters):
        lo = len(EVENTS)
        fn()
        rt.finish()
        times.append(sum(gpu_us(e) for _, e in EVENTS[lo:]))
    EVENTS.clear()
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--products", default="w2")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--splits", default="", help="comma-separated K slice counts to time, e.g. 2,4,8")
    ap.add_argument("--as-gpu", action="store_true", help="a CPU device takes a GPU's paths (checks the script)")
    args = ap.parse_args()
    import ember as em
    from ember_opencl import matmul as mm
    from ember_opencl import tune

    rt = em.Device(args.device).backend.rt
    if args.as_gpu:
        rt.is_cpu = False
    print(f"{rt.device.name.strip()} ({rt.compute_units} compute units)")
    family = tune.candidates(rt, "float32")
    items = ",".join(PRESETS.get(p, p) for p in args.products.split(","))
    rng = np.random.default_rng(0)
    for item in filter(None, items.split(",")):
        m, k, n, ta, tb = _parse(item)
        a, b = _operand(rt, m, k, ta, rng), _operand(rt, k, n, tb, rng)
        flops = 2.0 * m * n * k
        base, out = _gpu_us(rt, lambda a=a, b=b: mm.matmul(rt, a, b), args.iters)
        ref = rt.download(out).astype(np.float64)
        scale = float(np.abs(ref).max()) or 1.0
        print(f"\n{item}  ({m}, {k}):{a.strides} @ ({k}, {n}):{b.strides}")
        print(f"  default path       {base:9.1f} us  {flops / base / 1e6:6.1f} TFLOP/s")
        rows = []
        for t in family:
            try:
                us, got = _gpu_us(rt, lambda t=t, a=a, b=b: mm.as_tuned_runs(rt, a, b, t), args.iters)
            except Exception as exc:  # a tiling the device refuses at launch: say so, go on
                rows.append((float("inf"), t, f"failed: {type(exc).__name__}"))
                continue
            diff = float(np.abs(rt.download(got).astype(np.float64) - ref).max()) / scale
            deep = m * n * k >= mm.AUTOTUNE_FLOPS and k >= 2 * mm.SLICE_K and not rt.is_cpu
            slices = mm.deep_slices(rt, t, "float32", m, n, k) if deep else 0
            rows.append((us, t, f"diff {diff:.1e}" + (f" ({slices} K slices)" if slices else "")))
        for s in (int(x) for x in args.splits.split(",") if x):
            if k % s:
                continue
            us, got = _gpu_us(rt, lambda s=s, a=a, b=b: mm._split_k(rt, s, a, b), args.iters)
            diff = float(np.abs(rt.download(got).astype(np.float64) - ref).max()) / scale
            print(f"  split-K {s:2d}        {us:9.1f} us  {flops / us / 1e6:6.1f} TFLOP/s  diff {diff:.1e}")
        rows.sort(key=lambda r: r[0])
        for us, t, note in rows[: args.top]:
            tf = flops / us / 1e6 if us != float("inf") else 0.0
            print(f"  {us:9.1f} us  {tf:6.1f} TFLOP/s  {note}  {t}")


if __name__ == "__main__":
    main()

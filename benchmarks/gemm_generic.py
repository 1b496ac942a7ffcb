"""The untuned GEMM's generic kernel (layout as an argument) against the specialised kernel of the
same tiling, on W2's GEMMs and a square one, in one process on one device:

    EMBER_AUTOTUNE=0 python -m benchmarks.gemm_generic --device opencl:0 [--size 4096] [--iters 20]

One JSON line per GEMM: its shape and transposes, the tiling ``matmul`` picks untuned, milliseconds
per call (best of 5 rounds of ``--iters`` calls, synchronised) for the specialised kernel and the
generic one, their ratio, and the largest difference of their results. Both kernels are built
first (a cold cache costs builds, not timed). ``--as-gpu`` takes a CPU device's GPU paths (PoCL).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np


def _case(rt: Any, m: int, n: int, k: int, ta: bool, tb: bool, rng: Any) -> tuple[Any, Any]:
    """A (m x k) and B (k x n) on the device, each stored transposed when asked (a strided view)."""
    from ember.dtypes import as_dtype

    f32 = as_dtype("float32")

    def put(rows: int, cols: int, transposed: bool) -> Any:
        host = rng.standard_normal((cols, rows) if transposed else (rows, cols)).astype(np.float32)
        arr = rt.upload(host, f32)
        return arr.with_layout((rows, cols), arr.strides[::-1], 0) if transposed else arr

    return put(m, k, ta), put(k, n, tb)


def _time(rt: Any, fn: Any, iters: int) -> float:
    fn()
    rt.finish()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        rt.finish()
        best = min(best, (time.perf_counter() - start) / iters)
    return best * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="opencl:0")
    ap.add_argument("--size", type=int, default=4096, help="W2's batch and hidden size")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--as-gpu", action="store_true", help="a CPU device takes a GPU's paths")
    args = ap.parse_args()
    os.environ.setdefault("EMBER_AUTOTUNE", "0")  # the untuned choice is what runs generic
    import ember as em
    from ember_opencl import matmul as mm

    rt = em.Device(args.device).backend.rt
    if args.as_gpu:
        rt.is_cpu, rt.compute_units = False, 4
    s, feat, classes = args.size, 784, 10
    rng = np.random.default_rng(0)
    # W2: x @ W1, h @ W2, h @ W3 (N = 10), dh = dlogits @ W3.T (K = 10), dh @ W2.T, h.T @ dh, x.T @ dh
    cases = [
        (s, s, feat, False, False), (s, s, s, False, False), (s, classes, s, False, False),
        (s, s, classes, False, True), (s, s, s, False, True), (s, s, s, True, False), (feat, s, s, True, False),
    ]  # fmt: skip
    for m, n, k, ta, tb in cases:
        a, b = _case(rt, m, n, k, ta, tb, rng)
        t = mm._pick(rt, m, n)
        special = _time(rt, lambda a=a, b=b, t=t: mm.matmul(rt, a, b, t), args.iters)
        generic = _time(rt, lambda a=a, b=b: mm.matmul(rt, a, b), args.iters)
        diff = np.abs(rt.download(mm.matmul(rt, a, b, t)) - rt.download(mm.matmul(rt, a, b))).max()
        keys = [key[-1] for key in rt._kernels if key[0] == "matmul" and key[2] == t]
        row = {"m": m, "n": n, "k": k, "a_t": ta, "b_t": tb, "tiling": t.as_dict(), "specialised_ms": special,
               "generic_ms": generic, "ratio": generic / special, "max_diff": float(diff),
               "generic_ran": "generic" in keys}  # fmt: skip
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()

"""GPU time of W3's convolution kernels under each candidate tiling, from OpenCL profiling events:
which tile should ``conv._conv_tiling`` pick on this device?

    python plugins/opencl/scripts/conv_time.py [--device opencl:0] [--batch 512] [--reps 10]

For W3's two convolutions (1->32 and 32->64 channels, 3x3, padding 1, on 28x28 and 14x14) it times
the forward (``conv``), the input gradient (``conv_transpose``, conv2 only: W3 needs no gradient of
its input) and the weight gradient (``conv_weight_grad``, GEMM and partial sum together) with the
default tile (marked ``*``) and the alternatives in ``CANDIDATES``, plus the max-pool kernels. Prints
µs per call. A probe for the device machine, not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

os.environ.setdefault("EMBER_OPENCL_BUILD_THREADS", "0")  # programs build before their first launch

import numpy as np  # noqa: E402
from queue_events import EVENTS, gpu_us  # noqa: E402  (profiling queues from here on)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="opencl:0")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args()

    import ember as em
    from ember.dtypes import as_dtype
    from ember_opencl import conv, window
    from ember_opencl.gemm_source import Tiling
    from ember_opencl.matmul import TILINGS, fits

    candidates = [
        Tiling(16, 16, 16, 1, 1, vw=4, db=True),
        Tiling(32, 16, 16, 2, 1, vw=4, db=True),
        Tiling(32, 64, 16, 4, 4, vw=4, chunk=4, db=True),
        Tiling(32, 128, 16, 4, 8, vw=4, chunk=4, db=True),
        Tiling(32, 128, 8, 4, 8, vw=4, chunk=4, db=True, rp=True),
        Tiling(64, 64, 16, 4, 4, vw=4, chunk=4, db=True),
        Tiling(64, 128, 16, 8, 8, vw=4, chunk=4, db=True),
        Tiling(64, 128, 8, 8, 8, vw=4, chunk=4, db=True, rp=True),
        Tiling(64, 96, 16, 8, 8, vw=4, chunk=4, db=True),  # conv2's weight gradient: 288 = 3 x 96 columns
        Tiling(128, 128, 16, 8, 8, vw=4, chunk=4, db=True),
        TILINGS["tiny"],  # what W3's conv2 and its input gradient ran before 2026-12-06
    ]
    dev = em.Device(args.device)
    rt = dev.backend.rt
    rng = np.random.default_rng(0)
    n = args.batch

    def up(shape: tuple[int, ...]) -> Any:
        return rt.upload(rng.standard_normal(shape).astype(np.float32), as_dtype("float32"))

    pads = ((1, 1), (1, 1))
    one = (1, 1)
    layers = {"conv1": (up((n, 1, 28, 28)), up((32, 1, 3, 3)), up((n, 32, 28, 28))),
              "conv2": (up((n, 32, 14, 14)), up((64, 32, 3, 3)), up((n, 64, 14, 14)))}  # fmt: skip

    def timed(fn: Any) -> float:
        for _ in range(2):
            fn()
        rt.finish()
        EVENTS.clear()
        for _ in range(args.reps):
            fn()
        rt.finish()
        return sum(gpu_us(e) for _, e in EVENTS) / args.reps

    print(f"{rt.label}, batch {n}: µs per call (* the default tile)")
    for layer, (x, w, g) in layers.items():
        ops = {"conv": lambda t, x=x, w=w: conv.conv(rt, x, w, None, one, pads, one, 1, t),
               "wgrad": lambda t, x=x, g=g: conv.conv_weight_grad(rt, g, x, (3, 3), one, pads, one, 1, t)}  # fmt: skip
        if layer == "conv2":
            ops["transpose"] = lambda t, w=w, g=g: conv.conv_transpose(rt, g, w, None, (14, 14), one, pads, one, 1, t)
        for op, fn in ops.items():
            M = w.shape[0] if op in ("conv", "wgrad") else w.shape[1]
            cols = w.shape[1] * 9 if op == "wgrad" else None
            default = conv._conv_tiling(rt, "float32", M, cols or n * 196, 9)
            for t in dict.fromkeys([default, *candidates]):
                if not fits(rt, t, "float32"):
                    continue
                us = timed(lambda t=t, fn=fn: fn(t))
                mark = "*" if t == default else " "
                print(f"{layer} {op:9s} {mark} {us:9.1f}  {t}")
    x1, _, _ = layers["conv1"]
    pool = ((2, 2), (2, 2), ((0, 0), (0, 0)), one)
    y1 = window.max_pool(rt, x1, *pool)
    print(f"max_pool 2x2 on {x1.shape}: {timed(lambda: window.max_pool(rt, x1, *pool)):.1f}")
    back = lambda: window.max_pool_backward(rt, y1, x1, (2, 2), (2, 2), ((0, 0),) * 2, one)  # noqa: E731
    print(f"max_pool_backward 2x2 (tiled) on {x1.shape}: {timed(back):.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

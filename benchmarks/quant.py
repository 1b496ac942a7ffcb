"""dequant_matmul on one device: the backend's native kernel against the core's composite
(dequantize in ember ops, then linear: no backend kernel for either), and the float32 linear
they replace.

    python -m benchmarks.quant [--device cpu] [--sizes 1x4096x4096,128x4096x4096] [--iters 20]

Sizes are batch x out_features x in_features; the weight is N(0, 1) from a fixed seed, x too.
Median of ``--iters`` timed calls after 3 warm-ups, the device synchronized before each clock read.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import ember as em
from ember.dispatch import OPS
from ember.quant import dequant_matmul, quantize_int8, quantize_nf4


def _median(fn: Callable[[], em.Tensor], dev: em.Device, iters: int) -> float:
    for _ in range(3):
        fn()
    dev.synchronize()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = fn()
        out.numpy()  # materialize (and synchronize) the result
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _composite(x: em.Tensor, q: em.Tensor, s: em.Tensor, params: dict) -> em.Tensor:
    """The core's composite all the way down: dequantize in ember ops (not a backend's
    ``dequantize`` kernel), then ``linear``."""
    w = OPS["dequantize"].composite(q, s, dtype=x.dtype, **params)
    return em.nn.functional.linear(x, w)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", default="1x4096x4096,128x4096x4096")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    dev = em.Device(args.device)
    print(f"device {dev}, median of {args.iters} (ms)")
    print("| format | batch x out x in | native kernel | composite | float32 linear | weight bytes vs float32 |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for spec in args.sizes.split(","):
        n, out, inp = (int(v) for v in spec.split("x"))
        w = rng.standard_normal((out, inp)).astype(np.float32)
        x = em.tensor(rng.standard_normal((n, inp)).astype(np.float32), device=dev)
        wt = em.tensor(w, device=dev)
        dense = _median(lambda x=x, wt=wt: em.nn.functional.linear(x, wt), dev, args.iters)
        for fmt in ("int8", "nf4"):
            qw = quantize_int8(w) if fmt == "int8" else quantize_nf4(w, 64)
            q, s = em.tensor(qw.qweight, device=dev), em.tensor(qw.absmax(), device=dev)
            params = {"format": fmt, "shape": qw.shape, "block_size": qw.block_size}
            run = (x, q, s, params)
            native = _median(lambda r=run: dequant_matmul(*r[:3], **r[3]), dev, args.iters)
            composite = _median(lambda r=run: _composite(*r), dev, args.iters)
            ratio = qw.nbytes / w.nbytes
            print(f"| {fmt} | {spec} | {native * 1e3:.2f} | {composite * 1e3:.2f} | {dense * 1e3:.2f} | {ratio:.3f} |")


if __name__ == "__main__":
    main()

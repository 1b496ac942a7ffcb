"""A trailing reduction fused into its region's kernel, against the region then the reduction.

    python -m benchmarks.fused_reduce [--devices cpu,opencl:0,wgpu:0] [--iters 20]

Per device and shape: ``((x * a + b).exp()).sum(-1)`` three ways, in turn within each iteration
(so that on a shared machine all see one load): ``fused`` (ember.lazy with the backend's
``fusion_reductions``: one kernel), ``region`` (fusion on, the reduction not fused: the region's
kernel writes ``exp``, then the reduction kernel) and ``unfused`` (``EMBER_FUSION=0``'s road:
one kernel per op). Each result is checked against numpy float64 first. Prints median ms.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ember as em

#: (shape, axis): rows of 1024 (the issue's case), one long row of 2^22, few long rows
SHAPES = [((4096, 1024), -1), ((1 << 22,), -1), ((16, 1 << 18), -1)]


def _case(dev: em.Device, shape: tuple[int, ...], axis: int, iters: int) -> dict[str, float]:
    gen = np.random.default_rng(0)
    x = gen.standard_normal(shape).astype(np.float32)
    a = (gen.standard_normal(shape[-1:]) * 0.1).astype(np.float32)
    b = (gen.standard_normal(shape[-1:]) * 0.1).astype(np.float32)
    ref = np.exp(x.astype(np.float64) * a + b).sum(axis)
    tx, ta, tb = (em.tensor(v, device=dev) for v in (x, a, b))
    lazy = dev._state.defer  # the device's ember.lazy.Lazy (None where the backend does not fuse)
    fuses = bool(getattr(lazy, "reductions", None))

    def fused() -> em.Tensor:
        return ((tx * ta + tb).exp()).sum(axis)

    def region() -> em.Tensor:
        saved, lazy.reductions = lazy.reductions, frozenset()
        try:
            return ((tx * ta + tb).exp()).sum(axis)
        finally:
            lazy.reductions = saved

    def unfused() -> em.Tensor:
        with em.lazy.fusion(False, dev):
            return ((tx * ta + tb).exp()).sum(axis)

    ways = {"fused": fused, "region": region, "unfused": unfused} if fuses else {"unfused": unfused}
    times: dict[str, list[float]] = {k: [] for k in ways}
    for name, fn in ways.items():  # warm up (compiles) and check
        got = fn().numpy()
        err = float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1.0)))
        if err > 1e-4:
            raise SystemExit(f"{dev} {shape} {name}: relative error {err:.2e} against numpy float64")
    for _ in range(iters):
        for name, fn in ways.items():
            dev.synchronize()
            t0 = time.perf_counter()
            fn().numpy()
            times[name].append((time.perf_counter() - t0) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--devices", default="cpu,opencl:0")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args()
    for name in args.devices.split(","):
        dev = em.Device(name)
        for shape, axis in SHAPES:
            ms = _case(dev, shape, axis, args.iters)
            shown = "  ".join(f"{k} {v:7.2f} ms" for k, v in ms.items())
            print(f"{name:10s} {str(shape):16s} sum({axis})  {shown}", flush=True)


if __name__ == "__main__":
    main()

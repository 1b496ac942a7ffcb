"""W1, W2, W5, W6 (shared/WORKLOADS.md) on one ember device, standalone.

The benchmark runner (``python -m benchmarks``) is the reference way to measure; this script
needs only ember and numpy, so it also runs where the runner is not available, and it adds
what the WGPU backend did per iteration (dispatches, submits, pool reuse).

    python plugins/wgpu/scripts/bench.py --device wgpu:0 --sizes cpu
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import ember as em

SIZES = {
    "cpu": {"w1": 64, "batch": 128, "hidden": 1024, "gemm": 2048, "w6": 2**22},
    "gpu": {"w1": 64, "batch": 4096, "hidden": 4096, "gemm": 8192, "w6": 2**26},
    "quick": {"w1": 64, "batch": 16, "hidden": 64, "gemm": 256, "w6": 2**14},
}


def _timed(step: Callable[[], Any], sync: Callable[[], None], warmup: int, iters: int) -> list[float]:
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    return times


def _counters(dev: em.Device) -> dict[str, int]:
    stats = dev.memory_stats()
    pool = stats["pools"]["device"]
    return {"dispatches": stats["extra"]["dispatches"], "submits": stats["extra"]["submits"],
            "pool_hits": pool["hits"], "pool_misses": pool["misses"]}  # fmt: skip


def w1(dev: em.Device, size: dict[str, int]) -> tuple[Callable[[], Any], str]:
    x = em.tensor(np.random.default_rng(0).standard_normal(size["w1"]).astype(np.float32), device=dev)

    def step() -> Any:
        y = x
        for _ in range(1000):
            y = y + x
        return y.numpy()

    return step, "1000 dependent adds + readback"


def w2(dev: em.Device, size: dict[str, int]) -> tuple[Callable[[], Any], str]:
    rng = np.random.default_rng(0)
    n, h = size["batch"], size["hidden"]
    ad = dev.autodiff()
    x = em.tensor(rng.standard_normal((n, 784)).astype(np.float32), device=ad)
    y = em.tensor(rng.integers(0, 10, n), device=ad)
    dims = ((784, h), (h, h), (h, 10))
    params = []
    for fan_in, fan_out in dims:
        w = (rng.standard_normal((fan_in, fan_out)) * fan_in**-0.5).astype(np.float32)
        params.append(em.tensor(w, device=ad, requires_grad=True))
        params.append(em.tensor((rng.standard_normal(fan_out) * 0.1).astype(np.float32), device=ad, requires_grad=True))

    def step() -> Any:
        for p in params:
            p.grad = None
        w1_, b1, w2_, b2, w3, b3 = params
        z = em.relu(x @ w1_ + b1)
        z = em.relu(z @ w2_ + b2)
        loss = em.cross_entropy(z @ w3 + b3, y)
        loss.backward()
        with em.no_grad():
            for p in params:
                p.copy_(p - 0.01 * p.grad)
        return loss

    return step, f"batch {n}, hidden {h}"


def w5(dev: em.Device, size: dict[str, int]) -> tuple[Callable[[], Any], str]:
    n = size["gemm"]
    rng = np.random.default_rng(0)
    a = em.tensor(rng.standard_normal((n, n)).astype(np.float32), device=dev)
    b = em.tensor(rng.standard_normal((n, n)).astype(np.float32), device=dev)
    return (lambda: a @ b), f"{n}^3"


def w6(dev: em.Device, size: dict[str, int]) -> tuple[Callable[[], Any], str]:
    n = size["w6"]
    rng = np.random.default_rng(0)
    x, a, b = (em.tensor(rng.standard_normal(n).astype(np.float32), device=dev) for _ in range(3))
    return (lambda: em.gelu(x * a + b) * em.sigmoid(x)), f"2^{n.bit_length() - 1} elements"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="wgpu:0")
    p.add_argument("--sizes", choices=sorted(SIZES), default="cpu")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("workloads", nargs="*", default=["W1", "W2", "W5", "W6"])
    args = p.parse_args()
    dev = em.Device(args.device)
    size = SIZES[args.sizes]
    print(f"device {dev}: {dev.describe().get('name')} ({args.sizes} sizes, median of {args.iters})", flush=True)
    results = []
    for wl in args.workloads:
        build = {"W1": w1, "W2": w2, "W5": w5, "W6": w6}[wl.upper()]
        step, what = build(dev, size)
        before = _counters(dev)
        times = _timed(step, dev.synchronize, args.warmup, args.iters)
        after = _counters(dev)
        runs = args.warmup + args.iters
        med = statistics.median(times)
        row: dict[str, Any] = {"workload": wl.upper(), "size": what, "median_ms": round(med * 1e3, 3)}
        if wl.upper() == "W5":
            row["gflops"] = round(2 * size["gemm"] ** 3 / med / 1e9, 1)
        if wl.upper() == "W6":
            row["gbps"] = round(16 * size["w6"] / med / 1e9, 1)
        if wl.upper() == "W1":
            row["us_per_op"] = round(med / 1000 * 1e6, 2)
        row.update({f"{k}_per_iter": round((after[k] - before[k]) / runs, 1) for k in after})
        results.append(row)
        print(json.dumps(row), flush=True)
    print("memory:", json.dumps(dev.memory_stats()))


if __name__ == "__main__":
    main()

"""Where ember-cuda's time goes on the dispatch-bound and bandwidth-bound workloads (W1, W6).

    python plugins/cuda/scripts/profile_cuda.py          (on a GPU machine, from the repository root)

Prints, in µs per call: CuPy's own allocator vs ember's pool behind ``cupy.empty``, a bare
RawKernel launch, CuPy's ufunc add, and ember's ``y = y + x`` (W1's step), then the top of a
cProfile of W1's loop; for W6 the GPU time of each kernel (CUDA events) and its bandwidth.
"""

from __future__ import annotations

import cProfile
import pstats
import time

import numpy as np

import ember as em


def per_call(fn, n: int = 20000) -> float:  # noqa: ANN001
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    dev = em.Device.cuda(0)
    backend = dev.backend
    cp = backend.cp
    x = em.tensor(np.random.default_rng(0).standard_normal(64).astype(np.float32), device=dev)
    a = x._data
    print(f"cupy.empty(64) through ember's pool: {per_call(lambda: cp.empty(64, cp.float32)):.2f} us")
    with cp.cuda.using_allocator(cp.get_default_memory_pool().malloc):
        print(f"cupy.empty(64) through CuPy's pool:  {per_call(lambda: cp.empty(64, cp.float32)):.2f} us")
    out = cp.empty_like(a)
    k = cp.RawKernel('extern "C" __global__ void k(const float* a, float* y, long long n) {}', "k")
    n = cp.int64(64)
    print(f"bare RawKernel launch:               {per_call(lambda: k((1,), (256,), (a, out, n))):.2f} us")
    print(f"cupy.add(a, a) (ufunc + alloc):      {per_call(lambda: cp.add(a, a)):.2f} us")
    add = backend.implementation("add")
    print(f"ember-cuda add kernel (direct):      {per_call(lambda: add(a, a)):.2f} us")
    print(f"ember x + x (dispatch + kernel):     {per_call(lambda: x + x):.2f} us")
    backend.synchronize()

    def w1() -> None:
        y = x
        for _ in range(1000):
            y = y + x
        y.numpy()

    w1()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        w1()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(12)

    # W6: the GPU time of each kernel
    size = 1 << 26
    rng = np.random.default_rng(1)
    xs, aa, bb = (em.tensor(rng.standard_normal(size).astype(np.float32), device=dev) for _ in range(3))
    steps = {
        "x * a": lambda: xs * aa,
        "t + b": lambda: xs + bb,
        "gelu": lambda: xs.gelu(),
        "sigmoid": lambda: xs.sigmoid(),
        "g * s": lambda: xs * bb,
    }
    traffic = {"x * a": 12, "t + b": 12, "gelu": 8, "sigmoid": 8, "g * s": 12}
    for name, fn in steps.items():
        fn()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(20):
            fn()
        stop.record()
        stop.synchronize()
        ms = cp.cuda.get_elapsed_time(start, stop) / 20
        print(f"W6 {name:8s} {ms * 1e3:8.1f} us  {traffic[name] * size / ms / 1e9:6.0f} GB/s")


if __name__ == "__main__":
    main()

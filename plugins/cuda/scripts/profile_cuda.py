"""Where ember-cuda's time goes on the workloads (W1-W6), to explain each ratio to PyTorch.

    python plugins/cuda/scripts/profile_cuda.py [W1 W2 W3 W4 W6]   (on a GPU machine, repository root)

W1: in µs per call, CuPy's own allocator vs ember's pool behind ``cupy.empty``, a bare RawKernel
launch, CuPy's ufunc add, and ember's ``y = y + x`` (W1's step), then the top of a cProfile of
W1's loop. W2-W4 (GPU sizes): the step's wall time, the GPU time of every dispatched op (CUDA
events around each kernel, through dispatch's lazy seam), and PyTorch's step and its top CUDA
kernels (torch.profiler) beside them. W6: the GPU time of each kernel and its bandwidth.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import sys
import time

import numpy as np

import ember as em


def per_call(fn, n: int = 20000) -> float:  # noqa: ANN001
    fn()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


#: workloads whose host time is profiled too (``EMBER_PROFILE_HOST=W2,W3``)
HOST = set(filter(None, os.environ.get("EMBER_PROFILE_HOST", "W3").split(",")))


def op_profile(workload: str) -> None:
    """Wall time of one W2-W4 step fused and unfused, and the GPU time of every CUDA kernel it
    runs (ember's CuPy and generated kernels alike), traced by CUPTI through torch.profiler (which
    sees every kernel of the process), with PyTorch's step and kernels beside it."""
    import importlib

    from benchmarks.harness import time_case
    from benchmarks.peers import import_peer

    mod = importlib.import_module(f"benchmarks.{ {'W2': 'w2_mlp', 'W3': 'w3_cnn', 'W4': 'w4_transformer'}[workload] }")
    size = mod.SIZES["gpu"]
    dev = em.Device.cuda(0)
    try:
        torch = import_peer("torch")  # strict float32: no TF32 in matmul or convolution, as the benchmarks
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print("   (no torch: no CUPTI trace)")
        return

    def kernels(case, label: str, wall: float) -> None:  # noqa: ANN001
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                case.step()
            case.sync()
        rows = [e for e in prof.key_averages() if e.device_time_total > 0]
        gpu = sum(e.device_time_total for e in rows) / 3e3
        count = sum(e.count for e in rows) // 3
        print(f"   {label}: {wall * 1e3:.2f} ms wall, {gpu:.2f} ms in {count} kernels per step")
        for e in sorted(rows, key=lambda e: e.device_time_total, reverse=True)[:16]:
            print(f"      {e.key[:72]:72s} {e.device_time_total / 3e3:8.3f} ms  {e.count // 3:4d} calls")

    print(f"\n== {workload} {mod.describe(size)}")
    walls = {}
    for fused in (True, False):
        with em.lazy.fusion(fused, dev):
            case = mod.ember(dev, size)
            walls[fused] = sorted(time_case(case, 3, 10))[5]
            kernels(case, f"ember {'fused' if fused else 'unfused'}", walls[fused])
    if workload in HOST:  # where the host's time goes (the step is host-bound when wall >> kernels)
        with em.lazy.fusion(True, dev):
            case = mod.ember(dev, size)
            case.step()
            case.sync()
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(5):
                case.step()
            case.sync()
            prof.disable()
        print("   host profile of 5 fused steps (top by own time, then by cumulative time):")
        pstats.Stats(prof).sort_stats("tottime").print_stats(22)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    tcase = mod.torch(torch.device("cuda"), size)
    twall = sorted(time_case(tcase, 3, 10))[5]
    kernels(tcase, f"torch (ember fused {walls[True] / twall:.2f}x, unfused {walls[False] / twall:.2f}x)", twall)


def attention_profile() -> None:
    """W4's attention alone (B32 h16 L512 d64, forward): the flash kernel, the shared kernel
    (cuBLAS + softmax), and torch's scaled_dot_product_attention in float32."""
    from ember.array_module.nn import attention as shared

    dev = em.Device.cuda(0)
    cp = dev.backend.cp
    flash = dev.backend.implementation("scaled_dot_product_attention")
    rng = cp.random.default_rng(0)
    q, k, v = (rng.standard_normal((32, 16, 512, 64), dtype=cp.float32) for _ in range(3))

    def gpu_ms(fn) -> float:  # noqa: ANN001
        fn()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        for _ in range(10):
            fn()
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / 10

    flops = 4 * 32 * 16 * 512 * 512 * 64
    for name, fn in (
        ("flash kernel", lambda: flash(q, k, v, is_causal=False, scale=0.125)),
        ("shared kernel (cuBLAS + softmax)", lambda: shared(q, k, v, is_causal=False, scale=0.125)),
        ("flash kernel, causal", lambda: flash(q, k, v, is_causal=True, scale=0.125)),
    ):
        ms = gpu_ms(fn)
        print(f"attention {name:34s} {ms:7.3f} ms  {flops / ms / 1e9:6.1f} TFLOP/s")
    diff = flash(q, k, v, is_causal=False, scale=0.125) - shared(q, k, v, is_causal=False, scale=0.125)
    err = float(cp.abs(diff).max())
    print(f"attention flash vs shared: max abs difference {err:.2e}")
    try:
        from benchmarks.peers import import_peer

        torch = import_peer("torch")
    except ImportError:
        return
    tq, tk, tv = (torch.from_dlpack(a) for a in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sdpa(tq, tk, tv)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        sdpa(tq, tk, tv)
    stop.record()
    stop.synchronize()
    ms = start.elapsed_time(stop) / 10
    print(f"attention torch sdpa (float32)               {ms:7.3f} ms  {flops / ms / 1e9:6.1f} TFLOP/s")


def main() -> None:
    chosen = sys.argv[1:] or ["W1", "W2", "W3", "W4", "W6"]
    if "W4" in chosen:
        attention_profile()
    for workload in ("W2", "W3", "W4"):
        if workload in chosen:
            op_profile(workload)
    if "W1" in chosen:
        w1_profile()
    if "W6" in chosen:
        w6_profile()


def w1_profile() -> None:
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
    pstats.Stats(prof).sort_stats("tottime").print_stats(14)


def w6_profile() -> None:
    """W6: the GPU time of each kernel of the chain, and its bandwidth."""
    dev = em.Device.cuda(0)
    cp = dev.backend.cp
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

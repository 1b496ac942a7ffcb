"""Host time per GEMM call on cuda:0 (the Python and driver work before the call returns, not the
GPU's): ember-cuda's direct cuBLAS kernel, the same through ``em.matmul`` (dispatch, eager), CuPy's
``matmul`` and ``torch.mm``, at W3's and W2's shapes. The device is synchronized every 16 calls
outside the timed calls, so a full launch queue never blocks one. Medians in µs:

    python3 plugins/cuda/scripts/host_gemm.py
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable
from typing import Any

import cupy as cp
import numpy as np
from cupy_backends.cuda.libs import cublas

import ember as em

SHAPES = [(512, 3136, 128), (512, 128, 10), (128, 512, 3136), (4096, 784, 4096), (64, 64, 64)]


def host_us(fn: Callable[[], Any], sync: Callable[[], None], n: int = 160) -> float:
    for _ in range(8):
        fn()
    sync()
    times = []
    for i in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if i % 16 == 15:
            sync()
    sync()
    return statistics.median(times) * 1e6


def row(dev: Any, kernel: Any, torch: Any, m: int, k: int, n: int) -> list[float]:
    """Host µs per call of each way to multiply an (m, k) by a (k, n) float32 matrix."""
    sync = cp.cuda.Device().synchronize
    a = cp.random.standard_normal((m, k), dtype=cp.float32)
    b = cp.random.standard_normal((k, n), dtype=cp.float32)
    with em.lazy.fusion(False, dev):
        ea = em.tensor(cp.asnumpy(a), device=dev)
        eb = em.tensor(cp.asnumpy(b), device=dev)
        times = [host_us(lambda: kernel(a, b), sync), host_us(lambda: em.matmul(ea, eb), dev.synchronize)]
    times.append(host_us(lambda: cp.matmul(a, b), sync))
    if torch is not None:
        ta, tb = torch.as_tensor(a, device="cuda"), torch.as_tensor(b, device="cuda")
        times.append(host_us(lambda: torch.mm(ta, tb), torch.cuda.synchronize))
    # the pieces: an output from ember's pool (CuPy's allocator is ember's), and cuBLAS called with
    # the output preallocated through ctypes (ember's road) and through CuPy's Cython binding
    times.append(host_us(lambda: cp.empty((m, n), dtype=cp.float32), sync))
    out = cp.empty((m, n), dtype=cp.float32)
    one, zero = np.ones((), np.float32), np.zeros((), np.float32)
    p1, p0 = one.ctypes.data, zero.ctypes.data
    handle = cp.cuda.device.get_cublas_handle()
    lib = ctypes.CDLL("libcublas.so.13")
    strided = lib.cublasSgemmStridedBatched
    i, ll, vp = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
    strided.argtypes = [vp, i, i, i, i, i, vp, vp, i, ll, vp, i, ll, vp, vp, i, ll, i]
    plain = lib.cublasSgemm_v2
    plain.argtypes = [vp, i, i, i, i, i, vp, vp, i, vp, i, vp, vp, i]
    pa, pb, po = a.data.ptr, b.data.ptr, out.data.ptr
    times.append(host_us(lambda: strided(handle, 0, 0, n, m, k, p1, pb, n, 0, pa, k, 0, p0, po, n, 0, 1), sync))
    times.append(host_us(lambda: plain(handle, 0, 0, n, m, k, p1, pb, n, pa, k, p0, po, n), sync))
    times.append(host_us(lambda: cublas.sgemm(handle, 0, 0, n, m, k, p1, pb, n, pa, k, p0, po, n), sync))
    return times


def main() -> None:
    dev = em.Device("cuda:0")
    kernel = dev._state.impls["matmul"]
    try:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
    except ImportError:
        torch = None
    print(
        "m, k, n | ember kernel | em.matmul (eager) | cupy.matmul | torch.mm | cp.empty | ctypes strided"
        " | ctypes sgemm | cython sgemm   (host µs per call, median)"
    )
    for m, k, n in SHAPES:
        print(f"{m}x{k}x{n} | " + " | ".join(f"{v:8.1f}" for v in row(dev, kernel, torch, m, k, n)))


if __name__ == "__main__":
    main()

"""Native ``dequantize`` and ``dequant_matmul`` for ember-cuda (int8 and NF4 weights, ember.quant).

NF4 codes are decoded by one kernel (a thread per byte: two 4-bit codes, looked up in the 16
levels and scaled by their block's absmax) straight into the compute dtype, then one cuBLAS
GEMM; the core's composite takes about ten dispatched ops and three float32 temporaries for
the same. int8 needs no kernel of its own: its per-row scale commutes with the product, so the
(N, out) result is scaled instead of the (out, in) weight. ``CALLS`` counts the calls, so tests
can check these ran rather than the composite.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.ops.quant import NF4_LEVELS

__all__ = ["quant_kernels", "CALLS"]

#: calls per op name (tests read it; nothing else depends on it)
CALLS: Counter[str] = Counter()

_LEVELS = ", ".join(f"{float(np.float32(v)):.9e}f" for v in NF4_LEVELS)
_SOURCE = r"""
__constant__ float ember_nf4_levels[16] = {%s};
extern "C" __global__ void %s(const unsigned char* __restrict__ codes, const float* __restrict__ absmax,
                              %s* __restrict__ w, const long long n, const long long bytes, const int block) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < bytes;
         i += (long long)gridDim.x * blockDim.x) {
        const unsigned char c = codes[i];
        const long long e = 2 * i;  // the high nibble is the first element
        if (e < n) w[e] = (%s)ember_nf4_levels[c >> 4] * (%s)absmax[e / block];
        if (e + 1 < n) w[e + 1] = (%s)ember_nf4_levels[c & 15] * (%s)absmax[(e + 1) / block];
    }
}
"""
_CTYPES = {"float32": "float", "float64": "double"}


def source(ctype: str, name: str | None = None) -> str:
    """The NF4 decoding kernel's CUDA source writing ``ctype`` (float or double)."""
    return _SOURCE % ((_LEVELS, name or f"ember_nf4_decode_{ctype}") + (ctype,) * 5)


def quant_kernels(cp: Any) -> dict[str, Callable[..., Any]]:
    """``dequantize`` and ``dequant_matmul`` over CuPy arrays."""
    compiled: dict[str, Any] = {}
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]

    def nf4_kernel(ctype: str) -> Any:
        k = compiled.get(ctype)
        if k is None:
            name = f"ember_nf4_decode_{ctype}"
            k = compiled[ctype] = cp.RawKernel(source(ctype, name), name)
        return k

    def decode(qweight: Any, scales: Any, format: str, shape: tuple[int, int], block_size: int, compute: Any) -> Any:
        """The ``(out, in)`` weight in ``compute`` (float32 or float64)."""
        out, inp = shape
        if format == "int8":
            return qweight.astype(compute) * scales.astype(compute)[:, None]
        n = out * inp
        w = cp.empty(n, compute)
        nbytes = qweight.size
        if nbytes:
            blocks = min((nbytes + 255) // 256, sms * 16)
            nf4_kernel(_CTYPES[np.dtype(compute).name])(
                (blocks,), (256,), (qweight, scales, w, np.int64(n), np.int64(nbytes), np.int32(block_size))
            )
        return w.reshape(out, inp)

    def dequantize(
        qweight: Any, scales: Any, *, format: str, shape: tuple[int, int], block_size: int, dtype: Any
    ) -> Any:
        CALLS["dequantize"] += 1
        target = np.dtype(dtype.numpy)
        compute = np.float64 if target == np.float64 else np.float32
        w = decode(qweight, scales, format, shape, block_size, compute)
        return cp.ascontiguousarray(w.astype(target, copy=False))

    def dequant_matmul(
        x: Any, qweight: Any, scales: Any, *, format: str, shape: tuple[int, int], block_size: int
    ) -> Any:
        CALLS["dequant_matmul"] += 1
        compute = np.float64 if x.dtype == np.float64 else np.float32
        lead = x.shape[:-1]
        x2 = x.reshape(-1, shape[1]).astype(compute, copy=False)
        if format == "int8":
            y = x2 @ qweight.astype(compute).T
            y *= scales.astype(compute)
        else:
            y = x2 @ decode(qweight, scales, format, shape, block_size, compute).T
        return cp.ascontiguousarray(y.reshape(lead + (shape[0],)).astype(x.dtype, copy=False))

    return {"dequantize": dequantize, "dequant_matmul": dequant_matmul}

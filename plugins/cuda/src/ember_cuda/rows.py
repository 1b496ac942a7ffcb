"""Row kernels of ember-cuda: softmax, log-softmax and the softmax backward along the last axis,
and softmax cross-entropy with its gradient over (N, C) logits.

CuPy's path takes five passes over memory and as many temporaries (max, subtract, exp, sum,
divide); attention's (B, H, L, S) scores make that the second-largest cost of a transformer
step after the matmuls. Here one warp owns a row: it reads the row for the maximum, again
(from cache) for the sum, and writes the result once. The backward ``y * (g - sum(g * y))`` is
one kernel the same way. Rows of other axes, or other dtypes, go to the shared kernels.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["row_kernels", "source", "CALLS"]

#: launches per op name (tests read it; nothing else depends on it)
CALLS: Counter[str] = Counter()

_CTYPES = {"float32": "float", "float64": "double"}
_WARPS = 8  # rows per block of 256 threads

_SOURCE = r"""
typedef {T} T;
__device__ __forceinline__ T warp_max(T v) {{
    for (int o = 16; o; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}}
__device__ __forceinline__ T warp_sum(T v) {{
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}}
extern "C" __global__ void ember_softmax_{T}(const T* __restrict__ x, T* __restrict__ y, const long long rows,
                                           const long long n, const int take_log) {{
    const long long row = (long long)blockIdx.x * {W} + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T* xr = x + row * n;
    T* yr = y + row * n;
    T m = -{HUGE};  // below every finite value; fmax skips NaN (a NaN still reaches the sum below)
    for (long long i = lane; i < n; i += 32) m = fmax(m, xr[i]);
    m = warp_max(m);
    // an infinite maximum shifts by 0, as the composite does: a row of -inf gives NaN, not 0
    if (m - m != (T)0) m = 0;
    T s = 0;
    for (long long i = lane; i < n; i += 32) s += exp(xr[i] - m);
    s = warp_sum(s);
    if (take_log) {{
        const T ls = log(s);
        for (long long i = lane; i < n; i += 32) yr[i] = xr[i] - m - ls;
    }} else {{
        const T inv = (T)1 / s;
        for (long long i = lane; i < n; i += 32) yr[i] = exp(xr[i] - m) * inv;
    }}
}}
extern "C" __global__ void ember_softmax_backward_{T}(const T* __restrict__ y, const T* __restrict__ g,
                                                    T* __restrict__ out, const long long rows, const long long n) {{
    const long long row = (long long)blockIdx.x * {W} + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T* yr = y + row * n;
    const T* gr = g + row * n;
    T* outr = out + row * n;
    T d = 0;
    for (long long i = lane; i < n; i += 32) d += gr[i] * yr[i];
    d = warp_sum(d);
    for (long long i = lane; i < n; i += 32) outr[i] = yr[i] * (gr[i] - d);
}}
// softmax cross-entropy of (rows, n) logits against int64 classes, one warp a row: the per-row
// loss (1 - ls) * (lse - x[t]) + ls / n * (n * lse - sum x), 0 where t == ignore, NaN where t is
// outside 0..n-1 (a backend that queues work does not read the targets back to check them)
extern "C" __global__ void ember_cross_entropy_{T}(const T* __restrict__ x, const long long* __restrict__ t,
                                                 T* __restrict__ loss, const long long rows, const long long n,
                                                 const T ls, const long long ignore) {{
    const long long row = (long long)blockIdx.x * {W} + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T* xr = x + row * n;
    const long long k = t[row];
    T m = -{HUGE};
    for (long long i = lane; i < n; i += 32) m = fmax(m, xr[i]);
    m = warp_max(m);
    if (m - m != (T)0) m = 0;
    T s = 0, sx = 0;
    for (long long i = lane; i < n; i += 32) {{ s += exp(xr[i] - m); sx += xr[i] - m; }}
    s = warp_sum(s);
    sx = warp_sum(sx);
    if (lane) return;
    if (k == ignore) {{ loss[row] = 0; return; }}
    if (k < 0 || k >= n) {{ loss[row] = {NAN}; return; }}
    const T lse = log(s);  // of the shifted row
    T v = lse - (xr[k] - m);
    if (ls != (T)0) v = ((T)1 - ls) * v + ls / (T)n * ((T)n * lse - sx);
    loss[row] = v;
}}
// its gradient with respect to the logits at per-row cotangent g (stride gs: 0 for a broadcast
// g): g * (softmax(x) - (1 - ls) * onehot(t) - ls / n), rows of ignored targets zero
extern "C" __global__ void ember_cross_entropy_backward_{T}(const T* __restrict__ g, const long long gs,
                                                          const T* __restrict__ x, const long long* __restrict__ t,
                                                          T* __restrict__ out, const long long rows,
                                                          const long long n, const T ls, const long long ignore) {{
    const long long row = (long long)blockIdx.x * {W} + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T* xr = x + row * n;
    T* outr = out + row * n;
    const long long k = t[row];
    if (k == ignore) {{
        for (long long i = lane; i < n; i += 32) outr[i] = 0;
        return;
    }}
    T m = -{HUGE};
    for (long long i = lane; i < n; i += 32) m = fmax(m, xr[i]);
    m = warp_max(m);
    if (m - m != (T)0) m = 0;
    T s = 0;
    for (long long i = lane; i < n; i += 32) s += exp(xr[i] - m);
    s = warp_sum(s);
    const T scale = g[row * gs];
    const T inv = (T)1 / s, off = ls / (T)n, hit = (T)1 - ls;
    for (long long i = lane; i < n; i += 32)
        outr[i] = scale * (exp(xr[i] - m) * inv - off - (i == k ? hit : (T)0));
}}
"""


def source(ctype: str) -> str:
    """The row kernels' CUDA source for ``ctype`` (float or double)."""
    return _SOURCE.format(
        T=ctype,
        W=_WARPS,
        HUGE="__int_as_float(0x7f800000)" if ctype == "float" else "__longlong_as_double(0x7ff0000000000000LL)",
        NAN="__int_as_float(0x7fc00000)" if ctype == "float" else "__longlong_as_double(0x7ff8000000000000LL)",
    )


def row_kernels(cp: Any, fallback: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``softmax``, ``log_softmax`` and ``softmax_backward`` over CuPy arrays (last axis), and
    ``cross_entropy`` / ``cross_entropy_backward`` of 2-D float logits (the rest: ``fallback``)."""
    modules: dict[str, Any] = {}
    names = {np.dtype(n): c for n, c in _CTYPES.items()}

    def function(ctype: str, name: str) -> Any:
        module = modules.get(ctype)
        if module is None:
            module = modules[ctype] = cp.RawModule(code=source(ctype))
        return module.get_function(f"{name}_{ctype}")

    def last_axis(a: Any, axis: int) -> bool:
        return axis in (-1, a.ndim - 1) and a.size > 0 and a.ndim > 0

    def softmax_like(op: str, log: int) -> Callable[..., Any]:
        other = fallback[op]

        def run(a: Any, *, axis: int) -> Any:
            ctype = names.get(a.dtype)
            if ctype is None or not last_axis(a, axis):
                return other(a, axis=axis)
            a = cp.ascontiguousarray(a)
            n = a.shape[-1]
            rows = a.size // n
            out = cp.empty_like(a)
            CALLS[op] += 1
            function(ctype, "ember_softmax")(
                (-(-rows // _WARPS),), (32 * _WARPS,), (a, out, np.int64(rows), np.int64(n), np.int32(log))
            )
            return out

        return run

    backward = fallback["softmax_backward"]

    def softmax_backward(y: Any, g: Any, *, axis: int) -> Any:
        ctype = names.get(y.dtype)
        if ctype is None or g.dtype != y.dtype or g.shape != y.shape or not last_axis(y, axis):
            return backward(y, g, axis=axis)
        y, g = cp.ascontiguousarray(y), cp.ascontiguousarray(g)
        n = y.shape[-1]
        rows = y.size // n
        out = cp.empty_like(y)
        CALLS["softmax_backward"] += 1
        function(ctype, "ember_softmax_backward")(
            (-(-rows // _WARPS),), (32 * _WARPS,), (y, g, out, np.int64(rows), np.int64(n))
        )
        return out

    forward, ce_backward = fallback["cross_entropy"], fallback["cross_entropy_backward"]

    def rows_of(logits: Any, target: Any) -> tuple[str, int, int] | None:
        """(ctype, rows, classes) where the kernels take the case: 2-D float logits, int64 targets."""
        ctype = names.get(logits.dtype)
        if ctype is None or logits.ndim != 2 or target.dtype != np.int64 or target.shape != logits.shape[:1]:
            return None
        rows, n = logits.shape
        return None if rows == 0 or n == 0 else (ctype, rows, n)

    def cross_entropy(logits: Any, target: Any, *, label_smoothing: float, ignore_index: int) -> Any:
        case = rows_of(logits, target)
        if case is None:
            return forward(logits, target, label_smoothing=label_smoothing, ignore_index=ignore_index)
        ctype, rows, n = case
        x, t = cp.ascontiguousarray(logits), cp.ascontiguousarray(target)
        loss = cp.empty((rows,), dtype=logits.dtype)
        CALLS["cross_entropy"] += 1
        ls = logits.dtype.type(label_smoothing)
        function(ctype, "ember_cross_entropy")(
            (-(-rows // _WARPS),), (32 * _WARPS,), (x, t, loss, np.int64(rows), np.int64(n), ls, np.int64(ignore_index))
        )
        return loss

    def cross_entropy_backward(g: Any, logits: Any, target: Any, *, label_smoothing: float, ignore_index: int) -> Any:
        case = rows_of(logits, target)
        if case is None or g.dtype != logits.dtype or g.shape != target.shape:
            return ce_backward(g, logits, target, label_smoothing=label_smoothing, ignore_index=ignore_index)
        ctype, rows, n = case
        x, t = cp.ascontiguousarray(logits), cp.ascontiguousarray(target)
        gs = g.strides[0] // g.itemsize  # 0: a broadcast cotangent (the mean's), read without a copy
        out = cp.empty((rows, n), dtype=logits.dtype)
        CALLS["cross_entropy_backward"] += 1
        ls = logits.dtype.type(label_smoothing)
        function(ctype, "ember_cross_entropy_backward")(
            (-(-rows // _WARPS),),
            (32 * _WARPS,),
            (g, np.int64(gs), x, t, out, np.int64(rows), np.int64(n), ls, np.int64(ignore_index)),
        )
        return out

    return {
        "cross_entropy": cross_entropy,
        "cross_entropy_backward": cross_entropy_backward,
        "softmax": softmax_like("softmax", 0),
        "log_softmax": softmax_like("log_softmax", 1),
        "softmax_backward": softmax_backward,
    }

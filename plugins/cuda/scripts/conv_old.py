"""The previous ember_cuda.conv (commit c538fab), kept for conv_bench.py to time beside the new one.

Convolution and max-pooling kernels of ember-cuda for two spatial axes (NCHW, float32/float64).

The shared kernels build a convolution from a padded copy, a strided window view copied into
columns and a batched matmul (CuPy's batched matmul makes a pointer array per call: ~0.2 ms of
host time each), and a max-pool backward from ~5 kernels per window offset; on a small CNN that
is ~200 launches a step and the host, not the GPU, sets the pace. Here:

- ``conv``: one im2col kernel writes columns as (C*KH*KW, N*L), one cuBLAS GEMM with the weight
  gives (Cout, N*L), and one kernel swaps the two leading axes to (N, Cout, L), adding the bias.
- ``conv_weight_grad``: the gradient swapped to (Cout, N*L), the columns as above, one GEMM.
- ``conv_transpose`` (a convolution's input gradient): the input swapped to (Cin, N*L), one GEMM
  to columns, then a col2im kernel in which each output element gathers its window taps (no
  atomics, no zero fill).
- ``max_pool`` / ``max_pool_backward``: a thread per output (the window's maximum, NaN wins) and
  a thread per input (the gradient of each window whose first maximum is this element).

Other ranks, groups and dtypes go to the shared kernels.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["conv_kernels", "source", "CALLS"]

#: launches per kernel name (tests read it; nothing else depends on it)
CALLS: Counter[str] = Counter()

_CTYPES = {"float32": "float", "float64": "double"}
_THREADS = 256
#: arrays (and column buffers) of this many elements or more go to the shared kernels (32-bit
#: indices, with room for a grid stride past the end)
_MAX = 2**31 - 2**24

_SOURCE = r"""
typedef {T} T;
// 32-bit index arithmetic throughout (a 64-bit division costs ~20x a 32-bit one on the GPU): the
// Python side sends arrays of 2^31 elements or more to the shared kernels
#define GRID_LOOP(i, total) \
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (total); i += gridDim.x * blockDim.x)

// cols[ck, n, l] = padded x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw]
extern "C" __global__ void ember_im2col_{T}(const T* __restrict__ x, T* __restrict__ cols, const int N, const int C,
        const int H, const int W, const int OH, const int OW, const int KH, const int KW, const int sh, const int sw,
        const int ph, const int pw, const int dh, const int dw) {{
    const int L = OH * OW;
    GRID_LOOP(i, C * KH * KW * N * L) {{
        const int l = i % L, r = i / L;
        const int n = r % N, ck = r / N;
        const int kw = ck % KW, kh = (ck / KW) % KH, c = ck / (KW * KH);
        const int ih = (l / OW) * sh - ph + kh * dh, iw = (l % OW) * sw - pw + kw * dw;
        cols[i] = (ih >= 0 && ih < H && iw >= 0 && iw < W) ? x[((n * C + c) * H + ih) * W + iw] : (T)0;
    }}
}}

// x[n, c, ih, iw] = sum of the columns cols[(c, kh, kw), n, (oh, ow)] whose tap lands on (ih, iw)
extern "C" __global__ void ember_col2im_{T}(const T* __restrict__ cols, T* __restrict__ x, const int N, const int C,
        const int H, const int W, const int OH, const int OW, const int KH, const int KW, const int sh, const int sw,
        const int ph, const int pw, const int dh, const int dw) {{
    const int L = OH * OW;
    GRID_LOOP(i, N * C * H * W) {{
        const int iw = i % W, ih = (i / W) % H, c = (i / (W * H)) % C, n = i / (W * H * C);
        T acc = 0;
        for (int kh = 0; kh < KH; kh++) {{
            const int a = ih + ph - kh * dh;
            if (a < 0 || a % sh) continue;
            const int oh = a / sh;
            if (oh >= OH) continue;
            for (int kw = 0; kw < KW; kw++) {{
                const int b = iw + pw - kw * dw;
                if (b < 0 || b % sw) continue;
                const int ow = b / sw;
                if (ow >= OW) continue;
                acc += cols[(((c * KH + kh) * KW + kw) * N + n) * L + oh * OW + ow];
            }}
        }}
        x[i] = acc;
    }}
}}

// dst[b, a, l] = src[a, b, l] (+ bias[a]): (Cout, N, L) <-> (N, Cout, L)
extern "C" __global__ void ember_swap01_{T}(const T* __restrict__ src, T* __restrict__ dst,
        const T* __restrict__ bias, const int A, const int B, const int L, const int has_bias) {{
    GRID_LOOP(i, A * B * L) {{
        const int l = i % L, r = i / L, b = r % B, a = r / B;
        const T v = src[i];
        dst[(b * A + a) * L + l] = has_bias ? v + bias[a] : v;
    }}
}}

// -inf (NVRTC has no math headers, so no INFINITY)
#define NEG_INF (-(T)__longlong_as_double(0x7ff0000000000000LL))

__device__ __forceinline__ T tap(const T* __restrict__ x, int base, int h, int w, const int H, const int W) {{
    return (h >= 0 && h < H && w >= 0 && w < W) ? x[base + h * W + w] : NEG_INF;
}}

// out[nc, oh, ow] = the maximum of the window (padding is -inf; a NaN wins, as numpy's maximum)
extern "C" __global__ void ember_max_pool_{T}(const T* __restrict__ x, T* __restrict__ out, const int NC, const int H,
        const int W, const int OH, const int OW, const int KH, const int KW, const int sh, const int sw, const int ph,
        const int pw, const int dh, const int dw) {{
    GRID_LOOP(i, NC * OH * OW) {{
        const int ow = i % OW, oh = (i / OW) % OH, nc = i / (OW * OH);
        T m = NEG_INF;
        for (int kh = 0; kh < KH; kh++)
            for (int kw = 0; kw < KW; kw++) {{
                const T v = tap(x, nc * H * W, oh * sh - ph + kh * dh, ow * sw - pw + kw * dw, H, W);
                if (v > m || v != v) m = v;
            }}
        out[i] = m;
    }}
}}

// dx[nc, ih, iw] = sum of g over the windows whose first tap equal to their maximum is (ih, iw)
extern "C" __global__ void ember_max_pool_backward_{T}(const T* __restrict__ g, const T* __restrict__ x,
        const T* __restrict__ out, T* __restrict__ dx, const int NC, const int H, const int W, const int OH,
        const int OW, const int KH, const int KW, const int sh, const int sw, const int ph, const int pw,
        const int dh, const int dw) {{
    const bool tiled = sh == KH && sw == KW && dh == 1 && dw == 1;  // windows tile the input
    GRID_LOOP(i, NC * H * W) {{
        const int iw = i % W, ih = (i / W) % H, nc = i / (W * H);
        if (tiled) {{  // the one window holding (ih, iw): no search over offsets
            const int oh = (ih + ph) / KH, ow = (iw + pw) / KW;
            T acc = 0;
            if (oh < OH && ow < OW) {{
                const int o = (nc * OH + oh) * OW + ow, h0 = oh * KH - ph, w0 = ow * KW - pw;
                const T best = out[o];
                int first = -1;
                for (int k = 0; k < KH * KW && first < 0; k++)
                    if (tap(x, nc * H * W, h0 + k / KW, w0 + k % KW, H, W) == best) first = k;
                if (first == (ih - h0) * KW + (iw - w0)) acc = g[o];
            }}
            dx[i] = acc;
            continue;
        }}
        T acc = 0;
        for (int kh = 0; kh < KH; kh++) {{
            const int a = ih + ph - kh * dh;
            if (a < 0 || a % sh) continue;
            const int oh = a / sh;
            if (oh >= OH) continue;
            for (int kw = 0; kw < KW; kw++) {{
                const int b = iw + pw - kw * dw;
                if (b < 0 || b % sw) continue;
                const int ow = b / sw;
                if (ow >= OW) continue;
                const int o = (nc * OH + oh) * OW + ow;
                const T best = out[o];
                int first = -1;
                for (int k = 0; k < KH * KW && first < 0; k++)
                    if (tap(x, nc * H * W, oh * sh - ph + (k / KW) * dh, ow * sw - pw + (k % KW) * dw, H, W) == best)
                        first = k;
                if (first == kh * KW + kw) acc += g[o];
            }}
        }}
        dx[i] = acc;
    }}
}}
"""


def source(ctype: str) -> str:
    """CUDA C of the five kernels for ``ctype`` (``float`` or ``double``)."""
    return _SOURCE.format(T=ctype)


def _blocks(size: int, k: int, s: int, pad: tuple[int, int], d: int) -> int:
    return (size + pad[0] + pad[1] - d * (k - 1) - 1) // s + 1


def conv_kernels(cp: Any, fallback: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``conv``, ``conv_weight_grad``, ``conv_transpose``, ``max_pool`` and ``max_pool_backward``
    over CuPy arrays: two spatial axes, float32/float64, one group; anything else to ``fallback``."""
    modules: dict[str, Any] = {}
    names = {np.dtype(n): c for n, c in _CTYPES.items()}
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    i32 = np.int32
    matmul = fallback["matmul"]  # the backend's own (cuBLAS called directly: capturable in a CUDA graph)

    def launch(ctype: str, name: str, total: int, args: tuple[Any, ...]) -> None:
        module = modules.get(ctype)
        if module is None:
            module = modules[ctype] = cp.RawModule(code=source(ctype))
        CALLS[name] += 1
        blocks = max(1, min(-(-total // _THREADS), sms * 32))
        module.get_function(f"ember_{name}_{ctype}")((blocks,), (_THREADS,), args)

    def geometry(kernel: Any, stride: Any, padding: Any, dilation: Any) -> tuple[Any, ...]:
        (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
        return (i32(kh), i32(kw), i32(sh), i32(sw), i32(padding[0][0]), i32(padding[1][0]), i32(dh), i32(dw))

    def im2col(ctype: str, x: Any, oh: int, ow: int, geo: tuple[Any, ...]) -> Any:
        """(C*KH*KW, N*OH*OW) columns of contiguous NCHW ``x``."""
        n, c, h, w = x.shape
        cols = cp.empty((c * int(geo[0]) * int(geo[1]), n * oh * ow), dtype=x.dtype)
        args = (x, cols, i32(n), i32(c), i32(h), i32(w), i32(oh), i32(ow), *geo)
        launch(ctype, "im2col", cols.size, args)
        return cols

    def swap01(ctype: str, src: Any, a: int, b: int, length: int, bias: Any = None) -> Any:
        """(A, B, L) -> (B, A, L), adding ``bias[a]`` when given."""
        dst = cp.empty((b, a, length), dtype=src.dtype)
        has = bias is not None
        args = (src, dst, bias if has else src, i32(a), i32(b), i32(length), i32(has))
        launch(ctype, "swap01", src.size, args)
        return dst

    def plain(*arrays: Any, nd: int) -> str | None:
        """The kernels' type name when every array is a float32/float64 of ``nd`` spatial axes."""
        ctype = names.get(arrays[0].dtype)
        if ctype is None or any(a.dtype != arrays[0].dtype or a.ndim != 2 + nd or a.size >= _MAX for a in arrays):
            return None
        return ctype if nd == 2 else None

    other_conv = fallback["conv"]

    def conv(x: Any, w: Any, *bias: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> Any:
        ctype = plain(x, w, nd=len(stride))
        if ctype is None or groups != 1 or x.size == 0 or (bias and bias[0].dtype != x.dtype):
            return other_conv(x, w, *bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
        n, _, h, wd = x.shape
        cout, _, kh, kw = w.shape
        oh = _blocks(h, kh, stride[0], padding[0], dilation[0])
        ow = _blocks(wd, kw, stride[1], padding[1], dilation[1])
        if w.shape[1] * kh * kw * n * oh * ow >= _MAX or cout * n * oh * ow >= _MAX:
            return other_conv(x, w, *bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
        cols = im2col(ctype, cp.ascontiguousarray(x), oh, ow, geometry((kh, kw), stride, padding, dilation))
        yt = matmul(cp.ascontiguousarray(w).reshape(cout, -1), cols)  # (Cout, N*L)
        b = cp.ascontiguousarray(bias[0]) if bias else None
        return swap01(ctype, yt, cout, n, oh * ow, b).reshape(n, cout, oh, ow)

    other_wgrad = fallback["conv_weight_grad"]

    def conv_weight_grad(g: Any, x: Any, *, kernel: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> Any:
        ctype = plain(g, x, nd=len(stride))
        if ctype is None or groups != 1 or x.size == 0:
            return other_wgrad(g, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation, groups=groups)
        n, cout, oh, ow = g.shape
        cin = x.shape[1]
        if cin * math.prod(kernel) * n * oh * ow >= _MAX:
            return other_wgrad(g, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation, groups=groups)
        gt = swap01(ctype, cp.ascontiguousarray(g), n, cout, oh * ow)  # (Cout, N, L)
        cols = im2col(ctype, cp.ascontiguousarray(x), oh, ow, geometry(kernel, stride, padding, dilation))
        return matmul(gt.reshape(cout, -1), cols.T).reshape((cout, cin, *kernel))

    other_transpose = fallback["conv_transpose"]

    def conv_transpose(
        x: Any, w: Any, *bias: Any, size: Any, stride: Any, padding: Any, dilation: Any, groups: int
    ) -> Any:
        ctype = plain(x, w, nd=len(stride))
        if ctype is None or groups != 1 or x.size == 0 or (bias and bias[0].dtype != x.dtype):
            return other_transpose(
                x, w, *bias, size=size, stride=stride, padding=padding, dilation=dilation, groups=groups
            )
        n, cin, oh, ow = x.shape
        _, cout, kh, kw = w.shape
        h, wd = size
        if cout * kh * kw * n * oh * ow >= _MAX or n * cout * h * wd >= _MAX:
            return other_transpose(
                x, w, *bias, size=size, stride=stride, padding=padding, dilation=dilation, groups=groups
            )
        xt = swap01(ctype, cp.ascontiguousarray(x), n, cin, oh * ow)  # (Cin, N, L)
        cols = matmul(cp.ascontiguousarray(w).reshape(cin, -1).T, xt.reshape(cin, -1))  # (Cout*K, N*L)
        y = cp.empty((n, cout, h, wd), dtype=x.dtype)
        geo = geometry((kh, kw), stride, padding, dilation)
        launch(ctype, "col2im", y.size, (cols, y, i32(n), i32(cout), i32(h), i32(wd), i32(oh), i32(ow), *geo))
        if bias:
            y += bias[0].reshape(1, -1, 1, 1)
        return y

    other_pool, other_pool_grad = fallback["max_pool"], fallback["max_pool_backward"]

    def max_pool(x: Any, *, kernel: Any, stride: Any, padding: Any, dilation: Any) -> Any:
        ctype = plain(x, nd=len(kernel))
        if ctype is None or x.size == 0:
            return other_pool(x, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
        n, c, h, w = x.shape
        oh = _blocks(h, kernel[0], stride[0], padding[0], dilation[0])
        ow = _blocks(w, kernel[1], stride[1], padding[1], dilation[1])
        out = cp.empty((n, c, oh, ow), dtype=x.dtype)
        geo = geometry(kernel, stride, padding, dilation)
        args = (cp.ascontiguousarray(x), out, i32(n * c), i32(h), i32(w), i32(oh), i32(ow), *geo)
        launch(ctype, "max_pool", out.size, args)
        return out

    def max_pool_backward(g: Any, x: Any, out: Any, *, kernel: Any, stride: Any, padding: Any, dilation: Any) -> Any:
        ctype = plain(g, x, out, nd=len(kernel))
        if ctype is None or x.size == 0 or g.shape != out.shape:
            return other_pool_grad(g, x, out, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
        n, c, h, w = x.shape
        oh, ow = out.shape[2:]
        dx = cp.empty(x.shape, dtype=x.dtype)
        geo = geometry(kernel, stride, padding, dilation)
        g, x, out = cp.ascontiguousarray(g), cp.ascontiguousarray(x), cp.ascontiguousarray(out)
        args = (g, x, out, dx, i32(n * c), i32(h), i32(w), i32(oh), i32(ow), *geo)
        launch(ctype, "max_pool_backward", dx.size, args)
        return dx

    return {
        "conv": conv,
        "conv_weight_grad": conv_weight_grad,
        "conv_transpose": conv_transpose,
        "max_pool": max_pool,
        "max_pool_backward": max_pool_backward,
    }

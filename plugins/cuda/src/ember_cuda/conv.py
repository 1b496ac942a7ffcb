"""Convolution and max-pooling kernels of ember-cuda for two spatial axes (NCHW, float32/float64).

Convolution, its input gradient and its weight gradient are implicit GEMMs by default
(:mod:`.igemm`: no column buffer, one kernel each; ``OPTIONS["implicit"]``, ``EMBER_CUDA_IMPLICIT_CONV=0``
to switch off). On an H100 (W3, batch 512) they cut the three conv2 ops' GPU time 0.57 -> 0.46 ms, the
eager step 3.05 -> 2.77 ms (one process, alternated) and the step's peak in use to 128 MiB
(plugins/cuda/logs/h100-2026-12-07-fifth). A weight gradient of fewer than
``OPTIONS["implicit_wgrad_columns"]`` columns (W3's first layer: 9) would idle most of a 128-column
tile and keeps the per-sample products below; the other im2col layouts below stay selectable.

The shared kernels build a convolution from a padded copy, a strided window view copied into
columns and a batched matmul (CuPy's batched matmul makes a pointer array per call: ~0.2 ms of
host time each), and a max-pool backward from ~5 kernels per window offset; on a small CNN that
is ~200 launches a step and the host, not the GPU, sets the pace. Here (all memory-bound, so the
design goal is few passes over memory and little index arithmetic per element):

- ``conv``: one im2col kernel (a thread per input pixel and output position, writing its KH*KW
  taps). For long output rows (L = OH*OW >= 512) the columns are by sample, (N, C*KH*KW, L), plus
  a row of ones when there is a bias, and one strided-batched cuBLAS GEMM of the weight (with the
  bias as one more column) against each sample's columns gives (N, Cout, L), which is NCHW: no
  transpose, no bias pass. For short rows a batched GEMM idles the rows of each sample's last
  tile past L (a quarter of the work at L = 196), so the columns are (C*KH*KW, N*L), one GEMM
  gives (Cout, N*L) and a vectorised transpose adds the bias.
- ``conv_weight_grad``: when the columns are much smaller than the gradient (a first layer: C*K
  columns of L-long rows, C*K << L), one batched GEMM of per-sample products g[n] @ cols[n]^T and
  a GEMM with a ones vector summing them over the batch; otherwise the gradient transposed to
  (Cout, N*L), the columns laid out (C*K, N*L), one GEMM.
- ``conv_transpose`` (a convolution's input gradient): the weight against the input, by sample
  for long rows (one batched GEMM, the input already (N, Cin, L)) or, for short rows, against the
  input transposed to (Cin, N*L) in one GEMM; then a col2im kernel in which each output element
  gathers its window taps and the bias (no atomics, no zero fill).
- ``max_pool``: a thread per output (the window's maximum, NaN wins). ``max_pool_backward``: when
  the windows tile the input (stride == kernel, W3's 2x2) a thread per window writes the
  gradient of all its inputs (x read once, no search per input); otherwise a thread per input
  gathers the gradient of each window whose first maximum is this element.

With implicit GEMM off, column buffers larger than ``OPTIONS["columns_bytes"]`` are not made: the batch runs in chunks
(:func:`spans`), each its own im2col and GEMM, the weight gradient's chunks summed by cuBLAS in
place (beta = 1). ``OPTIONS`` holds the thresholds (``scripts/conv_bench.py`` times each layout). Other ranks,
groups and dtypes go to the shared kernels.
"""

from __future__ import annotations

import ctypes
import math
from collections import Counter
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from . import igemm, settings
from .blas import store_product
from .kernels import Launcher as _Launcher

__all__ = ["conv_kernels", "source", "spans", "CALLS", "OPTIONS", "NEVER"]

#: launches per kernel name (tests read it; nothing else depends on it)
CALLS: Counter[str] = Counter()

#: layout choices, read at every call: ``forward_by_sample`` (from this OH*OW on, the forward writes
#: (N, CK, L) columns for a batched GEMM, below it (CK, N*L) columns, one GEMM and a transpose of
#: the output), ``transpose_by_sample`` (likewise for conv_transpose: a batched GEMM from this OH*OW
#: on, else the input transposed and one GEMM) and ``wgrad_partials`` (per-sample weight-gradient
#: products summed by a GEMM when C*KH*KW <= this times OH*OW; 0 never). A batched GEMM of L-long
#: rows wastes the part of its last tile past L (L = 196: 60 of 256 rows); one GEMM over N*L wastes
#: nothing but needs a transpose. On the H100 (conv_bench.py, batch 512), W3's conv2 (L = 196) took
#: 0.18 ms forward and 0.21 ms input gradient with one GEMM and the transpose, and the batched forms
#: cost the W3 step about as much as the three transposes they saved; its conv1 weight gradient
#: took 0.063 ms with partials, 0.18 ms with the transpose and one GEMM.
#: ``columns_bytes`` caps a column buffer: a convolution whose columns would take more runs over
#: chunks of the batch, a GEMM each (the weight gradient summed in place by cuBLAS), so a large batch
#: needs no columns of its whole size (``EMBER_CUDA_COLUMNS_BYTES`` sets it at import). Measured on an
#: H100 (W3, batch 512): a 32 MiB cap cut the step's peak in use 238 -> 164 MiB; with the arena packed to
#: the step's peak (979d8dd) adaptive's plan holds under it (166.5 MiB reserved, 0.63x static's 264.6), but
#: the chunks' extra launches cost the host-bound eager step 3.29 -> 5.54 ms (torch 1.9-2.0): so the
#: default, 1 GiB, leaves W3 whole and only bounds what a batch asks. Those figures had two chunks'
#: columns live at the peak (conv_transpose's argument tuple kept the last chunk's): freed first since
#: abb0d21, the H200's trace replays to 134 MiB in use, 0.59x static's (logs/replay-2026-12-07).
OPTIONS: dict[str, Any] = {
    "forward_by_sample": 512,
    "transpose_by_sample": 512,
    "wgrad_partials": 0.25,
    "columns_bytes": settings.columns_bytes(),
    # implicit GEMM for conv and conv_transpose, and for weight gradients of this many columns or more
    "implicit": settings.implicit_conv(),
    "implicit_wgrad_columns": 64,
}
#: an OH*OW no convolution reaches (for OPTIONS: never by sample)
NEVER = 2**62

_CTYPES = {"float32": "float", "float64": "double"}
_THREADS = 256
#: arrays (and column buffers) of this many elements or more go to the shared kernels (32-bit
#: indices, with room for a grid stride past the end)
_MAX = 2**31 - 2**24
_SOURCE = r"""
typedef {T} T;
typedef {V} V;  // 16 bytes of T in one load / store (swap01v)
// 32-bit index arithmetic throughout (a 64-bit division costs ~20x a 32-bit one on the GPU): the
// Python side sends arrays of 2^31 elements or more to the shared kernels. Each thread divides a
// flat index two or three times and then walks a whole window, never dividing per element.
// ember_im2col3x3, ember_col2im3x3 and ember_max_pool_backward_tiled2x2 run the same bodies as their
// runtime-window kernels with the window fixed at compile time (W3's 3x3 convolutions and 2x2
// pools): the tap loops unroll and their loads overlap.
#define GRID_LOOP(i, total) \
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < (total); i += gridDim.x * blockDim.x)

// a thread per (n, c, l = oh*OW + ow) writes its KH*KW taps:
//   cols[n*sn + ((c*KH + kh)*KW + kw)*sk + l] = padded x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw]
// (sn, sk) = (rows*L, L) lays the columns out (N, rows, L), (L, N*L) lays them out (rows, N*L). The
// rows past C*KH*KW (``extra`` of them, written by the c == 0 threads) are ones when ``ones`` (a bias
// folded into the GEMM), then zeros (K padded to a multiple of 4 for cuBLAS's aligned kernels).
// Consecutive threads write consecutive l of each row: every store is coalesced.
template <int FKH, int FKW>
__device__ __forceinline__ void im2col_body(const T* __restrict__ x, T* __restrict__ cols, const int N, const int C,
        const int H, const int W, const int OH, const int OW, const int KH_, const int KW_, const int sh, const int sw,
        const int ph, const int pw, const int dh, const int dw, const int sn, const int sk, const int extra,
        const int ones) {{
    const int KH = FKH ? FKH : KH_, KW = FKW ? FKW : KW_;  // compile-time when fixed: loops unroll
    const int L = OH * OW, KK = KH * KW;
    GRID_LOOP(i, N * C * L) {{
        const int r = i / L, l = i - r * L;  // r = n*C + c
        const int n = r / C, c = r - n * C;
        const int oh = l / OW, ow = l - oh * OW;
        const int h0 = oh * sh - ph, w0 = ow * sw - pw;
        const T* __restrict__ xp = x + r * H * W;
        T* __restrict__ out = cols + n * sn + c * KK * sk + l;
        for (int kh = 0; kh < KH; kh++) {{
            const int ih = h0 + kh * dh;
            const bool row = ih >= 0 && ih < H;
            for (int kw = 0; kw < KW; kw++) {{
                const int iw = w0 + kw * dw;
                *out = (row && iw >= 0 && iw < W) ? xp[ih * W + iw] : (T)0;
                out += sk;
            }}
        }}
        if (c == 0)
            for (int e = 0; e < extra; e++) cols[n * sn + (C * KK + e) * sk + l] = (e == 0 && ones) ? (T)1 : (T)0;
    }}
}}
extern "C" __global__ void ember_im2col_{T}(const T* __restrict__ x, T* __restrict__ cols, const int N, const int C,
        const int H, const int W, const int OH, const int OW, const int KH, const int KW, const int sh, const int sw,
        const int ph, const int pw, const int dh, const int dw, const int sn, const int sk, const int extra,
        const int ones) {{
    im2col_body<0, 0>(x, cols, N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, sn, sk, extra, ones);
}}
extern "C" __global__ void ember_im2col3x3_{T}(const T* __restrict__ x, T* __restrict__ cols, const int N, const int C,
        const int H, const int W, const int OH, const int OW, const int KH, const int KW, const int sh, const int sw,
        const int ph, const int pw, const int dh, const int dw, const int sn, const int sk, const int extra,
        const int ones) {{
    im2col_body<3, 3>(x, cols, N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, sn, sk, extra, ones);
}}

// a thread per x[n, c, ih, iw] = bias[c] + the sum of the columns whose tap lands on (ih, iw), the
// columns laid out as im2col's (sn, sk); no atomics, no zero fill, no division when the stride is 1
template <int FKH, int FKW>
__device__ __forceinline__ void col2im_body(const T* __restrict__ cols, T* __restrict__ x, const T* __restrict__ bias,
        const int N, const int C, const int H, const int W, const int OH, const int OW, const int KH_, const int KW_,
        const int sh, const int sw, const int ph, const int pw, const int dh, const int dw, const int sn, const int sk,
        const int has_bias) {{
    const int KH = FKH ? FKH : KH_, KW = FKW ? FKW : KW_;  // compile-time when fixed: loops unroll
    const int HW = H * W, KK = KH * KW;
    GRID_LOOP(i, N * C * HW) {{
        const int r = i / HW, p = i - r * HW;
        const int n = r / C, c = r - n * C;
        const int ih = p / W, iw = p - ih * W;
        const T* __restrict__ base = cols + n * sn + c * KK * sk;
        T acc = has_bias ? bias[c] : (T)0;
        for (int kh = 0; kh < KH; kh++) {{  // predicated, not branched: the taps' loads overlap
            const int a = ih + ph - kh * dh;
            const int oh = sh == 1 ? a : a / sh;
            const bool row = a >= 0 && oh * sh == a && oh < OH;
            for (int kw = 0; kw < KW; kw++) {{
                const int b = iw + pw - kw * dw;
                const int ow = sw == 1 ? b : b / sw;
                if (row && b >= 0 && ow * sw == b && ow < OW) acc += base[(kh * KW + kw) * sk + oh * OW + ow];
            }}
        }}
        x[i] = acc;
    }}
}}
extern "C" __global__ void ember_col2im_{T}(const T* __restrict__ cols, T* __restrict__ x, const T* __restrict__ bias,
        const int N, const int C, const int H, const int W, const int OH, const int OW, const int KH, const int KW,
        const int sh, const int sw, const int ph, const int pw, const int dh, const int dw, const int sn, const int sk,
        const int has_bias) {{
    col2im_body<0, 0>(cols, x, bias, N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, sn, sk, has_bias);
}}
extern "C" __global__ void ember_col2im3x3_{T}(const T* __restrict__ cols, T* __restrict__ x,
        const T* __restrict__ bias, const int N, const int C, const int H, const int W, const int OH, const int OW,
        const int KH, const int KW, const int sh, const int sw, const int ph, const int pw, const int dh, const int dw,
        const int sn, const int sk, const int has_bias) {{
    col2im_body<3, 3>(cols, x, bias, N, C, H, W, OH, OW, KH, KW, sh, sw, ph, pw, dh, dw, sn, sk, has_bias);
}}

// out[co, k] = w[co, k] for k < CK, bias[co] at k == CK, 0 past it: the weight beside im2col's ones row
extern "C" __global__ void ember_pack_weight_{T}(const T* __restrict__ w, const T* __restrict__ bias,
        T* __restrict__ out, const int rows, const int CK, const int CKP) {{
    GRID_LOOP(i, rows * CKP) {{
        const int r = i / CKP, k = i - r * CKP;
        out[i] = k < CK ? w[r * CK + k] : (k == CK ? bias[r] : (T)0);
    }}
}}

// dst[b, a, l] = src[a, b, l] (+ bias[a]): (A, B, L) <-> (B, A, L)
extern "C" __global__ void ember_swap01_{T}(const T* __restrict__ src, T* __restrict__ dst,
        const T* __restrict__ bias, const int A, const int B, const int L, const int has_bias) {{
    GRID_LOOP(i, A * B * L) {{
        const int r = i / L, l = i - r * L, a = r / B, b = r - a * B;
        const T v = src[i];
        dst[(b * A + a) * L + l] = has_bias ? v + bias[a] : v;
    }}
}}

// the same, VN elements a thread (L a multiple of VN, both arrays aligned to V): a quarter of the
// threads and divisions
extern "C" __global__ void ember_swap01v_{T}(const V* __restrict__ src, V* __restrict__ dst,
        const T* __restrict__ bias, const int A, const int B, const int LV, const int has_bias) {{
    GRID_LOOP(i, A * B * LV) {{
        const int r = i / LV, l = i - r * LV, a = r / B, b = r - a * B;
        V v = src[i];
        if (has_bias) {{
            const T s = bias[a];
            {VADD}
        }}
        dst[(b * A + a) * LV + l] = v;
    }}
}}

// -inf (NVRTC has no math headers, so no INFINITY)
#define NEG_INF (-(T)__longlong_as_double(0x7ff0000000000000LL))

__device__ __forceinline__ T tap(const T* __restrict__ x, int h, int w, const int H, const int W) {{
    return (h >= 0 && h < H && w >= 0 && w < W) ? x[h * W + w] : NEG_INF;
}}

// out[nc, oh, ow] = the maximum of the window (padding is -inf; a NaN wins, as numpy's maximum)
extern "C" __global__ void ember_max_pool_{T}(const T* __restrict__ x, T* __restrict__ out, const int NC, const int H,
        const int W, const int OH, const int OW, const int KH, const int KW, const int sh, const int sw, const int ph,
        const int pw, const int dh, const int dw) {{
    const int P = OH * OW;
    GRID_LOOP(i, NC * P) {{
        const int nc = i / P, p = i - nc * P, oh = p / OW, ow = p - oh * OW;
        const T* __restrict__ xp = x + nc * H * W;
        const int h0 = oh * sh - ph, w0 = ow * sw - pw;
        T m = NEG_INF;
        for (int kh = 0; kh < KH; kh++) {{
            const int ih = h0 + kh * dh;
            if (ih < 0 || ih >= H) continue;  // a -inf tap never replaces m
            for (int kw = 0; kw < KW; kw++) {{
                const int iw = w0 + kw * dw;
                if (iw < 0 || iw >= W) continue;
                const T v = xp[ih * W + iw];
                if (v > m || v != v) m = v;
            }}
        }}
        out[i] = m;
    }}
}}

// the index (kh*KW + kw) of the window's first tap holding its maximum (padding taps are -inf), or
// -1 when that maximum is NaN (no tap equals it): found again in one pass over the taps, as
// ember_max_pool finds it, so the forward's output need not be kept for the backward pass
__device__ __forceinline__ int first_max(const T* __restrict__ xp, const int h0, const int w0, const int H,
        const int W, const int KH, const int KW, const int dh, const int dw) {{
    T best = NEG_INF;
    int first = -1;
    bool nan = false;
    for (int kh = 0; kh < KH; kh++)
        for (int kw = 0; kw < KW; kw++) {{
            const T v = tap(xp, h0 + kh * dh, w0 + kw * dw, H, W);
            if (first < 0 || v > best) {{ best = v; first = kh * KW + kw; }}
            nan |= v != v;
        }}
    return nan ? -1 : first;
}}

// windows that tile the input (stride == kernel, no dilation, padding < kernel): a thread per window
// writes all of its inputs, g at the first tap equal to the window's maximum (none when that is NaN)
// and 0 elsewhere; the last window of a row / column also zeroes the inputs past the last window.
// x is read once, dx written once, with no search per input element.
template <int FKH, int FKW>
__device__ __forceinline__ void max_pool_backward_tiled_body(const T* __restrict__ g, const T* __restrict__ x,
        T* __restrict__ dx, const int NC, const int H, const int W, const int OH,
        const int OW, const int KH_, const int KW_, const int ph, const int pw) {{
    const int KH = FKH ? FKH : KH_, KW = FKW ? FKW : KW_;  // compile-time when fixed: loops unroll
    const int P = OH * OW;
    GRID_LOOP(i, NC * P) {{
        const int nc = i / P, p = i - nc * P, oh = p / OW, ow = p - oh * OW;
        const T* __restrict__ xp = x + nc * H * W;
        T* __restrict__ dp = dx + nc * H * W;
        const int h0 = oh * KH - ph, w0 = ow * KW - pw;
        const int first = first_max(xp, h0, w0, H, W, KH, KW, 1, 1);
        const int fh = first < 0 ? -1 : first / KW, fw = first - fh * KW;
        const T gv = g[i];
        const int hs = h0 > 0 ? h0 : 0, he = oh == OH - 1 ? H : min(h0 + KH, H);
        const int ws = w0 > 0 ? w0 : 0, we = ow == OW - 1 ? W : min(w0 + KW, W);
        for (int h = hs; h < he; h++)
            for (int w = ws; w < we; w++)
                dp[h * W + w] = (h - h0 == fh && w - w0 == fw) ? gv : (T)0;
    }}
}}
extern "C" __global__ void ember_max_pool_backward_tiled_{T}(const T* __restrict__ g, const T* __restrict__ x,
        T* __restrict__ dx, const int NC, const int H, const int W, const int OH,
        const int OW, const int KH, const int KW, const int ph, const int pw) {{
    max_pool_backward_tiled_body<0, 0>(g, x, dx, NC, H, W, OH, OW, KH, KW, ph, pw);
}}
extern "C" __global__ void ember_max_pool_backward_tiled2x2_{T}(const T* __restrict__ g, const T* __restrict__ x,
        T* __restrict__ dx, const int NC, const int H, const int W, const int OH,
        const int OW, const int KH, const int KW, const int ph, const int pw) {{
    max_pool_backward_tiled_body<2, 2>(g, x, dx, NC, H, W, OH, OW, KH, KW, ph, pw);
}}

// any other window: a thread per input, dx[nc, ih, iw] = the sum of g over the windows whose first
// tap equal to their maximum is (ih, iw)
extern "C" __global__ void ember_max_pool_backward_{T}(const T* __restrict__ g, const T* __restrict__ x,
        T* __restrict__ dx, const int NC, const int H, const int W, const int OH,
        const int OW, const int KH, const int KW, const int sh, const int sw, const int ph, const int pw,
        const int dh, const int dw) {{
    const int HW = H * W;
    GRID_LOOP(i, NC * HW) {{
        const int nc = i / HW, p = i - nc * HW, ih = p / W, iw = p - ih * W;
        const T* __restrict__ xp = x + nc * HW;
        T acc = 0;
        for (int kh = 0; kh < KH; kh++) {{
            const int a = ih + ph - kh * dh;
            if (a < 0) break;
            const int oh = a / sh;
            if (oh * sh != a || oh >= OH) continue;
            for (int kw = 0; kw < KW; kw++) {{
                const int b = iw + pw - kw * dw;
                if (b < 0) break;
                const int ow = b / sw;
                if (ow * sw != b || ow >= OW) continue;
                const int o = (nc * OH + oh) * OW + ow;
                if (first_max(xp, oh * sh - ph, ow * sw - pw, H, W, KH, KW, dh, dw) == kh * KW + kw)
                    acc += g[o];
            }}
        }}
        dx[i] = acc;
    }}
}}
"""

#: per element type: the vector type of swap01v, its width and its bias add
_VECTORS = {
    "float": ("float4", 4, "v.x += s; v.y += s; v.z += s; v.w += s;"),
    "double": ("double2", 2, "v.x += s; v.y += s;"),
}


def source(ctype: str) -> str:
    """CUDA C of the kernels for ``ctype`` (``float`` or ``double``)."""
    vector, _, add = _VECTORS[ctype]
    return _SOURCE.format(T=ctype, V=vector, VADD=add)


def _blocks(size: int, k: int, s: int, pad: tuple[int, int], d: int) -> int:
    return (size + pad[0] + pad[1] - d * (k - 1) - 1) // s + 1


def spans(n: int, sample_bytes: int) -> list[tuple[int, int]]:
    """The batch's chunks (start, stop) of even size whose columns (``sample_bytes`` a sample) fit
    ``OPTIONS["columns_bytes"]``: one chunk when the whole batch's do (or a sample alone does not)."""
    per = max(1, OPTIONS["columns_bytes"] // max(1, sample_bytes))
    count = -(-n // per)
    per = -(-n // count)
    return [(s, min(s + per, n)) for s in range(0, n, per)]


def conv_kernels(cp: Any, fallback: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """``conv``, ``conv_weight_grad``, ``conv_transpose``, ``max_pool`` and ``max_pool_backward``
    over CuPy arrays: two spatial axes, float32/float64, one group; anything else to ``fallback``."""
    modules: dict[str, Any] = {}
    names = {np.dtype(n): c for n, c in _CTYPES.items()}
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    i32 = np.int32
    matmul = fallback["matmul"]  # the backend's own (cuBLAS called directly: capturable in a CUDA graph)
    direct_into = getattr(matmul, "takes_out", False)

    def into(a: Any, b: Any, out: Any, accumulate: bool = False) -> None:
        """``out = a @ b`` (``+=`` with ``accumulate``): in cuBLAS's store where matmul takes ``out``."""
        if direct_into:
            matmul(a, b, out=out, accumulate=accumulate)
        else:
            store_product(matmul(a, b), out, accumulate)

    #: (ctype, kernel name) -> its Launcher (a real GPU: the parameter block kept between calls,
    #: as the elementwise kernels'), or the function object (CuPy's boxing call; a stand-in's)
    launchers: dict[tuple[str, str], Any] = {}
    ndarray = getattr(cp, "ndarray", None)

    def launcher(ctype: str, name: str, args: tuple[Any, ...]) -> Any:
        which = "igemm" if name.startswith("igemm") else "conv"
        module = modules.get((which, ctype))
        if module is None:
            code = igemm.source(ctype) if which == "igemm" else source(ctype)
            module = modules[(which, ctype)] = cp.RawModule(code=code)
        fn = module.get_function(f"ember_{name}_{ctype}")
        if getattr(fn, "ptr", None) is None or ndarray is None:
            return fn
        # every conv kernel takes arrays (pointers) and int32 sizes
        types = tuple(ctypes.c_void_p if isinstance(a, ndarray) else ctypes.c_int for a in args)
        return _Launcher(cp, SimpleNamespace(kernel=fn), types)

    def launch(
        ctype: str, name: str, total: int, args: tuple[Any, ...], counter: str | None = None, blocks: int = 0
    ) -> None:
        """``name`` over ``total`` elements (grid-stride, 256 threads a block), or over ``blocks`` blocks
        of :data:`igemm.THREADS` (the implicit GEMMs: a block a tile)."""
        key = (ctype, name)
        run = launchers.get(key)
        if run is None:
            run = launchers[key] = launcher(ctype, name, args)
        CALLS[counter or name] += 1
        threads = igemm.THREADS if blocks else _THREADS
        blocks = blocks or max(1, min(-(-total // _THREADS), sms * 32))
        if type(run) is _Launcher:
            run(blocks, threads, *[a.data.ptr if type(a) is ndarray else int(a) for a in args])
        else:
            run((blocks,), (threads,), args)

    def geometry(kernel: Any, stride: Any, padding: Any, dilation: Any) -> tuple[Any, ...]:
        (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
        return (i32(kh), i32(kw), i32(sh), i32(sw), i32(padding[0][0]), i32(padding[1][0]), i32(dh), i32(dw))

    def im2col(
        ctype: str,
        x: Any,
        oh: int,
        ow: int,
        geo: tuple[Any, ...],
        *,
        by_sample: bool,
        rows: int = 0,
        ones: bool = False,
    ) -> Any:
        """Columns of contiguous NCHW ``x``: (N, rows, L) when ``by_sample``, else (rows, N*L);
        ``rows`` past C*KH*KW are a ones row when ``ones``, then zeros."""
        n, c, h, w = x.shape
        ck, length = c * int(geo[0]) * int(geo[1]), oh * ow
        rows = rows or ck
        if by_sample:
            cols, sn, sk = cp.empty((n, rows, length), dtype=x.dtype), rows * length, length
        else:
            cols, sn, sk = cp.empty((rows, n * length), dtype=x.dtype), length, n * length
        args = (x, cols, i32(n), i32(c), i32(h), i32(w), i32(oh), i32(ow), *geo, i32(sn), i32(sk))
        name = "im2col3x3" if (int(geo[0]), int(geo[1])) == (3, 3) else "im2col"
        launch(ctype, name, n * c * length, (*args, i32(rows - ck), i32(ones)), "im2col")
        return cols

    def swap01(ctype: str, src: Any, a: int, b: int, length: int, bias: Any = None, dst: Any = None) -> Any:
        """(A, B, L) -> (B, A, L) into ``dst`` (new when None), adding ``bias[a]`` when given."""
        dst = cp.empty((b, a, length), dtype=src.dtype) if dst is None else dst
        has = bias is not None
        width = 16 // src.itemsize
        if length % width == 0 and src.data.ptr % 16 == 0 and dst.data.ptr % 16 == 0:
            args = (src, dst, bias if has else src, i32(a), i32(b), i32(length // width), i32(has))
            launch(ctype, "swap01v", src.size // width, args, "swap01")
        else:
            args = (src, dst, bias if has else src, i32(a), i32(b), i32(length), i32(has))
            launch(ctype, "swap01", src.size, args)
        return dst

    def plain(*arrays: Any, nd: int) -> str | None:
        """The kernels' type name when every array is a float32/float64 of ``nd`` spatial axes."""
        ctype = names.get(arrays[0].dtype)
        if ctype is None or any(a.dtype != arrays[0].dtype or a.ndim != 2 + nd or a.size >= _MAX for a in arrays):
            return None
        return ctype if nd == 2 else None

    def implicit(
        ctype: str, transpose: bool, x: Any, w: Any, b: Any, y: Any, m: int, geo: tuple[Any, ...], wsc: int, wsm: int
    ) -> Any:
        """conv (``transpose`` False) or conv_transpose as one implicit GEMM into ``y`` (N, M, GH, GW):
        ``x`` (N, Cs, SH, SW) the gathered operand, A[m][tap * Cs + ci] = w[m * wsm + ci * wsc + tap]."""
        n, cs, sh_, sw_ = x.shape
        gh, gw = y.shape[2:]
        length = gh * gw
        kv = int(geo[0]) * int(geo[1])
        rows = igemm.tile_rows(m)
        fast = cs % igemm.BK == 0
        vec = length % 4 == 0 and y.data.ptr % 16 == 0
        has = b is not None
        args = (x, w, b if has else y, y, i32(has), i32(m), i32(kv * cs), i32(n * length), i32(length), i32(cs))
        args += (i32(sh_), i32(sw_), i32(gw), geo[1], *geo[2:], i32(wsc), i32(wsm), i32(fast), i32(vec))
        name = f"igemm_{'transpose' if transpose else 'conv'}{rows}"
        launch(ctype, name, 0, args, name[:-2], blocks=igemm.blocks(m, n * length, rows))
        return y

    other_conv = fallback["conv"]

    def conv(x: Any, w: Any, *bias: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> Any:
        ctype = plain(x, w, nd=len(stride))
        if ctype is None or groups != 1 or x.size == 0 or (bias and bias[0].dtype != x.dtype):
            return other_conv(x, w, *bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
        n, _, h, wd = x.shape
        cout, _, kh, kw = w.shape
        oh = _blocks(h, kh, stride[0], padding[0], dilation[0])
        ow = _blocks(wd, kw, stride[1], padding[1], dilation[1])
        ck, length = w.shape[1] * kh * kw, oh * ow
        batched = length >= OPTIONS["forward_by_sample"]
        rows = -(-(ck + 1) // 4) * 4 if bias and batched else ck  # a ones row for the bias, K a multiple of 4
        if rows * n * length >= _MAX or cout * n * length >= _MAX:
            return other_conv(x, w, *bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
        geo = geometry((kh, kw), stride, padding, dilation)
        x, w = cp.ascontiguousarray(x), cp.ascontiguousarray(w)
        b = cp.ascontiguousarray(bias[0]) if bias else None
        if OPTIONS["implicit"]:
            y = cp.empty((n, cout, oh, ow), dtype=x.dtype)
            return implicit(ctype, False, x, w, b, y, cout, geo, kh * kw, ck)
        chunks = spans(n, rows * length * x.itemsize)
        y = None
        if not batched:
            for s, e in chunks:
                cols = im2col(ctype, x[s:e], oh, ow, geo, by_sample=False)
                yt = matmul(w.reshape(cout, ck), cols)  # (Cout, n*L)
                del cols  # back to the pool before the output is allocated
                if len(chunks) == 1:
                    return swap01(ctype, yt, cout, n, length, b).reshape(n, cout, oh, ow)
                if y is None:
                    y = cp.empty((n, cout, length), dtype=x.dtype)
                swap01(ctype, yt, cout, e - s, length, b, dst=y[s:e])
                del yt
            return y.reshape(n, cout, oh, ow)
        if b is None:
            wm = w.reshape(cout, ck)
        else:  # [w | bias | 0...]: the GEMM adds the bias through the ones row
            wm = cp.empty((cout, rows), dtype=x.dtype)
            launch(ctype, "pack_weight", wm.size, (w, b, wm, i32(cout), i32(ck), i32(rows)))
        if len(chunks) == 1:
            cols = im2col(ctype, x, oh, ow, geo, by_sample=True, rows=rows, ones=b is not None)  # (N, rows, L)
            return matmul(wm, cols).reshape(n, cout, oh, ow)  # (N, Cout, L): the weight broadcast over the batch
        y = cp.empty((n, cout, length), dtype=x.dtype)
        for s, e in chunks:
            cols = im2col(ctype, x[s:e], oh, ow, geo, by_sample=True, rows=rows, ones=b is not None)
            into(wm, cols, y[s:e])
            del cols
        return y.reshape(n, cout, oh, ow)

    other_wgrad = fallback["conv_weight_grad"]

    def implicit_wgrad(ctype: str, g: Any, x: Any, geo: tuple[Any, ...]) -> Any:
        """conv's weight gradient (Cout, Cin * KH * KW) as an implicit GEMM over the batch's positions,
        split over the grid, each split's tile into its own partial, the partials summed in order."""
        n, cout, oh, ow = g.shape
        cin, h, w = x.shape[1:]
        kv = int(geo[0]) * int(geo[1])
        ncol, k = cin * kv, n * oh * ow
        count, per = igemm.splits(cout, ncol, k, sms)
        out = cp.empty((cout, ncol), dtype=g.dtype)
        part = out if count == 1 else cp.empty((count, cout, ncol), dtype=g.dtype)
        args = (g, x, part, i32(cout), i32(ncol), i32(k), i32(per), i32(cin), i32(h), i32(w), i32(oh), i32(ow))
        args += (geo[1], i32(kv), *geo[2:])
        launch(ctype, "igemm_wgrad64", 0, args, "igemm_wgrad", blocks=count * igemm.blocks(cout, ncol, 64))
        if count > 1:
            launch(ctype, "igemm_sum", out.size, (part, out, i32(count), i32(out.size)))
        return out

    def conv_weight_grad(g: Any, x: Any, *, kernel: Any, stride: Any, padding: Any, dilation: Any, groups: int) -> Any:
        ctype = plain(g, x, nd=len(stride))
        if ctype is None or groups != 1 or x.size == 0:
            return other_wgrad(g, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation, groups=groups)
        n, cout, oh, ow = g.shape
        cin = x.shape[1]
        ck, length = cin * math.prod(kernel), oh * ow
        if ck * n * length >= _MAX or n * cout * ck >= _MAX:
            return other_wgrad(g, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation, groups=groups)
        geo = geometry(kernel, stride, padding, dilation)
        g, x = cp.ascontiguousarray(g), cp.ascontiguousarray(x)
        if OPTIONS["implicit"] and ck >= OPTIONS["implicit_wgrad_columns"]:
            return implicit_wgrad(ctype, g, x, geo).reshape((cout, cin, *kernel))
        chunks = spans(n, ck * length * x.itemsize)
        total = None
        if ck <= OPTIONS["wgrad_partials"] * length:
            # per-sample products (n, Cout, CK), far smaller than g, summed over the batch by a GEMM
            ones = cp.ones((1, chunks[0][1]), dtype=g.dtype)
            for s, e in chunks:
                cols = im2col(ctype, x[s:e], oh, ow, geo, by_sample=True)  # (n, CK, L)
                part = matmul(g[s:e].reshape(e - s, cout, length), cols.transpose(0, 2, 1))
                del cols
                if total is None:
                    total = matmul(ones[:, : e - s], part.reshape(e - s, cout * ck))
                else:
                    into(ones[:, : e - s], part.reshape(e - s, cout * ck), total, accumulate=True)
                del part
            return total.reshape((cout, cin, *kernel))
        for s, e in chunks:
            gt = swap01(ctype, g[s:e], e - s, cout, length)  # (Cout, n, L)
            cols = im2col(ctype, x[s:e], oh, ow, geo, by_sample=False)  # (CK, n*L)
            if total is None:
                total = matmul(gt.reshape(cout, -1), cols.T)
            else:
                into(gt.reshape(cout, -1), cols.T, total, accumulate=True)
            del gt, cols
        return total.reshape((cout, cin, *kernel))

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
        ck, length = cout * kh * kw, oh * ow
        if ck * n * length >= _MAX or n * cout * h * wd >= _MAX:
            return other_transpose(
                x, w, *bias, size=size, stride=stride, padding=padding, dilation=dilation, groups=groups
            )
        x, w = cp.ascontiguousarray(x), cp.ascontiguousarray(w)
        geo = geometry((kh, kw), stride, padding, dilation)
        if OPTIONS["implicit"]:
            y = cp.empty((n, cout, h, wd), dtype=x.dtype)
            b = cp.ascontiguousarray(bias[0]) if bias else None
            return implicit(ctype, True, x, w, b, y, cout, geo, cout * kh * kw, kh * kw)
        wt = w.reshape(cin, ck).T  # (Cout*K, Cin)
        name = "col2im3x3" if (kh, kw) == (3, 3) else "col2im"
        y = b = None
        for s, e in spans(n, ck * length * x.itemsize):
            if length >= OPTIONS["transpose_by_sample"]:
                cols = matmul(wt, x[s:e].reshape(e - s, cin, length))  # (n, Cout*K, L)
                sn, sk = ck * length, length
            else:
                xt = swap01(ctype, x[s:e], e - s, cin, length)  # (Cin, n, L)
                cols = matmul(wt, xt.reshape(cin, -1))  # (Cout*K, n*L)
                del xt  # freed before the output is allocated (the columns are the big buffer)
                sn, sk = length, (e - s) * length
            if y is None:
                y = cp.empty((n, cout, h, wd), dtype=x.dtype)
                b = cp.ascontiguousarray(bias[0]) if bias else y
            part = y[s:e]
            args = (cols, part, b, i32(e - s), i32(cout), i32(h), i32(wd), i32(oh), i32(ow), *geo, i32(sn), i32(sk))
            launch(ctype, name, part.size, (*args, i32(bool(bias))), "col2im")
            del cols, args  # args holds the columns too: both go before the next chunk's are made
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

    def max_pool_backward(g: Any, x: Any, *, kernel: Any, stride: Any, padding: Any, dilation: Any) -> Any:
        ctype = plain(g, x, nd=len(kernel))
        if ctype is None or x.size == 0:
            return other_pool_grad(g, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
        n, c, h, w = x.shape
        oh = _blocks(h, kernel[0], stride[0], padding[0], dilation[0])
        ow = _blocks(w, kernel[1], stride[1], padding[1], dilation[1])
        if g.shape != (n, c, oh, ow):
            return other_pool_grad(g, x, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
        if g.size == 0:  # no window: no gradient
            return cp.zeros(x.shape, dtype=x.dtype)
        dx = cp.empty(x.shape, dtype=x.dtype)
        g, x = cp.ascontiguousarray(g), cp.ascontiguousarray(x)
        (kh, kw), (ph, pw) = kernel, (padding[0][0], padding[1][0])
        if tuple(stride) == (kh, kw) and tuple(dilation) == (1, 1) and ph < kh and pw < kw:
            args = (g, x, dx, i32(n * c), i32(h), i32(w), i32(oh), i32(ow), i32(kh), i32(kw), i32(ph), i32(pw))
            name = "max_pool_backward_tiled2x2" if (kh, kw) == (2, 2) else "max_pool_backward_tiled"
            launch(ctype, name, g.size, args, "max_pool_backward")
            return dx
        geo = geometry(kernel, stride, padding, dilation)
        args = (g, x, dx, i32(n * c), i32(h), i32(w), i32(oh), i32(ow), *geo)
        launch(ctype, "max_pool_backward", dx.size, args)
        return dx

    return {
        "conv": conv,
        "conv_weight_grad": conv_weight_grad,
        "conv_transpose": conv_transpose,
        "max_pool": max_pool,
        "max_pool_backward": max_pool_backward,
    }

"""Flash-style scaled-dot-product attention for ember-cuda: one tiled kernel, no score matrix.

``softmax(q k^T * scale) v`` is computed the way FlashAttention does it (Dao et al., 2022): a
block of 128 threads owns 64 queries, walks the keys 64 at a time through shared memory, keeps
a running row maximum and sum (the online softmax) and rescales its partial output as the
maximum grows. The (L, S) score matrix never reaches global memory, so memory is O(L * D)
instead of O(L * S), and the three passes of softmax over it are gone.

Each thread holds a 4 x 8 tile of the scores and a 4 x (D / 8) tile of the output; the query
tile is pre-scaled by ``scale * log2(e)`` so the exponentials are ``exp2``. float32 throughout
(float16 and bfloat16 inputs are computed in float32 and rounded back, as the shared kernels
do). Covered: head sizes 32, 64, 96 and 128 with ``v`` of the same size, ``is_causal``, batch
dimensions that broadcast. An explicit ``attn_mask``, float64 or other head sizes go to the
shared kernel (``fallback``). ``CALLS`` counts the kernel's launches, so tests can tell it ran.
Compiled with ``STATS`` (``source(head, stats=True)``), the same kernel is the backward's first
pass (``attention_backward.py``): each row's log-sum-exp and ``dO . O`` instead of O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["flash_attention", "CALLS", "HEAD_SIZES"]

#: kernel launches (tests read it; nothing else depends on it)
CALLS: Counter[str] = Counter()
#: the head sizes the kernel is compiled for (a multiple of 32, so each thread's columns are float4s)
HEAD_SIZES = (32, 64, 96, 128)
_BM = 64  # queries per block
_BN = 64  # keys per step
_PAD = 4  # the transposed tiles' row padding (keeps float4 alignment, spreads banks)
_LOG2E = 1.4426950408889634

_SOURCE = r"""
#define D {D}
#define BM 64
#define BN 64
#define QS (BM + 4)
#define KS (BN + 4)
#define DJ (D / 32)
#define NEG_INF __int_as_float(0xff800000)  // NVRTC has no math.h, so no INFINITY
#define STATS {STATS}
// STATS 1: the backward's first pass (attention_backward.py): instead of O, each query row's
// log-sum-exp (log2 units, of the pre-scaled scores) and delta = sum_j P_ij (dO_i . V_j) = dO_i . O_i
extern "C" __global__ void __launch_bounds__(128)
{NAME}(const float* __restrict__ Q, const float* __restrict__ K, const float* __restrict__ V,
#if STATS
                         const float* __restrict__ G, float* __restrict__ LSE, float* __restrict__ DELTA,
#else
                         float* __restrict__ O,
#endif
                         const int L, const int S, const int tiles,
                         const float qscale, const int causal, const int offset) {{
    extern __shared__ float4 smem4[];
    float* smem = (float*)smem4;
    float* Qt = smem;                               // [D][QS]   queries, transposed and pre-scaled
    float* Kt = Qt + D * QS;                        // [D][KS]   keys, transposed; reused as Pt [BN][QS]
    float* Vs = Kt + (D > BN ? D : BN) * KS;        // [BN][D]   values
    const int tid = threadIdx.x, ty = tid >> 3, tx = tid & 7;
    const long long b = blockIdx.x / tiles;
    const int q0 = (blockIdx.x % tiles) * BM;
    const float* Qb = Q + b * (long long)L * D;
    const float* Kb = K + b * (long long)S * D;
    const float* Vb = V + b * (long long)S * D;

    for (int idx = tid; idx < BM * (D / 4); idx += 128) {{
        const int m = idx / (D / 4), d4 = (idx % (D / 4)) * 4;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (q0 + m < L) x = *(const float4*)(Qb + (long long)(q0 + m) * D + d4);
        Qt[(d4 + 0) * QS + m] = x.x * qscale; Qt[(d4 + 1) * QS + m] = x.y * qscale;
        Qt[(d4 + 2) * QS + m] = x.z * qscale; Qt[(d4 + 3) * QS + m] = x.w * qscale;
    }}
    float o[4][4 * DJ];
    float mrow[4], lrow[4];
    #pragma unroll
    for (int i = 0; i < 4; ++i) {{
        mrow[i] = NEG_INF; lrow[i] = 0.f;
        #pragma unroll
        for (int c = 0; c < 4 * DJ; ++c) o[i][c] = 0.f;
    }}
    // with is_causal, key n is visible to query r when n <= r + offset (offset = S - L)
    int n_end = S;
    if (causal) {{ const int last = q0 + BM - 1 + offset + 1; n_end = last < S ? last : S; }}

    for (int n0 = 0; n0 < n_end; n0 += BN) {{
        __syncthreads();  // the previous step is done with Kt (as Pt) and Vs
        for (int idx = tid; idx < BN * (D / 4); idx += 128) {{
            const int n = idx / (D / 4), d4 = (idx % (D / 4)) * 4;
            float4 kx = make_float4(0.f, 0.f, 0.f, 0.f), vx = kx;
            if (n0 + n < S) {{
                kx = *(const float4*)(Kb + (long long)(n0 + n) * D + d4);
                vx = *(const float4*)(Vb + (long long)(n0 + n) * D + d4);
            }}
            Kt[(d4 + 0) * KS + n] = kx.x; Kt[(d4 + 1) * KS + n] = kx.y;
            Kt[(d4 + 2) * KS + n] = kx.z; Kt[(d4 + 3) * KS + n] = kx.w;
            *(float4*)(Vs + n * D + d4) = vx;
        }}
        __syncthreads();
        float s[4][8];
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            #pragma unroll
            for (int j = 0; j < 8; ++j) s[i][j] = 0.f;
        #pragma unroll 8
        for (int d = 0; d < D; ++d) {{
            const float4 a = *(const float4*)(Qt + d * QS + 4 * ty);
            const float4 k0 = *(const float4*)(Kt + d * KS + 4 * tx);
            const float4 k1 = *(const float4*)(Kt + d * KS + 32 + 4 * tx);
            const float av[4] = {{a.x, a.y, a.z, a.w}};
            const float kv[8] = {{k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w}};
            #pragma unroll
            for (int i = 0; i < 4; ++i)
                #pragma unroll
                for (int j = 0; j < 8; ++j) s[i][j] = fmaf(av[i], kv[j], s[i][j]);
        }}
        #pragma unroll
        for (int i = 0; i < 4; ++i) {{
            const int r = q0 + 4 * ty + i;
            float mx = NEG_INF;
            #pragma unroll
            for (int j = 0; j < 8; ++j) {{
                const int n = n0 + 4 * tx + (j >> 2) * 32 + (j & 3);
                if (n >= S || (causal && n > r + offset)) s[i][j] = NEG_INF;
                mx = fmaxf(mx, s[i][j]);
            }}
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            const float mnew = fmaxf(mrow[i], mx);
            const float muse = mnew == NEG_INF ? 0.f : mnew;  // a row with nothing visible yet stays 0
            const float alpha = exp2f(mrow[i] - muse);
            float sum = 0.f;
            #pragma unroll
            for (int j = 0; j < 8; ++j) {{ s[i][j] = exp2f(s[i][j] - muse); sum += s[i][j]; }}
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            sum += __shfl_xor_sync(0xffffffffu, sum, 4);
            lrow[i] = lrow[i] * alpha + sum;
            mrow[i] = mnew;
            #pragma unroll
            for (int c = 0; c < 4 * DJ; ++c) o[i][c] *= alpha;
        }}
        __syncthreads();  // everyone has read Kt: it becomes Pt
        float* Pt = Kt;
        #pragma unroll
        for (int j = 0; j < 8; ++j) {{
            const int n = 4 * tx + (j >> 2) * 32 + (j & 3);
            *(float4*)(Pt + n * QS + 4 * ty) = make_float4(s[0][j], s[1][j], s[2][j], s[3][j]);
        }}
        __syncthreads();
        #pragma unroll 4
        for (int n = 0; n < BN; ++n) {{
            const float4 p = *(const float4*)(Pt + n * QS + 4 * ty);
            const float pv[4] = {{p.x, p.y, p.z, p.w}};
            #pragma unroll
            for (int jj = 0; jj < DJ; ++jj) {{
                const float4 v = *(const float4*)(Vs + n * D + 32 * jj + 4 * tx);
                #pragma unroll
                for (int i = 0; i < 4; ++i) {{
                    o[i][4 * jj + 0] = fmaf(pv[i], v.x, o[i][4 * jj + 0]);
                    o[i][4 * jj + 1] = fmaf(pv[i], v.y, o[i][4 * jj + 1]);
                    o[i][4 * jj + 2] = fmaf(pv[i], v.z, o[i][4 * jj + 2]);
                    o[i][4 * jj + 3] = fmaf(pv[i], v.w, o[i][4 * jj + 3]);
                }}
            }}
        }}
    }}
#if STATS
    const float* Gb = G + b * (long long)L * D;
    #pragma unroll
    for (int i = 0; i < 4; ++i) {{
        const int r = q0 + 4 * ty + i;
        float dot = 0.f;
        if (r < L) {{
            #pragma unroll
            for (int jj = 0; jj < DJ; ++jj) {{
                const float4 gg = *(const float4*)(Gb + (long long)r * D + 32 * jj + 4 * tx);
                dot = fmaf(gg.x, o[i][4 * jj], dot); dot = fmaf(gg.y, o[i][4 * jj + 1], dot);
                dot = fmaf(gg.z, o[i][4 * jj + 2], dot); dot = fmaf(gg.w, o[i][4 * jj + 3], dot);
            }}
        }}
        // the row's 8 threads (tx) sum their columns; every lane shuffles (no divergence around it)
        dot += __shfl_xor_sync(0xffffffffu, dot, 1);
        dot += __shfl_xor_sync(0xffffffffu, dot, 2);
        dot += __shfl_xor_sync(0xffffffffu, dot, 4);
        if (r < L && tx == 0) {{
            const bool seen = lrow[i] > 0.f;  // a row that sees no key: lse = +inf (P = 0), delta = 0
            LSE[b * (long long)L + r] = seen ? mrow[i] + log2f(lrow[i]) : -NEG_INF;
            DELTA[b * (long long)L + r] = seen ? dot / lrow[i] : 0.f;
        }}
    }}
#else
    float* Ob = O + b * (long long)L * D;
    #pragma unroll
    for (int i = 0; i < 4; ++i) {{
        const int r = q0 + 4 * ty + i;
        if (r >= L) continue;
        const float inv = 1.f / lrow[i];  // 0 visible keys: 0 / 0 = NaN, as softmax over -inf gives
        #pragma unroll
        for (int jj = 0; jj < DJ; ++jj)
            *(float4*)(Ob + (long long)r * D + 32 * jj + 4 * tx) = make_float4(
                o[i][4 * jj] * inv, o[i][4 * jj + 1] * inv, o[i][4 * jj + 2] * inv, o[i][4 * jj + 3] * inv);
    }}
#endif
}}
"""


def source(head: int, stats: bool = False) -> str:
    """The kernel's CUDA source for head size ``head`` (compile-checked by the tests with nvcc);
    ``stats``: the backward's first pass, writing each row's log-sum-exp and delta instead of O."""
    return _SOURCE.format(D=head, STATS=int(stats), NAME=kernel_name(head, stats))


def kernel_name(head: int, stats: bool = False) -> str:
    """The kernel's entry point in :func:`source`."""
    return f"ember_flash_attention_{'stats_' if stats else ''}d{head}"


def shared_bytes(head: int) -> int:
    """Dynamic shared memory of one block: Qt, Kt (or Pt) and V."""
    return 4 * (head * (_BM + _PAD) + max(head, _BN) * (_BN + _PAD) + _BN * head)


def flash_attention(cp: Any, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """The ``scaled_dot_product_attention`` kernel over CuPy arrays; ``fallback`` for the rest."""
    compiled: dict[int, Any] = {}
    computed = {np.dtype(np.float32), np.dtype(np.float16)}
    try:
        import ml_dtypes

        computed.add(np.dtype(ml_dtypes.bfloat16))
    except ImportError:  # pragma: no cover - CuPy 14 depends on it
        pass

    def kernel(head: int) -> Any:
        k = compiled.get(head)
        if k is None:
            k = cp.RawKernel(source(head), kernel_name(head))
            k.max_dynamic_shared_size_bytes = shared_bytes(head)
            compiled[head] = k
        return k

    def prepare(a: Any, lead: tuple[int, ...]) -> Any:
        a = cp.broadcast_to(a.astype(cp.float32, copy=False), lead + a.shape[-2:])
        a = cp.ascontiguousarray(a)
        return a if not a.data.ptr & 15 else a.copy()

    def run(q: Any, k: Any, v: Any, *mask: Any, is_causal: bool, scale: float) -> Any:
        head = q.shape[-1]
        if (
            mask
            or q.dtype not in computed
            or not (q.dtype == k.dtype == v.dtype)
            or head not in HEAD_SIZES
            or k.shape[-1] != head
            or v.shape[-1] != head
            or q.shape[-2] == 0
            or k.shape[-2] == 0
        ):
            return fallback(q, k, v, *mask, is_causal=is_causal, scale=scale)
        lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
        L, S = q.shape[-2], k.shape[-2]
        qc, kc, vc = prepare(q, lead), prepare(k, lead), prepare(v, lead)
        out = cp.empty(lead + (L, head), cp.float32)
        batch = int(np.prod(lead, dtype=np.int64))
        tiles = -(-L // _BM)
        if batch:
            CALLS["scaled_dot_product_attention"] += 1
            kernel(head)(
                (batch * tiles,),
                (128,),
                (
                    qc,
                    kc,
                    vc,
                    out,
                    np.int32(L),
                    np.int32(S),
                    np.int32(tiles),
                    np.float32(scale * _LOG2E),
                    np.int32(bool(is_causal)),
                    np.int32(S - L),
                ),  # fmt: skip
                shared_mem=shared_bytes(head),
            )
        return out if q.dtype == out.dtype else out.astype(q.dtype)

    return run

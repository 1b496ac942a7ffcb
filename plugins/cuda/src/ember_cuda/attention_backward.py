"""Flash-style attention backward for ember-cuda: three tiled kernels, no (L, S) tensor in memory.

The forward saves nothing, so the backward first recomputes, per query row, the log-sum-exp of
the scores and ``delta = sum_j P_ij (dO_i . V_j)`` (the forward kernel compiled with ``STATS``:
one pass over the keys with the online softmax, O kept in registers, ``delta = dO_i . O_i`` at
the end: two products per tile, where a max/sum loop followed by a delta loop would take three).
Then (FlashAttention-2's backward, Dao 2023):

* ``dkdv``: a block per tile of ``BN`` keys walks the query tiles that can see them, recomputes
  ``P = exp2(s - lse)`` and ``dP = dO V^T`` for the tile, and accumulates ``dV += P^T dO`` and
  ``dK += dS^T Q`` with ``dS = P * (dP - delta)`` in registers;
* ``dq``: a block per tile of queries walks the key tiles it sees and accumulates
  ``dQ += dS K``, recomputing P and dP once more.

dQ has its own pass rather than atomics from the key blocks: every gradient is one block's sum
in a fixed order, so a run gives the same bits every time (and no zeroed buffer, no atomic
traffic), at the price of the two recomputed products of the dq pass.

Scores are computed from q pre-scaled by ``scale * log2(e)`` in the forward kernel's order (the
same ``fmaf`` chain over the head), so the recomputed scores are the stats pass's, bit for bit,
and ``P = exp2(s - lse)`` sums to 1 over a row up to rounding; float32 throughout,
float16/bfloat16 computed in float32. Causal masking (key n visible to query r
when ``n <= r + S - L``) skips the tiles nobody sees; rows that see no key get lse = +inf and
zero gradients. The kernels cover the forward kernel's cases (head sizes 32/64/96/128, v of the
same size, no explicit mask); the rest (a mask, float64, other head sizes) runs
:func:`chunked_backward`: cuBLAS products over as much of the batch as fits a score budget at a
time, with the one-pass row kernels of ``rows.py``. ``attention.CALLS`` counts both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .attention import _LOG2E, CALLS, HEAD_SIZES, kernel_name
from .attention import shared_bytes as stats_shared_bytes
from .attention import source as stats_source

__all__ = ["flash_attention_backward", "chunked_backward", "source", "shared_bytes", "tiles", "SCORE_BUDGET"]

#: score elements one step of the chunked fallback holds (64 MiB of float32 per temporary)
SCORE_BUDGET = 1 << 24


def tiles(head: int) -> dict[str, tuple[int, int]]:
    """(rows per block, rows per step) of each kernel: dkdv walks BM queries a step over a block
    of BN keys, dq walks BN keys a step over a block of BM queries. Smaller tiles for the larger
    heads keep dK and dV (2 x BN x D per block) and dQ (BM x D) in registers (ptxas: no spills)."""
    wide = head > 64
    return {"dkdv": (32 if wide else 64, 32), "dq": (32 if wide else 64, 32)}


_SOURCE = r"""
#define D {D}
#define RS (D + 4)                // row stride of the Q, dO, K, V tiles (float4 rows, banks spread)
#define DJ (D / 32)               // float4 columns per thread of a (rows x D) result
#define POS_INF __int_as_float(0x7f800000)  // NVRTC has no math.h, so no INFINITY

// s[i][j] = Qs[ty + 16 i] . Ks[tx + 8 j] and dp[i][j] = Gs[ty + 16 i] . Vs[tx + 8 j] over the head,
// summed in the forward kernel's order (d = 0, 1, ...), so s is bit for bit the forward's score
template <int MI, int NJ>
__device__ __forceinline__ void ember_scores(const float* __restrict__ Qs, const float* __restrict__ Gs,
                                             const float* __restrict__ Ks, const float* __restrict__ Vs,
                                             const int ty, const int tx, float (&s)[MI][NJ], float (&dp)[MI][NJ]) {{
    #pragma unroll
    for (int i = 0; i < MI; ++i)
        #pragma unroll
        for (int j = 0; j < NJ; ++j) {{ s[i][j] = 0.f; dp[i][j] = 0.f; }}
    #pragma unroll 2
    for (int d = 0; d < D; d += 4) {{
        float4 a[MI], g[MI];
        #pragma unroll
        for (int i = 0; i < MI; ++i) {{
            a[i] = *(const float4*)(Qs + (ty + 16 * i) * RS + d);
            g[i] = *(const float4*)(Gs + (ty + 16 * i) * RS + d);
        }}
        #pragma unroll
        for (int j = 0; j < NJ; ++j) {{
            const float4 kk = *(const float4*)(Ks + (tx + 8 * j) * RS + d);
            const float4 vv = *(const float4*)(Vs + (tx + 8 * j) * RS + d);
            #pragma unroll
            for (int i = 0; i < MI; ++i) {{
                s[i][j] = fmaf(a[i].x, kk.x, s[i][j]); s[i][j] = fmaf(a[i].y, kk.y, s[i][j]);
                s[i][j] = fmaf(a[i].z, kk.z, s[i][j]); s[i][j] = fmaf(a[i].w, kk.w, s[i][j]);
                dp[i][j] = fmaf(g[i].x, vv.x, dp[i][j]); dp[i][j] = fmaf(g[i].y, vv.y, dp[i][j]);
                dp[i][j] = fmaf(g[i].z, vv.z, dp[i][j]); dp[i][j] = fmaf(g[i].w, vv.w, dp[i][j]);
            }}
        }}
    }}
}}

// rows [r0, r0 + n) of a (rows x D) matrix into a tile of stride RS, zeros past `rows`; x scale
__device__ __forceinline__ void ember_load_rows(float* __restrict__ tile, const float* __restrict__ src,
                                                const int r0, const int n, const int rows, const float scale) {{
    for (int idx = threadIdx.x; idx < n * (D / 4); idx += 128) {{
        const int m = idx / (D / 4), d4 = (idx % (D / 4)) * 4;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r0 + m < rows) x = *(const float4*)(src + (long long)(r0 + m) * D + d4);
        *(float4*)(tile + m * RS + d4) = make_float4(x.x * scale, x.y * scale, x.z * scale, x.w * scale);
    }}
}}

// dK and dV of one tile of BN keys: the query tiles that see them, BM queries a step
#define BN {BN_KV}
#define BM {BM_KV}
#define PS (BN + 8)               // row stride of the P and dS tiles (the 32 lanes' stores hit 32 banks)
extern "C" __global__ void __launch_bounds__(128)
ember_flash_attention_dkdv_d{D}(const float* __restrict__ Q, const float* __restrict__ K,
                                const float* __restrict__ V, const float* __restrict__ G,
                                const float* __restrict__ LSE, const float* __restrict__ DELTA,
                                float* __restrict__ dK, float* __restrict__ dV, const int L, const int S,
                                const int tiles, const float qscale, const float kscale, const int causal,
                                const int offset) {{
    extern __shared__ float4 smem4[];
    float* Qs = (float*)smem4;     // [BM][RS] queries, pre-scaled by qscale
    float* Gs = Qs + BM * RS;      // [BM][RS] dO
    float* Ks = Gs + BM * RS;      // [BN][RS]
    float* Vs = Ks + BN * RS;      // [BN][RS]
    float* Ps = Vs + BN * RS;      // [BM][PS] P
    float* Ss = Ps + BM * PS;      // [BM][PS] dS
    float* Ls = Ss + BM * PS;      // [BM] lse
    float* Ds = Ls + BM;           // [BM] delta
    const int tid = threadIdx.x, ty = tid >> 3, tx = tid & 7;
    const long long b = blockIdx.x / tiles;
    const int k0 = (blockIdx.x % tiles) * BN;
    const float* Qb = Q + b * (long long)L * D;
    const float* Gb = G + b * (long long)L * D;
    const float* Lb = LSE + b * (long long)L;
    const float* Db = DELTA + b * (long long)L;
    ember_load_rows(Ks, K + b * (long long)S * D, k0, BN, S, 1.f);
    ember_load_rows(Vs, V + b * (long long)S * D, k0, BN, S, 1.f);

    float dk[BN / 16][4 * DJ], dv[BN / 16][4 * DJ];  // keys RI ty + i, columns 32 jj + 4 tx + c
    #pragma unroll
    for (int i = 0; i < BN / 16; ++i)
        #pragma unroll
        for (int c = 0; c < 4 * DJ; ++c) {{ dk[i][c] = 0.f; dv[i][c] = 0.f; }}
    // with is_causal, key n is visible to query r when n <= r + offset: the first query that
    // sees key k0 is k0 - offset, so the tiles before its tile are skipped
    int q_begin = 0;
    if (causal && k0 - offset > 0) q_begin = ((k0 - offset) / BM) * BM;

    for (int q0 = q_begin; q0 < L; q0 += BM) {{
        __syncthreads();  // the previous step is done with Qs, Gs, Ps, Ss, Ls, Ds
        ember_load_rows(Qs, Qb, q0, BM, L, qscale);
        ember_load_rows(Gs, Gb, q0, BM, L, 1.f);
        for (int m = tid; m < BM; m += 128) {{
            const bool in = q0 + m < L;
            Ls[m] = in ? Lb[q0 + m] : 0.f;
            Ds[m] = in ? Db[q0 + m] : 0.f;
        }}
        __syncthreads();
        float s[BM / 16][BN / 8], dp[BM / 16][BN / 8];  // queries ty + 16 i, keys tx + 8 j
        ember_scores<BM / 16, BN / 8>(Qs, Gs, Ks, Vs, ty, tx, s, dp);
        #pragma unroll
        for (int i = 0; i < BM / 16; ++i) {{
            const int m = ty + 16 * i, r = q0 + m;
            const float lse = Ls[m], delta = Ds[m];
            #pragma unroll
            for (int j = 0; j < BN / 8; ++j) {{
                const int nl = tx + 8 * j, n = k0 + nl;
                const bool seen = r < L && n < S && !(causal && n > r + offset);
                const float p = seen ? exp2f(s[i][j] - lse) : 0.f;
                Ps[m * PS + nl] = p;
                Ss[m * PS + nl] = p * (dp[i][j] - delta);
            }}
        }}
        __syncthreads();
        #pragma unroll 4
        for (int m = 0; m < BM; ++m) {{
            float p[BN / 16], ds[BN / 16];
            #pragma unroll
            for (int i = 0; i < BN / 16; ++i) {{
                p[i] = Ps[m * PS + (BN / 16) * ty + i];
                ds[i] = Ss[m * PS + (BN / 16) * ty + i];
            }}
            #pragma unroll
            for (int jj = 0; jj < DJ; ++jj) {{
                const float4 gg = *(const float4*)(Gs + m * RS + 32 * jj + 4 * tx);
                const float4 qq = *(const float4*)(Qs + m * RS + 32 * jj + 4 * tx);
                #pragma unroll
                for (int i = 0; i < BN / 16; ++i) {{
                    dv[i][4 * jj + 0] = fmaf(p[i], gg.x, dv[i][4 * jj + 0]);
                    dv[i][4 * jj + 1] = fmaf(p[i], gg.y, dv[i][4 * jj + 1]);
                    dv[i][4 * jj + 2] = fmaf(p[i], gg.z, dv[i][4 * jj + 2]);
                    dv[i][4 * jj + 3] = fmaf(p[i], gg.w, dv[i][4 * jj + 3]);
                    dk[i][4 * jj + 0] = fmaf(ds[i], qq.x, dk[i][4 * jj + 0]);
                    dk[i][4 * jj + 1] = fmaf(ds[i], qq.y, dk[i][4 * jj + 1]);
                    dk[i][4 * jj + 2] = fmaf(ds[i], qq.z, dk[i][4 * jj + 2]);
                    dk[i][4 * jj + 3] = fmaf(ds[i], qq.w, dk[i][4 * jj + 3]);
                }}
            }}
        }}
    }}
    // Qs held q * scale * log2(e): kscale = 1 / log2(e) leaves dK = scale * dS^T q
    float* dKb = dK + b * (long long)S * D;
    float* dVb = dV + b * (long long)S * D;
    #pragma unroll
    for (int i = 0; i < BN / 16; ++i) {{
        const int n = k0 + (BN / 16) * ty + i;
        if (n >= S) continue;
        #pragma unroll
        for (int jj = 0; jj < DJ; ++jj) {{
            *(float4*)(dKb + (long long)n * D + 32 * jj + 4 * tx) = make_float4(
                dk[i][4 * jj] * kscale, dk[i][4 * jj + 1] * kscale, dk[i][4 * jj + 2] * kscale,
                dk[i][4 * jj + 3] * kscale);
            *(float4*)(dVb + (long long)n * D + 32 * jj + 4 * tx) = make_float4(
                dv[i][4 * jj], dv[i][4 * jj + 1], dv[i][4 * jj + 2], dv[i][4 * jj + 3]);
        }}
    }}
}}
#undef BN
#undef BM
#undef PS

// dQ of one tile of BM queries: the key tiles it sees, BN keys a step
#define BM {BM_Q}
#define BN {BN_Q}
#define TS (BM + 4)               // row stride of the transposed dS tile (the 32 lanes' stores hit 32 banks)
extern "C" __global__ void __launch_bounds__(128)
ember_flash_attention_dq_d{D}(const float* __restrict__ Q, const float* __restrict__ K,
                              const float* __restrict__ V, const float* __restrict__ G,
                              const float* __restrict__ LSE, const float* __restrict__ DELTA,
                              float* __restrict__ dQ, const int L, const int S, const int tiles,
                              const float qscale, const float scale, const int causal, const int offset) {{
    extern __shared__ float4 smem4[];
    float* Qs = (float*)smem4;     // [BM][RS] queries, pre-scaled by qscale
    float* Gs = Qs + BM * RS;      // [BM][RS] dO
    float* Ks = Gs + BM * RS;      // [BN][RS]
    float* Vs = Ks + BN * RS;      // [BN][RS]
    float* St = Vs + BN * RS;      // [BN][TS] dS, transposed
    const int tid = threadIdx.x, ty = tid >> 3, tx = tid & 7;
    const long long b = blockIdx.x / tiles;
    const int q0 = (blockIdx.x % tiles) * BM;
    const float* Kb = K + b * (long long)S * D;
    const float* Vb = V + b * (long long)S * D;
    ember_load_rows(Qs, Q + b * (long long)L * D, q0, BM, L, qscale);
    ember_load_rows(Gs, G + b * (long long)L * D, q0, BM, L, 1.f);
    float lse[BM / 16], delta[BM / 16];  // of queries ty + 16 i
    #pragma unroll
    for (int i = 0; i < BM / 16; ++i) {{
        const int r = q0 + ty + 16 * i;
        lse[i] = r < L ? LSE[b * (long long)L + r] : 0.f;
        delta[i] = r < L ? DELTA[b * (long long)L + r] : 0.f;
    }}
    float dq[BM / 16][4 * DJ];  // queries (BM / 16) ty + i, columns 32 jj + 4 tx + c
    #pragma unroll
    for (int i = 0; i < BM / 16; ++i)
        #pragma unroll
        for (int c = 0; c < 4 * DJ; ++c) dq[i][c] = 0.f;
    int n_end = S;  // with is_causal, the last key any query of the tile sees is q0 + BM - 1 + offset
    if (causal) {{ const int last = q0 + BM + offset; n_end = last < S ? last : S; }}

    for (int n0 = 0; n0 < n_end; n0 += BN) {{
        __syncthreads();  // Qs and Gs are written (first step); the previous step is done with Ks, Vs, St
        ember_load_rows(Ks, Kb, n0, BN, S, 1.f);
        ember_load_rows(Vs, Vb, n0, BN, S, 1.f);
        __syncthreads();
        float s[BM / 16][BN / 8], dp[BM / 16][BN / 8];  // queries ty + 16 i, keys tx + 8 j
        ember_scores<BM / 16, BN / 8>(Qs, Gs, Ks, Vs, ty, tx, s, dp);
        #pragma unroll
        for (int i = 0; i < BM / 16; ++i) {{
            const int m = ty + 16 * i, r = q0 + m;
            #pragma unroll
            for (int j = 0; j < BN / 8; ++j) {{
                const int nl = tx + 8 * j, n = n0 + nl;
                const bool seen = r < L && n < S && !(causal && n > r + offset);
                const float p = seen ? exp2f(s[i][j] - lse[i]) : 0.f;
                St[nl * TS + m] = p * (dp[i][j] - delta[i]);
            }}
        }}
        __syncthreads();
        #pragma unroll 4
        for (int n = 0; n < BN; ++n) {{
            float ds[BM / 16];
            #pragma unroll
            for (int i = 0; i < BM / 16; ++i) ds[i] = St[n * TS + (BM / 16) * ty + i];
            #pragma unroll
            for (int jj = 0; jj < DJ; ++jj) {{
                const float4 kk = *(const float4*)(Ks + n * RS + 32 * jj + 4 * tx);
                #pragma unroll
                for (int i = 0; i < BM / 16; ++i) {{
                    dq[i][4 * jj + 0] = fmaf(ds[i], kk.x, dq[i][4 * jj + 0]);
                    dq[i][4 * jj + 1] = fmaf(ds[i], kk.y, dq[i][4 * jj + 1]);
                    dq[i][4 * jj + 2] = fmaf(ds[i], kk.z, dq[i][4 * jj + 2]);
                    dq[i][4 * jj + 3] = fmaf(ds[i], kk.w, dq[i][4 * jj + 3]);
                }}
            }}
        }}
    }}
    float* dQb = dQ + b * (long long)L * D;
    #pragma unroll
    for (int i = 0; i < BM / 16; ++i) {{
        const int r = q0 + (BM / 16) * ty + i;
        if (r >= L) continue;
        #pragma unroll
        for (int jj = 0; jj < DJ; ++jj)
            *(float4*)(dQb + (long long)r * D + 32 * jj + 4 * tx) = make_float4(
                dq[i][4 * jj] * scale, dq[i][4 * jj + 1] * scale, dq[i][4 * jj + 2] * scale,
                dq[i][4 * jj + 3] * scale);
    }}
}}
"""


def source(head: int) -> str:
    """The dkdv and dq kernels' CUDA source for head size ``head`` (the stats pass is
    ``attention.source(head, stats=True)``)."""
    t = tiles(head)
    return _SOURCE.format(D=head, BN_KV=t["dkdv"][0], BM_KV=t["dkdv"][1], BM_Q=t["dq"][0], BN_Q=t["dq"][1])


def shared_bytes(head: int) -> dict[str, int]:
    """Dynamic shared memory of one block of each kernel."""
    rs = head + 4
    bn, bm = tiles(head)["dkdv"]
    qm, qn = tiles(head)["dq"]
    return {
        "stats": stats_shared_bytes(head),
        "dkdv": 4 * (2 * bm * rs + 2 * bn * rs + 2 * bm * (bn + 8) + 2 * bm),
        "dq": 4 * (2 * qm * rs + 2 * qn * rs + qn * (qm + 4)),
    }


def _blocks(lead: tuple[int, ...], step: int) -> Iterator[tuple[Any, ...]]:
    """Index tuples over ``lead``: the leading axes one index at a time, the last in slices of ``step``."""
    import itertools

    last = lead[-1]
    for first in itertools.product(*(range(n) for n in lead[:-1])):
        for start in range(0, last, step):
            yield first + (slice(start, min(start + step, last)),)


def chunked_backward(cp: Any, softmax: Callable[..., Any], softmax_backward: Callable[..., Any]) -> Callable[..., Any]:
    """The packed backward for every case the kernels do not take (a mask, float64, other head
    sizes): per slice of the batch of at most :data:`SCORE_BUDGET` score elements, cuBLAS for the
    five products and the one-pass row kernels (``softmax``, ``softmax_backward``) between them;
    the composite rule runs the same products over slices of one batch axis, with CuPy's
    five-pass softmax and more temporaries."""

    def run(g: Any, q: Any, k: Any, v: Any, *mask: Any, is_causal: bool, scale: float) -> Any:
        out_dtype = q.dtype
        work = cp.float64 if q.dtype == cp.float64 else cp.float32
        lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
        L, S = q.shape[-2], k.shape[-2]
        shapes = (lead + q.shape[-2:], lead + k.shape[-2:], lead + v.shape[-2:])
        sizes = [math.prod(s) for s in shapes]
        packed = cp.zeros(sum(sizes), work)
        CALLS["attention_backward_chunked"] += 1
        if L == 0 or S == 0 or not all(sizes):  # no scores: every gradient is zero (or empty)
            return packed.astype(out_dtype, copy=False)
        whole = lead or (1,)
        gq, gk, gv = (
            packed[a : a + n].reshape(whole + s[-2:])
            for a, n, s in zip((0, sizes[0], sizes[0] + sizes[1]), sizes, shapes)
        )
        qb, kb, vb, gb = (cp.broadcast_to(t.astype(work, copy=False), whole + t.shape[-2:]) for t in (q, k, v, g))
        mk = None
        if mask:
            m = mask[0] if mask[0].dtype == cp.bool_ else mask[0].astype(work, copy=False)
            mk = cp.broadcast_to(m, whole + (L, S))
        keep = None
        if is_causal:
            keep = cp.arange(S)[None, :] <= cp.arange(L)[:, None] + (S - L)
        empty_rows = mk is not None or (is_causal and L > S)  # only then can a row see no key
        step = max(1, SCORE_BUDGET // (L * S))
        sc = work(scale)
        for idx in _blocks(whole, step):
            # the scale goes on q (L x E), not on the (L x S) scores: gk = gs^T (q * scale), gq = (gs k) * scale
            qi, ki, vi, gi = qb[idx] * sc, kb[idx], vb[idx], gb[idx]
            s = cp.matmul(qi, cp.swapaxes(ki, -1, -2))
            if keep is not None:
                s = cp.where(keep, s, -cp.inf)
            if mk is not None:
                s = cp.where(mk[idx], s, -cp.inf) if mk.dtype == cp.bool_ else s + mk[idx]
            p = softmax(s, axis=-1)
            del s
            if empty_rows:
                p = cp.where(cp.isnan(p), 0, p)
            cp.matmul(cp.swapaxes(p, -1, -2), gi, out=gv[idx])
            gs = softmax_backward(p, cp.matmul(gi, cp.swapaxes(vi, -1, -2)), axis=-1)
            del p
            gqi = gq[idx]  # a view: the product lands in the packed result
            cp.matmul(gs, ki, out=gqi)
            gqi *= sc
            cp.matmul(cp.swapaxes(gs, -1, -2), qi, out=gk[idx])
        return packed.astype(out_dtype, copy=False)

    return run


def flash_attention_backward(
    cp: Any, table: dict[str, Callable[..., Any]], *, chunked: bool = False
) -> Callable[..., Any]:
    """``scaled_dot_product_attention_backward`` over CuPy arrays: the three kernels where they
    apply, :func:`chunked_backward` (with ``table``'s softmax row kernels) elsewhere, or
    everywhere with ``chunked`` (to compare the two on one workload)."""
    compiled: dict[tuple[str, int], Any] = {}
    fallback = chunked_backward(cp, table["softmax"], table["softmax_backward"])
    if chunked:
        return fallback
    computed = {np.dtype(np.float32), np.dtype(np.float16)}
    try:
        import ml_dtypes

        computed.add(np.dtype(ml_dtypes.bfloat16))
    except ImportError:  # pragma: no cover - CuPy 14 depends on it
        pass

    def kernel(which: str, head: int) -> Any:
        k = compiled.get((which, head))
        if k is None:
            if which == "stats":
                k = cp.RawKernel(stats_source(head, stats=True), kernel_name(head, stats=True))
            else:
                k = cp.RawKernel(source(head), f"ember_flash_attention_{which}_d{head}")
            k.max_dynamic_shared_size_bytes = shared_bytes(head)[which]
            compiled[(which, head)] = k
        return k

    def prepare(a: Any, lead: tuple[int, ...]) -> Any:
        a = cp.broadcast_to(a.astype(cp.float32, copy=False), lead + a.shape[-2:])
        a = cp.ascontiguousarray(a)
        return a if not a.data.ptr & 15 else a.copy()

    def run(g: Any, q: Any, k: Any, v: Any, *mask: Any, is_causal: bool, scale: float) -> Any:
        head = q.shape[-1]
        if (
            mask
            or q.dtype not in computed
            or not (q.dtype == k.dtype == v.dtype == g.dtype)
            or head not in HEAD_SIZES
            or k.shape[-1] != head
            or v.shape[-1] != head
            or q.shape[-2] == 0
            or k.shape[-2] == 0
        ):
            return fallback(g, q, k, v, *mask, is_causal=is_causal, scale=scale)
        lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
        L, S = q.shape[-2], k.shape[-2]
        batch = int(np.prod(lead, dtype=np.int64))
        n_q, n_k = batch * L * head, batch * S * head
        packed = cp.empty(n_q + 2 * n_k, cp.float32)
        if batch == 0:
            return packed.astype(q.dtype, copy=False)
        qc, kc, vc, gc = (prepare(t, lead) for t in (q, k, v, g))
        lse = cp.empty(batch * L, cp.float32)
        delta = cp.empty(batch * L, cp.float32)
        gq, gk, gv = packed[:n_q], packed[n_q : n_q + n_k], packed[n_q + n_k :]  # 16-byte aligned: D % 32 == 0
        qscale = np.float32(scale * _LOG2E)
        causal, offset = np.int32(bool(is_causal)), np.int32(S - L)
        L32, S32 = np.int32(L), np.int32(S)
        sizes = shared_bytes(head)
        CALLS["scaled_dot_product_attention_backward"] += 1
        t_stats = -(-L // 64)
        kernel("stats", head)(
            (batch * t_stats,), (128,),
            (qc, kc, vc, gc, lse, delta, L32, S32, np.int32(t_stats), qscale, causal, offset),
            shared_mem=sizes["stats"],
        )  # fmt: skip
        bn = tiles(head)["dkdv"][0]
        t_kv = -(-S // bn)
        kernel("dkdv", head)(
            (batch * t_kv,), (128,),
            (qc, kc, vc, gc, lse, delta, gk, gv, L32, S32, np.int32(t_kv), qscale, np.float32(1 / _LOG2E),
             causal, offset),
            shared_mem=sizes["dkdv"],
        )  # fmt: skip
        t_q = -(-L // tiles(head)["dq"][0])
        kernel("dq", head)(
            (batch * t_q,), (128,),
            (qc, kc, vc, gc, lse, delta, gq, L32, S32, np.int32(t_q), qscale, np.float32(scale), causal, offset),
            shared_mem=sizes["dq"],
        )  # fmt: skip
        return packed if q.dtype == packed.dtype else packed.astype(q.dtype)

    return run

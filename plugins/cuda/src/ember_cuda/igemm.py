"""CUDA C of ember-cuda's implicit-GEMM convolutions: conv, conv_transpose (conv's input gradient)
and conv's weight gradient as tiled GEMMs that gather their operand from the image as they load it.

No column buffer exists: im2col's columns (W3's second layer at batch 512: 110 MiB, three times a
step) and the launches around them (im2col, the transposes, col2im, the bias) are gone, one kernel a
convolution in their place (the weight gradient: one, plus a sum over its K splits). The launches
and the columns' memory were what the host-bound step and the step's peak memory paid for.

One main loop serves the three: a 128-thread block computes a BM x 128 tile of C (BM = 64, or 32 for
few output channels), each thread a (BM / 8) x 8 block of it, k eight rows deep per step, A and B
staged in shared memory while the next step's loads are in flight in registers. The GEMMs:

- conv: C[co][n*L + p] = sum_k w[co][k] * X[k][n*L + p], k = tap * C + ci (tap-major, so when C is a
  multiple of 8 a step's rows share one tap and its bounds test), X[k][col] = x[n, ci, oh*sh - ph +
  kh*dh, ow*sw - pw + kw*dw] or 0; C stored into the NCHW output with the bias added.
- conv_transpose: the same with x the gradient and the columns the input's positions: X[k][(n, h,
  w)] = g[n, ci, (h + ph - kh*dh) / sh, ...] where the division is exact and lands inside.
- the weight gradient: C[co][ci*KV + tap] = sum over k = n*L + p of g[n, co, p] * x[n, ci, ...]: K is
  the whole batch's positions, so the grid splits K (a block per tile and split), each split's tile
  into its own partial, and one kernel sums the splits in a fixed order (deterministic, no atomics).

32-bit indices: the Python side sends arrays of 2^31 elements or more elsewhere.
"""

from __future__ import annotations

import math

__all__ = ["source", "BK", "BN", "THREADS", "tile_rows", "splits", "blocks"]

BK, BN, THREADS = 8, 128, 128

_SOURCE = r"""
typedef {T} T;
#define BK 8
#define BN 128
#define NT 128

// 4 consecutive elements of shared memory (16-byte aligned) into registers: one or two 16-byte loads
__device__ __forceinline__ void ember_ld4(float* d, const float* s) {{
    const float4 v = *reinterpret_cast<const float4*>(s);
    d[0] = v.x; d[1] = v.y; d[2] = v.z; d[3] = v.w;
}}
__device__ __forceinline__ void ember_ld4(double* d, const double* s) {{
    const double2 u = *reinterpret_cast<const double2*>(s), v = *reinterpret_cast<const double2*>(s + 2);
    d[0] = u.x; d[1] = u.y; d[2] = v.x; d[3] = v.y;
}}

// The main loop: acc (this thread's (BM/8) x 8 block of the tile) = A[tile rows][k0:k1] @ B[k0:k1][tile cols].
// The loader L reads a step's share of A (row t & 7 of the step, tile rows (t >> 3) + 16 i) and of B
// into registers (load, called once per step in order) and puts B's into shared memory (store).
// Thread t computes tile rows (t >> 4) * TM + i and columns (t & 15) * 4 + j, 64 + (t & 15) * 4 + j.
template <int BM, class L>
__device__ __forceinline__ void ember_mainloop(L& ld, const int k0, const int k1, T (&acc)[BM / 8][8]) {{
    constexpr int TM = BM / 8, RA = BM / 16;
    __shared__ __align__(16) T As[BK][BM + 4];
    __shared__ __align__(16) T Bs[BK][BN + 4];
    const int t = threadIdx.x, tx = t & 15, ty = t >> 4, r = t & 7, c8 = t >> 3;
#pragma unroll
    for (int i = 0; i < TM; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0;
    if (k0 >= k1) return;  // (the same for every thread of the block)
    T ra[RA], rb[8];
    ld.load(k0, ra, rb);
    for (int kb = k0; kb < k1; kb += BK) {{
#pragma unroll
        for (int i = 0; i < RA; i++) As[r][c8 + 16 * i] = ra[i];
        ld.store(Bs, rb);
        __syncthreads();
        if (kb + BK < k1) ld.load(kb + BK, ra, rb);  // in flight while this step computes
#pragma unroll
        for (int k = 0; k < BK; k++) {{
            T a[TM], b[8];
#pragma unroll
            for (int i = 0; i < TM; i += 4) ember_ld4(a + i, &As[k][ty * TM + i]);
            ember_ld4(b, &Bs[k][tx * 4]);
            ember_ld4(b + 4, &Bs[k][64 + tx * 4]);
#pragma unroll
            for (int i = 0; i < TM; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] += a[i] * b[j];
        }}
        __syncthreads();
    }}
}}

// conv (TRANSPOSE false) and conv_transpose (true). x: (N, Cs, SH, SW), the gathered operand; the
// columns are the (n, position) pairs of a (GH, GW) grid, L = GH * GW of them an image; A[m][k] =
// w[m * wsm + ci * wsc + tap]. ``fast``: Cs % 8 == 0, so a step's 8 rows share one tap.
template <bool TRANSPOSE>
struct EmberConvLoader {{
    const T* __restrict__ x;
    const T* __restrict__ w;
    int M, K, Cs, SH, SW, KW, sh, sw, ph, pw, dh, dw, wsc, wsm, fast;
    int xb, hq, wq, col_ok, m_base;  // this thread's B column (t of the tile) and A rows

    __device__ __forceinline__ void at(int kh, int kw, int& ih, int& iw) const {{
        if (!TRANSPOSE) {{
            ih = hq + kh * dh;
            iw = wq + kw * dw;
        }} else {{  // the input position u with u * stride + tap * dilation - pad == this column's position
            const int th = hq - kh * dh, tw = wq - kw * dw;
            ih = sh == 1 ? th : (th >= 0 && th % sh == 0 ? th / sh : -1);
            iw = sw == 1 ? tw : (tw >= 0 && tw % sw == 0 ? tw / sw : -1);
        }}
    }}
    template <int RA>
    __device__ __forceinline__ void load(const int kb, T (&ra)[RA], T (&rb)[8]) const {{
        const int t = threadIdx.x;
        {{
            const int k = kb + (t & 7), tap = k / Cs, ci = k - tap * Cs, off = ci * wsc + tap;
#pragma unroll
            for (int i = 0; i < RA; i++) {{
                const int m = m_base + 16 * i;
                ra[i] = k < K && m < M ? w[m * wsm + off] : T(0);
            }}
        }}
        if (fast) {{
            const int tap = kb / Cs, ci0 = kb - tap * Cs, kh = tap / KW, kw = tap - kh * KW;
            int ih, iw;
            at(kh, kw, ih, iw);
            const bool ok = col_ok && ih >= 0 && ih < SH && iw >= 0 && iw < SW;
            const T* __restrict__ p = x + xb + (ci0 * SH + ih) * SW + iw;
            const int plane = SH * SW;
#pragma unroll
            for (int r = 0; r < 8; r++) rb[r] = ok ? p[r * plane] : T(0);
        }} else {{
#pragma unroll
            for (int r = 0; r < 8; r++) {{
                const int k = kb + r, tap = k / Cs, ci = k - tap * Cs, kh = tap / KW, kw = tap - kh * KW;
                int ih, iw;
                at(kh, kw, ih, iw);
                const bool ok = col_ok && k < K && ih >= 0 && ih < SH && iw >= 0 && iw < SW;
                rb[r] = ok ? x[xb + (ci * SH + ih) * SW + iw] : T(0);
            }}
        }}
    }}
    __device__ __forceinline__ void store(T (&Bs)[BK][BN + 4], const T (&rb)[8]) const {{
#pragma unroll
        for (int r = 0; r < 8; r++) Bs[r][threadIdx.x] = rb[r];
    }}
}};

template <int BM, bool TRANSPOSE>
__device__ __forceinline__ void ember_conv_body(const T* __restrict__ x, const T* __restrict__ w,
        const T* __restrict__ bias, T* __restrict__ y, const int has_bias, const int M, const int K, const int Ncol,
        const int L, const int Cs, const int SH, const int SW, const int GW, const int KW, const int sh, const int sw,
        const int ph, const int pw, const int dh, const int dw, const int wsc, const int wsm, const int fast,
        const int vec) {{
    const int tiles_n = (Ncol + BN - 1) / BN;
    const int n0 = (blockIdx.x % tiles_n) * BN, m0 = (blockIdx.x / tiles_n) * BM;
    const int t = threadIdx.x;
    EmberConvLoader<TRANSPOSE> ld;
    ld.x = x; ld.w = w; ld.M = M; ld.K = K; ld.Cs = Cs; ld.SH = SH; ld.SW = SW; ld.KW = KW;
    ld.sh = sh; ld.sw = sw; ld.ph = ph; ld.pw = pw; ld.dh = dh; ld.dw = dw; ld.wsc = wsc; ld.wsm = wsm;
    ld.fast = fast; ld.m_base = m0 + (t >> 3);
    {{
        const int col = n0 + t;
        ld.col_ok = col < Ncol;
        const int img = ld.col_ok ? col / L : 0, pos = col - img * L, oh = pos / GW, ow = pos - oh * GW;
        ld.xb = img * Cs * SH * SW;
        ld.hq = TRANSPOSE ? oh + ph : oh * sh - ph;
        ld.wq = TRANSPOSE ? ow + pw : ow * sw - pw;
    }}
    constexpr int TM = BM / 8;
    T acc[TM][8];
    ember_mainloop<BM>(ld, 0, K, acc);
    const int tx = t & 15, ty = t >> 4;
    T bv[TM];
#pragma unroll
    for (int i = 0; i < TM; i++) {{
        const int m = m0 + ty * TM + i;
        bv[i] = has_bias && m < M ? bias[m] : T(0);
    }}
#pragma unroll
    for (int h = 0; h < 2; h++) {{  // the thread's two runs of 4 columns
        const int c0 = n0 + h * 64 + tx * 4;
        if (c0 >= Ncol) continue;
        const int img = c0 / L, pos = c0 - img * L;
        T* __restrict__ out = y + img * M * L + pos;
        if (sizeof(T) == 4 && vec) {{  // L % 4 == 0, y 16-byte aligned: 4 columns of one image, one store a row
#pragma unroll
            for (int i = 0; i < TM; i++) {{
                const int m = m0 + ty * TM + i;
                if (m < M) {{
                    float4 v;
                    v.x = acc[i][4 * h] + bv[i]; v.y = acc[i][4 * h + 1] + bv[i];
                    v.z = acc[i][4 * h + 2] + bv[i]; v.w = acc[i][4 * h + 3] + bv[i];
                    *reinterpret_cast<float4*>(out + m * L) = v;
                }}
            }}
        }} else {{
#pragma unroll
            for (int j = 0; j < 4; j++) {{
                const int c = c0 + j;
                if (c >= Ncol) break;
                const int im = c / L, p = c - im * L;
#pragma unroll
                for (int i = 0; i < TM; i++) {{
                    const int m = m0 + ty * TM + i;
                    if (m < M) y[(im * M + m) * L + p] = acc[i][4 * h + j] + bv[i];
                }}
            }}
        }}
    }}
}}

{WRAPPERS}
// conv's weight gradient: rows k = n * L + oh * OW + ow (the output positions of the batch); this
// thread loads row k of each step (k = kb + (t & 7)), kept as (n, oh, ow) and advanced 8 positions a
// step, A = g[n, m, oh, ow] at tile rows (t >> 3) + 16 i and B = x at the tile columns (t >> 3) + 16 j
// (column c = ci * KV + tap: its channel's plane and tap offsets held in registers).
struct EmberWgradLoader {{
    const T* __restrict__ g;
    const T* __restrict__ x;
    int M, k1, L, Cs, H, W, OH, OW, sh, sw;
    int n, oh, ow, m_base;
    int cb[8], dhh[8], dww[8];  // cb: ci * H * W, or -1 past the last column

    template <int RA>
    __device__ __forceinline__ void load(const int kb, T (&ra)[RA], T (&rb)[8]) {{
        const bool ok = kb + (int)(threadIdx.x & 7) < k1;
        const T* __restrict__ gp = g + (n * M) * L + oh * OW + ow;
#pragma unroll
        for (int i = 0; i < RA; i++) {{
            const int m = m_base + 16 * i;
            ra[i] = ok && m < M ? gp[m * L] : T(0);
        }}
        const int h0 = oh * sh, w0 = ow * sw;
        const T* __restrict__ xp = x + n * Cs * H * W;
#pragma unroll
        for (int j = 0; j < 8; j++) {{
            const int ih = h0 + dhh[j], iw = w0 + dww[j];
            rb[j] = ok && cb[j] >= 0 && ih >= 0 && ih < H && iw >= 0 && iw < W ? xp[cb[j] + ih * W + iw] : T(0);
        }}
        ow += BK;  // the row of the next step
        while (ow >= OW) {{
            ow -= OW;
            if (++oh == OH) {{ oh = 0; n++; }}
        }}
    }}
    __device__ __forceinline__ void store(T (&Bs)[BK][BN + 4], const T (&rb)[8]) const {{
        const int t = threadIdx.x;
#pragma unroll
        for (int j = 0; j < 8; j++) Bs[t & 7][(t >> 3) + 16 * j] = rb[j];
    }}
}};

// block b: split z = b / (tiles_m * tiles_n) takes k in [z * ksplit, (z + 1) * ksplit) (ksplit a multiple
// of 8) into part[z] (M x Ncol); one split: part is the gradient itself
extern "C" __global__ void __launch_bounds__(NT) ember_igemm_wgrad64_{T}(const T* __restrict__ g,
        const T* __restrict__ x, T* __restrict__ part, const int M, const int Ncol, const int K, const int ksplit,
        const int Cs, const int H, const int W, const int OH, const int OW, const int KW, const int KV, const int sh,
        const int sw, const int ph, const int pw, const int dh, const int dw) {{
    const int tiles_n = (Ncol + BN - 1) / BN, tiles_m = (M + 63) / 64, per = tiles_n * tiles_m;
    const int z = blockIdx.x / per, b = blockIdx.x - z * per;
    const int n0 = (b % tiles_n) * BN, m0 = (b / tiles_n) * 64;
    const int k0 = z * ksplit, t = threadIdx.x;
    EmberWgradLoader ld;
    ld.g = g; ld.x = x; ld.M = M; ld.k1 = min(K, k0 + ksplit); ld.L = OH * OW; ld.Cs = Cs; ld.H = H; ld.W = W;
    ld.OH = OH; ld.OW = OW; ld.sh = sh; ld.sw = sw; ld.m_base = m0 + (t >> 3);
    {{
        const int k = k0 + (t & 7), L = OH * OW;
        ld.n = k / L;
        const int pos = k - ld.n * L;
        ld.oh = pos / OW;
        ld.ow = pos - ld.oh * OW;
    }}
#pragma unroll
    for (int j = 0; j < 8; j++) {{
        const int c = n0 + (t >> 3) + 16 * j, ci = c / KV, tap = c - ci * KV, kh = tap / KW, kw = tap - kh * KW;
        ld.cb[j] = c < Ncol ? ci * H * W : -1;
        ld.dhh[j] = kh * dh - ph;
        ld.dww[j] = kw * dw - pw;
    }}
    T acc[8][8];
    ember_mainloop<64>(ld, k0, ld.k1, acc);
    T* __restrict__ out = part + z * M * Ncol;
    const int tx = t & 15, ty = t >> 4;
#pragma unroll
    for (int i = 0; i < 8; i++) {{
        const int m = m0 + ty * 8 + i;
        if (m >= M) break;
#pragma unroll
        for (int j = 0; j < 8; j++) {{
            const int c = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
            if (c < Ncol) out[m * Ncol + c] = acc[i][j];
        }}
    }}
}}

// out[i] = the sum of part[z * size + i] over z < S, in order z = 0, 1, ...
extern "C" __global__ void ember_igemm_sum_{T}(const T* __restrict__ part, T* __restrict__ out, const int S,
        const int size) {{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < size; i += gridDim.x * blockDim.x) {{
        T s = 0;
        for (int z = 0; z < S; z++) s += part[z * size + i];
        out[i] = s;
    }}
}}
"""


#: the conv / conv_transpose kernels' parameters (written out: the CPU stand-in reads signatures)
_CONV_PARAMS = (
    "const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ y, "
    "const int has_bias, const int M, const int K, const int Ncol, const int L, const int Cs, const int SH, "
    "const int SW, const int GW, const int KW, const int sh, const int sw, const int ph, const int pw, "
    "const int dh, const int dw, const int wsc, const int wsm, const int fast, const int vec"
)


def _wrappers(ctype: str) -> str:
    names = [p.split()[-1] for p in _CONV_PARAMS.split(",")]
    out = []
    for kind, transpose in (("conv", "false"), ("transpose", "true")):
        for rows in (64, 32):
            out.append(
                'extern "C" __global__ void __launch_bounds__(NT) '
                f"ember_igemm_{kind}{rows}_{ctype}({_CONV_PARAMS}) {{\n"
                f"    ember_conv_body<{rows}, {transpose}>({', '.join(names)});\n}}\n"
            )
    return "".join(out)


def source(ctype: str) -> str:
    """CUDA C of the implicit-GEMM kernels for ``ctype`` (``float`` or ``double``)."""
    return _SOURCE.format(T=ctype, WRAPPERS=_wrappers(ctype))


def tile_rows(m: int) -> int:
    """The tile's rows for an M-row GEMM: 32 where M fits (few output channels: half the idle rows), else 64."""
    return 32 if m <= 32 else 64


def splits(m: int, ncol: int, k: int, sms: int) -> tuple[int, int]:
    """(splits, k per split) of the weight gradient's K (the batch's positions): about two blocks per
    multiprocessor in all, each split at least 16 steps of 8 rows."""
    tiles = -(-m // 64) * -(-ncol // BN)
    want = max(1, min(2 * sms // tiles, k // (16 * BK)))
    per = -(-k // want)
    per = -(-per // BK) * BK
    return -(-k // per), per


def blocks(m: int, ncol: int, rows: int) -> int:
    """Blocks of a conv / conv_transpose launch: one per tile."""
    return math.ceil(m / rows) * math.ceil(ncol / BN)

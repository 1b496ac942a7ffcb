"""Flash-style scaled-dot-product attention for ember-opencl: tiled kernels, no score tensor.

The forward (FlashAttention, Dao et al. 2022) gives a work-group of 128 items (64 where the device
takes no more) a tile of queries; it walks the keys a tile at a time through local memory with the
online softmax (a running row maximum and sum, the partial output rescaled as the maximum grows).
Queries are pre-scaled by ``scale * log2(e)``, so the exponentials are ``exp2``. Compiled with
``STATS``, the same kernel is the backward's first pass: per query row the log-sum-exp and ``delta =
dO . O`` instead of O. The forward writes each row's log-sum-exp too and keeps it on its output
handle (:class:`Saved`), so autodiff's backward, which passes that output
(``scaled_dot_product_attention_backward_from_output``), takes ``delta`` from one pass over dO and O
(``ember_flash_delta``) instead of the stats pass, which recomputes the forward. The backward
(FlashAttention-2, Dao 2023) then runs ``dkdv`` (a work-group per tile of keys walks the query tiles
that see them) and ``dq`` (a work-group per tile of queries walks its key tiles): no atomics, every
gradient one work-group's sum in a fixed order, so a run gives the same bits every time. This is
ember-cuda's design (``ember_cuda.attention``, ``attention_backward``) in OpenCL C, with its tile
layout (rows padded by 4, float4 reads); a row's maxima go through local memory (OpenCL 1.2 has no
portable shuffles) and the tiles are the largest that fit 48 KiB of local memory (NVIDIA's) or the
device's own.

Covered: float32, float16 and bfloat16 (loaded with ``vload_half`` / a shift: core OpenCL, no
cl_khr_fp16; computed in float), head sizes 32/64/96/128 with ``v`` of the same size,
``is_causal`` (key n visible to query r when ``n <= r + S - L``), batch dimensions that broadcast,
operands read in place at any batch and row strides. The rest (an explicit mask, float64, other
head sizes, empty lengths, a device without the local memory) runs ``nn.attention`` forward, and
the backward declines it (returns ``NotImplemented``: dispatch runs the core's composite rule), as
on CPU devices unless :data:`ON_CPU`. ``EMBER_OPENCL_FLASH=0`` (backend.py) leaves both ops to the composite
paths (the backward to autodiff's rule). :data:`CALLS` counts what ran.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from types import NotImplementedType
from typing import Any

import numpy as np

from ember.views import collapse

from . import settings
from .array import CLArray
from .cltypes import ctype
from .codegen import preamble, unravel
from .elementwise import contiguous
from .nn import attention as composite_forward
from .runtime import Runtime

__all__ = ["forward", "backward", "plan", "source", "Saved", "CALLS", "HEAD_SIZES", "DTYPES", "ON_CPU"]

#: launches by kernel path (tests read it; nothing else depends on it)
CALLS: Counter[str] = Counter()
#: the head sizes the kernels are generated for (multiples of 32: an item's columns are float4s)
HEAD_SIZES = (32, 64, 96, 128)
#: the dtypes the kernels read and write (computed in float)
DTYPES = frozenset({"float32", "float16", "bfloat16"})
#: whether CPU devices run the kernels too (``EMBER_OPENCL_FLASH=1``). By default they take the
#: composite paths: PoCL (2 cores, AVX-512) ran (2, 4, 128, 64) float32 forward + backward in 31 ms
#: through the kernels and 10 ms through the composite's vector GEMM and softmax kernels (PoCL runs
#: a work-group's 128 items as loops between its barriers)
ON_CPU = settings.flash() is True
#: local memory a work-group may use: NVIDIA's OpenCL gives 48 KiB
LOCAL_BUDGET = 48 * 1024
_LOG2E = 1.4426950408889634
#: (rows per work-group, rows per step), largest first: the first that fits the local memory is taken
_TILES = ((64, 64), (64, 32), (32, 32), (32, 16), (16, 16))


# -- tile sizes ------------------------------------------------------------------------------
def forward_bytes(head: int, bm: int, bn: int) -> int:
    """Local memory of the forward: Q, K (rows padded by 4), V, P transposed, the rows' maxima."""
    return 4 * (bm * (head + 4) + bn * (head + 4) + bn * head + bn * (bm + 4) + bm * 8)


def dkdv_bytes(head: int, bk: int, sq: int) -> int:
    """Local memory of ``dkdv``: Q, dO (sq rows), K, V (bk rows), P and dS (sq x bk), lse and delta."""
    return 4 * (2 * sq * (head + 4) + 2 * bk * (head + 4) + 2 * sq * (bk + 4) + 2 * sq)


def dq_bytes(head: int, bq: int, sk: int) -> int:
    """Local memory of ``dq``: Q, dO (bq rows), K, V (sk rows), dS transposed (sk x bq)."""
    return 4 * (2 * bq * (head + 4) + 2 * sk * (head + 4) + sk * (bq + 4))


@dataclass(frozen=True)
class Plan:
    """Work-group size and (rows per work-group, rows per step) of each kernel for one head size."""

    items: int
    forward: tuple[int, int]
    dkdv: tuple[int, int]
    dq: tuple[int, int]


def _first_fit(size: Any, head: int, limit: int, rows: int) -> tuple[int, int] | None:
    for block, step in _TILES:
        if block % rows == 0 and step % rows == 0 and size(head, block, step) <= limit:
            return block, step
    return None


@functools.cache
def _plan(head: int, max_wg: int, local_mem: int) -> Plan | None:
    items = 128 if max_wg >= 128 else 64 if max_wg >= 64 else 0
    if not items or head not in HEAD_SIZES:
        return None
    limit = min(LOCAL_BUDGET, local_mem)
    rows = items // 8  # item rows (TY): a tile's rows are dealt to them, its columns to 8 item columns
    fwd = _first_fit(forward_bytes, head, limit, rows)
    kv = _first_fit(dkdv_bytes, head, limit, rows)
    dq = _first_fit(dq_bytes, head, limit, rows)
    if fwd is None or kv is None or dq is None:
        return None
    return Plan(items, fwd, kv, dq)


def plan(rt: Runtime, head: int) -> Plan | None:
    """The tiles for ``head`` on ``rt``'s device (None: the kernels do not run there)."""
    return _plan(head, rt.max_wg, rt.local_mem)


# -- OpenCL C ------------------------------------------------------------------------------------
# Every kernel: items (ty, tx) of TY x 8; a score tile's row m is item row ty's when m % TY == ty
# (rows ty + TY i), its column n item column tx's when n % 8 == tx (columns tx + 8 j); an item's
# columns of a (rows x D) result are 32 jj + 4 tx + c (float4 reads of the tiles' rows). Tiles of
# rows keep a stride of RS = D + 4 floats: float4-aligned, and the 8 rows read at once fall in 8
# different 16-byte bank groups. Scores sum over the head 4 at a time in one order everywhere, so
# the backward recomputes the forward's scores bit for bit.


def _operand_params(names: str, rank: int, storage: str) -> tuple[list[str], list[Any]]:
    """Each operand: its buffer, element offset, row stride and batch strides."""
    params: list[str] = []
    types: list[Any] = []
    for x in names:
        params += [f"__global const {storage}* restrict {x.upper()}", f"const long {x}_off", f"const long {x}_rs"]
        params += [f"const long {x}_bs{d}" for d in range(rank)]
        types += [None, np.int64, np.int64] + [np.int64] * rank
    return params, types


def _header(dt: str, head: int, items: int, block: int, step: int) -> list[str]:
    c = ctype(dt)
    return [
        preamble({dt}),
        f"#define D {head}",
        f"#define NT {items}",
        f"#define TY {items // 8}",
        f"#define BLOCK {block}",
        f"#define STEP {step}",
        "#define RS (D + 4)",
        "#define DJ (D / 32)",
        "#define F4(tile, i) (*(__local const float4*)((tile) + (i)))",
        f"inline float ember_ld(__global const {c.storage}* p, const long i) {{ return {c.load('p', 'i')}; }}",
        f"inline void ember_st(__global {c.storage}* p, const long i, const float v) {{ {c.store('p', 'i', 'v')} }}",
    ]


def _kernel_head(name: str, params: list[str]) -> list[str]:
    return [
        f"__kernel __attribute__((reqd_work_group_size(NT, 1, 1))) void {name}(" + ", ".join(params) + ") {",
        "  const int lid = get_local_id(0), ty = lid / 8, tx = lid % 8;",
        "  const long b = get_group_id(0) / tiles;",
    ]


def _local(tiles: list[tuple[str, str]]) -> list[str]:
    """Local float tiles, each 16-byte aligned (declared as float4, used through a float pointer)."""
    lines = []
    for name, size in tiles:
        lines.append(f"  __local float4 {name}4[({size}) / 4];")
        lines.append(f"  __local float* {name} = (__local float*){name}4;")
    return lines


def _batch(names: str, rank: int) -> list[str]:
    """``b`` (the work-group's batch index) unravelled into each operand's base offset."""
    lines = unravel("b", rank, "bsh", "long", "c")
    for x in names:
        lines.append(f"const long {x}b = {x}_off + " + " + ".join(f"c{d} * {x}_bs{d}" for d in range(rank)) + ";")
    return ["  " + s for s in lines]


def _load_rows(tile: str, src: str, base: str, stride: str, r0: str, n: str, rows: str, scale: str = "") -> list[str]:
    """Rows [r0, r0 + n) of an operand into a local tile of row stride RS, zeros past ``rows``."""
    value = f"ember_ld({src}, {base} + ({r0} + m) * {stride} + d)" + (f" * {scale}" if scale else "")
    return [
        f"  for (int idx = lid; idx < {n} * D; idx += NT) {{",
        "    const int m = idx / D, d = idx % D;",
        f"    {tile}[m * RS + d] = {r0} + m < {rows} ? {value} : 0.0f;",
        "  }",
    ]


def _scores(grad: bool) -> list[str]:
    """s[i][j] = Qs row (ty + TY i) . Ks row (tx + 8 j) over the head (and with ``grad``, dp from
    Gs and Vs the same way), 4 columns a step in the order d = 0, 1, ..."""
    fma = "s[i][j] = fma(a[i].x, kk.x, s[i][j]); s[i][j] = fma(a[i].y, kk.y, s[i][j]); "
    fma += "s[i][j] = fma(a[i].z, kk.z, s[i][j]); s[i][j] = fma(a[i].w, kk.w, s[i][j]);"
    gfma = "dp[i][j] = fma(g[i].x, vv.x, dp[i][j]); dp[i][j] = fma(g[i].y, vv.y, dp[i][j]); "
    gfma += "dp[i][j] = fma(g[i].z, vv.z, dp[i][j]); dp[i][j] = fma(g[i].w, vv.w, dp[i][j]);"
    lines = [
        "    float s[RI][CN]" + (", dp[RI][CN];" if grad else ";"),
        "    for (int i = 0; i < RI; ++i)",
        "      for (int j = 0; j < CN; ++j) { s[i][j] = 0.0f;" + (" dp[i][j] = 0.0f; }" if grad else " }"),
        "    for (int d = 0; d < D; d += 4) {",
        "      float4 a[RI]" + (", g[RI];" if grad else ";"),
        "      for (int i = 0; i < RI; ++i) {",
        "        a[i] = F4(Qs, (ty + TY * i) * RS + d);",
    ]
    if grad:
        lines.append("        g[i] = F4(Gs, (ty + TY * i) * RS + d);")
    lines += [
        "      }",
        "      for (int j = 0; j < CN; ++j) {",
        "        const float4 kk = F4(Ks, (tx + 8 * j) * RS + d);",
    ]
    if grad:
        lines.append("        const float4 vv = F4(Vs, (tx + 8 * j) * RS + d);")
    lines += ["        for (int i = 0; i < RI; ++i) {", "          " + fma]
    if grad:
        lines.append("          " + gfma)
    lines += ["        }", "      }", "    }"]
    return lines


def _axpy4(acc: str, w: str, x: str) -> list[str]:
    """``acc[i][4 jj + c] += w * x.c`` for the 4 lanes of float4 ``x``."""
    return [f"{acc}[i][4 * jj + {c}] = fma({w}, {x}.{lane}, {acc}[i][4 * jj + {c}]);" for c, lane in enumerate("xyzw")]


def _forward_source(dt: str, head: int, items: int, bm: int, bn: int, rank: int, stats: bool) -> tuple[str, list]:
    """The forward (``stats``: the backward's first pass) for one dtype, head size and batch rank:
    a work-group per tile of BLOCK queries, the keys STEP at a time; a row's 8 items exchange their
    maxima in local memory (its sum is each item's own until the end: every item rescales by the
    row's one maximum)."""
    c = ctype(dt)
    names = "qkvg" if stats else "qkv"
    params, types = _operand_params(names, rank, c.storage)
    if stats:
        params += ["__global float* restrict LSE", "__global float* restrict DELTA"]
        types += [None, None]
    else:
        params += [f"__global {c.storage}* restrict O", "__global float* restrict LSE"]
        types += [None, None]
    params += ["const int L", "const int S", "const int tiles", "const float qscale", "const int causal"]
    params += ["const int offset"] + [f"const long bsh{d}" for d in range(rank)]
    types += [np.int32, np.int32, np.int32, np.float32, np.int32, np.int32] + [np.int64] * rank
    lines = _header(dt, head, items, bm, bn)
    lines += [
        "#define RI (BLOCK / TY)  // query rows of an item",
        "#define CN (STEP / 8)    // key columns of an item",
        "#define PS (BLOCK + 4)   // row stride of P transposed",
        *_kernel_head("ember_flash_stats" if stats else "ember_flash_forward", params),
        *_local([("Qs", "BLOCK * RS"), ("Ks", "STEP * RS"), ("Vs", "STEP * D"), ("Pt", "STEP * PS")]),
        "  __local float Rm[BLOCK * 8];  // the 8 partial maxima of each row (at the end, of dO . O)",
        "  const int q0 = (get_group_id(0) % tiles) * BLOCK;",
        *_batch(names, rank),
        *_load_rows("Qs", "Q", "qb", "q_rs", "q0", "BLOCK", "L", "qscale"),
        "  float o[RI][4 * DJ], mrow[RI], lrow[RI];  // lrow: this item's part of the row's sum",
        "  for (int i = 0; i < RI; ++i) {",
        "    mrow[i] = -INFINITY; lrow[i] = 0.0f;",
        "    for (int j = 0; j < 4 * DJ; ++j) o[i][j] = 0.0f;",
        "  }",
        "  int n_end = S;  // with causal, key n is visible to query r when n <= r + offset",
        "  if (causal) n_end = min(S, q0 + BLOCK + offset);",
        "  for (int n0 = 0; n0 < n_end; n0 += STEP) {",
        "    barrier(CLK_LOCAL_MEM_FENCE);  // Qs written; the previous step is done with Ks, Vs, Pt",
        *("  " + s for s in _load_rows("Ks", "K", "kb", "k_rs", "n0", "STEP", "S")),
        "    for (int idx = lid; idx < STEP * D; idx += NT) {",
        "      const int n = idx / D, d = idx % D;",
        "      Vs[idx] = n0 + n < S ? ember_ld(V, vb + (n0 + n) * v_rs + d) : 0.0f;",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        *_scores(False),
        "    for (int i = 0; i < RI; ++i) {",
        "      const int r = q0 + ty + TY * i;",
        "      float mx = -INFINITY;",
        "      for (int j = 0; j < CN; ++j) {",
        "        const int n = n0 + tx + 8 * j;",
        "        if (n >= S || (causal && n > r + offset)) s[i][j] = -INFINITY;",
        "        mx = fmax(mx, s[i][j]);",
        "      }",
        "      Rm[(ty + TY * i) * 8 + tx] = mx;",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "    for (int i = 0; i < RI; ++i) {",
        "      const int m = ty + TY * i;",
        "      float mx = Rm[m * 8];",
        "      for (int t = 1; t < 8; ++t) mx = fmax(mx, Rm[m * 8 + t]);",
        "      const float mnew = fmax(mrow[i], mx);",
        "      const float muse = mnew == -INFINITY ? 0.0f : mnew;  // a row that sees nothing yet stays 0",
        "      const float alpha = exp2(mrow[i] - muse);",
        "      float sum = 0.0f;",
        "      for (int j = 0; j < CN; ++j) {",
        "        const float p = exp2(s[i][j] - muse);",
        "        Pt[(tx + 8 * j) * PS + m] = p;",
        "        sum += p;",
        "      }",
        "      lrow[i] = lrow[i] * alpha + sum;",
        "      mrow[i] = mnew;",
        "      for (int j = 0; j < 4 * DJ; ++j) o[i][j] *= alpha;",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);  // Pt written, Rm read",
        "    for (int n = 0; n < STEP; ++n) {",
        "      float p[RI];",
        "      for (int i = 0; i < RI; ++i) p[i] = Pt[n * PS + ty + TY * i];",
        "      for (int jj = 0; jj < DJ; ++jj) {",
        "        const float4 vv = F4(Vs, n * D + 32 * jj + 4 * tx);",
        "        for (int i = 0; i < RI; ++i) {",
        *("          " + s for s in _axpy4("o", "p[i]", "vv")),
        "        }",
        "      }",
        "    }",
        "  }",
        "  for (int i = 0; i < RI; ++i) Rm[(ty + TY * i) * 8 + tx] = lrow[i];",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "  for (int i = 0; i < RI; ++i) {",
        "    const int m = ty + TY * i;",
        "    float sum = 0.0f;",
        "    for (int t = 0; t < 8; ++t) sum += Rm[m * 8 + t];",
        "    lrow[i] = sum;",
        "  }",
    ]
    if stats:
        lines += [
            "  barrier(CLK_LOCAL_MEM_FENCE);  // Rm read: it takes the 8 parts of dO . O",
            "  for (int i = 0; i < RI; ++i) {",
            "    const int r = q0 + ty + TY * i;",
            "    float dot = 0.0f;",
            "    if (r < L)",
            "      for (int jj = 0; jj < DJ; ++jj)",
            "        for (int c = 0; c < 4; ++c)",
            "          dot = fma(ember_ld(G, gb + r * g_rs + 32 * jj + 4 * tx + c), o[i][4 * jj + c], dot);",
            "    Rm[(ty + TY * i) * 8 + tx] = dot;",
            "  }",
            "  barrier(CLK_LOCAL_MEM_FENCE);",
            "  for (int i = 0; i < RI; ++i) {",
            "    const int m = ty + TY * i, r = q0 + m;",
            "    if (r >= L || tx != 0) continue;",
            "    float dot = 0.0f;",
            "    for (int t = 0; t < 8; ++t) dot += Rm[m * 8 + t];",
            "    const int seen = lrow[i] > 0.0f;  // a row that sees no key: lse = +inf (P = 0), delta = 0",
            "    LSE[b * L + r] = seen ? mrow[i] + log2(lrow[i]) : INFINITY;",
            "    DELTA[b * L + r] = seen ? dot / lrow[i] : 0.0f;",
            "  }",
        ]
    else:
        lines += [
            "  for (int i = 0; i < RI; ++i) {",
            "    const int r = q0 + ty + TY * i;",
            "    if (r >= L) continue;",
            "    const float inv = 1.0f / lrow[i];  // no visible key: 0 / 0 = NaN, as softmax over -inf gives",
            "    for (int jj = 0; jj < DJ; ++jj)",
            "      for (int c = 0; c < 4; ++c)",
            "        ember_st(O, (b * L + r) * D + 32 * jj + 4 * tx + c, o[i][4 * jj + c] * inv);",
            "    if (tx == 0)  // kept for the backward, as the stats pass would compute it",
            "      LSE[b * L + r] = lrow[i] > 0.0f ? mrow[i] + log2(lrow[i]) : INFINITY;",
            "  }",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n", types


def _dkdv_source(dt: str, head: int, items: int, bk: int, sq: int, rank: int) -> tuple[str, list]:
    """dK and dV of a tile of BLOCK keys, walking the queries that see them STEP at a time. Scores:
    queries ``ty + TY i``, keys ``tx + 8 j``; accumulators: keys ``ty + TY i``."""
    c = ctype(dt)
    params, types = _operand_params("qkvg", rank, c.storage)
    params += ["__global const float* restrict LSE", "__global const float* restrict DELTA"]
    params += [f"__global {c.storage}* restrict OUT", "const long dk_off", "const long dv_off"]
    params += ["const int L", "const int S", "const int tiles", "const float qscale", "const float kscale"]
    params += ["const int causal", "const int offset"] + [f"const long bsh{d}" for d in range(rank)]
    types += [None, None, None, np.int64, np.int64, np.int32, np.int32, np.int32, np.float32, np.float32]
    types += [np.int32, np.int32] + [np.int64] * rank
    lines = _header(dt, head, items, bk, sq)
    lines += [
        "#define RI (STEP / TY)   // query rows of an item in the score tile",
        "#define CN (BLOCK / 8)   // key columns of an item in the score tile",
        "#define KI (BLOCK / TY)  // keys an item accumulates",
        "#define PS (BLOCK + 4)",
        *_kernel_head("ember_flash_dkdv", params),
        *_local([("Qs", "STEP * RS"), ("Gs", "STEP * RS"), ("Ks", "BLOCK * RS"), ("Vs", "BLOCK * RS")]),
        *_local([("Ps", "STEP * PS"), ("Ss", "STEP * PS")]),
        "  __local float Ls[STEP], Ds[STEP];",
        "  const int k0 = (get_group_id(0) % tiles) * BLOCK;",
        *_batch("qkvg", rank),
        *_load_rows("Ks", "K", "kb", "k_rs", "k0", "BLOCK", "S"),
        *_load_rows("Vs", "V", "vb", "v_rs", "k0", "BLOCK", "S"),
        "  float dk[KI][4 * DJ], dv[KI][4 * DJ];",
        "  for (int i = 0; i < KI; ++i)",
        "    for (int j = 0; j < 4 * DJ; ++j) { dk[i][j] = 0.0f; dv[i][j] = 0.0f; }",
        "  // with causal, the first query that sees key k0 is k0 - offset: the tiles before its own are skipped",
        "  int q_begin = 0;",
        "  if (causal && k0 - offset > 0) q_begin = ((k0 - offset) / STEP) * STEP;",
        "  for (int q0 = q_begin; q0 < L; q0 += STEP) {",
        "    barrier(CLK_LOCAL_MEM_FENCE);  // Ks, Vs written; the previous step is done with Qs, Gs, Ps, Ss, Ls, Ds",
        *("  " + s for s in _load_rows("Qs", "Q", "qb", "q_rs", "q0", "STEP", "L", "qscale")),
        *("  " + s for s in _load_rows("Gs", "G", "gb", "g_rs", "q0", "STEP", "L")),
        "    for (int m = lid; m < STEP; m += NT) {",
        "      const int in = q0 + m < L;",
        "      Ls[m] = in ? LSE[b * L + q0 + m] : 0.0f;",
        "      Ds[m] = in ? DELTA[b * L + q0 + m] : 0.0f;",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        *_scores(True),
        "    for (int i = 0; i < RI; ++i) {",
        "      const int m = ty + TY * i, r = q0 + m;",
        "      for (int j = 0; j < CN; ++j) {",
        "        const int nl = tx + 8 * j, n = k0 + nl;",
        "        const int seen = r < L && n < S && !(causal && n > r + offset);",
        "        const float p = seen ? exp2(s[i][j] - Ls[m]) : 0.0f;",
        "        Ps[m * PS + nl] = p;",
        "        Ss[m * PS + nl] = p * (dp[i][j] - Ds[m]);",
        "      }",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "    for (int m = 0; m < STEP; ++m) {",
        "      float p[KI], ds[KI];",
        "      for (int i = 0; i < KI; ++i) { p[i] = Ps[m * PS + ty + TY * i]; ds[i] = Ss[m * PS + ty + TY * i]; }",
        "      for (int jj = 0; jj < DJ; ++jj) {",
        "        const float4 gg = F4(Gs, m * RS + 32 * jj + 4 * tx), qq = F4(Qs, m * RS + 32 * jj + 4 * tx);",
        "        for (int i = 0; i < KI; ++i) {",
        *("          " + s for s in _axpy4("dv", "p[i]", "gg")),
        *("          " + s for s in _axpy4("dk", "ds[i]", "qq")),
        "        }",
        "      }",
        "    }",
        "  }",
        "  // Qs held q * scale * log2(e): kscale = 1 / log2(e) leaves dK = scale * dS^T q",
        "  for (int i = 0; i < KI; ++i) {",
        "    const int n = k0 + ty + TY * i;",
        "    if (n >= S) continue;",
        "    for (int jj = 0; jj < DJ; ++jj)",
        "      for (int c = 0; c < 4; ++c) {",
        "        const long at = (b * S + n) * D + 32 * jj + 4 * tx + c;",
        "        ember_st(OUT, dk_off + at, dk[i][4 * jj + c] * kscale);",
        "        ember_st(OUT, dv_off + at, dv[i][4 * jj + c]);",
        "      }",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n", types


def _dq_source(dt: str, head: int, items: int, bq: int, sk: int, rank: int) -> tuple[str, list]:
    """dQ of a tile of BLOCK queries, walking the keys it sees STEP at a time. Scores and
    accumulators: queries ``ty + TY i``; score keys ``tx + 8 j``."""
    c = ctype(dt)
    params, types = _operand_params("qkvg", rank, c.storage)
    params += ["__global const float* restrict LSE", "__global const float* restrict DELTA"]
    params += [f"__global {c.storage}* restrict OUT", "const long dq_off"]
    params += ["const int L", "const int S", "const int tiles", "const float qscale", "const float scale"]
    params += ["const int causal", "const int offset"] + [f"const long bsh{d}" for d in range(rank)]
    types += [None, None, None, np.int64, np.int32, np.int32, np.int32, np.float32, np.float32]
    types += [np.int32, np.int32] + [np.int64] * rank
    lines = _header(dt, head, items, bq, sk)
    lines += [
        "#define RI (BLOCK / TY)  // query rows of an item (scores and dQ)",
        "#define CN (STEP / 8)    // key columns of an item in the score tile",
        "#define TS (BLOCK + 4)   // row stride of dS transposed",
        *_kernel_head("ember_flash_dq", params),
        *_local([("Qs", "BLOCK * RS"), ("Gs", "BLOCK * RS"), ("Ks", "STEP * RS"), ("Vs", "STEP * RS")]),
        *_local([("St", "STEP * TS")]),
        "  const int q0 = (get_group_id(0) % tiles) * BLOCK;",
        *_batch("qkvg", rank),
        *_load_rows("Qs", "Q", "qb", "q_rs", "q0", "BLOCK", "L", "qscale"),
        *_load_rows("Gs", "G", "gb", "g_rs", "q0", "BLOCK", "L"),
        "  float lse[RI], delta[RI], dq[RI][4 * DJ];",
        "  for (int i = 0; i < RI; ++i) {",
        "    const int r = q0 + ty + TY * i;",
        "    lse[i] = r < L ? LSE[b * L + r] : 0.0f;",
        "    delta[i] = r < L ? DELTA[b * L + r] : 0.0f;",
        "    for (int j = 0; j < 4 * DJ; ++j) dq[i][j] = 0.0f;",
        "  }",
        "  int n_end = S;  // with causal, the last key a query of the tile sees is q0 + BLOCK - 1 + offset",
        "  if (causal) n_end = min(S, q0 + BLOCK + offset);",
        "  for (int n0 = 0; n0 < n_end; n0 += STEP) {",
        "    barrier(CLK_LOCAL_MEM_FENCE);  // Qs, Gs written; the previous step is done with Ks, Vs, St",
        *("  " + s for s in _load_rows("Ks", "K", "kb", "k_rs", "n0", "STEP", "S")),
        *("  " + s for s in _load_rows("Vs", "V", "vb", "v_rs", "n0", "STEP", "S")),
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        *_scores(True),
        "    for (int i = 0; i < RI; ++i) {",
        "      const int m = ty + TY * i, r = q0 + m;",
        "      for (int j = 0; j < CN; ++j) {",
        "        const int nl = tx + 8 * j, n = n0 + nl;",
        "        const int seen = r < L && n < S && !(causal && n > r + offset);",
        "        const float p = seen ? exp2(s[i][j] - lse[i]) : 0.0f;",
        "        St[nl * TS + m] = p * (dp[i][j] - delta[i]);",
        "      }",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "    for (int n = 0; n < STEP; ++n) {",
        "      float ds[RI];",
        "      for (int i = 0; i < RI; ++i) ds[i] = St[n * TS + ty + TY * i];",
        "      for (int jj = 0; jj < DJ; ++jj) {",
        "        const float4 kk = F4(Ks, n * RS + 32 * jj + 4 * tx);",
        "        for (int i = 0; i < RI; ++i) {",
        *("          " + s for s in _axpy4("dq", "ds[i]", "kk")),
        "        }",
        "      }",
        "    }",
        "  }",
        "  for (int i = 0; i < RI; ++i) {",
        "    const int r = q0 + ty + TY * i;",
        "    if (r >= L) continue;",
        "    for (int jj = 0; jj < DJ; ++jj)",
        "      for (int c = 0; c < 4; ++c)",
        "        ember_st(OUT, dq_off + (b * L + r) * D + 32 * jj + 4 * tx + c, dq[i][4 * jj + c] * scale);",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n", types


def _delta_source(dt: str, head: int, items: int, rank: int) -> tuple[str, list]:
    """``delta = dO . O`` per query row from the forward's stored output (the backward given it):
    a row's 8 items each take a float4 of every 32 columns, their parts summed in local memory;
    a row that sees no key (its log-sum-exp +inf, its output NaN) gets 0, as the stats pass gives."""
    params, types = _operand_params("go", rank, ctype(dt).storage)
    params += ["__global const float* restrict LSE", "__global float* restrict DELTA", "const int L", "const int tiles"]
    params += [f"const long bsh{d}" for d in range(rank)]
    types += [None, None, np.int32, np.int32] + [np.int64] * rank
    lines = _header(dt, head, items, items // 8, 8)
    lines += [
        *_kernel_head("ember_flash_delta", params),
        "  __local float Rm[NT];",
        *_batch("go", rank),
        "  const int r = (get_group_id(0) % tiles) * TY + ty;",
        "  float dot = 0.0f;",
        "  if (r < L)",
        "    for (int jj = 0; jj < DJ; ++jj)",
        "      for (int c = 0; c < 4; ++c) {",
        "        const int d = 32 * jj + 4 * tx + c;",
        "        dot = fma(ember_ld(G, gb + r * g_rs + d), ember_ld(O, ob + r * o_rs + d), dot);",
        "      }",
        "  Rm[lid] = dot;",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "  if (tx == 0 && r < L) {",
        "    float sum = 0.0f;",
        "    for (int t = 0; t < 8; ++t) sum += Rm[ty * 8 + t];",
        "    DELTA[b * L + r] = isinf(LSE[b * L + r]) ? 0.0f : sum;",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n", types


def _unrolled(src: str) -> str:
    """``#pragma unroll`` before the loops over an item's rows and columns (their arrays then stay in
    registers) and a partial unroll of the loops over the head and a tile's rows."""
    out = []
    for line in src.split("\n"):
        text = line.lstrip()
        pad = line[: len(line) - len(text)]
        if text.startswith(
            ("for (int i = 0;", "for (int j = 0;", "for (int jj = 0;", "for (int c = 0;", "for (int t = ")
        ):
            out.append(pad + "#pragma unroll")
        elif text.startswith("for (int d = 0; d < D;"):
            out.append(pad + "#pragma unroll 2")
        elif text.startswith(("for (int n = 0; n < STEP;", "for (int m = 0; m < STEP;")):
            out.append(pad + "#pragma unroll 4")
        out.append(line)
    return "\n".join(out)


_NAMES = {
    "forward": "ember_flash_forward",
    "stats": "ember_flash_stats",
    "dkdv": "ember_flash_dkdv",
    "dq": "ember_flash_dq",
    "delta": "ember_flash_delta",
}


def source(which: str, dt: str, head: int, p: Plan, rank: int = 1) -> tuple[str, str, list[Any]]:
    """(OpenCL C, kernel name, argument types) of kernel ``which`` (forward, stats, dkdv, dq, delta)."""
    if which in ("forward", "stats"):
        src, types = _forward_source(dt, head, p.items, *p.forward, rank, which == "stats")
    elif which == "delta":
        src, types = _delta_source(dt, head, p.items, rank)
    elif which == "dkdv":
        src, types = _dkdv_source(dt, head, p.items, *p.dkdv, rank)
    else:
        src, types = _dq_source(dt, head, p.items, *p.dq, rank)
    return _unrolled(src), _NAMES[which], types


def _kernel(rt: Runtime, which: str, dt: str, head: int, p: Plan, rank: int) -> Any | None:
    """The compiled kernel, or None where the device runs fewer than ``p.items`` items a group."""
    knl, wg = rt.kernel(("flash_attention", which, dt, head, p, rank), lambda: source(which, dt, head, p, rank))
    return knl if wg >= p.items else None


# -- operands ------------------------------------------------------------------------------------
def _covered(rt: Runtime, q: CLArray, k: CLArray, v: CLArray, *more: CLArray) -> Plan | None:
    """The plan where the kernels take these operands (one dtype of theirs, a head size of theirs)
    on this device (a CPU device: with :data:`ON_CPU`)."""
    if rt.is_cpu and not ON_CPU:
        return None
    dt = q.dtype.name
    head = q.shape[-1]
    if dt not in DTYPES or any(t.dtype is not q.dtype for t in (k, v, *more)):
        return None
    if k.shape[-1] != head or v.shape[-1] != head or q.shape[-2] == 0 or k.shape[-2] == 0:
        return None
    return plan(rt, head)


def _operands(rt: Runtime, lead: tuple[int, ...], ops: tuple[CLArray, ...]) -> tuple[tuple[int, ...], list[Any]]:
    """The collapsed batch shape, and each operand's (buffer, offset, row stride, batch strides...)
    as kernel arguments: read in place where the head's stride is 1, else copied first."""
    views = []
    for t in ops:
        if t.shape[-1] > 1 and t.strides[-1] != 1:
            t = contiguous(rt, t)
        views.append(t.expand(lead + t.shape[-2:]))
    n = len(lead)
    bsh, bst = collapse(lead, [t.strides[:n] for t in views]) if n else ((1,), [(0,)] * len(views))
    args: list[Any] = []
    for t, st in zip(views, bst):
        args += [t.buf, t.offset, t.strides[-2], *st]
    return bsh, args


def forward(
    rt: Runtime, q: CLArray, k: CLArray, v: CLArray, mask: CLArray | None, is_causal: bool, scale: float
) -> CLArray:
    """``softmax(q k^T * scale) v`` by the flash kernel where it applies, else the composite kernels."""
    p = None if mask is not None else _covered(rt, q, k, v)
    lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    L, S, head = q.shape[-2], k.shape[-2], q.shape[-1]
    batch = math.prod(lead)
    if p is None or batch == 0:
        CALLS["attention_forward_composite"] += 1
        return composite_forward(rt, q, k, v, mask, is_causal, scale)
    dt = q.dtype.name
    bsh, args = _operands(rt, lead, (q, k, v))
    knl = _kernel(rt, "forward", dt, head, p, len(bsh))
    if knl is None:
        CALLS["attention_forward_composite"] += 1
        return composite_forward(rt, q, k, v, mask, is_causal, scale)
    out = rt.empty(lead + (L, head), q.dtype)
    lse = rt.empty((batch * L,), ctype("float32").dtype)
    tiles = -(-L // p.forward[0])
    CALLS["scaled_dot_product_attention"] += 1
    args += [out.buf, lse.buf, L, S, tiles, scale * _LOG2E, int(is_causal), S - L, *bsh]
    rt.launch(knl, (batch * tiles * p.items,), (p.items,), args)
    out.aux = Saved(lse, lead, L, S, is_causal, scale)
    return out


@dataclass(frozen=True)
class Saved:
    """What the flash forward keeps on its output handle for the backward given that output: each
    query row's log-sum-exp (base 2, of the scaled scores) and the call it belongs to."""

    lse: CLArray
    lead: tuple[int, ...]
    L: int
    S: int
    is_causal: bool
    scale: float


def backward(
    rt: Runtime,
    g: CLArray,
    q: CLArray,
    k: CLArray,
    v: CLArray,
    mask: CLArray | None,
    is_causal: bool,
    scale: float,
    out: CLArray | None = None,
) -> CLArray | NotImplementedType:
    """(gq, gk, gv) flattened and concatenated: the stats, dkdv and dq kernels where they apply;
    ``NotImplemented`` (declined: dispatch runs the core's composite rule) for the rest. Given the
    forward's ``out`` with its :class:`Saved` log-sum-exp, a pass over ``g`` and ``out`` (``delta``)
    takes the stats pass's place (which recomputes the forward)."""
    p = None if mask is not None else _covered(rt, q, k, v, g)
    lead = tuple(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2]))
    L, S, head = q.shape[-2], k.shape[-2], q.shape[-1]
    batch = math.prod(lead)
    dt = q.dtype.name
    if p is None or batch == 0:
        CALLS["attention_backward_declined"] += 1
        return NotImplemented
    saved = out.aux if out is not None and out.dtype is q.dtype else None
    if saved is not None and saved != Saved(saved.lse, lead, L, S, is_causal, scale):
        saved = None  # (another call's output: the stats pass is right whatever ``out`` holds)
    bsh, args = _operands(rt, lead, (q, k, v, g))
    rank = len(bsh)
    if saved is None:
        pass1 = _kernel(rt, "stats", dt, head, p, rank)
    else:
        dbsh, dargs = _operands(rt, lead, (g, out))  # type: ignore[arg-type]
        pass1 = _kernel(rt, "delta", dt, head, p, len(dbsh))
    dkdv, dq = (_kernel(rt, which, dt, head, p, rank) for which in ("dkdv", "dq"))
    if pass1 is None or dkdv is None or dq is None:
        CALLS["attention_backward_declined"] += 1
        return NotImplemented
    n_q, n_k = batch * L * head, batch * S * head
    packed = rt.empty((n_q + 2 * n_k,), q.dtype)
    delta = rt.empty((batch * L,), ctype("float32").dtype)
    qscale, causal, offset = scale * _LOG2E, int(is_causal), S - L
    CALLS["scaled_dot_product_attention_backward"] += 1
    items = p.items
    if saved is None:
        lse = rt.empty((batch * L,), ctype("float32").dtype)
        t_stats = -(-L // p.forward[0])
        rt.launch(pass1, (batch * t_stats * items,), (items,),
                  [*args, lse.buf, delta.buf, L, S, t_stats, qscale, causal, offset, *bsh])  # fmt: skip
    else:
        CALLS["attention_backward_from_output"] += 1
        lse = saved.lse
        t_rows = -(-L // (items // 8))
        rt.launch(pass1, (batch * t_rows * items,), (items,), [*dargs, lse.buf, delta.buf, L, t_rows, *dbsh])
    t_kv = -(-S // p.dkdv[0])
    rt.launch(dkdv, (batch * t_kv * items,), (items,),
              [*args, lse.buf, delta.buf, packed.buf, n_q, n_q + n_k, L, S, t_kv, qscale, 1 / _LOG2E, causal, offset,
               *bsh])  # fmt: skip
    t_q = -(-L // p.dq[0])
    rt.launch(dq, (batch * t_q * items,), (items,),
              [*args, lse.buf, delta.buf, packed.buf, 0, L, S, t_q, qscale, scale, causal, offset, *bsh])  # fmt: skip
    return packed

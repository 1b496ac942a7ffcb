"""Native kernels for ``opencl`` devices in OpenCL C, compiled and launched through ember-opencl's
runtime (``backend.rt``); registered only when ember-opencl is installed, nothing here imports
pyopencl. The matmul of fused_linear is the backend's own (``backend.implementation("matmul")``),
followed by one epilogue kernel; an attention call with an explicit mask, or a head size above
``MAX_HEAD``, goes to the backend's scaled_dot_product_attention. ``CALLS`` counts launches.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from typing import Any

import numpy as np

from .ops import FUSED_ATTENTION, FUSED_LAYER_NORM_RESIDUAL, FUSED_LINEAR

__all__ = ["register", "CALLS", "MAX_HEAD"]

#: launches of each kernel (tests and benchmarks read it)
CALLS: Counter[str] = Counter()
#: the largest head size the attention kernel keeps in private memory
MAX_HEAD = 256
_CTYPE = {"float32": ("float", np.float32), "float64": ("double", np.float64)}


def _pragma(ctype: str) -> str:
    return "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if ctype == "double" else ""


def _n(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


# -- fused_linear: the backend's matmul, then bias + activation in place ------------------------------
def _epilogue_source(dtype: str, activation: str, bias: bool) -> str:
    """The epilogue, with the activation written by ember-opencl's own elementwise table (the same
    formulas, helpers and NaN handling as its gelu/silu/... kernels)."""
    from ember_opencl.cltypes import ctype
    from ember_opencl.codegen import preamble
    from ember_opencl.ops_table import expression

    c = ctype(dtype)
    helpers: dict[str, str] = {}
    act = "v" if activation == "none" else expression(activation, [("v", c)], c, helpers)
    add = "v += b[ob + j];" if bias else ""
    # a 2-D launch, columns x rows: the bias index is the column, no 64-bit division per element
    return (
        f"{preamble({dtype}, helpers)}\n#define T {c.compute}\n"
        "__kernel void fused_bias_act(__global T* restrict y, const long oy, __global const T* restrict b,\n"
        "                             const long ob, const long M, const long N) {\n"
        "    const long j = get_global_id(0);\n"
        "    if (j >= N) return;\n"
        "    for (long r = get_global_id(1); r < M; r += get_global_size(1)) {\n"
        "        const long i = oy + r * N + j;\n"
        f"        T v = y[i]; {add} y[i] = {act};\n"
        "    }\n"
        "}\n"
    )


def _fused_linear(backend: Any, x: Any, w: Any, *bias: Any, activation: str = "none") -> Any:
    rt = backend.rt
    y = backend.make_contiguous(backend.implementation("matmul")(x, w.permute((1, 0))))
    n = _n(y.shape)
    if n == 0 or (activation == "none" and not bias):
        return y
    key = ("ember_fused", "bias_act", y.dtype.name, activation, bool(bias))
    argtypes = [None, np.int64, None, np.int64, np.int64, np.int64]
    source = lambda: _epilogue_source(y.dtype.name, activation, bool(bias))  # noqa: E731
    knl, wg = rt.kernel(key, lambda: (source(), "fused_bias_act", argtypes))
    b = backend.make_contiguous(bias[0]) if bias else y  # an unread stand-in when there is no bias
    N = y.shape[-1]
    M = n // N
    local = min(wg, 64 if rt.is_cpu else 256, 1 << max(N - 1, 0).bit_length())
    rows = M if rt.is_cpu else min(M, max(1, rt.compute_units * 32 * 256 // (local * -(-N // local))))
    CALLS["fused_linear"] += 1
    rt.launch(knl, (-(-N // local) * local, rows), (local, 1), [y.buf, y.offset, b.buf, b.offset, M, N])
    return y


# -- fused_layer_norm_residual: a work-group per row (a work item per row on CPUs) ------------------
def _lnr_source(ctype: str, group: int) -> str:
    """``group`` work items share a row through local-memory sums; 0: one work item per row, for
    CPU devices with rows for every core (ember-opencl's own row kernels choose so too)."""
    step = group or 1
    if group:
        head = (
            f"    __local T red[{group}];\n    const long row = get_group_id(0);\n    const int t = get_local_id(0);\n"
        )
        reduce = (
            "    red[t] = {v};\n"
            "    barrier(CLK_LOCAL_MEM_FENCE);\n"
            f"    for (int s = {group // 2}; s > 0; s >>= 1) {{{{\n"
            "        if (t < s) red[t] += red[t + s];\n"
            "        barrier(CLK_LOCAL_MEM_FENCE);\n"
            "    }}\n"
            "    {v} = red[0];\n"
            "    barrier(CLK_LOCAL_MEM_FENCE);\n"
        )
    else:
        head = "    const long row = get_global_id(0);\n    if (row >= rows) return;\n    const int t = 0;\n"
        reduce = ""
    return (
        f"{_pragma(ctype)}#define T {ctype}\n"
        "__kernel void fused_lnr(__global T* restrict out, __global const T* restrict x, const long ox,\n"
        "                        __global const T* restrict r, const long orr, __global const T* restrict w,\n"
        "                        const long ow, __global const T* restrict b,\n"
        "                        const long ob, const long C, const long rows, const T eps) {\n"
        f"{head}"
        "    __global const T* xr = x + ox + row * C;\n"
        "    __global const T* rr = r + orr + row * C;\n"
        "    __global T* o = out + row * C;\n"
        "    __global T* h = out + rows * C + row * C;\n"
        "    T acc = 0;\n"
        f"    for (long j = t; j < C; j += {step}) {{ const T v = xr[j] + rr[j]; h[j] = v; acc += v; }}\n"
        f"{reduce.format(v='acc')}"
        "    const T mean = acc / (T)C;\n"
        "    T acc2 = 0;\n"  # each work item reads back only the h[j] it wrote: no barrier needed
        f"    for (long j = t; j < C; j += {step}) {{ const T d = h[j] - mean; acc2 += d * d; }}\n"
        f"{reduce.format(v='acc2')}"
        "    const T rstd = rsqrt(acc2 / (T)C + eps);\n"
        f"    for (long j = t; j < C; j += {step}) o[j] = (h[j] - mean) * rstd * w[ow + j] + b[ob + j];\n"
        "}\n"
    )


def _fused_lnr(backend: Any, x: Any, residual: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Any:
    from ember_opencl.nn import _row_group  # the backend's own choice of work-group size per row

    rt = backend.rt
    x, residual, weight, bias = (backend.make_contiguous(a) for a in (x, residual, weight, bias))
    out = rt.empty((2, *x.shape), x.dtype)
    total = _n(x.shape)
    if total == 0:
        return out
    C = x.shape[-1]
    rows = total // C
    ctype, host = _CTYPE[x.dtype.name]
    group = _row_group(rt, rows, C)
    argtypes = [None, None, np.int64, None, np.int64, None, np.int64, None, np.int64, np.int64, np.int64, host]
    make = lambda: (_lnr_source(ctype, group), "fused_lnr", argtypes)  # noqa: E731
    knl, wg = rt.kernel(("ember_fused", "lnr", ctype, group), make)
    CALLS["fused_layer_norm_residual"] += 1
    args = [out.buf, x.buf, x.offset, residual.buf, residual.offset, weight.buf, weight.offset, bias.buf, bias.offset]
    if group:
        gsize, lsize = (rows * group,), (group,)
    else:
        local = min(wg, 64)
        gsize, lsize = (-(-rows // local) * local,), (local,)
    rt.launch(knl, gsize, lsize, [*args, C, rows, host(eps)])
    return out


# -- fused_attention: flash-style forward ----------------------------------------------------------
def _attention_source(ctype: str, d: int, dv: int, bq: int, bk: int) -> str:
    """One work item per query, ``bq`` queries per work-group; keys and values stream through local
    memory ``bk`` rows at a time; a running maximum and sum rescale the output (online softmax)."""
    return (
        f"{_pragma(ctype)}#define T {ctype}\n#define D {d}\n#define DV {dv}\n#define BQ {bq}\n#define BK {bk}\n"
        "__kernel void fused_flash(__global T* restrict out, __global const T* restrict q, const long oq,\n"
        "                          __global const T* restrict k, const long ok, __global const T* restrict v,\n"
        "                          const long ov, const int L, const int S,\n"
        "                          const int tiles, const T scale, const int causal, const int offset) {\n"
        "    __local T ks[BK * D];\n"
        "    __local T vs[BK * DV];\n"
        "    const long bt = get_group_id(0) / tiles;\n"
        "    const int q0 = (get_group_id(0) % tiles) * BQ, t = get_local_id(0), r = q0 + t;\n"
        "    __global const T* qb = q + oq + bt * (long)L * D;\n"
        "    __global const T* kb = k + ok + bt * (long)S * D;\n"
        "    __global const T* vb = v + ov + bt * (long)S * DV;\n"
        "    T qr[D], o[DV];\n"
        "    for (int c = 0; c < D; ++c) qr[c] = r < L ? qb[(long)r * D + c] * scale : (T)0;\n"
        "    for (int c = 0; c < DV; ++c) o[c] = (T)0;\n"
        "    T m = -INFINITY, l = (T)0;\n"
        "    int n_end = S;\n"
        "    if (causal) { const int last = q0 + BQ + offset; n_end = last < S ? (last > 0 ? last : 0) : S; }\n"
        "    for (int n0 = 0; n0 < n_end; n0 += BK) {\n"
        "        barrier(CLK_LOCAL_MEM_FENCE);\n"
        "        for (int i = t; i < BK * D; i += BQ)\n"
        "            ks[i] = n0 + i / D < S ? kb[(long)n0 * D + i] : (T)0;\n"
        "        for (int i = t; i < BK * DV; i += BQ)\n"
        "            vs[i] = n0 + i / DV < S ? vb[(long)n0 * DV + i] : (T)0;\n"
        "        barrier(CLK_LOCAL_MEM_FENCE);\n"
        "        if (r < L) {\n"  # the tile's scores, its maximum, one rescale, then the sums
        "            T sc[BK];\n"
        "            T mt = m;\n"
        "            for (int j = 0; j < BK; ++j) {\n"
        "                const int n = n0 + j;\n"
        "                T s = -INFINITY;\n"
        "                if (n < S && !(causal && n > r + offset)) {\n"
        "                    s = (T)0;\n"
        "                    for (int c = 0; c < D; ++c) s += qr[c] * ks[j * D + c];\n"
        "                }\n"
        "                sc[j] = s;\n"
        "                mt = fmax(mt, s);\n"
        "            }\n"
        "            if (mt != -INFINITY) {\n"
        "                const T corr = exp(m - mt);\n"
        "                l *= corr;\n"
        "                for (int c = 0; c < DV; ++c) o[c] *= corr;\n"
        "                m = mt;\n"
        "                for (int j = 0; j < BK; ++j) {\n"
        "                    const T p = exp(sc[j] - m);\n"
        "                    l += p;\n"
        "                    for (int c = 0; c < DV; ++c) o[c] += p * vs[j * DV + c];\n"
        "                }\n"
        "            }\n"
        "        }\n"
        "    }\n"
        "    if (r < L) {\n"
        "        __global T* ob = out + (bt * (long)L + r) * DV;\n"
        "        for (int c = 0; c < DV; ++c) ob[c] = o[c] / l;\n"  # no key seen: 0 / 0, NaN as the reference
        "    }\n"
        "}\n"
    )


def attention_tiles(d: int, dv: int, budget: int, itemsize: int) -> tuple[int, int]:
    """(queries per group, keys per step) for head sizes ``d``/``dv``: the key and value tiles
    within ``budget`` bytes of local memory."""
    bk = 32
    while bk > 1 and bk * (d + dv) * itemsize > budget:
        bk //= 2
    return 64, bk


def _broadcast_inputs(backend: Any, *arrays: Any) -> tuple[tuple[int, ...], list[Any]]:
    """The common batch shape and each input expanded to it and made contiguous."""
    lead = tuple(np.broadcast_shapes(*(a.shape[:-2] for a in arrays)))
    out = []
    for a in arrays:
        if a.shape[:-2] != lead:
            a = a.expand(lead + tuple(a.shape[-2:]))
        out.append(backend.make_contiguous(a))
    return lead, out


def _fused_attention(
    backend: Any, q: Any, k: Any, v: Any, *mask: Any, is_causal: bool = False, scale: float = 1.0
) -> Any:
    d, dv = q.shape[-1], v.shape[-1]
    if mask or d > MAX_HEAD or dv > MAX_HEAD or not (q.dtype == k.dtype == v.dtype):
        return backend.implementation("scaled_dot_product_attention")(q, k, v, *mask, is_causal=is_causal, scale=scale)
    rt = backend.rt
    lead, (q, k, v) = _broadcast_inputs(backend, q, k, v)
    L, S = q.shape[-2], k.shape[-2]
    out = rt.empty(lead + (L, dv), q.dtype)
    batch = _n(lead)
    if batch == 0 or L == 0:
        return out
    ctype, host = _CTYPE[q.dtype.name]
    bq, bk = attention_tiles(d, dv, rt.local_mem // 2, np.dtype(host).itemsize)
    argtypes = [
        None,
        None,
        np.int64,
        None,
        np.int64,
        None,
        np.int64,
        np.int32,
        np.int32,
        np.int32,
        host,
        np.int32,
        np.int32,
    ]
    knl, _ = rt.kernel(("ember_fused", "flash", ctype, d, dv, bq, bk),
                       lambda: (_attention_source(ctype, d, dv, bq, bk), "fused_flash", argtypes))  # fmt: skip
    tiles = -(-L // bq)
    CALLS["fused_attention"] += 1
    args = [out.buf, q.buf, q.offset, k.buf, k.offset, v.buf, v.offset, L, S, tiles, host(scale), int(is_causal), S - L]
    rt.launch(knl, (batch * tiles * bq,), (bq,), args)
    return out


def register(kind: str = "opencl") -> bool:
    """Register the OpenCL kernels when ember-opencl is installed; whether they were."""
    if importlib.util.find_spec("ember_opencl") is None:
        return False
    FUSED_LINEAR.kernel(kind)(_fused_linear)
    FUSED_LAYER_NORM_RESIDUAL.kernel(kind)(_fused_lnr)
    FUSED_ATTENTION.kernel(kind)(_fused_attention)
    return True

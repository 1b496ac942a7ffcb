"""Batched matmul: a tiled local-memory kernel with register blocking.

Each work-group computes a ``TM x TN`` tile of C; each work item a ``WM x WN`` block of it,
strided across the tile so neighbouring items write neighbouring columns. A and B are read
through their strides (a transposed operand is just other strides, a broadcast batch is
stride 0), staged ``TK`` columns at a time in local memory; the loader walks whichever
axis is contiguous so global reads coalesce. 16-bit floats accumulate in float.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.shapes import numel
from ember.views import collapse

from .array import CLArray
from .cltypes import ctype
from .codegen import preamble, unravel
from .runtime import Runtime

__all__ = ["Tiling", "matmul", "TILINGS"]

_VECTOR_DTYPES = frozenset(["float32", "float64", "int32", "int64", "uint32", "uint64"])


@dataclass(frozen=True)
class Tiling:
    """Tile of C per work-group (tm x tn), k-step tk, block per work item (wm x wn)."""

    tm: int
    tn: int
    tk: int
    wm: int
    wn: int

    @property
    def threads(self) -> tuple[int, int]:
        return self.tn // self.wn, self.tm // self.wm


TILINGS = {
    "gpu_large": Tiling(128, 128, 16, 8, 8),
    "gpu_k8": Tiling(128, 128, 8, 8, 8),
    "gpu_small": Tiling(64, 64, 16, 4, 4),
    "cpu": Tiling(64, 64, 16, 4, 4),
    "tiny": Tiling(16, 16, 16, 1, 1),
}


def _source(dt: str, t: Tiling, rb: int, idx: str, a_kfast: bool, b_nfast: bool) -> tuple[str, list[Any]]:
    c = ctype(dt)
    acc = "float" if c.is_wide_float else c.compute
    fma = c.kind == "f"
    rtn, rtm = t.threads
    threads = rtn * rtm
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    params = [f"const {idx} M", f"const {idx} N", f"const {idx} K"]
    params += [
        f"__global const {c.storage}* restrict A",
        f"const {idx} a_off",
        f"const {idx} a_rs",
        f"const {idx} a_cs",
    ]
    params += [
        f"__global const {c.storage}* restrict B",
        f"const {idx} b_off",
        f"const {idx} b_rs",
        f"const {idx} b_cs",
    ]
    params += [f"__global {c.storage}* restrict C"]
    params += [f"const {idx} bsh{d}" for d in range(rb)]
    params += [f"const {idx} bsa{d}" for d in range(rb)]
    params += [f"const {idx} bsb{d}" for d in range(rb)]
    params += [f"const {idx} bsc{d}" for d in range(rb)]
    types: list[Any] = [npi] * 3 + [None, npi, npi, npi] * 2 + [None] + [npi] * (4 * rb)
    if a_kfast:
        a_idx = f"const int kk = l % {t.tk}, mm = l / {t.tk};"
    else:
        a_idx = f"const int mm = l % {t.tm}, kk = l / {t.tm};"
    if b_nfast:
        b_idx = f"const int nn = l % {t.tn}, kk = l / {t.tn};"
    else:
        b_idx = f"const int kk = l % {t.tk}, nn = l / {t.tk};"
    step = "acc[i][j] = fma(ra[i], rb[j], acc[i][j]);" if fma else "acc[i][j] += ra[i] * rb[j];"
    batch = unravel("z", rb, "bsh", idx, "b")
    lines = [
        preamble({dt}),
        f"__kernel __attribute__((reqd_work_group_size({rtn}, {rtm}, 1)))",
        "void ember_matmul(" + ", ".join(params) + ") {",
        "  const int tx = get_local_id(0), ty = get_local_id(1);",
        f"  const int tid = ty * {rtn} + tx;",
        f"  const {idx} n0 = ({idx})get_group_id(0) * {t.tn}, m0 = ({idx})get_group_id(1) * {t.tm};",
        f"  const {idx} z = get_global_id(2);",
        *("  " + s for s in batch),
        f"  const {idx} a_base = a_off + " + " + ".join(f"b{d} * bsa{d}" for d in range(rb)) + ";",
        f"  const {idx} b_base = b_off + " + " + ".join(f"b{d} * bsb{d}" for d in range(rb)) + ";",
        f"  const {idx} c_base = " + " + ".join(f"b{d} * bsc{d}" for d in range(rb)) + ";",
        f"  __local {acc} As[{t.tk}][{t.tm + 1}];",
        f"  __local {acc} Bs[{t.tk}][{t.tn + 1}];",
        f"  {acc} acc[{t.wm}][{t.wn}];",
        f"  for (int i = 0; i < {t.wm}; i++) for (int j = 0; j < {t.wn}; j++) acc[i][j] = 0;",
        f"  for ({idx} k0 = 0; k0 < K; k0 += {t.tk}) {{",
        f"    for (int l = tid; l < {t.tm * t.tk}; l += {threads}) {{",
        f"      {a_idx}",
        f"      const {idx} gm = m0 + mm, gk = k0 + kk;",
        f"      As[kk][mm] = (gm < M && gk < K) ? ({acc}){c.load('A', 'a_base + gm * a_rs + gk * a_cs')} : ({acc})0;",
        "    }",
        f"    for (int l = tid; l < {t.tn * t.tk}; l += {threads}) {{",
        f"      {b_idx}",
        f"      const {idx} gn = n0 + nn, gk = k0 + kk;",
        f"      Bs[kk][nn] = (gn < N && gk < K) ? ({acc}){c.load('B', 'b_base + gk * b_rs + gn * b_cs')} : ({acc})0;",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "    #pragma unroll",
        f"    for (int kk = 0; kk < {t.tk}; kk++) {{",
        f"      {acc} ra[{t.wm}], rb[{t.wn}];",
        "      #pragma unroll",
        f"      for (int i = 0; i < {t.wm}; i++) ra[i] = As[kk][ty + i * {rtm}];",
        "      #pragma unroll",
        f"      for (int j = 0; j < {t.wn}; j++) rb[j] = Bs[kk][tx + j * {rtn}];",
        "      #pragma unroll",
        f"      for (int i = 0; i < {t.wm}; i++) {{",
        "        #pragma unroll",
        f"        for (int j = 0; j < {t.wn}; j++) {{ {step} }}",
        "      }",
        "    }",
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "  }",
        f"  for (int i = 0; i < {t.wm}; i++) {{",
        f"    const {idx} m = m0 + ty + i * {rtm};",
        "    if (m >= M) break;",
        f"    for (int j = 0; j < {t.wn}; j++) {{",
        f"      const {idx} n = n0 + tx + j * {rtn};",
        "      if (n < N) { " + c.store("C", "c_base + m * N + n", "acc[i][j]") + " }",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n", types


def _make(*spec: Any) -> tuple[str, str, list[Any]]:
    source, types = _source(*spec)
    return source, "ember_matmul", types


#: CPU devices: no local memory, explicit vectors along N. Each work-group is one work item
#: computing WM rows x (WN vectors of VW) columns, so the driver emits SIMD code directly.
#: (VW, WN, WM) by vector register width: 16 floats suit AVX-512 (32 registers), 8 AVX2.
_VECTOR_SHAPES = {16: (16, 2, 12), 8: (8, 2, 6), 4: (4, 2, 6)}


def vector_shape(rt: Runtime, dt: str) -> tuple[int, int, int]:
    """(VW, WN, WM) of the CPU kernel for ``dt`` on this device."""
    try:
        floats = int(rt.device.preferred_vector_width_float) or 8
    except Exception:
        floats = 8
    lanes = max(4, min(16, floats * 4 // ctype(dt).itemsize))
    return _VECTOR_SHAPES[lanes if lanes in _VECTOR_SHAPES else 8]


def _vector_source(dt: str, shape: tuple[int, int, int], rb: int, idx: str) -> tuple[str, list[Any]]:
    c = ctype(dt)
    T = c.compute
    vw, wn, wm = shape
    V = f"{T}{vw}"
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    step = "acc[i][j] = fma(ra, rb[j], acc[i][j]);" if c.kind == "f" else "acc[i][j] += ra * rb[j];"
    params = [f"const {idx} M", f"const {idx} N", f"const {idx} K"]
    params += [f"__global const {T}* restrict A", f"const {idx} a_off", f"const {idx} a_rs", f"const {idx} a_cs"]
    params += [f"__global const {T}* restrict B", f"const {idx} b_off", f"const {idx} b_rs", f"const {idx} b_cs"]
    params += [f"__global {T}* restrict C"]
    for name in ("bsh", "bsa", "bsb", "bsc"):
        params += [f"const {idx} {name}{d}" for d in range(rb)]
    types: list[Any] = [npi] * 3 + [None, npi, npi, npi] * 2 + [None] + [npi] * (4 * rb)
    batch = unravel("z", rb, "bsh", idx, "b")
    inner = [
        "      #pragma unroll",
        f"      for (int i = 0; i < {wm}; i++) {{",
        f"        const {V} ra = ({V})(ap[i][k * a_cs]);",
        "        #pragma unroll",
        f"        for (int j = 0; j < {wn}; j++) {{ {step} }}",
        "      }",
    ]
    lines = [
        preamble({dt}),
        "__kernel __attribute__((reqd_work_group_size(1, 1, 1)))",
        "void ember_matmul_vec(" + ", ".join(params) + ") {",
        f"  const {idx} n0 = ({idx})get_global_id(0) * {vw * wn}, m0 = ({idx})get_global_id(1) * {wm};",
        f"  const {idx} z = get_global_id(2);",
        *("  " + s for s in batch),
        f"  const {idx} a_base = a_off + " + " + ".join(f"b{d} * bsa{d}" for d in range(rb)) + ";",
        f"  __global const {T}* bp = B + b_off + " + " + ".join(f"b{d} * bsb{d}" for d in range(rb)) + " + n0;",
        f"  __global {T}* Cp = C + " + " + ".join(f"b{d} * bsc{d}" for d in range(rb)) + " + n0;",
        f"  __global const {T}* ap[{wm}];",
        "  #pragma unroll",
        f"  for (int i = 0; i < {wm}; i++) ap[i] = A + a_base + min(m0 + i, M - 1) * a_rs;",
        f"  {V} acc[{wm}][{wn}];",
        "  #pragma unroll",
        f"  for (int i = 0; i < {wm}; i++) {{",
        "    #pragma unroll",
        f"    for (int j = 0; j < {wn}; j++) acc[i][j] = ({V})(0);",
        "  }",
        f"  {V} rb[{wn}];",
        f"  if (n0 + {vw * wn} <= N) {{",
        f"    for ({idx} k = 0; k < K; k++) {{",
        "      #pragma unroll",
        f"      for (int j = 0; j < {wn}; j++) rb[j] = vload{vw}(j, bp);",
        "      bp += b_rs;",
        *inner,
        "    }",
        f"    for (int i = 0; i < {wm} && m0 + i < M; i++) {{",
        f"      for (int j = 0; j < {wn}; j++) vstore{vw}(acc[i][j], j, Cp + (m0 + i) * N);",
        "    }",
        "  } else {",
        f"    {T} tmp[{vw * wn}];",
        f"    for ({idx} k = 0; k < K; k++) {{",
        f"      for (int e = 0; e < {vw * wn}; e++) tmp[e] = n0 + e < N ? bp[e] : ({T})0;",
        "      bp += b_rs;",
        f"      for (int j = 0; j < {wn}; j++) rb[j] = vload{vw}(j, tmp);",
        *inner,
        "    }",
        f"    for (int i = 0; i < {wm} && m0 + i < M; i++) {{",
        f"      for (int j = 0; j < {wn}; j++) vstore{vw}(acc[i][j], j, tmp);",
        f"      for (int e = 0; e < {vw * wn} && n0 + e < N; e++) Cp[(m0 + i) * N + e] = tmp[e];",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n", types


def _make_vector(*spec: Any) -> tuple[str, str, list[Any]]:
    source, types = _vector_source(*spec)
    return source, "ember_matmul_vec", types


def _pick(rt: Runtime, M: int, N: int) -> Tiling:
    if rt.is_cpu:
        return TILINGS["cpu"] if M * N >= 64 * 64 else TILINGS["tiny"]
    big = TILINGS["gpu_large"]
    tiles = -(-M // big.tm) * -(-N // big.tn)
    if tiles >= 2 * rt.compute_units:
        return big
    return TILINGS["gpu_small"] if M * N >= 64 * 64 * 4 else TILINGS["tiny"]


def matmul(rt: Runtime, a: CLArray, b: CLArray, tiling: Tiling | None = None) -> CLArray:
    """``a @ b`` for ``a`` (..., M, K) and ``b`` (..., K, N) with broadcast batch axes."""
    M, K = a.shape[-2:]
    N = b.shape[-1]
    batch = tuple(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    out = rt.empty(batch + (M, N), a.dtype)
    if out.size == 0:
        return out
    if K == 0:
        from .elementwise import copy_into  # noqa: PLC0415

        zero = rt.upload(np.zeros(1, dtype=a.dtype.numpy), a.dtype)
        copy_into(rt, out, zero.with_layout((), (), 0))
        return out
    vector = tiling is None and rt.is_cpu and a.dtype.name in _VECTOR_DTYPES
    if vector and b.strides[-1] != 1 and N > 1:
        from .elementwise import contiguous  # noqa: PLC0415

        b = contiguous(rt, b)  # O(K N) copy so the O(M N K) loop reads B rows as vectors
    av = a.expand(batch + (M, K))
    bv = b.expand(batch + (K, N))
    nb = len(batch)
    cstr = out.strides[:nb]
    bsh, (bsc, bsa, bsb) = collapse(batch, [cstr, av.strides[:nb], bv.strides[:nb]])
    a_rs, a_cs = av.strides[-2:]
    b_rs, b_cs = bv.strides[-2:]
    a_kfast = abs(a_cs) <= abs(a_rs) if M > 1 else True
    b_nfast = abs(b_cs) <= abs(b_rs) if K > 1 else True
    ext = max(
        out.size,
        a.offset + sum(abs(s) * (d - 1) for d, s in zip(av.shape, av.strides)),
        b.offset + sum(abs(s) * (d - 1) for d, s in zip(bv.shape, bv.strides)),
    )
    idx = "int" if ext < 2**31 - 2**20 else "long"
    dt = a.dtype.name
    args = [M, N, K, av.buf, av.offset, a_rs, a_cs, bv.buf, bv.offset, b_rs, b_cs, out.buf]
    args += [*bsh, *bsa, *bsb, *bsc]
    if vector:
        shape = vector_shape(rt, dt)
        knl, _ = rt.kernel(("matmul_vec", dt, shape, len(bsh), idx), lambda: _make_vector(dt, shape, len(bsh), idx))
        vw, wn, wm = shape
        rt.launch(knl, (-(-N // (vw * wn)), -(-M // wm), numel(batch)), (1, 1, 1), args)
        return out
    t = tiling or _pick(rt, M, N)
    key = ("matmul", dt, t, len(bsh), idx, a_kfast, b_nfast)
    knl, _ = rt.kernel(key, lambda: _make(dt, t, len(bsh), idx, a_kfast, b_nfast))
    rtn, rtm = t.threads
    gsize = (-(-N // t.tn) * rtn, -(-M // t.tm) * rtm, numel(batch))
    rt.launch(knl, gsize, (rtn, rtm, 1), args)
    return out

"""Native ``dequant_matmul`` (int8 and NF4 weights, see ``ember.ops.quant``): the codes are
decoded inside the GEMM loop, so the float weight is never materialized.

One work-group computes a ``T x T`` tile of ``out = x @ W.T`` (rows of x, rows of W), staging
``T`` columns of x and of the decoded W in local memory per step; each code byte is read once
per tile. The NF4 levels are a ``__constant`` table; the per-block absmax (float32) is read
per element. 16-bit floats load and store through their ctype and accumulate in float.

"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.ops.quant import NF4_LEVELS
from ember.shapes import numel

from .array import CLArray
from .cltypes import ctype
from .codegen import preamble
from .elementwise import contiguous
from .runtime import Runtime

__all__ = ["dequant_matmul"]

#: launches per op name (tests read it)

_T = 16
_L = np.dtype(np.int64)


def _source(dt: str, fmt: str) -> tuple[str, list[Any]]:
    c = ctype(dt)
    acc = "double" if dt == "float64" else "float"
    table = ", ".join(f"{v!r}f" for v in NF4_LEVELS)
    if fmt == "int8":
        decode = f"({acc})q[q_off + wi] * ({acc})s[s_off + wrow]"
        qtype = "char"
    else:
        decode = (
            f"({acc})NF4[(wi & 1) ? (q[q_off + (wi >> 1)] & 15) : (q[q_off + (wi >> 1)] >> 4)]"
            f" * ({acc})s[s_off + wi / bs]"
        )
        qtype = "uchar"
    src = (
        preamble({dt})
        + f"""
__constant float NF4[16] = {{{table}}};
__kernel void ember_dequant_matmul(const long N, const long O, const long K, const long bs,
    __global const {c.storage}* restrict x, const long x_off,
    __global const {qtype}* restrict q, const long q_off,
    __global const float* restrict s, const long s_off,
    __global {c.storage}* restrict out) {{
  __local {acc} xs[{_T}][{_T}];
  __local {acc} ws[{_T}][{_T}];
  const int lr = get_local_id(1), lc = get_local_id(0);
  const long n = get_group_id(1) * {_T} + lr;          /* row of x */
  const long o = get_group_id(0) * {_T} + lc;          /* row of W: output column */
  const long wrow = get_group_id(0) * {_T} + lr;       /* the W row this item stages */
  {acc} total = 0;
  for (long k0 = 0; k0 < K; k0 += {_T}) {{
    const long kx = k0 + lc;
    xs[lr][lc] = (n < N && kx < K) ? ({acc}){c.load("x", "x_off + n * K + kx")} : ({acc})0;
    {{
      const long wi = wrow * K + kx;
      ws[lr][lc] = (wrow < O && kx < K) ? {decode} : ({acc})0;
    }}
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int kk = 0; kk < {_T}; kk++) total += xs[lr][kk] * ws[lc][kk];
    barrier(CLK_LOCAL_MEM_FENCE);
  }}
  if (n < N && o < O) {{ {c.store("out", "n * O + o", "total")} }}
}}
"""
    )
    return src, [_L, _L, _L, _L, None, _L, None, _L, None, _L, None]


def dequant_matmul(
    rt: Runtime, x: CLArray, qweight: CLArray, scales: CLArray, fmt: str, shape: tuple[int, int], block_size: int
) -> CLArray:
    """``x @ dequantize(qweight, scales).T`` for x of shape (..., in)."""
    rows, K = shape
    lead = x.shape[:-1]
    out = rt.empty(lead + (rows,), x.dtype)
    N = numel(lead)
    if out.size == 0:
        return out
    x, qweight, scales = contiguous(rt, x), contiguous(rt, qweight), contiguous(rt, scales)
    dt = x.dtype.name

    def make() -> tuple[str, str, list[Any]]:
        src, types = _source(dt, fmt)
        return src, "ember_dequant_matmul", types

    knl, _ = rt.kernel(("dequant_matmul", dt, fmt), make)
    gsize = (-(-rows // _T) * _T, -(-N // _T) * _T)
    args = [N, rows, K, max(block_size, 1), x.buf, x.offset, qweight.buf, qweight.offset, scales.buf, scales.offset]
    rt.launch(knl, gsize, (_T, _T), args + [out.buf])
    return out

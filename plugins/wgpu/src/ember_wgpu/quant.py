"""Native ``dequant_matmul`` (int8 and NF4 weights, see ``ember.ops.quant``) in WGSL: each
invocation computes one element of ``out = x @ W.T``, decoding its row of codes as it goes,
so the float weight is never materialized.

Buffers hold one code per 32-bit element (WGSL has no 8-bit storage: int8 lives as i32, uint8
as u32, the same widening every wgpu tensor of those dtypes uses). The NF4 levels are a private
table; absmax values are f32.
"""

from __future__ import annotations

from typing import Any

from ember.ops.quant import NF4_LEVELS

from .handle import WgpuArray
from .kernels import elementwise as ew
from .kernels.common import ParamBlock, ceil_div, compile_kernel, header, launch, prod
from .runtime import Runtime

__all__ = ["dequant_matmul"]

#: launches per op name (tests read it)

_PARAMS = ParamBlock(
    [("n", "u32"), ("o", "u32"), ("k", "u32"), ("bs", "u32"), ("x_off", "u32"), ("q_off", "u32"), ("s_off", "u32")]
)


def _body(t: Any, qt: Any, fmt: str, f16: bool) -> tuple[str, ParamBlock, tuple[str, ...]]:
    levels = ", ".join(f"{v!r}" for v in NF4_LEVELS)
    if fmt == "int8":
        decode = "f32(Q[P.q_off + wi]) * S[P.s_off + o]"
    else:
        decode = (
            "NF4[select(Q[P.q_off + wi / 2u] >> 4u, Q[P.q_off + wi / 2u] & 15u, (wi & 1u) == 1u)]"
            " * S[P.s_off + wi / P.bs]"
        )
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> X: array<{t.storage}>;
@group(0) @binding(2) var<storage, read> Q: array<{qt.storage}>;
@group(0) @binding(3) var<storage, read> S: array<f32>;
@group(0) @binding(4) var<storage, read_write> C: array<{t.storage}>;
var<private> NF4: array<f32, 16> = array<f32, 16>({levels});
@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {{
  let o = g.x;
  let n = g.y;
  if (o >= P.o || n >= P.n) {{ return; }}
  var acc = 0.0;
  for (var k = 0u; k < P.k; k = k + 1u) {{
    let wi = o * P.k + k;
    acc = acc + {t.load("X[P.x_off + n * P.k + k]")} * {decode};
  }}
  C[n * P.o + o] = {t.store("acc")};
}}"""
    return body, _PARAMS, ("r", "r", "r", "w")


def dequant_matmul(
    rt: Runtime, x: WgpuArray, qweight: WgpuArray, scales: WgpuArray, fmt: str, shape: tuple[int, int], block_size: int
) -> WgpuArray:
    """``x @ dequantize(qweight, scales).T`` for x of shape (..., in)."""
    rows, k = shape
    lead = x.shape[:-1]
    out = rt.empty(lead + (rows,), x.dtype)
    n = prod(lead)
    if out.size == 0:
        return out
    x, qweight, scales = ew.contiguous(rt, x), ew.contiguous(rt, qweight), ew.contiguous(rt, scales)
    t, qt = rt.types[x.dtype], rt.types[qweight.dtype]
    f16 = rt.types.uses_f16(x.dtype)
    kernel = compile_kernel(
        rt, ("dequant_matmul", t.name, fmt), lambda: _body(t, qt, fmt, f16), f"dequant_matmul_{fmt}_{t.name}"
    )
    values = {"n": n, "o": rows, "k": k, "bs": max(block_size, 1), "x_off": 0, "q_off": 0, "s_off": 0}
    buffers = [x.buffer, qweight.buffer, scales.buffer, out.buffer]
    launch(rt, kernel, values, buffers, (ceil_div(rows, 16), ceil_div(n, 16), 1), "dequant_matmul")
    return out

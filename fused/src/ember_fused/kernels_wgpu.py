"""Native kernels for ``wgpu`` devices in WGSL (float32: WGSL has no 64-bit floats), compiled and
recorded through ember-wgpu's runtime (``backend.rt``) and its kernel plumbing
(``ember_wgpu.kernels.common``: compile once per key, parameter blocks, 2-D grids). Registered only
when ember-wgpu is installed; ember_wgpu is imported inside the kernels. The matmul of
fused_linear is the backend's own (``backend.implementation("matmul")``); attention with an
explicit mask, or a head size above ``MAX_HEAD``, goes to the backend's
scaled_dot_product_attention. ``CALLS`` counts launches.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from typing import Any

import numpy as np

from .kernels_opencl import attention_tiles
from .ops import FUSED_ATTENTION, FUSED_LAYER_NORM_RESIDUAL, FUSED_LINEAR

__all__ = ["register", "CALLS", "MAX_HEAD"]

CALLS: Counter[str] = Counter()
MAX_HEAD = 256
#: WebGPU's guaranteed maxComputeWorkgroupStorageSize
_WORKGROUP_BYTES = 16384
_WG = 256


def _common() -> Any:
    from ember_wgpu.kernels import common

    return common


def _n(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64))


# -- fused_linear ------------------------------------------------------------------------------
def _epilogue_build(activation: str, bias: bool) -> Any:
    c = _common()
    params = c.ParamBlock([("n", "u32"), ("cols", "u32"), ("oy", "u32"), ("ob", "u32")])
    from ember_wgpu.codegen.ops import template

    # the activation as ember-wgpu's elementwise kernels write it (its helpers come with it)
    act = "v" if activation == "none" else template(activation, "f").format("v")
    decl = "@group(0) @binding(2) var<storage, read> B: array<f32>;" if bias else ""
    add = "v = v + B[P.ob + i % P.cols];" if bias else ""
    body = f"""@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
{decl}
@compute @workgroup_size({_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {c.GROUP_ID}
  let i = gid_lin * {_WG}u + t;
  if (i >= P.n) {{ return; }}
  var v = Y[P.oy + i];
  {add}
  Y[P.oy + i] = {act};
}}"""
    return body, params, ("w", "r") if bias else ("w",)


def _fused_linear(backend: Any, x: Any, w: Any, *bias: Any, activation: str = "none") -> Any:
    c, rt = _common(), backend.rt
    y = backend.make_contiguous(backend.implementation("matmul")(x, w.permute((1, 0))))
    n = _n(y.shape)
    if n == 0 or (activation == "none" and not bias):
        return y
    kernel = c.compile_kernel(
        rt,
        ("ember_fused", "bias_act", activation, bool(bias)),
        lambda: _epilogue_build(activation, bool(bias)),
        "fused_bias_act",
    )
    buffers = [y.buffer]
    values = {"n": n, "cols": y.shape[-1], "oy": y.offset}
    if bias:
        b = backend.make_contiguous(bias[0])
        buffers.append(b.buffer)
        values["ob"] = b.offset
    CALLS["fused_linear"] += 1
    c.launch(rt, kernel, values, buffers, c.grid(c.ceil_div(n, _WG)), "fused_bias_act")
    return y


# -- fused_layer_norm_residual -------------------------------------------------------------------
#: the most row elements a thread keeps in registers (rows up to 8 x 256 wide are read once)
_MAX_PER_THREAD = 8


def _lnr_rows(per: int) -> str:
    """The row's passes: with ``per`` > 0 each thread keeps its ``per`` values of x + residual in
    registers (one read of the inputs); with 0 (longer rows) it reads back what it wrote."""
    if per:
        return f"""  var vals: array<f32, {per}>;
  var acc = 0.0;
  for (var k = 0u; k < {per}u; k = k + 1u) {{
    let j = t + k * {_WG}u;
    var v = 0.0;
    if (j < P.len) {{ v = X[P.ox + base + j] + R[P.orr + base + j]; Y[P.total + base + j] = v; }}
    vals[k] = v;
    acc = acc + v;
  }}
  let mean = group_sum(t, acc) / f32(P.len);
  var acc2 = 0.0;
  for (var k = 0u; k < {per}u; k = k + 1u) {{
    if (t + k * {_WG}u < P.len) {{ let d = vals[k] - mean; acc2 = acc2 + d * d; }}
  }}
  let rstd = inverseSqrt(group_sum(t, acc2) / f32(P.len) + P.eps);
  for (var k = 0u; k < {per}u; k = k + 1u) {{
    let j = t + k * {_WG}u;
    if (j < P.len) {{ Y[base + j] = (vals[k] - mean) * rstd * W[P.ow + j] + Bb[P.ob + j]; }}
  }}"""
    return f"""  var acc = 0.0;
  for (var j = t; j < P.len; j = j + {_WG}u) {{
    let v = X[P.ox + base + j] + R[P.orr + base + j];
    Y[P.total + base + j] = v;
    acc = acc + v;
  }}
  let mean = group_sum(t, acc) / f32(P.len);
  var acc2 = 0.0;
  for (var j = t; j < P.len; j = j + {_WG}u) {{ let d = Y[P.total + base + j] - mean; acc2 = acc2 + d * d; }}
  let rstd = inverseSqrt(group_sum(t, acc2) / f32(P.len) + P.eps);
  for (var j = t; j < P.len; j = j + {_WG}u) {{
    Y[base + j] = (Y[P.total + base + j] - mean) * rstd * W[P.ow + j] + Bb[P.ob + j];
  }}"""


def _lnr_build(per: int) -> Any:
    c = _common()
    params = c.ParamBlock([("rows", "u32"), ("len", "u32"), ("total", "u32"), ("ox", "u32"), ("orr", "u32"),
                           ("ow", "u32"), ("ob", "u32"), ("eps", "f32")])  # fmt: skip
    body = f"""@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> R: array<f32>;
@group(0) @binding(3) var<storage, read> W: array<f32>;
@group(0) @binding(4) var<storage, read> Bb: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
var<workgroup> sred: array<f32, {_WG}>;
fn group_sum(t: u32, v: f32) -> f32 {{
  sred[t] = v;
  workgroupBarrier();
  for (var s = {_WG // 2}u; s > 0u; s = s >> 1u) {{
    if (t < s) {{ sred[t] = sred[t] + sred[t + s]; }}
    workgroupBarrier();
  }}
  let r = sred[0];
  workgroupBarrier();
  return r;
}}
@compute @workgroup_size({_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {c.GROUP_ID}
  let row = gid_lin;
  if (row >= P.rows) {{ return; }}
  let base = row * P.len;
{_lnr_rows(per)}
}}"""
    return body, params, ("r", "r", "r", "r", "w")


def _fused_lnr(backend: Any, x: Any, residual: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Any:
    c, rt = _common(), backend.rt
    x, residual, weight, bias = (backend.make_contiguous(a) for a in (x, residual, weight, bias))
    out = rt.empty((2, *x.shape), x.dtype)
    total = _n(x.shape)
    if total == 0:
        return out
    C = x.shape[-1]
    per = -(-C // _WG)
    per = per if per <= _MAX_PER_THREAD else 0
    kernel = c.compile_kernel(rt, ("ember_fused", "lnr", per), lambda: _lnr_build(per), "fused_layer_norm_residual")
    values = {"rows": total // C, "len": C, "total": total, "ox": x.offset, "orr": residual.offset,
              "ow": weight.offset, "ob": bias.offset, "eps": float(eps)}  # fmt: skip
    CALLS["fused_layer_norm_residual"] += 1
    buffers = [x.buffer, residual.buffer, weight.buffer, bias.buffer, out.buffer]
    c.launch(rt, kernel, values, buffers, c.grid(total // C), "fused_layer_norm_residual")
    return out


# -- fused_attention: flash-style forward --------------------------------------------------------
def _attention_build(d: int, dv: int, bq: int, bk: int) -> Any:
    """One invocation per query, ``bq`` per workgroup; key/value tiles of ``bk`` rows in workgroup
    memory; the running maximum and sum rescale the output (online softmax). Every barrier sits in
    control flow that depends on the workgroup only (WGSL's uniformity rule)."""
    c = _common()
    params = c.ParamBlock([("L", "u32"), ("S", "u32"), ("tiles", "u32"), ("scale", "f32"), ("causal", "u32"),
                           ("off", "i32"), ("oq", "u32"), ("ok", "u32"), ("ov", "u32")])  # fmt: skip
    body = f"""@group(0) @binding(1) var<storage, read> Q: array<f32>;
@group(0) @binding(2) var<storage, read> K: array<f32>;
@group(0) @binding(3) var<storage, read> V: array<f32>;
@group(0) @binding(4) var<storage, read_write> O: array<f32>;
const D = {d}u;
const DV = {dv}u;
const BQ = {bq}u;
const BK = {bk}u;
var<workgroup> ks: array<f32, {bk * d}>;
var<workgroup> vs: array<f32, {bk * dv}>;
@compute @workgroup_size({bq})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {c.GROUP_ID}
  let bt = gid_lin / P.tiles;
  let q0 = (gid_lin % P.tiles) * BQ;
  let r = q0 + t;
  let qb = P.oq + bt * P.L * D;
  let kb = P.ok + bt * P.S * D;
  let vb = P.ov + bt * P.S * DV;
  var qr: array<f32, {d}>;
  var o: array<f32, {dv}>;
  let live = r < P.L;
  for (var c = 0u; c < D; c = c + 1u) {{ qr[c] = select(0.0, Q[qb + min(r, P.L - 1u) * D + c] * P.scale, live); }}
  var m = bitcast<f32>(0xff800000u);
  var l = 0.0;
  var n_end = i32(P.S);
  if (P.causal != 0u) {{ n_end = clamp(i32(q0 + BQ) + P.off, 0, i32(P.S)); }}
  for (var n0 = 0; n0 < n_end; n0 = n0 + i32(BK)) {{
    workgroupBarrier();
    for (var i = t; i < BK * D; i = i + BQ) {{
      let n = u32(n0) + i / D;
      ks[i] = select(0.0, K[kb + min(n, P.S - 1u) * D + i % D], n < P.S);
    }}
    for (var i = t; i < BK * DV; i = i + BQ) {{
      let n = u32(n0) + i / DV;
      vs[i] = select(0.0, V[vb + min(n, P.S - 1u) * DV + i % DV], n < P.S);
    }}
    workgroupBarrier();
    if (live) {{  // the tile's scores, its maximum, one rescale, then the sums
      var sc: array<f32, {bk}>;
      var mt = m;
      for (var j = 0u; j < BK; j = j + 1u) {{
        let n = u32(n0) + j;
        var s = bitcast<f32>(0xff800000u);
        if (n < P.S && !(P.causal != 0u && i32(n) > i32(r) + P.off)) {{
          s = 0.0;
          for (var c = 0u; c < D; c = c + 1u) {{ s = s + qr[c] * ks[j * D + c]; }}
        }}
        sc[j] = s;
        mt = max(mt, s);
      }}
      if (mt > bitcast<f32>(0xff800000u)) {{
        let corr = exp(m - mt);
        l = l * corr;
        for (var c = 0u; c < DV; c = c + 1u) {{ o[c] = o[c] * corr; }}
        m = mt;
        for (var j = 0u; j < BK; j = j + 1u) {{
          let p = exp(sc[j] - m);
          l = l + p;
          for (var c = 0u; c < DV; c = c + 1u) {{ o[c] = o[c] + p * vs[j * DV + c]; }}
        }}
      }}
    }}
  }}
  if (live) {{
    let ob = (bt * P.L + r) * DV;
    for (var c = 0u; c < DV; c = c + 1u) {{ O[ob + c] = o[c] / l; }}
  }}
}}"""
    return body, params, ("r", "r", "r", "w")


def _fused_attention(
    backend: Any, q: Any, k: Any, v: Any, *mask: Any, is_causal: bool = False, scale: float = 1.0
) -> Any:
    from .kernels_opencl import _broadcast_inputs

    d, dv = q.shape[-1], v.shape[-1]
    if mask or d > MAX_HEAD or dv > MAX_HEAD or not (q.dtype == k.dtype == v.dtype):
        return backend.implementation("scaled_dot_product_attention")(q, k, v, *mask, is_causal=is_causal, scale=scale)
    c, rt = _common(), backend.rt
    lead, (q, k, v) = _broadcast_inputs(backend, q, k, v)
    L, S = q.shape[-2], k.shape[-2]
    out = rt.empty(lead + (L, dv), q.dtype)
    batch = _n(lead)
    if batch == 0 or L == 0:
        return out
    if S == 0:  # no key at all: 0 / 0 as the reference
        return backend.implementation("scaled_dot_product_attention")(q, k, v, is_causal=is_causal, scale=scale)
    bq, bk = attention_tiles(d, dv, _WORKGROUP_BYTES, 4)
    kernel = c.compile_kernel(
        rt, ("ember_fused", "flash", d, dv, bq, bk), lambda: _attention_build(d, dv, bq, bk), "fused_attention"
    )
    tiles = -(-L // bq)
    values = {"L": L, "S": S, "tiles": tiles, "scale": float(scale), "causal": int(is_causal), "off": S - L,
              "oq": q.offset, "ok": k.offset, "ov": v.offset}  # fmt: skip
    CALLS["fused_attention"] += 1
    c.launch(rt, kernel, values, [q.buffer, k.buffer, v.buffer, out.buffer], c.grid(batch * tiles), "fused_attention")
    return out


def register(kind: str = "wgpu") -> bool:
    """Register the WGSL kernels when ember-wgpu is installed; whether they were."""
    if importlib.util.find_spec("ember_wgpu") is None:
        return False
    FUSED_LINEAR.kernel(kind)(_fused_linear)
    FUSED_LAYER_NORM_RESIDUAL.kernel(kind)(_fused_lnr)
    FUSED_ATTENTION.kernel(kind)(_fused_attention)
    return True

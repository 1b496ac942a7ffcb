"""cumsum along one axis: a workgroup scan per row, or a thread per column.

The input is made contiguous and seen as (A, R, B). With B == 1 each workgroup scans one row
in chunks of 256 (Hillis-Steele in shared memory, the chunk total carried into the next);
with B > 1 each thread walks one column (coalesced across neighbouring threads).
"""

from __future__ import annotations

from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, header, launch, prod
from .reduce import combine, identity

__all__ = ["cumsum"]

WG = 256


def _build(t: WType, mode: str, f16: bool):  # type: ignore[no-untyped-def]
    cls = t.cls
    ct = {"f": "f32", "i": "i32", "u": "u32", "l": "vec2<u32>", "L": "vec2<u32>", "c": "vec2<f32>"}[cls]
    zero = identity("sum", cls)
    load = t.load("x[{i}]")
    add = lambda a, b: combine("sum", cls, a, b)  # noqa: E731
    wrap = t.wrap if t.narrow else (lambda e: e)
    params = ParamBlock([("rows", "u32"), ("r", "u32"), ("b", "u32")])
    head = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> x: array<{t.storage}>;
@group(0) @binding(2) var<storage, read_write> y: array<{t.storage}>;"""
    if mode == "row":
        body = f"""{head}
var<workgroup> sv: array<{ct}, {WG}>;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let row = gid_lin;
  if (row >= P.rows) {{ return; }}
  let base = row * P.r;
  var carry = {zero};
  for (var c0 = 0u; c0 < P.r; c0 = c0 + {WG}u) {{
    let j = c0 + t;
    var v = {zero};
    if (j < P.r) {{ v = {load.format(i="base + j")}; }}
    sv[t] = v;
    workgroupBarrier();
    for (var s = 1u; s < {WG}u; s = s << 1u) {{
      var add_in = {zero};
      if (t >= s) {{ add_in = sv[t - s]; }}
      workgroupBarrier();
      sv[t] = {add("sv[t]", "add_in")};
      workgroupBarrier();
    }}
    if (j < P.r) {{ y[base + j] = {t.store(wrap(add("carry", "sv[t]")))}; }}
    carry = {add("carry", f"sv[{WG - 1}u]")};
    workgroupBarrier();
  }}
}}"""
    else:
        body = f"""{head}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let o = gid_lin * {WG}u + t;
  if (o >= P.rows) {{ return; }}
  let base = (o / P.b) * P.r * P.b + o % P.b;
  var acc = {zero};
  for (var j = 0u; j < P.r; j = j + 1u) {{
    acc = {add("acc", load.format(i="base + j * P.b"))};
    y[base + j * P.b] = {t.store(wrap("acc"))};
  }}
}}"""
    return body, params, ("r", "w")


def cumsum(rt: Runtime, x: WgpuArray, axis: int) -> WgpuArray:
    """Running sum of ``x`` along ``axis`` (same dtype)."""
    out = rt.empty(x.shape, x.dtype)
    if out.size == 0:
        return out
    c = ew.contiguous(rt, x)
    a, r, b = prod(x.shape[:axis]), x.shape[axis], prod(x.shape[axis + 1 :])
    t = rt.types[x.dtype]
    mode = "row" if b == 1 else "col"
    f16 = rt.types.uses_f16(x.dtype)
    kernel = compile_kernel(rt, ("cumsum", t.name, mode), lambda: _build(t, mode, f16), f"cumsum_{mode}")
    rows = a if b == 1 else a * b
    groups = grid(rows if b == 1 else ceil_div(rows, WG))
    launch(rt, kernel, {"rows": rows, "r": r, "b": b}, [c.buffer, out.buffer], groups, "cumsum")
    return out

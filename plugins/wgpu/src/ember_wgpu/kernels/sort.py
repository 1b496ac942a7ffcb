"""Stable sort and argsort along one axis: a bitonic network over (key, index) pairs.

Values become order-preserving 64-bit keys (floats: sign-flipped bits, -0 as +0, every NaN
one key above +inf; signed integers: sign bit flipped). Each row is padded to a power of two
with keys above every value. Sorting (key, original index) lexicographically makes the order
total, so the (unstable) bitonic network yields the stable result. Descending sorts the
bitwise complement of the keys: values descend, equal values keep ascending indices, NaN
comes first, which is exactly the flip of an ascending stable sort for values and the stable
descending order for indices (ember's contract).
"""

from __future__ import annotations

from ember.dtypes import int64

from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, header, launch, prod

__all__ = ["sort", "sort_key_wgsl"]

WG = 256


def sort_key_wgsl(t: WType) -> str:
    """WGSL ``fn sort_key(v) -> vec2<u32>`` (hi, lo) ordering values of ``t`` as unsigned."""
    ct = t.compute
    if t.cls == "f":
        body = """  if (is_nan(v)) { return vec2<u32>(0xffffffffu, 0u); }
  var b = bitcast<u32>(v);
  if (v == 0.0) { b = 0u; }
  return vec2<u32>(select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u), 0u);"""
    elif t.cls == "i":
        body = "  return vec2<u32>(bitcast<u32>(v) ^ 0x80000000u, 0u);"
    elif t.cls == "u":
        body = "  return vec2<u32>(v, 0u);"
    elif t.cls == "b":
        body = "  return vec2<u32>(select(0u, 1u, v), 0u);"
    elif t.cls == "c":
        # (real, imaginary) lexicographically; values with a NaN part after all others, ordered
        # as numpy orders their classes (NaN imaginary, NaN real, both) but not within a class
        body = """  let nr = is_nan(v.x);
  let ni = is_nan(v.y);
  if (nr || ni) { return vec2<u32>(0xffffffffu, select(0u, 1u, ni) + select(0u, 2u, nr)); }
  var br = bitcast<u32>(v.x);
  if (v.x == 0.0) { br = 0u; }
  var bi = bitcast<u32>(v.y);
  if (v.y == 0.0) { bi = 0u; }
  return vec2<u32>(select(br | 0x80000000u, ~br, (br & 0x80000000u) != 0u),
                   select(bi | 0x80000000u, ~bi, (bi & 0x80000000u) != 0u));"""
    elif t.cls == "l":
        body = "  return vec2<u32>(v.y ^ 0x80000000u, v.x);"
    else:
        body = "  return vec2<u32>(v.y, v.x);"
    return f"fn sort_key(v: {ct}) -> vec2<u32> {{\n{body}\n}}"


_PARAMS = ParamBlock([("rows", "u32"), ("r", "u32"), ("p", "u32"), ("desc", "u32"), ("k", "u32"), ("j", "u32")])


def _init(t: WType, f16: bool):  # type: ignore[no-untyped-def]
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> x: array<{t.storage}>;
@group(0) @binding(2) var<storage, read_write> keys: array<vec2<u32>>;
@group(0) @binding(3) var<storage, read_write> idx: array<u32>;
{sort_key_wgsl(t)}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  if (e >= P.rows * P.p) {{ return; }}
  let row = e / P.p;
  let q = e % P.p;
  var k = vec2<u32>(0xffffffffu, 0xffffffffu);
  if (q < P.r) {{
    k = sort_key({t.load("x[row * P.r + q]")});
    if (P.desc != 0u) {{ k = ~k; }}
  }}
  keys[e] = k;
  idx[e] = q;
}}"""
    return body, _PARAMS, ("r", "w", "w")


def _step():  # type: ignore[no-untyped-def]
    body = f"""@group(0) @binding(1) var<storage, read_write> keys: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> idx: array<u32>;
fn after(a: vec2<u32>, ia: u32, b: vec2<u32>, ib: u32) -> bool {{
  if (a.x != b.x) {{ return a.x > b.x; }}
  if (a.y != b.y) {{ return a.y > b.y; }}
  return ia > ib;
}}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  let half = P.p / 2u;
  if (e >= P.rows * half) {{ return; }}
  let row = e / half;
  let i = e % half;
  let lo = (i / P.j) * 2u * P.j + (i % P.j);
  let hi = lo + P.j;
  let asc = (lo & P.k) == 0u;
  let a = row * P.p + lo;
  let b = row * P.p + hi;
  let ka = keys[a];
  let kb = keys[b];
  let ia = idx[a];
  let ib = idx[b];
  if (after(ka, ia, kb, ib) == asc) {{
    keys[a] = kb;
    keys[b] = ka;
    idx[a] = ib;
    idx[b] = ia;
  }}
}}"""
    return body, _PARAMS, ("w", "w")


def _finish(t: WType, values: bool, f16: bool):  # type: ignore[no-untyped-def]
    out_t = t.storage if values else "vec2<u32>"
    result = "x[row * P.r + idx[row * P.p + q]]" if values else "vec2<u32>(idx[row * P.p + q], 0u)"
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> x: array<{t.storage}>;
@group(0) @binding(2) var<storage, read> idx: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<{out_t}>;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  if (e >= P.rows * P.r) {{ return; }}
  let row = e / P.r;
  let q = e % P.r;
  y[e] = {result};
}}"""
    return body, _PARAMS, ("r", "r", "w")


def sort(rt: Runtime, x: WgpuArray, axis: int, descending: bool, values: bool) -> WgpuArray:
    """Sorted values (``values=True``) or int64 sorting indices of ``x`` along ``axis``."""
    nd = len(x.shape)
    if values and descending:  # ember: descending values are the flip of the ascending sort
        up = sort(rt, x, axis, False, True)
        return up.flip((axis,))
    out_dtype = x.dtype if values else int64
    if x.size == 0:
        return rt.empty(x.shape, out_dtype)
    order = [i for i in range(nd) if i != axis] + [axis]
    moved = ew.contiguous(rt, x.permute(order))
    r = x.shape[axis]
    rows = prod(moved.shape[:-1])
    p = 1 << max(r - 1, 0).bit_length()
    t = rt.types[x.dtype]
    f16 = rt.types.uses_f16(x.dtype)
    keys = rt.alloc(rows * p * 8)
    idx = rt.alloc(rows * p * 4)
    vals = {"rows": rows, "r": r, "p": p, "desc": int(descending)}
    init = compile_kernel(rt, ("sort_init", t.name), lambda: _init(t, f16), "sort_init")
    launch(rt, init, vals, [moved.buffer, keys.raw, idx.raw], grid(ceil_div(rows * p, WG)), "sort_init")
    step = compile_kernel(rt, ("sort_step",), _step, "sort_step")
    pairs = grid(ceil_div(rows * p // 2, WG))
    k = 2
    while k <= p:
        j = k // 2
        while j >= 1:
            launch(rt, step, {**vals, "k": k, "j": j}, [keys.raw, idx.raw], pairs, "sort_step")
            j //= 2
        k *= 2
    result = rt.empty(moved.shape, out_dtype)
    fin = compile_kernel(rt, ("sort_finish", t.name, values), lambda: _finish(t, values, f16), "sort_finish")
    launch(rt, fin, vals, [moved.buffer, idx.raw, result.buffer], grid(ceil_div(rows * r, WG)), "sort_finish")
    inverse = [0] * nd
    for i, o in enumerate(order):
        inverse[o] = i
    return result.permute(inverse)

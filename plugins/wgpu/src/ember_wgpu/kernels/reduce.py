"""Reductions (sum, prod, max, min, any, all, mean, argmax, argmin) over any set of axes.

The input is made contiguous and seen as (A, R, B): A kept rows, R reduced, B kept columns.
* **row** kernel (B == 1): one workgroup per output, 256 threads stride over R, then a
  workgroup tree reduction in shared memory. A huge R with few rows is split into segments
  reduced in a first pass and combined in a second.
* **column** kernel (B > 1): one thread per output walks R; neighbouring threads read
  neighbouring columns, so loads coalesce (the bias-gradient case, sum over the batch).
Axes that are not one consecutive block: a float32 sum, mean, max or min reduces its innermost
block of consecutive axes first, then the rest (a conv's bias gradient, axes (0, 2, 3): (N, C) partials,
no full-size copy); other reductions permute the axes to the end first (one copy).
"""

from __future__ import annotations

from typing import Any

from ember.dtypes import DType, bool_, float32, int64

from ..codegen.ops import template
from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, header, prod

__all__ = ["reduce", "identity", "combine", "accumulator_type", "LOWEST", "HIGHEST"]

WG = 256
LOWEST = {
    "f": "bitcast<f32>(0xff800000u)",
    "i": "bitcast<i32>(0x80000000u)",
    "u": "0u",
    "l": "vec2<u32>(0u, 0x80000000u)",
    "L": "vec2<u32>(0u, 0u)",
}
HIGHEST = {
    "f": "bitcast<f32>(0x7f800000u)",
    "i": "2147483647i",
    "u": "0xffffffffu",
    "l": "vec2<u32>(0xffffffffu, 0x7fffffffu)",
    "L": "vec2<u32>(0xffffffffu, 0xffffffffu)",
}
_ZERO = {
    "f": "0.0",
    "i": "0i",
    "u": "0u",
    "l": "vec2<u32>(0u, 0u)",
    "L": "vec2<u32>(0u, 0u)",
    "c": "vec2<f32>(0.0, 0.0)",
}
_ONE = {
    "f": "1.0",
    "i": "1i",
    "u": "1u",
    "l": "vec2<u32>(1u, 0u)",
    "L": "vec2<u32>(1u, 0u)",
    "c": "vec2<f32>(1.0, 0.0)",
}
_COMBINE = {"sum": "add", "mean": "add", "prod": "mul", "max": "maximum", "min": "minimum", "any": "maximum"}
_COMBINE["all"] = "minimum"


def accumulator_type(op: str, t: WType) -> str:
    """Compute class of the accumulator (bools reduce as u32 0/1)."""
    return "u" if t.cls == "b" else t.cls


def identity(op: str, cls: str) -> str:
    if op in ("sum", "mean"):
        return _ZERO[cls]
    if op == "prod":
        return _ONE[cls]
    if op in ("max", "any"):
        return LOWEST[cls]
    return HIGHEST[cls]  # min, all


def combine(op: str, cls: str, a: str, b: str) -> str:
    return template(_COMBINE[op], cls).format(a, b)


def _better(op: str, cls: str) -> str:
    """WGSL ``better(a, ia, b, ib)``: is (a, ia) preferred to (b, ib) for argmax/argmin."""
    t = {"f": "f32", "i": "i32", "u": "u32", "l": "vec2<u32>", "L": "vec2<u32>"}[cls]
    first = "b" if op == "argmax" else "a"
    second = "a" if op == "argmax" else "b"
    if cls == "f":
        order = f"""  let an = is_nan(a);
  let bn = is_nan(b);
  if (an || bn) {{ return an && (!bn || ia < ib); }}
  if (a == b) {{ return ia < ib; }}
  return {first} < {second};"""
    else:
        lt = {"l": "i64_lt({x}, {y})", "L": "u64_lt({x}, {y})"}.get(cls, "({x} < {y})")
        eq = "all(a == b)" if cls in "lL" else "(a == b)"
        order = f"""  if ({eq}) {{ return ia < ib; }}
  return {lt.format(x=first, y=second)};"""
    return f"""fn better(a: {t}, ia: u32, b: {t}, ib: u32) -> bool {{
  if (ia == 0xffffffffu) {{ return false; }}
  if (ib == 0xffffffffu) {{ return true; }}
{order}
}}"""


def _build(rt: Runtime, op: str, tin: WType, tout: WType, mode: str):  # type: ignore[no-untyped-def]
    arg = op in ("argmax", "argmin")
    cls = accumulator_type(op, tin)
    ct = {"f": "f32", "i": "i32", "u": "u32", "l": "vec2<u32>", "L": "vec2<u32>", "c": "vec2<f32>"}[cls]
    load = tin.load("x[{i}]")
    if tin.cls == "b":
        load = f"select(0u, 1u, {load})"
    params = ParamBlock(
        [("rows", "u32"), ("r", "u32"), ("b", "u32"), ("segs", "u32"), ("seg_len", "u32"), ("scale", "f32")]
    )
    if arg:
        result = "vec2<u32>(ai, 0u)"
    else:
        fin = "acc * P.scale" if op == "mean" else "acc"
        if tout.cls == "b":
            fin = f"({fin} != 0u)"
        result = tout.store(fin)
    f16 = rt.types.uses_f16(tin.dtype, tout.dtype)
    lines = [
        header(f16),
        f"@group(0) @binding(1) var<storage, read> x: array<{tin.storage}>;",
        f"@group(0) @binding(2) var<storage, read_write> y: array<{tout.storage}>;",
    ]
    if arg:
        lines.append(_better(op, cls))
        step = "if (better(v, j, acc, ai)) { acc = v; ai = j; }"
        init = f"var acc = {_ZERO[cls]};\n  var ai = 0xffffffffu;"
    else:
        step = f"acc = {combine(op, cls, 'acc', 'v')};"
        init = f"var acc = {identity(op, cls)};"
    if mode == "row":
        lines += [f"var<workgroup> sv: array<{ct}, {WG}>;"]
        if arg:
            lines += [f"var<workgroup> si: array<u32, {WG}>;"]
            tree = (
                """if (t < s && better(sv[t + s], si[t + s], sv[t], si[t])) { sv[t] = sv[t + s]; si[t] = si[t + s]; }"""
            )
            store_shared = "sv[t] = acc;\n  si[t] = ai;"
            final = "let ai = si[0];"
        else:
            tree = f"if (t < s) {{ sv[t] = {combine(op, cls, 'sv[t]', 'sv[t + s]')}; }}"
            store_shared = "sv[t] = acc;"
            final = "let acc = sv[0];"
        lines.append(f"""@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let row = gid_lin;
  if (row >= P.rows) {{ return; }}
  let seg = row % P.segs;
  let base = (row / P.segs) * P.r + seg * P.seg_len;
  let len = min(P.seg_len, P.r - min(P.r, seg * P.seg_len));
  {init}
  for (var j = t; j < len; j = j + {WG}u) {{
    let v = {load.format(i="base + j")};
    {step}
  }}
  {store_shared}
  workgroupBarrier();
  for (var s = {WG // 2}u; s > 0u; s = s >> 1u) {{
    {tree}
    workgroupBarrier();
  }}
  if (t == 0u) {{
    {final}
    y[row] = {result};
  }}
}}""")
    else:
        lines.append(f"""@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let o = gid_lin * {WG}u + t;
  if (o >= P.rows) {{ return; }}
  let ab = P.rows / P.segs;
  let ob = o % ab;
  let base = (ob / P.b) * P.r * P.b + ob % P.b;
  let j0 = (o / ab) * P.seg_len;
  {init}
  for (var j = j0; j < min(P.r, j0 + P.seg_len); j = j + 1u) {{
    let v = {load.format(i="base + j * P.b")};
    {step}
  }}
  y[o] = {result};
}}""")
    return "\n".join(lines), params, ("r", "w")


class _Plan:
    """A single-pass reduction's launch over the contiguous input: pipeline, parameter bytes,
    workgroups, and the output's shape and dtype."""

    __slots__ = ("pipe", "params", "groups", "shape", "dtype")

    def __init__(self, pipe: Any, params: bytes, groups: tuple[int, int, int], shape: tuple[int, ...], dtype: DType):
        self.pipe, self.params, self.groups, self.shape, self.dtype = pipe, params, groups, shape, dtype


def _run(
    rt: Runtime, op: str, x: WgpuArray, out: WgpuArray, a: int, r: int, b: int, segs: int = 1, scale: float = 1.0
) -> _Plan:
    """Launch the row or column kernel of ``op`` over ``x`` seen as (a, r, b); its plan, returned."""
    tin, tout = rt.types[x.dtype], rt.types[out.dtype]
    mode = "row" if b == 1 else "col"
    key = ("reduce", op, tin.name, tout.name, mode)
    pipe, params = compile_kernel(rt, key, lambda: _build(rt, op, tin, tout, mode), f"{op}_{mode}")
    rows = a * segs if b == 1 else a * b * segs
    seg_len = ceil_div(r, segs) if segs > 1 else r
    groups = grid(rows if b == 1 else ceil_div(rows, WG))
    values = {"rows": rows, "r": r, "b": b, "segs": segs, "seg_len": seg_len, "scale": scale}
    plan = _Plan(pipe, params.pack(values), groups, out.shape, out.dtype)
    rt.dispatch(pipe, plan.params, [x.storage.raw, out.storage.raw], groups, op)
    return plan


def _squeeze(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Drop size-1 axes (they do not change a reduction) and renumber ``axes``."""
    keep = [i for i, d in enumerate(shape) if d != 1]
    new_axes = tuple([keep.index(i) for i in axes if i in keep])
    return tuple([shape[i] for i in keep]), new_axes


def reduce(
    rt: Runtime,
    x: WgpuArray,
    op: str,
    axes: tuple[int, ...],
    keepdims: bool,
    out_dtype: DType | None = None,
) -> WgpuArray:
    """``op`` over ``axes`` of ``x``; argmax/argmin take one axis and give int64. A reduction run
    as one kernel over ``x`` made contiguous keeps its launch in ``rt.plans`` under ``x``'s
    geometry and the arguments, so a step repeating it skips the analysis below."""
    key = ("reduce", op, x.dtype, x.shape, x.strides, x.offset, tuple(axes), keepdims, out_dtype)
    plan = rt.plans.get(key)
    if plan is not None:
        out = rt.empty(plan.shape, plan.dtype)  # before the input's copy, as below
        c = ew.contiguous(rt, x)
        rt.dispatch(plan.pipe, plan.params, [c.storage.raw, out.storage.raw], plan.groups, op)
        return out
    arg = op in ("argmax", "argmin")
    out_dtype = int64 if arg else (bool_ if op in ("any", "all") else (out_dtype or x.dtype))
    axes = tuple(sorted(set(axes)))
    out_shape = tuple([1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes])
    if op in _BY_BLOCKS and x.dtype is float32 and out_dtype is float32 and x.size:
        shape, sq_axes = _squeeze(x.shape, axes)
        if len(sq_axes) > 1 and list(sq_axes) != list(range(sq_axes[0], sq_axes[-1] + 1)):
            c = ew.contiguous(rt, x).reshape(shape)
            return _by_blocks(rt, c, op, sq_axes).reshape(out_shape)
    out = rt.empty(out_shape, out_dtype)
    if out.size == 0:
        return out
    count = prod([x.shape[i] for i in axes])
    scale = 1.0 / count if op == "mean" and count else float("nan")
    if x.size == 0:  # reducing an empty axis gives the identity
        empty = {"sum": 0, "prod": 1, "any": False, "all": True, "mean": float("nan")}
        return ew.fill(rt, out_shape, empty.get(op, 0), out_dtype)
    if not axes or count == 1:
        if arg:
            return ew.fill(rt, out_shape, 0, int64)
        src = x
        if op in ("any", "all") and x.dtype is not bool_:
            src = ew.apply_op(rt, "ne", [x, 0])
        ew.copy_into(rt, src.reshape(out_shape), out)  # only size-1 axes come or go: always a view
        return out
    c = ew.contiguous(rt, x)
    direct = True  # c is x made contiguous (False once permuted into another copy)
    shape, sq_axes = _squeeze(c.shape, axes)
    lo, hi = sq_axes[0], sq_axes[-1]
    if list(sq_axes) != list(range(lo, hi + 1)):
        kept = [i for i in range(len(shape)) if i not in sq_axes]
        order = kept + list(sq_axes)
        c = ew.contiguous(rt, WgpuArray(c.storage, tuple(shape), c.dtype).permute(order))
        direct = False
        a_, r_, b_ = prod([shape[i] for i in kept]), prod([shape[i] for i in sq_axes]), 1
    else:
        a_, r_, b_ = prod(shape[:lo]), prod(shape[lo : hi + 1]), prod(shape[hi + 1 :])
    if b_ > 1 and b_ < 32 and r_ > 64:
        # few columns and a long reduction: move the reduced block last (one copy), reduce rows
        view = WgpuArray(c.storage, (a_, r_, b_), c.dtype).permute((0, 2, 1))
        c = ew.contiguous(rt, view)
        direct = False
        a_, b_ = a_ * b_, 1
    if b_ > 1 and not arg and a_ * b_ < 32768 and r_ >= 1024:
        # few columns, long reduction: partial sums of segments first, so many threads work
        segs = min(ceil_div(r_, 64), ceil_div(65536, a_ * b_))
        part = rt.empty((segs * a_ * b_,), _partial_dtype(rt, c.dtype))
        _run(rt, "sum" if op == "mean" else op, c, part, a_, r_, b_, segs)
        _run(rt, op, part, out, 1, segs, a_ * b_, 1, scale)
        return out
    if b_ == 1 and not arg and a_ < 256 and r_ > 65536:
        segs = min(ceil_div(r_, 16384), 4096)
        first = "sum" if op == "mean" else op
        part = rt.empty((a_ * segs,), _partial_dtype(rt, c.dtype))
        _run(rt, first, c, part, a_, r_, 1, segs)
        _run(rt, op, part, out, a_, segs, 1, 1, scale)
        return out
    plan = _run(rt, op, c, out, a_, r_, b_, 1, scale)
    if direct:  # the kernel read x made contiguous, nothing else: repeatable from the key
        if len(rt.plans) >= ew.MAX_PLANS:
            rt.plans.clear()
        rt.plans[key] = plan
    return out


#: reductions whose result over separate blocks of axes, taken block by block, is the one over all of them
#: (a mean of equal-sized means is the mean); float32 only, so the partial results lose no precision
_BY_BLOCKS = frozenset({"sum", "mean", "max", "min"})


def _by_blocks(rt: Runtime, x: WgpuArray, op: str, axes: tuple[int, ...]) -> WgpuArray:
    """``op`` over ``axes`` (not one consecutive block; ``x`` without size-1 axes), the innermost block
    of consecutive axes first, kept as size 1: each pass reads one block in place, where permuting the
    axes together would copy all of ``x``. The result keeps every axis (reduced ones as size 1)."""
    start = axes[-1]
    while start - 1 in axes:
        start -= 1
    part = reduce(rt, x, op, tuple(range(start, axes[-1] + 1)), True)
    rest = tuple(a for a in axes if a < start)
    return reduce(rt, part, op, rest, True)


def _partial_dtype(rt: Runtime, dtype: DType) -> DType:
    """Partial results of a split reduction: float32 for every float dtype (accumulator precision)."""
    return float32 if rt.types[dtype].cls == "f" else dtype

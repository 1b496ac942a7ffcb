"""unfold (im2col) and fold (its adjoint) for 1-3 spatial dims: the pieces of convolution.

With these native, ember's conv composite (unfold, then the tiled matmul) and its gradient
(fold) run as a handful of dispatches instead of one slice per kernel offset. unfold gives
each output element one thread that maps it back to an input position (or the padding
value); fold gives each output position one thread that sums the columns landing on it, so
overlaps add up without atomics and the result is deterministic.
"""

from __future__ import annotations

from ember.dtypes import float32

from ..codegen.ops import convert
from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, header, launch, prod
from .reduce import combine, identity

__all__ = ["unfold", "fold"]

WG = 256


def _params(nd: int) -> ParamBlock:
    fields = [("n_out", "u32"), ("c", "u32"), ("kk", "u32"), ("l", "u32"), ("value", "f32")]
    fields += [("x_off", "u32"), ("sn", "u32"), ("sc", "u32")]
    for i in range(nd):
        fields += [(f"size{i}", "u32"), (f"k{i}", "u32"), (f"st{i}", "u32"), (f"dil{i}", "u32")]
        fields += [(f"lo{i}", "u32"), (f"b{i}", "u32"), (f"sx{i}", "u32")]
    return ParamBlock(fields)


def _decode(names: list[str], dims: list[str], source: str) -> list[str]:
    """Lines splitting ``source`` into C-order coordinates ``names`` of extents ``dims``."""
    lines = [f"var rem_{names[0]} = {source};"]
    for name, dim in zip(reversed(names[1:]), reversed(dims[1:])):
        lines += [f"let {name} = rem_{names[0]} % {dim};", f"rem_{names[0]} = rem_{names[0]} / {dim};"]
    lines.append(f"let {names[0]} = rem_{names[0]};")
    return lines


def _unfold_build(t: WType, nd: int, f16: bool):  # type: ignore[no-untyped-def]
    params = _params(nd)
    f32 = WType(float32, "f", "f32", t.host)
    value = convert("P.value", f32, t) if t.cls != "f" else "P.value"
    lines = _decode(["n", "c", "q", "l"], ["0", "P.c", "P.kk", "P.l"], "e")
    lines += _decode([f"o{i}" for i in range(nd)], [f"P.k{i}" for i in range(nd)], "q")
    lines += _decode([f"bl{i}" for i in range(nd)], [f"P.b{i}" for i in range(nd)], "l")
    addr = "P.x_off + n * P.sn + c * P.sc"
    inside = []
    for i in range(nd):
        lines.append(f"let p{i} = i32(bl{i} * P.st{i} + o{i} * P.dil{i}) - i32(P.lo{i});")
        inside.append(f"p{i} >= 0 && p{i} < i32(P.size{i})")
        addr += f" + u32(max(p{i}, 0)) * P.sx{i}"
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> X: array<{t.storage}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{t.storage}>;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  if (e >= P.n_out) {{ return; }}
  {chr(10).join("  " + ln for ln in lines).strip()}
  var v = {value};
  if ({" && ".join(inside)}) {{ v = {t.load(f"X[{addr}]")}; }}
  Y[e] = {t.store("v")};
}}"""
    return body, params, ("r", "w")


def unfold(
    rt: Runtime,
    x: WgpuArray,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
    value: float,
) -> WgpuArray:
    """(N, C, *spatial) -> (N, C * prod(kernel), L) blocks, ``value`` where padded."""
    nd = len(kernel)
    n, c = x.shape[:2]
    sizes = x.shape[2:]
    blocks = tuple(
        (s + lo + hi - (k - 1) * d - 1) // st + 1
        for s, k, (lo, hi), d, st in zip(sizes, kernel, padding, dilation, stride)
    )
    kk, length = prod(kernel), prod(blocks)
    out = rt.empty((n, c * kk, length), x.dtype)
    if out.size == 0:
        return out
    t = rt.types[x.dtype]
    f16 = rt.types.uses_f16(x.dtype)
    k = compile_kernel(rt, ("unfold", t.name, nd), lambda: _unfold_build(t, nd, f16), "unfold")
    values = {"n_out": out.size, "c": c, "kk": kk, "l": length, "value": float(value), "x_off": x.offset}
    values.update({"sn": x.strides[0] & 0xFFFFFFFF, "sc": x.strides[1] & 0xFFFFFFFF})
    for i in range(nd):
        values.update({f"size{i}": sizes[i], f"k{i}": kernel[i], f"st{i}": stride[i], f"dil{i}": dilation[i]})
        values.update({f"lo{i}": padding[i][0], f"b{i}": blocks[i], f"sx{i}": x.strides[2 + i] & 0xFFFFFFFF})
    launch(rt, k, values, [x.buffer, out.buffer], grid(ceil_div(out.size, WG)), "unfold")
    return out


def _fold_build(t: WType, nd: int, f16: bool):  # type: ignore[no-untyped-def]
    params = _params(nd)
    cls = t.cls
    lines = _decode(["n", "c"] + [f"p{i}" for i in range(nd)], ["0", "P.c"] + [f"P.size{i}" for i in range(nd)], "e")
    offs = _decode([f"o{i}" for i in range(nd)], [f"P.k{i}" for i in range(nd)], "q")
    checks = []
    for i in range(nd):
        checks += [
            f"let t{i} = i32(p{i} + P.lo{i}) - i32(o{i} * P.dil{i});",
            f"if (t{i} < 0 || u32(t{i}) % P.st{i} != 0u || u32(t{i}) / P.st{i} >= P.b{i}) {{ continue; }}",
        ]
    lin = "0u"
    for i in range(nd):
        lin = f"({lin}) * P.b{i} + u32(t{i}) / P.st{i}"
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> X: array<{t.storage}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{t.storage}>;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  if (e >= P.n_out) {{ return; }}
  {chr(10).join("  " + ln for ln in lines).strip()}
  var acc = {identity("sum", cls)};
  for (var q = 0u; q < P.kk; q = q + 1u) {{
    {chr(10).join("    " + ln for ln in offs + checks).strip()}
    let v = {t.load(f"X[P.x_off + n * P.sn + (c * P.kk + q) * P.sc + ({lin}) * P.sx0]")};
    acc = {combine("sum", cls, "acc", "v")};
  }}
  Y[e] = {t.store(t.wrap("acc") if t.narrow else "acc")};
}}"""
    return body, params, ("r", "w")


def fold(
    rt: Runtime,
    cols: WgpuArray,
    size: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    dilation: tuple[int, ...],
) -> WgpuArray:
    """(N, C * prod(kernel), L) -> (N, C, *size), summing overlapping blocks."""
    nd = len(kernel)
    n, ck, _ = cols.shape
    kk = prod(kernel)
    c = ck // kk
    out = rt.empty((n, c) + tuple(size), cols.dtype)
    if out.size == 0:
        return out
    blocks = tuple(
        (s + lo + hi - (k - 1) * d - 1) // st + 1
        for s, k, (lo, hi), d, st in zip(size, kernel, padding, dilation, stride)
    )
    src = ew.contiguous(rt, cols)
    t = rt.types[cols.dtype]
    f16 = rt.types.uses_f16(cols.dtype)
    k = compile_kernel(rt, ("fold", t.name, nd), lambda: _fold_build(t, nd, f16), "fold")
    values = {"n_out": out.size, "c": c, "kk": kk, "l": prod(blocks), "x_off": 0, "sn": ck * prod(blocks)}
    values.update({"sc": prod(blocks)})
    for i in range(nd):
        values.update({f"size{i}": size[i], f"k{i}": kernel[i], f"st{i}": stride[i], f"dil{i}": dilation[i]})
        values.update({f"lo{i}": padding[i][0], f"b{i}": blocks[i], f"sx{i}": 1})
    launch(rt, k, values, [src.buffer, out.buffer], grid(ceil_div(out.size, WG)), "fold")
    return out

"""Max and average pooling over 1-3 spatial dims, and max pooling's gradient.

One thread per output window walks its kernel offsets (padding counts as -inf for max, 0 for
average; NaN propagates through max as in the composite). The gradient gives each input
element one thread, which visits the windows covering it and takes a window's gradient when
the element is that window's first maximum (PyTorch's rule, as ember's composite), so there
are no atomics and the result is deterministic. When the windows tile the input (stride ==
kernel, no dilation: W3's 2x2 pooling), each input belongs to at most one window, so a thread
per window finds its first maximum and writes every input it covers instead (no division per
tap: on an H100 through OpenCL the same change took W3's max-pool gradient from 1.71 ms to 89 µs).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ember.dtypes import float32

from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, header, launch, prod

__all__ = ["max_pool", "avg_pool", "max_pool_backward", "tiles", "CALLS"]

#: max-pool gradient launches by kind (tests read it to see which kernel ran)
CALLS: Counter[str] = Counter()

WG = 256


def _params(nd: int) -> ParamBlock:
    fields = [("n_out", "u32"), ("c", "u32"), ("kk", "u32")]
    for i in range(nd):
        fields += [(f"size{i}", "u32"), (f"k{i}", "u32"), (f"st{i}", "u32"), (f"dil{i}", "u32")]
        fields += [(f"lo{i}", "u32"), (f"b{i}", "u32"), (f"doff{i}", "u32")]
    return ParamBlock(fields)


def _decode(names: list[str], dims: list[str], source: str) -> list[str]:
    lines = [f"var rem_{names[0]} = {source};"]
    for name, dim in zip(reversed(names[1:]), reversed(dims[1:])):
        lines += [f"let {name} = rem_{names[0]} % {dim};", f"rem_{names[0]} = rem_{names[0]} / {dim};"]
    lines.append(f"let {names[0]} = rem_{names[0]};")
    return lines


def _window(nd: int) -> tuple[list[str], str, str]:
    """Lines computing input position p{i} of kernel offset o{i} in window bl{i}; the in-bounds
    test; the linear input index (contiguous x)."""
    lines = _decode([f"o{i}" for i in range(nd)], [f"P.k{i}" for i in range(nd)], "q")
    inside, lin = [], "nc"
    for i in range(nd):
        lines.append(f"let p{i} = i32(bl{i} * P.st{i} + o{i} * P.dil{i}) - i32(P.lo{i});")
        inside.append(f"p{i} >= 0 && p{i} < i32(P.size{i})")
        lin = f"({lin}) * P.size{i} + u32(p{i})"
    return lines, " && ".join(inside), lin


def _pool_build(t: WType, nd: int, kind: str, f16: bool):  # type: ignore[no-untyped-def]
    lines = _decode(["nc"] + [f"bl{i}" for i in range(nd)], ["0"] + [f"P.b{i}" for i in range(nd)], "e")
    win, inside, lin = _window(nd)
    x = t.load(f"X[{lin}]")
    if kind == "max":
        init, step = "var acc = bitcast<f32>(0xff800000u);", f"if ({inside}) {{ acc = f_max(acc, {x}); }}"
        final = "acc"
        extra = ""
    else:
        init, step = "var acc = 0.0;", f"if ({inside}) {{ acc = acc + {x}; }}"
        div = " * ".join(f"D[P.doff{i} + bl{i}]" for i in range(nd))
        final = f"acc / ({div})"
        extra = "@group(0) @binding(3) var<storage, read> D: array<f32>;"
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> X: array<{t.storage}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{t.storage}>;
{extra}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  if (e >= P.n_out) {{ return; }}
  {chr(10).join("  " + ln for ln in lines).strip()}
  {init}
  for (var q = 0u; q < P.kk; q = q + 1u) {{
    {chr(10).join("    " + ln for ln in win).strip()}
    {step}
  }}
  Y[e] = {t.store(final)};
}}"""
    return body, _params(nd), ("r", "w") + (("r",) if kind == "avg" else ())


def _values(x_shape: tuple[int, ...], kernel, stride, padding, dilation, blocks, n_out: int) -> dict:  # type: ignore[no-untyped-def]
    values = {"n_out": n_out, "c": x_shape[1], "kk": prod(kernel)}
    off = 0
    for i in range(len(kernel)):
        values.update({f"size{i}": x_shape[2 + i], f"k{i}": kernel[i], f"st{i}": stride[i], f"dil{i}": dilation[i]})
        values.update({f"lo{i}": padding[i][0], f"b{i}": blocks[i], f"doff{i}": off})
        off += blocks[i]
    return values


def _blocks(sizes, kernel, stride, padding, dilation) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    return tuple(
        [
            (s + lo + hi - (k - 1) * d - 1) // st + 1
            for s, k, (lo, hi), d, st in zip(sizes, kernel, padding, dilation, stride)
        ]
    )


def _pool(rt: Runtime, x: WgpuArray, kind: str, kernel, stride, padding, dilation, divisor=None) -> WgpuArray:  # type: ignore[no-untyped-def]
    nd = len(kernel)
    blocks = _blocks(x.shape[2:], kernel, stride, padding, dilation)
    out = rt.empty(x.shape[:2] + blocks, x.dtype)
    if out.size == 0:
        return out
    xc = ew.contiguous(rt, x)
    t = rt.types[x.dtype]
    f16 = rt.types.uses_f16(x.dtype)
    k = compile_kernel(rt, ("pool", kind, t.name, nd), lambda: _pool_build(t, nd, kind, f16), f"{kind}_pool")
    values = _values(x.shape, kernel, stride, padding, dilation, blocks, out.size)
    buffers = [xc.buffer, out.buffer]
    if kind == "avg":
        divs = np.concatenate([np.asarray(d, dtype=np.float64).reshape(-1) for d in divisor]).astype(np.float32)
        dbuf = rt.upload(divs, float32)
        buffers.append(dbuf.buffer)
    launch(rt, k, values, buffers, grid(ceil_div(out.size, WG)), f"{kind}_pool")
    return out


def max_pool(rt: Runtime, x: WgpuArray, kernel, stride, padding, dilation) -> WgpuArray:  # type: ignore[no-untyped-def]
    return _pool(rt, x, "max", kernel, stride, padding, dilation)


def avg_pool(rt: Runtime, x: WgpuArray, kernel, stride, padding, divisor) -> WgpuArray:  # type: ignore[no-untyped-def]
    return _pool(rt, x, "avg", kernel, stride, padding, (1,) * len(kernel), divisor)


def _grad_head(t: WType, f16: bool) -> str:
    """The gradient kernels' bindings (G, X read; Y written) and thread prelude: thread ``e`` of ``P.n_out``."""
    return f"""{header(f16)}
@group(0) @binding(1) var<storage, read> G: array<{t.storage}>;
@group(0) @binding(2) var<storage, read> X: array<{t.storage}>;
@group(0) @binding(3) var<storage, read_write> Y: array<{t.storage}>;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let e = gid_lin * {WG}u + t;
  if (e >= P.n_out) {{ return; }}"""


def _peak(t: WType, win: list[str], inside: str, lin: str, pad: str) -> str:
    """WGSL finding window ``bl``'s maximum ``m`` again as the forward kernel does (padding -inf,
    NaN wins), ``pad`` the indentation: the forward's output is not kept for the backward pass."""
    lines = ["var m = bitcast<f32>(0xff800000u);", "for (var q = 0u; q < P.kk; q = q + 1u) {"]
    lines += ["  " + ln for ln in win] + [f"  if ({inside}) {{ m = f_max(m, {t.load(f'X[{lin}]')}); }}", "}"]
    return ("\n" + pad).join(lines)


def _grad_build(t: WType, nd: int, f16: bool):  # type: ignore[no-untyped-def]
    # thread per input element: for each kernel offset o, the window bl whose offset o lands here
    lines = _decode(["nc"] + [f"x{i}" for i in range(nd)], ["0"] + [f"P.size{i}" for i in range(nd)], "e")
    reach = _decode([f"r{i}" for i in range(nd)], [f"P.k{i}" for i in range(nd)], "w")
    checks, blin = [], "nc"
    for i in range(nd):
        checks += [
            f"let tt{i} = i32(x{i} + P.lo{i}) - i32(r{i} * P.dil{i});",
            f"if (tt{i} < 0 || u32(tt{i}) % P.st{i} != 0u || u32(tt{i}) / P.st{i} >= P.b{i}) {{ continue; }}",
            f"let bl{i} = u32(tt{i}) / P.st{i};",
        ]
        blin = f"({blin}) * P.b{i} + bl{i}"
    win, inside, lin = _window(nd)
    me = " && ".join(f"o{i} == r{i}" for i in range(nd))
    body = f"""{_grad_head(t, f16)}
  {chr(10).join("  " + ln for ln in lines).strip()}
  var acc = 0.0;
  for (var w = 0u; w < P.kk; w = w + 1u) {{
    {chr(10).join("    " + ln for ln in reach + checks).strip()}
    let win = {blin};
    {_peak(t, win, inside, lin, "    ")}
    for (var q = 0u; q < P.kk; q = q + 1u) {{
      {chr(10).join("      " + ln for ln in win).strip()}
      var v = bitcast<f32>(0xff800000u);
      if ({inside}) {{ v = {t.load(f"X[{lin}]")}; }}
      if (v == m) {{
        if ({me}) {{ acc = acc + {t.load("G[win]")}; }}
        break;
      }}
    }}
  }}
  Y[e] = {t.store("acc")};
}}"""
    return body, _params(nd), ("r", "r", "w")


def _tiled_grad_build(t: WType, nd: int, f16: bool):  # type: ignore[no-untyped-def]
    # thread per window (nc, bl): the first tap holding the window's maximum (found in one pass; none
    # when a NaN makes it NaN) takes g, every other input the window covers (the last window of an
    # axis also those past it) gets 0
    lines = _decode(["nc"] + [f"bl{i}" for i in range(nd)], ["0"] + [f"P.b{i}" for i in range(nd)], "e")
    win, inside, lin = _window(nd)
    found = " ".join(f"f{i} = o{i};" for i in range(nd))
    bounds = []
    for i in range(nd):
        bounds += [
            f"let w{i} = i32(bl{i} * P.st{i}) - i32(P.lo{i});",
            f"let e{i} = select(min(w{i} + i32(P.k{i}), i32(P.size{i})), i32(P.size{i}), bl{i} + 1u == P.b{i});",
        ]
    put, close, pos = [], [], "i32(nc)"
    for i in range(nd):
        put.append(f"for (var q{i} = max(w{i}, 0); q{i} < e{i}; q{i} = q{i} + 1) {{")
        close.append("}")
        pos = f"({pos}) * i32(P.size{i}) + q{i}"
    hit = " && ".join(["found"] + [f"u32(q{i} - w{i}) == f{i}" for i in range(nd)])
    store = f"Y[u32({pos})] = {t.store(f'select(0.0, gv, {hit})')};"
    body = f"""{_grad_head(t, f16)}
  {chr(10).join("  " + ln for ln in lines).strip()}
  let gv = {t.load("G[e]")};
  var m = bitcast<f32>(0xff800000u);
  var found = false;
  var nan = false;
  {" ".join(f"var f{i} = 0u;" for i in range(nd))}
  for (var q = 0u; q < P.kk; q = q + 1u) {{
    {chr(10).join("    " + ln for ln in win).strip()}
    var v = bitcast<f32>(0xff800000u);
    if ({inside}) {{ v = {t.load(f"X[{lin}]")}; }}
    if (!found || v > m) {{ found = true; m = v; {found} }}
    nan = nan || is_nan(v);
  }}
  found = !nan;
  {chr(10).join("  " + ln for ln in bounds).strip()}
  {" ".join(put)}
    {store}
  {" ".join(close)}
}}"""
    return body, _params(nd), ("r", "r", "w")


def tiles(kernel, stride, padding, dilation) -> bool:  # type: ignore[no-untyped-def]
    """Whether max-pool windows tile the input (stride == kernel, no dilation, each window holding
    an input): each input belongs to at most one window."""
    return all(s == k and d == 1 and lo < k for k, s, d, (lo, _) in zip(kernel, stride, dilation, padding))


def max_pool_backward(rt: Runtime, g: WgpuArray, x: WgpuArray, kernel, stride, padding, dilation):  # type: ignore[no-untyped-def]
    nd = len(kernel)
    gx = rt.empty(x.shape, x.dtype)
    if gx.size == 0:
        return gx
    blocks = _blocks(x.shape[2:], kernel, stride, padding, dilation)
    gc, xc = [ew.contiguous(rt, a) for a in (g, x)]
    t = rt.types[x.dtype]
    f16 = rt.types.uses_f16(x.dtype)
    buffers = [gc.buffer, xc.buffer, gx.buffer]
    if g.size and tiles(kernel, stride, padding, dilation):
        k = compile_kernel(
            rt, ("pool_grad_tiled", t.name, nd), lambda: _tiled_grad_build(t, nd, f16), "max_pool_backward_tiled"
        )
        values = _values(x.shape, kernel, stride, padding, dilation, blocks, g.size)
        launch(rt, k, values, buffers, grid(ceil_div(g.size, WG)), "max_pool_grad_tiled")
        CALLS["tiled"] += 1
        return gx
    k = compile_kernel(rt, ("pool_grad", t.name, nd), lambda: _grad_build(t, nd, f16), "max_pool_backward")
    values = _values(x.shape, kernel, stride, padding, dilation, blocks, gx.size)
    launch(rt, k, values, buffers, grid(ceil_div(gx.size, WG)), "max_pool_grad")
    CALLS["gather"] += 1
    return gx

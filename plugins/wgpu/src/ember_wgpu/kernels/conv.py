"""Convolution for 1-3 spatial dims: implicit GEMM for conv and conv_transpose, and the pieces
of the im2col road, unfold and fold (its adjoint).

conv is one tiled matmul (``matmul.tiled``) per (image, group) whose B operand is gathered from
the input inside the loader, so no im2col buffer is written; the bias is added in the store.
conv_transpose (conv's input gradient) gathers the same way, keeping the taps a stride lands on.
unfold gives each output element one thread that maps it back to an input position (or the
padding value); fold gives each output position one thread that sums the columns landing on it,
so overlaps add up without atomics and the result is deterministic (conv's weight gradient).
"""

from __future__ import annotations

import os
from typing import Any

from ember.dtypes import float32

from ..codegen.ops import convert
from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from . import matmul as mm
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, header, launch, prod
from .reduce import combine, identity

__all__ = ["conv", "conv_transpose", "unfold", "fold"]

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
        [
            (s + lo + hi - (k - 1) * d - 1) // st + 1
            for s, k, (lo, hi), d, st in zip(sizes, kernel, padding, dilation, stride)
        ]
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
        [
            (s + lo + hi - (k - 1) * d - 1) // st + 1
            for s, k, (lo, hi), d, st in zip(size, kernel, padding, dilation, stride)
        ]
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


# -- implicit GEMM: conv and conv_transpose as the tiled matmul with B gathered from the input ------
def _gather(kind: str, t: WType, nd: int) -> mm.Gather:
    """B[gk = ci * KV + tap, gn = output position] read from the input (zero where padded or,
    for ``transpose``, where no input position lands on the output with this tap)."""
    fields = [("g_kv", "u32"), ("g_cs", "u32")]
    for i in range(nd):
        fields += [(f"g_{n}{i}", "u32") for n in ("sz", "bl", "kr", "st", "dl", "lo", "sx")]
    lines = ["let ci = gk / P.g_kv;", "var kq = gk % P.g_kv;", "var oq = gn;"]
    for i in reversed(range(nd)):
        lines += [f"let wk{i} = kq % P.g_kr{i};", f"kq = kq / P.g_kr{i};"]
        out_dim = f"P.g_bl{i}" if kind == "conv" else f"P.g_sz{i}"
        lines += [f"let wq{i} = oq % {out_dim};", f"oq = oq / {out_dim};"]
    inside, addr = [], "boff + ci * P.g_cs"
    for i in range(nd):
        if kind == "conv":
            lines.append(f"let p{i} = i32(wq{i} * P.g_st{i} + wk{i} * P.g_dl{i}) - i32(P.g_lo{i});")
            inside.append(f"p{i} >= 0 && p{i} < i32(P.g_sz{i})")
            addr += f" + u32(max(p{i}, 0)) * P.g_sx{i}"
        else:
            lines.append(f"let tp{i} = i32(wq{i} + P.g_lo{i}) - i32(wk{i} * P.g_dl{i});")
            inside.append(f"tp{i} >= 0 && u32(tp{i}) % P.g_st{i} == 0u && u32(tp{i}) / P.g_st{i} < P.g_bl{i}")
            addr += f" + (u32(max(tp{i}, 0)) / P.g_st{i}) * P.g_sx{i}"
    lines.append(f"if ({' && '.join(inside)}) {{ v = {t.load(f'B[{addr}]')}; }}")
    return mm.Gather(" ".join(lines), tuple(fields))


def implicit_wins(rt: Runtime) -> bool:
    """Whether conv runs as implicit GEMM here: on GPU adapters. On a CPU adapter (lavapipe) the
    forward pass ties with im2col and the input gradient is 1.5-8x slower (BENCHMARKS.md), so
    core's unfold + matmul composite stays, unless ``EMBER_WGPU_IMPLICIT_CONV=1`` (for testing)."""
    cpu = str(rt.adapter.info.get("adapter_type", "")).lower() == "cpu"
    return not cpu or os.environ.get("EMBER_WGPU_IMPLICIT_CONV", "").strip() == "1"


def _conv_config(rt: Runtime, m: int, n: int, k: int, dtype: str) -> mm.Config:
    """Few output channels per group make short wide GEMMs: a 16- or 32-row tile wastes less."""
    cfg = mm.choose(rt, dtype, m, n, k)
    for rows, small in ((16, mm.Config(16, 128, 16, 4, 8, True)), (32, mm.Config(32, 128, 16, 4, 8, True))):
        if m <= rows and cfg.bm > rows and mm.fits(rt, small):
            return small
    return cfg


def _implicit(rt: Runtime, kind: str, x: WgpuArray, wmat: WgpuArray, bias: WgpuArray | None, out: WgpuArray,
              m: int, k: int, geo: dict[str, int], groups: int, config: mm.Config | None) -> mm._Plan:  # fmt: skip
    """The launch computing, per (image, group), out[m, n] = wmat[g][m, :k] @ gather(x)[:k, n]."""
    nd = x.ndim - 2
    n_img, cin = x.shape[:2]
    n = prod(out.shape[2:])
    t = rt.types[x.dtype]
    cfg = config or _conv_config(rt, m, n, k, t.name)
    f16 = rt.types.uses_f16(x.dtype)
    va = cfg.vec and t.storage == "f32" and k % 4 == 0 and wmat.offset % 4 == 0 and wmat.buffer.size % 16 == 0
    key = ("conv_igemm", kind, t.name, nd, cfg, va, bias is not None)
    pipe, params = compile_kernel(
        rt,
        key,
        lambda: mm.tiled(t, t, 2, cfg, f16, False, False, va, False, _gather(kind, t, nd), bias is not None),
        f"{kind}_igemm",
    )
    cg = cin // groups
    values = {"m": m, "n": n, "k": k, "batch": n_img * groups, "a_off": wmat.offset, "b_off": x.offset}
    values.update({"sam": k, "sak": 1, "sbk": 0, "sbn": 0, "d0": n_img, "as0": 0, "bs0": x.strides[0] & 0xFFFFFFFF})
    values.update({"d1": groups, "as1": m * k, "bs1": (cg * x.strides[1]) & 0xFFFFFFFF})
    values.update({"g_cs": x.strides[1] & 0xFFFFFFFF, **geo})
    for i in range(nd):
        values[f"g_sx{i}"] = x.strides[2 + i] & 0xFFFFFFFF
    if bias is not None:
        values.update({"r_off": bias.offset, "r_s": bias.strides[0] & 0xFFFFFFFF})
    groups_xyz = (ceil_div(n, cfg.bn), ceil_div(m, cfg.bm), min(n_img * groups, 65535))
    return mm._Plan(pipe, params.pack(values), groups_xyz, out.shape)


def _run(rt: Runtime, plan: mm._Plan, kind: str, x: WgpuArray, wmat: WgpuArray, bias: WgpuArray | None,
         out: WgpuArray) -> WgpuArray:  # fmt: skip
    buffers = [wmat.storage.raw, x.storage.raw, out.storage.raw]
    if bias is not None:
        buffers.append(bias.storage.raw)
    rt.dispatch(plan.pipe, plan.params, buffers, plan.groups, f"{kind}_igemm")
    return out


def _key(kind: str, x: WgpuArray, w: WgpuArray, bias: WgpuArray | None, *args: Any) -> tuple:
    """A conv launch's plan key: the operands' geometry and the convolution's arguments. The
    weight matrix made from ``w`` (``w`` itself or a contiguous copy at offset 0) follows from it."""
    b = None if bias is None else (bias.strides, bias.offset)
    return (kind, x.dtype, x.shape, x.strides, x.offset, w.shape, w.strides, w.offset, b, *args)


def _geo(size: tuple[int, ...], blocks: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
         dilation: tuple[int, ...], padding: tuple[tuple[int, int], ...]) -> dict[str, int]:  # fmt: skip
    geo = {"g_kv": prod(kernel)}
    for i in range(len(kernel)):
        geo.update({f"g_sz{i}": size[i], f"g_bl{i}": blocks[i], f"g_kr{i}": kernel[i], f"g_st{i}": stride[i]})
        geo.update({f"g_dl{i}": dilation[i], f"g_lo{i}": padding[i][0]})
    return geo


def _empty_reduction(rt: Runtime, out: WgpuArray, bias: WgpuArray | None) -> WgpuArray:
    if bias is None:
        return ew.fill(rt, out.shape, 0, out.dtype, out=out)
    nd = out.ndim - 2
    ew.copy_into(rt, bias.with_layout(out.shape, (0, bias.strides[0]) + (0,) * nd, bias.offset), out)
    return out


def conv(rt: Runtime, x: WgpuArray, w: WgpuArray, bias: WgpuArray | None, stride: tuple[int, ...],
         padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...], groups: int,
         config: mm.Config | None = None) -> WgpuArray:  # fmt: skip
    """Convolution (N, C_in, *size) x (C_out, C_in / groups, *kernel) as an implicit GEMM (its
    launch planned once per geometry, kept in ``rt.plans``)."""
    key = _key("conv", x, w, bias, stride, tuple(map(tuple, padding)), dilation, groups, config)
    plan = rt.plans.get(key)
    if plan is not None:
        out = rt.empty(plan.shape, x.dtype)  # allocated before the weights' copy, as below
        return _run(rt, plan, "conv", x, ew.contiguous(rt, w), bias, out)
    n, cin = x.shape[:2]
    cout, kernel = w.shape[0], tuple(w.shape[2:])
    size = tuple(x.shape[2:])
    blocks = tuple(
        [
            (s + lo + hi - (kk - 1) * d - 1) // st + 1
            for s, kk, (lo, hi), d, st in zip(size, kernel, padding, dilation, stride)
        ]
    )
    out = rt.empty((n, cout) + blocks, x.dtype)
    k = (cin // groups) * prod(kernel)
    if out.size == 0:
        return out
    if k == 0:
        return _empty_reduction(rt, out, bias)
    geo = _geo(size, blocks, kernel, stride, dilation, padding)
    wmat = ew.contiguous(rt, w)
    plan = _implicit(rt, "conv", x, wmat, bias, out, cout // groups, k, geo, groups, config)
    _remember(rt, key, plan)
    return _run(rt, plan, "conv", x, wmat, bias, out)


def conv_transpose(rt: Runtime, x: WgpuArray, w: WgpuArray, bias: WgpuArray | None, size: tuple[int, ...],
                   stride: tuple[int, ...], padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...],
                   groups: int, config: mm.Config | None = None) -> WgpuArray:  # fmt: skip
    """Transposed convolution (conv's input gradient): x (N, C_in, *blocks), w (C_in, C_out / groups, *kernel)
    (its launch planned once per geometry, kept in ``rt.plans``)."""
    key = _key("conv_transpose", x, w, bias, tuple(size), stride, tuple(map(tuple, padding)), dilation, groups, config)
    plan = rt.plans.get(key)
    if plan is not None:
        out = rt.empty(plan.shape, x.dtype)
        return _run(rt, plan, "transpose", x, _transpose_weights(rt, w, groups), bias, out)
    n, cin = x.shape[:2]
    cog, kernel = w.shape[1], tuple(w.shape[2:])
    kv = prod(kernel)
    out = rt.empty((n, cog * groups) + tuple(size), x.dtype)
    cg = cin // groups
    if out.size == 0:
        return out
    if cg * kv == 0:
        return _empty_reduction(rt, out, bias)
    wt = _transpose_weights(rt, w, groups)
    geo = _geo(tuple(size), tuple(x.shape[2:]), kernel, stride, dilation, padding)
    plan = _implicit(rt, "transpose", x, wt, bias, out, cog, cg * kv, geo, groups, config)
    _remember(rt, key, plan)
    return _run(rt, plan, "transpose", x, wt, bias, out)


def _transpose_weights(rt: Runtime, w: WgpuArray, groups: int) -> WgpuArray:
    """conv_transpose's A operand: A[g][co, ci * KV + tap] = w[g * cg + ci, co, tap], contiguous."""
    cin, cog = w.shape[:2]
    cg, kv = cin // groups, prod(w.shape[2:])
    wc = ew.contiguous(rt, w)
    return ew.contiguous(rt, wc.with_layout((groups, cog, cg, kv), (cg * cog * kv, kv, cog * kv, 1), wc.offset))


def _remember(rt: Runtime, key: tuple, plan: mm._Plan) -> None:
    if len(rt.plans) >= ew.MAX_PLANS:
        rt.plans.clear()
    rt.plans[key] = plan

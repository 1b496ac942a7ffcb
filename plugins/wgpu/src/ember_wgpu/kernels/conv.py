"""Convolution for 1-3 spatial dims: implicit GEMM for conv and conv_transpose, and the pieces
of the im2col road, unfold and fold (its adjoint).

conv is one tiled matmul (``matmul.tiled``) per group whose B operand is gathered from the input
inside the loader, so no im2col buffer is written: its columns are the batch's images x output
positions, its rows the taps; the bias is added in the store, which maps a column back to its
image (``matmul.Columns``). conv_transpose (conv's input gradient) gathers the same way, keeping
the taps a stride lands on.
unfold gives each output element one thread that maps it back to an input position (or the
padding value); fold gives each output position one thread that sums the columns landing on it,
so overlaps add up without atomics and the result is deterministic (conv's weight gradient).
"""

from __future__ import annotations

from typing import Any

from ember.dtypes import float32

from .. import settings
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
def _gather(kind: str, t: WType, nd: int, inner: bool, unit: bool) -> mm.Gather:
    """B[gk, gn] of the conv GEMM read from the input: gn = image * L + output position (the batch's
    images are columns, one GEMM per group), gk = ci * KV + tap (``inner``: tap * C_g + ci). Zero
    where padded or, for ``transpose``, where no input position lands on the output with this tap.

    What depends on the column alone (image, output coordinates) is computed once per load slot
    before the k loop (``col``). ``inner``: a k-step (which divides C_g) has one tap, decoded once
    per step (``step``), so an element costs a bounds test and an add. ``unit``: a transpose whose
    strides are all 1 (no division by the stride)."""
    grid_dims = "g_bl" if kind == "conv" else "g_sz"  # the output's coordinates (the columns)
    fields = [("g_kv", "u32"), ("g_cs", "u32"), ("g_L", "u32"), ("g_ns", "u32"), ("g_cg", "u32")]
    for i in range(nd):
        fields += [(f"g_{n}{i}", "u32") for n in ("sz", "bl", "kr", "st", "dl", "lo", "sx")]
    col = ["let img_$e = gn_$e / P.g_L;", "var oq_$e = gn_$e - img_$e * P.g_L;"]
    for i in reversed(range(nd)):
        if i:
            col += [f"let wq{i}_$e = oq_$e % P.{grid_dims}{i};", f"oq_$e = oq_$e / P.{grid_dims}{i};"]
        else:
            col.append("let wq0_$e = oq_$e;")
    for i in range(nd):
        h = f"i32(wq{i}_$e * P.g_st{i}) - i32(P.g_lo{i})" if kind == "conv" else f"i32(wq{i}_$e + P.g_lo{i})"
        col.append(f"let h{i}_$e = {h};")
    col.append("let xb_$e = boff + img_$e * P.g_ns;")

    def taps(index: str) -> list[str]:  # wk0.. of a tap index (the last axis fastest)
        out = [f"var kq = {index};"]
        for i in reversed(range(nd)):
            out += [f"let wk{i} = kq % P.g_kr{i};", f"kq = kq / P.g_kr{i};"] if i else ["let wk0 = kq;"]
        return out

    step: list[str] = []
    if inner:
        step = ["let tap = kb / P.g_cg;", "let ci0 = kb - tap * P.g_cg;", *taps("tap")]
        code = ["let ci = ci0 + gk - kb;"]
    else:
        code = ["let ci = gk / P.g_kv;", *taps("gk - ci * P.g_kv")]
    inside, addr = [], "xb_$e + ci * P.g_cs"
    for i in range(nd):
        if kind == "conv":
            code.append(f"let p{i} = h{i}_$e + i32(wk{i} * P.g_dl{i});")
            inside.append(f"p{i} >= 0 && p{i} < i32(P.g_sz{i})")
            addr += f" + u32(p{i}) * P.g_sx{i}"
        elif unit:
            code.append(f"let p{i} = h{i}_$e - i32(wk{i} * P.g_dl{i});")
            inside.append(f"p{i} >= 0 && p{i} < i32(P.g_bl{i})")
            addr += f" + u32(p{i}) * P.g_sx{i}"
        else:
            code += [f"let tp{i} = h{i}_$e - i32(wk{i} * P.g_dl{i});", f"let u{i} = u32(max(tp{i}, 0)) / P.g_st{i};"]
            inside.append(f"tp{i} >= 0 && u{i} * P.g_st{i} == u32(tp{i}) && u{i} < P.g_bl{i}")
            addr += f" + u{i} * P.g_sx{i}"
    code.append(f"if ({' && '.join(inside)}) {{ v = {t.load(f'B[{addr}]')}; }}")
    return mm.Gather(" ".join(code), tuple(fields), " ".join(col), " ".join(step))


#: C of the conv GEMM: column n = image * L + position of an (N, C_out, *blocks) output, a row
#: (output channel) L apart, the group's rows at ``z * M * L``; ``c_off``: the launch's first image
_COLUMNS = mm.Columns(
    "let ci_$j = col_$j / P.c_rs; let cn_$j = P.c_off + ci_$j * P.c_img + col_$j - ci_$j * P.c_rs;",
    (("c_rs", "u32"), ("c_img", "u32"), ("c_off", "u32")),
)


def implicit_wins(rt: Runtime) -> bool:
    """Whether conv runs as implicit GEMM here: on every adapter, unless ``EMBER_WGPU_IMPLICIT_CONV=0``
    (core's unfold + matmul composite, to compare). On lavapipe W3's step at CPU size takes 0.78-0.80x
    the composite's since the kernels read images as columns (BENCHMARKS.md, 2026-12-07 sixth)."""
    del rt  # (every adapter: kept as the backend's question)
    return settings.implicit_conv()


#: the conv GEMM's tile by output channels per group (M), rows first: the columns (images x
#: positions) are many, so 128 wide, strided vec4 thread blocks; k-step 8 with register prefetch
#: from 64 rows (opencl's choice for W3's conv2 on an H100, conv.py there)
_TILINGS = (
    (16, mm.Config(16, 128, 16, 4, 8, True, True, False)),
    (32, mm.Config(32, 128, 16, 4, 8, True, True, True)),
    (64, mm.Config(64, 128, 8, 8, 8, True, True, True)),
    (2**62, mm.Config(128, 128, 8, 8, 8, True, True, True)),
)


def _conv_config(rt: Runtime, m: int, n: int, k: int, dtype: str) -> mm.Config:
    """The smallest tile of :data:`_TILINGS` holding M rows that the adapter takes, else the matmul's choice."""
    for rows, cfg in _TILINGS:
        if m <= rows and mm.fits(rt, cfg):
            return cfg
    return mm.choose(rt, dtype, m, n, k)


class _ConvPlan:
    """One geometry's launches (one per run of images whose column tiles fit a grid axis), the
    output's shape, and whether A is the tap-major weight matrix (``inner``)."""

    __slots__ = ("launches", "shape", "inner")

    def __init__(self, launches: list[tuple[bytes, tuple[int, int, int]]], pipe: Any, shape: tuple[int, ...],
                 inner: bool) -> None:  # fmt: skip
        self.launches = [mm._Plan(pipe, params, groups, shape) for params, groups in launches]
        self.shape, self.inner = shape, inner


def _implicit(rt: Runtime, kind: str, x: WgpuArray, bias: WgpuArray | None, out_shape: tuple[int, ...], m: int,
              cg: int, kv: int, geo: dict[str, int], groups: int, config: mm.Config | None) -> _ConvPlan:  # fmt: skip
    """Per group, out[img, g * M + m, pos] = A[g][m, :k] @ gather(x)[:k, img * L + pos], A the weights as
    a (G, M, K) matrix (:func:`_weights`)."""
    nd = x.ndim - 2
    n_img = x.shape[0]
    length = prod(out_shape[2:])
    k, n = cg * kv, n_img * length
    t = rt.types[x.dtype]
    cfg = config or _conv_config(rt, m, n, k, t.name)
    inner = kv > 1 and cg % cfg.bk == 0
    unit = kind == "transpose" and all(geo[f"g_st{i}"] == 1 for i in range(nd))
    f16 = rt.types.uses_f16(x.dtype)
    va = cfg.vec and t.storage == "f32" and k % 4 == 0
    key = ("conv_igemm", kind, t.name, nd, cfg, va, bias is not None, inner, unit)
    gather = _gather(kind, t, nd, inner, unit)
    pipe, params = compile_kernel(
        rt, key, lambda: mm.tiled(t, t, 1, cfg, f16, False, False, va, False, gather, bias is not None, None, _COLUMNS),
        f"{kind}_igemm",
    )  # fmt: skip
    values = {"m": m, "k": k, "batch": groups, "a_off": 0, "sam": k, "sak": 1, "sbk": 0, "sbn": 0}
    values.update({"d0": groups, "as0": m * k, "bs0": (cg * x.strides[1]) & 0xFFFFFFFF, **geo})
    values.update({"g_kv": kv, "g_cs": x.strides[1] & 0xFFFFFFFF, "g_L": length, "g_ns": x.strides[0] & 0xFFFFFFFF})
    values.update({"g_cg": cg, "c_rs": length, "c_img": out_shape[1] * length})
    for i in range(nd):
        values[f"g_sx{i}"] = x.strides[2 + i] & 0xFFFFFFFF
    if bias is not None:
        values.update({"r_off": bias.offset, "r_s": bias.strides[0] & 0xFFFFFFFF})
    per = max(1, min(n_img, mm._MAX_Z * cfg.bn // length))  # images a launch (a grid axis's limit)
    launches = []
    for first in range(0, n_img, per):
        imgs = min(per, n_img - first)
        values.update({"n": imgs * length, "b_off": (x.offset + first * x.strides[0]) & 0xFFFFFFFF})
        values["c_off"] = first * out_shape[1] * length
        groups_xyz = (ceil_div(imgs * length, cfg.bn), ceil_div(m, cfg.bm), min(groups, mm._MAX_Z))
        launches.append((params.pack(values), groups_xyz))
    return _ConvPlan(launches, pipe, out_shape, inner)


def _weights(rt: Runtime, kind: str, w: WgpuArray, groups: int, inner: bool) -> WgpuArray:
    """A of the conv GEMM, (G, M, K) contiguous: conv's weights (C_out, C_g, *kernel) as they are
    (``inner``: tap-major, A[g][m, tap * C_g + ci]); the transpose's A[g][co, ci * KV + tap] =
    w[g * C_g + ci, co, tap] (``inner``: A[g][co, tap * C_g + ci])."""
    wc = ew.contiguous(rt, w)
    a, b = wc.shape[:2]
    kv = prod(wc.shape[2:])
    if kind == "conv":
        return ew.contiguous(rt, wc.with_layout((a, kv, b), (b * kv, 1, kv), wc.offset)) if inner else wc
    cg = a // groups
    layout = (
        ((groups, b, kv, cg), (cg * b * kv, kv, 1, b * kv))
        if inner
        else ((groups, b, cg, kv), (cg * b * kv, kv, b * kv, 1))
    )
    return ew.contiguous(rt, wc.with_layout(*layout, wc.offset))


def _run(rt: Runtime, plan: _ConvPlan, kind: str, x: WgpuArray, w: WgpuArray, bias: WgpuArray | None,
         groups: int) -> WgpuArray:  # fmt: skip
    out = rt.empty(plan.shape, x.dtype)  # allocated before the weights' copy
    # the copy lives until its dispatches are recorded (freed before, under exclusive its driver buffer went)
    weights = _weights(rt, kind, w, groups, plan.inner)
    buffers = [weights.storage.raw, x.storage.raw, out.storage.raw]
    if bias is not None:
        buffers.append(bias.storage.raw)
    for launch_ in plan.launches:
        rt.dispatch(launch_.pipe, launch_.params, buffers, launch_.groups, f"{kind}_igemm")
    return out


def _key(kind: str, x: WgpuArray, w: WgpuArray, bias: WgpuArray | None, *args: Any) -> tuple:
    """A conv launch's plan key: the operands' geometry and the convolution's arguments."""
    b = None if bias is None else (bias.strides, bias.offset)
    return (kind, x.dtype, x.shape, x.strides, x.offset, w.shape, w.strides, w.offset, b, *args)


def _geo(size: tuple[int, ...], blocks: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
         dilation: tuple[int, ...], padding: tuple[tuple[int, int], ...]) -> dict[str, int]:  # fmt: skip
    geo = {}
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
        return _run(rt, plan, "conv", x, w, bias, groups)
    n, cin = x.shape[:2]
    cout, kernel = w.shape[0], tuple(w.shape[2:])
    size = tuple(x.shape[2:])
    blocks = tuple(
        [
            (s + lo + hi - (kk - 1) * d - 1) // st + 1
            for s, kk, (lo, hi), d, st in zip(size, kernel, padding, dilation, stride)
        ]
    )
    shape = (n, cout) + blocks
    if prod(shape) == 0:
        return rt.empty(shape, x.dtype)
    if (cin // groups) * prod(kernel) == 0:
        return _empty_reduction(rt, rt.empty(shape, x.dtype), bias)
    geo = _geo(size, blocks, kernel, stride, dilation, padding)
    plan = _implicit(rt, "conv", x, bias, shape, cout // groups, cin // groups, prod(kernel), geo, groups, config)
    _remember(rt, key, plan)
    return _run(rt, plan, "conv", x, w, bias, groups)


def conv_transpose(rt: Runtime, x: WgpuArray, w: WgpuArray, bias: WgpuArray | None, size: tuple[int, ...],
                   stride: tuple[int, ...], padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...],
                   groups: int, config: mm.Config | None = None) -> WgpuArray:  # fmt: skip
    """Transposed convolution (conv's input gradient): x (N, C_in, *blocks), w (C_in, C_out / groups, *kernel)
    (its launch planned once per geometry, kept in ``rt.plans``)."""
    key = _key("conv_transpose", x, w, bias, tuple(size), stride, tuple(map(tuple, padding)), dilation, groups, config)
    plan = rt.plans.get(key)
    if plan is not None:
        return _run(rt, plan, "transpose", x, w, bias, groups)
    n, cin = x.shape[:2]
    cog, kernel = w.shape[1], tuple(w.shape[2:])
    kv = prod(kernel)
    shape = (n, cog * groups) + tuple(size)
    cg = cin // groups
    if prod(shape) == 0:
        return rt.empty(shape, x.dtype)
    if cg * kv == 0:
        return _empty_reduction(rt, rt.empty(shape, x.dtype), bias)
    geo = _geo(tuple(size), tuple(x.shape[2:]), kernel, stride, dilation, padding)
    plan = _implicit(rt, "transpose", x, bias, shape, cog, cg, kv, geo, groups, config)
    _remember(rt, key, plan)
    return _run(rt, plan, "transpose", x, w, bias, groups)


def _remember(rt: Runtime, key: tuple, plan: _ConvPlan) -> None:
    if len(rt.plans) >= ew.MAX_PLANS:
        rt.plans.clear()
    rt.plans[key] = plan

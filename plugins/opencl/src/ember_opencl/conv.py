"""Convolution as implicit GEMM: conv, conv_transpose (conv's input gradient) and conv's weight
gradient, on the tiled matmul family (:mod:`.gemm_source`, launched by :mod:`.matmul`).

Same signatures as the composites in ``ember.ops.conv``; 1-3 spatial dimensions, inputs read
through strides. ``conv`` is one tiled GEMM per group whose columns are the batch's output
positions (image-major: no tile straddles only part of an image's columns) and whose B operand is
gathered from the input on the fly (no im2col buffer), bias added in the store, C placed into the
NCHW output by a :class:`~.gemm_source.ColumnMap`; ``conv_transpose`` (the input gradient of conv)
gathers the same way from its input, keeping only the taps a stride lands on; ``conv_weight_grad``
is a GEMM per (image, group) of the gradient against the image's gathered columns, the per-image
partials summed by one kernel. Indices are 32-bit where everything fits (a kernel per index width)
and divide by sizes through magic numbers (:func:`~.gemm_source.magic`). The window kernels (unfold,
fold, pooling) are :mod:`.window`'s, whose index-width rule, launch plans and launch counter these
GEMMs share.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ember.tuning import AUTOTUNE_FLOPS

from . import settings
from .array import CLArray
from .cltypes import ctype
from .codegen import preamble
from .gemm_source import ColumnMap, Gather, Tiling, gemm_source, magic
from .matmul import _TUNING, choose, fits, tiled_launch
from .runtime import Runtime
from .window import CALLS, Pads, U, _blocks, _extent, _index, _keep, _Plan, _planned, _split

__all__ = ["conv", "conv_transpose", "conv_weight_grad"]


def _geo(size: tuple[int, ...], blocks: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
         dilation: tuple[int, ...], padding: Pads) -> list[int]:  # fmt: skip
    return [*size, *blocks, *kernel, *stride, *dilation, *(lo for lo, _ in padding)]


def implicit_wins(rt: Runtime) -> bool:
    """Whether conv runs as implicit GEMM here: on GPUs; on CPUs (PoCL) im2col + the vector matmul
    is ~10x faster, unless ``EMBER_OPENCL_IMPLICIT_CONV=1`` (to test these kernels on a CPU)."""
    return not rt.is_cpu or settings.implicit_conv_on_cpu()


def _tap(kind: str, nd: int, col: list[str], lines: list[str]) -> tuple[str, str]:
    """The input position a tap (wk) of an output column (wq) reads: the column's part appended to
    ``col``, the tap's to ``lines``; -> (whether it lies inside the input, its offset). ``conv``
    reads x at wq * stride - pad + wk * dilation; the transposed conv reads the input position u
    with u * stride == wq + pad - wk * dilation."""
    if kind == "conv":
        col += [f"const IDX h{d} = wq{d} * g_st{d} - g_lo{d};" for d in range(nd)]
        lines += [f"const IDX p{d} = h{d} + wk{d} * g_dl{d};" for d in range(nd)]
        ok = " && ".join(f"p{d} >= 0 && p{d} < g_sz{d}" for d in range(nd))
        return ok, " + ".join(f"p{d} * g_sx{d}" for d in range(nd))
    col += [f"const IDX h{d} = wq{d} + g_lo{d};" for d in range(nd)]
    lines += [f"const IDX t{d} = h{d} - wk{d} * g_dl{d};" for d in range(nd)]
    lines += [f"const IDX u{d} = FDIV(max(t{d}, (IDX)0), g_st{d});" for d in range(nd)]
    ok = " && ".join(f"t{d} >= 0 && u{d} * g_st{d} == t{d} && u{d} < g_bl{d}" for d in range(nd))
    return ok, " + ".join(f"u{d} * g_sx{d}" for d in range(nd))


def _gather(kind: str, dt: str, nd: int, idx: str, inner: bool = False) -> Gather:
    """B of the conv GEMM: element (gk = ci * KV + tap, go = image * L + output position) read from the
    input. The images of the batch are columns: one GEMM per group, no tile straddling an image's end.

    ``conv``: input position = out * stride + tap * dilation - pad (zero outside);
    ``transpose``: the input position b with b * stride + tap * dilation - pad = out, if any.
    What depends on the column only (image, output coordinates) is ``col``: once per kernel. Every
    division is a magic-number FDIV (its ``_m``, ``_s`` arguments follow the sizes). ``inner``: the
    rows are tap-major instead (gk = tap * C_g + ci, A's columns in that order) and the k-step
    (``tk`` rows) divides C_g, so a k-step's rows share one tap: its position, bounds test and
    offset are ``step`` statements (once per k-step and column), a row adds only ``ci * g_cs``."""
    c = ctype(dt)
    acc = "float" if c.is_wide_float else c.compute
    names = ("g_sz", "g_bl", "g_kr", "g_st", "g_dl", "g_lo", "g_sx")
    params = [f"const {idx} g_kv", f"const {idx} g_cs", f"const {idx} g_L", f"const {idx} g_ns", f"const {idx} g_cg"]
    params += [f"const {idx} {n}{d}" for n in names for d in range(nd)]
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    types: list[Any] = [npi] * len(params)
    divs = _gather_divisors(nd)
    params += [f"const uint {v}_{p}" for v in divs for p in "ms"]
    types += [U] * (2 * len(divs))
    if kind == "wgrad":  # rows gk: the output positions of one image (the batch axis); columns go: ci * KV + tap
        col = ["const IDX ci = FDIV(go, g_kv); const IDX kk = go - ci * g_kv;", *_split("kk", nd, "g_kr", "wk")]
        col += [f"const IDX dk{d} = wk{d} * g_dl{d} - g_lo{d};" for d in range(nd)]
        row = [*_split("gk", nd, "g_bl", "wq"), *(f"const IDX r{d} = wq{d} * g_st{d};" for d in range(nd))]
        code = [f"const IDX p{d} = r{d} + dk{d};" for d in range(nd)]
        inside = " && ".join(f"p{d} >= 0 && p{d} < g_sz{d}" for d in range(nd))
        pos = " + ".join(f"p{d} * g_sx{d}" for d in range(nd))
        code.append(f"if ({inside}) v = ({acc}){c.load('B', f'b_base + ci * g_cs + {pos}')};")
        return Gather(tuple(code), tuple(params), tuple(types), tuple(col), row=tuple(row))
    grid = "g_bl" if kind == "conv" else "g_sz"  # the output's coordinates (the columns)
    col = ["const IDX img = FDIV(go, g_L); const IDX gl = go - img * g_L;", *_split("gl", nd, grid, "wq")]
    col.append("const IDX xcol = img * g_ns;")
    if inner:
        step = ["const IDX tap = FDIV(kb, g_cg); const IDX ci0 = kb - tap * g_cg;", *_split("tap", nd, "g_kr", "wk")]
        ok, pos = _tap(kind, nd, col, step)
        step += [f"const bool tap_ok = {ok};", f"const IDX tap_at = b_base + xcol + ci0 * g_cs + {pos};"]
        code = [f"if (tap_ok) v = ({acc}){c.load('B', 'tap_at + k * g_cs')};"]
        return Gather(tuple(code), tuple(params), tuple(types), tuple(col), tuple(step))
    code = ["const IDX ci = FDIV(gk, g_kv); const IDX kk = gk - ci * g_kv;", *_split("kk", nd, "g_kr", "wk")]
    inside, pos = _tap(kind, nd, col, code)
    code.append(f"if ({inside}) v = ({acc}){c.load('B', f'b_base + xcol + ci * g_cs + {pos}')};")
    return Gather(tuple(code), tuple(params), tuple(types), tuple(col))


def _gather_divisors(nd: int) -> list[str]:
    return ["g_kv", "g_L", "g_cg"] + [f"{n}{d}" for n in ("g_sz", "g_bl", "g_kr", "g_st") for d in range(nd)]


#: C of the conv GEMM: column n = image * L + position of an (N, C_out, *blocks) output, the group's
#: rows at c_base (the kernel's batch axis is the group)
_COLUMNS = ColumnMap(
    ("const IDX ci_img = FDIV(n, g_L); const IDX cn = ci_img * c_img + (n - ci_img * g_L);",),
    ("const IDX c_rs", "const IDX c_img"),
)


#: the conv GEMM's tile on GPUs by output channels per group (M), rows of the tile first: the columns
#: (N = images x positions) are many, so a tile 128 columns wide with 8x8 (4x8 for 32 rows) per work
#: item, float4 local reads and two local buffers (the c4db layout of the matmul family)
_GPU_CONV_TILINGS = (
    (16, Tiling(16, 128, 16, 4, 8, vw=4, chunk=4, db=True)),
    (32, Tiling(32, 128, 16, 4, 8, vw=4, chunk=4, db=True)),
    # k-step 8 with register prefetch: W3's conv2 on an H100 (conv_time.py, 2026-12-06 afternoon)
    # 156.6 -> 132.5 µs forward, 318.5 -> 232.9 µs weight gradient, against 64 x 128 x 16
    (64, Tiling(64, 128, 8, 8, 8, vw=4, chunk=4, db=True, rp=True)),
    (2**62, Tiling(128, 128, 16, 8, 8, vw=4, chunk=4, db=True)),
)


#: a weight gradient of few columns (C_in * KV <= 16: W3's first layer, 1 x 3 x 3): 16 columns, a
#: work item per row pair (16 rows: one row) and column
_GPU_NARROW_TILINGS = (
    (16, Tiling(16, 16, 16, 1, 1, vw=4, db=True)),
    (2**62, Tiling(32, 16, 16, 2, 1, vw=4, db=True)),
)


def _conv_tiling(rt: Runtime, dt: str, M: int, N: int, K: int) -> Tiling:
    """GPUs: the smallest tile of :data:`_GPU_CONV_TILINGS` (of :data:`_GPU_NARROW_TILINGS` when N
    <= 16) that holds M rows (few output channels per group make short wide GEMMs); CPUs and what
    does not fit: the matmul's choice."""
    if not rt.is_cpu:
        for rows, t in _GPU_NARROW_TILINGS if N <= 16 else _GPU_CONV_TILINGS:
            if M <= rows and fits(rt, t, dt):
                return t
    return choose(rt, dt, M, N, K)


def _settled(rt: Runtime, t: Tiling, M: int, N: int, K: int) -> bool:
    """Whether a conv GEMM's untuned tiling may be planned: not where :func:`~.matmul.choose` gave a
    large GPU GEMM's, which may yet be tuned on first use (as matmul's plans)."""
    return rt.is_cpu or M * N * K < AUTOTUNE_FLOPS or any(t is c for _, c in _GPU_CONV_TILINGS + _GPU_NARROW_TILINGS)


def _implicit(
    rt: Runtime, kind: str, x: CLArray, wv: CLArray, bias: CLArray | None, out: CLArray, M: int, K: int,
    geo: list[int], groups: int, tiling: Tiling | None, key: Any = None,
) -> None:  # fmt: skip
    """Launch the conv GEMM: per group C[M, N * L] = A[M, K] @ gather(x)[K, N * L], A the weight ``wv``
    (G, M, C_g, KV), a view of the contiguous weight, copied to (G, M, K) channel-major, or tap-major
    where a k-step divides C_g (the gather's ``inner`` form), C's columns image-major in the NCHW
    output. Kept as a plan under ``key`` (if given): the layout of A's copy is planned, the copy is
    made at each call (:func:`_fire_gemm`)."""
    n, cin = x.shape[:2]
    nd = x.ndim - 2
    L = math.prod(out.shape[2:])
    N = n * L
    dt = x.dtype.name
    cg = cin // groups
    idx = _index(out.size, wv.size, N, _extent(x))
    t = tiling or _conv_tiling(rt, dt, M, N, K)
    va = t.vw if dt in ("float32", "float64") else 1
    inner = cg % t.tk == 0
    s0, s1, s2, s3 = wv.strides
    kvol = wv.shape[3]
    wlay = ((groups, M, kvol, cg), (s0, s1, s3, s2)) if inner else (wv.shape, wv.strides)
    gather = _gather(kind, dt, nd, idx, inner)
    spec = (dt, t, 1, idx, True, True, va, 1, None, gather, bias is not None)
    name = f"ember_{kind}_igemm"
    kv = math.prod(geo[2 * nd : 3 * nd])
    size, blocks, kernel, stride = (geo[j * nd : (j + 1) * nd] for j in range(4))
    values = {"g_kv": kv, "g_L": L, "g_cg": cg}
    for d in range(nd):
        values.update({f"g_sz{d}": size[d], f"g_bl{d}": blocks[d], f"g_kr{d}": kernel[d], f"g_st{d}": stride[d]})
    args = [M, N, K, None, None, K, 1, None, x.offset, 0, 0, None]
    args += [groups, M * K, cg * x.strides[1], M * L]
    args += [kv, x.strides[1], L, x.strides[0], cg, *geo, *x.strides[2:]]
    args += [v for nm in _gather_divisors(nd) for v in magic(values[nm])]
    args += [L, out.shape[1] * L]  # the column map: c_rs, c_img
    if bias is not None:
        args += [None, bias.offset, bias.strides[0]]

    def make() -> tuple[str, list[Any]]:
        npi = np.dtype(np.int32 if idx == "int" else np.int64)
        cmap = ColumnMap(_COLUMNS.code, _COLUMNS.params, (npi, npi))
        return gemm_source(*spec, name=name, c_map=cmap)

    knl, gsize, lsize = tiled_launch(rt, t, ("conv_igemm", kind, *spec), make, name, M, N, groups)
    plan = _Plan(f"{kind}_igemm", out.shape, knl, gsize, lsize, args, (), wlay)
    if key is not None and _settled(rt, t, M, N, K):
        _keep(key, plan)
    _fire_gemm(rt, plan, x, wv, bias, out)


def _fire_gemm(rt: Runtime, plan: _Plan, x: CLArray, wc: CLArray, bias: CLArray | None, out: CLArray) -> None:
    """Launch a conv GEMM's plan: A the plan's layout of ``wc``'s buffer from its offset (``wc``: the
    contiguous weight or a view of it), copied contiguous at each call where that layout is not."""
    from .elementwise import contiguous  # noqa: PLC0415

    shape, strides = plan.more
    wmat = contiguous(rt, wc.with_layout(shape, strides, wc.offset))
    args = plan.args.copy()
    args[3], args[4], args[7], args[11] = wmat.buf, wmat.offset, x.buf, out.block.raw
    if bias is not None:
        args[-3] = bias.buf
    CALLS[plan.kind] += 1
    rt.launch(plan.knl, plan.gsize, plan.lsize, args)


#: the weight gradient's per-image partials may take this many elements even where g and x are smaller
#: (one round for W3's batch of 512: 512 x 64 x 288 = 9.4M)
PARTIALS_FLOOR = 2**24


def _sum_source(dt: str, idx: str) -> tuple[str, list[Any]]:
    """out[i] (+)= sum over s < S of part[s * T + i] (``add``: onto out): a work-group of 32 outputs x 8
    partial sums (loads coalesced along i), added in local memory; deterministic."""
    c = ctype(dt)
    acc = "float" if c.is_wide_float else c.compute
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    lines = [
        preamble({dt}),
        f"#define IDX {idx}",
        "__kernel __attribute__((reqd_work_group_size(32, 8, 1)))",
        f"void ember_sum_partials(const IDX T, const IDX S, const int add, __global const {c.storage}* restrict part,",
        f"                        __global {c.storage}* restrict out) {{",
        "  const int tx = get_local_id(0), ty = get_local_id(1);",
        "  const IDX i = (IDX)get_group_id(0) * 32 + tx;",
        f"  __local {acc} sums[8][33];",
        f"  {acc} a = 0;",
        f"  if (i < T) for (IDX s = ty; s < S; s += 8) a += ({acc}){c.load('part', 's * T + i')};",
        "  sums[ty][tx] = a;",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "  if (ty == 0 && i < T) {",
        f"    {acc} t = 0;",
        "    for (int j = 0; j < 8; j++) t += sums[j][tx];",
        f"    if (add) t += ({acc}){c.load('out', 'i')};",
        f"    {c.store('out', 'i', 't')}",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n", [npi, npi, np.dtype(np.int32), None, None]


def conv_weight_grad(
    rt: Runtime, g: CLArray, x: CLArray, kernel: Any, stride: Any, padding: Pads, dilation: Any, groups: int,
    tiling: Tiling | None = None,
) -> CLArray:  # fmt: skip
    """conv's weight gradient (C_out, C_in / groups, *kernel): per (image, group) a GEMM of g[n] (M, L)
    against the image's im2col columns gathered on the fly (no unfold buffer), into per-image partials
    (images, G, M, C_in/G * KV) summed over the images by one kernel (no atomics: deterministic). The
    partials of a round hold at most max(g, x, :data:`PARTIALS_FLOOR`) elements (more images: rounds,
    each summed onto the last)."""
    from .elementwise import contiguous  # noqa: PLC0415

    key = None
    if tiling is None:
        key = _gemm_key("wgrad", rt, x, g, None, kernel, stride, padding, dilation, groups, PARTIALS_FLOOR)
        plan = _planned(key)
        if plan is not None:
            out = rt.empty(plan.shape, g.dtype)
            _wgrad_rounds(rt, plan, contiguous(rt, g) if plan.more[0] else g, x, out)
            return out
    n, cout = g.shape[:2]
    cin = x.shape[1]
    cg, M = cin // groups, cout // groups
    kernel = tuple(kernel)
    nd = len(kernel)
    kv = math.prod(kernel)
    Ncols = cg * kv
    blocks = tuple(g.shape[2:])
    L = math.prod(blocks)
    out = rt.empty((cout, cg) + kernel, g.dtype)
    if out.size == 0:
        return out
    if n == 0 or L == 0:
        return _zero_fill(rt, out, None)
    lay = g.strides[2:]
    copy_g = any(st != math.prod(blocks[d + 1 :]) for d, st in enumerate(lay) if blocks[d] > 1)
    if copy_g:
        g = contiguous(rt, g)  # A's rows (one output channel's positions) read with one stride
    T = groups * M * Ncols  # one image's partial
    step = max(1, min(n, max(g.size, x.size, PARTIALS_FLOOR) // T))  # images per round
    dt = g.dtype.name
    idx = _index(step * T, _extent(g), _extent(x))
    t = tiling or _conv_tiling(rt, dt, M, Ncols, L)
    va = t.vw if dt in ("float32", "float64") else 1
    gather = _gather("wgrad", dt, nd, idx)
    spec = (dt, t, 2, idx, True, False, va, 1, None, gather, False)
    name = "ember_wgrad_igemm"
    geo = _geo(tuple(x.shape[2:]), blocks, kernel, tuple(stride), tuple(dilation), tuple(padding))
    size = x.shape[2:]
    values = {"g_kv": kv, "g_L": L, "g_cg": cg}
    for d in range(nd):
        values.update({f"g_sz{d}": size[d], f"g_bl{d}": blocks[d], f"g_kr{d}": kernel[d], f"g_st{d}": stride[d]})
    tail = [g.strides[0], M * g.strides[1], x.strides[0], cg * x.strides[1], T, M * Ncols]
    tail += [kv, x.strides[1], L, x.strides[0], cg, *geo, *x.strides[2:]]
    tail += [v for nm in _gather_divisors(nd) for v in magic(values[nm])]

    def make_sum() -> tuple[str, str, list[Any]]:
        source, types = _sum_source(dt, idx)
        return source, "ember_sum_partials", types

    summer, _ = rt.kernel(("conv_sum_partials", dt, idx), make_sum)
    knl, gsize, lsize = tiled_launch(
        rt, t, ("conv_igemm", "wgrad", *spec), lambda: gemm_source(*spec, name=name), name, M, Ncols, groups
    )
    # (more: whether g is copied contiguous first, images per round, the partials' shape, the GEMM's
    # sizes and groups, one image's partial, the sum's kernel; args: the GEMM's after the buffers)
    more = (copy_g, step, (step, groups, M, Ncols), M, Ncols, L, groups, T, summer)
    plan = _Plan("wgrad_igemm", out.shape, knl, gsize, lsize, tail, (), more)
    if key is not None and _settled(rt, t, M, Ncols, L):
        _keep(key, plan)
    _wgrad_rounds(rt, plan, g, x, out)
    return out


def _wgrad_rounds(rt: Runtime, plan: _Plan, g: CLArray, x: CLArray, out: CLArray) -> None:
    """The weight gradient's rounds: per round of ``step`` images a GEMM per (image, group) into the
    partials, summed onto ``out`` (``g`` already copied where the plan says)."""
    _, step, pshape, M, Ncols, L, groups, T, summer = plan.more
    part = rt.empty(pshape, g.dtype)
    n = g.shape[0]
    g0, g1, _ = plan.gsize
    for s0 in range(0, n, step):
        m = min(step, n - s0)
        args = [M, Ncols, L, g.buf, g.offset + s0 * g.strides[0], g.strides[1], 1]
        args += [x.buf, x.offset + s0 * x.strides[0], 0, 0, part.buf, m, groups, *plan.args]
        CALLS["wgrad_igemm"] += 1
        rt.launch(plan.knl, (g0, g1, m * groups), plan.lsize, args)
        rt.launch(summer, (-(-T // 32) * 32, 8), (32, 8), [T, m, int(s0 > 0), part.buf, out.buf])


def _zero_fill(rt: Runtime, out: CLArray, bias: CLArray | None) -> CLArray:
    """An empty reduction (no input channels): the output is the bias, or zeros."""
    from .elementwise import copy_into  # noqa: PLC0415

    if bias is None:
        zero = rt.upload(np.zeros(1, dtype=out.dtype.numpy), out.dtype)
        copy_into(rt, out, zero.with_layout((), (), 0))
    else:
        nd = out.ndim - 2
        copy_into(rt, out, bias.with_layout(out.shape, (0, bias.strides[0]) + (0,) * nd, bias.offset))
    return out


def _gemm_key(op: str, rt: Runtime, x: CLArray, w: CLArray, bias: CLArray | None, *params: Any) -> Any:
    """A conv GEMM plan's key: the operands' geometry, the parameters, and what the kernel choice
    reads besides (device kind, tuning epoch, the index-width rule, which tests replace)."""
    b = None if bias is None else (bias.dtype, bias.shape, bias.strides, bias.offset)
    return (op, rt, x.dtype, x.shape, x.strides, x.offset, w.dtype, w.shape, w.strides, w.offset, b, *params,
            rt.is_cpu, rt.compute_units, _TUNING[0], _index)  # fmt: skip


def conv(
    rt: Runtime, x: CLArray, w: CLArray, bias: CLArray | None, stride: Any, padding: Pads, dilation: Any,
    groups: int, tiling: Tiling | None = None,
) -> CLArray:  # fmt: skip
    """Convolution (N, C_in, *size) x (C_out, C_in / groups, *kernel) as an implicit GEMM."""
    from .elementwise import contiguous  # noqa: PLC0415

    key = None
    if tiling is None:  # (a tiling given: a test's or the tuner's, not planned)
        key = _gemm_key("conv", rt, x, w, bias, stride, padding, dilation, groups)
        plan = _planned(key)
        if plan is not None:
            out = rt.empty(plan.shape, x.dtype)
            _fire_gemm(rt, plan, x, contiguous(rt, w), bias, out)
            return out
    n, cin = x.shape[:2]
    cout = w.shape[0]
    kernel = tuple(w.shape[2:])
    blocks = _blocks(x.shape[2:], kernel, tuple(stride), tuple(padding), tuple(dilation))
    out = rt.empty((n, cout) + blocks, x.dtype)
    K = (cin // groups) * math.prod(kernel)
    if out.size == 0:
        return out
    if K == 0:
        return _zero_fill(rt, out, bias)
    geo = _geo(x.shape[2:], blocks, kernel, tuple(stride), tuple(dilation), tuple(padding))
    wc = contiguous(rt, w)
    cg, kv, og = cin // groups, math.prod(kernel), cout // groups
    wv = wc.with_layout((groups, og, cg, kv), (og * cg * kv, cg * kv, kv, 1), wc.offset)  # A[g][co, ci, tap]
    _implicit(rt, "conv", x, wv, bias, out, og, K, geo, groups, tiling, key)
    return out


def conv_transpose(
    rt: Runtime, x: CLArray, w: CLArray, bias: CLArray | None, size: Any, stride: Any, padding: Pads,
    dilation: Any, groups: int, tiling: Tiling | None = None,
) -> CLArray:  # fmt: skip
    """Transposed convolution (conv's input gradient): x (N, C_in, *blocks), w (C_in, C_out / groups, *kernel)."""
    from .elementwise import contiguous  # noqa: PLC0415

    key = None
    if tiling is None:
        key = _gemm_key("transpose", rt, x, w, bias, size, stride, padding, dilation, groups)
        plan = _planned(key)
        if plan is not None:
            out = rt.empty(plan.shape, x.dtype)
            _fire_gemm(rt, plan, x, contiguous(rt, w), bias, out)
            return out
    n, cin = x.shape[:2]
    cog = w.shape[1]
    kernel = tuple(w.shape[2:])
    kv = math.prod(kernel)
    size = tuple(size)
    out = rt.empty((n, cog * groups) + size, x.dtype)
    cg = cin // groups
    K = cg * kv
    if out.size == 0:
        return out
    if K == 0:
        return _zero_fill(rt, out, bias)
    # A[g][co, ci, tap] = w[g * cg + ci, co, tap]: a (G, C_out/G, C_in/G, KV) view of the weight
    wc = contiguous(rt, w)
    wt = wc.with_layout((groups, cog, cg, kv), (cg * cog * kv, kv, cog * kv, 1), wc.offset)
    geo = _geo(size, tuple(x.shape[2:]), kernel, tuple(stride), tuple(dilation), tuple(padding))
    _implicit(rt, "transpose", x, wt, bias, out, cog, K, geo, groups, tiling, key)
    return out

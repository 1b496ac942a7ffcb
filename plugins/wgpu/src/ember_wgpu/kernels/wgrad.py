"""conv's weight gradient as an implicit GEMM, split over the batch (no unfold buffer, no atomics).

Per group, dW[co, ci * KV + tap] = sum over (image, position) of g[img, co, pos] * x[img, ci, window
of pos at tap]: a GEMM of M = C_out / G rows and N = C_in / G * KV columns whose K runs over all
N_img * L output positions. K is cut into S slices; one launch of the tiled matmul
(``matmul.tiled``) computes a (slice, group) per z with both operands gathered in its loaders (A
from g, B from x's windows: k decoded into image and position), writing S partials that a second
kernel sums in a fixed order (deterministic). S = 1 writes the result directly. S is chosen so the
GEMM has enough workgroups for a GPU (W3's first conv: 32 x 9 outputs, K = 401k) and its
partials stay small. Float partials are f32; integers wrap as the dtype does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.dtypes import float32

from .. import settings
from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from . import matmul as mm
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, header, prod
from .conv import implicit_wins, unfold
from .reduce import combine, identity, reduce

__all__ = ["conv_weight_grad", "by_unfold", "native_wins", "CALLS"]

#: native launches (``gemm``: the sliced GEMM, ``sum``: the partials' sum; ``unfold``: calls of
#: :func:`by_unfold`), for tests and counts
CALLS = {"gemm": 0, "sum": 0, "unfold": 0}
#: GEMM workgroups aimed at (enough to fill a large GPU several times over)
TARGET_GROUPS = 1024
#: the same on a CPU adapter (lavapipe), whose few threads 64 workgroups keep busy: more slices there
#: only grow the partials (W3's second conv at batch 64: 49 slices, 3.4 MiB, the step's peak in use)
CPU_TARGET_GROUPS = 64
#: the shortest slice of K worth a partial (a slice is at least this many positions)
MIN_SLICE = 256
#: the partials' sum: 256 threads a workgroup, 32 outputs (coalesced) x 8 lanes striding over the
#: slices, or 8 x 32 where few outputs would make few workgroups (W3's first conv: 288 outputs, 1004 slices)
_SUM_WIDE, _SUM_NARROW = 32, 8
_SUM_FEW = 128


def native_wins(rt: Runtime) -> bool:
    """Whether the native weight gradient runs: where conv runs as implicit GEMM (unless
    ``EMBER_WGPU_IMPLICIT_CONV=0``), unless ``EMBER_WGPU_NATIVE_WGRAD=0`` (core's unfold + matmul)."""
    return implicit_wins(rt) and settings.native_wgrad()


def _carry(names: list[str], dims: list[str], outer: str) -> str:
    """Statements bringing mixed-radix coordinates back into range after the last one grew:
    ``names`` outermost first, each below its ``dims`` entry, the overflow of the first into ``outer``."""
    lines = []
    for i in reversed(range(len(names))):
        x, d, up = names[i], dims[i], names[i - 1] if i else outer
        lines.append(f"loop {{ if ({x} < {d}) {{ break; }} {x} = {x} - {d}; {up} = {up} + 1u; }}")
    return " ".join(lines)


def _gathers(t: WType, nd: int, bk: int) -> tuple[mm.Gather, mm.Gather]:
    """A[gm, gk] from g and B[gk, gn = ci * KV + tap] from x's windows, gk the position in this
    z's slice (``c0``) of the batch's N_img * L output positions; zero past the end or in padding.

    A load slot's column and its row within a k-step are fixed over the k loop, so each slot keeps
    the (image, output coordinates) of the position it loads, found by division once (``col``) and
    moved on by ``bk`` positions after each load with carries (``advance``; ``bk`` below a row's
    length takes a carry or two): no division in the loop. B's column part (channel, tap) is the
    slot's too."""
    kpos = "let kg = c0 * P.w_ks + gk; if (kg < P.w_kt) { "
    a_col = "let ak0_$e = c0 * P.w_ks + akr_$e; var aimg_$e = ak0_$e / P.w_l; var apos_$e = ak0_$e - aimg_$e * P.w_l;"
    a_code = kpos + f"v = {t.load('A[aoff + aimg_$e * P.w_gn + gm * P.sam + apos_$e]')}; }}"
    a_advance = f" apos_$e = apos_$e + {bk}u; " + _carry(["apos_$e"], ["P.w_l"], "aimg_$e")
    a = mm.Gather(a_code, (("w_ks", "u32"), ("w_kt", "u32"), ("w_l", "u32"), ("w_gn", "u32")), a_col, "", a_advance)
    fields = [("w_xn", "u32"), ("g_kv", "u32"), ("g_cs", "u32")]
    for i in range(nd):
        fields += [(f"g_{n}{i}", "u32") for n in ("bl", "kr", "st", "dl", "lo", "sz", "sx")]
    col = ["let ci_$e = gn_$e / P.g_kv;", "var kq_$e = gn_$e - ci_$e * P.g_kv;"]
    for i in reversed(range(nd)):
        col += [f"let wk{i}_$e = kq_$e % P.g_kr{i};", f"kq_$e = kq_$e / P.g_kr{i};"] if i else ["let wk0_$e = kq_$e;"]
    col += [f"let dk{i}_$e = i32(wk{i}_$e * P.g_dl{i}) - i32(P.g_lo{i});" for i in range(nd)]
    col.append("let xc_$e = boff + ci_$e * P.g_cs;")
    col += [
        "let bk0_$e = c0 * P.w_ks + bkr_$e;",
        "var bimg_$e = bk0_$e / P.w_l;",
        "var oq_$e = bk0_$e - bimg_$e * P.w_l;",
    ]
    for i in reversed(range(nd)):
        col += [f"var wq{i}_$e = oq_$e % P.g_bl{i};", f"oq_$e = oq_$e / P.g_bl{i};"] if i else ["var wq0_$e = oq_$e;"]
    lines, inside, addr = [kpos], [], "xc_$e + bimg_$e * P.w_xn"
    for i in range(nd):
        lines.append(f"let p{i} = i32(wq{i}_$e * P.g_st{i}) + dk{i}_$e;")
        inside.append(f"p{i} >= 0 && p{i} < i32(P.g_sz{i})")
        addr += f" + u32(p{i}) * P.g_sx{i}"
    lines.append(f"if ({' && '.join(inside)}) {{ v = {t.load(f'B[{addr}]')}; }} }}")
    last = f"wq{nd - 1}_$e"
    advance = f" {last} = {last} + {bk}u; " + _carry(
        [f"wq{i}_$e" for i in range(nd)], [f"P.g_bl{i}" for i in range(nd)], "bimg_$e"
    )
    return a, mm.Gather(" ".join(lines), tuple(fields), " ".join(col), "", advance)


def _config(rt: Runtime, m: int, n: int) -> mm.Config:
    """A tile fitted to the gradient's few rows and columns (W3: 32 x 9 and 64 x 288): 32 or 64 wide
    per side, 4 x 4 per thread, strided thread blocks (``split``). On an H100 (wgrad_bench.py,
    2026-12-06) 32x32 and 64x64 with 4 x 4 a thread ran W3's two gradients in 0.177 and 0.421 ms,
    where 32x16 and 64x64 with 8 x 8 (fewer threads a workgroup) took 0.288 and 1.096 ms."""
    bm = 32 if m <= 32 else 64
    bn = 32 if n <= 32 else 64
    cfg = mm.Config(bm, bn, 16, 4, 4, False, True)
    return cfg if mm.fits(rt, cfg) else mm.CONFIGS["scalar"]


def _slices(k_total: int, tiles: int, bk: int, target: int = TARGET_GROUPS) -> tuple[int, int]:
    """(S, slice length): about ``target`` workgroups, slices of at least :data:`MIN_SLICE`."""
    s = max(1, min(ceil_div(target, tiles), k_total // MIN_SLICE))
    ks = ceil_div(ceil_div(k_total, s), bk) * bk
    return ceil_div(k_total, ks), ks


def _sum_build(tp: WType, t: WType, f16: bool, sx: int):  # type: ignore[no-untyped-def]
    """out[e] = sum over s of partial[s, e]: ``sx`` outputs per workgroup, 256 / ``sx`` lanes each
    striding over S, then the lanes added in order in workgroup memory (deterministic)."""
    sy = 256 // sx
    params = ParamBlock([("e", "u32"), ("s", "u32")])
    cls, ct = tp.cls, tp.compute
    tot = t.wrap("tot") if t.narrow else "tot"
    lane = f"part[r * {sx}u + lid.x]"
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> X: array<{tp.storage}>;
@group(0) @binding(2) var<storage, read_write> Y: array<{t.storage}>;
var<workgroup> part: array<{ct}, {sx * sy}>;
@compute @workgroup_size({sx}, {sy})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{
  {GROUP_ID}
  let e = gid_lin * {sx}u + lid.x;
  var acc = {identity("sum", cls)};
  if (e < P.e) {{
    for (var s = lid.y; s < P.s; s = s + {sy}u) {{ acc = {combine("sum", cls, "acc", tp.load("X[s * P.e + e]"))}; }}
  }}
  part[lid.y * {sx}u + lid.x] = acc;
  workgroupBarrier();
  if (lid.y == 0u && e < P.e) {{
    var tot = part[lid.x];
    for (var r = 1u; r < {sy}u; r = r + 1u) {{ tot = {combine("sum", cls, "tot", lane)}; }}
    Y[e] = {t.store(tot)};
  }}
}}"""
    return body, params, ("r", "w")


class _WPlan:
    """One geometry's launches: the GEMM's plan, the number of slices, the sum's launch."""

    __slots__ = ("gemm", "slices", "sum_pipe", "sum_params", "sum_groups", "shape", "partial", "copy_g")

    def __init__(self, gemm: mm._Plan, slices: int, summer: Any, shape: tuple[int, ...], partial: Any,
                 copy_g: bool) -> None:  # fmt: skip
        self.gemm, self.slices, self.shape, self.partial, self.copy_g = gemm, slices, shape, partial, copy_g
        self.sum_pipe, self.sum_params, self.sum_groups = summer


def _flat_positions(g: WgpuArray) -> bool:
    """Whether g's output positions of one (image, channel) are one run of stride 1."""
    blocks = g.shape[2:]
    return all(st == prod(blocks[d + 1 :]) for d, st in enumerate(g.strides[2:]) if blocks[d] > 1)


def conv_weight_grad(rt: Runtime, g: WgpuArray, x: WgpuArray, kernel: tuple[int, ...], stride: tuple[int, ...],
                     padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...], groups: int,
                     config: mm.Config | None = None, slices: int | None = None) -> WgpuArray:  # fmt: skip
    """dL/dw (C_out, C_in / groups, *kernel) of conv from its output's gradient ``g`` (N, C_out,
    *blocks) and input ``x``, for float and 32-bit-or-narrower integer dtypes (``config``: force the
    GEMM's tiling; ``slices``: the number of K slices). Planned once per geometry (``rt.plans``)."""
    key = ("conv_wgrad", x.dtype, x.shape, x.strides, x.offset, g.shape, g.strides, g.offset, kernel, stride,
           tuple(map(tuple, padding)), dilation, groups, config, slices)  # fmt: skip
    plan = rt.plans.get(key)
    if plan is None:
        n_img, cout = g.shape[:2]
        cin = x.shape[1]
        cg, m = cin // groups, cout // groups
        kv = prod(kernel)
        shape = (cout, cg) + tuple(kernel)
        length = prod(g.shape[2:])
        if prod(shape) == 0:
            return rt.empty(shape, x.dtype)
        if n_img * length == 0:
            return ew.fill(rt, shape, 0, x.dtype)
        plan = _plan(rt, g, x, tuple(kernel), stride, padding, dilation, groups, m, cg * kv, config, slices)
        if len(rt.plans) >= ew.MAX_PLANS:
            rt.plans.clear()
        rt.plans[key] = plan
    out = rt.empty(plan.shape, x.dtype)
    gm = ew.contiguous(rt, g) if plan.copy_g else g
    gemm = plan.gemm
    dst = out if plan.slices == 1 else rt.empty((plan.slices, prod(plan.shape)), plan.partial)
    rt.dispatch(gemm.pipe, gemm.params, [gm.storage.raw, x.storage.raw, dst.storage.raw], gemm.groups, "wgrad_igemm")
    CALLS["gemm"] += 1
    if plan.slices > 1:
        rt.dispatch(plan.sum_pipe, plan.sum_params, [dst.storage.raw, out.storage.raw], plan.sum_groups, "wgrad_sum")
        CALLS["sum"] += 1
    return out


def _plan(rt: Runtime, g: WgpuArray, x: WgpuArray, kernel: tuple[int, ...], stride: tuple[int, ...],
          padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...], groups: int, m: int, n: int,
          config: mm.Config | None, slices: int | None) -> _WPlan:  # fmt: skip
    nd = len(kernel)
    n_img = g.shape[0]
    blocks, size = tuple(g.shape[2:]), tuple(x.shape[2:])
    length = prod(blocks)
    copy_g = not _flat_positions(g)
    gs = (g.shape[1] * length, length) if copy_g else (g.strides[0], g.strides[1])
    t = rt.types[x.dtype]
    f16 = rt.types.uses_f16(x.dtype)
    cfg = config or _config(rt, m, n)
    k_total = n_img * length
    tiles = ceil_div(m, cfg.bm) * ceil_div(n, cfg.bn) * groups
    if slices is None:
        s, ks = _slices(k_total, tiles, cfg.bk, TARGET_GROUPS if mm._on_gpu(rt) else CPU_TARGET_GROUPS)
    else:
        ks = ceil_div(k_total, max(1, min(slices, k_total)))
        s = ceil_div(k_total, ks)
    tp = WType(float32, "f", "f32", rt.types[float32].host) if t.cls == "f" and s > 1 else t
    ga, gb = _gathers(t, nd, cfg.bk)
    pipe, params = compile_kernel(
        rt,
        ("conv_wgrad", t.name, tp.name, nd, cfg),
        lambda: mm.tiled(t, tp, 2, cfg, f16, False, True, False, False, gb, False, ga),
        "wgrad_igemm",
    )
    cg = x.shape[1] // groups
    values = {"m": m, "n": n, "k": ks, "batch": s * groups, "a_off": 0 if copy_g else g.offset, "b_off": x.offset}
    values.update({"sam": gs[1] & 0xFFFFFFFF, "d0": s, "d1": groups, "as1": (m * gs[1]) & 0xFFFFFFFF})
    values.update({"bs1": (cg * x.strides[1]) & 0xFFFFFFFF, "w_ks": ks, "w_kt": k_total, "w_l": length})
    values.update({"w_gn": gs[0] & 0xFFFFFFFF, "w_xn": x.strides[0] & 0xFFFFFFFF, "g_kv": prod(kernel)})
    values["g_cs"] = x.strides[1] & 0xFFFFFFFF
    for i in range(nd):
        values.update({f"g_bl{i}": blocks[i], f"g_kr{i}": kernel[i], f"g_st{i}": stride[i], f"g_dl{i}": dilation[i]})
        values.update({f"g_lo{i}": padding[i][0], f"g_sz{i}": size[i], f"g_sx{i}": x.strides[2 + i] & 0xFFFFFFFF})
    gemm = mm._Plan(pipe, params.pack(values), (ceil_div(n, cfg.bn), ceil_div(m, cfg.bm), min(s * groups, 65535)), ())
    shape = (g.shape[1], cg) + kernel
    summer: tuple[Any, bytes, tuple[int, int, int]] = (None, b"", (0, 0, 0))
    if s > 1:
        total = prod(shape)
        sx = _SUM_WIDE if ceil_div(total, _SUM_WIDE) >= _SUM_FEW else _SUM_NARROW
        sp, sparams = compile_kernel(
            rt, ("conv_wgrad_sum", tp.name, t.name, sx), lambda: _sum_build(tp, t, f16, sx), "wgrad_sum"
        )
        summer = (sp, sparams.pack({"e": total, "s": s}), grid(ceil_div(total, sx)))
    return _WPlan(gemm, s, summer, shape, tp.dtype, copy_g)


def by_unfold(rt: Runtime, g: WgpuArray, x: WgpuArray, kernel: tuple[int, ...], stride: tuple[int, ...],
              padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...], groups: int,
              matmul: Callable[[WgpuArray, WgpuArray], WgpuArray]) -> WgpuArray:  # fmt: skip
    """The dtypes the tiled GEMM lacks (complex64, 64-bit integers): unfold, a batched ``matmul``
    per (image, group) and a sum over the images, as core's composite does."""
    n_img, cout = g.shape[:2]
    cin = x.shape[1]
    cg, m = cin // groups, cout // groups
    kc = cg * prod(kernel)
    shape = (cout, cg) + tuple(kernel)
    length = prod(g.shape[2:])
    if n_img * length == 0 or prod(shape) == 0:
        return ew.fill(rt, shape, 0, x.dtype)
    CALLS["unfold"] += 1
    cols = unfold(rt, x, kernel, stride, padding, dilation, 0.0)  # (N, C_in * KV, L), contiguous
    cols_t = cols.with_layout((n_img, groups, length, kc), (cin * prod(kernel) * length, kc * length, 1, length), 0)
    gc = ew.contiguous(rt, g)
    gg = gc.with_layout((n_img, groups, m, length), (cout * length, m * length, length, 1), 0)
    per_image = matmul(gg, cols_t)  # (N, G, M, kc)
    total = ew.contiguous(rt, reduce(rt, per_image, "sum", (0,), False))
    return WgpuArray(total.storage, shape, x.dtype)

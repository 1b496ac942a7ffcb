"""Batched, broadcasting matmul: a parameterised family of tiled kernels staging A and B in workgroup memory.

A :class:`Config` (BM, BN, BK, TM, TN, vec) makes a workgroup of (BN/TN) x (BM/TM) threads
computing a BM x BN tile of C; each thread a TM x TN block (rows ``ly * TM + i``, columns
``lx * TN + j``) read as vec4s from the k-major shared tiles (rows padded by 4 against bank
conflicts). Operands are read through their strides, so transposed views cost no copy; batch
axes broadcast with stride 0. ``vec``: an operand whose contiguous axis is aligned to 4 is bound
as ``array<vec4<f32>>`` and loaded 16 bytes at a time. Which config runs is the tuner's choice
(:mod:`ember_wgpu.tune`), within the adapter's workgroup limits; else a heuristic. Accumulation
is f32 for float dtypes, exact wrapping arithmetic for integers; 64-bit integers use a plain kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ember.dtypes import float32
from ember.tuning import AUTOTUNE_FLOPS, layout_of
from ember.views import fold_shared_b

from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from . import skinny
from .common import ParamBlock, ceil_div, compile_kernel, header, prod
from .reduce import reduce

__all__ = ["matmul", "CONFIGS", "Config", "Gather", "Columns", "fits", "choose", "tiled"]


@dataclass(frozen=True)
class Config:
    """Tile of C per workgroup (bm x bn), k-step bk, block per thread (tm x tn), vec4 global loads;
    ``split``: strided 4-wide thread blocks, unrolled k, fma; ``pf``: register prefetch, two buffers;
    ``sw``: workgroups walk the tiles in bands of sw tile rows, column by column (1: row by row), so
    the workgroups resident at once share A's and B's panels in the L2 cache."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    vec: bool = False
    split: bool = False
    pf: bool = False
    sw: int = 1

    @property
    def threads(self) -> tuple[int, int]:
        return self.bn // self.tn, self.bm // self.tm

    def valid(self) -> bool:
        ok = self.bm % self.tm == 0 and self.bn % self.tn == 0 and self.tm % 4 == 0 and self.tn % 4 == 0
        return ok and self.bk % 4 == 0 and self.sw >= 1

    def as_dict(self) -> dict[str, Any]:
        names = ("bm", "bn", "bk", "tm", "tn", "vec", "split", "pf") + (("sw",) if self.sw > 1 else ())
        return {f: getattr(self, f) for f in names}


#: named configs; "deep" halves the barriers of "large" where the adapter has the workgroup memory
CONFIGS = {
    "deep": Config(128, 128, 16, 8, 8, True),
    "large": Config(128, 128, 8, 8, 8, True),
    "small": Config(64, 64, 16, 4, 4, True),
    "scalar": Config(64, 64, 16, 4, 4, False),
    "odd": Config(32, 64, 8, 4, 8, True),
    #: the fast-SGEMM layout: 128x128x8, 8x8 per thread, vec4 loads, strided blocks, prefetch
    "split_pf": Config(128, 128, 8, 8, 8, True, True, True),
    "odd_split_pf": Config(32, 64, 8, 4, 8, True, True, True),
}
_MAX_Z = 65535


def shared_bytes(c: Config) -> int:
    return (2 if c.pf else 1) * c.bk * (c.bm + 4 + c.bn + 4) * 4


def fits(rt: Runtime, c: Config) -> bool:
    """Whether ``c`` respects the adapter's limits: workgroup memory, invocations and sizes."""
    wx, wy = c.threads
    lim = rt.limits
    return (
        c.valid()
        and shared_bytes(c) <= rt.shared_bytes
        and wx * wy <= int(lim.get("max-compute-invocations-per-workgroup", 256))
        and wx <= int(lim.get("max-compute-workgroup-size-x", 256))
        and wy <= int(lim.get("max-compute-workgroup-size-y", 256))
    )


def _batch_fields(nb: int) -> list[tuple[str, str]]:
    fields = []
    for k in range(nb):
        fields += [(f"d{k}", "u32"), (f"as{k}", "u32"), (f"bs{k}", "u32")]
    return fields


def _batch_decode(nb: int) -> str:
    lines = ["var rem = z;", "var aoff = P.a_off;", "var boff = P.b_off;"]
    for k in range(nb - 1, -1, -1):
        lines += [f"let c{k} = rem % P.d{k};", f"rem = rem / P.d{k};"]
        lines += [f"aoff = aoff + c{k} * P.as{k};", f"boff = boff + c{k} * P.bs{k};"]
    return "\n    ".join(lines)


def _params(nb: int, extra: tuple[tuple[str, str], ...] = (), bias: bool = False) -> ParamBlock:
    base = [("m", "u32"), ("n", "u32"), ("k", "u32"), ("batch", "u32"), ("a_off", "u32"), ("b_off", "u32")]
    base += [("sam", "u32"), ("sak", "u32"), ("sbk", "u32"), ("sbn", "u32")]
    tail = [("r_off", "u32"), ("r_s", "u32")] if bias else []
    return ParamBlock(base + _batch_fields(nb) + list(extra) + tail)


@dataclass(frozen=True)
class Gather:
    """B read by WGSL ``code`` that sets ``v`` from ``gk``, ``gn`` (in range) and ``boff`` (A: ``gm``,
    ``gk``, ``aoff``), may read the batch coordinates ``c0``...; its params. ``col``: what a load slot
    keeps over the k loop (its column and its row within a k-step are fixed), computed once per slot
    before the loop from ``gn_$e`` and ``bkr_$e`` (A: ``gm_$e``, ``akr_$e``; its names end in ``_$e``,
    and ``code`` reads them so: ``$e`` becomes the slot); ``advance``: statements after each of the
    slot's loads (its state moved on by one k-step); ``step`` (B only): statements once per k-step
    from ``kb`` (the step's first row, the same for the whole workgroup)."""

    code: str
    fields: tuple[tuple[str, str], ...]
    col: str = ""
    step: str = ""
    advance: str = ""


@dataclass(frozen=True)
class Columns:
    """C written through a column map: ``code`` sets ``cn_$j`` (the column's offset) from ``col_$j``
    (its index, < n), once per column a thread stores; a row steps ``P.c_rs`` and the batch's
    base is ``z * P.m * P.c_rs``. Its params follow the matmul's."""

    code: str
    fields: tuple[tuple[str, str], ...]


def _tiled(  # type: ignore[no-untyped-def]
    t: WType,
    tout: WType,
    nb: int,
    cfg: Config,
    f16: bool,
    a_mfast: bool,
    b_kfast: bool,
    va: bool,
    vb: bool,
    gather: Gather | None = None,
    bias: bool = False,
    a_gather: Gather | None = None,
    columns: Columns | None = None,
):
    """The tiled kernel of ``cfg``. Shared tiles are k-major (``As[k][m]``, ``Bs[k][n]``) vec4
    rows padded by 4, so a thread reads its TM rows and TN columns with TM/4 + TN/4 vec4 loads.
    ``a_mfast``/``b_kfast``: the operand is transposed in memory, so neighbouring threads load
    along M (for A) or K (for B) to keep reads coalesced. ``va``/``vb``: that operand is bound as
    vec4s (its contiguous axis, offset and strides are multiples of 4) and loaded 4 at a time.
    ``cfg.split``: a thread's rows and columns are groups of 4 strided by the workgroup's extent
    (neighbouring threads read neighbouring vec4s: no bank conflicts, coalesced stores), the k
    loop unrolled, fma. ``cfg.pf``: two shared buffers, the next k-slice loaded into registers
    while the current one is computed, one barrier per step. ``gather``/``a_gather``: B or A read
    by WGSL code (:class:`Gather`; A's sets ``v`` from ``gm``, ``gk`` and ``aoff``), not through strides.
    ``columns``: C's columns mapped (:class:`Columns`: implicit-GEMM conv's images x positions)."""
    bm, bn, bk, tm, tn = cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn
    wx, wy = cfg.threads
    nt = wx * wy
    ct = {"f": "f32", "i": "i32", "u": "u32"}[t.cls]
    vt = f"vec4<{ct}>"
    zero = {"f": "0.0", "i": "0i", "u": "0u"}[t.cls]
    extra = (a_gather.fields if a_gather else ()) + (gather.fields if gather else ())
    params = _params(nb, extra + (columns.fields if columns else ()), bias)
    pa, pb = bm + 4, bn + 4  # row lengths in scalars (multiples of 4)
    na, nbv = bk * pa // 4, bk * pb // 4  # vec4s per shared buffer
    sa, sb = ("sa + ", "sb + ") if cfg.pf else ("", "")

    hoist: list[str] = []  # statements before the k loop (a gathered operand's slot parts)
    step_code = gather.step if gather else ""
    # each operand: (index statements, element type of v, load statements setting v, store statements)
    # A tile (BM x BK) into As[k][m]
    if va and not a_mfast:  # rows contiguous along k: 4 k at one m
        a_idx = f"let r = idx / {bk // 4}u; let c = (idx % {bk // 4}u) * 4u; let gm = m0 + r; let gk = kb + c;"
        a_vt, a_load = vt, "if (gm < P.m && gk < P.k) { v = A[(aoff + gm * P.sam + gk) / 4u]; }"
        a_put = (
            f"for (var e = 0u; e < 4u; e = e + 1u) {{ let s = (c + e) * {pa}u + r; As[{sa}s / 4u][s % 4u] = v[e]; }}"
        )
        a_units = bm * bk // 4
    elif va:  # columns contiguous along m: 4 m at one k
        a_idx = f"let r = (idx % {bm // 4}u) * 4u; let c = idx / {bm // 4}u; let gm = m0 + r; let gk = kb + c;"
        a_vt, a_load = vt, "if (gm < P.m && gk < P.k) { v = A[(aoff + gm + gk * P.sak) / 4u]; }"
        a_put = f"As[{sa}(c * {pa}u + r) / 4u] = v;"
        a_units = bm * bk // 4
    else:
        a_map = (f"idx % {bm}u", f"idx / {bm}u") if a_mfast else (f"idx / {bk}u", f"idx % {bk}u")
        a_idx = f"let r = {a_map[0]}; let c = {a_map[1]}; let gm = m0 + r; let gk = kb + c;"
        if a_gather and a_gather.col:  # the slot's fixed row and k offset, and its state, once
            for e in range(ceil_div(bm * bk, nt)):
                r_of, c_of = (x.replace("idx", f"(t + {e * nt}u)") for x in a_map)
                hoist.append(
                    f"let gm_{e} = m0 + {r_of}; let akr_{e} = {c_of};\n    " + a_gather.col.replace("$e", f"{e}")
                )
        a_read = a_gather.code if a_gather else f"v = {t.load('A[aoff + gm * P.sam + gk * P.sak]')};"
        a_vt, a_load = ct, f"if (gm < P.m && gk < P.k) {{ {a_read} }}" + (a_gather.advance if a_gather else "")
        a_put = f"let s = c * {pa}u + r; As[{sa}s / 4u][s % 4u] = v;"
        a_units = bm * bk
    # B tile (BK x BN) into Bs[k][n]
    if vb and not b_kfast:  # rows contiguous along n: 4 n at one k
        b_idx = f"let r = idx / {bn // 4}u; let c = (idx % {bn // 4}u) * 4u; let gk = kb + r; let gn = n0 + c;"
        b_vt, b_load = vt, "if (gk < P.k && gn < P.n) { v = B[(boff + gk * P.sbk + gn) / 4u]; }"
        b_put = f"Bs[{sb}(r * {pb}u + c) / 4u] = v;"
        b_units = bn * bk // 4
    elif vb:  # columns contiguous along k: 4 k at one n
        b_idx = f"let r = (idx % {bk // 4}u) * 4u; let c = idx / {bk // 4}u; let gk = kb + r; let gn = n0 + c;"
        b_vt, b_load = vt, "if (gk < P.k && gn < P.n) { v = B[(boff + gk + gn * P.sbn) / 4u]; }"
        b_put = (
            f"for (var e = 0u; e < 4u; e = e + 1u) {{ let s = (r + e) * {pb}u + c; Bs[{sb}s / 4u][s % 4u] = v[e]; }}"
        )
        b_units = bn * bk // 4
    else:
        b_map = (f"idx % {bk}u", f"idx / {bk}u") if b_kfast else (f"idx / {bn}u", f"idx % {bn}u")
        if gather and gather.col:  # the column's part once per slot (its gn fixed over the k loop)
            for e in range(ceil_div(bn * bk, nt)):
                r_of, c_of = (x.replace("idx", f"(t + {e * nt}u)") for x in b_map)
                hoist.append(
                    f"let gn_{e} = n0 + {c_of}; let bkr_{e} = {r_of};\n    " + gather.col.replace("$e", f"{e}")
                )
        b_read = gather.code if gather else f"v = {t.load('B[boff + gk * P.sbk + gn * P.sbn]')};"
        b_idx = f"let r = {b_map[0]}; let c = {b_map[1]}; let gk = kb + r; let gn = n0 + c;"
        b_vt, b_load = ct, f"if (gk < P.k && gn < P.n) {{ {b_read} }}" + (gather.advance if gather else "")
        b_put = f"let s = r * {pb}u + c; Bs[{sb}s / 4u][s % 4u] = v;"
        b_units = bn * bk

    def unit_loop(units: int, body: Callable[[int], str]) -> str:
        out = []
        for e in range(ceil_div(units, nt)):
            guard = f"if (idx < {units}u) " if (e + 1) * nt > units else ""
            code = body(e).replace("$e", f"{e}")  # a gathered operand's slot names
            out.append(f"{{\n      let idx = t + {e * nt}u;\n      {guard}{{\n        {code}\n      }}\n    }}")
        return "\n    ".join(out)

    def zero_of(ty: str) -> str:
        return f"{ty}({zero})" if ty == vt else zero

    def direct(ix: str, ty: str, load: str, put: str) -> Callable[[int], str]:
        return lambda e: f"{ix}\n        var v = {zero_of(ty)};\n        {load}\n        {put}"

    def fetch(ix: str, ty: str, load: str, reg: str) -> Callable[[int], str]:
        return lambda e: f"{ix}\n        var v = {zero_of(ty)};\n        {load}\n        {reg}{e} = v;"

    def store(ix: str, put: str, reg: str) -> Callable[[int], str]:
        return lambda e: f"{ix}\n        let v = {reg}{e};\n        {put}"

    qa, qb = tm // 4, tn // 4
    split = cfg.split
    decl_acc = "\n    ".join(f"var acc{i}_{j} = {vt}({zero});" for i in range(tm) for j in range(qb))
    lanes = "xyzw"

    def step(kk: str) -> list[str]:
        out = []
        for q in range(qa):
            col = f"ly + {q * wy}u" if split else f"ly * {qa}u + {q}u"
            out.append(f"let a{q} = As[{sa}{kk} * {pa // 4}u + {col}];")
        for q in range(qb):
            col = f"lx + {q * wx}u" if split else f"lx * {qb}u + {q}u"
            out.append(f"let b{q} = Bs[{sb}{kk} * {pb // 4}u + {col}];")
        for i in range(tm):
            a = f"a{i // 4}.{lanes[i % 4]}"
            for j in range(qb):
                if split and t.cls == "f":
                    out.append(f"acc{i}_{j} = fma({vt}({a}), b{j}, acc{i}_{j});")
                else:
                    out.append(f"acc{i}_{j} = acc{i}_{j} + {a} * b{j};")
        return out

    if split:  # unrolled: every shared-memory index a constant offset
        inner = []
        for kk in range(bk):
            inner.append("{")
            inner += ["  " + s for s in step(f"{kk}u")]
            inner.append("}")
        compute = "\n      ".join(inner)
    else:
        compute = (
            f"for (var kk = 0u; kk < {bk}u; kk = kk + 1u) {{\n        " + "\n        ".join(step("kk")) + "\n      }"
        )
    stores = []
    cols = [f"n0 + (lx + {(j // 4) * wx}u) * 4u + {j % 4}u" if split else f"n0 + lx * {tn}u + {j}u" for j in range(tn)]
    if columns:
        for j, col in enumerate(cols):
            stores.append(f"let col_{j} = {col};")
            stores.append(columns.code.replace("$j", f"{j}"))
    row_step = "P.c_rs" if columns else "P.n"
    for i in range(tm):
        row = f"m0 + (ly + {(i // 4) * wy}u) * 4u + {i % 4}u" if split else f"m0 + ly * {tm}u + {i}u"
        if bias:
            stores.append(f"let rb{i} = {t.load(f'R[P.r_off + (grp * P.m + min({row}, P.m - 1u)) * P.r_s]')};")
        for j in range(tn):
            v = f"acc{i}_{j // 4}.{lanes[j % 4]}" + (f" + rb{i}" if bias else "")
            v = tout.wrap(v) if tout.narrow else v
            col = f"col_{j}" if columns else cols[j]
            at = f"cn_{j}" if columns else col
            stores.append(
                f"if ({row} < P.m && {col} < P.n) {{ C[cbase + ({row}) * {row_step} + {at}] = {tout.store(v)}; }}"
            )
    if cfg.pf:
        n_a, n_b = ceil_div(a_units, nt), ceil_div(b_units, nt)
        regs = [f"var pra{e}: {a_vt};" for e in range(n_a)] + [f"var prb{e}: {b_vt};" for e in range(n_b)]
        get = step_code + "\n    " + unit_loop(a_units, fetch(a_idx, a_vt, a_load, "pra")) + "\n    "
        get += unit_loop(b_units, fetch(b_idx, b_vt, b_load, "prb"))
        put = unit_loop(a_units, store(a_idx, a_put, "pra")) + "\n    " + unit_loop(b_units, store(b_idx, b_put, "prb"))
        loop = f"""var buf = 0u;
    {chr(10).join("    " + r for r in regs).strip()}
    {{
    let kb = 0u;
    let sa = 0u;
    let sb = 0u;
    {get}
    {put}
    }}
    workgroupBarrier();
    for (var k0 = 0u; k0 < P.k; k0 = k0 + {bk}u) {{
      let more = k0 + {bk}u < P.k;
      if (more) {{
    let kb = k0 + {bk}u;
    {get}
      }}
      {{
      let sa = buf * {na}u;
      let sb = buf * {nbv}u;
      {compute}
      }}
      if (more) {{
    buf = buf ^ 1u;
    let kb = k0 + {bk}u;
    let sa = buf * {na}u;
    let sb = buf * {nbv}u;
    {put}
      }}
      workgroupBarrier();
    }}"""
    else:
        loop = f"""for (var k0 = 0u; k0 < P.k; k0 = k0 + {bk}u) {{
    let kb = k0;
    {step_code}
    {unit_loop(a_units, direct(a_idx, a_vt, a_load, a_put))}
    {unit_loop(b_units, direct(b_idx, b_vt, b_load, b_put))}
      workgroupBarrier();
      {compute}
      workgroupBarrier();
    }}"""
    nbuf = 2 if cfg.pf else 1
    a_elem = vt if va else t.storage
    b_elem = vt if vb else t.storage
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> A: array<{a_elem}>;
@group(0) @binding(2) var<storage, read> B: array<{b_elem}>;
@group(0) @binding(3) var<storage, read_write> C: array<{tout.storage}>;
{f"@group(0) @binding(4) var<storage, read> R: array<{t.storage}>;" if bias else ""}
var<workgroup> As: array<{vt}, {nbuf * na}>;
var<workgroup> Bs: array<{vt}, {nbuf * nbv}>;
@compute @workgroup_size({wx}, {wy})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) t: u32, @builtin(num_workgroups) nw: vec3<u32>) {{
  {_tile_origin(cfg)}
  let lx = lid.x;
  let ly = lid.y;
  for (var z = wid.z; z < P.batch; z = z + nw.z) {{
    {_batch_decode(nb)}
    let cbase = z * P.m * {row_step};
    {"let grp = c" + str(nb - 1) + ";" if bias else ""}
    {decl_acc}
    {chr(10).join("    " + h for h in hoist).strip()}
    {loop}
    {chr(10).join("    " + s for s in stores).strip()}
  }}
}}"""
    return body, params, ("r", "r", "w", "r") if bias else ("r", "r", "w")


def _tile_origin(cfg: Config) -> str:
    """WGSL setting the workgroup's tile corner (m0, n0): its ids, or with ``cfg.sw`` > 1 its place
    in a band of sw tile rows walked column by column (workgroups start in their linear id's order)."""
    if cfg.sw == 1:
        return f"let m0 = wid.y * {cfg.bm}u;\n  let n0 = wid.x * {cfg.bn}u;"
    sw = f"{cfg.sw}u"
    return "\n  ".join(
        [
            "let lin = wid.y * nw.x + wid.x;",
            f"let band = lin / ({sw} * nw.x);",
            f"let rows = min(nw.y - band * {sw}, {sw});",
            f"let in_band = lin - band * {sw} * nw.x;",
            f"let m0 = (band * {sw} + in_band % rows) * {cfg.bm}u;",
            f"let n0 = (in_band / rows) * {cfg.bn}u;",
        ]
    )


def _plain(t: WType, nb: int):  # type: ignore[no-untyped-def]
    """One thread per output element (64-bit integers)."""
    params = _params(nb)
    add = "i64_add" if t.cls in "lL" else None
    mul = "i64_mul" if t.cls in "lL" else None
    step = f"acc = {add}(acc, {mul}(A[aoff + m * P.sam + kk * P.sak], B[boff + kk * P.sbk + n * P.sbn]));"
    body = f"""@group(0) @binding(1) var<storage, read> A: array<{t.storage}>;
@group(0) @binding(2) var<storage, read> B: array<{t.storage}>;
@group(0) @binding(3) var<storage, read_write> C: array<{t.storage}>;
@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {{
  let n = g.x;
  let m = g.y;
  if (m >= P.m || n >= P.n) {{ return; }}
  for (var z = g.z; z < P.batch; z = z + nw.z) {{
    {_batch_decode(nb)}
    var acc = vec2<u32>(0u, 0u);
    for (var kk = 0u; kk < P.k; kk = kk + 1u) {{
      {step}
    }}
    C[z * P.m * P.n + m * P.n + n] = acc;
  }}
}}"""
    return body, params, ("r", "r", "w")


def _pick(rt: Runtime, m: int, n: int) -> Config:
    """The untuned choice: big tiles for big outputs, the deepest k-step the adapter's memory allows."""
    if m >= 512 and n >= 512:
        return CONFIGS["deep"] if fits(rt, CONFIGS["deep"]) else CONFIGS["large"]
    return CONFIGS["small"]


def choose(rt: Runtime, dtype: str, m: int, n: int, k: int, layout: str = "") -> Config:
    """The tuned config for this adapter, dtype, shape class and operand ``layout`` (``"tA"``, ``"tB"``,
    ``"tAtB"``: transposed operands, :mod:`ember.tuning`) if one is cached, else :func:`_pick`."""
    from .. import tune  # noqa: PLC0415  (tune imports this module)

    found = tune.lookup(rt, dtype, m, n, k, layout)
    return found if found is not None and fits(rt, found) else _pick(rt, m, n)


def _vec_ok(arr: WgpuArray, strides: list[int], fast: int, extent: int, dims: list[int]) -> bool:
    """Whether ``arr`` can be read as vec4s along axis ``fast`` (-1 or -2) of its matmul view."""
    other = -1 if fast == -2 else -2
    if strides[fast] != 1 or extent % 4 or arr.offset % 4 or strides[other] % 4:
        return False
    return all(s % 4 == 0 for s in dims) and arr.buffer.size % 16 == 0


class _Plan:
    """One matmul geometry's launch: pipeline, parameter bytes, workgroups, the output's shape."""

    __slots__ = ("pipe", "params", "groups", "shape")

    def __init__(self, pipe: Any, params: bytes, groups: tuple[int, int, int], shape: tuple[int, ...]) -> None:
        self.pipe = pipe
        self.params = params
        self.groups = groups
        self.shape = shape


#: (..., M, K) @ (K, N) with A's batch axes stepping by whole rows (a linear layer over (batch,
#: sequence, features)) runs as one (batch * M, K) @ (K, N) GEMM, tiled and tuned for its real size
#: (``ember.views.fold_shared_b``); the probe scripts switch it off to compare
FOLD_BATCH = True
#: a 2-D float32 product with few columns (N <= 16: a classifier's last layer and its weight
#: gradient) runs :mod:`.skinny`'s kernels, on any adapter (lavapipe too: 3-7x the tiled kernel's
#: speed there at 128-2048 rows); the probe scripts switch it off to compare
SKINNY = True


def matmul(rt: Runtime, a: WgpuArray, b: WgpuArray, config: Config | None = None) -> WgpuArray:
    """``a @ b`` for (..., M, K) @ (..., K, N) with broadcast batch axes (``config``: force a tiling).

    A geometry's launch (kernel choice, parameter bytes, grid) is made once and kept in ``rt.plans``
    under its operands' shapes, strides, offsets and dtype; :mod:`..tune` clears the plans when a
    tuned choice changes. Buffers are whole vec4s (the pool's, :meth:`Runtime._create_buffer`), so
    the vec4 checks depend on the key alone."""
    if config is None and (_repeats(a) or _repeats(b)) and _on_gpu(rt):
        a = ew.contiguous(rt, a) if _repeats(a) else a
        b = ew.contiguous(rt, b) if _repeats(b) else b
    if FOLD_BATCH and config is None and len(a.shape) > 2:  # (no closure made for a 2-D product)
        folded = fold_shared_b(a, b, lambda x, y: matmul(rt, x, y))
        if folded is not None:
            return folded
    key = ("matmul", a.dtype, a.shape, a.strides, a.offset, b.shape, b.strides, b.offset, config)
    plan = rt.plans.get(key)
    if plan is None:
        m, k = a.shape[-2:]
        n = b.shape[-1]
        shape = ew.broadcast_shape(a.shape[:-2], b.shape[:-2]) + (m, n)
        if prod(shape) == 0:
            return rt.empty(shape, a.dtype)
        if k == 0:
            return ew.fill(rt, shape, 0, a.dtype)
        if len(rt.plans) >= ew.MAX_PLANS:
            rt.plans.clear()
        if SKINNY and config is None and skinny.applies(a, b):
            plan = rt.plans[key] = skinny.plan(rt, a, b)
        else:
            slices = _slices(rt, a, b, config)
            plan = rt.plans[key] = slices or _plan(rt, a, b, config)
    if type(plan) is int:
        return _split_k(rt, plan, a, b)
    if type(plan) is skinny.Plan:
        return skinny.run(rt, plan, a, b)
    out = rt.empty(plan.shape, a.dtype)
    rt.dispatch(plan.pipe, plan.params, [a.storage.raw, b.storage.raw, out.storage.raw], plan.groups, "matmul")
    return out


#: split-K (:func:`_slices`): a 2-D GEMM on a GPU adapter whose output makes at most this many
#: tiles is cut along K into slices of at least :data:`SLICE_K`, aiming at :data:`SPLIT_TILES` tiles
#: in all, run as one batch of products and summed: W3's (512, 3136) @ (3136, 128) is 16 tiles of
#: 64 x 64 otherwise, each 3136 deep (the adapter does not say how many compute units it has)
SPLIT_BELOW, SPLIT_TILES, SLICE_K = 64, 256, 128


def _slices(rt: Runtime, a: WgpuArray, b: WgpuArray, config: Config | None) -> int:
    """How many K slices ``a @ b`` runs as (0: unsplit): 2-D float32 products of untuned size with
    few tiles on a GPU adapter, a slice count that divides K."""
    if config is not None or len(a.shape) != 2 or len(b.shape) != 2 or a.dtype is not float32:
        return 0
    (m, k), n = a.shape, b.shape[1]
    if m * n * k >= AUTOTUNE_FLOPS or k < 2 * SLICE_K:
        return 0
    if not _on_gpu(rt):
        return 0
    cfg = _pick(rt, m, n)
    tiles = ceil_div(m, cfg.bm) * ceil_div(n, cfg.bn)
    if tiles > SPLIT_BELOW:
        return 0
    # the partials (s, M, N) take at most the larger operand's bytes: a step's peak in use stays its own
    most = max(m * k, k * n) // (m * n)
    for s in range(min(SPLIT_TILES // tiles, k // SLICE_K, most), 1, -1):
        if k % s == 0:
            return s
    return 0


def _repeats(x: WgpuArray) -> bool:
    """Whether a matrix axis of ``x`` repeats one element (stride 0 over more than one: an expanded
    gradient such as ``sum()``'s ones): copied dense before a GPU's GEMM, whose vec4 loads need a
    unit stride (as opencl's; measured there: W4's two such products 12-13% faster with the copy)."""
    (r, c), (sr, sc) = x.shape[-2:], x.strides[-2:]
    return (sr == 0 and r > 1) or (sc == 0 and c > 1)


def _on_gpu(rt: Runtime) -> bool:
    """Whether ``rt``'s adapter is a GPU (not a CPU one such as lavapipe, whose threads a few tiles fill)."""
    return str(rt.adapter.info.get("adapter_type", "")).lower() != "cpu"


def _split_k(rt: Runtime, slices: int, a: WgpuArray, b: WgpuArray) -> WgpuArray:
    """``a @ b`` as ``slices`` products over K's slices (one batched GEMM into (slices, M, N)
    partials), then their sum."""
    (m, k), n = a.shape, b.shape[1]
    ks = k // slices
    (a_rs, a_cs), (b_rs, b_cs) = a.strides, b.strides
    av = a.with_layout((slices, m, ks), (ks * a_cs, a_rs, a_cs), a.offset)
    bv = b.with_layout((slices, ks, n), (ks * b_rs, b_rs, b_cs), b.offset)
    return reduce(rt, matmul(rt, av, bv), "sum", (0,), False)


def _plan(rt: Runtime, a: WgpuArray, b: WgpuArray, config: Config | None) -> _Plan:
    """The launch of ``a @ b`` (neither empty, K > 0): kernel, parameters and grid."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch_shape = ew.broadcast_shape(a.shape[:-2], b.shape[:-2])
    shape = batch_shape + (m, n)
    sa = a.broadcast_strides(batch_shape + (m, k))
    sb = b.broadcast_strides(batch_shape + (k, n))
    # drop batch axes of size 1; keep the rest (at least one field set for the decode)
    dims = [(d, sa[i], sb[i]) for i, d in enumerate(batch_shape) if d != 1]
    nb = len(dims)
    values = {
        "m": m, "n": n, "k": k, "batch": prod(batch_shape), "a_off": a.offset, "b_off": b.offset,
        "sam": sa[-2] & 0xFFFFFFFF, "sak": sa[-1] & 0xFFFFFFFF, "sbk": sb[-2] & 0xFFFFFFFF, "sbn": sb[-1] & 0xFFFFFFFF,
    }  # fmt: skip
    for i, (d, x, y) in enumerate(dims):
        values[f"d{i}"], values[f"as{i}"], values[f"bs{i}"] = d, x & 0xFFFFFFFF, y & 0xFFFFFFFF
    t = rt.types[a.dtype]
    batch = values["batch"]
    z = min(batch, _MAX_Z)
    if t.cls in "lL":
        pipe, params = compile_kernel(rt, ("matmul64", t.name, nb), lambda: _plain(t, nb), "matmul_int64")
        return _Plan(pipe, params.pack(values), (ceil_div(n, 16), ceil_div(m, 16), z), shape)
    a_mfast = sa[-2] == 1 and sa[-1] != 1
    b_kfast = sb[-2] == 1 and sb[-1] != 1
    cfg = config or choose(rt, t.name, m, n, k, layout_of(a_mfast, b_kfast))
    f16 = rt.types.uses_f16(a.dtype)
    vec = cfg.vec and t.storage in ("f32", "i32", "u32")
    va = vec and _vec_ok(a, list(sa), -2 if a_mfast else -1, m if a_mfast else k, [d[1] for d in dims])
    vb = vec and _vec_ok(b, list(sb), -2 if b_kfast else -1, k if b_kfast else n, [d[2] for d in dims])
    pipe, params = compile_kernel(
        rt,
        ("matmul", t.name, nb, cfg, a_mfast, b_kfast, va, vb),
        lambda: _tiled(t, t, nb, cfg, f16, a_mfast, b_kfast, va, vb),
        f"matmul_{cfg.bm}x{cfg.bn}x{cfg.bk}_{t.name}",
    )
    groups = (ceil_div(n, cfg.bn), ceil_div(m, cfg.bm), z)
    return _Plan(pipe, params.pack(values), groups, shape)


tiled = _tiled  # the generator, reused by implicit-GEMM conv (conv.py)

"""Skinny GEMM: ``a @ b`` for 2-D ``a`` (M, K) with M*K large and few output columns (N <= :data:`MAX_N`).

Such a product is bound by reading A once (W2 at batch 4096: a (4096, 4096) activation times a
(4096, 10) weight, and its weight gradient through a transposed view). The tiled family
(:mod:`.gemm_source`) spends a 64-wide output tile on 10 columns and re-reads A per tile; this
kernel reads A once, coalesced, and keeps each row's N sums in registers.

One work-group owns TMR = TMI x VW rows and one K slice; its TMI x TKI items split the slice's
tiles of TK columns of A among TKI groups. Per tile the work-group stages B's TK rows in local
memory (N padded to a multiple of 4: every item reads the same float4s, a broadcast), and

- A M-fast (a transposed view, ``mode="m"``): each item reads its VW rows of A straight from
  global memory, neighbouring items neighbouring rows (one vector load where A's rows are unit
  stride);
- A K-fast (row-major, ``mode="k"``): the work-group stages a TMR x TK tile of A in local memory,
  transposed (float4 loads along K, coalesced), and each item reads its VW rows from there.

With ``Config.pf`` (the default) each item loads its part of the next tile (A's, and B's) into
registers before computing on this one, so its loads stay in flight through the compute and the
barriers. At the end the TKI partial sums of each (row, column) are added in local memory. With S > 1
K slices (too few row blocks to fill the device) the kernel writes (S, M, N) partials that
:func:`.reduce.reduce` sums, as :func:`.matmul._split_k` does. 16-bit floats accumulate in float.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.dtypes import as_dtype

from .array import CLArray
from .cltypes import NP_OF_C, ctype
from .codegen import preamble
from .elementwise import cast_program, run_program
from .reduce import reduce
from .runtime import Runtime

__all__ = ["MAX_N", "MIN_ELEMENTS", "CALLS", "Config", "CONFIGS", "SkinnyPlan"]
__all__ += ["applies", "plan", "run", "skinny_source"]

#: the most output columns the kernel takes: each item holds VW x N sums in registers (4 x 16 = 64
#: at most) and reads B's row as N/4 float4 broadcasts per (k, item). Up to 16 the tiled family's
#: narrowest GPU tile (64 columns) wastes at least three quarters of its work; from about 32 on,
#: the tiled kernels' reuse of A across a wide tile pays and the register budget here runs out.
MAX_N = 16
#: the fewest elements of A (M * K) the kernel is used for: below, the product takes microseconds
#: whichever kernel runs, and the tiled family's programs are built anyway
MIN_ELEMENTS = 1 << 18
#: work-groups to aim for per compute unit (the K slices are chosen for this), and the fewest
#: columns of A in a slice: (S, M, N) partials are then at most N / MIN_SLICE of A's size
GROUPS_PER_CU = 2
MIN_SLICE = 256
_DTYPES = ("float32", "float64", "float16")

#: launches of the skinny kernel in this process (tests check that it ran)
CALLS = 0


@dataclass(frozen=True)
class Config:
    """tmi items along M, each vw rows; tki items along K; tk columns of A per tile; pf: each item
    loads its part of the next tile into registers before it computes on this one (the loads are
    in flight through the compute and the barriers)."""

    tmi: int
    vw: int
    tki: int
    tk: int
    pf: bool = False

    @property
    def wg(self) -> int:
        return self.tmi * self.tki

    @property
    def tmr(self) -> int:
        return self.tmi * self.vw


#: M-fast: 64 items x float4 rows = 256 rows, 4 items along K (each of a tile's 16 columns goes to
#: one of them: 4 float4 loads of the next tile in flight per item through this one's compute);
#: K-fast: a 256 x 32 tile of A in local memory (32 KiB in float32; 16 columns in float64), loaded
#: 8 float4s per item a tile ahead, 128 items x 2 rows, 2 along K
CONFIGS = {"m": Config(64, 4, 4, 16, pf=True), "k": Config(128, 2, 2, 32, pf=True)}


def _acc(dt: str) -> str:
    c = ctype(dt)
    return "float" if c.is_wide_float else c.compute


def local_bytes(mode: str, cfg: Config, dt: str, n: int) -> int:
    """Local memory the kernel declares: B's tile, A's tile (K-fast), the final sums."""
    size = NP_OF_C[_acc(dt)].itemsize
    np_ = -(-n // 4) * 4
    a_tile = cfg.tk * (cfg.tmr + 1) if mode == "k" else 0
    return size * (cfg.tk * np_ + a_tile + cfg.tki * cfg.tmr)


def skinny_source(
    dt: str, out_dt: str, n: int, mode: str, cfg: Config, idx: str, vec: bool, aligned: bool
) -> tuple[str, list[Any]]:
    """OpenCL C of ``ember_skinny`` and its scalar argument types.

    Arguments: M, K, A + (off, row stride, col stride), B + (off, row, col), C (S, M, N) written in
    ``out_dt``, the K slice length (a multiple of ``cfg.tk``; slice ``get_group_id(1)``). ``vec``:
    A's fast axis has stride 1 (M-fast: VW-wide loads of rows; K-fast: float4 loads along K);
    ``aligned``: those loads may go through a vector pointer (the caller checked the offset and
    the other stride)."""
    c, co = ctype(dt), ctype(out_dt)
    acc = _acc(dt)
    V = f"{acc}4"
    tmi, vw, tki, tk = cfg.tmi, cfg.vw, cfg.tki, cfg.tk
    wg, tmr = cfg.wg, cfg.tmr
    np_ = -(-n // 4) * 4
    assert tk % tki == 0 and tk % 4 == 0, "a tile splits among the items, in float4s"
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    params = ["const IDX M", "const IDX K"]
    for x in "AB":
        params += [f"__global const {c.storage}* restrict {x}"]
        params += [f"const IDX {x.lower()}_{f}" for f in ("off", "rs", "cs")]
    params += [f"__global {co.storage}* restrict C", "const IDX kslice"]
    types: list[Any] = [npi, npi, None, npi, npi, npi, None, npi, npi, npi, None, npi]
    lanes = "0123456789abcdef"
    vec_rows = mode == "m" and vec and vw > 1

    def rl(v: int) -> str:  # an item's v-th row, within the work-group's block
        return f"({vw} * mi + {v})" if vec_rows else f"(mi + {v * tmi})"

    fma = "fma({a}, {b}, {s})" if c.kind == "f" else "{s} + {a} * {b}"

    W = f"{c.compute}{vw if mode == 'm' else 4}"  # (a vector load's type)

    def update(avals: list[str]) -> list[str]:
        """The sums' update by column k0 + kk of A (a tile's kk-th), ``avals`` setting a0.. to the
        item's rows' elements of it; B's row kk from local memory as float4 broadcasts."""
        body = list(avals)
        for q in range(np_ // 4):
            body.append(f"const {V} b{q} = *(__local const {V}*)&Bs[kk][{4 * q}];")
            for e in range(4):
                if 4 * q + e < n:
                    for v in range(vw):
                        s = f"s{v}_{4 * q + e}"
                        body.append(f"{s} = {fma.format(a=f'a{v}', b=f'b{q}.s{e}', s=s)};")
        return body

    def a_column(hot: bool, kx: str = "k0 + kk") -> list[str]:
        """Statements setting a0.. from global memory (M-fast) at column ``kx``, or from the staged
        tile (K-fast). ``hot``: the item's rows are all in A, one vector load where they are adjacent."""
        if mode == "k":
            return [f"const {acc} a{v} = As[kk][{rl(v)}];" for v in range(vw)]
        body = [f"__global const {c.storage}* ap = A + a_off + ({kx}) * a_cs;"]
        if hot and vec_rows:
            load = f"*(__global const {W}*)(ap + r0)" if aligned else f"vload{vw}(0, ap + r0)"
            return body + [f"const {W} w = {load};", *(f"const {acc} a{v} = w.s{lanes[v]};" for v in range(vw))]
        # (rows past M are clamped into A: their sums are never stored)
        return body + [f"const {acc} a{v} = ({acc}){c.load('ap', f'ro{v}')};" for v in range(vw)]

    def columns(hot: bool) -> list[str]:
        """This item's columns of a tile, ki, ki + tki, ...: ``hot``, a whole tile as straight-line
        code (a loop of constant trip count, unrolled, no branch between its loads); else a loop
        that stops at the slice's end."""
        out = ["#pragma unroll"] if hot else []
        out += [f"for (int j = 0; j < {tk // tki}; j++) {{", f"  const int kk = ki + j * {tki};"]
        if not hot:
            out.append("  if (k0 + kk >= kend) break;")
        return out + ["  " + s for s in update(a_column(hot))] + ["}"]

    per = tk // tki  # (an item's columns per tile)
    stage_b = [
        f"for (int l = lid; l < {tk * np_}; l += {wg}) {{",
        f"  const int kk = l / {np_}, j = l % {np_};",
        "  const IDX k = k0 + kk;",
        f"  Bs[kk][j] = (k < kend && j < {n}) ? ({acc}){c.load('B', 'b_off + k * b_rs + j * b_cs')} : ({acc})0;",
        "}",
    ]
    regs: list[str] = []  # cfg.pf: the registers holding the next tile's loads
    pre: list[str] = []  # before the loop
    stage_a: list[str] = []
    compute: list[str] = []
    if mode == "k":  # a whole tile in A: straight-line loads; else each element checked (zero outside)
        units = tmr * tk // 4 if vec else tmr * tk
        assert units % wg == 0, "the tile's loads split evenly among the items"
        if vec:
            ptr = "A + a_off + m * a_rs + k"
            load = f"*(__global const {W}*)({ptr})" if aligned else f"vload4(0, {ptr})"
            head = [f"const int r = l / {tk // 4}, q = l % {tk // 4};", "const IDX m = m0 + r, k = {kb} + 4 * q;"]
            put = [f"As[4 * q + {e}][r] = ({acc})w.s{e};" for e in range(4)]
            fast = [*head, f"const {W} w = {load};", *put]
            edge = [*head, f"{W} w = ({W})(0);", "if (m < M) {"]
            edge += [f"  if (k + {e} < kend) w.s{e} = {c.load('A', f'a_off + m * a_rs + k + {e}')};" for e in range(4)]
            edge += ["}", *put]
            fetch = [*head, f"p{{i}} = {load};"]
            put_reg = [head[0], *(f"As[4 * q + {e}][r] = ({acc})p{{i}}.s{e};" for e in range(4))]
            regs = [f"{W} " + ", ".join(f"p{i}" for i in range(units // wg)) + ";"]
        else:
            head = [f"const int r = l / {tk}, kk = l % {tk};", "const IDX m = m0 + r, k = {kb} + kk;"]
            val = f"({acc}){c.load('A', 'a_off + m * a_rs + k * a_cs')}"
            fast = [*head, f"As[kk][r] = {val};"]
            edge = [*head, f"As[kk][r] = (m < M && k < kend) ? {val} : ({acc})0;"]
            fetch = [*head, f"p{{i}} = {val};"]
            put_reg = [head[0], "As[kk][r] = p{i};"]
            regs = [f"{acc} " + ", ".join(f"p{i}" for i in range(units // wg)) + ";"]

        def each(lines: list[str], kb: str, pad: str) -> list[str]:
            """``lines`` once per load of this item in a whole tile, straight-line."""
            out = []
            for i in range(units // wg):
                body = [x.replace("{kb}", kb).replace("{i}", str(i)) for x in lines]
                out += [f"{pad}{{ const int l = lid + {i * wg};", *(pad + "  " + x for x in body), pad + "}"]
            return out

        edge_loop = [f"  for (int l = lid; l < {units}; l += {wg}) {{"]
        edge_loop += ["    " + x.replace("{kb}", "k0") for x in edge] + ["  }"]
        if cfg.pf:
            pre = [*regs, f"const bool rows_in = m0 + {tmr} <= M;", f"bool have = rows_in && kbeg + {tk} <= kend;"]
            pre += ["if (have) {", *each(fetch, "kbeg", "  "), "}"]
            stage_a = ["if (have) {", *each(put_reg, "k0", "  "), "} else {", *edge_loop, "}"]
            compute = [f"have = rows_in && k0 + {2 * tk} <= kend;", "if (have) {"]
            compute += [*each(fetch, f"(k0 + {tk})", "  "), "}"]
        else:
            stage_a = [f"if (m0 + {tmr} <= M && k0 + {tk} <= kend) {{", *each(fast, "k0", "  "), "} else {"]
            stage_a += [*edge_loop, "}"]
        compute += columns(True)  # (the staged tiles are zero past the slice and past M)
    rows: list[str] = []  # M-fast: each item's rows (clamped into A: a row past M is computed, not stored)
    if mode == "m":
        if vec_rows:
            rows += [f"const IDX r0 = m0 + {vw} * mi;", f"const bool full = r0 + {vw} <= M;"]
        else:
            rows += ["const bool full = true;"]
        rows += [f"const IDX ro{v} = min(m0 + {rl(v)}, M - 1) * a_rs;" for v in range(vw)]
        if cfg.pf:  # registers p<j>: the item's j-th column of the next tile (vector rows: p<j>_<v> else)

            def fetch_m(kb: str) -> list[str]:
                out = []
                for j in range(per):
                    got = a_column(True, f"{kb} + ki + {j * tki}")
                    got = [x for x in got if not (vec_rows and x.startswith(f"const {acc} a"))]
                    sets = [f"p{j} = w;"] if vec_rows else [f"p{j}_{v} = a{v};" for v in range(vw)]
                    out += ["{", *("  " + x for x in got + sets), "}"]
                return out

            if vec_rows:
                regs = [f"{W} " + ", ".join(f"p{j}" for j in range(per)) + ";"]
            else:
                regs = [f"{acc} " + ", ".join(f"p{j}_{v}" for j in range(per) for v in range(vw)) + ";"]
            pre = [*regs, f"bool have = full && kbeg + {tk} <= kend;", "if (have) {"]
            pre += ["  " + x for x in fetch_m("kbeg")] + ["}"]
            hot = []
            for j in range(per):
                if vec_rows:
                    cur = [f"const {W} c{j} = p{j};"]
                else:
                    cur = [f"const {acc} c{j}_{v} = p{j}_{v};" for v in range(vw)]
                hot += cur
            hot += [f"have = full && k0 + {2 * tk} <= kend;", "if (have) {"]
            hot += ["  " + x for x in fetch_m(f"(k0 + {tk})")] + ["}"]
            for j in range(per):
                if vec_rows:
                    avals = [f"const {acc} a{v} = c{j}.s{lanes[v]};" for v in range(vw)]
                else:
                    avals = [f"const {acc} a{v} = c{j}_{v};" for v in range(vw)]
                hot += [f"{{ const int kk = ki + {j * tki};", *("  " + x for x in update(avals)), "}"]
            compute = ["if (have) {", *("  " + x for x in hot), "} else {"]
            compute += ["  " + x for x in columns(False)] + ["}"]
        else:
            compute = [f"if (full && k0 + {tk} <= kend) {{", *("  " + x for x in columns(True)), "} else {"]
            compute += ["  " + x for x in columns(False)] + ["}"]
    b_pre: list[str] = []
    b_next: list[str] = []
    if cfg.pf:  # B's next tile too: each item's (at most a few) elements in registers pb<i>
        nb = -(-(tk * np_) // wg)

        def fetch_b(kb: str) -> list[str]:
            out = []
            for i in range(nb):
                guard = f"if (l < {tk * np_}) " if (i + 1) * wg > tk * np_ else ""
                out += [
                    f"{{ const int l = lid + {i * wg};",
                    f"  {guard}{{",
                    f"    const int kk = l / {np_}, j = l % {np_};",
                ]
                out += [f"    const IDX k = {kb} + kk;", f"    pb{i} = (k < kend && j < {n}) ? {b_val} : ({acc})0;"]
                out += ["  }", "}"]
            return out

        b_val = f"({acc}){c.load('B', 'b_off + k * b_rs + j * b_cs')}"
        b_pre = [f"{acc} " + ", ".join(f"pb{i} = 0" for i in range(nb)) + ";", *fetch_b("kbeg")]
        b_next = fetch_b(f"(k0 + {tk})")
        stage_b = []
        for i in range(nb):
            guard = f"if (l < {tk * np_}) " if (i + 1) * wg > tk * np_ else ""
            stage_b += [f"{{ const int l = lid + {i * wg};", f"  {guard}Bs[l / {np_}][l % {np_}] = pb{i};", "}"]
    store = []
    out_at = "(sl * M + m) * {n} + {j}"
    if tki == 1:
        for v in range(vw):
            store += [f"{{ const IDX m = m0 + {rl(v)};", "  if (m < M) {"]
            store += [f"    {co.store('C', out_at.format(n=n, j=j), f's{v}_{j}')}" for j in range(n)]
            store += ["  }", "}"]
    else:
        for j in range(n):
            store += [f"red[ki][{rl(v)}] = s{v}_{j};" for v in range(vw)]
            store += ["barrier(CLK_LOCAL_MEM_FENCE);", f"for (int r = lid; r < {tmr}; r += {wg}) {{"]
            total = " + ".join(f"red[{i}][r]" for i in range(tki))
            store += ["  const IDX m = m0 + r;", f"  if (m < M) {{ {co.store('C', out_at.format(n=n, j=j), total)} }}"]
            store += ["}", "barrier(CLK_LOCAL_MEM_FENCE);"]
    align = 32 if acc == "double" else 16
    sums = ", ".join(f"s{v}_{j} = 0" for v in range(vw) for j in range(n))
    lines = [
        preamble({dt, out_dt}),
        f"#define IDX {idx}",
        f"__kernel __attribute__((reqd_work_group_size({wg}, 1, 1)))",
        "void ember_skinny(" + ", ".join(params) + ") {",
        f"  const int lid = get_local_id(0), mi = lid % {tmi}, ki = lid / {tmi};",
        f"  const IDX m0 = (IDX)get_group_id(0) * {tmr}, sl = get_group_id(1);",
        "  const IDX kbeg = sl * kslice, kend = min(K, kbeg + kslice);",
        f"  __local {acc} Bs[{tk}][{np_}] __attribute__((aligned({align})));",
        *([f"  __local {acc} As[{tk}][{tmr + 1}];"] if mode == "k" else []),
        *([f"  __local {acc} red[{tki}][{tmr}];"] if tki > 1 else []),
        f"  {acc} {sums};",
        *("  " + s for s in rows + pre + b_pre),
        f"  for (IDX k0 = kbeg; k0 < kend; k0 += {tk}) {{",
        *("    " + s for s in stage_b + stage_a),
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        *("    " + s for s in b_next + compute),
        "    barrier(CLK_LOCAL_MEM_FENCE);",
        "  }",
        *("  " + s for s in store),
        "}",
    ]
    return "\n".join(lines) + "\n", types


class SkinnyPlan:
    """A skinny product of one operand geometry, less its buffers: the kernel, its sizes and
    arguments (None where A's, B's and C's buffers go), the K slices and the partials' dtype."""

    __slots__ = ("M", "N", "slices", "part_dt", "knl", "gsize", "lsize", "args")

    def __init__(self, M: int, N: int, slices: int, part_dt: Any, knl: Any, gsize: Any, lsize: Any, args: Any) -> None:
        self.M, self.N, self.slices, self.part_dt = M, N, slices, part_dt
        self.knl, self.gsize, self.lsize, self.args = knl, gsize, lsize, args


_A, _B, _C = 2, 6, 10  # (the positions of the buffers in a plan's arguments)


def _mode(a: CLArray) -> str:
    M = a.shape[0]
    a_rs, a_cs = a.strides
    return "k" if M == 1 or abs(a_cs) <= abs(a_rs) else "m"


def _config(rt: Runtime, mode: str, dt: str, n: int) -> Config | None:
    """The work-group shape for ``mode`` that fits the device (a shorter tile where the local
    memory is short), or None."""
    cfg = CONFIGS[mode]
    for tk in (cfg.tk, cfg.tk // 2):
        c = Config(cfg.tmi, cfg.vw, cfg.tki, tk, cfg.pf)
        if c.wg <= rt.max_wg and local_bytes(mode, c, dt, n) <= rt.local_mem:
            return c
    return None


def applies(rt: Runtime, a: CLArray, b: CLArray) -> bool:
    """Whether ``a @ b`` (2-D, non-empty, K > 0) runs here: a GPU, N <= MAX_N, M * K >= MIN_ELEMENTS,
    a float dtype of the kernel's, a work-group shape that fits."""
    (M, K), N = a.shape, b.shape[1]
    dt = a.dtype.name
    if rt.is_cpu or N > MAX_N or M * K < MIN_ELEMENTS or dt not in _DTYPES or b.dtype.name != dt:
        return False
    return _config(rt, _mode(a), dt, N) is not None


def _slices(rt: Runtime, M: int, K: int, cfg: Config) -> tuple[int, int]:
    """(slices, slice length): about GROUPS_PER_CU work-groups per compute unit, slices of at
    least MIN_SLICE columns (a multiple of the tile)."""
    blocks = -(-M // cfg.tmr)
    want = max(1, min(-(-(GROUPS_PER_CU * rt.compute_units) // blocks), K // MIN_SLICE))
    per = -(-K // want)
    length = -(-per // cfg.tk) * cfg.tk
    return -(-K // length), length


def plan(rt: Runtime, a: CLArray, b: CLArray) -> SkinnyPlan:
    """The launch of ``a @ b`` for operands :func:`applies` accepted."""
    (M, K), N = a.shape, b.shape[1]
    dt = a.dtype.name
    mode = _mode(a)
    cfg = _config(rt, mode, dt, N)
    assert cfg is not None
    S, length = _slices(rt, M, K, cfg)
    part_dt = a.dtype if S == 1 or dt != "float16" else as_dtype("float32")
    a_rs, a_cs = a.strides
    b_rs, b_cs = b.strides
    word = NP_OF_C[ctype(dt).storage].itemsize == 4
    if mode == "m":
        vec = a_rs == 1 and dt != "float16"
        aligned = vec and word and a.offset % cfg.vw == 0 and a_cs % cfg.vw == 0
    else:
        vec = a_cs == 1 and dt != "float16"
        aligned = vec and word and a.offset % 4 == 0 and a_rs % 4 == 0
    ext = max(S * M * N, *(x.offset + sum(abs(s) * (d - 1) for d, s in zip(x.shape, x.strides)) for x in (a, b)))
    ext = max(ext, S * length)
    idx = "int" if ext < 2**31 - 2**20 else "long"
    spec = (dt, part_dt.name, N, mode, cfg, idx, vec, aligned)

    def make() -> tuple[str, str, list[Any]]:
        source, types = skinny_source(*spec)
        return source, "ember_skinny", types

    knl, _ = rt.kernel(("skinny", *spec), make)
    args = [M, K, None, a.offset, a_rs, a_cs, None, b.offset, b_rs, b_cs, None, length]
    gsize = (-(-M // cfg.tmr) * cfg.wg, S)
    return SkinnyPlan(M, N, S, part_dt, knl, gsize, (cfg.wg, 1), args)


def run(rt: Runtime, p: SkinnyPlan, a: CLArray, b: CLArray) -> CLArray:
    """``a @ b`` by plan ``p``: one launch, then the slices' sum and a cast where there are slices."""
    global CALLS
    CALLS += 1
    out = rt.empty((p.slices, p.M, p.N) if p.slices > 1 else (p.M, p.N), p.part_dt)
    args = p.args.copy()
    args[_A], args[_B], args[_C] = a.block.raw, b.block.raw, out.block.raw  # type: ignore[union-attr]
    rt.launch(p.knl, p.gsize, p.lsize, args)
    if p.slices > 1:
        out = reduce(rt, "sum", out, (0,), False)
    if out.dtype != a.dtype:
        out = run_program(rt, cast_program(out.dtype.name, a.dtype.name), [out], out.shape)[0]
    return out

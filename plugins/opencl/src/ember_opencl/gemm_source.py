"""OpenCL C of the GEMM family: the tiled local-memory kernels and the CPU vector kernel, as text.

Kept apart from which kernel runs and how it is launched (:mod:`.matmul`): the generator reads no
device. Each work-group computes a ``tm x tn`` tile of C; each work item a ``wm x wn`` block of it, in
chunks of ``chunk`` rows/columns strided across the tile (chunk 1: neighbouring items write
neighbouring columns; chunk 4: each item reads float4s from local memory). A and B are read
through their strides (a transposed operand is just other strides, a broadcast batch is stride
0), staged ``tk`` deep in local memory (padded rows against bank conflicts; ``db``: two buffers
and one barrier per step); the loader walks whichever axis is contiguous, ``vw`` elements at a
time with vector loads where that axis has stride 1. 16-bit floats accumulate in float. The same
generator serves implicit-GEMM convolution (:mod:`.conv`): an operand can be a gather.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .cltypes import NP_OF_C, ctype
from .codegen import preamble, unravel

__all__ = [
    "Tiling",
    "local_bytes",
    "Gather",
    "ColumnMap",
    "hoisted",
    "LAYOUT_BITS",
    "gemm_source",
    "FDIV_INT",
    "FDIV_LONG",
    "magic",
    "vector_source",
]


@dataclass(frozen=True)
class Tiling:
    """Tile of C per work-group (tm x tn), k-step tk, block per work item (wm x wn); global load
    vector width vw, work-item chunk (1 or 4), double buffering db, register prefetch rp, and sw:
    work-groups walk the tiles in bands of sw tile rows, column by column (1: row by row), so the
    groups running at once share A's and B's panels in the L2 cache."""

    tm: int
    tn: int
    tk: int
    wm: int
    wn: int
    vw: int = 1
    chunk: int = 1
    db: bool = False
    rp: bool = False
    sw: int = 1

    @property
    def threads(self) -> tuple[int, int]:
        return self.tn // self.wn, self.tm // self.wm

    def valid(self) -> bool:
        """Whether the tile divides into work items, chunks and vector loads."""
        ok = self.tm % self.wm == 0 and self.tn % self.wn == 0 and self.chunk in (1, 4)
        ok = ok and self.wm % self.chunk == 0 and self.wn % self.chunk == 0 and self.vw in (1, 2, 4)
        ok = ok and self.sw >= 1
        return ok and self.tk % self.vw == 0 and self.tm % self.vw == 0 and self.tn % self.vw == 0

    def as_dict(self) -> dict[str, Any]:
        names = ("tm", "tn", "tk", "wm", "wn", "vw", "chunk", "db", "rp") + (("sw",) if self.sw > 1 else ())
        return {f: getattr(self, f) for f in names}


def _tile_origin(t: Tiling, idx: str) -> list[str]:
    """The work-group's tile corner (m0, n0): its group ids, or with ``t.sw`` > 1 its place in a band
    of sw tile rows walked column by column (the launch order of the groups is their linear id)."""
    if t.sw == 1:
        return [f"const {idx} n0 = ({idx})get_group_id(0) * {t.tn}, m0 = ({idx})get_group_id(1) * {t.tm};"]
    return [
        "const int gx = get_num_groups(0), gy = get_num_groups(1);",
        f"const int lin = get_group_id(1) * gx + get_group_id(0), band = lin / ({t.sw} * gx);",
        f"const int rows = min(gy - band * {t.sw}, {t.sw}), in_band = lin - band * {t.sw} * gx;",
        f"const {idx} m0 = ({idx})(band * {t.sw} + in_band % rows) * {t.tm}, n0 = ({idx})(in_band / rows) * {t.tn};",
    ]


def _acc_type(dt: str) -> str:
    c = ctype(dt)
    return "float" if c.is_wide_float else c.compute


def local_bytes(t: Tiling, dt: str) -> int:
    """Local memory the kernel of ``t`` declares for ``dt``."""
    pad = 4 if t.chunk == 4 else 1
    size = NP_OF_C[_acc_type(dt)].itemsize
    return (2 if t.db else 1) * t.tk * (t.tm + pad + t.tn + pad) * size


@dataclass(frozen=True)
class Gather:
    """An operand read by generated statements instead of strides (implicit-GEMM conv).

    ``code`` sets ``v`` from ``go`` (row of A / column of B) and ``gk``, both in range;
    ``params`` and ``types`` are the extra kernel arguments it reads. ``col`` (optional) are
    statements that depend on ``go`` only, declaring values ``code`` reads: when each work item
    stages one fixed row / column of the tile at every k-step, they run once per kernel (before the
    k loop, ``go`` possibly out of range: no memory reads there), else beside ``code``. ``step``
    (optional) likewise depend on ``go`` and the k-step's first row ``kb`` only (``code`` then reads
    row ``kb + k`` through ``k``): once per k-step where ``col`` is hoisted. ``row`` (optional)
    depend on ``gk`` only: once per k-step where each work item stages one fixed k of the tile (the
    loader walks k fastest and the work-group's size is a multiple of ``tk``)."""

    code: tuple[str, ...]
    params: tuple[str, ...] = ()
    types: tuple[Any, ...] = ()
    col: tuple[str, ...] = ()
    step: tuple[str, ...] = ()
    row: tuple[str, ...] = ()


@dataclass(frozen=True)
class ColumnMap:
    """Where column ``n`` of C lives when C is not row-major (M, N) per batch entry: ``code`` sets
    ``cn`` from ``n`` (in range), element (m, n) is then ``c_base + m * c_rs + cn``; ``params`` /
    ``types`` are extra kernel arguments (``c_rs`` among them), after the gathers'. Implicit-GEMM conv
    runs the images of a batch as columns (n = image * L + position) of an NCHW output."""

    code: tuple[str, ...]
    params: tuple[str, ...] = ()
    types: tuple[Any, ...] = ()


def hoisted(t: Tiling, which: str, kfast: bool, gather: Gather | None) -> bool:
    """Whether every work item stages the same row (A) / column (B) of the tile at every k-step, so a
    gather's ``col`` statements run once per kernel: the loader walks the tile k-major (the row or
    column index fastest) and the work-group's size is a multiple of the tile's width."""
    rtn, rtm = t.threads
    return gather is not None and bool(gather.col) and not kfast and (rtn * rtm) % (t.tm if which == "A" else t.tn) == 0


def _loader(
    which: str,
    t: Tiling,
    acc: str,
    c: Any,
    kfast: bool,
    vw: int,
    gather: Gather | None,
    aligned: bool | str = False,
) -> tuple[list[str], list[str], list[str]]:
    """Statements staging one tile of A (``which="A"``: As[k][m]) or B (Bs[k][n]) into ``buf``:
    (declarations, fetch, put). Without ``t.rp`` fetch does it all (global straight to local); with
    it, fetch reads global memory into registers ``p<which>_<i>_<e>`` and put stores them in local
    memory, so the caller can compute in between. ``aligned``: vector loads through a vector
    pointer (the host checked alignment), else ``vload``; a string is a C condition on a kernel
    argument choosing between the two when the kernel runs (one program for both)."""
    to = t.tm if which == "A" else t.tn
    lim = "M" if which == "A" else "N"
    base, o0 = ("a_base", "m0") if which == "A" else ("b_base", "n0")
    os_, ks = ("a_rs", "a_cs") if which == "A" else ("b_cs", "b_rs")
    rtn, rtm = t.threads
    threads = rtn * rtm
    vw = 1 if gather is not None else vw
    units = to * t.tk // vw
    if kfast:
        per = t.tk // vw
        head = [f"const int o = l / {per}, k = (l % {per}) * {vw};"]
        slot = lambda e: f"{which}s[buf][k + {e}][o]"  # noqa: E731
    else:
        per = to // vw
        head = [f"const int k = l / {per}, o = (l % {per}) * {vw};"]
        slot = lambda e: f"{which}s[buf][k][o + {e}]"  # noqa: E731
    head.append(f"const IDX go = {o0} + o, gk = kb + k;")

    lift = hoisted(t, which, kfast, gather)
    lift_row = gather is not None and bool(gather.row) and kfast and threads % t.tk == 0
    inline_col: tuple[str, ...] = ()
    first: list[str] = []  # once per k-step, before the loads
    if gather is not None:
        inline_col = (() if lift else (*gather.col, *gather.step)) + (() if lift_row else gather.row)
        first = list(gather.step) if lift else []
        if lift_row:  # this work item's k of the tile: tid % tk (the loop below steps by a multiple of tk)
            first += [f"const IDX gk = kb + tid % {t.tk};", *gather.row]

    def value(dst: Callable[[int], str]) -> list[str]:
        """Statements setting ``dst(e)`` for e < vw from global memory (zero out of range)."""
        if gather is not None:
            code = (*inline_col, *gather.code)
            return [f"{acc} v = 0;", f"if (go < {lim} && gk < K) {{", *("  " + s for s in code), "}",
                    f"{dst(0)} = v;"]  # fmt: skip

        def scalar(e: int) -> str:
            g, k = ("go", f"gk + {e}") if kfast else (f"go + {e}", "gk")
            val = c.load(which, f"{base} + ({g}) * {os_} + ({k}) * {ks}")
            return f"{dst(e)} = ({g} < {lim} && {k} < K) ? ({acc}){val} : ({acc})0;"

        if vw == 1:
            return [scalar(0)]
        V = f"{c.compute}{vw}"
        if kfast:
            cond, ptr = f"go < {lim} && gk + {vw} <= K", f"{which} + {base} + go * {os_} + gk"
        else:
            cond, ptr = f"go + {vw} <= {lim} && gk < K", f"{which} + {base} + go + gk * {ks}"
        pointer, vload = f"*(__global const {V}*)({ptr})", f"vload{vw}(0, {ptr})"
        lanes = "0123456789abcdef"
        if isinstance(aligned, str):
            out = [f"if ({cond}) {{", f"  {V} w;", f"  if ({aligned}) w = {pointer}; else w = {vload};"]
        else:
            out = [f"if ({cond}) {{", f"  const {V} w = {pointer if aligned else vload};"]
        out += [f"  {dst(e)} = w.s{lanes[e]};" for e in range(vw)]
        out += ["} else {", *("  " + scalar(e) for e in range(vw)), "}"]
        return out

    if not t.rp:
        lines = [*first, f"for (int l = tid; l < {units}; l += {threads}) {{", *("  " + h for h in head)]
        lines += ["  " + s for s in value(slot)]
        return [], lines + ["}"], []
    reg = lambda i: lambda e: f"p{which}_{i}_{e}"  # noqa: E731
    n_it = -(-units // threads)
    decl = [f"{acc} " + ", ".join(reg(i)(e) for i in range(n_it) for e in range(vw)) + ";"]
    fetch, put = list(first), []
    for i in range(n_it):
        guard = f"if (l < {units}) " if (i + 1) * threads > units else ""
        fetch += [f"{{ const int l = tid + {i * threads};", f"  {guard}{{", *("    " + h for h in head)]
        fetch += ["    " + s for s in value(reg(i))] + ["  }", "}"]
        put += [f"{{ const int l = tid + {i * threads};", f"  {guard}{{", *("    " + h for h in head[:-1])]
        put += [f"    {slot(e)} = {reg(i)(e)};" for e in range(vw)] + ["  }", "}"]
    return decl, fetch, put


#: the bits of a generic GEMM's ``lay`` argument (:func:`gemm_source`)
LAYOUT_BITS = {"a_aligned": 1, "b_aligned": 2, "c_aligned": 4, "a_kfast": 8, "b_kfast": 16, "a_vec": 32, "b_vec": 64}


def _generic_loader(which: str, t: Tiling, acc: str, c: Any) -> list[str]:
    """The statements staging one tile of ``which`` for every layout, chosen by ``lay``'s bits (a
    uniform branch per tile): along k or along m / n, with ``t.vw``-wide loads or scalar ones."""
    low = which.lower()
    kfast, vec, aligned = (f"(lay & {LAYOUT_BITS[f'{low}_{f}']})" for f in ("kfast", "vec", "aligned"))

    def fetch(along_k: bool) -> list[str]:
        scalar = _loader(which, t, acc, c, along_k, 1, None)[1]
        if t.vw == 1:
            return scalar
        wide = _loader(which, t, acc, c, along_k, t.vw, None, aligned)[1]
        return [f"if ({vec}) {{", *("  " + s for s in wide), "} else {", *("  " + s for s in scalar), "}"]

    return [f"if ({kfast}) {{", *("  " + s for s in fetch(True)), "} else {", *("  " + s for s in fetch(False)), "}"]


def gemm_source(
    dt: str,
    t: Tiling,
    rb: int,
    idx: str,
    a_kfast: bool,
    b_nfast: bool,
    va: int = 1,
    vb: int = 1,
    a_gather: Gather | None = None,
    b_gather: Gather | None = None,
    bias: bool = False,
    name: str = "ember_matmul",
    aligned: tuple[bool, bool, bool] = (False, False, False),
    generic: bool = False,
    c_map: ColumnMap | None = None,
) -> tuple[str, list[Any]]:
    """OpenCL C of one member of the tiled family, and its scalar argument types.

    Arguments: M, N, K, A + (off, row stride, col stride), B + (off, row, col), C (row-major,
    written), then per batch dim its extent and the A, B, C strides, then the gathers' params,
    then with ``bias`` a per-row vector R + (off, stride) added to C (row ``b_last * M + m``:
    the output channel of a grouped convolution). ``aligned``: A's, B's vector loads and C's
    float4 stores may go through vector pointers (their offsets and strides are multiples of the
    width; the caller checked). ``generic`` (a tiling without register prefetch, no gathers) instead
    adds a last argument ``lay`` whose bits (:data:`LAYOUT_BITS`) say, when the kernel runs, which
    axis of A and of B is contiguous, whether it has stride 1 (vector loads) and whether those
    loads and C's stores are aligned; a_kfast, b_nfast, va, vb and ``aligned`` are then ignored. One
    program serves every transpose and alignment of a shape class (W2's first step on a GPU built
    7 GEMM programs, 2.95 of its 3.9 s of builds on an H100). ``c_map``: C's columns are placed by
    a :class:`ColumnMap` (its arguments follow the gathers'; no vector-pointer stores)."""
    c = ctype(dt)
    acc = _acc_type(dt)
    fma = c.kind == "f"
    rtn, rtm = t.threads
    ch = t.chunk
    pad = 4 if ch == 4 else 1
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    params = [f"const {idx} M", f"const {idx} N", f"const {idx} K"]
    for x in "AB":
        params += [f"__global const {c.storage}* restrict {x}"]
        params += [f"const {idx} {x.lower()}_{f}" for f in ("off", "rs", "cs")]
    params += [f"__global {c.storage}* restrict C"]
    for nm in ("bsh", "bsa", "bsb", "bsc"):
        params += [f"const {idx} {nm}{d}" for d in range(rb)]
    types: list[Any] = [npi] * 3 + [None, npi, npi, npi] * 2 + [None] + [npi] * (4 * rb)
    for g in (a_gather, b_gather):
        if g is not None:
            params += list(g.params)
            types += list(g.types)
    if c_map is not None:
        params += list(c_map.params)
        types += list(c_map.types)
    if bias:
        params += [f"__global const {c.storage}* restrict R", f"const {idx} r_off", f"const {idx} r_s"]
        types += [None, npi, npi]
    if generic:
        assert not t.rp and a_gather is None and b_gather is None, "a generic GEMM: no prefetch, no gathers"
        params.append("const int lay")
        types.append(np.dtype(np.int32))
    flags: tuple[bool | str, ...] = (
        tuple(f"(lay & {LAYOUT_BITS[f]})" for f in ("a_aligned", "b_aligned", "c_aligned")) if generic else aligned
    )
    step = "acc[i][j] = fma(ra[i], rb[j], acc[i][j]);" if fma else "acc[i][j] += ra[i] * rb[j];"
    batch = unravel("z", rb, "bsh", idx, "b")
    nbuf = 2 if t.db else 1
    align = 4 * (8 if acc in ("double", "long", "ulong") else 4)
    if generic:
        decl_a, load_a, put_a = [], _generic_loader("A", t, acc, c), []
        decl_b, load_b, put_b = [], _generic_loader("B", t, acc, c), []
    else:
        decl_a, load_a, put_a = _loader("A", t, acc, c, a_kfast, va, a_gather, flags[0])
        decl_b, load_b, put_b = _loader("B", t, acc, c, not b_nfast, vb, b_gather, flags[1])
    V = f"{acc}4"

    def reads(which: str, n_items: int, threads: int, lid: str, reg: str) -> list[str]:
        out = []
        for q in range(n_items // ch):
            col = f"({lid} + {q * threads}) * {ch}" if ch > 1 else f"{lid} + {q * threads}"
            if ch == 4:  # rows are multiples of 4 long and the arrays aligned: one vector load
                out.append(f"{{ const {V} w = *(__local const {V}*)&{which}s[buf][kk][{col}];")
                out.append(" ".join(f"{reg}[{q * 4 + e}] = w.s{e};" for e in range(4)) + " }")
            else:
                out.append(f"{reg}[{q}] = {which}s[buf][kk][{col}];")
        return out

    compute = [
        "#pragma unroll",
        f"for (int kk = 0; kk < {t.tk}; kk++) {{",
        f"  {acc} ra[{t.wm}], rb[{t.wn}];",
        *("  " + s for s in reads("A", t.wm, rtm, "ty", "ra")),
        *("  " + s for s in reads("B", t.wn, rtn, "tx", "rb")),
        "  #pragma unroll",
        f"  for (int i = 0; i < {t.wm}; i++) {{",
        "    #pragma unroll",
        f"    for (int j = 0; j < {t.wn}; j++) {{ {step} }}",
        "  }",
        "}",
    ]
    if t.rp:
        put = put_a + put_b
        loop = [
            "int buf = 0;",
            *decl_a,
            *decl_b,
            "{ const IDX kb = 0;",
            *("  " + s for s in load_a + load_b + put),
            "}",
            "barrier(CLK_LOCAL_MEM_FENCE);",
            f"for ({idx} k0 = 0; k0 < K; k0 += {t.tk}) {{",
            f"  const bool more = k0 + {t.tk} < K;",
            f"  if (more) {{ const IDX kb = k0 + {t.tk};",
            *("    " + s for s in load_a + load_b),
            "  }",
            *("  " + s for s in compute),
        ]
        if t.db:  # the other buffer was last read before the previous barrier
            loop += ["  if (more) {", "    buf ^= 1;", *("    " + s for s in put), "  }"]
            loop += ["  barrier(CLK_LOCAL_MEM_FENCE);", "}"]
        else:
            loop += ["  barrier(CLK_LOCAL_MEM_FENCE);", "  if (more) {", *("    " + s for s in put), "  }"]
            loop += ["  barrier(CLK_LOCAL_MEM_FENCE);", "}"]
    elif t.db:
        loop = [
            "int buf = 0;",
            "{ const IDX kb = 0;",
            *("  " + s for s in load_a + load_b),
            "}",
            "barrier(CLK_LOCAL_MEM_FENCE);",
            f"for ({idx} k0 = 0; k0 < K; k0 += {t.tk}) {{",
            f"  if (k0 + {t.tk} < K) {{",
            f"    const IDX kb = k0 + {t.tk};",
            "    buf ^= 1;",
            *("    " + s for s in load_a + load_b),
            "    buf ^= 1;",
            "  }",
            *("  " + s for s in compute),
            "  barrier(CLK_LOCAL_MEM_FENCE);",
            "  buf ^= 1;",
            "}",
        ]
    else:
        loop = [
            "const int buf = 0;",
            f"for ({idx} k0 = 0; k0 < K; k0 += {t.tk}) {{",
            "  const IDX kb = k0;",
            *("  " + s for s in load_a + load_b),
            "  barrier(CLK_LOCAL_MEM_FENCE);",
            *("  " + s for s in compute),
            "  barrier(CLK_LOCAL_MEM_FENCE);",
            "}",
        ]
    hoist: list[str] = []  # gathers' per-row / per-column statements, once per kernel
    for which, g, kf in (("A", a_gather, a_kfast), ("B", b_gather, not b_nfast)):
        if hoisted(t, which, kf, g):
            assert g is not None
            base, width = ("m0", t.tm) if which == "A" else ("n0", t.tn)
            hoist += [f"const IDX go = {base} + tid % {width};", *g.col]
    assert sum(1 for x in hoist if x.startswith("const IDX go =")) <= 1, "one hoisted gather per kernel"
    rows = [f"(ty + {(i // ch) * rtm}) * {ch} + {i % ch}" if ch > 1 else f"ty + {i * rtm}" for i in range(t.wm)]
    if c_map is not None:
        store = _mapped_store(t, c, acc, idx, rows, rb, bias, c_map)
    else:
        store = _rowmajor_store(t, c, acc, idx, rows, rb, bias, flags[2])
    fdiv = []
    if a_gather is not None or b_gather is not None or c_map is not None:
        fdiv = [FDIV_INT if idx == "int" else FDIV_LONG]
    lines = [
        preamble({dt}),
        f"#define IDX {idx}",
        *fdiv,
        f"__kernel __attribute__((reqd_work_group_size({rtn}, {rtm}, 1)))",
        f"void {name}(" + ", ".join(params) + ") {",
        "  const int tx = get_local_id(0), ty = get_local_id(1);",
        f"  const int tid = ty * {rtn} + tx;",
        *("  " + s for s in _tile_origin(t, idx)),
        f"  const {idx} z = get_global_id(2);",
        *("  " + s for s in batch),
        f"  const {idx} a_base = a_off + " + " + ".join(f"b{d} * bsa{d}" for d in range(rb)) + ";",
        f"  const {idx} b_base = b_off + " + " + ".join(f"b{d} * bsb{d}" for d in range(rb)) + ";",
        f"  const {idx} c_base = " + " + ".join(f"b{d} * bsc{d}" for d in range(rb)) + ";",
        f"  __local {acc} As[{nbuf}][{t.tk}][{t.tm + pad}] __attribute__((aligned({align})));",
        f"  __local {acc} Bs[{nbuf}][{t.tk}][{t.tn + pad}] __attribute__((aligned({align})));",
        f"  {acc} acc[{t.wm}][{t.wn}];",
        f"  for (int i = 0; i < {t.wm}; i++) for (int j = 0; j < {t.wn}; j++) acc[i][j] = 0;",
        *("  " + s for s in hoist),
        *("  " + s for s in loop),
        *("  " + s for s in store),
        "}",
    ]
    return "\n".join(lines) + "\n", types


#: ``FDIV(x, d)``: floor(x / d) for 0 <= x < 2**31 through the magic pair ``d_m``, ``d_s`` (kernel
#: arguments; :func:`magic`): a multiply-high, an add and a shift where a GPU emulates a 32-bit
#: division in tens of instructions. With 64-bit indices, a plain division.
FDIV_INT = "#define FDIV(x, d) ((int)((mul_hi((uint)(x), d##_m) + (uint)(x)) >> d##_s))"
FDIV_LONG = "#define FDIV(x, d) ((x) / (d))"


@functools.lru_cache(maxsize=4096)  # a step's launches ask for the same few divisors (~90 a W3 step)
def magic(d: int) -> tuple[int, int]:
    """(m, s) with floor(x / d) == (mul_hi(x, m) + x) >> s for 0 <= x < 2**31 and 1 <= d < 2**31
    (a round-up multiplier, Granlund & Montgomery); (0, 0) for d == 0 (never divided by)."""
    if d < 1:
        return 0, 0
    s = (d - 1).bit_length()
    return ((1 << 32) * ((1 << s) - d)) // d + 1, s


def _rowmajor_store(
    t: Tiling, c: Any, acc: str, idx: str, rows: list[str], rb: int, bias: bool, c_aligned: bool | str
) -> list[str]:
    """The C store of row-major (M, N) per batch entry (chunk 4: float4 stores where in range)."""
    rtn, _ = t.threads
    ch = t.chunk
    V = f"{acc}4"
    vec_store = ch == 4 and c.storage == acc
    store = [f"{idx} m;"]
    for i in range(t.wm):
        store.append(f"m = m0 + {rows[i]};")
        store.append("if (m < M) {")
        plus = ""
        if bias:
            row = f"r_off + (b{rb - 1} * M + m) * r_s"
            store.append(f"  const {acc} rbias = ({acc}){c.load('R', row)};")
            plus = " + rbias"
        for q in range(t.wn // ch):
            if ch == 1:
                store.append(f"  {{ const {idx} n = n0 + tx + {q * rtn};")
                store.append(f"    if (n < N) {{ {c.store('C', 'c_base + m * N + n', f'acc[{i}][{q}]{plus}')} }} }}")
                continue
            store.append(f"  {{ const {idx} n = n0 + (tx + {q * rtn}) * 4;")
            vals = [f"acc[{i}][{q * 4 + e}]{plus}" for e in range(4)]
            if vec_store:
                value4 = f"({V})({', '.join(vals)})"
                pointer = f"*(__global {V}*)(C + c_base + m * N + n) = {value4};"
                put4 = f"vstore4({value4}, 0, C + c_base + m * N + n);"
                if isinstance(c_aligned, str):
                    put4 = f"{{ if ({c_aligned}) {pointer} else {put4} }}"
                elif c_aligned:
                    put4 = pointer
                store.append(f"    if (n + 4 <= N) {put4} else")
            store.append("    {")
            for e in range(4):
                store.append(f"      if (n + {e} < N) {{ {c.store('C', f'c_base + m * N + n + {e}', vals[e])} }}")
            store.append("    } }")
        store.append("}")
    return store


def _mapped_store(
    t: Tiling, c: Any, acc: str, idx: str, rows: list[str], rb: int, bias: bool, c_map: ColumnMap
) -> list[str]:
    """The C store through a :class:`ColumnMap`: each work item's column offsets once, then per row
    scalar stores (chunk 4: one vector store where the four columns are adjacent in memory; buffers
    start 16-byte aligned, the pool's minimum, so for a 4-byte type an element offset that is a
    multiple of 4 takes a float4 pointer)."""
    rtn, _ = t.threads
    ch = t.chunk
    out = []
    cols = []  # (q, e) -> names
    for q in range(t.wn // ch):
        for e in range(ch):
            n = f"n0 + (tx + {q * rtn}) * 4 + {e}" if ch > 1 else f"n0 + tx + {q * rtn}"
            nm = f"cn_{q}_{e}"
            out += [f"{idx} {nm} = 0;", f"const bool cv_{q}_{e} = ({n}) < N;", f"if (cv_{q}_{e}) {{",
                    f"  const {idx} n = {n};", *("  " + s for s in c_map.code), f"  {nm} = cn;", "}"]  # fmt: skip
            cols.append((q, e))
        if ch == 4:
            out.append(f"const bool c4_{q} = cv_{q}_3 && cn_{q}_3 == cn_{q}_0 + 3;")
    out.append(f"{idx} m;")
    vec = ch == 4 and c.storage == acc
    for i in range(t.wm):
        out += [f"m = m0 + {rows[i]};", "if (m < M) {", f"  const {idx} crow = c_base + m * c_rs;"]
        plus = ""
        if bias:
            out.append(f"  const {acc} rbias = ({acc}){c.load('R', f'r_off + (b{rb - 1} * M + m) * r_s')};")
            plus = " + rbias"
        for q in range(t.wn // ch):
            vals = [f"acc[{i}][{q * ch + e}]{plus}" for e in range(ch)]
            scalar = [f"if (cv_{q}_{e}) {{ {c.store('C', f'crow + cn_{q}_{e}', vals[e])} }}" for e in range(ch)]
            if vec:  # adjacent: a vector store (through a float4 pointer where 16-byte aligned)
                v4 = f"({acc}4)({', '.join(vals)})"
                out.append(f"  if (c4_{q}) {{")
                if NP_OF_C[acc].itemsize == 4:
                    out.append(
                        f"    if (((crow + cn_{q}_0) & 3) == 0) *(__global {acc}4*)(C + crow + cn_{q}_0) = {v4};"
                    )
                    out.append(f"    else vstore4({v4}, 0, C + crow + cn_{q}_0);")
                else:
                    out.append(f"    vstore4({v4}, 0, C + crow + cn_{q}_0);")
                out += ["  } else {", *("    " + x for x in scalar), "  }"]
            else:
                out += ["  " + x for x in scalar]
        out.append("}")
    return out


def vector_source(dt: str, shape: tuple[int, int, int], rb: int, idx: str) -> tuple[str, list[Any]]:
    """OpenCL C of ``ember_matmul_vec``, the CPU devices' kernel, and its scalar argument types: no local
    memory, explicit vectors along N; each work-group is one work item computing WM rows x (WN vectors
    of VW) columns, so the driver emits SIMD code directly (``shape`` = (VW, WN, WM): the device's
    choice, :func:`.matmul.vector_shape`)."""
    c = ctype(dt)
    T = c.compute
    vw, wn, wm = shape
    V = f"{T}{vw}"
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    step = "acc[i][j] = fma(ra, rb[j], acc[i][j]);" if c.kind == "f" else "acc[i][j] += ra * rb[j];"
    params = [f"const {idx} M", f"const {idx} N", f"const {idx} K"]
    params += [f"__global const {T}* restrict A", f"const {idx} a_off", f"const {idx} a_rs", f"const {idx} a_cs"]
    params += [f"__global const {T}* restrict B", f"const {idx} b_off", f"const {idx} b_rs", f"const {idx} b_cs"]
    params += [f"__global {T}* restrict C"]
    for name in ("bsh", "bsa", "bsb", "bsc"):
        params += [f"const {idx} {name}{d}" for d in range(rb)]
    types: list[Any] = [npi] * 3 + [None, npi, npi, npi] * 2 + [None] + [npi] * (4 * rb)
    batch = unravel("z", rb, "bsh", idx, "b")
    inner = [
        "      #pragma unroll",
        f"      for (int i = 0; i < {wm}; i++) {{",
        f"        const {V} ra = ({V})(ap[i][k * a_cs]);",
        "        #pragma unroll",
        f"        for (int j = 0; j < {wn}; j++) {{ {step} }}",
        "      }",
    ]
    lines = [
        preamble({dt}),
        "__kernel __attribute__((reqd_work_group_size(1, 1, 1)))",
        "void ember_matmul_vec(" + ", ".join(params) + ") {",
        f"  const {idx} n0 = ({idx})get_global_id(0) * {vw * wn}, m0 = ({idx})get_global_id(1) * {wm};",
        f"  const {idx} z = get_global_id(2);",
        *("  " + s for s in batch),
        f"  const {idx} a_base = a_off + " + " + ".join(f"b{d} * bsa{d}" for d in range(rb)) + ";",
        f"  __global const {T}* bp = B + b_off + " + " + ".join(f"b{d} * bsb{d}" for d in range(rb)) + " + n0;",
        f"  __global {T}* Cp = C + " + " + ".join(f"b{d} * bsc{d}" for d in range(rb)) + " + n0;",
        f"  __global const {T}* ap[{wm}];",
        "  #pragma unroll",
        f"  for (int i = 0; i < {wm}; i++) ap[i] = A + a_base + min(m0 + i, M - 1) * a_rs;",
        f"  {V} acc[{wm}][{wn}];",
        "  #pragma unroll",
        f"  for (int i = 0; i < {wm}; i++) {{",
        "    #pragma unroll",
        f"    for (int j = 0; j < {wn}; j++) acc[i][j] = ({V})(0);",
        "  }",
        f"  {V} rb[{wn}];",
        f"  if (n0 + {vw * wn} <= N) {{",
        f"    for ({idx} k = 0; k < K; k++) {{",
        "      #pragma unroll",
        f"      for (int j = 0; j < {wn}; j++) rb[j] = vload{vw}(j, bp);",
        "      bp += b_rs;",
        *inner,
        "    }",
        f"    for (int i = 0; i < {wm} && m0 + i < M; i++) {{",
        f"      for (int j = 0; j < {wn}; j++) vstore{vw}(acc[i][j], j, Cp + (m0 + i) * N);",
        "    }",
        "  } else {",
        f"    {T} tmp[{vw * wn}];",
        f"    for ({idx} k = 0; k < K; k++) {{",
        f"      for (int e = 0; e < {vw * wn}; e++) tmp[e] = n0 + e < N ? bp[e] : ({T})0;",
        "      bp += b_rs;",
        f"      for (int j = 0; j < {wn}; j++) rb[j] = vload{vw}(j, tmp);",
        *inner,
        "    }",
        f"    for (int i = 0; i < {wm} && m0 + i < M; i++) {{",
        f"      for (int j = 0; j < {wn}; j++) vstore{vw}(acc[i][j], j, tmp);",
        f"      for (int e = 0; e < {vw * wn} && n0 + e < N; e++) Cp[(m0 + i) * N + e] = tmp[e];",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n", types

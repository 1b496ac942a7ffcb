"""Reductions (sum prod max min any all argmax argmin) and cumsum.

The reduced axes are moved last as a view; the kept axes and the reduced axes are each
collapsed, giving ``M`` output rows of ``K`` elements read through strides. Two launch
shapes share one kernel template: one work item per row, or per (row, chunk of the row) with
rows fastest (many rows, or short rows; on a GPU also the coalesced way to reduce a leading
axis, chunked where rows are too few to fill the device, then a second pass over the chunks),
or a work-group per row (or per chunk of a row, with a second pass over the chunks) that
combines in a local-memory tree. argmax/argmin
keep (value, index) pairs and break ties toward the smaller index, so the FIRST extreme
wins; NaN counts as the extreme, as in numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.dtypes import DType, as_dtype
from ember.shapes import numel
from ember.views import collapse

from .array import CLArray
from .cltypes import ctype, literal, type_max, type_min
from .codegen import preamble, unravel
from .runtime import Family, Runtime

__all__ = ["reduce", "cumsum", "reduce_layout"]

_ARG = ("argmax", "argmin")


def _acc_dtype(op: str, dt: DType) -> str:
    if op in ("any", "all"):
        return "bool"
    if dt.name in ("float16", "bfloat16"):
        return "float32"
    return dt.name


def _identity(op: str, acc: str) -> str:
    c = ctype(acc)
    if op == "sum":
        return literal(0, c)
    if op == "prod":
        return literal(1, c)
    if op in ("max", "argmax"):
        return type_min(c)
    if op in ("min", "argmin"):
        return type_max(c)
    if op == "any":
        return "0"
    return "1"  # all


def _combine(op: str, acc: str, v: str, is_float: bool, ai: str = "", vi: str = "") -> str:
    """Statement folding value ``v`` (index ``vi``) into accumulator ``acc`` (index ``ai``)."""
    if op == "sum":
        return f"{acc} += {v};"
    if op == "prod":
        return f"{acc} *= {v};"
    if op == "any":
        return f"{acc} = (uchar)({acc} || ({v} != 0));"
    if op == "all":
        return f"{acc} = (uchar)({acc} && ({v} != 0));"
    nan_v = f"isnan({v})" if is_float else "0"
    nan_a = f"isnan({acc})" if is_float else "0"
    cmp = ">" if op in ("max", "argmax") else "<"
    if op in ("max", "min"):
        return f"if ({v} {cmp} {acc} || {nan_v}) {acc} = {v};"
    take = f"({nan_v} && !{nan_a}) || {v} {cmp} {acc} || (({v} == {acc} || ({nan_v} && {nan_a})) && {vi} < {ai})"
    return f"if ({take}) {{ {acc} = {v}; {ai} = {vi}; }}"


def _source(
    op: str,
    src: str,
    dst: str,
    ro: int,
    ri: int,
    idx: str,
    group: int,
    idx_in: bool,
    write_idx: bool,
    name: str = "ember_reduce",
    with_preamble: bool = True,
) -> tuple[str, list[Any]]:
    """Kernel ``name``: ``group`` = work-group size (0: one work item per row)."""
    cin = ctype(src)
    acc_name = _acc_dtype(op, cin.dtype) if op not in _ARG else src
    cacc = ctype(acc_name)
    cout = ctype(dst)
    A = cacc.compute
    arg = op in _ARG
    fl = cacc.kind == "f"
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    params = [f"const {idx} M", f"const {idx} K", f"const {idx} chunk", f"const {idx} G"]
    types: list[Any] = [npi, npi, npi, npi]
    params.append(f"__global {cout.storage}* restrict out")
    types.append(None)
    if write_idx:
        params.append("__global long* restrict out_idx")
        types.append(None)
    params += [f"__global const {cin.storage}* restrict in", f"const {idx} in_off"]
    types += [None, npi]
    for d in range(ro):
        params.append(f"const {idx} osh{d}")
    for d in range(ro):
        params.append(f"const {idx} ost{d}")
    for d in range(ri):
        params.append(f"const {idx} ish{d}")
    for d in range(ri):
        params.append(f"const {idx} ist{d}")
    types += [npi] * (2 * ro + 2 * ri)
    if idx_in:
        params.append("__global const long* restrict in_idx")
        types.append(None)
    outer = unravel("row", ro, "osh", idx, "o")
    outer.append(f"const {idx} base = in_off + " + " + ".join(f"o{d} * ost{d}" for d in range(ro)) + ";")
    inner = unravel("k", ri, "ish", idx, "q")
    inner.append(f"const {idx} off = base + " + " + ".join(f"q{d} * ist{d}" for d in range(ri)) + ";")
    load = f"const {A} v = ({A}){cin.load('in', 'off')};"
    vi = "in_idx[off]" if idx_in else "(long)k"
    step = _combine(op, "acc", "v", fl, "ai", "vi")
    if cacc.kind == "c" and op == "prod":  # complex: the pair product from the library (ember_opencl.complex)
        step = f"acc = ember_cmul_{A[:-1]}(acc, v);"
    ident = _identity(op, acc_name)
    lines = [
        preamble({src, dst, acc_name}) if with_preamble else "",
        f"__kernel void {name}(" + ", ".join(params) + ") {",
    ]
    if group:
        lines += [
            f"  __local {A} s_acc[{group}];",
            f"  __local long s_idx[{group}];" if arg else "",
            f"  const {idx} g = get_group_id(0);",
            "  const int lid = get_local_id(0);",
            f"  const {idx} row = g / G, part = g % G;",
            *("  " + s for s in outer),
            f"  const {idx} k0 = part * chunk;",
            f"  const {idx} k1 = min(K, k0 + chunk);",
            f"  {A} acc = {ident};",
            "  long ai = LONG_MAX;",
            f"  for ({idx} k = k0 + lid; k < k1; k += {group}) {{",
            *("    " + s for s in inner),
            f"    {load}",
            f"    const long vi = {vi};",
            f"    {step}",
            "  }",
            "  s_acc[lid] = acc;",
            "  s_idx[lid] = ai;" if arg else "",
            "  barrier(CLK_LOCAL_MEM_FENCE);",
            f"  for (int s = {group // 2}; s > 0; s >>= 1) {{",
            "    if (lid < s) {",
            f"      {A} v = s_acc[lid + s];",
            "      long vi = s_idx[lid + s];" if arg else "",
            "      acc = s_acc[lid];",
            "      ai = s_idx[lid];" if arg else "",
            f"      {step}",
            "      s_acc[lid] = acc;",
            "      s_idx[lid] = ai;" if arg else "",
            "    }",
            "    barrier(CLK_LOCAL_MEM_FENCE);",
            "  }",
            "  if (lid == 0) {",
        ]
        res, res_idx, at = "s_acc[0]", "s_idx[0]", "g"
    else:
        # a work item per (row, chunk of K), rows fastest: neighbouring items take neighbouring
        # rows (coalesced where rows are adjacent in memory: a leading-axis sum); G = 1: a row each
        lines += [
            f"  const {idx} g = get_global_id(0);",
            "  if (g >= M * G) return;",
            f"  const {idx} row = g % M, part = g / M;",
            *("  " + s for s in outer),
            f"  {A} acc = {ident};",
            "  long ai = LONG_MAX;",
            f"  const {idx} k1 = min(K, (part + 1) * chunk);",
            f"  for ({idx} k = part * chunk; k < k1; k++) {{",
            *("    " + s for s in inner),
            f"    {load}",
            f"    const long vi = {vi};",
            f"    {step}",
            "  }",
            "  {",
        ]
        res, res_idx, at = "acc", "ai", "g"
    if arg and not write_idx:
        lines.append(f"    out[{at}] = {res_idx};")
    else:
        lines.append("    " + cout.store("out", at, res))
        if write_idx:
            lines.append(f"    out_idx[{at}] = {res_idx};")
    lines += ["  }", "}"]
    return "\n".join(line for line in lines if line) + "\n", types


def _make(
    op: str, src: str, dst: str, ro: int, ri: int, idx: str, group: int, tree: int, *flags: bool
) -> tuple[str, str, list[Any]]:
    """One program holding both launch shapes of a reduction (a work item per row, and a
    work-group of ``tree`` per row): the choice follows the shape, so a new batch size that
    flips it compiles nothing new. Returns the kernel ``group`` asks for (0: per row)."""
    row_src, types = _source(op, src, dst, ro, ri, idx, 0, *flags)
    tree_src, tree_types = _source(op, src, dst, ro, ri, idx, tree, *flags, "ember_reduce_tree", False)
    source = row_src + "\n" + tree_src
    if group:
        return source, "ember_reduce_tree", tree_types
    return source, "ember_reduce", types


#: reductions compiled together (both launch shapes of each), at the first miss: pairs with one
#: result dtype, which programs tend to use together (max and min of labels; sum and prod)
_GROUPS = (("sum", "prod"), ("max", "min"), ("any", "all"), ("argmax", "argmin"))


def _family(
    op: str, src: str, dst: str, ro: int, ri: int, idx: str, tree: int, flags: tuple[bool, bool]
) -> Family | None:
    """The reductions of ``op``'s group over the same dtypes and layout, as one program."""
    if as_dtype(src).kind == "c":  # complex: sum and prod only, each alone
        return None
    group = next(g for g in _GROUPS if op in g)

    def make() -> tuple[str, list[tuple[Any, str, list[Any]]]]:
        kernels: list[str] = []
        members: list[tuple[Any, str, list[Any]]] = []
        for o in group:
            for g in (0, tree):
                name = f"ember_{o}_{g}"
                text, types = _source(o, src, dst, ro, ri, idx, g, *flags, name, False)
                kernels.append(text)
                members.append((("reduce", o, src, dst, ro, ri, idx, g, *flags), name, types))
        acc = {_acc_dtype(o, as_dtype(src)) for o in group if o not in _ARG}
        return preamble({src, dst, *acc}) + "\n".join(kernels), members

    return Family(("reduce", group, src, dst, ro, ri, idx, tree, flags), make, after=0)


def reduce_layout(
    a: CLArray, axes: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(outer shape, outer strides, inner shape, inner strides) of ``a`` reduced over ``axes``."""
    kept = [i for i in range(a.ndim) if i not in axes]
    red = sorted(axes)
    osh, (ost,) = collapse(tuple(a.shape[i] for i in kept), [tuple(a.strides[i] for i in kept)])
    ish, (ist,) = collapse(tuple(a.shape[i] for i in red), [tuple(a.strides[i] for i in red)])
    return osh, ost, ish, ist


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _launch(
    rt: Runtime,
    op: str,
    a: CLArray,
    layout: tuple[Any, ...],
    out: CLArray,
    *,
    groups_per_row: int = 1,
    group: int = 0,
    out_idx: CLArray | None = None,
    in_idx: CLArray | None = None,
) -> tuple[Any, tuple[int], tuple[int], list[Any]]:
    """(kernel, global size, local size, arguments) of one reduction pass of ``a`` into ``out``."""
    osh, ost, ish, ist = layout
    M, K = numel(osh), numel(ish)
    span = a.offset + sum(abs(s) * (d - 1) for d, s in zip(osh + ish, ost + ist))
    idx = "int" if max(span, M * max(groups_per_row, 1), K) < 2**31 - 2**20 else "long"
    src, dst = a.dtype.name, out.dtype.name
    flags = (in_idx is not None, out_idx is not None)
    key = ("reduce", op, src, dst, len(osh), len(ish), idx, group, *flags)
    tree = _group_size(rt)
    family = _family(op, src, dst, len(osh), len(ish), idx, tree, flags)
    knl, wg = rt.kernel(key, lambda: _make(op, src, dst, len(osh), len(ish), idx, group, tree, *flags), family)
    chunk = -(-K // groups_per_row)
    args: list[Any] = [M, K, chunk, groups_per_row, out.buf]
    if out_idx is not None:
        args.append(out_idx.buf)
    args += [a.buf, a.offset, *osh, *ost, *ish, *ist]
    if in_idx is not None:
        args.append(in_idx.buf)
    if group:
        return knl, (M * groups_per_row * group,), (group,), args
    local = min(wg, 64 if rt.is_cpu else 128)
    items = M * groups_per_row
    return knl, (-(-items // local) * local,), (local,), args


def _group_size(rt: Runtime) -> int:
    return min(64 if rt.is_cpu else 256, rt.max_wg)


#: columns on a GPU: work items to aim for per compute unit (enough to hide memory latency), the
#: fewest elements of a chunk, and the most chunks a row splits into
COLUMN_ITEMS_PER_CU = 2048
COLUMN_MIN_CHUNK = 16
COLUMN_MAX_CHUNKS = 256


def column_chunks(rt: Runtime, M: int, K: int, contiguous: bool) -> int:
    """The chunks each row splits into where a GPU reduces *columns*: rows whose elements are not
    adjacent in memory (a sum over a leading axis, such as a bias gradient over the batch), at
    least 32 rows of more than 32 elements. A work item per (row, chunk), neighbouring items on
    neighbouring rows, reads coalesced; a work-group per row would read one element per row apart
    (W2's (4096, 4096) bias gradient: 136 us on an H100, 0.49 TB/s). 0: not a column reduction."""
    if rt.is_cpu or contiguous or K <= 32 or M < 32:
        return 0
    want = -(-(rt.compute_units * COLUMN_ITEMS_PER_CU) // M)
    return max(1, min(want, K // COLUMN_MIN_CHUNK, COLUMN_MAX_CHUNKS))


class _Slot:
    """A stand-in block while a plan is made: its ``raw`` marks where a buffer goes in the arguments."""

    __slots__ = ("raw",)

    def __init__(self) -> None:
        self.raw = self


class _Plan:
    """A reduction of one input geometry, less its buffers: the flat output's dtype and the result's
    shape and strides, the temporaries' (shape, dtype), and each pass's (kernel, global size, local
    size, arguments, [(argument position, buffer slot)]); slot 0 is the input, 1 the output, 2... the
    temporaries."""

    __slots__ = ("out_dt", "M", "shape", "strides", "temps", "passes")

    def __init__(self, out_dt: DType, M: int, shape: Any, strides: Any, temps: list[Any], passes: list[Any]) -> None:
        self.out_dt, self.M, self.shape, self.strides = out_dt, M, shape, strides
        self.temps, self.passes = temps, passes


#: reduction plans by (runtime, op, input geometry, axes, keepdims, device kind): a step's reductions
#: skip the layout analysis and the kernel lookup after their first call
_PLANS: dict[Any, _Plan] = {}
_MAX_PLANS = 4096


def reduce(rt: Runtime, op: str, a: CLArray, axes: tuple[int, ...], keepdims: bool) -> CLArray:
    """``op`` over ``axes`` of ``a`` (core has checked that max/min/arg* axes are non-empty)."""
    axes = tuple(axes)
    key = (rt, op, a.dtype, a.shape, a.strides, a.offset, axes, keepdims, rt.is_cpu, rt.compute_units)
    plan = _PLANS.get(key)
    if plan is None:
        out_shape = _reduced_shape(a.shape, axes, keepdims)
        out_dt = _out_dtype(op, a)
        M = numel(out_shape)
        K = numel([a.shape[i] for i in axes])
        if M == 0:
            return rt.empty(out_shape, out_dt)
        if K == 0:
            value = {"sum": 0, "prod": 1, "any": False, "all": True}[op]
            from .elementwise import run_program, unary_program  # noqa: PLC0415

            one = rt.upload(np.asarray(value).astype(out_dt.numpy).reshape(1), out_dt)
            ones = one.with_layout(out_shape, (0,) * len(out_shape), 0)
            return run_program(rt, unary_program("copy", out_dt.name, out_dt.name), [ones], out_shape)[0]
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[key] = _plan(rt, op, a, axes, out_shape, out_dt)
    out = rt.empty((plan.M,), plan.out_dt)
    bufs = [a.buf, out.buf]
    temps = [rt.empty(shape, dt) for shape, dt in plan.temps]  # (alive until their passes are queued)
    bufs += [t.buf for t in temps]
    for knl, gsize, lsize, template, fills in plan.passes:
        args = template.copy()
        for pos, slot in fills:
            args[pos] = bufs[slot]
        rt.launch(knl, gsize, lsize, args)
    return CLArray(out.block, plan.shape, plan.strides, 0, plan.out_dt)


def _partial_dtype(op: str, dt: DType) -> DType:
    """The dtype of a split reduction's partial results: the accumulator's (argmax/argmin: the input's)."""
    return dt if op in _ARG else as_dtype(_acc_dtype(op, dt))


def _out_dtype(op: str, a: CLArray) -> DType:
    return as_dtype("int64") if op in _ARG else as_dtype("bool") if op in ("any", "all") else a.dtype


def _plan(rt: Runtime, op: str, a: CLArray, axes: tuple[int, ...], out_shape: tuple[int, ...], out_dt: DType) -> _Plan:
    """The passes of ``op`` over ``axes`` of ``a`` (M > 0 rows of K > 0), made on stand-in buffers."""
    arg = op in _ARG
    M = numel(out_shape)
    K = numel([a.shape[i] for i in axes])
    slots: list[_Slot] = []
    temps: list[tuple[tuple[int, ...], DType]] = []

    def stand_in(shape: tuple[int, ...], strides: Any, offset: int, dt: DType) -> CLArray:
        slots.append(_Slot())
        return CLArray(slots[-1], shape, strides, offset, dt)  # type: ignore[arg-type]

    def temp(shape: tuple[int, ...], dt: DType) -> CLArray:
        temps.append((shape, dt))
        return stand_in(shape, None, 0, dt)

    a = stand_in(a.shape, a.strides, a.offset, a.dtype)
    out = stand_in((M,), None, 0, out_dt)
    layout = reduce_layout(a, axes)
    passes = []
    # one work item per row: on CPUs whenever there are rows enough for every core; on GPUs
    # when rows are short, or strided along the reduced axis (a leading-axis sum: neighbouring
    # items then read neighbouring addresses), in chunks where rows are too few to fill the
    # device (:func:`column_chunks`). Contiguous rows get a work-group.
    ist = layout[3]
    contiguous = len(ist) == 1 and abs(ist[0]) == 1
    if rt.is_cpu:
        per_item = M >= 2 * rt.compute_units
    else:
        per_item = M >= 8192 and not (contiguous and K > 64)
    G = column_chunks(rt, M, K, contiguous)
    if G > 1:  # columns: a work item per (row, chunk), then one per row over the chunks' partials
        acc = _partial_dtype(op, a.dtype)
        part = temp((G * M,), acc)
        part_idx = temp((G * M,), as_dtype("int64")) if arg else None
        passes.append(_launch(rt, op, a, layout, part, groups_per_row=G, out_idx=part_idx))
        passes.append(_launch(rt, op, part, ((M,), (1,), (G,), (M,)), out, in_idx=part_idx))
    elif per_item or K <= 32 or G == 1:
        passes.append(_launch(rt, op, a, layout, out))
    else:
        group = _group_size(rt)
        target = rt.compute_units * (4 if rt.is_cpu else 16)
        g = max(1, min(-(-target // M), K // (group * 4)))
        if g == 1:
            passes.append(_launch(rt, op, a, layout, out, group=group))
        else:
            acc = _partial_dtype(op, a.dtype)
            part = temp((M * g,), acc)
            part_idx = temp((M * g,), as_dtype("int64")) if arg else None
            passes.append(_launch(rt, op, a, layout, part, groups_per_row=g, group=group, out_idx=part_idx))
            lay2 = ((M,), (g,), (g,), (1,))
            passes.append(_launch(rt, op, part, lay2, out, group=group if M < 64 else 0, in_idx=part_idx))
    where = {id(s): i for i, s in enumerate(slots)}
    planned = []
    for knl, gsize, lsize, args in passes:
        fills = [(pos, where[id(x)]) for pos, x in enumerate(args) if type(x) is _Slot]
        planned.append((knl, gsize, lsize, [None if type(x) is _Slot else x for x in args], fills))
    final = out.reshape(out_shape)
    return _Plan(out_dt, M, final.shape, final.strides, temps, planned)


# -- cumsum -------------------------------------------------------------------------------
def _scan_source(src: str, ro: int, idx: str, group: int) -> tuple[str, list[Any]]:
    cin = ctype(src)
    acc = _acc_dtype("sum", cin.dtype)
    A = ctype(acc).compute
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    params = [f"const {idx} M", f"const {idx} K", f"__global {cin.storage}* restrict out"]
    params += [f"__global const {cin.storage}* restrict in", f"const {idx} in_off", f"const {idx} ist"]
    params += [f"const {idx} osh{d}" for d in range(ro)] + [f"const {idx} ost{d}" for d in range(ro)]
    types: list[Any] = [npi, npi, None, None, npi, npi] + [npi] * (2 * ro)
    outer = unravel("row", ro, "osh", idx, "o")
    outer.append(f"const {idx} base = in_off + " + " + ".join(f"o{d} * ost{d}" for d in range(ro)) + ";")
    lines = [preamble({src, acc}), "__kernel void ember_scan(" + ", ".join(params) + ") {"]
    if not group:
        lines += [
            f"  const {idx} row = get_global_id(0);",
            "  if (row >= M) return;",
            *("  " + s for s in outer),
            f"  {A} acc = 0;",
            f"  for ({idx} k = 0; k < K; k++) {{",
            f"    acc += ({A}){cin.load('in', 'base + k * ist')};",
            "    " + cin.store("out", "row * K + k", "acc"),
            "  }",
            "}",
        ]
    else:
        lines += [
            f"  __local {A} s[{group}];",
            f"  const {idx} row = get_group_id(0);",
            "  const int lid = get_local_id(0);",
            *("  " + s for s in outer),
            f"  {A} carry = 0;",
            f"  for ({idx} k0 = 0; k0 < K; k0 += {group}) {{",
            f"    const {idx} k = k0 + lid;",
            f"    {A} v = k < K ? ({A}){cin.load('in', 'base + k * ist')} : ({A})0;",
            "    s[lid] = v;",
            "    barrier(CLK_LOCAL_MEM_FENCE);",
            f"    for (int d = 1; d < {group}; d <<= 1) {{",
            f"      {A} t = lid >= d ? s[lid - d] : ({A})0;",
            "      barrier(CLK_LOCAL_MEM_FENCE);",
            "      s[lid] += t;",
            "      barrier(CLK_LOCAL_MEM_FENCE);",
            "    }",
            "    if (k < K) { " + cin.store("out", "row * K + k", "carry + s[lid]") + " }",
            f"    carry += s[{group - 1}];",
            "    barrier(CLK_LOCAL_MEM_FENCE);",
            "  }",
            "}",
        ]
    return "\n".join(lines) + "\n", types


def _make_scan(*spec: Any) -> tuple[str, str, list[Any]]:
    source, types = _scan_source(*spec)
    return source, "ember_scan", types


def cumsum(rt: Runtime, a: CLArray, axis: int) -> CLArray:
    """Running sum along ``axis``; the result is a contiguous buffer viewed back in place."""
    order = [i for i in range(a.ndim) if i != axis] + [axis]
    moved = a.permute(order)
    out = rt.empty(moved.shape, a.dtype)
    if out.size:
        K = moved.shape[-1]
        osh, (ost,) = collapse(moved.shape[:-1], [moved.strides[:-1]])
        M = numel(osh)
        span = a.offset + sum(abs(s) * (d - 1) for d, s in zip(a.shape, a.strides))
        idx = "int" if max(span, M * K) < 2**31 - 2**20 else "long"
        group = 0 if (M >= (rt.compute_units if rt.is_cpu else 4096) or K <= 64) else _group_size(rt)
        src = a.dtype.name
        knl, wg = rt.kernel(("scan", src, len(osh), idx, group), lambda: _make_scan(src, len(osh), idx, group))
        args = [M, K, out.buf, moved.buf, moved.offset, moved.strides[-1], *osh, *ost]
        if group:
            rt.launch(knl, (M * group,), (group,), args)
        else:
            local = min(wg, 64 if rt.is_cpu else 128)
            rt.launch(knl, (-(-M // local) * local,), (local,), args)
    inverse = [0] * a.ndim
    for i, p in enumerate(order):
        inverse[p] = i
    return out.permute(inverse)

"""Fused programs with a trailing reduction (``FusedProgram.reduce``): one kernel computes the
elementwise program and reduces its value, so the full-size value never reaches memory.

The iteration shape splits into the kept axes (collapsed over every operand: ``M`` rows) and
the reduced axes (collapsed: ``K`` elements a row). On a GPU, as :mod:`.reduce` does, a row is
either one work item's loop (many rows), or a work-group's, combined in a local-memory tree, or,
where rows are not contiguous (a leading-axis reduction), chunks of it taken by work items with
rows fastest ("columns": neighbouring items read neighbouring addresses). On
a CPU (PoCL runs a work-group on one thread) a row is always one work item's loop, which reads
it in order. Where rows are few, a row splits into ``G`` chunks whose partial results (in the
accumulator dtype) a second, small reduction of :mod:`.reduce` combines. Tensors are read, and
full-size outputs written, at ``base(row) + sum(q_d * stride_d)`` with every shape and stride a kernel argument, so one
compiled kernel serves every shape of the same collapsed ranks. 16-bit floats accumulate in
float32; the reduced value is rounded to its dtype first, as the unfused path stores it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.lazy.program import FusedProgram
from ember.shapes import numel
from ember.views import View, collapse, contiguous_strides

from .array import CLArray
from .cltypes import CType, ctype, np_scalar
from .codegen import _instructions, preamble, unravel
from .elementwise import run_program
from .reduce import _combine, _group_size, _identity, column_chunks
from .reduce import reduce as reduce_rows
from .runtime import Runtime

__all__ = ["FUSION_REDUCTIONS", "COUNTS", "run_reduce", "reduce_source"]

#: reductions a program may end with on this backend (mean is ember's composite here: sum, then a scale)
FUSION_REDUCTIONS = frozenset({"sum", "prod", "max", "min"})

_KERNEL = "ember_fused_reduce"

#: on a CPU device: work items a compute unit gets (rows split into chunks when there are fewer
#: rows), and the fewest elements of a chunk (a chunk's partial result takes a second pass)
CPU_ITEMS_PER_CU = 16
CPU_MIN_CHUNK = 1 << 14

#: launches by shape: a work item per row, a work-group per row, chunked rows, columns; programs declined
#: (run as the region's kernel, then the reduction's: see run_reduce) (tests check what ran)
COUNTS = {"per_item": 0, "group": 0, "chunked": 0, "columns": 0, "declined": 0}

#: ops a CPU device computes per work item as a scalar libm call, and across work items as SIMD
#: calls: a program with one, over few long rows, is declined on a CPU (PoCL, 2^22 elements:
#: 42 ms fused in chunks, 27 ms as the region's kernel then the reduction's, 86 ms unfused)
#: (smaller regions stay one launch: two cost more than the scalar loop loses)
CPU_DECLINE_ELEMENTS = 1 << 18
LIBM_OPS = frozenset(
    "exp exp2 expm1 log log2 log10 log1p sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh "
    "sigmoid silu gelu gelu_tanh softplus erf pow atan2 hypot logaddexp".split()
)


def _acc(op: str, dt: str) -> str:
    return "float32" if dt in ("float16", "bfloat16") else dt


def _rounded(c: CType, v: str) -> str:
    """``v`` (a compute-type value) rounded to ``c``'s dtype when that is stored narrower."""
    if c.name == "float16":
        return f"ember_round_half({v})"
    if c.name == "bfloat16":
        return f"as_float(((uint)ember_f2bf({v})) << 16)"
    return v


_ROUND_HALF = """
inline float ember_round_half(float v) {
    ushort h;
    vstore_half_rte(v, 0, (half*)&h);
    return vload_half(0, (const half*)&h);
}
"""


def _fold(op: str, acc: str, v: str, is_float: bool) -> str:
    """Statement folding ``v`` into ``acc`` (max/min: NaN wins, as numpy's)."""
    if op in ("max", "min") and not is_float:
        return f"if ({v} {'>' if op == 'max' else '<'} {acc}) {acc} = {v};"
    return _combine(op, acc, v, is_float)


def reduce_source(
    prog: FusedProgram,
    modes: tuple[str, ...],
    ro: int,
    ri: int,
    idx: str,
    group: int,
    partial: bool,
    columns: bool = False,
) -> tuple[str, list[Any]]:
    """OpenCL C of kernel ``ember_fused_reduce`` for ``prog`` (a mode per tensor input: ``z`` one
    element, ``s`` strided), ``ro``/``ri`` collapsed kept/reduced ranks, ``group`` the work-group
    size (0: a work item per row, or per chunk of a row); ``partial``: write accumulators, not
    results; ``columns``: work items take rows fastest (item ``part * M + row``, a GPU's leading-axis
    reduction), else chunks fastest (``row * G + part``). Returns the source and the argument dtypes
    (None for buffers)."""
    r = prog.reduce
    assert r is not None
    dts = prog.value_dtypes()
    types = [ctype(d) for d in dts]
    cval = types[r.value]
    acc_name = _acc(r.op, cval.name)
    cacc = ctype(acc_name)
    A = cacc.compute
    fold = "sum" if r.op == "mean" else r.op
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    params = [f"const {idx} M", f"const {idx} K", f"const {idx} chunk", f"const {idx} G"]
    argtypes: list[Any] = [npi] * 4
    params += [f"const {idx} osh{d}" for d in range(ro)] + [f"const {idx} ish{d}" for d in range(ri)]
    argtypes += [npi] * (ro + ri)
    cred = cacc if partial else cval
    params.append(f"__global {cred.storage}* restrict red")
    argtypes.append(None)

    def strided(name: str, c: CType, const: bool) -> None:
        params.append(f"__global {'const ' if const else ''}{c.storage}* restrict {name}")
        params.append(f"const {idx} {name}_off")
        params.extend(f"const {idx} {name}_os{d}" for d in range(ro))
        params.extend(f"const {idx} {name}_is{d}" for d in range(ri))
        argtypes.extend([None, npi] + [npi] * (ro + ri))

    for k, o in enumerate(prog.outputs):
        strided(f"out{k}", types[o], const=False)
    head: list[str] = []  # per row: scalars, broadcast elements, row bases
    loads: list[str] = []
    tensor_modes = iter(modes)
    bases = []
    for j, (_, kind) in enumerate(prog.inputs):
        c = types[j]
        if kind == "scalar":
            params.append(f"const {c.compute} in{j}")
            argtypes.append(c.np_compute)
            head.append(f"const {c.compute} v{j} = in{j};")
            continue
        mode = next(tensor_modes)
        strided(f"in{j}", c, const=True)
        if mode == "z":
            head.append(f"const {c.compute} v{j} = {c.load(f'in{j}', f'in{j}_off')};")
        else:
            bases.append(f"in{j}")
            inner = " + ".join([f"in{j}_b"] + [f"q{d} * in{j}_is{d}" for d in range(ri)])
            loads.append(f"const {c.compute} v{j} = {c.load(f'in{j}', inner)};")
    bases += [f"out{k}" for k in range(len(prog.outputs))]
    row_bases = [
        f"const {idx} {b}_b = " + " + ".join([f"{b}_off"] + [f"o{d} * {b}_os{d}" for d in range(ro)]) + ";"
        for b in bases
    ]
    helpers: dict[str, str] = {}
    body = loads + _instructions(prog, types, helpers, lambda v: f"v{v}", "k")
    for k, o in enumerate(prog.outputs):
        at = " + ".join([f"out{k}_b"] + [f"q{d} * out{k}_is{d}" for d in range(ri)])
        body.append(types[o].store(f"out{k}", at, f"v{o}"))
    body.append(f"const {A} x = ({A}){_rounded(cval, f'v{r.value}')};")
    body.append(_fold(fold, "acc", "x", cacc.kind == "f"))
    if cval.name == "float16":
        helpers["ember_round_half"] = _ROUND_HALF
    dtypes = set(dts) | {acc_name}
    text = preamble(dtypes, helpers)
    ident = _identity(fold, acc_name)
    inner_loop = unravel("k", ri, "ish", idx, "q")
    lines = [text, f"__kernel void {_KERNEL}(" + ", ".join(params) + ") {"]
    if group:
        lines += [
            f"  __local {A} s_acc[{group}];",
            f"  const {idx} g = get_group_id(0);",
            "  const int lid = get_local_id(0);",
            f"  const {idx} row = g / G, part = g % G;",
        ]
        k_loop = [
            f"  const {idx} k0 = part * chunk;",
            f"  const {idx} k1 = min(K, k0 + chunk);",
            f"  for ({idx} k = k0 + lid; k < k1; k += {group}) {{",
        ]
    else:  # a work item per (row, chunk): a contiguous run of K, read in order
        where = "g % M, part = g / M" if columns else "g / G, part = g % G"
        lines += [
            f"  const {idx} g = get_global_id(0);",
            "  if (g >= M * G) return;",
            f"  const {idx} row = {where};",
        ]
        k_loop = [
            f"  const {idx} k1 = min(K, (part + 1) * chunk);",
            f"  for ({idx} k = part * chunk; k < k1; k++) {{",
        ]
    lines += ["  " + s for s in unravel("row", ro, "osh", idx, "o")]
    lines += ["  " + s for s in head + row_bases]
    lines.append(f"  {A} acc = {ident};")
    lines += k_loop
    lines += ["    " + s for s in inner_loop + body]
    lines.append("  }")
    if group:
        lines += [
            "  s_acc[lid] = acc;",
            "  barrier(CLK_LOCAL_MEM_FENCE);",
            f"  for (int s = {group // 2}; s > 0; s >>= 1) {{",
            "    if (lid < s) {",
            f"      const {A} x = s_acc[lid + s];",
            "      acc = s_acc[lid];",
            "      " + _fold(fold, "acc", "x", cacc.kind == "f"),
            "      s_acc[lid] = acc;",
            "    }",
            "    barrier(CLK_LOCAL_MEM_FENCE);",
            "  }",
            "  if (lid == 0) {",
            "    acc = s_acc[0];",
        ]
        at = "g"
    else:
        lines.append("  {")
        at = "g"
    result = f"acc / ({A})K" if r.op == "mean" and not partial else "acc"
    lines.append("    " + cred.store("red", at, result))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n", argtypes


class _Plan:
    __slots__ = (
        "knl", "gsize", "lsize", "head", "in_specs", "out_specs", "M", "K", "G", "partial", "group", "columns"
    )  # fmt: skip

    def __init__(self, **kw: Any) -> None:
        for k, v in kw.items():
            setattr(self, k, v)


_PLANS: dict[Any, _Plan] = {}
_MAX_PLANS = 4096


def _plan(rt: Runtime, prog: FusedProgram, shape: tuple[int, ...], geoms: Sequence[Any]) -> _Plan:
    """geoms: (shape, strides, offset) of each tensor input (unbroadcast); outputs are contiguous."""
    r = prog.reduce
    assert r is not None
    rank = len(shape)
    kept = [d for d in range(rank) if d not in r.axes]
    out_st = contiguous_strides(shape)
    strides = [View(sh, st).broadcast_strides(shape) if sh != shape else st for sh, st, _ in geoms]
    strides += [out_st] * len(prog.outputs)
    offsets = [off for _, _, off in geoms] + [0] * len(prog.outputs)
    osh, ost = collapse(tuple(shape[d] for d in kept), [tuple(st[d] for d in kept) for st in strides])
    ish, ist = collapse(tuple(shape[d] for d in r.axes), [tuple(st[d] for d in r.axes) for st in strides])
    n_in = len(geoms)
    modes = tuple("z" if not any(ost[k] + ist[k]) else "s" for k in range(n_in))
    M, K = numel(osh), numel(ish)
    # the largest element index a tensor operand reaches (none: a program of scalars only, (x * x).sum() of
    # an em.full, indexes nothing)
    span = max(
        (off + sum(abs(s) * (d - 1) for d, s in zip(osh + ish, a + b)) for off, a, b in zip(offsets, ost, ist)),
        default=0,
    )
    idx = "int" if max(span, M, K, numel(shape)) < 2**31 - 2**20 else "long"
    group, G, columns = 0, 1, False
    if rt.is_cpu:
        # A CPU runs a work-group on one thread, its work items one after another: a work item
        # per row (or per chunk of a row, when rows are few) that reads its run of K in order. A
        # work-group striding a row by its size touched one float per cache line per work item,
        # and lost to the unfused kernels (docs/fusion.md).
        target = rt.compute_units * CPU_ITEMS_PER_CU
        if M < target:
            G = max(1, min(-(-target // M), K // CPU_MIN_CHUNK))
    else:
        contiguous = len(ish) == 1 and all(abs(b[0]) <= 1 for b in ist)
        G = column_chunks(rt, M, K, contiguous)  # a leading-axis reduction: rows fastest (:mod:`.reduce`)
        columns = G > 0
        if not columns and not (M >= 8192 and not (contiguous and K > 64) or K <= 32):
            group = _group_size(rt)
            G = max(1, min(-(-(rt.compute_units * 16) // M), K // (group * 4)))
        G = max(G, 1)
    partial = G > 1
    key = ("fused_reduce", prog, modes, len(osh), len(ish), idx, group, partial, columns)
    knl, wg = rt.kernel(key, lambda: _make(prog, modes, len(osh), len(ish), idx, group, partial, columns))
    items = M * G
    if group:
        gsize, lsize = (items * group,), (group,)
    else:  # on a CPU, at least a few work-groups a compute unit (each runs on one thread)
        local = min(wg, 64 if rt.is_cpu else 128)
        if rt.is_cpu:
            local = max(1, min(local, items // (rt.compute_units * 4)))
        gsize, lsize = (-(-items // local) * local,), (local,)
    chunk = -(-K // G)
    head = [M, K, chunk, G, *osh, *ish]
    specs = [(off, a, b) for off, a, b in zip(offsets, ost, ist)]
    t_iter = iter(specs[:n_in])
    in_specs = [("scalar", ctype(dt)) if kind == "scalar" else ("tensor", next(t_iter)) for dt, kind in prog.inputs]
    return _Plan(
        knl=knl, gsize=gsize, lsize=lsize, head=head, in_specs=in_specs, out_specs=specs[n_in:],
        M=M, K=K, G=G, partial=partial, group=group, columns=columns,
    )  # fmt: skip


def _make(prog: FusedProgram, *spec: Any) -> tuple[str, str, list[Any]]:
    source, argtypes = reduce_source(prog, *spec)
    return source, _KERNEL, argtypes


def run_reduce(rt: Runtime, prog: FusedProgram, operands: Sequence[Any], shape: tuple[int, ...]) -> list[CLArray]:
    """Run ``prog`` (with ``prog.reduce`` set) over ``shape``: its full-size outputs, then the reduced value."""
    r = prog.reduce
    assert r is not None and numel(shape) > 0
    rows = numel([n for d, n in enumerate(shape) if d not in r.axes])
    few = rows < rt.compute_units * CPU_ITEMS_PER_CU and numel(shape) >= CPU_DECLINE_ELEMENTS
    if rt.is_cpu and few and any(op in LIBM_OPS for op, _, _ in prog.instructions):
        # declined: few long rows of a libm op run faster as the region's kernel (SIMD across
        # work items), then the reduction kernel, than as chunks each a scalar loop (docs/fusion.md)
        COUNTS["declined"] += 1
        whole = FusedProgram(prog.inputs, prog.instructions, (*prog.outputs, r.value))
        *outs, value = run_program(rt, whole, operands, shape)
        return [*outs, reduce_rows(rt, r.op, value, r.axes, r.keepdims)]
    dts = prog.value_dtypes()
    tensors = [x for (_, kind), x in zip(prog.inputs, operands) if kind == "tensor"]
    key = (rt, prog, shape, tuple((x.shape, x.strides, x.offset) for x in tensors))
    plan = _PLANS.get(key)
    if plan is None:
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[key] = _plan(rt, prog, shape, [(x.shape, x.strides, x.offset) for x in tensors])
    outs = [rt.empty(shape, ctype(dts[o]).dtype) for o in prog.outputs]
    vdt = ctype(dts[r.value]).dtype
    acc_dt = ctype(_acc(r.op, vdt.name)).dtype
    red = rt.empty((plan.M * plan.G,), acc_dt) if plan.partial else rt.empty((plan.M,), vdt)
    args: list[Any] = [*plan.head, red.buf]
    for o, (off, a, b) in zip(outs, plan.out_specs):
        args += [o.buf, off, *a, *b]
    for x, (kind, spec) in zip(operands, plan.in_specs):
        if kind == "scalar":
            args.append(np_scalar(x, spec))
        else:
            off, a, b = spec
            args += [x.buf, off, *a, *b]
    rt.launch(plan.knl, plan.gsize, plan.lsize, args)
    COUNTS["columns" if plan.columns else "chunked" if plan.partial else "group" if plan.group else "per_item"] += 1
    out_shape = r.shape(shape)
    if plan.partial:  # combine the chunks of each row: a small reduction of M x G (columns: G x M) partials
        fold = "sum" if r.op == "mean" else r.op
        if plan.columns:
            total = reduce_rows(rt, fold, red.reshape((plan.G, plan.M)), (0,), False)
        else:
            total = reduce_rows(rt, fold, red.reshape((plan.M, plan.G)), (1,), False)
        red = _finish(rt, total, r.op, plan.K, acc_dt.name, vdt.name)
    return [*outs, red.reshape(out_shape)]


def _finish(rt: Runtime, total: CLArray, op: str, count: int, acc: str, dt: str) -> CLArray:
    """The accumulator-dtype row results as the value's dtype (a mean divided by ``count`` first)."""
    if op != "mean" and acc == dt:
        return total
    inputs: tuple[tuple[str, str], ...] = ((acc, "tensor"),)
    body: list[tuple[str, str, tuple[Any, ...]]] = []
    operands: list[Any] = [total]
    if op == "mean":
        inputs += ((acc, "scalar"),)
        operands.append(float(count))
        body.append(("div", acc, (0, 1)))
    if acc != dt:
        body.append(("cast", dt, (len(inputs) + len(body) - 1,)))
    prog = FusedProgram(inputs, tuple(body), (len(inputs) + len(body) - 1,))
    return run_program(rt, prog, operands, total.shape)[0]

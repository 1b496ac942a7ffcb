"""Running elementwise programs: broadcasting, layout collapsing, kernel choice and launch."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ember.dtypes import as_dtype, real_dtype
from ember.shapes import numel
from ember.views import View, collapse, contiguous_strides

from .array import CLArray
from .cltypes import ctype, np_scalar
from .codegen import Const, FusedProgram, Layout, elementwise_source, elementwise_sources, vector_ok
from .complex import REAL_RESULT
from .ops_table import BOOL_RESULT
from .runtime import Family, Runtime

__all__ = [
    "run_program",
    "unary_program",
    "binary_program",
    "cast_program",
    "where_program",
    "contiguous",
    "copy_into",
    "Const",
]

_INT_LIMIT = 2**31 - 2**25

#: run the 4-wide kernels on CPU devices too (tests exercise them on PoCL this way)
VECTOR_ON_CPU = False
#: on GPUs, where an operand is strided every input and output goes through its strides (a
#: contiguous or broadcast one too: an integer multiply-add per rank an element more, in a kernel
#: that computes the coordinates anyway), so the mixes of c, z and s of an op share one program per
#: rank. CPUs keep the mixes apart (PoCL vectorises a contiguous access across work items, not a
#: strided one)
SHARED_STRIDED = True


def _extent(shape: Sequence[int], strides: Sequence[int], offset: int) -> int:
    """The largest |element index| an operand touches."""
    lo, hi = View(tuple(shape), tuple(strides), offset).span()
    return max(hi - 1, -lo)


def _mode(strides: Sequence[int], shape: Sequence[int]) -> str:
    if all(s == 0 for s in strides):
        return "z"
    if tuple(strides) == contiguous_strides(shape):
        return "c"
    return "s"


class _Plan:
    """Everything about a launch that depends on shapes and strides only (cached per geometry)."""

    __slots__ = ("knl", "gsize", "lsize", "out_dtypes", "head", "out_strides", "in_specs")

    def __init__(self, knl: Any, gsize: Any, lsize: Any, out_dtypes: list[Any], head: list[int],
                 out_strides: list[tuple[int, ...]], in_specs: list[Any]) -> None:  # fmt: skip
        self.knl = knl
        self.gsize = gsize
        self.lsize = lsize
        self.out_dtypes = out_dtypes
        self.head = head
        self.out_strides = out_strides
        self.in_specs = in_specs  # per input: ("scalar", CType) or ("tensor", strides to pass)


_PLANS: dict[Any, _Plan] = {}
_MAX_PLANS = 8192


def _plan(
    rt: Runtime, prog: FusedProgram, shape: tuple[int, ...], geoms: tuple[Any, ...], alias: bool = False
) -> _Plan:
    """geoms: (shape, strides, offset) of each output, then of each tensor input (unbroadcast);
    ``alias``: an output shares an input's buffer (the kernel is compiled without ``restrict``)."""
    n = numel(shape)
    n_out = len(prog.outputs)
    strides = []
    offsets = []
    for k, (sh, st, off) in enumerate(geoms):
        if k >= n_out and sh != shape:
            st = View(sh, st).broadcast_strides(shape)
        strides.append(st)
        offsets.append(off)
    cshape, cstrides = collapse(shape, strides)
    if n == 1:  # one element: every operand reads ``off`` in any mode; "c" shares the contiguous kernel
        cshape, cstrides = (1,), [(1,)] * len(cstrides)
    modes = [_mode(st, cshape) for st in cstrides]
    if SHARED_STRIDED and not rt.is_cpu and "s" in modes:
        # every operand read and written through its strides: one kernel per rank for every mix
        modes = ["s"] * len(modes)
    out_modes = tuple(modes[:n_out])
    in_modes = tuple(modes[n_out:])
    rank = len(cshape) if "s" in modes else 1
    big = n >= _INT_LIMIT or any(_extent(cshape, st, off) >= _INT_LIMIT for st, off in zip(cstrides, offsets))
    vec = 4 if _vectorizable(rt, prog, n, modes, offsets, n_out) else 1
    layout = Layout(rank, in_modes, out_modes, "long" if big else "int", grid_stride=not rt.is_cpu, vec=vec)
    if alias:
        knl, wg = rt.kernel(("ew", prog, layout, "alias"), functools.partial(_make, prog, layout, True), None)
    else:
        family = _family(prog, layout, rt.fp64)
        knl, wg = rt.kernel(("ew", prog, layout), functools.partial(_make, prog, layout), family)
    gsize, lsize = rt.grid(-(-n // vec), wg)
    head = [n, *cshape] if "s" in modes else [n]
    passed = [st if m == "s" else () for st, m in zip(cstrides, modes)]
    dts = prog.value_dtypes()
    t_iter = iter(passed[n_out:])
    in_specs = [("scalar", ctype(dt)) if kind == "scalar" else ("tensor", next(t_iter)) for dt, kind in prog.inputs]
    out_dtypes = [ctype(dts[o]).dtype for o in prog.outputs]
    return _Plan(knl, gsize, lsize, out_dtypes, head, passed[:n_out], in_specs)


def _vectorizable(rt: Runtime, prog: FusedProgram, n: int, modes: list[str], offsets: list[int], n_out: int) -> bool:
    """Four elements per work item on GPUs: 128-bit loads and stores where every contiguous
    operand starts on a multiple of 4 (PoCL vectorises the scalar kernel itself). ``n`` need not be
    a multiple of 4 (the kernel does the last ``n % 4`` one at a time): one program for every size."""
    if (rt.is_cpu and not VECTOR_ON_CPU) or n == 0:
        return False
    if any(m == "c" and off % 4 for m, off in zip(modes, offsets)):
        return False
    return vector_ok(prog, tuple(modes[n_out:]), tuple(modes[:n_out]))


def run_program(
    rt: Runtime,
    prog: FusedProgram,
    operands: Sequence[Any],
    shape: tuple[int, ...],
    outs: Sequence[CLArray] | None = None,
) -> list[CLArray]:
    """Run ``prog`` over ``shape``: tensor operands broadcast, scalars passed by value.

    ``outs`` are destination views (default: new contiguous handles of ``shape``).
    """
    tensors = []
    in_geo = []
    for (_, kind), x in zip(prog.inputs, operands):  # (plain loops: this runs for every elementwise op)
        if kind == "tensor":
            tensors.append(x)
            in_geo.append((x.shape, x.strides, x.offset))
    alias = False
    if outs is None:
        out_geo: tuple[Any, ...] = (None,)
    else:
        out_geo = tuple([(o.shape, o.strides, o.offset) for o in outs])
        for o in outs:
            if o.block is not None:
                for x in tensors:
                    if o.block is x.block:
                        alias = True
    key = (rt, prog, shape, out_geo, tuple(in_geo), alias)
    plan = _PLANS.get(key)
    if plan is None:
        if outs is None:
            contiguous_geo = (shape, contiguous_strides(shape), 0)
            geoms = (contiguous_geo,) * len(prog.outputs)
        else:
            geoms = out_geo
        geoms += tuple(in_geo)
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        plan = _PLANS[key] = _plan(rt, prog, shape, geoms, alias) if numel(shape) else None  # type: ignore[assignment]
    if outs is None:
        dtypes = plan.out_dtypes if plan is not None else [ctype(prog.value_dtypes()[o]).dtype for o in prog.outputs]
        outs = [rt.empty(shape, dt) for dt in dtypes]
    if plan is None:
        return list(outs)
    args: list[Any] = list(plan.head)
    for o, st in zip(outs, plan.out_strides):  # (a non-empty launch: every handle has a block)
        args.append(o.block.raw)
        args.append(o.offset)
        args.extend(st)
    for x, (kind, spec) in zip(operands, plan.in_specs):
        if kind == "scalar":
            args.append(np_scalar(x, spec))
        else:
            args.append(x.block.raw)
            args.append(x.offset)
            args.extend(spec)
    rt.launch(plan.knl, plan.gsize, plan.lsize, args)
    return list(outs)


def _make(prog: FusedProgram, layout: Layout, alias: bool = False) -> tuple[str, str, list[Any]]:
    source, argtypes = elementwise_source(prog, layout)
    if alias:  # an output is an input's buffer (an in-place update): no pointer may be declared restrict
        source = source.replace("* restrict ", "* ")
    return source, "ember_ew", argtypes


# -- families: single ops compiled together (runtime.FAMILY_AFTER says when) -----------------
#: ops a program tends to use together; one group of one dtype and layout is one program
UNARY_GROUPS = (
    ("copy", "neg", "abs", "sign", "square", "reciprocal", "relu"),
    ("floor", "ceil", "round", "trunc"),
    ("exp", "log", "sqrt", "rsqrt", "exp2", "expm1", "log2", "log10", "log1p"),
    ("sin", "cos", "tan", "asin", "acos", "atan"),
    ("sinh", "cosh", "tanh", "asinh", "acosh", "atanh"),
    ("sigmoid", "gelu", "gelu_tanh", "silu", "softplus", "erf"),
    ("isnan", "isinf", "isfinite", "logical_not", "bitwise_not"),
    ("conj", "real", "imag", "angle"),
)
BINARY_GROUPS = (
    ("add", "sub", "mul", "div", "maximum", "minimum"),
    ("floordiv", "remainder", "pow"),
    ("eq", "ne", "lt", "le", "gt", "ge"),
    ("logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor"),
    ("atan2", "hypot", "logaddexp"),
)
#: cast destinations grouped (the source dtype is the program's)
CAST_GROUPS = (
    ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
    ("float16", "bfloat16", "float32", "float64"),
    ("complex64", "complex128"),
)
_NEEDS_FP64 = frozenset(["float64", "complex128"])


def unary_out(op: str, dtype: str) -> str:
    """The result dtype of unary ``op`` on ``dtype`` (bool for predicates, real for |z| and parts)."""
    if op in BOOL_RESULT:
        return "bool"
    if op in REAL_RESULT and as_dtype(dtype).kind == "c":
        return real_dtype(as_dtype(dtype)).name
    return dtype


def _family(prog: FusedProgram, layout: Layout, fp64: bool) -> Family | None:
    """The group of single-op programs ``prog`` belongs to under ``layout``, or None (a fused region)."""
    n_in = len(prog.inputs)
    if len(prog.instructions) != 1 or prog.outputs != (n_in,) or prog.inputs[0][1] != "tensor":
        return None
    op, out, args = prog.instructions[0]
    if args != tuple(range(n_in)):
        return None
    dt = prog.inputs[0][0]
    if op == "cast":
        group = next((g for g in CAST_GROUPS if out in g), ())
        members = [cast_program(dt, d) for d in group if d != dt and (fp64 or d not in _NEEDS_FP64)]
    elif n_in == 1:
        group = next((g for g in UNARY_GROUPS if op in g), ())
        members = [unary_program(o, dt, unary_out(o, dt)) for o in group]
    elif n_in == 2 and prog.inputs[1][0] == dt:
        scalar_b = prog.inputs[1][1] == "scalar"
        group = next((g for g in BINARY_GROUPS if op in g), ())
        members = [binary_program(o, dt, "bool" if o in BOOL_RESULT else dt, scalar_b) for o in group]
    else:
        return None
    if layout.vec != 1:
        members = [m for m in members if vector_ok(m, layout.in_modes, layout.out_modes)]
    if prog not in members or len(members) < 2:
        return None
    return Family(("ew", group, dt, layout), functools.partial(_family_source, tuple(members), layout))


def _family_source(members: tuple[FusedProgram, ...], layout: Layout) -> tuple[str, list[tuple[Any, str, list[Any]]]]:
    names = [f"ember_ew{i}" for i in range(len(members))]
    source, kept, argtypes = elementwise_sources(list(members), layout, names)
    by_name = dict(zip(names, members))
    return source, [(("ew", by_name[n], layout), n, types) for n, types in zip(kept, argtypes)]


@functools.cache
def unary_program(op: str, dtype: str, out: str) -> FusedProgram:
    return FusedProgram(((dtype, "tensor"),), ((op, out, (0,)),), (1,))


@functools.cache
def binary_program(op: str, dtype: str, out: str, scalar_b: bool) -> FusedProgram:
    kind = "scalar" if scalar_b else "tensor"
    return FusedProgram(((dtype, "tensor"), (dtype, kind)), ((op, out, (0, 1)),), (2,))


@functools.cache
def cast_program(src: str, dst: str) -> FusedProgram:
    return FusedProgram(((src, "tensor"),), (("cast", dst, (0,)),), (1,))


@functools.cache
def where_program(dtype: str, scalar_a: bool = False, scalar_b: bool = False) -> FusedProgram:
    ka = "scalar" if scalar_a else "tensor"
    kb = "scalar" if scalar_b else "tensor"
    return FusedProgram((("bool", "tensor"), (dtype, ka), (dtype, kb)), (("where", dtype, (0, 1, 2)),), (3,))


def contiguous(rt: Runtime, a: CLArray) -> CLArray:
    """``a`` itself if contiguous, else a contiguous copy."""
    if a.is_contiguous():
        return a
    return run_program(rt, unary_program("copy", a.dtype.name, a.dtype.name), [a], a.shape)[0]


def copy_into(rt: Runtime, dst: CLArray, src: CLArray) -> None:
    """Write ``src`` (broadcast to ``dst``'s shape) into the view ``dst``."""
    run_program(rt, unary_program("copy", src.dtype.name, dst.dtype.name), [src], dst.shape, outs=[dst])

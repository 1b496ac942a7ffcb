"""The one elementwise kernel generator: a :class:`~ember.lazy.FusedProgram` in, OpenCL C out.

The program form is core's (``ember.lazy.program``): typed inputs (tensors read through
strides, or scalar kernel arguments), instructions ``(op, dtype, args)`` whose args are SSA
value numbers or :class:`~ember.lazy.Const` literals, and the values to write out. A single op
is a one-instruction program; a region the lazy layer fused is a longer one, compiled to the
same kind of kernel.

Shapes and strides are kernel arguments, so one compiled kernel serves every shape of the
same rank and layout: each tensor operand is read as ``c`` (contiguous: ``off + i``),
``z`` (one broadcast element: ``off``) or ``s`` (strided: ``off + sum(coord * stride)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.lazy.program import Const, FusedProgram

from .cltypes import PREAMBLE_BF16, CType, ctype, literal
from .complex import library as complex_library
from .ops_table import expression

__all__ = [
    "Const",
    "FusedProgram",
    "Layout",
    "elementwise_source",
    "elementwise_sources",
    "preamble",
    "unravel",
    "offset_expr",
]


@dataclass(frozen=True)
class Layout:
    """How one launch reads and writes: rank, a mode per tensor input and output, index type."""

    rank: int
    in_modes: tuple[str, ...]
    out_modes: tuple[str, ...]
    index: str = "int"  # "int" or "long"
    grid_stride: bool = False
    #: 4: each work item does four elements through 128-bit loads and stores (see :func:`vector_ok`)
    vec: int = 1
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


_COMPLEX_PARTS = (("complex64", "float"), ("complex128", "double"))


def preamble(dtypes: set[str] | list[str], helpers: dict[str, str] | None = None, atomics64: bool = False) -> str:
    """Pragmas and helper functions a kernel over ``dtypes`` needs."""
    lines = ["#pragma OPENCL FP_CONTRACT OFF"]
    if "float64" in dtypes or "complex128" in dtypes:
        lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    if atomics64:
        lines.append("#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable")
    if "bfloat16" in dtypes:
        lines.append(PREAMBLE_BF16)
    lines.extend(complex_library(part) for dt, part in _COMPLEX_PARTS if dt in dtypes)
    if helpers:
        lines.extend(helpers.values())
    return "\n".join(lines) + "\n"


def unravel(index: str, rank: int, shape: str, idx: str, prefix: str = "c") -> list[str]:
    """Statements splitting linear ``index`` into coordinates ``{prefix}0..`` over ``{shape}k``."""
    if rank == 1:
        return [f"{idx} {prefix}0 = {index};"]
    out = [f"{idx} {prefix}_r = {index};"]
    for d in range(rank - 1, 0, -1):
        out.append(f"{idx} {prefix}{d} = {prefix}_r % {shape}{d}; {prefix}_r /= {shape}{d};")
    out.append(f"{idx} {prefix}0 = {prefix}_r;")
    return out


def offset_expr(name: str, rank: int, prefix: str = "c") -> str:
    """``{name}_off + c0 * {name}_s0 + ...``."""
    terms = [f"{name}_off"] + [f"{prefix}{d} * {name}_s{d}" for d in range(rank)]
    return " + ".join(terms)


#: storage types a 4-wide vector load reads as is (the compute type equals the storage type)
_VECTOR_TYPES = frozenset(["float", "int", "uint"])


def vector_ok(prog: FusedProgram, in_modes: tuple[str, ...], out_modes: tuple[str, ...]) -> bool:
    """Whether ``prog`` can run four elements per work item: every tensor contiguous or one
    broadcast element, and every tensor and output of a 32-bit type computed as stored."""
    if any(m not in ("c", "z") for m in (*in_modes, *out_modes)):
        return False
    types = prog.value_dtypes()
    used = [types[i] for i in prog.tensor_inputs] + [types[o] for o in prog.outputs]
    return all(ctype(dt).storage in _VECTOR_TYPES and ctype(dt).storage == ctype(dt).compute for dt in used)


def elementwise_source(prog: FusedProgram, layout: Layout) -> tuple[str, list[Any]]:
    """OpenCL C for ``prog`` under ``layout`` (kernel ``ember_ew``), and its scalar-argument dtypes."""
    source, _, argtypes = elementwise_sources([prog], layout, ["ember_ew"])
    return source, argtypes[0]


def elementwise_sources(
    progs: list[FusedProgram], layout: Layout, names: list[str]
) -> tuple[str, list[str], list[list[Any]]]:
    """One program holding a kernel per element of ``progs`` (named ``names``) under ``layout``.

    Programs whose ops do not apply to their dtypes are left out; returns (source, the names
    kept, their scalar-argument dtypes). Compiling related kernels together costs one build.
    """
    helpers: dict[str, str] = {}
    dtypes: set[str] = set()
    kernels: list[str] = []
    kept: list[str] = []
    argtypes: list[list[Any]] = []
    for prog, name in zip(progs, names):
        local = dict(helpers)
        try:
            text, types = _kernel(prog, layout, name, local)
        except ValueError:
            if len(progs) == 1:
                raise
            continue
        helpers = local
        dtypes.update(prog.value_dtypes())
        kernels.append(text)
        kept.append(name)
        argtypes.append(types)
    return preamble(dtypes, helpers) + "\n".join(kernels), kept, argtypes


def _kernel(prog: FusedProgram, layout: Layout, name: str, helpers: dict[str, str]) -> tuple[str, list[Any]]:
    dts = prog.value_dtypes()
    types = [ctype(d) for d in dts]
    idx = layout.index
    np_idx = np.dtype(np.int32 if idx == "int" else np.int64)
    rank = layout.rank
    strided = "s" in layout.in_modes or "s" in layout.out_modes
    params: list[str] = [f"const {idx} n"]
    argtypes: list[Any] = [np_idx]
    if strided:
        for d in range(rank):
            params.append(f"const {idx} sh{d}")
            argtypes.append(np_idx)

    def tensor_params(name: str, c: CType, mode: str, const: bool) -> None:
        q = "const " if const else ""
        params.append(f"__global {q}{c.storage}* restrict {name}")
        argtypes.append(None)
        params.append(f"const {idx} {name}_off")
        argtypes.append(np_idx)
        if mode == "s":
            for d in range(rank):
                params.append(f"const {idx} {name}_s{d}")
                argtypes.append(np_idx)

    out_types = [types[o] for o in prog.outputs]
    for k, (c, mode) in enumerate(zip(out_types, layout.out_modes)):
        tensor_params(f"out{k}", c, mode, const=False)
    if layout.vec == 4:
        return _vector_kernel(prog, layout, name, helpers, types, params, argtypes), argtypes
    tensor_modes = iter(layout.in_modes)
    body: list[str] = []
    for j, (_, kind) in enumerate(prog.inputs):
        c = types[j]
        if kind == "scalar":
            params.append(f"const {c.compute} in{j}")
            argtypes.append(c.np_compute)
            body.append(f"const {c.compute} v{j} = in{j};")
            continue
        mode = next(tensor_modes)
        tensor_params(f"in{j}", c, mode, const=True)
        where = {"c": f"in{j}_off + i", "z": f"in{j}_off", "s": offset_expr(f"in{j}", rank)}[mode]
        body.append(f"const {c.compute} v{j} = {c.load(f'in{j}', where)};")
    body += _instructions(prog, types, helpers, lambda v: f"v{v}", "i")
    for k, (o, mode) in enumerate(zip(prog.outputs, layout.out_modes)):
        c = types[o]
        where = {"c": f"out{k}_off + i", "z": f"out{k}_off", "s": offset_expr(f"out{k}", rank)}[mode]
        body.append(c.store(f"out{k}", where, f"v{o}"))
    lines = [f"__kernel void {name}(" + ", ".join(params) + ") {"]
    if layout.grid_stride:
        lines.append(f"  for ({idx} i = ({idx})get_global_id(0); i < n; i += ({idx})get_global_size(0)) {{")
    else:
        lines.append(f"  const {idx} i = ({idx})get_global_id(0);")
        lines.append("  if (i < n) {")
    if strided:
        lines.extend("    " + s for s in unravel("i", rank, "sh", idx))
    lines.extend("    " + s for s in body)
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n", argtypes


def _instructions(prog: FusedProgram, types: list[CType], helpers: dict[str, str], name: Any, index: str) -> list[str]:
    """One statement per instruction; ``name(v)`` spells SSA value ``v``, ``index`` the element index."""
    n_in = len(prog.inputs)
    body = []
    for j, (op, _, args) in enumerate(prog.instructions):
        c = types[n_in + j]
        if op == "iota":
            expr = f"(({c.compute})({index}))"
        else:
            typed = []
            for a in args:
                if isinstance(a, Const):
                    ac = ctype(a.dtype)
                    typed.append((literal(a.value, ac), ac))
                else:
                    typed.append((name(a), types[a]))
            expr = expression(op, typed, c, helpers)
        body.append(f"const {c.compute} {name(n_in + j)} = {expr};")
    return body


def _vector_kernel(
    prog: FusedProgram,
    layout: Layout,
    name: str,
    helpers: dict[str, str],
    types: list[CType],
    params: list[str],
    argtypes: list[Any],
) -> str:
    """The 4-wide kernel: work item ``q`` reads elements ``4q..4q+3`` of each contiguous tensor
    with one 128-bit load, computes the program once per lane and stores four results at once.
    ``n`` stays the element count (every contiguous offset a multiple of 4); the last ``n % 4``
    elements are done one per work item after the loop, so a size that is not a multiple of 4
    needs no program of its own."""
    idx = layout.index
    tensor_modes = iter(layout.in_modes)
    head: list[str] = []
    for j, (_, kind) in enumerate(prog.inputs):
        c = types[j]
        if kind == "scalar":
            params.append(f"const {c.compute} in{j}")
            argtypes.append(c.np_compute)
            head.append(f"const {c.compute} v{j} = in{j};")
            continue
        mode = next(tensor_modes)
        params.append(f"__global const {c.storage}* restrict in{j}")
        argtypes.append(None)
        params.append(f"const {idx} in{j}_off")
        argtypes.append(np.dtype(np.int32 if idx == "int" else np.int64))
        if mode == "z":
            head.append(f"const {c.compute} v{j} = in{j}[in{j}_off];")
    lanes = "xyzw"
    body: list[str] = []
    tensor_modes = iter(layout.in_modes)
    vector_inputs = []
    for j, (_, kind) in enumerate(prog.inputs):
        if kind == "tensor" and next(tensor_modes) == "c":
            c = types[j]
            body.append(f"const {c.storage}4 q{j} = ((__global const {c.storage}4*)(in{j} + in{j}_off))[q];")
            vector_inputs.append(j)
    for k, lane in enumerate(lanes):

        def spell(v: int, lane: str = lane) -> str:
            return f"v{v}_{lane}" if v in vector_inputs or v >= len(prog.inputs) else f"v{v}"

        for j in vector_inputs:
            body.append(f"const {types[j].compute} v{j}_{lane} = q{j}.{lane};")
        body += _instructions(prog, types, helpers, spell, f"4 * q + {k}")
    for k, o in enumerate(prog.outputs):
        c = types[o]
        per_lane = o in vector_inputs or o >= len(prog.inputs)
        parts = ", ".join((f"v{o}_{lane}" if per_lane else f"v{o}") for lane in lanes)
        body.append(f"((__global {c.storage}4*)(out{k} + out{k}_off))[q] = ({c.storage}4)({parts});")
    lines = [f"__kernel void {name}(" + ", ".join(params) + ") {"]
    lines.extend("  " + h for h in head)
    lines.append(f"  const {idx} nq = n >> 2;")
    lines.append(f"  for ({idx} q = ({idx})get_global_id(0); q < nq; q += ({idx})get_global_size(0)) {{")
    lines.extend("    " + b for b in body)
    lines.append("  }")
    tail: list[str] = []
    tensor_modes = iter(layout.in_modes)
    for j, (_, kind) in enumerate(prog.inputs):
        if kind == "tensor" and next(tensor_modes) == "c":
            c = types[j]
            tail.append(f"const {c.compute} v{j}_t = {c.load(f'in{j}', f'in{j}_off + t')};")

    def scalar(v: int) -> str:
        return f"v{v}_t" if v in vector_inputs or v >= len(prog.inputs) else f"v{v}"

    tail += _instructions(prog, types, helpers, scalar, "t")
    for k, (o, mode) in enumerate(zip(prog.outputs, layout.out_modes)):
        tail.append(types[o].store(f"out{k}", f"out{k}_off + t" if mode == "c" else f"out{k}_off", scalar(o)))
    lines.append(f"  for ({idx} t = (nq << 2) + ({idx})get_global_id(0); t < n; t += ({idx})get_global_size(0)) {{")
    lines.extend("    " + b for b in tail)
    lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"

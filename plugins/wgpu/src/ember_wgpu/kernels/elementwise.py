"""Running elementwise programs: fused regions, single ops, casts, copies, fills.

All of them are :class:`ember.lazy.program.FusedProgram` s run by :func:`run_program` through
the one generator (:mod:`ember_wgpu.codegen.elementwise`); a single op is the one-instruction
program. Compiled kernels are cached per (program, rank where strides are general, vec width,
layout classes), never per shape: shapes, strides, offsets and scalar values are parameters.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from typing import Any

from ember.dtypes import DType, as_dtype, bool_, real_dtype
from ember.lazy.program import Const, FusedProgram
from ember.views import contiguous_strides

from ..codegen import elementwise as gen
from ..codegen.complex_lib import REAL_RESULT
from ..codegen.ops import BOOL_RESULT
from ..handle import WgpuArray
from ..runtime import Runtime

__all__ = [
    "run_program",
    "op_program",
    "apply_op",
    "apply_op_args",
    "copy_into",
    "contiguous",
    "fill",
    "broadcast_shape",
]

#: cap on workgroups of a grid-stride loop: WebGPU's per-dimension limit. 4096 left NVIDIA's Vulkan
#: driver at 1.36 ms per W6 step on the H100 where 16384 or more took 0.46 (logs/h100-2026-12-06)
MAX_GROUPS = 65535


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    first = shapes[0] if shapes else ()
    for s in shapes:
        if s != first:
            break
    else:
        return first
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, rank - len(s)):
            if d != 1:
                out[i] = d
    return tuple(out)


#: launch plans kept per runtime before the dict is cleared (a plan is cheap to rebuild)
MAX_PLANS = 4096


class _Plan:
    """One launch geometry of a program: its pipeline, the parameter block up to the scalars."""

    __slots__ = (
        "pipe",
        "name",
        "head",
        "scalar_types",
        "tail",
        "groups",
        "out_dtypes",
        "pad",
        "whole",
        "grid",
        "bound",
        "pack_f32",
    )

    def __init__(
        self,
        pipe: Any,
        name: str,
        head: bytes,
        scalar_types: list[Any],
        tail: int,
        groups: int,
        out_dtypes: list[DType],
        bound: tuple[int, ...] | None = None,
    ) -> None:
        self.pipe = pipe
        self.name = name
        self.head = head
        self.scalar_types = scalar_types
        self.tail = tail
        self.groups = groups
        self.out_dtypes = out_dtypes
        self.pad = bytes(tail)  # zero bytes after the scalars, up to the block's size
        self.whole = head + self.pad  # the block of a launch without scalar inputs
        self.grid = (groups, 1, 1)
        self.bound = bound  # the outputs with a binding of their own (None: all; the others are stored in place)
        # scalars all float32: packed in one call (as scalar_words + pack_scalars would: float(v) as 'f')
        f32 = scalar_types and all(t.name == "float32" for t in scalar_types)
        self.pack_f32 = struct.Struct("<" + "f" * len(scalar_types)).pack if f32 else None


def run_program(
    rt: Runtime,
    program: FusedProgram,
    operands: Sequence[Any],
    shape: tuple[int, ...],
    outs: Sequence[WgpuArray] | None = None,
) -> list[WgpuArray]:
    """Run ``program`` over ``shape``: tensor operands (handles broadcasting to ``shape``, any
    strides) and Python numbers for scalar inputs, in input order. ``outs`` are destination
    views of ``shape`` (default: new contiguous handles, one per program output); an output that
    is one of the tensor operands (the same handle: an in-place update) is stored through that
    operand's binding, made read-write, rather than bound a second time."""
    tensors: list[WgpuArray] = []
    scalars: list[Any] = []
    for x in operands:
        if isinstance(x, WgpuArray):
            tensors.append(x)
        else:
            scalars.append(x)
    alias: tuple[int | None, ...] = ()
    if outs is not None:
        at: list[int | None] = [None] * len(outs)  # the operand each output is (an in-place update)
        for i, o in enumerate(outs):
            for b, x in enumerate(tensors):
                if x is o:
                    at[i] = b
                    break
        if at.count(None) < len(at):
            alias = tuple(at)
    key = (
        program,
        shape,
        tuple([(x.shape, x.strides, x.offset) for x in tensors]),
        None if outs is None else tuple([(o.strides, o.offset) for o in outs]),
        alias,
    )
    plan = rt.plans.get(key)
    if plan is None:
        if len(tensors) + len(program.outputs) > rt.max_storage_buffers:
            return _run_split(rt, program, operands, shape, outs)
        if len(rt.plans) >= MAX_PLANS:
            rt.plans.clear()
        plan = rt.plans[key] = _plan(rt, program, tensors, shape, outs, alias)
    if outs is None:
        outs = [rt.empty(shape, dt) for dt in plan.out_dtypes]
    if plan.groups == 0:
        return list(outs)
    if scalars and plan.pack_f32 is not None:
        params = plan.head + plan.pack_f32(*[float(v) for v in scalars]) + plan.pad
    elif scalars:
        words: list[int | float] = []
        for value, t in zip(scalars, plan.scalar_types):
            words.extend(gen.scalar_words(value, t))
        params = plan.head + gen.pack_scalars(plan.scalar_types, words) + plan.pad
    else:
        params = plan.whole
    bound = outs if plan.bound is None else [outs[o] for o in plan.bound]
    # every operand and output holds a block here: none is empty when the launch covers elements
    buffers = [x.storage.raw for x in tensors]
    buffers += [o.storage.raw for o in bound]
    rt.dispatch(plan.pipe, params, buffers, plan.grid, plan.name)
    return list(outs)


def _plan(
    rt: Runtime,
    program: FusedProgram,
    tensors: list[WgpuArray],
    shape: tuple[int, ...],
    outs: Sequence[WgpuArray] | None,
    alias: tuple[int | None, ...] = (),
) -> _Plan:
    """Layouts, vec width, the kernel (compiled once per program, layout class and ``alias``: the
    tensor input each output is stored through, see :func:`run_program`) and the parameter block
    of this geometry."""
    dts = program.value_dtypes()
    out_dtypes = [as_dtype(dts[v]) for v in program.outputs]
    size = math.prod(shape)
    scalar_types = [rt.types[dt] for dt, kind in program.inputs if kind == "scalar"]
    if size == 0:
        return _Plan(None, "", b"", scalar_types, 0, 0, out_dtypes)
    ins = [(x.broadcast_strides(shape), x.offset) for x in tensors]
    if outs is None:
        geo = [(contiguous_strides(shape), 0)] * len(out_dtypes)
    else:
        geo = [(o.strides, o.offset) for o in outs]
    lay = gen.layouts(shape, ins, geo)
    vec = gen.vec_width(program, rt.types, size, ins, geo, lay)
    # an output stored through an input of its layout class (else bound twice: the twin binds both read-write)
    alias = tuple(b if b is not None and lay[0][b] == lay[1][o] else None for o, b in enumerate(alias))
    if not any(b is not None for b in alias):
        alias = ()
    general = "g" in lay[0] or "g" in lay[1]
    kkey = ("ew", program, len(shape) if general else 0, vec, lay, alias)
    found = rt.kernels.get(kkey)
    if found is None:
        kernel = gen.generate(program, rt.types, len(shape), lay, vec, alias)
        name = program.instructions[0][0] if len(program.instructions) == 1 else "fused"
        found = (kernel, rt.pipeline(name, kernel.source, kernel.bindings), name)
        rt.kernels[kkey] = found
    kernel, pipe, name = found
    head = gen.pack(program, rt.types, kernel, shape, ins, geo, [], lay, with_scalars=False)
    tail = kernel.param_bytes - len(head) - gen.scalar_bytes(scalar_types)
    items = -(-size // vec)  # vec4s (the last may be partial) or elements
    groups = min(-(-items // gen.WORKGROUP), MAX_GROUPS)
    bound = tuple(o for o, b in enumerate(alias) if b is None) if alias else None
    return _Plan(pipe, name, head, scalar_types, tail, groups, out_dtypes, bound)


def _run_split(
    rt: Runtime,
    program: FusedProgram,
    operands: Sequence[Any],
    shape: tuple[int, ...],
    outs: Sequence[WgpuArray] | None,
) -> list[WgpuArray]:
    """A program binding more buffers than the adapter allows, run one instruction at a time
    (each through the generator, intermediates in full-size buffers)."""
    if outs is None:
        dts = program.value_dtypes()
        outs = [rt.empty(shape, as_dtype(dts[v])) for v in program.outputs]
    values: list[Any] = list(operands)
    kinds = [kind for _, kind in program.inputs]
    dts = program.value_dtypes()
    for op, dt, args in program.instructions:
        inputs, refs, ops = [], [], []
        for a in args:
            if isinstance(a, Const):
                refs.append(a)
                continue
            refs.append(len(inputs))
            inputs.append((dts[a], kinds[a]))
            ops.append(values[a])
        single = FusedProgram(tuple(inputs), ((op, dt, tuple(refs)),), (len(inputs),))
        values.append(run_program(rt, single, ops, shape)[0])
        kinds.append("tensor")
    for v, out in zip(program.outputs, outs):
        copy_program = FusedProgram(((dts[v], kinds[v]),), (("copy", dts[v], (0,)),), (1,))
        run_program(rt, copy_program, [values[v]], shape, [out])
    return list(outs)


@functools.cache
def op_program(op: str, dtype: str, inputs: tuple[tuple[str, str], ...]) -> FusedProgram:
    """One elementwise op (or ``cast``/``copy``) over ``inputs`` as a one-instruction program."""
    n = len(inputs)
    return FusedProgram(inputs, ((op, dtype, tuple(range(n))),), (n,))


def apply_op(rt: Runtime, op: str, args: Sequence[Any], dtype: DType | None = None) -> WgpuArray:
    """``op`` over handles and Python scalars (scalars take the first handle's dtype)."""
    handles = [a for a in args if isinstance(a, WgpuArray)]
    shape = broadcast_shape(*[h.shape for h in handles])
    like = handles[0].dtype if op != "where" else handles[1 if isinstance(args[1], WgpuArray) else -1].dtype
    if dtype is None:
        dtype = bool_ if op in BOOL_RESULT else like
        if op in REAL_RESULT and like.kind == "c":  # abs, real, imag, angle of a complex tensor
            dtype = real_dtype(like)
    inputs = tuple(
        (a.dtype.name, "tensor")
        if isinstance(a, WgpuArray)
        else (bool_.name if op == "where" and k == 0 else like.name, "scalar")
        for k, a in enumerate(args)
    )
    return run_program(rt, op_program(op, dtype.name, inputs), args, shape)[0]


def apply_op_args(rt: Runtime, op: str, *args: Any) -> WgpuArray:
    """:func:`apply_op` with the operands as positional arguments (backend methods)."""
    return apply_op(rt, op, args)


def copy_into(rt: Runtime, src: WgpuArray, dst: WgpuArray) -> None:
    """Write ``src`` (broadcast to ``dst.shape``, cast to its dtype) into the view ``dst``."""
    op = "copy" if src.dtype is dst.dtype else "cast"
    run_program(rt, op_program(op, dst.dtype.name, ((src.dtype.name, "tensor"),)), [src], dst.shape, [dst])


def contiguous(rt: Runtime, a: WgpuArray) -> WgpuArray:
    """``a`` itself when C-contiguous from offset 0, else a contiguous copy."""
    if a.offset == 0 and a.is_contiguous() or a.size == 0:
        return a
    out = rt.empty(a.shape, a.dtype)
    copy_into(rt, a, out)
    return out


def fill(rt: Runtime, shape: tuple[int, ...], value: Any, dtype: DType, out: WgpuArray | None = None) -> WgpuArray:
    """A tensor of ``shape`` filled with ``value`` (or fill the view ``out``)."""
    target = rt.empty(shape, dtype) if out is None else out
    run_program(rt, op_program("copy", dtype.name, ((dtype.name, "scalar"),)), [value], shape, [target])
    return target

"""Running elementwise programs: ops, casts, copies, fills, all through the one generator."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from ember.dtypes import DType, bool_

from ..codegen import elementwise as gen
from ..codegen.ops import BOOL_RESULT
from ..codegen.program import Const, Instr, Operand, Out, Program
from ..handle import WgpuArray
from ..runtime import Runtime

__all__ = ["run_program", "apply_op", "apply_op_args", "copy_into", "contiguous", "fill", "broadcast_shape", "operand"]

#: cap on workgroups of a grid-stride loop (GPU-NOTES.md: ~4k x 256 saturates an H200)
MAX_GROUPS = 4096


def broadcast_shape(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    first = shapes[0] if shapes else ()
    if all(s == first for s in shapes):
        return first
    rank = max((len(s) for s in shapes), default=0)
    out = [1] * rank
    for s in shapes:
        for i, d in enumerate(s, rank - len(s)):
            if d != 1:
                out[i] = d
    return tuple(out)


def operand(a: WgpuArray, shape: tuple[int, ...]) -> Operand:
    """``a`` seen over the iteration ``shape`` (broadcast axes get stride 0)."""
    return Operand(a.dtype, a.broadcast_strides(shape), a.offset)


def run_program(rt: Runtime, program: Program, inputs: Sequence[WgpuArray], outputs: Sequence[WgpuArray]) -> None:
    """Record ``program`` reading ``inputs`` (matching ``program.inputs``) into ``outputs``."""
    if program.size == 0:
        return
    layouts = program.layouts()
    vec = gen.vec_width(program, rt.types, layouts)
    key = ("ew", gen.signature(program, vec, layouts))
    found = rt.kernels.get(key)
    if found is None:
        kernel = gen.generate(program, rt.types, vec)
        bindings = ("r",) * kernel.n_inputs + ("w",) * kernel.n_outputs
        found = (kernel, rt.pipeline(program.name, kernel.source, bindings))
        rt.kernels[key] = found
    kernel, pipe = found
    params = gen.pack(program, rt.types, kernel, layouts)
    total = program.size // vec
    groups = min(-(-total // gen.WORKGROUP), MAX_GROUPS)
    buffers = [a.buffer for a in inputs] + [o.buffer for o in outputs]
    rt.dispatch(pipe, params, buffers, (groups, 1, 1), program.name)


def apply_op(rt: Runtime, op: str, args: Sequence[Any], dtype: DType | None = None) -> WgpuArray:
    """``op`` over handles and Python scalars (scalars take the first handle's dtype)."""
    handles = [a for a in args if isinstance(a, WgpuArray)]
    shape = broadcast_shape(*(h.shape for h in handles))
    like = handles[0].dtype if op != "where" else handles[1 if isinstance(args[1], WgpuArray) else -1].dtype
    if dtype is None:
        dtype = bool_ if op in BOOL_RESULT else like
    out = rt.empty(shape, dtype)
    if out.size > 1 and _fast(rt, op, args, handles, shape, like, out):
        return out
    inputs: list[WgpuArray] = []
    operands: list[Operand] = []
    consts: list[Const] = []
    refs = []
    for a in args:
        if isinstance(a, WgpuArray):
            refs.append(("in", len(inputs)))
            inputs.append(a)
            operands.append(operand(a, shape))
        else:
            refs.append(("const", len(consts)))
            consts.append(Const(like, _scalar(a, like)))
    program = Program(
        shape=shape,
        inputs=tuple(operands),
        consts=tuple(consts),
        instrs=(Instr(op, dtype, tuple(refs)),),
        outputs=(Out(dtype, ("v", 0)),),
        name=op,
    )
    run_program(rt, program, inputs, [out])
    return out


def _fast(
    rt: Runtime,
    op: str,
    args: Sequence[Any],
    handles: list[WgpuArray],
    shape: tuple[int, ...],
    like: DType,
    out: WgpuArray,
) -> bool:
    """The hot path of one op on contiguous same-shape operands: no Program is built once its
    kernel is known (the parameter block is packed straight from the handles)."""
    strides = out.strides
    vec = 4 if out.size % 4 == 0 else 1
    for h in handles:
        if h.shape != shape or h.strides != strides:
            return False
        if h.offset % 4:
            vec = 1
    key = (op, out.dtype, vec, tuple(a.dtype if isinstance(a, WgpuArray) else None for a in args))
    found = rt.kernels.get(key)
    if found is None:
        if any(rt.types[h.dtype].cls in "lL" for h in handles) or rt.types[out.dtype].cls in "lL":
            return False  # 64-bit integers take the general path (no vec4 form)
        consts = [Const(like, 0) for a in args if not isinstance(a, WgpuArray)]
        refs, k_in, k_c = [], 0, 0
        for a in args:
            if isinstance(a, WgpuArray):
                refs.append(("in", k_in))
                k_in += 1
            else:
                refs.append(("const", k_c))
                k_c += 1
        program = Program(
            shape=shape,
            inputs=tuple(Operand(h.dtype, strides, 0) for h in handles),
            consts=tuple(consts),
            instrs=(Instr(op, out.dtype, tuple(refs)),),
            outputs=(Out(out.dtype, ("v", 0)),),
            name=op,
        )
        if gen.vec_width(program, rt.types) != vec:
            return False
        kernel = gen.generate(program, rt.types, vec)
        bindings = ("r",) * kernel.n_inputs + ("w",)
        found = (rt.pipeline(op, kernel.source, bindings), kernel.fmt, kernel.param_bytes, like.kind == "b")
        rt.kernels[key] = found
    pipe, fmt, nbytes, is_bool = found
    values: list[Any] = [out.size // vec]
    values += [h.offset // vec for h in handles]
    values.append(0)
    for a in args:
        if not isinstance(a, WgpuArray):
            values.append(int(bool(a)) if is_bool else _scalar(a, like))
    data = struct.pack(fmt, *values)
    groups = min(-(-(out.size // vec) // gen.WORKGROUP), MAX_GROUPS)
    rt.dispatch(pipe, data + bytes(nbytes - len(data)), [h.buffer for h in handles] + [out.buffer], (groups, 1, 1), op)
    return True


def apply_op_args(rt: Runtime, op: str, *args: Any) -> WgpuArray:
    """:func:`apply_op` with the operands as positional arguments (backend methods)."""
    return apply_op(rt, op, args)


def _scalar(value: Any, dtype: DType) -> Any:
    """A Python scalar as the operand dtype would hold it (numpy's weak-scalar rule)."""
    if dtype.kind == "f":
        if dtype.name in ("float16", "bfloat16"):
            return float(dtype.numpy.type(value))
        return float(value)
    if dtype.kind == "b":
        return bool(value)
    return int(value)


def copy_into(rt: Runtime, src: WgpuArray, dst: WgpuArray) -> None:
    """Write ``src`` (broadcast to ``dst.shape``, cast to its dtype) into the view ``dst``."""
    shape = dst.shape
    program = Program(
        shape=shape,
        inputs=(operand(src, shape),),
        instrs=(Instr("cast", dst.dtype, (("in", 0),)),) if src.dtype is not dst.dtype else (),
        outputs=(Out(dst.dtype, ("v", 0) if src.dtype is not dst.dtype else ("in", 0), dst.strides, dst.offset),),
        name="copy" if src.dtype is dst.dtype else "cast",
    )
    run_program(rt, program, [src], [dst])


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
    program = Program(
        shape=shape,
        consts=(Const(dtype, _scalar(value, dtype)),),
        outputs=(Out(dtype, ("const", 0), None if out is None else out.strides, 0 if out is None else out.offset),),
        name="fill",
    )
    run_program(rt, program, [], [target])
    return target

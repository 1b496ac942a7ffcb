"""The one elementwise generator: a :class:`~ember_wgpu.codegen.program.Program` -> WGSL.

Every elementwise op (unary, binary, where, cast, copy, fill) and every fused chain goes
through :func:`generate`. The kernel is a grid-stride loop over the iteration shape. Inputs
and outputs are bound as storage arrays; their offsets, strides, the shape and scalar values
are read from a uniform parameter block, so one compiled kernel serves every shape of a rank
and layout. Layouts per operand: ``c`` (contiguous: index = offset + i), ``s`` (one broadcast
element), ``g`` (general strides: the loop index is decoded into coordinates once).

When every operand is contiguous or broadcast and the element count divides by 4, the kernel
is emitted in its ``vec4`` form: 4 elements per iteration through vec4 loads and stores, the
instructions unrolled per lane (GPU-NOTES.md: ~2-3x the bandwidth of scalar loops).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

from ..typemap import TypeMap, WType
from .ops import ARITY, BOOL_RESULT, convert, template
from .program import Program, Ref
from .wgsl_lib import with_helpers

__all__ = ["Kernel", "generate", "signature", "pack", "WORKGROUP", "vec_width", "param_field"]

WORKGROUP = 256
_LANES = "xyzw"

#: layout class of every input and of every output (see Program.layouts)
Layouts = tuple[tuple[str, ...], tuple[str, ...]]


@dataclass(frozen=True)
class Kernel:
    """Generated WGSL plus how to fill its parameter block."""

    name: str
    source: str
    fmt: str
    param_bytes: int
    n_inputs: int
    n_outputs: int
    vec: int


def param_field(k: int) -> str:
    """The WGSL expression reading u32 word ``k`` of the parameter block."""
    return f"P.w[{k // 4}].{_LANES[k % 4]}"


def vec_width(program: Program, types: TypeMap, layouts: Layouts | None = None) -> int:
    """4 when the program can run on vec4 loads and stores, else 1."""
    n = program.size
    if n % 4 or n == 0:
        return 1
    ins, outs = layouts or program.layouts()
    if any(lay == "g" for lay in ins) or any(lay == "g" for lay in outs):
        return 1
    for op, lay in zip(program.inputs, ins):
        if types[op.dtype].cls in "lL":
            return 1
        if lay == "c" and op.offset % 4:
            return 1
    for o in program.outputs:
        if types[o.dtype].cls in "lL" or o.offset % 4:
            return 1
    return 4


def signature(program: Program, vec: int, layouts: Layouts | None = None) -> tuple:
    """What the compiled kernel depends on (not shapes, strides, offsets or scalar values)."""
    ins, outs = layouts or program.layouts()
    return (
        len(program.shape),
        vec,
        tuple((op.dtype.name, lay) for op, lay in zip(program.inputs, ins)),
        tuple(c.dtype.name for c in program.consts),
        tuple((i.op, i.dtype.name, i.args) for i in program.instrs),
        tuple((o.dtype.name, o.value, lay) for o, lay in zip(program.outputs, outs)),
    )


def _const_fmt(t: WType) -> str:
    return {"f": "f", "i": "i", "u": "I", "b": "I", "l": "II", "L": "II"}[t.cls]


def pack(program: Program, types: TypeMap, kernel: Kernel, layouts: Layouts | None = None) -> bytes:
    """The parameter block of ``program`` for ``kernel`` (same order as :func:`generate`)."""
    vec = kernel.vec
    ins, outs = layouts or program.layouts()
    general = "g" in ins or "g" in outs
    values: list[int | float] = [program.size // vec]
    if general:
        values.extend(program.shape)
    for op, lay in zip(program.inputs, ins):
        values.append(op.offset // vec if lay == "c" else op.offset)
        if lay == "g":
            values.extend(op.strides)
    for o, lay in zip(program.outputs, outs):
        values.append(o.offset // vec)
        if lay == "g":
            values.extend(o.strides)  # type: ignore[arg-type]
    for c in program.consts:
        t = types[c.dtype]
        if t.cls in "lL":
            v = int(c.value) & 0xFFFFFFFFFFFFFFFF
            values.extend((v & 0xFFFFFFFF, v >> 32))
        elif t.cls == "b":
            values.append(1 if c.value else 0)
        elif t.cls == "f":
            values.append(float(c.value))
        else:
            values.append(int(c.value))
    data = struct.pack(kernel.fmt, *values)
    return data + bytes(kernel.param_bytes - len(data))


def _const_expr(t: WType, k: int) -> str:
    if t.cls == "f":
        return f"bitcast<f32>({param_field(k)})"
    if t.cls == "i":
        return f"bitcast<i32>({param_field(k)})"
    if t.cls == "u":
        return param_field(k)
    if t.cls == "b":
        return f"({param_field(k)} != 0u)"
    return f"vec2<u32>({param_field(k)}, {param_field(k + 1)})"


def generate(program: Program, types: TypeMap, vec: int = 1) -> Kernel:
    """WGSL for ``program``; ``vec`` is 1 or 4 (see :func:`vec_width`)."""
    program.check()
    ins, outs = program.layouts()
    rank = len(program.shape)
    general = "g" in ins or "g" in outs
    fmt = ["<I"]  # element (or vec4) count
    word = 1
    dims: list[str] = []
    if general:
        dims = [param_field(word + k) for k in range(rank)]
        fmt.append("I" * rank)
        word += rank
    in_index: list[tuple[str, list[str]]] = []
    for lay in ins:
        off = param_field(word)
        fmt.append("I")
        word += 1
        strides: list[str] = []
        if lay == "g":
            strides = [f"bitcast<i32>({param_field(word + k)})" for k in range(rank)]
            fmt.append("i" * rank)
            word += rank
        in_index.append((off, strides))
    out_index: list[tuple[str, list[str]]] = []
    for lay in outs:
        off = param_field(word)
        fmt.append("I")
        word += 1
        strides = []
        if lay == "g":
            strides = [f"bitcast<i32>({param_field(word + k)})" for k in range(rank)]
            fmt.append("i" * rank)
            word += rank
        out_index.append((off, strides))
    const_exprs = []
    for c in program.consts:
        t = types[c.dtype]
        const_exprs.append(_const_expr(t, word))
        f = _const_fmt(t)
        fmt.append(f)
        word += len(f)
    words = max(4, -(-word // 4) * 4)

    tin = [types[op.dtype] for op in program.inputs]
    tout = [types[o.dtype] for o in program.outputs]
    dtypes = [t.dtype for t in tin + tout]
    decl = []
    if types.uses_f16(*dtypes):
        decl.append("enable f16;")
    decl.append(f"struct Params {{ w: array<vec4<u32>, {words // 4}> }}")
    decl.append("@group(0) @binding(0) var<uniform> P: Params;")
    binding = 1
    for i, (t, lay) in enumerate(zip(tin, ins)):
        elem = f"vec4<{t.storage}>" if vec == 4 and lay == "c" else t.storage
        decl.append(f"@group(0) @binding({binding}) var<storage, read> in{i}: array<{elem}>;")
        binding += 1
    for i, t in enumerate(tout):
        elem = f"vec4<{t.storage}>" if vec == 4 else t.storage
        decl.append(f"@group(0) @binding({binding}) var<storage, read_write> out{i}: array<{elem}>;")
        binding += 1

    pre: list[str] = [f"let n = {param_field(0)};"]
    for k, expr in enumerate(const_exprs):
        pre.append(f"let c{k} = {expr};")
    for i, (t, lay) in enumerate(zip(tin, ins)):
        if lay == "s":
            pre.append(f"let s{i} = {t.load(f'in{i}[{in_index[i][0]}]')};")
    body: list[str] = []
    if general:
        body.append("var r = i;")
        for k in range(rank - 1, 0, -1):
            body.append(f"let k{k} = r % {dims[k]};")
            body.append(f"r = r / {dims[k]};")
        if rank:
            body.append("let k0 = r;")

    def strided(off: str, strides: list[str]) -> str:
        terms = " + ".join(f"i32(k{k}) * {s}" for k, s in enumerate(strides))
        return f"u32(i32({off}) + {terms})" if terms else off

    lanes = range(vec) if vec == 4 else [None]
    for i, lay in enumerate(ins):
        if lay == "c":
            body.append(f"let a{i} = in{i}[{in_index[i][0]} + i];")
        elif lay == "g":
            body.append(f"let a{i} = in{i}[{strided(*in_index[i])}];")

    def name(ref: Ref, lane: int | None) -> str:
        kind, i = ref
        suffix = "" if lane is None else f"_{lane}"
        if kind == "const":
            return f"c{i}"
        if kind == "in":
            return f"s{i}" if ins[i] == "s" else f"x{i}{suffix}"
        return f"v{i}{suffix}"

    for lane in lanes:
        for i, (t, lay) in enumerate(zip(tin, ins)):
            if lay == "s":
                continue
            src = f"a{i}" if lane is None else f"a{i}.{_LANES[lane]}"
            body.append(f"let {name(('in', i), lane)} = {t.load(src)};")
        namer = functools.partial(name, lane=lane)
        for j, ins_ in enumerate(program.instrs):
            body.append(f"let {namer(('v', j))} = {_instr_expr(program, types, j, ins_, namer)};")
    for o_i, (o, t) in enumerate(zip(program.outputs, tout)):
        src_t = types[program.dtype_of(o.value)]
        if vec == 4:
            parts = []
            for lane in range(4):
                v = name(o.value, lane)
                parts.append(t.store(convert(v, src_t, t) if src_t.dtype is not t.dtype else v))
            body.append(f"out{o_i}[{out_index[o_i][0]} + i] = vec4<{t.storage}>({', '.join(parts)});")
        else:
            v = name(o.value, None)
            v = convert(v, src_t, t) if src_t.dtype is not t.dtype else v
            target = f"{out_index[o_i][0]} + i" if outs[o_i] == "c" else strided(*out_index[o_i])
            body.append(f"out{o_i}[{target}] = {t.store(v)};")

    main = "\n".join(
        [
            f"@compute @workgroup_size({WORKGROUP})",
            "fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {",
            *("  " + line for line in pre),
            f"  let step = nwg.x * {WORKGROUP}u;",
            "  for (var i = gid.x; i < n; i = i + step) {",
            *("    " + line for line in body),
            "  }",
            "}",
        ]
    )
    helpers = with_helpers(main)
    source = "\n".join(decl) + "\n" + helpers + "\n" + main + "\n"
    return Kernel(
        name=program.name,
        source=source,
        fmt="".join(fmt),
        param_bytes=words * 4,
        n_inputs=len(program.inputs),
        n_outputs=len(program.outputs),
        vec=vec,
    )


def _instr_expr(program: Program, types: TypeMap, j: int, ins, name) -> str:  # type: ignore[no-untyped-def]
    args = [name(a) for a in ins.args]
    arg_types = [types[program.dtype_of(a)] for a in ins.args]
    out_t = types[ins.dtype]
    if ins.op == "cast":
        return convert(args[0], arg_types[0], out_t)
    arity = ARITY.get(ins.op)
    if arity is None:
        raise ValueError(f"instruction {j}: no elementwise op named {ins.op!r}")
    if len(args) != arity:
        raise ValueError(f"instruction {j}: {ins.op} takes {arity} operands, got {len(args)}")
    key_t = arg_types[1] if ins.op == "where" else arg_types[0]
    expr = template(ins.op, key_t.cls).format(*args)
    if ins.op in BOOL_RESULT or ins.op == "where":
        return expr
    return out_t.wrap(expr) if out_t.narrow else expr

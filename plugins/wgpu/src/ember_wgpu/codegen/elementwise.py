"""The one elementwise generator: an :class:`ember.lazy.program.FusedProgram` -> WGSL.

Every elementwise op (unary, binary, where, cast, copy, fill) is a one-instruction program and
every fused region from the lazy layer a longer one; both go through :func:`generate`, and
their kernels share one cache. The kernel is a grid-stride loop over the iteration shape.
Tensor inputs and outputs are bound as storage arrays; their offsets, strides, the shape and
the values of scalar inputs are read from a uniform parameter block, so one compiled kernel
serves every shape of a rank and layout. Layouts per tensor: ``c`` (contiguous: index =
offset + i), ``s`` (one broadcast element), ``g`` (general strides: the loop index is decoded
into coordinates once). Only ``Const`` literals of the program are compiled into the source.

When every tensor is contiguous (from an offset that divides by 4) or broadcast, the kernel is
emitted in its ``vec4`` form: 4 elements per iteration through vec4 loads and stores, the
instructions unrolled per lane (GPU-NOTES.md: ~2-3x the bandwidth of scalar loops). An element
count that does not divide by 4 ends in a partial vec4: its loads read the whole vec4 (buffers
are whole multiples of 16 bytes: ``Runtime._create_buffer``), its store keeps the lanes past the
end as they were (read, select, write back; no other invocation writes them).
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ember.lazy.program import Const, FusedProgram
from ember.views import contiguous_strides

from ..typemap import TypeMap, WType
from .ops import ARITY, BOOL_RESULT, convert, template
from .wgsl_lib import with_helpers

__all__ = ["Kernel", "generate", "pack", "layouts", "layout_of", "vec_width", "param_field", "WORKGROUP", "Geometry"]

WORKGROUP = 256
_LANES = "xyzw"

#: layout class of every tensor input and of every output (see :func:`layouts`)
Layouts = tuple[tuple[str, ...], tuple[str, ...]]
#: a tensor seen over the iteration shape: element strides (0 where broadcast) and element offset
Geometry = tuple[tuple[int, ...], int]
#: per output, the tensor input it is stored through (in place), or None; () for none at all
Alias = tuple[int | None, ...]


@dataclass(frozen=True)
class Kernel:
    """Generated WGSL plus how to fill its parameter block."""

    source: str
    fmt: str
    param_bytes: int
    n_tensors: int
    n_outputs: int  # outputs with a binding of their own (not stored through an input's: ``alias``)
    vec: int
    written: tuple[int, ...] = ()  # tensor inputs bound read-write: outputs are stored through them

    @property
    def bindings(self) -> tuple[str, ...]:
        """The storage bindings' kinds in order: 'r' read-only, 'w' read-write."""
        tensors = tuple("w" if b in self.written else "r" for b in range(self.n_tensors))
        return tensors + ("w",) * self.n_outputs


def param_field(k: int) -> str:
    """The WGSL expression reading u32 word ``k`` of the parameter block."""
    return f"P.w[{k // 4}].{_LANES[k % 4]}"


def layout_of(shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """``c``: contiguous over ``shape``; ``s``: one element broadcast; ``g``: general strides."""
    if strides == contiguous_strides(shape) and any(d != 1 for d in shape):
        return "c"
    if all(s == 0 or d == 1 for d, s in zip(shape, strides)):
        return "s"
    step = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != step:
            return "g"
        step *= d
    return "c"


def layouts(shape: tuple[int, ...], ins: Sequence[Geometry], outs: Sequence[Geometry]) -> Layouts:
    """Layout classes of the tensor inputs and the outputs (an output is ``c`` or ``g``)."""
    return (
        tuple(layout_of(shape, st) for st, _ in ins),
        tuple("c" if layout_of(shape, st) == "c" else "g" for st, _ in outs),
    )


def vec_width(
    program: FusedProgram, types: TypeMap, size: int, ins: Sequence[Geometry], outs: Sequence[Geometry], lay: Layouts
) -> int:
    """4 when the launch can run on vec4 loads and stores (any element count), else 1."""
    if size == 0 or "g" in lay[0] or "g" in lay[1]:
        return 1
    dts = program.value_dtypes()
    for k, lay_k, (_, off) in zip(program.tensor_inputs, lay[0], ins):
        if types[dts[k]].cls in "lLc" or (lay_k == "c" and off % 4):
            return 1
    for v, (_, off) in zip(program.outputs, outs):
        if types[dts[v]].cls in "lLc" or off % 4:
            return 1
    return 4


def _scalar_fmt(t: WType) -> str:
    return {"f": "f", "i": "i", "u": "I", "b": "I", "l": "II", "L": "II", "c": "ff"}[t.cls]


def _host_float(value: Any, t: WType) -> float:
    """``value`` rounded as the dtype holds it (float16 and bfloat16 round before computing)."""
    if t.name in ("float16", "bfloat16"):
        return float(t.dtype.numpy.type(value))
    return float(value)


def scalar_words(value: Any, t: WType) -> list[int | float]:
    if t.cls in "lL":
        v = int(value) & 0xFFFFFFFFFFFFFFFF
        return [v & 0xFFFFFFFF, v >> 32]
    if t.cls == "b":
        return [1 if value else 0]
    if t.cls == "f":
        return [_host_float(value, t)]
    if t.cls == "c":
        z = complex(value)
        return [z.real, z.imag]
    v = int(value) & 0xFFFFFFFF  # wrapped to 32 bits, as the kernel computes
    if t.cls == "i" and v >= 1 << 31:
        v -= 1 << 32
    return [v]


def pack(
    program: FusedProgram,
    types: TypeMap,
    kernel: Kernel,
    shape: tuple[int, ...],
    ins: Sequence[Geometry],
    outs: Sequence[Geometry],
    scalars: Sequence[Any],
    lay: Layouts,
    *,
    with_scalars: bool = True,
) -> bytes:
    """The parameter block of one launch of ``kernel`` (same order as :func:`generate`); without
    ``with_scalars``, the block up to the scalar words (they come last), unpadded."""
    vec = kernel.vec
    general = "g" in lay[0] or "g" in lay[1]
    size = math.prod(shape)
    values: list[int | float] = [-(-size // vec)]
    if vec == 4:
        values.append(size % 4)  # valid lanes of the last vec4 (0: all four)
    if general:
        values.extend(shape)
    for (st, off), lay_k in zip(ins, lay[0]):
        values.append(off // vec if lay_k == "c" else off)
        if lay_k == "g":
            values.extend(st)
    for (st, off), lay_k in zip(outs, lay[1]):
        values.append(off // vec)
        if lay_k == "g":
            values.extend(st)
    scalar_types = [types[dt] for dt, kind in program.inputs if kind == "scalar"]
    if not with_scalars:
        return struct.pack("<" + kernel.fmt[1 : len(kernel.fmt) - len(_scalars_fmt(scalar_types))], *values)
    for value, t in zip(scalars, scalar_types):
        values.extend(scalar_words(value, t))
    data = struct.pack(kernel.fmt, *values)
    return data + bytes(kernel.param_bytes - len(data))


def _scalars_fmt(scalar_types: Sequence[WType]) -> str:
    return "".join(_scalar_fmt(t) for t in scalar_types)


def scalar_bytes(scalar_types: Sequence[WType]) -> int:
    """Bytes the scalar inputs take at the end of the parameter block (4 per word)."""
    return 4 * len(_scalars_fmt(scalar_types))


def pack_scalars(scalar_types: Sequence[WType], words: Sequence[int | float]) -> bytes:
    """The scalar words of a launch (see :func:`scalar_words`)."""
    return struct.pack("<" + _scalars_fmt(scalar_types), *words)


def _scalar_expr(t: WType, k: int) -> str:
    if t.cls == "f":
        return f"bitcast<f32>({param_field(k)})"
    if t.cls == "i":
        return f"bitcast<i32>({param_field(k)})"
    if t.cls == "u":
        return param_field(k)
    if t.cls == "b":
        return f"({param_field(k)} != 0u)"
    if t.cls == "c":
        return f"vec2<f32>(bitcast<f32>({param_field(k)}), bitcast<f32>({param_field(k + 1)}))"
    return f"vec2<u32>({param_field(k)}, {param_field(k + 1)})"


def literal(c: Const, types: TypeMap) -> str:
    """A ``Const`` as a WGSL expression of its dtype's compute type (floats bit-exact, inf and NaN too)."""
    t = types[c.dtype]
    if t.cls == "c":
        z = complex(c.value)
        re, im = (struct.unpack("<I", struct.pack("<f", v))[0] for v in (z.real, z.imag))
        return f"vec2<f32>(bitcast<f32>({re:#x}u), bitcast<f32>({im:#x}u))"
    if t.cls == "f":
        bits = struct.unpack("<I", struct.pack("<f", _host_float(c.value, t)))[0]
        return f"bitcast<f32>({bits:#x}u)"
    if t.cls == "b":
        return "true" if c.value else "false"
    if t.cls in "lL":
        v = int(c.value) & 0xFFFFFFFFFFFFFFFF
        return f"vec2<u32>({v & 0xFFFFFFFF:#x}u, {v >> 32:#x}u)"
    v = int(c.value) & 0xFFFFFFFF
    return f"{v:#x}u" if t.cls == "u" else f"bitcast<i32>({v:#x}u)"


def generate(program: FusedProgram, types: TypeMap, rank: int, lay: Layouts, vec: int = 1, alias: Alias = ()) -> Kernel:
    """WGSL for ``program`` over a rank-``rank`` shape with layouts ``lay``; ``vec`` is 1 or 4.
    ``alias[o]``: the tensor input whose binding output ``o`` is stored through (an in-place update:
    that input is bound ``read_write`` and the output gets no binding of its own; WebGPU forbids a
    writable binding overlapping another of the same buffer), or None."""
    program.check()
    ins, outs = lay
    alias = tuple(alias) or (None,) * len(outs)
    for o, b in enumerate(alias):
        if b is not None and ins[b] != outs[o]:
            raise ValueError(f"output {o} stored through input {b}: layouts {ins[b]!r} and {outs[o]!r} differ")
    dts = program.value_dtypes()
    n_in = len(program.inputs)
    tensors = program.tensor_inputs
    slot = {k: b for b, k in enumerate(tensors)}  # input number -> tensor binding index
    if len(ins) != len(tensors) or len(outs) != len(program.outputs):
        raise ValueError(f"layouts {lay} do not match the program's {len(tensors)} tensors and outputs")
    general = "g" in ins or "g" in outs
    fmt = ["<I"]  # element (or vec4) count
    word = 1
    if vec == 4:
        fmt.append("I")  # valid lanes of the last vec4, 0 when it is whole
        word = 2
    dims: list[str] = []
    if general:
        dims = [param_field(word + k) for k in range(rank)]
        fmt.append("I" * rank)
        word += rank

    def index_words(lay_k: str) -> tuple[str, list[str]]:
        nonlocal word
        off = param_field(word)
        fmt.append("I")
        word += 1
        strides: list[str] = []
        if lay_k == "g":
            strides = [f"bitcast<i32>({param_field(word + k)})" for k in range(rank)]
            fmt.append("i" * rank)
            word += rank
        return off, strides

    in_index = [index_words(lay_k) for lay_k in ins]
    out_index = [index_words(lay_k) for lay_k in outs]
    pre: list[str] = [f"let n = {param_field(0)};"]
    if vec == 4:  # vec4s before the partial last one
        pre.append(f"let rem = {param_field(1)};")
        pre.append("let whole = n - select(0u, 1u, rem != 0u);")
    for k, (dt, kind) in enumerate(program.inputs):
        if kind == "scalar":
            t = types[dt]
            pre.append(f"let c{k} = {_scalar_expr(t, word)};")
            f = _scalar_fmt(t)
            fmt.append(f)
            word += len(f)
    words = max(4, -(-word // 4) * 4)

    tin = [types[dts[k]] for k in tensors]
    tout = [types[dts[v]] for v in program.outputs]
    decl = []
    consts = [a.dtype for _, _, args in program.instructions for a in args if isinstance(a, Const)]
    if types.uses_f16(*dts, *consts):  # any float16 value, also one only computed in between
        decl.append("enable f16;")
    decl.append(f"struct Params {{ w: array<vec4<u32>, {words // 4}> }}")
    decl.append("@group(0) @binding(0) var<uniform> P: Params;")
    if vec == 4:
        decl.append("const _LANE = vec4<u32>(0u, 1u, 2u, 3u);")
    binding = 1
    written = {b for b in alias if b is not None}
    for b, (t, lay_k) in enumerate(zip(tin, ins)):
        elem = f"vec4<{t.storage}>" if vec == 4 and lay_k == "c" else t.storage
        access = "read_write" if b in written else "read"
        decl.append(f"@group(0) @binding({binding}) var<storage, {access}> in{b}: array<{elem}>;")
        binding += 1
    for o, t in enumerate(tout):
        if alias[o] is not None:
            continue
        elem = f"vec4<{t.storage}>" if vec == 4 else t.storage
        decl.append(f"@group(0) @binding({binding}) var<storage, read_write> out{o}: array<{elem}>;")
        binding += 1
    dest = [f"out{o}" if b is None else f"in{b}" for o, b in enumerate(alias)]

    for b, (t, lay_k) in enumerate(zip(tin, ins)):
        if lay_k == "s":
            pre.append(f"let s{tensors[b]} = {t.load(f'in{b}[{in_index[b][0]}]')};")
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

    for b, lay_k in enumerate(ins):
        if lay_k == "c":
            body.append(f"let a{b} = in{b}[{in_index[b][0]} + i];")
        elif lay_k == "g":
            body.append(f"let a{b} = in{b}[{strided(*in_index[b])}];")

    def name(value: int | Const, lane: int | None) -> str:
        if isinstance(value, Const):
            return literal(value, types)
        suffix = "" if lane is None else f"_{lane}"
        if value >= n_in:
            return f"v{value}{suffix}"
        if program.inputs[value][1] == "scalar":
            return f"c{value}"
        return f"s{value}" if ins[slot[value]] == "s" else f"x{value}{suffix}"

    lanes: Sequence[int | None] = range(vec) if vec == 4 else [None]
    for lane in lanes:
        for b, (t, lay_k) in enumerate(zip(tin, ins)):
            if lay_k != "s":
                src = f"a{b}" if lane is None else f"a{b}.{_LANES[lane]}"
                body.append(f"let {name(tensors[b], lane)} = {t.load(src)};")
        namer = functools.partial(name, lane=lane)
        for j, instr in enumerate(program.instructions):
            body.append(f"let {namer(n_in + j)} = {_instr_expr(types, dts, j, instr, namer)};")
    for o, (v, t) in enumerate(zip(program.outputs, tout)):
        if vec == 4:
            parts = ", ".join(t.store(name(v, lane)) for lane in range(4))
            at = f"{dest[o]}[{out_index[o][0]} + i]"
            body.append(f"let r{o} = vec4<{t.storage}>({parts});")
            body.append(
                f"if (i < whole) {{ {at} = r{o}; }} else {{ {at} = select({at}, r{o}, _LANE < vec4<u32>(rem)); }}"
            )
        else:
            target = f"{out_index[o][0]} + i" if outs[o] == "c" else strided(*out_index[o])
            body.append(f"{dest[o]}[{target}] = {t.store(name(v, None))};")

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
    source = "\n".join(decl) + "\n" + with_helpers(main) + "\n" + main + "\n"
    n_bound = sum(b is None for b in alias)
    return Kernel(source, "".join(fmt), words * 4, len(tensors), n_bound, vec, tuple(sorted(written)))


def _instr_expr(types: TypeMap, dts: list[str], j: int, instr: tuple, name: Any) -> str:
    op, dt, args = instr
    names = [name(a) for a in args]
    arg_types = [types[a.dtype if isinstance(a, Const) else dts[a]] for a in args]
    out_t = types[dt]
    if op in ("cast", "copy"):
        if len(args) != 1:
            raise ValueError(f"instruction {j}: {op} takes 1 operand, got {len(args)}")
        return names[0] if arg_types[0].dtype is out_t.dtype else convert(names[0], arg_types[0], out_t)
    arity = ARITY.get(op)
    if arity is None:
        raise ValueError(f"instruction {j}: no elementwise op named {op!r}")
    if len(args) != arity:
        raise ValueError(f"instruction {j}: {op} takes {arity} operands, got {len(args)}")
    if op == "where":  # a bool condition, both branches in the result's type (a scalar may be typed otherwise)
        if arg_types[0].cls != "b":
            names[0] = convert(names[0], arg_types[0], types["bool"])
        for k in (1, 2):
            if arg_types[k].dtype is not out_t.dtype:
                names[k] = convert(names[k], arg_types[k], out_t)
        return template(op, out_t.cls).format(*names)
    expr = template(op, arg_types[0].cls).format(*names)
    if op in BOOL_RESULT:
        return expr
    return out_t.wrap(expr) if out_t.narrow else expr

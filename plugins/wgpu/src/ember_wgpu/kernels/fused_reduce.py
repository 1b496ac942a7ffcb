"""Fused programs with a trailing reduction (``FusedProgram.reduce``): one WGSL kernel computes
the elementwise program and reduces its value, so the full-size value never reaches memory.

The iteration shape splits into the kept axes (collapsed over every tensor: ``M`` rows) and the
reduced axes (collapsed: ``K`` elements a row). A workgroup of :data:`WG` invocations takes a
row (or one of ``G`` chunks of a row, when rows are few and long): its invocations stride the
row, each folding the program's value into a register, then a workgroup tree combines them. A
chunked row's partial results (in the accumulator dtype, float32 for 16-bit floats) are
combined by a second, small launch of :mod:`.reduce`. Tensors are read, and full-size outputs
written, at ``offset + sum(o_d * os_d) + sum(q_d * is_d)``, every extent and stride a uniform
parameter, so one pipeline serves every shape of the same collapsed ranks.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Sequence
from typing import Any

from ember.dtypes import as_dtype
from ember.lazy.program import Const, FusedProgram
from ember.views import collapse, contiguous_strides

from ..codegen import elementwise as gen
from ..codegen.elementwise import _instr_expr, _scalar_expr, literal, param_field
from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import COMPUTE_TYPE
from . import elementwise as ew
from . import reduce as red_kernels
from .common import GROUP_ID, ceil_div, grid

__all__ = ["FUSION_REDUCTIONS", "COUNTS", "WG", "run_reduce", "reduce_source", "vec_width", "VEC4_LAUNCHES"]

#: reductions a program may end with here (mean: the sum times 1/K, as the unfused kernel)
FUSION_REDUCTIONS = frozenset({"sum", "prod", "max", "min", "mean"})

#: invocations of a workgroup, each striding its row
WG = 256

#: launches: a workgroup per row, or per chunk of a row plus a combining pass (tests check what ran)
COUNTS = {"row": 0, "chunked": 0, "split": 0}

#: launches of the vec4 form (of either launch shape; tests check it ran)
VEC4_LAUNCHES = {"vec4": 0}

#: parameter words before the extents: M, K, chunk, G, scale (1/K of a mean)
_HEAD = 5

#: workgroups a launch aims for when rows are few (rows then split into chunks of >= 4 * WG)
TARGET_GROUPS = 512


def reduce_source(
    prog: FusedProgram, types: Any, modes: tuple[str, ...], ro: int, ri: int, partial: bool, vec: int = 1
) -> tuple[str, str, int]:
    """WGSL of the fused reduction of ``prog``: ``modes`` a letter per tensor input (``z``: one
    element, ``s``: strided), ``ro``/``ri`` the collapsed kept/reduced ranks; ``partial``: write
    accumulators (a chunk's), not results; ``vec`` 4: the reduced axis is read (and full-size
    outputs written) 4 elements at a time through vec4 loads and stores (see :func:`vec_width`).
    Returns the source, the parameter format and its bytes."""
    r = prog.reduce
    if r is None:
        raise ValueError("reduce_source() compiles a program with a trailing reduction")
    prog.check()
    dts = prog.value_dtypes()
    n_in = len(prog.inputs)
    tensors = prog.tensor_inputs
    tval = types[dts[r.value]]
    cls = red_kernels.accumulator_type(r.op, tval)
    ct = COMPUTE_TYPE[cls]
    fmt = ["<IIIIf", "I" * (ro + ri)]
    word = _HEAD + ro + ri
    stride_words: list[tuple[int, int]] = []  # first word of each tensor's (offset, strides), then outputs'
    for _ in range(len(tensors) + len(prog.outputs)):
        stride_words.append((word, ro + ri))
        fmt.append("I" + "i" * (ro + ri))
        word += 1 + ro + ri
    pre = [
        f"let M = {param_field(0)};",
        f"let K = {param_field(1)};",
        f"let chunk = {param_field(2)};",
        f"let G = {param_field(3)};",
        f"let scale = bitcast<f32>({param_field(4)});",
    ]
    for j, (dt, kind) in enumerate(prog.inputs):
        if kind == "scalar":
            t = types[dt]
            pre.append(f"let c{j} = {_scalar_expr(t, word)};")
            f = gen._scalar_fmt(t)
            fmt.append(f)
            word += len(f)
    words = max(4, ceil_div(word, 4) * 4)

    def index(k: int, base: str) -> str:
        """Element index of tensor/output ``k`` at row base ``base`` and inner coordinates q_d."""
        w0 = stride_words[k][0]
        terms = [base] + [f"i32(q{d}) * bitcast<i32>({param_field(w0 + 1 + ro + d)})" for d in range(ri)]
        return "u32(" + " + ".join(terms) + ")"

    def row_base(k: int) -> str:
        w0 = stride_words[k][0]
        terms = [f"i32({param_field(w0)})"]
        terms += [f"i32(o{d}) * bitcast<i32>({param_field(w0 + 1 + d)})" for d in range(ro)]
        return " + ".join(terms)

    f16 = types.uses_f16(*dts, *[a.dtype for _, _, args in prog.instructions for a in args if isinstance(a, Const)])
    decl = ["enable f16;"] if f16 else []
    decl.append(f"struct Params {{ w: array<vec4<u32>, {words // 4}> }}")
    decl.append("@group(0) @binding(0) var<uniform> P: Params;")
    binding = 1
    for b, k in enumerate(tensors):
        elem = types[dts[k]].storage
        elem = f"vec4<{elem}>" if vec == 4 and modes[b] == "s" else elem
        decl.append(f"@group(0) @binding({binding}) var<storage, read> in{b}: array<{elem}>;")
        binding += 1
    for o, v in enumerate(prog.outputs):
        elem = types[dts[v]].storage
        elem = f"vec4<{elem}>" if vec == 4 else elem
        decl.append(f"@group(0) @binding({binding}) var<storage, read_write> out{o}: array<{elem}>;")
        binding += 1
    red_t = types["float32"] if partial and tval.cls == "f" else tval
    decl.append(f"@group(0) @binding({binding}) var<storage, read_write> red: array<{red_t.storage}>;")
    decl.append(f"var<workgroup> sv: array<{ct}, {WG}>;")

    def name(value: int | Const, lane: str = "") -> str:
        if isinstance(value, Const):
            return literal(value, types)
        if value >= n_in:
            return f"v{value}{lane}"
        if prog.inputs[value][1] == "scalar":
            return f"c{value}"
        return f"x{value}" if modes[tensors.index(value)] == "z" else f"x{value}{lane}"

    head = [GROUP_ID, "let g = gid_lin;", "if (g >= M * G) { return; }", "let row = g / G;", "let part = g % G;"]
    head.append("var rr = row;")
    for d in range(ro - 1, -1, -1):
        head.append(f"let o{d} = rr % {param_field(_HEAD + d)};")
        head.append(f"rr = rr / {param_field(_HEAD + d)};")
    loads: list[str] = []
    for b, (k, mode) in enumerate(zip(tensors, modes)):
        t = types[dts[k]]
        if mode == "z":
            head.append(f"let x{k} = {t.load(f'in{b}[{param_field(stride_words[b][0])}]')};")
        else:
            head.append(f"let base{b} = {row_base(b)};")
            at = index(b, f"base{b}")
            loads.append(f"let x{k} = {t.load(f'in{b}[{at}]')};")
    n_t = len(tensors)
    for o in range(len(prog.outputs)):
        head.append(f"let obase{o} = {row_base(n_t + o)};")
    if vec == 4:  # one reduced axis of stride 1, every row base a multiple of 4: vec4 k // 4
        body = _vec4_body(prog, types, dts, modes, n_in, n_t, name)
    else:
        body = ["var qq = k;"]
        for d in range(ri - 1, -1, -1):
            body.append(f"let q{d} = qq % {param_field(_HEAD + ro + d)};")
            body.append(f"qq = qq / {param_field(_HEAD + ro + d)};")
        body += loads
        for j, instr in enumerate(prog.instructions):
            body.append(f"let {name(n_in + j)} = {_instr_expr(types, dts, j, instr, name)};")
        for o, v in enumerate(prog.outputs):
            body.append(f"out{o}[{index(n_t + o, f'obase{o}')}] = {types[dts[v]].store(name(v))};")
    for lane in ("_0", "_1", "_2", "_3") if vec == 4 else ("",):
        step = red_kernels.combine(r.op, cls, "acc", name(r.value, lane))
        body.append(f"acc = {tval.wrap(step) if tval.narrow else step};")
    tree = red_kernels.combine(r.op, cls, "sv[t]", "sv[t + s]")
    result = red_t.store("sv[0] * scale" if r.op == "mean" and not partial else "sv[0]")
    main = "\n".join(
        [
            f"@compute @workgroup_size({WG})",
            "fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {",
            *("  " + line for line in pre + head),
            "  let k0 = part * chunk;",
            "  let k1 = min(K, k0 + chunk);",
            f"  var acc = {red_kernels.identity(r.op, cls)};",
            f"  for (var k = k0 + {vec}u * t; k < k1; k = k + {vec * WG}u) {{",
            *("    " + line for line in body),
            "  }",
            "  sv[t] = acc;",
            "  workgroupBarrier();",
            f"  for (var s = {WG // 2}u; s > 0u; s = s >> 1u) {{",
            f"    if (t < s) {{ sv[t] = {tree}; }}",
            "    workgroupBarrier();",
            "  }",
            f"  if (t == 0u) {{ red[g] = {result}; }}",
            "}",
        ]
    )
    source = "\n".join(decl) + "\n" + gen.with_helpers(main) + "\n" + main + "\n"
    return source, "".join(fmt), words * 4


def _vec4_body(
    prog: FusedProgram, types: Any, dts: list[str], modes: tuple[str, ...], n_in: int, n_t: int, name: Any
) -> list[str]:
    """The loop body of the vec4 form: elements k..k+3 of the row (k a multiple of 4), each lane's
    instructions unrolled (names ``v<j>_<lane>``), full-size outputs stored as vec4s."""
    tensors = prog.tensor_inputs
    body = []
    for b in range(len(tensors)):
        if modes[b] == "s":
            body.append(f"let a{b} = in{b}[(u32(base{b}) + k) >> 2u];")
    for lane, comp in enumerate("xyzw"):
        suffix = f"_{lane}"
        for b, k in enumerate(tensors):
            if modes[b] == "s":
                body.append(f"let x{k}{suffix} = {types[dts[k]].load(f'a{b}.{comp}')};")
        namer = functools.partial(name, lane=suffix)
        for j, instr in enumerate(prog.instructions):
            body.append(f"let {namer(n_in + j)} = {_instr_expr(types, dts, j, instr, namer)};")
    for o, v in enumerate(prog.outputs):
        t = types[dts[v]]
        parts = ", ".join(t.store(name(v, f"_{lane}")) for lane in range(4))
        body.append(f"out{o}[(u32(obase{o}) + k) >> 2u] = vec4<{t.storage}>({parts});")
    return body


def vec_width(
    prog: FusedProgram, types: Any, modes: tuple[str, ...], ist: Sequence[tuple[int, ...]],
    ost: Sequence[tuple[int, ...]], offsets: Sequence[int], K: int,
) -> int:  # fmt: skip
    """4 when every strided tensor and output runs along one reduced axis of stride 1, every row
    starts at a multiple of 4 (offsets and kept strides) and K divides by 4, all in 32-bit
    (or float16) storage; else 1."""
    if K % 4 or any(len(st) != 1 for st in ist):
        return 1
    dts = prog.value_dtypes()
    values = list(prog.tensor_inputs) + list(prog.outputs)
    strided = [m == "s" for m in modes] + [True] * len(prog.outputs)
    for k, v in enumerate(values):
        if types[dts[v]].cls in "lLc":
            return 1
        if strided[k] and (ist[k] != (1,) or offsets[k] % 4 or any(s % 4 for s in ost[k])):
            return 1
    return 4


class _Plan:
    """One geometry's launch of a region with a trailing reduction: pipeline, the parameter bytes
    up to the scalar inputs (packed per launch), workgroups and the result's layout."""

    __slots__ = (
        "pipe", "head", "scalar_types", "scalar_pack", "pad", "groups", "out_dtypes", "M", "G", "acc_dt", "vdt",
        "out_shape", "vec", "K",
    )  # fmt: skip

    def __init__(self, **fields: Any) -> None:
        for name, value in fields.items():
            setattr(self, name, value)


def run_reduce(rt: Runtime, prog: FusedProgram, operands: Sequence[Any], shape: tuple[int, ...]) -> list[WgpuArray]:
    """Run ``prog`` (with ``prog.reduce`` set) over ``shape``: its full-size outputs, then the reduced
    value. A geometry's launch is planned once and kept in ``rt.plans``."""
    r = prog.reduce
    if r is None:
        raise ValueError("run_reduce() runs a program with a trailing reduction; see elementwise.run_program")
    tensors = [x for (_, kind), x in zip(prog.inputs, operands) if kind == "tensor"]
    if len(tensors) + len(prog.outputs) + 1 > rt.max_storage_buffers:  # the region, then the reduction
        COUNTS["split"] += 1
        whole = FusedProgram(prog.inputs, prog.instructions, (*prog.outputs, r.value))
        *outs, value = ew.run_program(rt, whole, operands, shape)
        return [*outs, red_kernels.reduce(rt, value, r.op, r.axes, r.keepdims)]
    key = ("fused_reduce", prog, shape, tuple([(x.shape, x.strides, x.offset) for x in tensors]))
    plan = rt.plans.get(key)
    if plan is None:
        if len(rt.plans) >= ew.MAX_PLANS:
            rt.plans.clear()
        plan = rt.plans[key] = _plan(rt, prog, tensors, shape)
    if plan.scalar_types:
        words: list[int | float] = []
        scalars = [x for (_, kind), x in zip(prog.inputs, operands) if kind == "scalar"]
        for x, t in zip(scalars, plan.scalar_types):
            words += gen.scalar_words(x, t)
        params = plan.head + plan.scalar_pack(*words) + plan.pad
    else:
        params = plan.head
    outs = [rt.empty(shape, dt) for dt in plan.out_dtypes]
    red = rt.empty((plan.M * plan.G,), plan.acc_dt)
    buffers = [x.storage.raw for x in tensors]
    buffers += [o.storage.raw for o in outs]
    buffers.append(red.storage.raw)
    rt.dispatch(plan.pipe, params, buffers, plan.groups, "fused_reduce")
    VEC4_LAUNCHES["vec4"] += plan.vec == 4
    if plan.G == 1:
        COUNTS["row"] += 1
        return [*outs, WgpuArray(red.storage, plan.out_shape, plan.vdt)]
    COUNTS["chunked"] += 1
    total = rt.empty((plan.M,), plan.vdt)  # each row's G partials combined (a mean's sums, then times 1/K)
    red_kernels._run(rt, r.op, red, total, plan.M, plan.G, 1, 1, 1.0 / plan.K)
    return [*outs, WgpuArray(total.storage, plan.out_shape, plan.vdt)]


def _plan(rt: Runtime, prog: FusedProgram, tensors: list[WgpuArray], shape: tuple[int, ...]) -> _Plan:
    """The launch of ``prog`` over ``shape`` with these tensors' layouts: modes, vec width, kernel,
    parameters (scalar inputs aside) and grid."""
    r = prog.reduce
    assert r is not None
    dts = prog.value_dtypes()
    rank = len(shape)
    kept = [d for d in range(rank) if d not in r.axes]
    strides = [x.broadcast_strides(shape) for x in tensors] + [contiguous_strides(shape)] * len(prog.outputs)
    offsets = [x.offset for x in tensors] + [0] * len(prog.outputs)
    osh, ost = collapse(tuple(shape[d] for d in kept), [tuple(st[d] for d in kept) for st in strides])
    ish, ist = collapse(tuple(shape[d] for d in r.axes), [tuple(st[d] for d in r.axes) for st in strides])
    modes = tuple("z" if not any(ost[k] + ist[k]) else "s" for k in range(len(tensors)))
    M, K = math.prod(osh), math.prod(ish)
    G = max(1, min(ceil_div(TARGET_GROUPS, M), K // (4 * WG))) if M < TARGET_GROUPS else 1
    partial = G > 1
    vec = vec_width(prog, rt.types, modes, ist, ost, offsets, K)
    chunk = ceil_div(K, G * vec) * vec  # the vec4 form's chunks start at multiples of 4
    kkey = ("fused_reduce", prog, modes, len(osh), len(ish), partial, vec)
    found = rt.kernels.get(kkey)
    if found is None:
        source, fmt, nbytes = reduce_source(prog, rt.types, modes, len(osh), len(ish), partial, vec)
        bindings = ("r",) * len(tensors) + ("w",) * (len(prog.outputs) + 1)
        found = rt.kernels[kkey] = (rt.pipeline("fused_reduce", source, bindings), fmt, nbytes)
    pipe, fmt, nbytes = found
    values: list[int | float] = [M, K, chunk, G, 1.0 / K, *osh, *ish]
    for off, a, b in zip(offsets, ost, ist):
        values += [off, *a, *b]
    scalar_types = [rt.types[dt] for dt, kind in prog.inputs if kind == "scalar"]
    scalar_fmt = "".join([gen._scalar_fmt(t) for t in scalar_types])
    head = struct.pack(fmt[: len(fmt) - len(scalar_fmt)], *values)
    pad = bytes(nbytes - len(head) - 4 * len(scalar_fmt))
    vdt = as_dtype(dts[r.value])
    return _Plan(
        pipe=pipe,
        head=head if scalar_types else head + pad,
        scalar_types=scalar_types,
        scalar_pack=struct.Struct("<" + scalar_fmt).pack,
        pad=pad,
        groups=grid(M * G),
        out_dtypes=[as_dtype(dts[o]) for o in prog.outputs],
        M=M,
        G=G,
        acc_dt=as_dtype("float32") if partial and rt.types[vdt].cls == "f" else vdt,
        vdt=vdt,
        out_shape=r.shape(shape),
        vec=vec,
        K=K,
    )

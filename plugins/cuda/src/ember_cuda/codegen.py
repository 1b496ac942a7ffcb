"""CUDA C for core's :class:`~ember.lazy.program.FusedProgram`: one grid-stride kernel per
(program, layout), compiled by NVRTC through CuPy's ``RawKernel``.

Shapes are not in the source: the element count, the collapsed shape and each strided
operand's strides are kernel arguments; what the source depends on is the layout
(:class:`Layout`): a mode per tensor input (``c`` contiguous, ``z`` one broadcast element,
``s`` strided), the rank of the strided index arithmetic, the index type and whether the
``float4`` path is taken. NVRTC sees no C headers, so infinities and NaNs are written as bit
patterns (``__int_as_float``) and float16 conversions are PTX ``cvt`` instructions.

Semantics follow numpy, like ember's other backends: ``round`` is half-to-even (``rint``),
integer ``floordiv``/``remainder`` floor and take the divisor's sign and give 0 for a zero
divisor, float ``floordiv``/``remainder`` follow numpy's ``fmod``-based definition,
``maximum``/``minimum`` propagate NaN, comparisons give ``bool``. float16 and bfloat16 are
stored in 16 bits and computed in ``float``; every 16-bit value a program defines is rounded
to 16 bits, so a fused chain gives what the same ops give one at a time.
"""

from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass

import numpy as np

from ember.lazy.program import Const, FusedProgram

__all__ = [
    "CType",
    "KERNEL_NAME",
    "Layout",
    "FUSION_OPS",
    "NOT_FUSED",
    "UNARY_OPS",
    "BINARY_OPS",
    "ctype",
    "literal",
    "round16",
    "source",
    "device_source",
    "PREAMBLE_F16",
    "PREAMBLE_BF16",
]

KERNEL_NAME = "ember_fused"

UNARY_OPS = frozenset(
    "neg abs sign exp log sqrt rsqrt sin cos tanh erf floor ceil round trunc reciprocal isnan isinf "
    "isfinite logical_not bitwise_not exp2 expm1 log2 log10 log1p tan asin acos atan sinh cosh asinh acosh "
    "atanh square relu sigmoid gelu gelu_tanh silu softplus signbit".split()
)
BINARY_OPS = frozenset(
    "add sub mul div floordiv remainder pow maximum minimum atan2 hypot logaddexp eq ne lt le gt ge "
    "logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor copysign".split()
)
#: every op name the generator compiles (ember's elementwise ops, plus the program form's own)
FUSION_OPS = UNARY_OPS | BINARY_OPS | {"cast", "where", "copy"}
#: ember's elementwise ops left to their own kernels, and why
NOT_FUSED = {
    "bitwise_left_shift": "shifts by the width or more are undefined in C; the op's own kernel defines them",
    "bitwise_right_shift": "shifts by the width or more are undefined in C; the op's own kernel defines them",
    "nextafter": "computed on the bit patterns (kernels.exact_nextafter), subnormals included",
    "clone": "an explicit copy: it stays one",
    "real": "complex operands, which the lazy layer does not defer",
    "imag": "complex operands, which the lazy layer does not defer",
    "conj": "complex operands, which the lazy layer does not defer",
    "angle": "a composite of atan2 over real and imag, whose ops fuse once it is decomposed",
}

#: ops defined for floating-point operands only (core's dtype rules never send others)
FLOAT_ONLY = frozenset(
    "exp log sqrt rsqrt sin cos tanh erf exp2 expm1 log2 log10 log1p tan asin acos atan sinh cosh asinh "
    "acosh atanh reciprocal sigmoid gelu gelu_tanh silu softplus div atan2 hypot logaddexp copysign signbit".split()
)
_BITWISE = frozenset("bitwise_and bitwise_or bitwise_xor bitwise_not".split())


@dataclass(frozen=True)
class CType:
    """One ember dtype in CUDA C: how it is stored, what it computes in, its numpy kind."""

    name: str
    storage: str
    compute: str
    kind: str  # "f", "i", "u" or "b"

    @property
    def half(self) -> bool:
        """Stored in 16 bits, computed in float."""
        return self.name in ("float16", "bfloat16")

    def load(self, ptr: str, index: str) -> str:
        """The compute-type value of ``ptr[index]``."""
        raw = f"{ptr}[{index}]"
        if self.name == "float16":
            return f"ember_h2f({raw})"
        if self.name == "bfloat16":
            return f"ember_bf2f({raw})"
        if self.kind == "b":
            return f"({raw} != 0)"
        return raw

    def store(self, value: str) -> str:
        """``value`` (compute type) as the storage type."""
        if self.name == "float16":
            return f"ember_f2h({value})"
        if self.name == "bfloat16":
            return f"ember_f2bf({value})"
        if self.kind == "b":
            return f"(unsigned char)({value})"
        return value

    def rounded(self, value: str) -> str:
        """``value`` rounded to the storage precision (16-bit floats), still in the compute type."""
        if self.name == "float16":
            return f"ember_h2f(ember_f2h({value}))"
        if self.name == "bfloat16":
            return f"ember_bf2f(ember_f2bf({value}))"
        return value


_TYPES = {
    "bool": ("unsigned char", "bool", "b"),
    "int8": ("signed char", "signed char", "i"),
    "int16": ("short", "short", "i"),
    "int32": ("int", "int", "i"),
    "int64": ("long long", "long long", "i"),
    "uint8": ("unsigned char", "unsigned char", "u"),
    "uint16": ("unsigned short", "unsigned short", "u"),
    "uint32": ("unsigned int", "unsigned int", "u"),
    "uint64": ("unsigned long long", "unsigned long long", "u"),
    "float16": ("unsigned short", "float", "f"),
    "bfloat16": ("unsigned short", "float", "f"),
    "float32": ("float", "float", "f"),
    "float64": ("double", "double", "f"),
}


def ctype(name: str) -> CType:
    """The CUDA C types of dtype ``name``; ValueError for a dtype the generator does not take."""
    try:
        storage, compute, kind = _TYPES[name]
    except KeyError:
        raise ValueError(f"the CUDA kernel generator has no type for dtype {name!r}") from None
    return CType(name, storage, compute, kind)


def literal(value: bool | int | float, c: CType) -> str:
    """``value`` as an exact CUDA C expression of compute type ``c`` (bit patterns for inf/NaN)."""
    if c.kind == "b":
        return "true" if value else "false"
    if c.kind == "f":
        v = float(value)
        if c.compute == "double":
            if math.isfinite(v):
                return f"({v!r})"
            bits = struct.unpack("<q", struct.pack("<d", v))[0]
            return f"__longlong_as_double({bits}LL)"
        with np.errstate(over="ignore"):
            v32 = round16(v, c.name) if c.half else float(np.float32(v))
        if math.isfinite(v32):
            return f"({v32!r}f)"
        bits = struct.unpack("<i", struct.pack("<f", v32))[0]
        return f"__int_as_float({bits})"
    v = int(value)
    if c.compute == "long long" and v == -(2**63):
        return "(-9223372036854775807LL - 1)"
    suffix = "ULL" if c.kind == "u" and c.compute == "unsigned long long" else "LL"
    return f"(({c.compute}){v}{suffix})"


def round16(v: float, name: str) -> float:
    """``v`` rounded to float16 or bfloat16 (nearest even; bfloat16 through float32), as a Python float."""
    with np.errstate(over="ignore"):
        if name == "float16":
            return float(np.float16(v))
        bits = int(np.float32(v).view(np.uint32))
    if (bits & 0x7FFFFFFF) > 0x7F800000:
        return float(v)
    bits = (((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16) & 0xFFFFFFFF
    return float(np.uint32(bits).view(np.float32))


# -- helpers: device functions a program's ops call, emitted once each ----------------------------
#: written for compute type ``T``; ``@`` after a math function's name is its float suffix
_HELPERS: dict[str, str] = {
    "floordiv_f": """
__device__ __forceinline__ T ember_floordiv_T(T a, T b) {
    if (b == (T)0) return a / b;
    T mod = fmod@(a, b);
    T div = (a - mod) / b;
    if (mod != (T)0) { if ((b < (T)0) != (mod < (T)0)) div -= (T)1; }
    if (div == (T)0) return copysign@((T)0, a / b);
    T fl = floor@(div);
    if (div - fl > (T)0.5) fl += (T)1;
    return fl;
}""",
    "remainder_f": """
__device__ __forceinline__ T ember_remainder_T(T a, T b) {
    T mod = fmod@(a, b);
    if (b == (T)0) return mod;
    if (mod != (T)0) { if ((b < (T)0) != (mod < (T)0)) mod += b; }
    else { mod = copysign@((T)0, b); }
    return mod;
}""",
    "floordiv_i": """
__device__ __forceinline__ T ember_floordiv_T(T a, T b) {
    if (b == (T)0) return (T)0;
    if (b == (T)-1) return (T)(0 - a);
    T q = (T)(a / b);
    if ((T)(a % b) != (T)0 && ((a < (T)0) != (b < (T)0))) q = (T)(q - 1);
    return q;
}""",
    "remainder_i": """
__device__ __forceinline__ T ember_remainder_T(T a, T b) {
    if (b == (T)0 || b == (T)-1) return (T)0;
    T r = (T)(a % b);
    if (r != (T)0 && ((r < (T)0) != (b < (T)0))) r = (T)(r + b);
    return r;
}""",
    "pow_i": """
__device__ __forceinline__ T ember_pow_T(T a, T b) {
    if (b < (T)0) { if (a == (T)1) return (T)1; if (a == (T)-1) return (b & (T)1) ? (T)-1 : (T)1; return (T)0; }
    T r = (T)1;
    while (b) { if (b & (T)1) r = (T)(r * a); a = (T)(a * a); b = (T)(b >> 1); }
    return r;
}""",
    "pow_u": """
__device__ __forceinline__ T ember_pow_T(T a, T b) {
    T r = (T)1;
    while (b) { if (b & (T)1) r = (T)(r * a); a = (T)(a * a); b = (T)(b >> 1); }
    return r;
}""",
    "sigmoid_f": """
__device__ __forceinline__ T ember_sigmoid_T(T x) {
    T e = exp@(-fabs@(x));
    return x >= (T)0 ? (T)1 / ((T)1 + e) : e / ((T)1 + e);
}""",
    "logaddexp_f": """
__device__ __forceinline__ T ember_logaddexp_T(T x, T y) {
    if (x == y) return x + (T)0.6931471805599453;
    T d = x - y;
    if (d > (T)0) return x + log1p@(exp@(-d));
    if (d <= (T)0) return y + log1p@(exp@(d));
    return d;
}""",
}

PREAMBLE_F16 = """
__device__ __forceinline__ float ember_h2f(unsigned short h) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short ember_f2h(float f) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ unsigned short ember_d2h(double d) {
    unsigned short h; asm("cvt.rn.f16.f64 %0, %1;" : "=h"(h) : "d"(d)); return h;
}
"""

PREAMBLE_BF16 = """
__device__ __forceinline__ float ember_bf2f(unsigned short b) { return __int_as_float(((int)b) << 16); }
__device__ __forceinline__ unsigned short ember_f2bf(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);  /* round to nearest even */
    return (unsigned short)(u >> 16);
}
"""


def _math(name: str, c: CType) -> str:
    """The float or double variant of math function ``name`` for compute type ``c``."""
    return name + ("f" if c.compute == "float" else "")


def _helper(key: str, c: CType, helpers: dict[str, str]) -> str:
    """Register helper ``key`` for ``c``'s compute type; returns the function's name."""
    fn = f"ember_{key.rsplit('_', 1)[0]}_{c.compute.replace(' ', '_')}"
    if fn not in helpers:
        text = _HELPERS[key].replace("ember_" + key.rsplit("_", 1)[0] + "_T", fn)
        text = text.replace("@", "f" if c.compute == "float" else "")
        helpers[fn] = re.sub(r"\bT\b", c.compute, text)
    return fn


_FLOAT_FN = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tanh": "tanh", "erf": "erf",
    "exp2": "exp2", "expm1": "expm1", "log2": "log2", "log10": "log10", "log1p": "log1p", "tan": "tan",
    "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh",
    "acosh": "acosh", "atanh": "atanh", "floor": "floor", "ceil": "ceil", "round": "rint", "trunc": "trunc",
}  # fmt: skip
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH = {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}


def _unary(op: str, x: str, c: CType, helpers: dict[str, str]) -> str:
    k, T = c.kind, c.compute
    f = c.kind == "f"
    if op in _FLOAT_FN:
        if f:
            return f"{_math(_FLOAT_FN[op], c)}({x})"
        if op in ("floor", "ceil", "round", "trunc"):
            return x
        raise ValueError(f"{op} needs a floating-point operand, got {c.name}")
    if op == "neg":
        return f"(({T})(-{x}))" if k != "b" else x
    if op == "abs":
        if f:
            return f"{_math('fabs', c)}({x})"
        return f"(({T})({x} < 0 ? -{x} : {x}))" if k == "i" else x
    if op == "sign":
        if f:
            return f"(isnan({x}) ? {x} : ({T})(({x} > ({T})0) - ({x} < ({T})0)))"
        return f"(({T})(({x} > 0) - ({x} < 0)))" if k == "i" else f"(({T})({x} > 0))"
    if op == "rsqrt":
        return f"(({T})1 / {_math('sqrt', c)}({x}))"
    if op == "reciprocal":
        return f"(({T})1 / {x})"
    if op == "square":
        return f"(({T})({x} * {x}))"
    if op in ("isnan", "isinf", "isfinite"):
        if not f:
            return "true" if op == "isfinite" else "false"
        return f"((bool){op}({x}))"
    if op == "logical_not":
        return f"(!{x})"
    if op == "signbit":  # -0.0 and negative NaNs too
        return f"((bool)signbit({x}))"
    if op == "bitwise_not":
        return f"(!{x})" if k == "b" else f"(({T})~{x})"
    if op == "relu":  # NaN stays NaN, as numpy's maximum(x, 0)
        return f"({x} < ({T})0 ? ({T})0 : {x})"
    if op == "sigmoid":
        return f"{_helper('sigmoid_f', c, helpers)}({x})"
    if op == "silu":
        return f"({x} * {_helper('sigmoid_f', c, helpers)}({x}))"
    if op == "gelu":  # erfc(-x / sqrt 2) = 1 + erf(x / sqrt 2) without the cancellation for negative x
        return f"({literal(0.5, c)} * {x} * {_math('erfc', c)}(-{x} * {literal(0.7071067811865476, c)}))"
    if op == "gelu_tanh":  # 0.5 x (1 + tanh z) = x sigmoid(2z), without the cancellation for negative x
        k0, k1 = literal(2 * 0.7978845608028654, c), literal(0.044715, c)
        return f"({x} * {_helper('sigmoid_f', c, helpers)}({k0} * ({x} + {k1} * {x} * {x} * {x})))"
    if op == "softplus":
        return f"(({x} > ({T})0 ? {x} : ({T})0) + {_math('log1p', c)}({_math('exp', c)}(-{_math('fabs', c)}({x}))))"
    raise ValueError(f"unknown unary op {op!r}")


def _binary(op: str, a: str, b: str, c: CType, helpers: dict[str, str]) -> str:
    k, T = c.kind, c.compute
    f = k == "f"
    if op in _ARITH:
        return f"(({T})({a} {_ARITH[op]} {b}))"
    if op in _CMP:
        return f"({a} {_CMP[op]} {b})"
    if op == "div":
        return f"({a} / {b})"
    if op in ("floordiv", "remainder"):
        if f:
            return f"{_helper(op + '_f', c, helpers)}({a}, {b})"
        if k in "ub":
            sym = "/" if op == "floordiv" else "%"
            return f"({b} == 0 ? ({T})0 : ({T})({a} {sym} {b}))"
        return f"{_helper(op + '_i', c, helpers)}({a}, {b})"
    if op == "pow":
        if f:
            return f"{_math('pow', c)}({a}, {b})"
        return f"{_helper('pow_u' if k in 'ub' else 'pow_i', c, helpers)}({a}, {b})"
    if op in ("maximum", "minimum"):
        sym = ">" if op == "maximum" else "<"
        cond = f"({a} {sym} {b} || isnan({a}))" if f else f"({a} {sym} {b})"
        return f"({cond} ? {a} : {b})"
    if op in ("atan2", "hypot", "copysign"):
        return f"{_math(op, c)}({a}, {b})"
    if op == "logaddexp":
        return f"{_helper('logaddexp_f', c, helpers)}({a}, {b})"
    if op == "logical_and":
        return f"((bool){a} && (bool){b})"
    if op == "logical_or":
        return f"((bool){a} || (bool){b})"
    if op == "logical_xor":
        return f"((bool){a} != (bool){b})"
    raise ValueError(f"unknown binary op {op!r}")


def _cast(x: str, src: CType, out: CType) -> str:
    if out.kind == "b":
        return f"({x} != 0)"
    if out.name == "float16" and src.compute == "double":
        return f"ember_h2f(ember_d2h({x}))"  # one rounding, as numpy's float64 -> float16
    if out.compute == src.compute:
        return x
    return f"(({out.compute})({x}))"


def expression(op: str, args: list[tuple[str, CType]], out: CType, helpers: dict[str, str]) -> str:
    """The CUDA C expression of ``op`` over ``args`` (expression, type) pairs, of ``out``'s compute type."""
    if op == "cast":
        return _cast(args[0][0], args[0][1], out)
    if op == "copy":
        return args[0][0]
    if op == "where":
        (cnd, _), (a, _), (b, _) = args
        return f"({cnd} ? ({out.compute})({a}) : ({out.compute})({b}))"
    if op in FLOAT_ONLY and args[0][1].kind != "f":
        raise ValueError(f"{op} needs floating-point operands, got {args[0][1].name}")
    if op in _BITWISE and args[0][1].kind == "f":
        raise ValueError(f"{op} needs integer or boolean operands, got {args[0][1].name}")
    if len(args) == 1:
        return _unary(op, args[0][0], args[0][1], helpers)
    if len(args) == 2:
        return _binary(op, args[0][0], args[1][0], args[0][1], helpers)
    raise ValueError(f"op {op!r} with {len(args)} arguments is not elementwise")


# -- kernels ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layout:
    """What a kernel's source depends on besides its program (its cache key with the program).

    ``modes``: one of ``c``/``z``/``s`` per tensor input, in input order (outputs are always
    contiguous); ``rank``: dimensions of the strided index arithmetic (0 when no input is
    strided); ``index``: ``int`` or ``long long``; ``vec4``: four float32 elements a thread step.
    """

    modes: tuple[str, ...]
    rank: int = 0
    index: str = "int"
    vec4: bool = False


def source(prog: FusedProgram, layout: Layout, name: str = KERNEL_NAME) -> str:
    """CUDA C of ``prog`` under ``layout``: ``extern "C"`` kernel ``name`` taking ``n``, the
    collapsed shape (when strided), then per input its pointer (and strides when strided) or
    its scalar value, then the output pointers. ValueError if an op does not apply."""
    if len(layout.modes) != len(prog.tensor_inputs):
        raise ValueError(f"the layout has {len(layout.modes)} modes for {len(prog.tensor_inputs)} tensor inputs")
    if layout.vec4 and not _vec4_ok(prog, layout):
        raise ValueError("the float4 path needs float32 outputs and contiguous inputs of float32, none strided")
    types = [ctype(d) for d in prog.value_dtypes()]
    kernel = _vec4_kernel if layout.vec4 else _kernel
    return device_source(prog, name) + "\n" + kernel(prog, layout, types, name)


def device_source(prog: FusedProgram, name: str = KERNEL_NAME) -> str:
    """The conversions and helpers ``prog`` needs and its body, ``__device__ void {name}_body(v0..,
    r0&..)``: the inputs' values (compute types) in, the outputs' values out."""
    prog.check()
    types = [ctype(d) for d in prog.value_dtypes()]
    helpers: dict[str, str] = {}
    n_in = len(prog.inputs)
    body: list[str] = []
    for j, (op, _, args) in enumerate(prog.instructions):
        c = types[n_in + j]
        typed = [_arg(a, types) for a in args]
        expr = c.rounded(expression(op, typed, c, helpers))
        body.append(f"const {c.compute} v{n_in + j} = {expr};")
    in_params = [f"const {types[j].compute} v{j}" for j in range(n_in)]
    out_params = [f"{types[o].compute}& r{k}" for k, o in enumerate(prog.outputs)]
    body += [f"r{k} = v{o};" for k, o in enumerate(prog.outputs)]
    consts = {a.dtype for _, _, args in prog.instructions for a in args if isinstance(a, Const)}
    dtypes = set(prog.value_dtypes()) | consts
    parts = []
    if "float16" in dtypes:
        parts.append(PREAMBLE_F16)
    if "bfloat16" in dtypes:
        parts.append(PREAMBLE_BF16)
    parts.extend(helpers.values())
    parts.append(
        f"__device__ __forceinline__ void {name}_body("
        + ", ".join(in_params + out_params)
        + ") {\n"
        + "".join(f"    {s}\n" for s in body)
        + "}\n"
    )
    return "\n".join(parts)


def _arg(a: int | Const, types: list[CType]) -> tuple[str, CType]:
    """An instruction argument as (expression, type): a value's variable or a literal."""
    if isinstance(a, Const):
        c = ctype(a.dtype)
        return literal(a.value, c), c
    return f"v{a}", types[a]


def _loop(idx: str, bound: str) -> str:
    """The grid-stride loop's head over ``i`` in [0, ``bound``)."""
    start = f"({idx})blockIdx.x * blockDim.x + threadIdx.x"
    return f"for ({idx} i = {start}; i < {bound}; i += ({idx})gridDim.x * blockDim.x) {{"


def _vec4_ok(prog: FusedProgram, layout: Layout) -> bool:
    dts = prog.value_dtypes()
    if any(dts[o] != "float32" for o in prog.outputs) or "s" in layout.modes:
        return False
    return all(m == "z" or dts[j] == "float32" for j, m in zip(prog.tensor_inputs, layout.modes))


def _kernel(prog: FusedProgram, layout: Layout, types: list[CType], name: str) -> str:
    idx, rank = layout.index, layout.rank
    strided = "s" in layout.modes
    params = [f"const {idx} n"] + ([f"const {idx} sh{d}" for d in range(rank)] if strided else [])
    loads: list[str] = []
    modes = iter(layout.modes)
    for j, (_, kind) in enumerate(prog.inputs):
        c = types[j]
        if kind == "scalar":
            params.append(f"const {c.compute} in{j}")
            loads.append(f"const {c.compute} v{j} = in{j};")
            continue
        mode = next(modes)
        params.append(f"const {c.storage}* __restrict__ in{j}")
        if mode == "s":
            params += [f"const {idx} in{j}_s{d}" for d in range(rank)]
        where = {"c": "i", "z": "0", "s": " + ".join(f"c{d} * in{j}_s{d}" for d in range(rank))}[mode]
        loads.append(f"const {c.compute} v{j} = {c.load(f'in{j}', where)};")
    params += [f"{types[o].storage}* __restrict__ out{k}" for k, o in enumerate(prog.outputs)]
    lines = [f'extern "C" __global__ void {name}(' + ", ".join(params) + ") {"]
    lines.append("  " + _loop(idx, "n"))
    if strided:
        lines.append(f"    {idx} rest = i;")
        for d in range(rank - 1, 0, -1):
            lines.append(f"    const {idx} c{d} = rest % sh{d}; rest /= sh{d};")
        lines.append(f"    const {idx} c0 = rest;")
    lines += ["    " + s for s in loads]
    lines += [f"    {types[o].compute} r{k};" for k, o in enumerate(prog.outputs)]
    call_args = [f"v{j}" for j in range(len(prog.inputs))] + [f"r{k}" for k in range(len(prog.outputs))]
    lines.append(f"    {name}_body(" + ", ".join(call_args) + ");")
    lines += [f"    out{k}[i] = {types[o].store(f'r{k}')};" for k, o in enumerate(prog.outputs)]
    lines += ["  }", "}", ""]
    return "\n".join(lines)


_LANES = ("x", "y", "z", "w")


def _vec4_kernel(prog: FusedProgram, layout: Layout, types: list[CType], name: str) -> str:
    """float32 outputs and contiguous float32 (or broadcast) inputs, four elements a step; ``n`` % 4 == 0."""
    params = ["const long long n"]
    before: list[str] = []
    loads: list[str] = []
    contiguous: set[int] = set()
    mode = dict(zip(prog.tensor_inputs, layout.modes))
    for j, (_, kind) in enumerate(prog.inputs):
        c = types[j]
        if kind == "scalar":
            params.append(f"const {c.compute} in{j}")
            before.append(f"const {c.compute} v{j} = in{j};")
        elif mode[j] == "c":
            params.append(f"const float4* __restrict__ in{j}")
            loads.append(f"const float4 q{j} = in{j}[i];")
            contiguous.add(j)
        else:
            params.append(f"const {c.storage}* __restrict__ in{j}")
            before.append(f"const {c.compute} v{j} = {c.load(f'in{j}', '0')};")
    params += [f"float4* __restrict__ out{k}" for k in range(len(prog.outputs))]
    lines = [f'extern "C" __global__ void {name}(' + ", ".join(params) + ") {"]
    lines += ["  " + s for s in before]
    lines.append("  const long long n4 = n >> 2;")
    lines.append("  " + _loop("long long", "n4"))
    lines += ["    " + s for s in loads]
    lines += [f"    float4 q_out{k};" for k in range(len(prog.outputs))]
    for lane in _LANES:
        call_args = [f"q{j}.{lane}" if j in contiguous else f"v{j}" for j in range(len(prog.inputs))]
        call_args += [f"q_out{k}.{lane}" for k in range(len(prog.outputs))]
        lines.append(f"    {name}_body(" + ", ".join(call_args) + ");")
    lines += [f"    out{k}[i] = q_out{k};" for k in range(len(prog.outputs))]
    lines += ["  }", "}", ""]
    return "\n".join(lines)

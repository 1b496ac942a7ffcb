"""Python source for numba from core's :class:`~ember.lazy.program.FusedProgram`: one
``@njit`` loop per (program, layout), the host's counterpart of ember-cuda's CUDA C.

The source does not hold shapes: the element count, the collapsed shape (when an input is
strided) and the inputs come as arguments, so one compiled kernel serves every shape of the
same layout (:class:`Layout`: a mode per tensor input, ``c`` contiguous and read as ``x[i]``,
``z`` one broadcast element; when one is strided, a loop per collapsed axis reads it as flat
memory at an offset, ``r``/``b``/``f`` by its last axis's stride 1/0/other, or ``s`` through
the collapsed coordinates if a stride is negative). The loop is serial (``nogil``:
:mod:`ember_cpu.parallel` runs parts of a large one on Python threads) unless
``EMBER_CPU_NUMBA_PARALLEL=1`` (then numba's ``prange`` splits it over the cores): measured on
the shared 2-core machine under load, a serial loop over 2^17-2^23 float32 elements ran 2-3x
faster than numpy every time, while the parallel one ranged from as fast to 380x slower (its
workers wait for a busy core; 16 ms against 0.04 ms at 2^17). ``fastmath`` stays off, so
``a * b + c`` is two roundings and NaN/inf behave as in numpy.

Semantics follow the unfused numpy kernels (``ember.array_module``): integer arithmetic wraps
in the operands' width (numba widens to 64 bits, every integer result is cast back), integer
``floordiv``/``remainder`` floor and give 0 for a zero divisor, float ``floordiv``/``remainder``
are numpy's ``fmod``-based ones (an infinity over a finite number floors ``a / b``, as ember's
kernel does), ``maximum``/``minimum`` propagate NaN, ``round`` is half-to-even. Only the
dtypes numba computes natively are generated (``bool``, the integers, ``float32``/``float64``);
programs over 16-bit floats run op by op (:mod:`ember_cpu.fusion`).

A program with a trailing reduction (``FusedProgram.reduce``) compiles to a loop nest over
:class:`RowLayout`: the kept axes outside (``prange`` over the first when parallel), the
reduced axes inside, each collapsed; the value is folded into a scalar accumulator and never
stored unless it is also a full-size output. float32 sums (and means) accumulate in float64,
integers in their own width (wrapping, as numpy's), max/min propagate NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ember.lazy.program import Const, FusedProgram

from . import settings
from .numba_math import EXP32 as _EXP32
from .numba_math import HELPERS as _HELPERS
from .numba_math import USES_EXP32 as _USES_EXP32
from .numba_math import VECTOR_F32_OPS as VECTOR_F32_OPS
from .numba_math import float64_math as float64_math

__all__ = [
    "Layout", "RowLayout", "LIBM_OPS", "NUMBA_DTYPES", "NUMBA_OPS", "NUMBA_REDUCTIONS", "KERNEL_NAME", "PARALLEL",
    "VECTOR_F32_OPS", "compilable", "float64_math", "libm_bound", "source", "reduce_source",
]  # fmt: skip

#: generate ``parallel=True`` loops (EMBER_CPU_NUMBA_PARALLEL=1); serial by default, see above
PARALLEL = settings.numba_parallel()

KERNEL_NAME = "ember_fused"

#: dtypes the generator computes in (numba has no float16 arithmetic and no bfloat16)
NUMBA_DTYPES = frozenset("bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64".split())

#: float functions that are one numpy scalar ufunc call in numba, by ember op name
_FLOAT_FN = {
    "exp": "np.exp", "log": "np.log", "sqrt": "np.sqrt", "sin": "np.sin", "cos": "np.cos",
    "tanh": "np.tanh", "exp2": "np.exp2", "expm1": "np.expm1", "log2": "np.log2", "log10": "np.log10",
    "log1p": "np.log1p", "tan": "np.tan", "asin": "np.arcsin", "acos": "np.arccos", "atan": "np.arctan",
    "sinh": "np.sinh", "cosh": "np.cosh", "asinh": "np.arcsinh", "acosh": "np.arccosh",
    "atanh": "np.arctanh",
}  # fmt: skip
_ROUNDING = {"floor": "np.floor", "ceil": "np.ceil", "trunc": "np.trunc", "round": "np.rint"}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH = {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}
_OTHER_UNARY = frozenset(
    "neg abs sign rsqrt reciprocal square isnan isinf isfinite logical_not bitwise_not signbit relu "
    "sigmoid silu gelu gelu_tanh softplus erf".split()
)
_OTHER_BINARY = frozenset(
    "div floordiv remainder pow maximum minimum atan2 hypot copysign logaddexp logical_and logical_or "
    "logical_xor".split()
)
#: every op name the generator compiles
NUMBA_OPS = frozenset(_FLOAT_FN) | frozenset(_ROUNDING) | frozenset(_CMP) | frozenset(_ARITH)
NUMBA_OPS |= _OTHER_UNARY | _OTHER_BINARY | {"cast", "where", "copy"}

#: ops numba computes by a scalar libm call per element (no SVML vector loops), which numpy's SIMD
#: loops run several times faster: a reduced program with one runs tile by tile through numpy
#: (ember_cpu.fusion.tiled_reduce). On the dev machine ``((x*a+b).exp()).sum(-1)`` at 4096x1024 ran
#: 59 ms as a numba loop, 41 ms tiled, 57 ms unfused; ``(x*a+b).sum(-1)`` 9.4 ms as a numba loop, 23 ms unfused
LIBM_OPS = (frozenset(_FLOAT_FN) - {"sqrt"}) | frozenset("sigmoid silu gelu gelu_tanh softplus erf pow".split())
LIBM_OPS |= {"atan2", "hypot", "logaddexp"}


def libm_bound(prog: FusedProgram) -> bool:
    """Whether ``prog`` calls libm per element (an op of :data:`LIBM_OPS` outside the float32
    ones the generator vectorises): numpy's SIMD loops then beat a numba loop."""
    return any(op in LIBM_OPS and not (dt == "float32" and op in VECTOR_F32_OPS) for op, dt, _ in prog.instructions)


#: reductions :func:`reduce_source` compiles at the end of a program
NUMBA_REDUCTIONS = frozenset({"sum", "prod", "max", "min", "mean"})


def _np(dt: str) -> str:
    return "np.bool_" if dt == "bool" else f"np.{dt}"


def _kind(dt: str) -> str:
    return np.dtype(np.bool_ if dt == "bool" else dt).kind


@dataclass(frozen=True)
class Layout:
    """What a kernel's source depends on besides its program: a mode per tensor input (``c``,
    ``z``, ``s``, ``r``, ``b`` or ``f``, in input order: see :func:`ember_cpu.fusion.plan`),
    the rank of the loop nest (0 when no input is strided: one flat loop) and, per output, the
    input (its number in ``prog.inputs``) it is stored into in place, or -1 (empty: none is).
    An in-place output is stored through that input's own argument, not a second one: a loop
    whose output array is also one of its inputs fails LLVM's runtime alias check and runs
    scalar (2^20 float32 ``p - lr * g``: 0.32 ms against 0.17 into a fresh buffer; through the
    input, on data out of cache, 0.29 against 0.44)."""

    modes: tuple[str, ...]
    rank: int = 0
    writes: tuple[int, ...] = ()


@dataclass(frozen=True)
class RowLayout:
    """The loop nest of a program with a trailing reduction: a mode per tensor input (``z`` one
    broadcast element, ``s`` read through the coordinates), the collapsed kept and reduced ranks."""

    modes: tuple[str, ...]
    outer: int
    inner: int


def compilable(prog: FusedProgram) -> str | None:
    """None if the generator compiles ``prog``, else why not (the op or dtype it lacks)."""
    for dt in prog.value_dtypes():
        if dt not in NUMBA_DTYPES:
            return f"dtype {dt} (numba computes no 16-bit floats)"
    for op, _, args in prog.instructions:
        if op not in NUMBA_OPS:
            return f"op {op}"
        for a in args:
            if isinstance(a, Const) and a.dtype not in NUMBA_DTYPES:
                return f"a constant of dtype {a.dtype}"
    if prog.reduce is not None and prog.reduce.op not in NUMBA_REDUCTIONS:
        return f"reduction {prog.reduce.op}"
    return None


class _Gen:
    """One program's source: constants and helpers collected while expressions are written."""

    def __init__(self) -> None:
        self.consts: dict[tuple[str, str], str] = {}
        self.helpers: dict[str, str] = {}
        self.exp32 = False

    def const(self, value: bool | int | float, dt: str) -> str:
        """A module-level constant of dtype ``dt`` (numba freezes globals with their type)."""
        if dt == "bool":
            return "True" if value else "False"
        key = (repr(float(value)) if _kind(dt) == "f" else repr(int(value)), dt)
        name = self.consts.get(key)
        if name is None:
            name = self.consts[key] = f"K{len(self.consts)}"
        return name

    def helper(self, key: str, dt: str) -> str:
        base = key.rsplit("_", 1)[0] if key.endswith(("_f", "_i", "_f32")) else key
        self.exp32 = self.exp32 or key in _USES_EXP32
        fn = f"ember_{base}_{dt}"
        if fn not in self.helpers:
            self.helpers[fn] = _HELPERS[key].replace(f"ember_{base}_T", fn).replace("T(", f"{_np(dt)}(")
        return fn

    def sigmoid(self, dt: str) -> str:
        """The sigmoid helper of ``dt``: float32's through the vectorisable ``ember_exp32``."""
        return self.helper("sigmoid_f32" if dt == "float32" else "sigmoid", dt)

    def prelude(self) -> list[str]:
        """Module text before the constants: imports, and ``ember_exp32`` if a helper calls it."""
        lines = ["import math", "", "import numpy as np", "from numba import njit, prange", ""]
        if self.exp32:
            lines[3:3] = ["from llvmlite import ir", "from numba import types", "from numba.extending import intrinsic"]
            lines += _EXP32.strip("\n").split("\n") + [""]
        return lines

    def unary(self, op: str, x: str, dt: str) -> str:
        k, T = _kind(dt), _np(dt)
        f = k == "f"
        if op == "exp" and dt == "float32":  # float32 arithmetic, within ~1 ulp of numpy's
            self.exp32 = True
            return f"ember_exp32({x}, E32_ZERO)"
        if op in _FLOAT_FN:
            return f"{_FLOAT_FN[op]}({x})"
        if op in _ROUNDING:
            return f"{_ROUNDING[op]}({x})" if f else x
        if op == "erf":
            return f"{self.helper('erf_f32', dt)}({x})" if dt == "float32" else f"{T}(math.erf({x}))"
        if op == "neg":
            return x if k == "b" else (f"(-{x})" if f else f"{T}(-{x})")
        if op == "abs":
            return f"abs({x})" if f else (f"{T}(abs({x}))" if k == "i" else x)
        if op == "sign":
            if k == "b":
                return x
            zero = x if f else f"{T}(0)"
            neg = f"{T}(-1) if {x} < 0 else {zero}" if k != "u" else zero
            return f"({T}(1) if {x} > 0 else ({neg}))"
        if op == "rsqrt":
            return f"({T}(1) / np.sqrt({x}))"
        if op == "reciprocal":
            return f"({T}(1) / {x})"
        if op == "square":
            return x if k == "b" else (f"({x} * {x})" if f else f"{T}({x} * {x})")
        if op in ("isnan", "isinf", "isfinite"):
            if not f:
                return "True" if op == "isfinite" else "False"
            return f"np.{op}({x})"
        if op == "logical_not":
            return f"(not {x})" if k == "b" else f"({x} == 0)"
        if op == "bitwise_not":
            return f"(not {x})" if k == "b" else f"{T}(~{x})"
        if op == "signbit":  # -0.0 and negative NaNs too
            return f"(math.copysign(1.0, {x}) < 0)"
        if op == "relu":  # NaN stays NaN, as numpy's maximum(x, 0)
            return f"({T}(0) if {x} < 0 else {x})"
        if op == "sigmoid":
            return f"{self.sigmoid(dt)}({x})"
        if op == "silu":
            return f"({x} * {self.sigmoid(dt)}({x}))"
        if op == "gelu":  # 0.5 x erfc(-x / sqrt 2): no cancellation for negative x
            half, r2 = self.const(0.5, dt), self.const(0.7071067811865476, dt)
            if dt == "float32":  # numba's math.erfc costs ~35 ns an element; the fit, ~8
                return f"({half} * {x} * {self.helper('erfc_fast', dt)}(-{x} * {r2}))"
            return f"({half} * {x} * {T}(math.erfc(-{x} * {r2})))"
        if op == "gelu_tanh":  # x sigmoid(2z)
            k0, k1 = self.const(2 * 0.7978845608028654, dt), self.const(0.044715, dt)
            return f"({x} * {self.sigmoid(dt)}({k0} * ({x} + {k1} * {x} * {x} * {x})))"
        if op == "softplus":
            return f"(({x} if {x} > 0 else {T}(0)) + np.log1p(np.exp(-abs({x}))))"
        raise ValueError(f"unknown unary op {op!r}")

    def binary(self, op: str, a: str, b: str, dt: str) -> str:
        k, T = _kind(dt), _np(dt)
        f = k == "f"
        if op in _CMP:
            return f"({a} {_CMP[op]} {b})"
        if k == "b" and op in ("add", "bitwise_or", "maximum", "logical_or"):
            return f"({a} or {b})"
        if k == "b" and op in ("mul", "bitwise_and", "minimum", "logical_and"):
            return f"({a} and {b})"
        if k == "b" and op in ("bitwise_xor", "logical_xor", "sub"):
            return f"({a} != {b})"
        if op in _ARITH:
            return f"({a} {_ARITH[op]} {b})" if f else f"{T}({a} {_ARITH[op]} {b})"
        if op == "div":
            return f"({a} / {b})"
        if op in ("floordiv", "remainder"):
            if f:
                return f"{self.helper(op + '_f', dt)}({a}, {b})"
            if k == "u":
                sym = "//" if op == "floordiv" else "%"
                return f"({T}(0) if {b} == 0 else {T}({a} {sym} {b}))"
            return f"{self.helper(op + '_i', dt)}({a}, {b})"
        if op == "pow":
            return f"np.power({a}, {b})" if f else f"{self.helper('pow_i', dt)}({a}, {b})"
        if op in ("maximum", "minimum"):
            sym = ">" if op == "maximum" else "<"
            cond = f"({a} {sym} {b} or {a} != {a})" if f else f"{a} {sym} {b}"
            return f"({a} if {cond} else {b})"
        if op in ("atan2", "hypot", "copysign"):
            return f"{T}(math.{op}({a}, {b}))"
        if op == "logaddexp":
            return f"{self.helper('logaddexp', dt)}({a}, {b})"
        if op == "logical_and":
            return f"(({a} != 0) and ({b} != 0))"
        if op == "logical_or":
            return f"(({a} != 0) or ({b} != 0))"
        if op == "logical_xor":
            return f"(({a} != 0) != ({b} != 0))"
        raise ValueError(f"unknown binary op {op!r}")

    def expression(self, op: str, args: list[tuple[str, str]], dt: str) -> str:
        """``op`` over (expression, dtype) pairs, a value of dtype ``dt``."""
        if op == "copy":
            return args[0][0]
        if op == "cast":
            (x, src), T = args[0], _np(dt)
            if dt == "bool":
                return f"({x} != 0)"
            if _kind(dt) in "iu" and _kind(src) == "f":
                return f"{T}(np.int64(np.trunc({x})))" if dt != "uint64" else f"{T}(np.trunc({x}))"
            return f"{T}({x})"
        if op == "where":
            (c, _), (a, _), (b, _) = args
            return f"({a} if {c} else {b})"
        if len(args) == 1:
            return self.unary(op, args[0][0], args[0][1])
        if len(args) == 2:
            return self.binary(op, args[0][0], args[1][0], args[0][1])
        raise ValueError(f"op {op!r} with {len(args)} arguments is not elementwise")


def source(prog: FusedProgram, layout: Layout, *, cache: bool) -> str:
    """The module text defining ``ember_fused(n, sh0.., st.., in0.., out0..)`` for ``prog`` under
    ``layout`` (``cache``: numba's on-disk cache, for a module written to a real file); an output
    the layout stores in place has no ``out`` argument."""
    prog.check()
    if prog.reduce is not None:
        raise ValueError("a program with a trailing reduction compiles with reduce_source()")
    if len(layout.modes) != len(prog.tensor_inputs):
        raise ValueError(f"the layout has {len(layout.modes)} modes for {len(prog.tensor_inputs)} tensor inputs")
    why = compilable(prog)
    if why is not None:
        raise ValueError(f"the numba generator does not compile {why}")
    gen = _Gen()
    dts = prog.value_dtypes()
    n_in = len(prog.inputs)
    rank = layout.rank
    strided = rank > 0
    last = rank - 1
    steps: list[str] = []  # the flat inputs' strides, arguments after the shape
    before: list[str] = []
    loads: list[str] = []
    offsets: list[list[str]] = [[] for _ in range(rank)]  # per loop level: offsets of the flat inputs
    modes = iter(layout.modes)
    for j, (_, kind) in enumerate(prog.inputs):
        if kind == "scalar":
            before.append(f"v{j} = in{j}")
            continue
        mode = next(modes)
        if mode == "z":
            before.append(f"v{j} = in{j}[0]")
        elif mode == "c":
            loads.append(f"v{j} = in{j}[i]")
        elif mode == "s":
            loads.append(f"v{j} = in{j}[{', '.join(f'c{d}' for d in range(rank))}]")
        else:  # flat memory at an offset: one stride argument per axis (the last one's for f only)
            steps += [f"st{j}_{d}" for d in range(rank if mode == "f" else last)]
            for d in range(last):
                prev = f"o{j}_{d - 1} + " if d else ""
                offsets[d].append(f"o{j}_{d} = {prev}c{d} * st{j}_{d}")
            at = f"o{j}_{last - 1}" if last else ""
            inner = {"r": f"c{last}", "b": "", "f": f"c{last} * st{j}_{last}"}[mode]
            loads.append(f"v{j} = in{j}[{_unsigned(' + '.join(x for x in (at, inner) if x) or '0')}]")
    writes = layout.writes or (-1,) * len(prog.outputs)
    if len(writes) != len(prog.outputs):
        raise ValueError(f"the layout stores {len(writes)} outputs in place of {len(prog.outputs)}")
    for j in writes:
        if j >= 0 and (prog.inputs[j][1] != "tensor" or layout.modes[prog.tensor_inputs.index(j)] != "c"):
            raise ValueError(f"output stored into input {j}, which is not a contiguous tensor input")
    params = ["n", *(f"sh{d}" for d in range(rank)), *steps, *(f"in{j}" for j in range(n_in))]
    params += [f"out{k}" for k in range(len(prog.outputs)) if writes[k] < 0]
    body: list[str] = []
    for j, (op, dt, args) in enumerate(prog.instructions):
        typed = [(gen.const(a.value, a.dtype), a.dtype) if isinstance(a, Const) else (f"v{a}", dts[a]) for a in args]
        body.append(f"v{n_in + j} = {gen.expression(op, typed, dt)}")
    lines = gen.prelude()
    for (value, dt), name in gen.consts.items():
        lines.append(f"{name} = {_np(dt)}({_literal(value)})")
    lines += [h for h in gen.helpers.values()]
    flags = f"parallel={PARALLEL}, fastmath=False, error_model='numpy', nogil=True" + (", cache=True" if cache else "")
    lines += ["", f"@njit({flags})", f"def {KERNEL_NAME}({', '.join(params)}):"]
    lines += ["    " + s for s in before]
    pad = "        "
    if strided:
        # one loop per collapsed axis (prange over the first), the flat index and the inputs'
        # offsets built level by level: a division and a remainder per axis and element, and
        # numba's strided 2-D reads, kept LLVM from vectorising (W4's bias-add-GELU region over
        # (1024, 1024): 33 ms; as nested loops over flat memory: see the log of 2026-12-05)
        base = "0"
        for d in range(rank):
            lines.append(f"{pad[4:]}for c{d} in {'prange' if d == 0 else 'range'}(sh{d}):")
            if d < last:
                lines.append(f"{pad}b{d} = ({base} + c{d}) * sh{d + 1}")
                lines += [pad + o for o in offsets[d]]
                base = f"b{d}"
                pad += "    "
        lines.append(f"{pad}i = {_unsigned(f'{base} + c{last}')}" if rank > 1 else f"{pad}i = c0")
    else:
        lines.append("    for i in prange(n):")
    lines += [pad + s for s in loads]
    lines += [pad + s for s in body]
    lines += [f"{pad}{f'in{writes[k]}' if writes[k] >= 0 else f'out{k}'}[i] = v{o}" for k, o in enumerate(prog.outputs)]
    return "\n".join(lines) + "\n"


def _unsigned(index: str) -> str:
    """A computed flat index as ``np.uint64``: numba wraps a signed index that may be negative
    (``i < 0: i += len``) per element, which kept LLVM from vectorising every strided loop nest
    (the offsets are sums of products it cannot prove non-negative; they are, as the layout
    gives negative strides mode ``s``). W2's bias-add ReLU over (128, 1024): 58 -> 9 us alone.
    A loop variable or a literal is left as it is (``range`` proves it non-negative)."""
    if index.isdigit() or (index[:1] == "c" and index[1:].isdigit()):
        return index
    return f"np.uint64({index})"


def _literal(text: str) -> str:
    """A constant's repr as Python source (inf and NaN through float())."""
    v = float(text) if ("." in text or "e" in text or "n" in text) else None
    if v is not None and not math.isfinite(v):
        return f"float({text!r})"
    return text


def _identity(op: str, dt: str) -> bool | int | float:
    """The value a reduction starts from, in accumulator dtype ``dt``."""
    if op in ("sum", "mean"):
        return 0
    if op == "prod":
        return 1
    if _kind(dt) == "f":
        return -math.inf if op == "max" else math.inf
    info = np.iinfo(np.dtype(dt))
    return int(info.min) if op == "max" else int(info.max)


def _accumulator(op: str, dt: str) -> str:
    """float32 sums and means accumulate in float64 (a serial loop has no pairwise summation)."""
    return "float64" if op in ("sum", "mean") and dt == "float32" else dt


def _fold(op: str, acc: str, v: str, dt: str) -> str:
    """The statement folding value ``v`` (of ``dt``) into accumulator ``acc``."""
    A = _np(_accumulator(op, dt))
    f = _kind(dt) == "f"
    if op in ("sum", "mean", "prod"):
        sym = "*" if op == "prod" else "+"
        return f"{acc} = {acc} {sym} {A}({v})" if f else f"{acc} = {A}({acc} {sym} {v})"
    sym = ">" if op == "max" else "<"
    nan = f" or {v} != {v}" if f else ""
    return f"if {v} {sym} {acc}{nan}:\n    {acc} = {v}"


def reduce_source(prog: FusedProgram, layout: RowLayout, *, cache: bool) -> str:
    """The module text defining ``ember_fused(osh0.., ish0.., in0.., out0.., red)`` for a program
    with a trailing reduction: tensors are read (and full-size outputs written) at coordinates
    ``[o0.., q0..]`` (kept, then reduced axes, collapsed); ``red[o0..]`` gets the reduced value."""
    prog.check()
    r = prog.reduce
    if r is None:
        raise ValueError("reduce_source() compiles a program with a trailing reduction; see source()")
    if len(layout.modes) != len(prog.tensor_inputs):
        raise ValueError(f"the layout has {len(layout.modes)} modes for {len(prog.tensor_inputs)} tensor inputs")
    why = compilable(prog)
    if why is not None:
        raise ValueError(f"the numba generator does not compile {why}")
    gen = _Gen()
    dts = prog.value_dtypes()
    n_in = len(prog.inputs)
    ro, ri = layout.outer, layout.inner
    outer = [f"o{d}" for d in range(ro)]
    inner = [f"q{d}" for d in range(ri)]
    at = ", ".join(outer + inner)
    params = [f"osh{d}" for d in range(ro)] + [f"ish{d}" for d in range(ri)]
    before: list[str] = []
    loads: list[str] = []
    modes = iter(layout.modes)
    for j, (_, kind) in enumerate(prog.inputs):
        params.append(f"in{j}")
        if kind == "scalar":
            before.append(f"v{j} = in{j}")
        elif next(modes) == "z":
            before.append(f"v{j} = in{j}[0]")
        else:
            loads.append(f"v{j} = in{j}[{at}]")
    params += [f"out{k}" for k in range(len(prog.outputs))] + ["red"]
    body: list[str] = []
    for j, (op, dt, args) in enumerate(prog.instructions):
        typed = [(gen.const(a.value, a.dtype), a.dtype) if isinstance(a, Const) else (f"v{a}", dts[a]) for a in args]
        body.append(f"v{n_in + j} = {gen.expression(op, typed, dt)}")
    body += [f"out{k}[{at}] = v{o}" for k, o in enumerate(prog.outputs)]
    dt = dts[r.value]
    acc_dt = _accumulator(r.op, dt)
    body += _fold(r.op, "acc", f"v{r.value}", dt).split("\n")
    start = gen.const(_identity(r.op, acc_dt), acc_dt)
    if r.op == "mean":
        count = " * ".join(f"ish{d}" for d in range(ri))
        result = f"{_np(dt)}(acc / {_np(acc_dt)}({count}))"
    else:
        result = f"{_np(dt)}(acc)" if acc_dt != dt else "acc"
    lines = gen.prelude()
    for (value, cdt), name in gen.consts.items():
        lines.append(f"{name} = {_np(cdt)}({_literal(value)})")
    lines += [h for h in gen.helpers.values()]
    flags = f"parallel={PARALLEL}, fastmath=False, error_model='numpy', nogil=True" + (", cache=True" if cache else "")
    lines += ["", f"@njit({flags})", f"def {KERNEL_NAME}({', '.join(params)}):"]
    lines += ["    " + s for s in before]
    pad = "    "
    for d in range(ro):
        loop = "prange" if d == 0 else "range"
        lines.append(f"{pad}for o{d} in {loop}(osh{d}):")
        pad += "    "
    lines.append(f"{pad}acc = {start}")
    inner_pad = pad
    for d in range(ri):
        lines.append(f"{inner_pad}for q{d} in range(ish{d}):")
        inner_pad += "    "
    lines += [inner_pad + s for s in loads]
    lines += [inner_pad + s for s in body]
    lines.append(f"{pad}red[{', '.join(outer)}] = {result}")
    return "\n".join(lines) + "\n"

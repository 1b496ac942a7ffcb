"""OpenCL C expressions of ember's elementwise ops, per dtype kind: one line per op.

Each entry turns argument expressions (already in the compute type) into an expression of
the result's compute type. Ops that need more than an expression name a helper function,
which the generator emits once per program (see ``HELPERS``). Semantics follow numpy:
``round`` is half-to-even (``rint``), integer ``floordiv`` floors and ``remainder`` takes
the divisor's sign (both give 0 for a zero divisor instead of trapping), ``maximum`` and
``minimum`` propagate NaN.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from . import complex as cx
from .cltypes import CType, literal

__all__ = ["expression", "HELPERS", "ELEMENTWISE_OPS", "UNARY_OPS", "BINARY_OPS", "BOOL_RESULT"]

Args = list[tuple[str, CType]]

UNARY_OPS = frozenset(
    "neg abs sign exp log sqrt rsqrt sin cos tanh erf floor ceil round trunc reciprocal isnan isinf "
    "logical_not bitwise_not exp2 expm1 log2 log10 log1p tan asin acos atan sinh cosh asinh acosh atanh "
    "square isfinite relu sigmoid gelu gelu_tanh silu softplus conj real imag angle".split()
)
BINARY_OPS = frozenset(
    "add sub mul div floordiv remainder pow maximum minimum atan2 eq ne lt le gt ge logical_and logical_or "
    "logical_xor bitwise_and bitwise_or bitwise_xor hypot logaddexp".split()
)
BOOL_RESULT = frozenset("isnan isinf isfinite logical_not eq ne lt le gt ge logical_and logical_or logical_xor".split())
#: ops the backend exposes as elementwise primitives or native composites
ELEMENTWISE_OPS = UNARY_OPS | BINARY_OPS

#: float builtins that take and return the compute type
_FLOAT_FN = {
    "exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos",
    "exp2": "exp2", "expm1": "expm1", "log2": "log2", "log10": "log10", "log1p": "log1p", "tan": "tan",
    "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh",
    "acosh": "acosh", "atanh": "atanh", "floor": "floor", "ceil": "ceil", "round": "rint", "trunc": "trunc",
}  # fmt: skip

#: ops defined for floating-point operands only (the core's dtype rules never send others)
FLOAT_ONLY = frozenset(
    "exp log sqrt rsqrt sin cos tanh erf exp2 expm1 log2 log10 log1p tan asin acos atan sinh cosh asinh acosh "
    "atanh reciprocal sigmoid gelu gelu_tanh silu softplus div atan2 hypot logaddexp".split()
)

_BITWISE = frozenset(["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"])
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_ARITH = {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}

# helper functions, formatted with T = compute type; named ember_<op>_<T>
HELPERS: dict[str, str] = {
    "floordiv_f": """
inline T ember_floordiv_T(T a, T b) {
    if (b == (T)0) return a / b;
    /* the Array API's cases with one infinity: floor(a / b), not NaN */
    if (isinf(a) != isinf(b) && !isnan(a) && !isnan(b)) return floor(a / b);
    T mod = fmod(a, b);
    T div = (a - mod) / b;
    if (mod != (T)0) { if ((b < (T)0) != (mod < (T)0)) div -= (T)1; }
    T fl;
    if (div != (T)0) { fl = floor(div); if (div - fl > F(0.5)) fl += (T)1; }
    else { fl = copysign((T)0, a / b); }
    return fl;
}""",
    "remainder_f": """
inline T ember_remainder_T(T a, T b) {
    T mod = fmod(a, b);
    if (b == (T)0) return mod;
    if (mod != (T)0) { if ((b < (T)0) != (mod < (T)0)) mod += b; }
    else { mod = copysign((T)0, b); }
    return mod;
}""",
    "floordiv_i": """
inline T ember_floordiv_T(T a, T b) {
    if (b == (T)0) return (T)0;
    if (b == (T)-1) return (T)(-a);
    T q = a / b;
    if ((a % b != (T)0) && ((a < (T)0) != (b < (T)0))) q -= (T)1;
    return q;
}""",
    "remainder_i": """
inline T ember_remainder_T(T a, T b) {
    if (b == (T)0 || b == (T)-1) return (T)0;
    T r = a % b;
    if (r != (T)0 && ((r < (T)0) != (b < (T)0))) r += b;
    return r;
}""",
    "pow_i": """
inline T ember_pow_T(T a, T b) {
    if (b < (T)0) { if (a == (T)1) return (T)1; if (a == (T)-1) return (b & (T)1) ? (T)-1 : (T)1; return (T)0; }
    T r = (T)1;
    while (b) { if (b & (T)1) r *= a; a *= a; b >>= 1; }
    return r;
}""",
    "pow_u": """
inline T ember_pow_T(T a, T b) {
    T r = (T)1;
    while (b) { if (b & (T)1) r *= a; a *= a; b >>= 1; }
    return r;
}""",
    # tanh rounds to +-1 beyond these |x| (float: atanh(1 - 2**-25), double: atanh(1 - 2**-54));
    # some drivers' tanh returns 1 - ulp there, which turns gelu_tanh(-inf) into -inf, not NaN
    "tanh_f": """
inline T ember_tanh_T(T x) {
    return fabs(x) > F(9.010913) ? copysign((T)1, x) : tanh(x);
}""",
    "tanh_d": """
inline T ember_tanh_T(T x) {
    return fabs(x) > F(19.06155) ? copysign((T)1, x) : tanh(x);
}""",
    # float erf as one rational function (Eigen's; < 8 ulp on [-4, 4], +-1 beyond): branch-free, so
    # CPU drivers vectorise it, where their libm erf is an order of magnitude slower
    "erf_f": """
inline float ember_erf_float(float a) {
    const float x = a > 4.0f ? 4.0f : (a < -4.0f ? -4.0f : a);  /* NaN stays NaN */
    const float x2 = x * x;
    float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
    p = x2 * p + -2.10102402082508e-06f;
    p = x2 * p + -5.69250639462346e-05f;
    p = x2 * p + -7.34990630326855e-04f;
    p = x2 * p + -2.95459980854025e-03f;
    p = x2 * p + -1.60960333262415e-02f;
    float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
    q = x2 * q + -1.68282697438203e-03f;
    q = x2 * q + -7.37332916720468e-03f;
    q = x2 * q + -1.42647390514189e-02f;
    return x * p / q;
}""",
    "sigmoid_f": """
inline T ember_sigmoid_T(T x) {
    T e = exp(-fabs(x));
    return x >= (T)0 ? (T)1 / ((T)1 + e) : e / ((T)1 + e);
}""",
    "logaddexp_f": """
inline T ember_logaddexp_T(T x, T y) {
    if (x == y) return x + F(0.6931471805599453);
    T d = x - y;
    if (d > (T)0) return x + log1p(exp(-d));
    if (d <= (T)0) return y + log1p(exp(d));
    return d;
}""",
}


def _helper(name: str, c: CType, helpers: dict[str, str]) -> str:
    """Register helper ``name`` for compute type ``c`` and return its function name."""
    fn = f"ember_{name.rsplit('_', 1)[0]}_{c.compute}"
    if fn not in helpers:
        text = HELPERS[name].replace("ember_" + name.rsplit("_", 1)[0] + "_T", fn)
        text = re.sub(r"F\(([0-9.e+-]+)\)", lambda m: literal(float(m.group(1)), c), text)
        helpers[fn] = text.replace("T", c.compute)
    return fn


def _fconst(v: float, c: CType) -> str:
    return literal(v, c)


def _unary(op: str, x: str, c: CType, out: CType, helpers: dict[str, str]) -> str:
    k = c.kind
    T = c.compute
    if op in _FLOAT_FN:
        if k == "f":
            return f"{_FLOAT_FN[op]}({x})"
        if op in ("floor", "ceil", "round", "trunc"):
            return x
        raise ValueError(f"{op} needs a floating-point operand, got {c.name}")
    if op == "erf":
        if k != "f":
            raise ValueError(f"erf needs a floating-point operand, got {c.name}")
        return f"{_helper('erf_f', c, helpers)}({x})" if T == "float" else f"erf({x})"
    if op == "tanh":
        if k != "f":
            raise ValueError(f"tanh needs a floating-point operand, got {c.name}")
        return f"{_helper('tanh_d' if T == 'double' else 'tanh_f', c, helpers)}({x})"
    if op == "neg":
        return f"(({T})(-{x}))"
    if op == "abs":
        if k == "f":
            return f"fabs({x})"
        return f"(({T})({x} < 0 ? -{x} : {x}))" if k == "i" else x
    if op == "sign":
        if k == "f":
            return f"(isnan({x}) ? {x} : ({T})(({x} > 0) - ({x} < 0)))"
        return f"(({T})(({x} > 0) - ({x} < 0)))" if k == "i" else f"(({T})({x} > 0))"
    if op == "rsqrt":
        return f"(({T})1 / sqrt({x}))"
    if op == "reciprocal":
        return f"(({T})1 / {x})"
    if op == "square":
        return f"(({T})({x} * {x}))"
    if op in ("isnan", "isinf", "isfinite"):
        if k != "f":
            return "((uchar)1)" if op == "isfinite" else "((uchar)0)"
        return f"((uchar){op}({x}))"
    if op == "logical_not":
        return f"((uchar)!{x})"
    if op == "bitwise_not":
        return f"((uchar)!{x})" if k == "b" else f"(({T})~{x})"
    if op == "relu":
        if k == "f":
            return f"((isnan({x}) || {x} > ({T})0) ? {x} : ({T})0)"
        return f"({x} > 0 ? {x} : ({T})0)"
    if op == "sigmoid":
        return f"{_helper('sigmoid_f', c, helpers)}({x})"
    if op == "silu":
        return f"({x} * {_helper('sigmoid_f', c, helpers)}({x}))"
    if op == "gelu":
        erf = _helper("erf_f", c, helpers) if T == "float" else "erf"
        return f"({_fconst(0.5, c)} * {x} * (({T})1 + {erf}({x} * {_fconst(0.7071067811865476, c)})))"
    if op == "gelu_tanh":
        k0 = _fconst(0.7978845608028654, c)
        th = _helper("tanh_d" if T == "double" else "tanh_f", c, helpers)
        return f"({_fconst(0.5, c)} * {x} * (({T})1 + {th}({k0} * ({x} + {_fconst(0.044715, c)} * {x} * {x} * {x}))))"
    if op == "softplus":
        return f"(((isnan({x}) || {x} > ({T})0) ? {x} : ({T})0) + log1p(exp(-fabs({x}))))"
    raise ValueError(f"unknown unary op {op!r}")


def _binary(op: str, a: str, b: str, c: CType, out: CType, helpers: dict[str, str]) -> str:
    k = c.kind
    T = c.compute
    if op in _ARITH:
        return f"(({T})({a} {_ARITH[op]} {b}))"
    if op in _CMP:
        return f"((uchar)({a} {_CMP[op]} {b}))"
    if op == "div":
        return f"({a} / {b})"
    if op == "floordiv":
        if k == "f":
            return f"{_helper('floordiv_f', c, helpers)}({a}, {b})"
        if k == "u" or k == "b":
            return f"(({b}) == 0 ? ({T})0 : ({T})({a} / {b}))"
        return f"{_helper('floordiv_i', c, helpers)}({a}, {b})"
    if op == "remainder":
        if k == "f":
            return f"{_helper('remainder_f', c, helpers)}({a}, {b})"
        if k == "u" or k == "b":
            return f"(({b}) == 0 ? ({T})0 : ({T})({a} % {b}))"
        return f"{_helper('remainder_i', c, helpers)}({a}, {b})"
    if op == "pow":
        if k == "f":
            return f"pow({a}, {b})"
        return f"{_helper('pow_u' if k in 'ub' else 'pow_i', c, helpers)}({a}, {b})"
    if op == "maximum":
        cond = f"({a} > {b} || isnan({a}))" if k == "f" else f"({a} > {b})"
        return f"({cond} ? {a} : {b})"
    if op == "minimum":
        cond = f"({a} < {b} || isnan({a}))" if k == "f" else f"({a} < {b})"
        return f"({cond} ? {a} : {b})"
    if op == "atan2":
        return f"atan2({a}, {b})"
    if op == "hypot":
        return f"hypot({a}, {b})"
    if op == "logaddexp":
        return f"{_helper('logaddexp_f', c, helpers)}({a}, {b})"
    if op == "logical_and":
        return f"((uchar)({a} && {b}))"
    if op == "logical_or":
        return f"((uchar)({a} || {b}))"
    if op == "logical_xor":
        return f"((uchar)(({a} != 0) != ({b} != 0)))"
    raise ValueError(f"unknown binary op {op!r}")


def _cast(x: str, c: CType, out: CType) -> str:
    if out.kind == "b":
        return f"((uchar)({x} != 0))"
    if out.compute == c.compute:
        return x
    return f"(({out.compute})({x}))"


#: complex parts; on a real operand: conj and real are the value, imag is 0, angle is atan2(0, x)
_PARTS = frozenset(["conj", "real", "imag", "angle"])


def _real_parts(op: str, x: str, c: CType) -> str:
    if op in ("conj", "real"):
        return x
    if op == "imag":
        return literal(0, c)
    if c.kind != "f":
        raise ValueError(f"angle needs a floating-point or complex operand, got {c.name}")
    return f"atan2({literal(0, c)}, {x})"


def expression(op: str, args: Args, out: CType, helpers: dict[str, str]) -> str:
    """The OpenCL C expression of ``op`` applied to ``args`` (expression, type) pairs."""
    if op == "cast":
        if args[0][1].kind == "c" or out.kind == "c":
            return cx.cast(args[0][0], args[0][1], out)
        return _cast(args[0][0], args[0][1], out)
    if op == "make_complex":  # (real part, imaginary part) -> the pair (complex matmul's last step)
        return f"(({out.compute})({args[0][0]}, {args[1][0]}))"
    if op == "where":
        (cnd, _), (a, _), (b, _) = args
        return f"({cnd} ? {a} : {b})"
    if op == "copy":
        return args[0][0]
    if op == "fma":
        (a, _), (b, _), (d, _) = args
        return f"({a} * {b} + {d})"
    if op in _PARTS and args[0][1].kind != "c":
        return _real_parts(op, args[0][0], args[0][1])
    if any(c.kind == "c" for _, c in args):
        return cx.expression(op, args, out)
    if op in FLOAT_ONLY and args[0][1].kind != "f":
        raise ValueError(f"{op} needs floating-point operands, got {args[0][1].name}")
    if op in _BITWISE and args[0][1].kind == "f":
        raise ValueError(f"{op} needs integer or boolean operands, got {args[0][1].name}")
    if len(args) == 1:
        return _unary(op, args[0][0], args[0][1], out, helpers)
    if len(args) == 2:
        return _binary(op, args[0][0], args[1][0], args[0][1], out, helpers)
    raise ValueError(f"op {op!r} with {len(args)} arguments is not elementwise")


#: ops whose result dtype differs from the operand dtype by rule
RESULT_DTYPE: dict[str, Callable[[str], str]] = {op: (lambda _: "bool") for op in BOOL_RESULT}

"""The elementwise op table: for each op, a WGSL expression per compute class.

Classes (see :mod:`ember_wgpu.typemap`): ``f`` f32, ``i`` i32, ``u`` u32, ``b`` bool, ``l``
emulated int64, ``L`` emulated uint64, ``c`` complex64 as vec2<f32> (:mod:`.complex_lib`).
``{0}``, ``{1}``, ``{2}`` are the operands (always plain SSA names, so a template may use one
several times). A template is chosen by the class of the first operand (the second for
``where``); the result class is the instruction's dtype.
"""

from __future__ import annotations

from ..typemap import WType
from .complex_lib import TEMPLATES as _COMPLEX

__all__ = ["UNARY", "BINARY", "TERNARY", "BOOL_RESULT", "ARITY", "template", "convert", "OpNotSupported"]


class OpNotSupported(KeyError):
    """The op has no WGSL template for this compute class."""


_FIU = ("f", "i", "u")
_INT64 = ("l", "L")


def _same(expr: str, classes: str = "fiulLb") -> dict[str, str]:
    return {c: expr for c in classes}


def _float(expr: str) -> dict[str, str]:
    return {"f": expr}


def _arith(op: str, i64: str) -> dict[str, str]:
    return {**{c: f"({{0}} {op} {{1}})" for c in _FIU}, **{c: f"{i64}({{0}}, {{1}})" for c in _INT64}}


UNARY: dict[str, dict[str, str]] = {
    "identity": _same("{0}"),
    "neg": {"f": "(-{0})", "i": "(-{0})", "u": "(0u - {0})", "l": "i64_neg({0})", "L": "i64_neg({0})"},
    "abs": {"f": "abs({0})", "i": "abs({0})", "u": "{0}", "l": "i64_abs({0})", "L": "{0}"},
    "sign": {
        "f": "f_sign({0})",
        "i": "sign({0})",
        "u": "select(0u, 1u, {0} != 0u)",
        "l": "i64_sign({0})",
        "L": "vec2<u32>(select(0u, 1u, any({0} != vec2<u32>(0u, 0u))), 0u)",
    },
    "exp": _float("m_exp({0})"),
    "exp2": _float("m_exp2({0})"),
    "expm1": _float("m_expm1({0})"),
    "log": _float("m_log({0})"),
    "log2": _float("(m_log({0}) * 1.44269504088896341)"),
    "log10": _float("(m_log({0}) * 0.434294481903251828)"),
    "log1p": _float("m_log1p({0})"),
    "sqrt": _float("sqrt({0})"),
    "rsqrt": _float("(1.0 / sqrt({0}))"),
    "sin": _float("m_sin({0})"),
    "cos": _float("m_cos({0})"),
    "tan": _float("(m_sin({0}) / m_cos({0}))"),
    "asin": _float("m_asin({0})"),
    "acos": _float("m_acos({0})"),
    "atan": _float("m_atan({0})"),
    "sinh": _float("m_sinh({0})"),
    "cosh": _float("m_cosh({0})"),
    "tanh": _float("m_tanh({0})"),
    "asinh": _float("m_asinh({0})"),
    "acosh": _float("m_acosh({0})"),
    "atanh": _float("m_atanh({0})"),
    "erf": _float("m_erf({0})"),
    "floor": {"f": "floor({0})", **_same("{0}", "iulL")},
    "ceil": {"f": "ceil({0})", **_same("{0}", "iulL")},
    "round": {"f": "round({0})", **_same("{0}", "iulL")},
    "trunc": {"f": "trunc({0})", **_same("{0}", "iulL")},
    "reciprocal": _float("(1.0 / {0})"),
    "square": {**{c: "({0} * {0})" for c in _FIU}, **{c: "i64_mul({0}, {0})" for c in _INT64}},
    "isnan": {"f": "is_nan({0})", **_same("false", "iulLb")},
    "isinf": {"f": "is_inf({0})", **_same("false", "iulLb")},
    "isfinite": {"f": "(!(is_nan({0}) || is_inf({0})))", **_same("true", "iulLb")},
    "logical_not": {"b": "(!{0})"},
    "bitwise_not": {"i": "(~{0})", "u": "(~{0})", "l": "(~{0})", "L": "(~{0})", "b": "(!{0})"},
    # neural-network activations (native versions of core composites)
    "relu": {
        "f": "select(0.0, {0}, {0} > 0.0 || is_nan({0}))",
        "i": "max({0}, 0i)",
        "u": "{0}",
        "l": "i64_max({0}, vec2<u32>(0u, 0u))",
        "L": "{0}",
    },
    "sigmoid": _float("m_sigmoid({0})"),
    "silu": _float("({0} * m_sigmoid({0}))"),
    "softplus": _float("m_softplus({0})"),
    "gelu": _float("(0.5 * {0} * (1.0 + m_erf({0} * 0.707106781186547524)))"),
    "gelu_tanh": _float("(0.5 * {0} * (1.0 + m_tanh(0.797884560802865355 * ({0} + 0.044715 * {0} * {0} * {0}))))"),
}

BINARY: dict[str, dict[str, str]] = {
    "add": _arith("+", "i64_add"),
    "sub": _arith("-", "i64_sub"),
    "mul": _arith("*", "i64_mul"),
    "div": _float("({0} / {1})"),
    "floordiv": {
        "f": "f_floordiv({0}, {1})",
        "i": "i_floordiv({0}, {1})",
        "u": "u_div({0}, {1})",
        "l": "i64_floordiv({0}, {1})",
        "L": "u64_div({0}, {1})",
    },
    "remainder": {
        "f": "f_rem({0}, {1})",
        "i": "i_rem({0}, {1})",
        "u": "u_rem({0}, {1})",
        "l": "i64_rem({0}, {1})",
        "L": "u64_rem({0}, {1})",
    },
    "pow": {
        "f": "m_pow({0}, {1})",
        "i": "i_pow({0}, {1})",
        "u": "u_pow({0}, {1})",
        "l": "i64_pow({0}, {1}, true)",
        "L": "i64_pow({0}, {1}, false)",
    },
    "maximum": {
        "f": "f_max({0}, {1})",
        "i": "max({0}, {1})",
        "u": "max({0}, {1})",
        "l": "i64_max({0}, {1})",
        "L": "u64_max({0}, {1})",
    },
    "minimum": {
        "f": "f_min({0}, {1})",
        "i": "min({0}, {1})",
        "u": "min({0}, {1})",
        "l": "i64_min({0}, {1})",
        "L": "u64_min({0}, {1})",
    },
    "atan2": _float("m_atan2({0}, {1})"),
    "hypot": _float("m_hypot({0}, {1})"),
    "logaddexp": _float("m_logaddexp({0}, {1})"),
    "eq": {**_same("({0} == {1})", "fiub"), **_same("all({0} == {1})", "lL")},
    "ne": {"f": "f_ne({0}, {1})", **_same("({0} != {1})", "iub"), **_same("any({0} != {1})", "lL")},
    "lt": {**_same("({0} < {1})", "fiu"), "l": "i64_lt({0}, {1})", "L": "u64_lt({0}, {1})"},
    "le": {**_same("({0} <= {1})", "fiu"), "l": "(!i64_lt({1}, {0}))", "L": "(!u64_lt({1}, {0}))"},
    "gt": {**_same("({0} > {1})", "fiu"), "l": "i64_lt({1}, {0})", "L": "u64_lt({1}, {0})"},
    "ge": {**_same("({0} >= {1})", "fiu"), "l": "(!i64_lt({0}, {1}))", "L": "(!u64_lt({0}, {1}))"},
    "logical_and": {"b": "({0} && {1})"},
    "logical_or": {"b": "({0} || {1})"},
    "logical_xor": {"b": "({0} != {1})"},
    "bitwise_and": {**_same("({0} & {1})", "iulL"), "b": "({0} && {1})"},
    "bitwise_or": {**_same("({0} | {1})", "iulL"), "b": "({0} || {1})"},
    "bitwise_xor": {**_same("({0} ^ {1})", "iulL"), "b": "({0} != {1})"},
}

# the parts of a complex number; of a real one: conj and real are the value, imag is 0, angle atan2(0, x)
UNARY["conj"] = _same("{0}", "fiulL")
UNARY["real"] = _same("{0}", "fiulL")
UNARY["imag"] = {"f": "0.0", "i": "0i", "u": "0u", "l": "vec2<u32>(0u, 0u)", "L": "vec2<u32>(0u, 0u)"}
UNARY["angle"] = _float("m_atan2(0.0, {0})")
BINARY["make_complex"] = {"f": "vec2<f32>({0}, {1})"}  # (real, imaginary) -> the pair (complex matmul)
for _op, _tpl in _COMPLEX.items():
    (UNARY if "{1}" not in _tpl else BINARY)[_op]["c"] = _tpl

TERNARY: dict[str, dict[str, str]] = {
    "where": _same("select({2}, {1}, {0})", "fiulLbc"),
}

#: ops whose result is bool whatever the operand class
BOOL_RESULT = frozenset(
    ["isnan", "isinf", "isfinite", "logical_not", "eq", "ne", "lt", "le", "gt", "ge"]
    + ["logical_and", "logical_or", "logical_xor"]
)

ARITY = {**{k: 1 for k in UNARY}, **{k: 2 for k in BINARY}, **{k: 3 for k in TERNARY}, "cast": 1}


def template(op: str, cls: str) -> str:
    """The WGSL expression template of ``op`` for operands of compute class ``cls``."""
    table = UNARY.get(op) or BINARY.get(op) or TERNARY.get(op)
    if table is None:
        raise OpNotSupported(f"no elementwise op named {op!r}")
    found = table.get(cls)
    if found is None:
        raise OpNotSupported(f"elementwise op {op!r} has no WGSL form for compute class {cls!r}")
    return found


_CONVERT = {
    ("f", "i"): "i32({e})",
    ("f", "u"): "f2u({e})",
    ("f", "l"): "i64_from_f32({e})",
    ("f", "L"): "u64_from_f32({e})",
    ("f", "b"): "(!({e} == 0.0))",
    ("i", "f"): "f32({e})",
    ("i", "u"): "bitcast<u32>({e})",
    ("i", "l"): "i64_from_i32({e})",
    ("i", "L"): "i64_from_i32({e})",
    ("i", "b"): "({e} != 0i)",
    ("u", "f"): "f32({e})",
    ("u", "i"): "bitcast<i32>({e})",
    ("u", "l"): "vec2<u32>({e}, 0u)",
    ("u", "L"): "vec2<u32>({e}, 0u)",
    ("u", "b"): "({e} != 0u)",
    ("l", "f"): "i64_to_f32({e})",
    ("L", "f"): "u64_to_f32({e})",
    ("l", "i"): "bitcast<i32>({e}.x)",
    ("L", "i"): "bitcast<i32>({e}.x)",
    ("l", "u"): "{e}.x",
    ("L", "u"): "{e}.x",
    ("l", "L"): "{e}",
    ("L", "l"): "{e}",
    ("l", "b"): "any({e} != vec2<u32>(0u, 0u))",
    ("L", "b"): "any({e} != vec2<u32>(0u, 0u))",
    ("b", "f"): "select(0.0, 1.0, {e})",
    ("b", "i"): "select(0i, 1i, {e})",
    ("b", "u"): "select(0u, 1u, {e})",
    ("b", "l"): "vec2<u32>(select(0u, 1u, {e}), 0u)",
    ("b", "L"): "vec2<u32>(select(0u, 1u, {e}), 0u)",
    # complex -> real keeps the real part (numpy's astype); -> bool: either part non-zero
    ("c", "f"): "{e}.x",
    ("c", "i"): "i32({e}.x)",
    ("c", "u"): "f2u({e}.x)",
    ("c", "l"): "i64_from_f32({e}.x)",
    ("c", "L"): "u64_from_f32({e}.x)",
    ("c", "b"): "(!all({e} == vec2<f32>(0.0, 0.0)))",
    ("f", "c"): "vec2<f32>({e}, 0.0)",
    ("i", "c"): "vec2<f32>(f32({e}), 0.0)",
    ("u", "c"): "vec2<f32>(f32({e}), 0.0)",
    ("l", "c"): "vec2<f32>(i64_to_f32({e}), 0.0)",
    ("L", "c"): "vec2<f32>(u64_to_f32({e}), 0.0)",
    ("b", "c"): "vec2<f32>(select(0.0, 1.0, {e}), 0.0)",
}


def convert(expr: str, src: WType, dst: WType) -> str:
    """``expr`` (a value of ``src``) as a value of ``dst`` (numpy ``astype`` semantics)."""
    if src.cls == dst.cls:
        out = expr
    else:
        out = _CONVERT[src.cls, dst.cls].format(e=expr)
    if dst.cls == "f" and dst.dtype is not src.dtype and dst.name in ("float16", "bfloat16"):
        out = dst.store(out) if dst.storage == "f32" else f"f32({dst.store(out)})"
    return dst.wrap(out) if dst.dtype is not src.dtype else out

"""complex64 / complex128 as OpenCL C ``float2`` / ``double2``: (real, imaginary) interleaved,
exactly numpy's layout, so transfers are plain copies.

OpenCL C has no complex type, so the arithmetic and the standard's transcendental functions
are helper functions over the pair (:func:`library`, emitted once per program that holds a
complex value) and :func:`expression` spells each elementwise op with them. Special values
(infinities, NaNs, signed zeros) follow C99 Annex G as numpy's complex128 does; the plugin
tests compare both over a grid of them.
"""

from __future__ import annotations

import functools
from string import Template

from .cltypes import CType, ctype, literal

__all__ = ["COMPLEX_OPS", "REAL_RESULT", "expression", "library", "cast"]

#: elementwise ops the standard defines for complex operands (what this module spells)
COMPLEX_OPS = frozenset(
    "neg abs sign exp log sqrt sin cos tanh round reciprocal isnan isinf expm1 log2 log10 log1p square tan "
    "asin acos atan sinh cosh asinh acosh atanh isfinite add sub mul div pow eq ne conj real imag angle "
    "copy".split()
)
#: ops whose result is the real dtype of a complex operand
REAL_RESULT = frozenset(["abs", "real", "imag", "angle"])

# T: the real compute type, C: the pair, K: the literal suffix; big/small are per-precision limits
_LIBRARY = Template(r"""
/* -v by its sign bit: -(+0) must be -0, which decides a branch cut's side below (i z for asin) */
inline ${T} ember_flip_${T}(${T} v) { return copysign(v, signbit(v) ? (${T})1 : (${T})-1); }
/* i z and -i z, their zeros signed as the standard's rotations need */
inline ${C} ember_times_i_${T}(${C} z) { return (${C})(ember_flip_${T}(z.y), z.x); }
inline ${C} ember_times_minus_i_${T}(${C} w) { return (${C})(w.y, ember_flip_${T}(w.x)); }
inline ${C} ember_cmul_${T}(${C} a, ${C} b) {
    return (${C})(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}
/* Smith's division: scale by b's larger part, so |b|^2 is never formed (no overflow) */
inline ${C} ember_cdiv_${T}(${C} a, ${C} b) {
    const ${T} bx = fabs(b.x), by = fabs(b.y);
    if (bx >= by) {
        if (bx == 0) return (${C})(a.x / bx, a.y / bx);
        const ${T} r = b.y / b.x, d = b.x + b.y * r;
        return (${C})((a.x + a.y * r) / d, (a.y - a.x * r) / d);
    }
    const ${T} r = b.x / b.y, d = b.y + b.x * r;
    return (${C})((a.x * r + a.y) / d, (a.y * r - a.x) / d);
}
inline ${C} ember_cexp_${T}(${C} z) {
    const ${T} x = z.x, y = z.y;
    if (isinf(x)) {
        if (x < 0) return isfinite(y) ? (${C})((${T})0 * cos(y), (${T})0 * sin(y)) : (${C})((${T})0, (${T})0);
        if (y == 0) return z;
        if (!isfinite(y)) return (${C})(x, (${T})NAN);
        return (${C})(x * cos(y), x * sin(y));
    }
    if (isnan(x)) return y == 0 ? z : (${C})(x, x);
    if (!isfinite(y)) return (${C})((${T})NAN, (${T})NAN);
    if (y == 0) return (${C})(exp(x), y);
    if (x > ${expmax}) {  /* exp(x) overflows before exp(x) cos(y) does: two halves */
        const ${T} h = exp(x * 0.5${K});
        return (${C})(h * cos(y) * h, h * sin(y) * h);
    }
    const ${T} e = exp(x);
    return (${C})(e * cos(y), e * sin(y));
}
/* log|z| through log1p near the unit circle, where log(hypot) would lose the digits */
inline ${T} ember_logabs_${T}(${T} x, ${T} y) {
    const ${T} h = hypot(x, y);
    if (h > 0.7${K} && h < 1.4${K}) return 0.5${K} * log1p((x - 1) * (x + 1) + y * y);
    return log(h);
}
inline ${C} ember_clog_${T}(${C} z) {
    return (${C})(ember_logabs_${T}(z.x, z.y), atan2(z.y, z.x));
}
inline ${C} ember_csqrt_${T}(${C} z) {
    const ${T} x = z.x, y = z.y;
    if (isinf(y)) return (${C})((${T})INFINITY, y);
    if (isnan(x)) return (${C})(x, x);
    if (isinf(x)) {
        if (x > 0) return (${C})(x, isnan(y) ? y : copysign((${T})0, y));
        return (${C})(isnan(y) ? y : (${T})0, copysign((${T})INFINITY, y));
    }
    if (isnan(y)) return (${C})(y, y);
    if (x == 0 && y == 0) return (${C})((${T})0, y);
    const ${T} ax = fabs(x), ay = fabs(y);
    ${T} t;
    if (ax > ${big} || ay > ${big}) {  /* |x| + |z| would overflow: a quarter of each, twice the root */
        t = 2 * sqrt((ax * 0.25${K} + hypot(ax * 0.25${K}, ay * 0.25${K})) * 0.5${K});
    } else {
        t = sqrt((ax + hypot(ax, ay)) * 0.5${K});
    }
    if (x >= 0) return (${C})(t, y / (2 * t));
    return (${C})(ay / (2 * t), copysign(t, y));
}
inline ${C} ember_csinh_${T}(${C} z) {
    const ${T} x = z.x, y = z.y;
    if (isfinite(x) && isfinite(y)) {
        if (y == 0) return (${C})(sinh(x), y);
        if (fabs(x) > ${expmax}) {
            const ${T} h = exp(fabs(x) * 0.5${K});
            return (${C})(copysign(h * 0.5${K}, x) * cos(y) * h, h * 0.5${K} * sin(y) * h);
        }
        return (${C})(sinh(x) * cos(y), cosh(x) * sin(y));
    }
    if (x == 0) return (${C})(x, (${T})NAN);
    if (y == 0) return (${C})(x, y);
    if (isinf(x)) {
        if (!isfinite(y)) return (${C})(fabs(x), (${T})NAN);  /* the sign is unspecified: numpy's + */
        return (${C})(x * cos(y), (${T})INFINITY * sin(y));
    }
    return (${C})((${T})NAN, (${T})NAN);
}
inline ${C} ember_ccosh_${T}(${C} z) {
    const ${T} x = z.x, y = z.y;
    if (isfinite(x) && isfinite(y)) {
        if (y == 0) return (${C})(cosh(x), x * y);
        if (fabs(x) > ${expmax}) {
            const ${T} h = exp(fabs(x) * 0.5${K});
            return (${C})(h * 0.5${K} * cos(y) * h, copysign(h * 0.5${K}, x) * sin(y) * h);
        }
        return (${C})(cosh(x) * cos(y), sinh(x) * sin(y));
    }
    if (x == 0) return (${C})((${T})NAN, (${T})0);
    if (y == 0) return (${C})(fabs(x), isnan(x) ? y : (signbit(x) ? -y : y));
    if (isinf(x)) {
        if (!isfinite(y)) return (${C})((${T})INFINITY, (${T})NAN);
        return (${C})((${T})INFINITY * cos(y), x * sin(y));
    }
    return (${C})((${T})NAN, (${T})NAN);
}
inline ${C} ember_ctanh_${T}(${C} z) {
    const ${T} x = z.x, y = z.y;
    if (isinf(x)) return (${C})(copysign((${T})1, x), copysign((${T})0, y));  /* the standard's +-1 +- 0i */
    if (isnan(x)) return (${C})(x, y == 0 ? y : x);
    if (!isfinite(y)) return (${C})(x == 0 ? x : (${T})NAN, (${T})NAN);
    if (y == 0) return (${C})(tanh(x), y);
    if (fabs(x) > ${tanhbig}) {  /* tanh(x) is +-1 to working precision; the imaginary part decays */
        const ${T} e = exp(-2 * fabs(x));
        return (${C})(copysign((${T})1, x), 4 * sin(y) * cos(y) * e);
    }
    /* Kahan's form: no cancellation, and no overflow of cosh or tan's square within range */
    const ${T} t = tan(y), b = 1 + t * t, s = sinh(x), r = sqrt(1 + s * s), d = 1 + b * s * s;
    return (${C})(b * r * s / d, t / d);
}
inline ${C} ember_casinh_${T}(${C} z) {
    if (isnan(z.x) && z.y == 0) return z;
    const int neg = signbit(z.x);
    const ${C} u = neg ? -z : z;
    ${C} w;
    if (!isfinite(u.x) || !isfinite(u.y) || u.x > ${huge} || fabs(u.y) > ${huge}) {
        w = ember_clog_${T}(u);  /* asinh(z) = log(2z) to working precision */
        w.x += 0.6931471805599453${K};
    } else if (u.x == 0 && fabs(u.y) <= 1) {  /* the imaginary segment: i asin(y), exactly real-free */
        w = (${C})(u.x, asin(u.y));
    } else if (hypot(u.x, u.y) < ${tiny}) {  /* the series: z - z^3/6 + 3z^5/40 */
        const ${C} z2 = ember_cmul_${T}(u, u);
        const ${C} s = (${C})(1, 0) + ember_cmul_${T}(z2, (${C})(-1.0${K} / 6, 0) + z2 * (3.0${K} / 40));
        w = ember_cmul_${T}(u, s);
    } else {
        ${C} q = ember_cmul_${T}(u, u);
        q.x += 1;  /* not + (1, 0): that would turn an imaginary -0 into +0, off the branch cut's side */
        w = ember_clog_${T}(u + ember_csqrt_${T}(q));
    }
    return neg ? -w : w;
}
inline ${C} ember_catanh_${T}(${C} z) {
    const ${T} x = z.x, y = z.y, ax = fabs(x);
    if (isinf(x) || isinf(y)) return (${C})(copysign((${T})0, x), isnan(y) ? y : copysign(${pi2}, y));
    if (isnan(x) || isnan(y)) return (${C})(x == 0 ? x : (${T})NAN, (${T})NAN);
    if (ax > ${huge} || fabs(y) > ${huge}) {
        const ${T} h = hypot(x, y);
        return (${C})((x / h) / h, copysign(${pi2}, y));
    }
    if (hypot(x, y) < ${tiny}) {  /* the series: z + z^3/3 + z^5/5 */
        const ${C} z2 = ember_cmul_${T}(z, z);
        const ${C} s = (${C})(1, 0) + ember_cmul_${T}(z2, (${C})(1.0${K} / 3, 0) + z2 * 0.2${K});
        return ember_cmul_${T}(z, s);
    }
    const ${T} re = 0.25${K} * log1p(4 * ax / ((1 - ax) * (1 - ax) + y * y));
    return (${C})(copysign(re, x), 0.5${K} * atan2(2 * y, (1 - ax) * (1 + ax) - y * y));
}
/* asin(z) = -i asinh(iz), atan(z) = -i atanh(iz), acos(z) = pi/2 - asin(z) */
inline ${C} ember_casin_${T}(${C} z) {
    return ember_times_minus_i_${T}(ember_casinh_${T}(ember_times_i_${T}(z)));
}
inline ${C} ember_catan_${T}(${C} z) {
    return ember_times_minus_i_${T}(ember_catanh_${T}(ember_times_i_${T}(z)));
}
inline ${C} ember_cacos_${T}(${C} z) {
    const ${C} w = ember_casin_${T}(z);
    return (${C})(${pi2} - w.x, -w.y);
}
/* acosh(z) = +-i acos(z), the sign that makes the real part non-negative */
inline ${C} ember_cacosh_${T}(${C} z) {
    const ${C} w = ember_cacos_${T}(z);
    return (${C})(fabs(w.y), copysign(w.x, z.y));
}
inline ${C} ember_csin_${T}(${C} z) {
    const ${C} w = ember_csinh_${T}(ember_times_i_${T}(z));
    /* NaN + i inf: the infinity's sign is unspecified; numpy's is + */
    return (${C})(w.y, isnan(w.y) && isinf(w.x) ? (${T})INFINITY : ember_flip_${T}(w.x));
}
inline ${C} ember_ccos_${T}(${C} z) {
    return ember_ccosh_${T}(ember_times_i_${T}(z));
}
inline ${C} ember_ctan_${T}(${C} z) {
    return ember_times_minus_i_${T}(ember_ctanh_${T}(ember_times_i_${T}(z)));
}
/* expm1: exp(z) - 1 for infinities and NaNs (Annex G through exp), +0 at zero */
inline ${C} ember_cexpm1_${T}(${C} z) {
    const ${C} e = ember_cexp_${T}(z);
    if (!isfinite(z.x) || !isfinite(z.y)) return (${C})(e.x - 1, e.y);
    if (z.x == 0 && z.y == 0) return (${C})((${T})0, z.y);
    const ${T} s = sin(z.y * 0.5${K});
    return (${C})(expm1(z.x) * cos(z.y) - 2 * s * s, e.y);
}
inline ${C} ember_clog1p_${T}(${C} z) {
    if (!isfinite(z.x) || !isfinite(z.y)) return ember_clog_${T}((${C})(z.x + 1, z.y));
    const ${T} h = hypot(z.x + 1, z.y);
    const ${T} re = (h > 0.5${K} && h < 2) ? 0.5${K} * log1p(z.x * (2 + z.x) + z.y * z.y) : log(h);
    return (${C})(re, atan2(z.y, z.x + 1));
}
/* numpy's rules: z**0 = 1, 0**b = 0 where Re(b) > 0 (else NaN), small integer powers by squaring */
inline ${C} ember_cpow_${T}(${C} a, ${C} b) {
    if (b.x == 0 && b.y == 0) return (${C})(1, 0);
    if (a.x == 0 && a.y == 0) return b.x > 0 ? (${C})(0, 0) : (${C})((${T})NAN, (${T})NAN);
    if (b.y == 0 && b.x == trunc(b.x) && fabs(b.x) < 100) {
        int n = (int)fabs(b.x);
        ${C} r = (${C})(1, 0), p = a;
        int first = 1;
        while (n) {
            if (n & 1) { r = first ? p : ember_cmul_${T}(r, p); first = 0; }
            n >>= 1;
            if (n) p = ember_cmul_${T}(p, p);
        }
        return b.x < 0 ? ember_cdiv_${T}((${C})(1, 0), r) : r;
    }
    return ember_cexp_${T}(ember_cmul_${T}(b, ember_clog_${T}(a)));
}
/* sign(z) = z / |z|: 0 at 0, NaN where a part is NaN, the unit direction of an infinite part */
inline ${C} ember_csign_${T}(${C} z) {
    const ${T} x = z.x, y = z.y;
    if (isinf(x) != isinf(y)) {  /* one infinite part is the direction, even beside a NaN */
        return isinf(x) ? (${C})(copysign((${T})1, x), (${T})0) : (${C})((${T})0, copysign((${T})1, y));
    }
    if (!isfinite(x) || !isfinite(y)) return (${C})((${T})NAN, (${T})NAN);
    if (x == 0 && y == 0) return (${C})((${T})0, (${T})0);
    const ${T} h = hypot(x, y);
    return (${C})(x / h, y / h);
}
""")

_LIMITS = {
    # expmax: exp() overflows past it; big: a quarter of it may still be summed; huge: z*z overflows
    # past it; tiny: the power series is exact to working precision below it
    "float": {"expmax": "88.0f", "big": "1e37f", "huge": "1e18f", "tiny": "1e-3f", "tanhbig": "11.0f",
              "pi2": "1.5707963267948966f", "K": "f"},
    "double": {"expmax": "709.0", "big": "1e307", "huge": "1e150", "tiny": "1e-4", "tanhbig": "22.0",
               "pi2": "1.5707963267948966", "K": ""},
}  # fmt: skip


@functools.cache
def library(real: str) -> str:
    """The complex helper functions over ``real`` ("float" or "double") parts."""
    return _LIBRARY.substitute(T=real, C=f"{real}2", **_LIMITS[real])


#: unary ops that are one library call
_CALL = {
    "exp": "cexp", "log": "clog", "sqrt": "csqrt", "sin": "csin", "cos": "ccos", "tan": "ctan",
    "sinh": "csinh", "cosh": "ccosh", "tanh": "ctanh", "asin": "casin", "acos": "cacos", "atan": "catan",
    "asinh": "casinh", "acosh": "cacosh", "atanh": "catanh", "expm1": "cexpm1", "log1p": "clog1p",
    "sign": "csign",
}  # fmt: skip


def _part(c: CType) -> str:
    return c.compute[:-1]  # "float2" -> "float"


def cast(x: str, c: CType, out: CType) -> str:
    """A cast where either side is complex: real -> (x, 0); complex -> real keeps the real
    part (as numpy's ``astype`` does, without its warning); -> bool is "either part non-zero"."""
    if c.kind == "c" and out.kind == "c":
        return x if c.compute == out.compute else f"convert_{out.compute}({x})"
    if out.kind == "c":
        t = _part(out)
        return f"(({out.compute})(({t})({x}), ({t})0))"
    if out.kind == "b":
        return f"((uchar)({x}.x != 0 || {x}.y != 0))"
    return f"(({out.compute})({x}.x))"


def expression(op: str, args: list[tuple[str, CType]], out: CType) -> str:
    """The OpenCL C expression of ``op`` over complex ``args`` (the library spells the rest)."""
    c = args[0][1]
    t = _part(c)
    C = c.compute

    def fn(name: str) -> str:
        return f"ember_{name}_{t}"

    if op not in COMPLEX_OPS:
        raise ValueError(f"{op} is not defined for complex operands ({c.name})")
    if len(args) == 2:
        a, b = args[0][0], args[1][0]
        if op == "add":
            return f"({a} + {b})"
        if op == "sub":
            return f"({a} - {b})"
        if op == "mul":
            return f"{fn('cmul')}({a}, {b})"
        if op == "div":
            return f"{fn('cdiv')}({a}, {b})"
        if op == "pow":
            return f"{fn('cpow')}({a}, {b})"
        if op == "eq":
            return f"((uchar)({a}.x == {b}.x && {a}.y == {b}.y))"
        if op == "ne":
            return f"((uchar)({a}.x != {b}.x || {a}.y != {b}.y))"
        raise ValueError(f"{op} is not a binary op over complex operands")
    x = args[0][0]
    if op in _CALL:
        return f"{fn(_CALL[op])}({x})"
    simple = {
        "copy": x,
        "neg": f"(-{x})",
        "conj": f"(({C})({x}.x, -{x}.y))",
        "real": f"{x}.x",
        "imag": f"{x}.y",
        "abs": f"hypot({x}.x, {x}.y)",
        "angle": f"atan2({x}.y, {x}.x)",
        "round": f"rint({x})",
        "square": f"{fn('cmul')}({x}, {x})",
        "reciprocal": f"{fn('cdiv')}((({C})(1, 0)), {x})",
        "isnan": f"((uchar)(isnan({x}.x) || isnan({x}.y)))",
        "isinf": f"((uchar)(isinf({x}.x) || isinf({x}.y)))",
        "isfinite": f"((uchar)(isfinite({x}.x) && isfinite({x}.y)))",
        "log2": f"({fn('clog')}({x}) * {literal(1.4426950408889634, _real(c))})",
        "log10": f"({fn('clog')}({x}) * {literal(0.4342944819032518, _real(c))})",
    }
    if op in simple:
        return simple[op]
    raise ValueError(f"{op} is not a unary op over complex operands")


def _real(c: CType) -> CType:
    return ctype("float32" if c.name == "complex64" else "float64")

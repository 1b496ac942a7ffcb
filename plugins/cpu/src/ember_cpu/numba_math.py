"""The math the generated numba kernels embed (:mod:`ember_cpu.numba_codegen`): per-dtype helpers
(``HELPERS``, ``T`` standing for the numpy type's name), the float32 exp/erfc library the
float32 loops call (``EXP32``: float32 arithmetic with FMAs, so LLVM vectorises 16 lanes), and a
float64 exp for the backend's hand-written kernels (``EXP64``, :func:`float64_math`). Kept as text
because the generated source is compiled by numba from one string (and cached on disk by it)."""

from __future__ import annotations

import numpy as np

__all__ = ["HELPERS", "EXP32", "EXP64", "USES_EXP32", "VECTOR_F32_OPS", "float64_math"]

# helpers, generated once per dtype a program uses them with; ``T`` is the numpy type's name
HELPERS = {
    "sigmoid": """
@njit(inline="always")
def ember_sigmoid_T(x):
    e = np.exp(-abs(x))
    if x >= 0:
        return T(1) / (T(1) + e)
    return e / (T(1) + e)
""",
    "floordiv_f": """
@njit(inline="always")
def ember_floordiv_T(a, b):
    if b == 0:
        return a / b
    if (math.isinf(a) and not math.isinf(b)) or (math.isinf(b) and not math.isinf(a) and a == a):
        return np.floor(a / b)
    mod = np.fmod(a, b)
    div = (a - mod) / b
    if mod != 0:
        if (b < 0) != (mod < 0):
            div -= T(1)
    if div == 0:
        return np.copysign(T(0), a / b)
    fl = np.floor(div)
    if div - fl > T(0.5):
        fl += T(1)
    return fl
""",
    "remainder_f": """
@njit(inline="always")
def ember_remainder_T(a, b):
    mod = np.fmod(a, b)
    if b == 0:
        return mod
    if mod != 0:
        if (b < 0) != (mod < 0):
            mod += b
    else:
        mod = np.copysign(T(0), b)
    return mod
""",
    "floordiv_i": """
@njit(inline="always")
def ember_floordiv_T(a, b):
    if b == 0:
        return T(0)
    if b == -1:
        return T(0 - a)
    q = T(a // b)
    return q
""",
    "remainder_i": """
@njit(inline="always")
def ember_remainder_T(a, b):
    if b == 0 or b == -1:
        return T(0)
    return T(a % b)
""",
    "pow_i": """
@njit(inline="always")
def ember_pow_T(a, b):
    if b < 0:
        if a == 1:
            return T(1)
        if a == -1:
            return T(-1) if (b & 1) else T(1)
        return T(0)
    r = T(1)
    while b:
        if b & 1:
            r = T(r * a)
        a = T(a * a)
        b = b >> 1
    return r
""",
    # erfc of a float32 value, float32 throughout (ember_erfc32: the fit of Numerical Recipes'
    # erfcc, relative error < 1.2e-7, and an exact x^2): 16 lanes to an AVX-512 vector where the
    # float64 version had 8, Horner steps as FMAs (W6's fused kernel, 2^22 elements, one core:
    # 15.3 ms in float64, 11.7 in float32, 7.2 with the FMAs)
    "erfc_fast": """
@njit(inline="always")
def ember_erfc_fast_T(x):
    r = ember_erfc32(abs(x))
    return r if x >= 0 else E32_TWO - r
""",
    # sigmoid of a float32 value through ember_exp32 (arithmetic and a bit cast: the loop vectorises)
    "sigmoid_f32": """
@njit(inline="always")
def ember_sigmoid_T(x):
    e = ember_exp32(-abs(x), E32_ZERO)
    if x >= 0:
        return E32_ONE / (E32_ONE + e)
    return e / (E32_ONE + e)
""",
    # erf of a float32 value in float32: the Taylor series below 0.5, 1 - erfc above (the fit
    # above, < 1.2e-7 relative to erfc: a few ulps at 0.5, less beyond); the loop vectorises
    "erf_f32": """
@njit(inline="always")
def ember_erf_T(x):
    a = abs(x)
    big = E32_ONE - ember_erfc32(a)
    if a < E32_HALF:
        return np.copysign(ember_erf_small32(a), x)
    return big if x >= 0 else -big
""",
    "logaddexp": """
@njit(inline="always")
def ember_logaddexp_T(x, y):
    if x == y:
        return x + T(0.6931471805599453)
    d = x - y
    if d > 0:
        return x + np.log1p(np.exp(-d))
    if d <= 0:
        return y + np.log1p(np.exp(d))
    return d
""",
}


#: ``ember_exp64``, a float64 exp from arithmetic and a bit cast (relative error < 1e-14), for the
#: backend's hand-written numba kernels (attention's float64 softmax rows, :func:`float64_math`);
#: the generated float32 loops use ``ember_exp32`` below
EXP64 = """
@intrinsic
def ember_f64_from_bits(typingctx, bits):
    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@njit(inline="always")
def ember_exp64(x):
    if x != x:
        return x
    xc = min(max(x, -708.0), 709.0)
    k = np.floor(xc * 1.4426950408889634 + 0.5)
    r = xc - k * 0.6931471803691238 - k * 1.9082149292705877e-10
    p = 2.505210838544172e-08
    p = 2.755731922398589e-07 + r * p
    p = 2.7557319223985893e-06 + r * p
    p = 2.48015873015873e-05 + r * p
    p = 1.984126984126984e-04 + r * p
    p = 1.388888888888889e-03 + r * p
    p = 8.333333333333333e-03 + r * p
    p = 4.1666666666666664e-02 + r * p
    p = 1.6666666666666666e-01 + r * p
    p = 0.5 + r * p
    p = 1.0 + r * p
    p = 1.0 + r * p
    v = p * ember_f64_from_bits(np.int64(k + 1023.0) << 52)
    if x > 709.0:
        v = np.inf
    if x < -745.0:  # below the smallest subnormal's log (-inf included): 0, not the clamp's exp(-708)
        v = 0.0
    return v
"""

#: module-level code the float32 helpers call (``ember_exp32``, ``ember_erfc32``): float32
#: arithmetic and bit casts only, so LLVM vectorises the loop 16 lanes to an AVX-512 vector
EXP32 = """
@intrinsic
def ember_pow2_32(typingctx, k):
    # 2^k of an integral float32 k in [-126, 127]: the exponent field's bits (float32 lanes only)
    def codegen(context, builder, sig, args):
        i = builder.add(builder.fptosi(args[0], ir.IntType(32)), ir.Constant(ir.IntType(32), 127))
        return builder.bitcast(builder.shl(i, ir.Constant(ir.IntType(32), 23)), ir.FloatType())

    return types.float32(types.float32), codegen


@intrinsic
def ember_fma32(typingctx, a, b, c):
    # a * b + c rounded once (llvm.fma: one vfmadd a lane): the polynomials' Horner steps
    def codegen(context, builder, sig, args):
        f32 = ir.FloatType()
        f = builder.module.declare_intrinsic("llvm.fma", [f32], ir.FunctionType(f32, [f32, f32, f32]))
        return builder.call(f, args)

    return types.float32(types.float32, types.float32, types.float32), codegen


E32_ZERO = np.float32(0.0)
E32_HALF = np.float32(0.5)
E32_ONE = np.float32(1.0)
E32_TWO = np.float32(2.0)
E32_INF = np.float32(np.inf)
E32_LO = np.float32(-104.0)
E32_HI = np.float32(88.75)
E32_LOG2E = np.float32(1.4426950408889634)
E32_LN2_HI = np.float32(0.693359375)
E32_LN2_LO = np.float32(-2.12194440e-4)
E32_P0 = np.float32(1.9875691500e-4)
E32_P1 = np.float32(1.3981999507e-3)
E32_P2 = np.float32(8.3334519073e-3)
E32_P3 = np.float32(4.1665795894e-2)
E32_P4 = np.float32(1.6666665459e-1)
E32_P5 = np.float32(5.0000001201e-1)
E32_ERFC_BIG = np.float32(10.5)
E32_128 = np.float32(128.0)
E32_1_128 = np.float32(0.0078125)
E32_C0 = np.float32(-1.26551223)
E32_C1 = np.float32(1.00002368)
E32_C2 = np.float32(0.37409196)
E32_C3 = np.float32(0.09678418)
E32_C4 = np.float32(-0.18628806)
E32_C5 = np.float32(0.27886807)
E32_C6 = np.float32(-1.13520398)
E32_C7 = np.float32(1.48851587)
E32_C8 = np.float32(-0.82215223)
E32_C9 = np.float32(0.17087277)
E32_ERF1 = np.float32(1.1283791670955126)
E32_ERF2 = np.float32(-0.37612638903183754)
E32_ERF3 = np.float32(0.11283791670955126)
E32_ERF4 = np.float32(-0.026866170645131252)
E32_ERF5 = np.float32(0.005223977625442188)
E32_ERF6 = np.float32(-0.0008548327023450852)
E32_ERF7 = np.float32(0.00012055332981789664)


@njit(inline="always")
def ember_exp32(hi, lo):
    # exp(hi + lo) of float32 hi, lo (hi - k ln2 exact when hi is, as -m^2 below): Cephes' expf
    # reduction and polynomial (~1 ulp), 2^k as two normal factors so subnormal results round once
    s = hi + lo
    k = np.floor(min(max(s, E32_LO), E32_HI) * E32_LOG2E + E32_HALF)
    r = ((hi - k * E32_LN2_HI) + lo) - k * E32_LN2_LO
    p = ember_fma32(r, E32_P0, E32_P1)
    p = ember_fma32(r, p, E32_P2)
    p = ember_fma32(r, p, E32_P3)
    p = ember_fma32(r, p, E32_P4)
    p = ember_fma32(r, p, E32_P5)
    p = ember_fma32(p, r * r, r) + E32_ONE
    k1 = np.floor(k * E32_HALF)
    v = p * ember_pow2_32(k1) * ember_pow2_32(k - k1)
    if s > E32_HI:
        v = E32_INF
    if s < E32_LO:
        v = E32_ZERO
    if s != s:
        v = s
    return v


@njit(inline="always")
def ember_erf_small32(a):
    # erf of 0 <= a < 0.5: its Taylor series to a^13 (relative error < 1e-9 before rounding)
    q = a * a
    s = ember_fma32(q, E32_ERF7, E32_ERF6)
    s = ember_fma32(q, s, E32_ERF5)
    s = ember_fma32(q, s, E32_ERF4)
    s = ember_fma32(q, s, E32_ERF3)
    s = ember_fma32(q, s, E32_ERF2)
    s = ember_fma32(q, s, E32_ERF1)
    return a * s


@njit(inline="always")
def ember_erfc32(a):
    # erfc of a >= 0 (or NaN) in float32: 1 - erf below 0.5 (the fit's float32 rounding, ~5 ulps
    # near 0, where 1.27 cancels), above it Numerical Recipes' erfcc fit (relative error < 1.2e-7),
    # exp(-a^2 + c) with a = m + f, m a multiple of 1/128: -m^2 exact, the rest small
    small = E32_ONE - ember_erf_small32(a)
    a = min(a, E32_ERFC_BIG)  # erfc(10.5) rounds to 0
    t = E32_ONE / (E32_ONE + E32_HALF * a)
    p = ember_fma32(t, E32_C9, E32_C8)
    p = ember_fma32(t, p, E32_C7)
    p = ember_fma32(t, p, E32_C6)
    p = ember_fma32(t, p, E32_C5)
    p = ember_fma32(t, p, E32_C4)
    p = ember_fma32(t, p, E32_C3)
    p = ember_fma32(t, p, E32_C2)
    p = ember_fma32(t, p, E32_C1)
    m = np.floor(a * E32_128) * E32_1_128
    f = a - m
    lo = ember_fma32(t, p, ember_fma32(-(m + m + f), f, E32_C0))
    big = t * ember_exp32(-(m * m), lo)
    return small if a < E32_HALF else big
"""


def float64_math() -> dict[str, object]:
    """``ember_exp64`` compiled (float64-grade, vectorisable) for the backend's hand-written numba
    kernels (attention's softmax rows)."""
    from llvmlite import ir  # noqa: PLC0415 - numba's, imported only where numba is
    from numba import njit, types  # noqa: PLC0415
    from numba.extending import intrinsic  # noqa: PLC0415

    names: dict[str, object] = {"np": np, "njit": njit, "intrinsic": intrinsic, "ir": ir, "types": types}
    exec(compile(EXP64, "<ember_cpu.numba_math float64 math>", "exec"), names)  # ember's own text
    return names


#: helpers that call ember_exp32 (or ember_erfc32)
USES_EXP32 = frozenset({"erfc_fast", "sigmoid_f32", "erf_f32"})

#: float32 ops the generator computes with float32 arithmetic and ember_exp32 alone (vectorised loops):
#: not libm-bound in float32 programs (see :func:`libm_bound`)
VECTOR_F32_OPS = frozenset({"exp", "erf", "sigmoid", "silu", "gelu", "gelu_tanh"})

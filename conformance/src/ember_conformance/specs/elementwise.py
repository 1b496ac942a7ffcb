"""Elementwise ops: unary, binary, ternary (where, clip), and the activations.

One row per op: ember callable, numpy float64 reference, accepted dtypes, input domain,
whether gradients are checked. The cases every row of a family runs are listed once.
"""

from __future__ import annotations

import math

import numpy as np

import ember as em

from ..inputs import Arg, Case, Domain
from .base import (
    ALL,
    BOOL,
    FLOAT,
    INT,
    INT_OR_BOOL,
    NUMERIC,
    OpSpec,
    const,
    x,
)

__all__ = ["UNARY", "BINARY", "TERNARY", "UNARY_CASES", "BINARY_CASES"]

UNARY_CASES = (
    Case("contig", (x((3, 4, 5)),), grad=True),
    Case("0d", (x(()),)),
    Case("empty", (x((0, 3)),)),
    Case("noncontig", (x((4, 5), "noncontig"),)),
    Case("strided", (x((3, 4), "strided"),)),
    Case("flipped", (x((3, 4), "flipped"),)),
    Case("large", (x((67, 1031)),)),
    Case("special", (x((4, 8)),), special=True),
)

BINARY_CASES = (
    Case("same", (x((3, 4)), x((3, 4))), grad=True),
    Case("broadcast", (x((4, 1, 3)), x((5, 3))), grad=True),
    Case("scalar_rhs", (x((3, 4)), Arg(kind="scalar"))),
    Case("scalar_lhs", (Arg(kind="scalar"), x((3, 4)))),
    Case("0d", (x(()), x(()))),
    Case("0d_bcast", (x((3, 4)), x(()))),
    Case("empty", (x((0, 3)), x((1, 3)))),
    Case("noncontig", (x((3, 4), "noncontig"), x((3, 4), "strided"))),
    Case("flipped", (x((3, 4), "flipped"), x((4,), "flipped"))),
    Case("large", (x((67, 1031)), x((1031,)))),
    Case("special", (x((4, 8)), x((4, 8))), special=True),
    Case("special_pairs", (Arg(kind="special_grid", lo=0), Arg(kind="special_grid", lo=1)), special=True),
)

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_erf = np.vectorize(math.erf, otypes=[np.float64])

# domains
POS = Domain(0.1, 10.0)
UNIT = Domain(-0.95, 0.95)
AWAY0 = Domain(0.2, 4.0, signed=True)
SMALL_INT = Domain(ilo=-10, ihi=10)
HALVES = Domain(-4.0, 4.0, step=0.5)
STEP_INT = Domain(-5.0, 5.0, avoid_int=True)
TIES = Domain(-2.0, 2.0, step=0.5, ilo=-3, ihi=3)
BITS = Domain(full_int=True)
NONZERO = Domain(0.5, 3.0, signed=True, ilo=1, ihi=5)


def _gelu(a: np.ndarray) -> np.ndarray:
    return 0.5 * a * (1.0 + _erf(a * _SQRT_HALF))


def _gelu_tanh(a: np.ndarray) -> np.ndarray:
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * a * (1.0 + np.tanh(c * (a + 0.044715 * a**3)))


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -a))


def _softplus(a: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, a)


def _relu(a: np.ndarray) -> np.ndarray:
    return np.maximum(a, np.zeros((), a.dtype))


def _unary(name: str, fn, ref, dtypes=FLOAT, domain=Domain(), *, grad=True, ops=None, out=None, tol=1.0, cases=()):
    return OpSpec(
        name,
        fn,
        ref,
        dtypes,
        UNARY_CASES + tuple(cases),
        ops=ops,
        domain=domain,
        out_dtype=out or (lambda d: d),
        grad=grad,
        tol=tol,
        reject=True,
    )


_BOOL_OUT = const("bool")

UNARY: tuple[OpSpec, ...] = (
    _unary("negative", em.negative, np.negative, NUMERIC, SMALL_INT, ops=("neg",)),
    _unary("positive", em.positive, np.positive, NUMERIC, SMALL_INT, grad=False, ops=()),
    _unary("abs", em.abs, np.abs, NUMERIC, AWAY0),
    _unary("sign", em.sign, np.sign, NUMERIC, AWAY0),
    _unary("exp", em.exp, np.exp, domain=Domain(-5.0, 5.0)),
    _unary("exp2", em.exp2, np.exp2, domain=Domain(-5.0, 5.0)),
    _unary("expm1", em.expm1, np.expm1, domain=Domain(-3.0, 3.0)),
    _unary("log", em.log, np.log, domain=POS),
    _unary("log2", em.log2, np.log2, domain=POS),
    _unary("log10", em.log10, np.log10, domain=POS),
    _unary("log1p", em.log1p, np.log1p, domain=Domain(-0.9, 5.0)),
    _unary("sqrt", em.sqrt, np.sqrt, domain=POS),
    _unary("rsqrt", em.rsqrt, lambda a: 1.0 / np.sqrt(a), domain=POS),
    _unary("square", em.square, np.square, NUMERIC, SMALL_INT),
    _unary("reciprocal", em.reciprocal, np.reciprocal, domain=AWAY0),
    _unary("sin", em.sin, np.sin, domain=Domain(-5.0, 5.0)),
    _unary("cos", em.cos, np.cos, domain=Domain(-5.0, 5.0)),
    _unary("tan", em.tan, np.tan, domain=Domain(-1.3, 1.3)),
    _unary("asin", em.asin, np.arcsin, domain=UNIT),
    _unary("acos", em.acos, np.arccos, domain=UNIT),
    _unary("atan", em.atan, np.arctan, domain=Domain(-5.0, 5.0)),
    _unary("sinh", em.sinh, np.sinh, domain=Domain(-4.0, 4.0)),
    _unary("cosh", em.cosh, np.cosh, domain=Domain(-4.0, 4.0)),
    _unary("tanh", em.tanh, np.tanh, domain=Domain(-4.0, 4.0)),
    _unary("asinh", em.asinh, np.arcsinh, domain=Domain(-5.0, 5.0)),
    _unary("acosh", em.acosh, np.arccosh, domain=Domain(1.05, 5.0)),
    _unary("atanh", em.atanh, np.arctanh, domain=Domain(-0.9, 0.9)),
    _unary("erf", em.erf, _erf, domain=Domain(-3.0, 3.0)),
    _unary("floor", em.floor, np.floor, NUMERIC, STEP_INT),
    _unary("ceil", em.ceil, np.ceil, NUMERIC, STEP_INT),
    _unary("trunc", em.trunc, np.trunc, NUMERIC, STEP_INT),
    _unary(
        "round",
        em.round,
        np.round,
        NUMERIC,
        STEP_INT,
        cases=(Case("halves", (x((4, 8), domain=HALVES),)),),
    ),
    _unary("isnan", em.isnan, np.isnan, NUMERIC, grad=False, out=_BOOL_OUT),
    _unary("isinf", em.isinf, np.isinf, NUMERIC, grad=False, out=_BOOL_OUT),
    _unary("isfinite", em.isfinite, np.isfinite, NUMERIC, grad=False, out=_BOOL_OUT),
    _unary("logical_not", em.logical_not, np.logical_not, BOOL, grad=False, out=_BOOL_OUT),
    _unary("signbit", em.signbit, np.signbit, FLOAT, AWAY0, grad=False, out=_BOOL_OUT),
    # on real tensors (test_array_api checks complex ones where the device holds them)
    _unary("conj", em.conj, np.conj, NUMERIC, SMALL_INT),
    _unary("real", em.real, np.real, NUMERIC, SMALL_INT),
    _unary("imag", em.imag, np.imag, NUMERIC, SMALL_INT),
    _unary("angle", em.angle, np.angle, FLOAT, AWAY0),  # 0 or pi on real tensors: its gradient is 0
    _unary("bitwise_invert", em.bitwise_invert, np.invert, INT_OR_BOOL, BITS, grad=False, ops=("bitwise_not",)),
    # activations (elementwise composites with native fast paths)
    _unary("relu", em.relu, _relu, NUMERIC, AWAY0),
    _unary("sigmoid", em.sigmoid, _sigmoid, domain=Domain(-8.0, 8.0)),
    _unary("gelu", em.gelu, _gelu, domain=Domain(-4.0, 4.0)),
    _unary("gelu_tanh", lambda a: em.gelu(a, approximate="tanh"), _gelu_tanh, domain=Domain(-4.0, 4.0)),
    _unary("silu", em.silu, lambda a: a * _sigmoid(a), domain=Domain(-6.0, 6.0)),
    _unary("softplus", em.softplus, _softplus, domain=Domain(-8.0, 8.0)),
    _unary("softplus_beta2", lambda a: em.softplus(a, beta=2.0), lambda a: _softplus(2.0 * a) / 2.0, ops=("softplus",)),
    _unary("leaky_relu", em.leaky_relu, lambda a: np.where(a > 0, a, 0.01 * a), domain=AWAY0, ops=()),
    _unary("elu", em.elu, lambda a: np.where(a > 0, a, np.expm1(a)), domain=AWAY0, ops=()),
    _unary("mish", em.mish, lambda a: a * np.tanh(_softplus(a)), domain=Domain(-5.0, 5.0), ops=()),
    _unary("hardtanh", em.hardtanh, lambda a: np.clip(a, -1.0, 1.0), domain=Domain(-3.0, 3.0), ops=()),
    _unary(
        "clip_scalars",
        lambda a: em.clip(a, 1, 5),
        lambda a: np.clip(a, 1, 5),
        NUMERIC,
        Domain(-2.0, 8.0, ilo=-2, ihi=8),
        ops=(),
    ),
)


def _binary(
    name: str, fn, ref, dtypes=NUMERIC, domain=Domain(), *, grad=True, ops=None, out=None, tol=1.0, special=True
):
    return OpSpec(
        name,
        fn,
        ref,
        dtypes,
        BINARY_CASES if special else tuple(c for c in BINARY_CASES if not c.special),
        ops=ops,
        domain=domain,
        out_dtype=out or (lambda d: d),
        grad=grad,
        tol=tol,
        reject=True,
    )


BINARY: tuple[OpSpec, ...] = (
    _binary("add", em.add, np.add, domain=SMALL_INT),
    _binary("subtract", em.subtract, np.subtract, domain=SMALL_INT, ops=("sub",)),
    _binary("multiply", em.multiply, np.multiply, domain=SMALL_INT, ops=("mul",)),
    _binary("divide", em.divide, np.divide, FLOAT, (Domain(), AWAY0), ops=("div",)),
    # NaN/inf: numpy's floor_divide and remainder special cases differ from the Array API's; not checked
    _binary(
        "floor_divide",
        em.floor_divide,
        np.floor_divide,
        domain=(Domain(-10.0, 10.0), NONZERO),
        ops=("floordiv",),
        special=False,
    ),
    _binary("remainder", em.remainder, np.remainder, domain=(Domain(-10.0, 10.0), NONZERO), special=False),
    _binary("pow", em.pow, np.power, domain=(Domain(0.5, 2.5, ilo=-3, ihi=3), Domain(-2.0, 2.0, ilo=0, ihi=3))),
    _binary("maximum", em.maximum, np.maximum),
    _binary("minimum", em.minimum, np.minimum),
    _binary("atan2", em.atan2, np.arctan2, FLOAT, AWAY0),
    _binary("hypot", em.hypot, np.hypot, FLOAT),
    _binary("logaddexp", em.logaddexp, np.logaddexp, FLOAT, Domain(-5.0, 5.0)),
    _binary("copysign", em.copysign, np.copysign, FLOAT, AWAY0),
    # one step is within any tolerance: test_array_api::test_nextafter_exact checks the bits
    _binary("nextafter", em.nextafter, np.nextafter, FLOAT, grad=False),
    _binary("equal", em.equal, np.equal, ALL, TIES, grad=False, ops=("eq",), out=_BOOL_OUT),
    _binary("not_equal", em.not_equal, np.not_equal, ALL, TIES, grad=False, ops=("ne",), out=_BOOL_OUT),
    _binary("less", em.less, np.less, NUMERIC, TIES, grad=False, ops=("lt",), out=_BOOL_OUT),
    _binary("less_equal", em.less_equal, np.less_equal, NUMERIC, TIES, grad=False, ops=("le",), out=_BOOL_OUT),
    _binary("greater", em.greater, np.greater, NUMERIC, TIES, grad=False, ops=("gt",), out=_BOOL_OUT),
    _binary("greater_equal", em.greater_equal, np.greater_equal, NUMERIC, TIES, grad=False, ops=("ge",), out=_BOOL_OUT),
    _binary("logical_and", em.logical_and, np.logical_and, BOOL, grad=False, out=_BOOL_OUT),
    _binary("logical_or", em.logical_or, np.logical_or, BOOL, grad=False, out=_BOOL_OUT),
    _binary("logical_xor", em.logical_xor, np.logical_xor, BOOL, grad=False, out=_BOOL_OUT),
    _binary("bitwise_and", em.bitwise_and, np.bitwise_and, INT_OR_BOOL, BITS, grad=False),
    _binary("bitwise_or", em.bitwise_or, np.bitwise_or, INT_OR_BOOL, BITS, grad=False),
    _binary("bitwise_xor", em.bitwise_xor, np.bitwise_xor, INT_OR_BOOL, BITS, grad=False),
    _binary(
        "bitwise_left_shift",
        em.bitwise_left_shift,
        np.left_shift,
        INT,
        (Domain(ilo=-20, ihi=20), Domain(shift=True)),
        grad=False,
    ),
    _binary(
        "bitwise_right_shift",
        em.bitwise_right_shift,
        np.right_shift,
        INT,
        (Domain(ilo=-100, ihi=100), Domain(shift=True)),
        grad=False,
    ),
)

_WHERE_CASES = (
    Case("same", (Arg((3, 4), "mask"), x((3, 4)), x((3, 4))), grad=True),
    Case("broadcast", (Arg((3, 1), "mask"), x((1, 4)), x((2, 3, 4))), grad=True),
    Case("scalar_b", (Arg((3, 4), "mask"), x((3, 4)), Arg(kind="scalar"))),
    Case("scalar_a", (Arg((3, 4), "mask"), Arg(kind="scalar"), x((3, 4)))),
    Case("0d", (Arg((), "mask"), x(()), x(()))),
    Case("empty", (Arg((0, 4), "mask"), x((0, 4)), x((1, 4)))),
    Case("noncontig", (Arg((3, 4), "mask"), x((3, 4), "noncontig"), x((3, 4), "flipped"))),
    Case("large", (Arg((67, 1031), "mask"), x((67, 1031)), x((1031,)))),
    Case("special", (Arg((4, 8), "mask"), x((4, 8)), x((4, 8))), special=True),
)

_CLIP_CASES = (
    Case(
        "same",
        (
            x((3, 4)),
            x((3, 4), domain=Domain(-3.0, -1.0, ilo=0, ihi=2)),
            x((3, 4), domain=Domain(1.0, 3.0, ilo=5, ihi=8)),
        ),
        grad=True,
    ),
    Case(
        "broadcast",
        (
            x((2, 3, 4)),
            x((4,), domain=Domain(-3.0, -1.0, ilo=0, ihi=2)),
            x((3, 1), domain=Domain(1.0, 3.0, ilo=5, ihi=8)),
        ),
    ),
    Case(
        "noncontig",
        (
            x((3, 4), "noncontig"),
            x((3, 4), "strided", Domain(-3.0, -1.0, ilo=0, ihi=2)),
            x((3, 4), "flipped", Domain(1.0, 3.0, ilo=5, ihi=8)),
        ),
    ),
)

TERNARY: tuple[OpSpec, ...] = (
    OpSpec("where", em.where, np.where, ALL, _WHERE_CASES, grad=True),
    OpSpec(
        "clip",
        em.clip,
        np.clip,
        NUMERIC,
        _CLIP_CASES,
        ops=("maximum", "minimum"),
        domain=Domain(-4.0, 4.0, ilo=-2, ihi=10),
        grad=True,
    ),
)

"""Reductions and scans over axes (with keepdims), and the norms."""

from __future__ import annotations

import numpy as np

import ember as em

from ..inputs import Case, Domain
from .base import ALL, FLOAT, NUMERIC, NUMERIC_OR_BOOL, OpSpec, const, x

__all__ = ["REDUCTIONS", "SCANS", "REDUCE_CASES"]


def _acc(dtype):
    """Array API accumulator for sum/prod: (u)int64 for integers and booleans."""
    if dtype.kind in "bi":
        return em.int64
    if dtype.kind == "u":
        return em.uint64
    return dtype


REDUCE_CASES = (
    Case("all", (x((3, 4, 5)),), {"axis": None}, grad=True),
    Case("axis0", (x((3, 4, 5)),), {"axis": 0}),
    Case("axis-1_keepdims", (x((3, 4, 5)),), {"axis": -1, "keepdims": True}, grad=True),
    Case("axes02", (x((3, 4, 5)),), {"axis": (0, 2)}),
    Case("0d", (x(()),), {"axis": None}),
    Case("noncontig", (x((4, 6), "noncontig"),), {"axis": 0}),
    Case("strided", (x((3, 4), "strided"),), {"axis": 1, "keepdims": True}),
    Case("large", (x((67, 1031)),), {"axis": -1}),
    Case("special", (x((4, 8)),), {"axis": 1}, special=True),
)

#: an empty axis: sum/prod/any/all give their identity; max/min/argmax raise (tested in test_errors)
EMPTY_CASES = (
    Case("empty_axis", (x((0, 4)),), {"axis": 0}),
    Case("empty_all", (x((2, 0)),), {"axis": None}),
)

_ARG_CASES = (
    Case("flat", (x((3, 4, 5)),), {"axis": None}),
    Case("axis1", (x((3, 4, 5)),), {"axis": 1}),
    Case("axis-1_keepdims", (x((3, 4, 5)),), {"axis": -1, "keepdims": True}),
    Case("flat_keepdims", (x((3, 4)),), {"axis": None, "keepdims": True}),
    Case("0d", (x(()),), {"axis": None}),
    Case("noncontig", (x((4, 6), "noncontig"),), {"axis": 0}),
    Case("flipped", (x((3, 4), "flipped"),), {"axis": 1}),
    Case("large", (x((67, 1031)),), {"axis": 1}),
)

_VAR_CASES = tuple(
    Case(f"{c.name}_c{k}", c.args, {**c.kwargs, "correction": k}, special=c.special, grad=c.grad)
    for c in REDUCE_CASES
    if c.name not in ("0d",)
    for k in (0, 1)
)

# references
_POSITIVE = Domain(0.5, 1.5, ilo=0, ihi=3)
_NEAR_ONE = Domain(0.97, 1.03, ilo=-2, ihi=2)
_SPARSE = Domain(-2.0, 2.0, ilo=-2, ihi=2, zeros=0.4)
_TIES = Domain(-2.0, 2.0, step=0.5, ilo=-3, ihi=3)


def _np_logsumexp(a, axis=None, keepdims=False):
    m = np.max(a, axis=axis, keepdims=True) if a.size else np.zeros((1,) * a.ndim)
    m = np.where(np.isfinite(m), m, 0.0)
    out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


def _np_arg(fn):
    def ref(a, axis=None, keepdims=False):
        if axis is None:
            out = np.asarray(fn(a.reshape(-1)))
            return out.reshape((1,) * a.ndim) if keepdims else out
        return fn(a, axis=axis, keepdims=keepdims)

    return ref


def _np_norm(ord_):
    def ref(a, axis=None, keepdims=False):
        ax = tuple(range(a.ndim)) if axis is None else axis
        if ord_ == 0:
            return np.sum(a != 0, axis=ax, keepdims=keepdims).astype(np.float64)
        if ord_ == np.inf:
            return np.max(np.abs(a), axis=ax, keepdims=keepdims)
        if ord_ == -np.inf:
            return np.min(np.abs(a), axis=ax, keepdims=keepdims)
        return np.sum(np.abs(a) ** ord_, axis=ax, keepdims=keepdims) ** (1.0 / ord_)

    return ref


def _norm(ord_, name, ops, grad=True):
    return OpSpec(
        name,
        lambda a, axis=None, keepdims=False: em.vector_norm(a, axis=axis, keepdims=keepdims, ord=ord_),
        _np_norm(ord_),
        FLOAT,
        REDUCE_CASES,
        ops=ops,
        domain=Domain(0.2, 3.0, signed=True),
        grad=grad,
        tol=2.0,
    )


REDUCTIONS: tuple[OpSpec, ...] = (
    OpSpec(
        "sum",
        em.sum,
        np.sum,
        NUMERIC_OR_BOOL,
        REDUCE_CASES + EMPTY_CASES,
        domain=_POSITIVE,
        out_dtype=_acc,
        grad=True,
        tol=2.0,
    ),
    OpSpec(
        "prod",
        em.prod,
        np.prod,
        NUMERIC_OR_BOOL,
        REDUCE_CASES + EMPTY_CASES,
        domain=_NEAR_ONE,
        out_dtype=_acc,
        grad=True,
        tol=2.0,
    ),
    OpSpec("max", em.max, np.max, NUMERIC, REDUCE_CASES, grad=True),
    OpSpec("min", em.min, np.min, NUMERIC, REDUCE_CASES, grad=True),
    OpSpec("argmax", em.argmax, _np_arg(np.argmax), NUMERIC, _ARG_CASES, domain=_TIES, out_dtype=const("int64")),
    OpSpec("argmin", em.argmin, _np_arg(np.argmin), NUMERIC, _ARG_CASES, domain=_TIES, out_dtype=const("int64")),
    OpSpec("any", em.any, np.any, ALL, REDUCE_CASES + EMPTY_CASES, domain=_SPARSE, out_dtype=const("bool")),
    OpSpec(
        "all",
        em.all,
        np.all,
        ALL,
        REDUCE_CASES + EMPTY_CASES,
        domain=Domain(-2.0, 2.0, ilo=-2, ihi=2, zeros=0.05),
        out_dtype=const("bool"),
    ),
    OpSpec(
        "count_nonzero",
        em.count_nonzero,
        lambda a, axis=None, keepdims=False: np.count_nonzero(a, axis=axis, keepdims=keepdims),
        ALL,
        REDUCE_CASES + EMPTY_CASES,
        ops=(),
        domain=_SPARSE,
        out_dtype=const("int64"),
    ),
    OpSpec("mean", em.mean, np.mean, FLOAT, REDUCE_CASES + EMPTY_CASES[:1], grad=True, tol=2.0),
    OpSpec(
        "var",
        em.var,
        lambda a, axis=None, keepdims=False, correction=0: np.var(a, axis=axis, keepdims=keepdims, ddof=correction),
        FLOAT,
        _VAR_CASES,
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "std",
        em.std,
        lambda a, axis=None, keepdims=False, correction=0: np.std(a, axis=axis, keepdims=keepdims, ddof=correction),
        FLOAT,
        _VAR_CASES,
        ops=("var", "sqrt"),
        grad=True,
        tol=4.0,
    ),
    OpSpec("logsumexp", em.logsumexp, _np_logsumexp, FLOAT, REDUCE_CASES, grad=True, tol=2.0),
    _norm(2, "vector_norm", ("l2_norm",)),
    _norm(1, "vector_norm_ord1", ("abs", "sum")),
    _norm(np.inf, "vector_norm_inf", ("abs", "max")),
    _norm(-np.inf, "vector_norm_-inf", ("abs", "min")),
    _norm(0, "vector_norm_ord0", ("ne",), grad=False),
    _norm(3, "vector_norm_ord3", ("pow",)),
)

_SCAN_CASES = (
    Case("axis0", (x((3, 4, 5)),), {"axis": 0}, grad=True),
    Case("axis-1", (x((3, 4, 5)),), {"axis": -1}, grad=True),
    Case("flat", (x((3, 4)),), {"axis": None}),
    Case("1d", (x((7,)),), {"axis": 0}),
    Case("empty", (x((0, 3)),), {"axis": 0}),
    Case("noncontig", (x((4, 6), "noncontig"),), {"axis": 1}),
    Case("flipped", (x((3, 4), "flipped"),), {"axis": 0}),
    Case("large", (x((67, 1031)),), {"axis": 1}),
    Case("special", (x((4, 8)),), {"axis": 1}, special=True),
)


def _np_scan(fn, identity):
    def ref(a, axis=None, include_initial=False):
        a, axis = (a.reshape(-1), 0) if axis is None else (a, axis)
        out = fn(a, axis=axis)
        if include_initial:
            pads = [(1, 0) if i == axis % a.ndim else (0, 0) for i in range(a.ndim)]
            out = np.pad(out, pads, constant_values=identity)
        return out

    return ref


_np_cumsum = _np_scan(np.cumsum, 0)
_np_cumprod = _np_scan(np.cumprod, 1)

_INITIAL_CASES = (
    Case("initial", (x((3, 4)),), {"axis": 1, "include_initial": True}, grad=True),
    Case("initial_empty", (x((0, 3)),), {"axis": 0, "include_initial": True}),
)

_DIFF_CASES = (
    Case("last", (x((3, 6)),), grad=True),
    Case("axis0_n2", (x((5, 3)),), {"axis": 0, "n": 2}, grad=True),
    Case("n0", (x((4,)),), {"n": 0}),
    Case("past_length", (x((2, 3)),), {"n": 4}),
    Case("prepend_append", (x((3, 4)), x((3, 1)), x((3, 2))), grad=True),
    Case("noncontig", (x((4, 6), "noncontig"),), {"axis": 0}),
    Case("special", (x((4, 8)),), special=True),
)


def _np_diff(a, prepend=None, append=None, axis=-1, n=1):
    kw = {k: v for k, v in (("prepend", prepend), ("append", append)) if v is not None}
    return np.diff(a, n=n, axis=axis, **kw)


SCANS: tuple[OpSpec, ...] = (
    OpSpec(
        "cumulative_sum",
        em.cumulative_sum,
        _np_cumsum,
        NUMERIC_OR_BOOL,
        _SCAN_CASES,
        ops=("cumsum",),
        domain=_POSITIVE,
        out_dtype=_acc,
        grad=True,
        tol=2.0,
    ),
    OpSpec(
        "cumulative_prod",
        em.cumulative_prod,
        _np_cumprod,
        NUMERIC,
        _SCAN_CASES + _INITIAL_CASES,
        domain=Domain(0.8, 1.2, signed=True, ilo=-2, ihi=2),
        out_dtype=_acc,
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "diff",
        lambda a, prepend=None, append=None, **kw: em.diff(a, prepend=prepend, append=append, **kw),
        _np_diff,
        NUMERIC_OR_BOOL,
        _DIFF_CASES,
        domain=Domain(ilo=-50, ihi=50),
        grad=True,
    ),
)

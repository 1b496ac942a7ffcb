"""matmul and the contractions built on it, diagonals, sorting and top-k."""

from __future__ import annotations

import numpy as np

import ember as em

from ..inputs import Case, Domain
from .base import ALL, NUMERIC, NUMERIC_OR_BOOL, OpSpec, const, x

__all__ = ["LINALG", "SORTING"]

_SMALL = Domain(-1.0, 1.0, ilo=-3, ihi=3)
_TIES = Domain(-2.0, 2.0, step=0.5, ilo=-3, ihi=3)


def _trace_dtype(dtype):
    if dtype.kind in "bi":
        return em.int64
    if dtype.kind == "u":
        return em.uint64
    return dtype


def _np_sort(a, axis=-1, descending=False):
    out = np.sort(a, axis=axis, kind="stable")
    return np.flip(out, axis=axis) if descending else out


def _stable_desc(a, axis):
    """Indices sorting ``a`` descending along ``axis``, ties in their original order."""
    moved = np.moveaxis(a, axis, -1)
    out = np.empty(moved.shape, dtype=np.int64)
    for idx in np.ndindex(moved.shape[:-1]):
        row = moved[idx]
        out[idx] = sorted(range(row.shape[0]), key=lambda i: (-float(row[i]), i))
    return np.moveaxis(out, -1, axis)


def _np_argsort(a, axis=-1, descending=False):
    if descending:
        return _stable_desc(a, axis)
    return np.argsort(a, axis=axis, kind="stable").astype(np.int64)


def _np_topk(a, k, axis=-1, largest=True):
    idx = _np_argsort(a, axis=axis, descending=largest)
    idx = np.take(idx, np.arange(k), axis=axis)
    return np.take_along_axis(a, idx, axis=axis), idx


_MATMUL_CASES = (
    Case("2d", (x((3, 4)), x((4, 5))), grad=True),
    Case("batched", (x((2, 3, 4)), x((2, 4, 5))), grad=True),
    Case("broadcast", (x((2, 1, 3, 4)), x((3, 4, 2))), grad=True),
    Case("vec_mat", (x((4,)), x((4, 5))), grad=True),
    Case("mat_vec", (x((3, 4)), x((4,)))),
    Case("vec_vec", (x((4,)), x((4,)))),
    Case("k0", (x((3, 0)), x((0, 4)))),
    Case("empty_batch", (x((0, 3, 4)), x((4, 2)))),
    Case("noncontig", (x((3, 4), "noncontig"), x((4, 5), "strided"))),
    Case("flipped", (x((2, 3, 4), "flipped"), x((4, 3), "noncontig"))),
    # k = 128 products: cancellation leaves results near zero with an absolute error ~ sqrt(k) ulp
    Case("large", (x((64, 128)), x((128, 96))), tol=8.0),
)


def _np_linear(a, w, b=None):
    out = a @ w.T
    return out if b is None else out + b


_LINEAR_CASES = (
    Case("bias", (x((3, 4)), x((5, 4)), x((5,))), grad=True),
    Case("no_bias", (x((2, 3, 4)), x((5, 4))), grad=True),
    Case("vector", (x((4,)), x((2, 4)), x((2,))), grad=True),
    Case("noncontig", (x((4, 3), "noncontig"), x((5, 3), "strided"), x((5,)))),
)

LINALG: tuple[OpSpec, ...] = (
    OpSpec("matmul", em.matmul, np.matmul, NUMERIC, _MATMUL_CASES, domain=_SMALL, grad=True, tol=2.0),
    OpSpec(
        "linear",
        lambda a, w, b=None: em.nn.functional.linear(a, w, b),
        _np_linear,
        NUMERIC,
        _LINEAR_CASES,
        domain=_SMALL,
        grad=True,
        tol=2.0,
    ),
    OpSpec(
        "tensordot",
        lambda a, b, axes=2: em.tensordot(a, b, axes),
        lambda a, b, axes=2: np.tensordot(a, b, axes),
        NUMERIC,
        (
            Case("axes2", (x((2, 3, 4)), x((3, 4, 5))), {"axes": 2}, grad=True),
            Case("pairs", (x((3, 4, 2)), x((4, 5, 3))), {"axes": ((0, 1), (2, 0))}, grad=True),
            Case("axes0", (x((2, 3)), x((4,))), {"axes": 0}),
        ),
        ops=("matmul",),
        domain=_SMALL,
        grad=True,
        tol=2.0,
    ),
    OpSpec(
        "vecdot",
        em.vecdot,
        # the Array API keeps the inputs' (promoted) dtype: integers are not widened as sum widens them
        lambda a, b, axis=-1: np.sum(a * b, axis=axis, dtype=a.dtype),
        NUMERIC,
        (
            Case("last", (x((3, 4)), x((3, 4))), grad=True),
            Case("broadcast", (x((2, 1, 4)), x((3, 4))), {"axis": -1}),
            Case("axis0", (x((4, 3)), x((4, 3))), {"axis": 0}),
            Case("ndim_differs", (x((4,)), x((2, 3, 4))), {"axis": -1}),
        ),
        ops=("mul", "sum"),
        domain=_SMALL,
        grad=True,
        tol=2.0,
    ),
    OpSpec(
        "outer",
        em.outer,
        np.outer,
        NUMERIC,
        (
            Case("1d", (x((3,)), x((4,))), grad=True),
            Case("empty", (x((0,)), x((4,)))),
        ),
        ops=("mul",),
        domain=_SMALL,
        grad=True,
    ),
    OpSpec(
        "diagonal",
        em.diagonal,
        lambda a, offset=0: np.diagonal(a, offset, -2, -1),
        ALL,
        (
            Case("square", (x((4, 4)),), grad=True),
            Case("offset1", (x((3, 5)),), {"offset": 1}, grad=True),
            Case("offset-2", (x((2, 4, 3)),), {"offset": -2}),
            Case("out_of_range", (x((3, 3)),), {"offset": 4}),
            Case("noncontig", (x((4, 3), "noncontig"),), {"offset": 0}),
        ),
        ops=("slice",),
        grad=True,
    ),
    OpSpec(
        "trace",
        em.trace,
        lambda a, offset=0: np.trace(a, offset, -2, -1),
        NUMERIC,
        (
            Case("square", (x((4, 4)),), grad=True),
            Case("batched_offset", (x((2, 3, 5)),), {"offset": 1}),
        ),
        ops=("slice", "sum"),
        domain=_SMALL,
        grad=True,
        out_dtype=_trace_dtype,
    ),
    OpSpec(
        "einsum",
        lambda *ts, eq: em.einsum(eq, *ts),
        lambda *a, eq: np.einsum(eq, *a),
        NUMERIC,
        (
            Case("matmul", (x((3, 4)), x((4, 5))), {"eq": "ij,jk->ik"}, grad=True),
            Case("batched", (x((2, 3, 4)), x((2, 4, 5))), {"eq": "bij,bjk->bik"}, grad=True),
            Case("diag", (x((4, 4)),), {"eq": "ii->i"}),
            Case("sum_all", (x((3, 4)),), {"eq": "ij->"}),
            Case("outer", (x((3,)), x((4,))), {"eq": "i,j->ij"}),
            Case("permute", (x((2, 3, 4)),), {"eq": "ijk->kji"}),
            Case("three", (x((2, 3)), x((3, 4)), x((4, 2))), {"eq": "ij,jk,kl->il"}, grad=True),
            Case("implicit", (x((2, 3)), x((3, 4))), {"eq": "ij,jk"}),
        ),
        ops=("matmul",),
        domain=_SMALL,
        grad=True,
        tol=2.0,
    ),
)

_SORT_CASES = (
    Case("last", (x((3, 7)),), {"axis": -1}, grad=True),
    Case("axis0", (x((5, 4)),), {"axis": 0}, grad=True),
    Case("descending", (x((3, 7)),), {"axis": -1, "descending": True}, grad=True),
    Case("ties", (x((4, 9), domain=_TIES),), {"axis": 1}),
    Case("ties_desc", (x((4, 9), domain=_TIES),), {"axis": 1, "descending": True}),
    Case("empty", (x((0, 3)),), {"axis": 0}),
    Case("noncontig", (x((4, 6), "noncontig"),), {"axis": 1}),
    Case("flipped", (x((3, 5), "flipped"),), {"axis": 0}),
    Case("large", (x((7, 4099)),), {"axis": -1}),
    Case("special", (x((4, 8)),), {"axis": 1}, special=True),
)

_TOPK_CASES = (
    Case("largest", (x((3, 7)),), {"k": 3}, grad=True),
    Case("smallest", (x((5, 4)),), {"k": 2, "axis": 0, "largest": False}, grad=True),
    Case("ties", (x((4, 9), domain=_TIES),), {"k": 4}),
    Case("k0", (x((3, 4)),), {"k": 0}),
    Case("noncontig", (x((4, 6), "noncontig"),), {"k": 6}),
)

SORTING: tuple[OpSpec, ...] = (
    OpSpec("sort", em.sort, _np_sort, NUMERIC_OR_BOOL, _SORT_CASES, grad=True),
    OpSpec("argsort", em.argsort, _np_argsort, NUMERIC_OR_BOOL, _SORT_CASES, out_dtype=const("int64")),
    OpSpec(
        "topk",
        em.topk,
        _np_topk,
        NUMERIC,
        _TOPK_CASES,
        ops=("argsort", "gather"),
        grad=True,
        grad_output=0,
        out_dtype=lambda d: (d, em.int64),
    ),
)

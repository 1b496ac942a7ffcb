"""Searching and set functions of the Array API (searchsorted, isin, unique_*) against numpy.

Inputs are drawn on a grid (``step``) so that equal values, which these functions are about,
actually occur; the ``special`` cases add NaN, infinities and signed zeros.
"""

from __future__ import annotations

import numpy as np

import ember as em

from ..inputs import Case, Domain
from .base import NUMERIC, NUMERIC_OR_BOOL, OpSpec, const, x

__all__ = ["SEARCHING"]

_GRID = Domain(-2.0, 2.0, step=0.5, ilo=-3, ihi=3)
_INT64 = const("int64")

_SEARCH_CASES = (
    Case("1d", (x((9,)), x((7,)))),
    Case("nd_values", (x((12,)), x((3, 4)))),
    Case("0d_value", (x((5,)), x(()))),
    Case("empty_sorted", (x((0,)), x((4,)))),
    Case("empty_values", (x((6,)), x((0, 2)))),
    Case("large", (x((1031,)), x((67, 5)))),
    Case("special", (x((8,)), x((4, 8))), special=True),
)

_SET_CASES = (
    Case("1d", (x((9,)),)),
    Case("2d", (x((4, 5)),)),
    Case("0d", (x(()),)),
    Case("empty", (x((0, 3)),)),
    Case("noncontig", (x((4, 6), "noncontig"),)),
    Case("large", (x((67, 31)),)),
    Case("special", (x((4, 8)),), special=True),
)

_ISIN_CASES = (
    Case("1d", (x((9,)), x((4,)))),
    Case("nd", (x((3, 4)), x((2, 3)))),
    Case("0d", (x(()), x((5,)))),
    Case("empty_pool", (x((3,)), x((0,)))),
    Case("invert", (x((3, 4)), x((5,))), {"invert": True}),
    Case("special", (x((4, 8)), x((8,))), special=True),
)


def _search(side):
    def fn(a, v):
        return em.searchsorted(em.sort(a), v, side=side)

    def ref(a, v):
        return np.searchsorted(np.sort(a), v, side=side).astype(np.int64)

    return fn, ref


def _np_unique(a):
    """values (sorted), first indices, inverse indices (a's shape), counts; every NaN distinct."""
    values, index, inverse, counts = np.unique(
        a.reshape(-1), return_index=True, return_inverse=True, return_counts=True, equal_nan=False
    )
    return values, index.astype(np.int64), inverse.reshape(a.shape).astype(np.int64), counts.astype(np.int64)


def _unique_all_ref(a):
    return _np_unique(a)


def _unique_inverse_ref(a):
    values, _, inverse, _ = _np_unique(a)
    return values, inverse


def _unique_counts_ref(a):
    values, _, _, counts = _np_unique(a)
    return values, counts


def _unique_values_ref(a):
    return _np_unique(a)[0]


def _and_int64(dtype):
    return lambda dt: (dt, *([em.int64] * (dtype - 1)))


SEARCHING: tuple[OpSpec, ...] = (
    OpSpec("searchsorted", *_search("left"), NUMERIC, _SEARCH_CASES, ops=("searchsorted", "sort"), domain=_GRID,
           out_dtype=_INT64),
    OpSpec("searchsorted_right", *_search("right"), NUMERIC, _SEARCH_CASES, ops=("searchsorted",), domain=_GRID,
           out_dtype=_INT64),
    OpSpec("isin", em.isin, np.isin, NUMERIC_OR_BOOL, _ISIN_CASES, domain=_GRID, out_dtype=const("bool")),
    OpSpec("unique_values", em.unique_values, _unique_values_ref, NUMERIC_OR_BOOL, _SET_CASES, domain=_GRID),
    OpSpec("unique_counts", lambda a: tuple(em.unique_counts(a)), _unique_counts_ref, NUMERIC_OR_BOOL, _SET_CASES,
           ops=("argsort", "cumsum"), domain=_GRID, out_dtype=_and_int64(2)),
    OpSpec("unique_inverse", lambda a: tuple(em.unique_inverse(a)), _unique_inverse_ref, NUMERIC_OR_BOOL,
           _SET_CASES, ops=("argsort", "take"), domain=_GRID, out_dtype=_and_int64(2)),
    OpSpec("unique_all", lambda a: tuple(em.unique_all(a)), _unique_all_ref, NUMERIC_OR_BOOL, _SET_CASES,
           ops=("argsort", "take", "cumsum"), domain=_GRID, out_dtype=_and_int64(4)),
)  # fmt: skip

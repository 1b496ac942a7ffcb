"""Gather/scatter style ops (take, take_along_axis, scatter_add, index_put, embedding,
one_hot, nonzero), and the ``x[key]`` / ``x[key] = v`` keys checked for every dtype."""

from __future__ import annotations

import numpy as np

import ember as em

from ..inputs import Arg, Case, Domain
from .base import ALL, FLOAT, INT, NUMERIC, OpSpec, const, x

__all__ = ["INDEXING", "GET_KEYS", "SET_KEYS"]


def _idx(shape, hi, lo=0, kind="index"):
    return Arg(shape, kind, lo=lo, hi=hi)


def _np_scatter_add(a, index, values, axis):
    out = a.copy()
    grid = list(np.ogrid[tuple(slice(0, n) for n in index.shape)])
    grid[axis] = index
    np.add.at(out, tuple(grid), values)
    return out


def _np_index_put(accumulate):
    def ref(a, values, *indices):
        out = a.copy()
        if accumulate:
            np.add.at(out, tuple(indices), values)
        else:
            out[tuple(indices)] = values
        return out

    return ref


def _index_put(accumulate):
    return lambda a, values, *indices: em.index_put(a, indices, values, accumulate=accumulate)


def _np_take(a, indices, axis=None):
    return np.take(a, indices, axis=axis)


_SPARSE = Domain(-2.0, 2.0, ilo=-2, ihi=2, zeros=0.5)

INDEXING: tuple[OpSpec, ...] = (
    OpSpec(
        "take",
        lambda a, i, axis=None: em.take(a, i, axis=axis),
        _np_take,
        ALL,
        (
            Case("axis0", (x((5, 3)), _idx((4,), 5, lo=-5)), {"axis": 0}, grad=True),
            Case("axis1_2d_index", (x((3, 5)), _idx((2, 3), 5)), {"axis": 1}, grad=True),
            Case("flat", (x((3, 4)), _idx((6,), 12)), {"axis": None}),
            Case("empty_index", (x((4, 3)), _idx((0,), 4)), {"axis": 0}),
            Case("noncontig", (x((4, 5), "noncontig"), _idx((7,), 4)), {"axis": 0}),
            Case("large", (x((1031, 67)), _idx((2000,), 1031)), {"axis": 0}),
        ),
        ops=("take", "gather"),
        grad=True,
    ),
    OpSpec(
        "take_along_axis",
        lambda a, i, axis=-1: em.take_along_axis(a, i, axis),
        lambda a, i, axis=-1: np.take_along_axis(a, i, axis=axis),
        ALL,
        (
            Case("axis1", (x((3, 4)), _idx((3, 6), 4)), {"axis": 1}, grad=True),
            Case("axis0_negative", (x((5, 3)), _idx((2, 3), 5, lo=-5)), {"axis": 0}, grad=True),
            Case("broadcast_index", (x((3, 4)), _idx((1, 2), 4)), {"axis": 1}),
            Case("3d", (x((2, 3, 4)), _idx((2, 5, 4), 3)), {"axis": 1}),
            Case("noncontig", (x((4, 3), "noncontig"), _idx((4, 2), 3)), {"axis": -1}),
        ),
        ops=("gather",),
        grad=True,
    ),
    OpSpec(
        "scatter_add",
        lambda a, i, v, axis: em.scatter_add(a, i, v, axis),
        _np_scatter_add,
        NUMERIC,
        (
            Case("axis1", (x((3, 4)), _idx((3, 6), 4), x((3, 6))), {"axis": 1}, grad=True),
            Case("axis0", (x((5, 3)), _idx((7, 3), 5), x((7, 3))), {"axis": 0}, grad=True),
            Case("negative", (x((5, 3)), _idx((4, 3), 5, lo=-5), x((4, 3))), {"axis": 0}),
            Case("3d", (x((2, 3, 4)), _idx((2, 5, 4), 3), x((2, 5, 4))), {"axis": 1}),
            Case("noncontig", (x((4, 3), "noncontig"), _idx((4, 5), 3), x((4, 5), "flipped")), {"axis": 1}),
        ),
        domain=Domain(ilo=-3, ihi=3),
        grad=True,
    ),
    OpSpec(
        "index_put",
        _index_put(False),
        _np_index_put(False),
        ALL,
        (
            Case("rows", (x((5, 4)), x((3, 4)), _idx((3,), 5, kind="unique")), grad=True),
            Case("pairs", (x((5, 4)), x((3,)), _idx((3,), 5, kind="unique"), _idx((3,), 4)), grad=True),
            Case("broadcast_values", (x((5, 4)), x((4,)), _idx((2,), 5, kind="unique"))),
            Case("negative", (x((5, 4)), x((2, 4)), _idx((2,), 0, lo=-5, kind="unique"))),
            Case("noncontig", (x((4, 6), "noncontig"), x((2, 6)), _idx((2,), 4, kind="unique"))),
        ),
        grad=True,
    ),
    OpSpec(
        "index_put_accumulate",
        _index_put(True),
        _np_index_put(True),
        NUMERIC,
        (
            Case("rows", (x((5, 4)), x((6, 4)), _idx((6,), 5)), grad=True),
            Case("pairs", (x((5, 4)), x((8,)), _idx((8,), 5), _idx((8,), 4)), grad=True),
            Case("noncontig", (x((4, 6), "noncontig"), x((5, 6)), _idx((5,), 4))),
        ),
        ops=("index_put",),
        domain=Domain(ilo=-3, ihi=3),
        grad=True,
    ),
    OpSpec(
        "embedding",
        lambda i, w: em.embedding(i, w),
        lambda i, w: w[i],
        FLOAT,
        (
            Case("2d_index", (_idx((2, 3), 6), x((6, 4))), grad=True),
            Case("1d_index", (_idx((5,), 6), x((6, 3)))),
            Case("noncontig", (_idx((4,), 5), x((5, 3), "noncontig"))),
        ),
        ops=("take",),
        grad=True,
    ),
    OpSpec(
        "one_hot",
        lambda i: em.one_hot(i, 5),
        lambda i: (i[..., None] == np.arange(5)).astype(np.float64),
        INT,
        (
            Case("1d", (x((6,)),)),
            Case("2d", (x((2, 3)),)),
            Case("0d", (x(()),)),
        ),
        ops=("eq",),
        domain=Domain(ilo=0, ihi=4),
        out_dtype=const("float32"),
    ),
    OpSpec(
        "nonzero",
        em.nonzero,
        np.nonzero,
        ALL,
        (
            Case("1d", (x((9,)),)),
            Case("3d", (x((2, 3, 4)),)),
            Case("empty", (x((0, 3)),)),
            Case("noncontig", (x((3, 4), "noncontig"),)),
        ),
        ops=(),
        domain=_SPARSE,
        out_dtype=const("int64"),
    ),
    OpSpec(
        "argwhere",
        em.argwhere,
        np.argwhere,
        ALL,
        (
            Case("2d", (x((3, 4)),)),
            Case("flipped", (x((2, 3, 2), "flipped"),)),
        ),
        ops=(),
        domain=_SPARSE,
        out_dtype=const("int64"),
    ),
)


def _i(*values):
    """An integer-array index: numpy gets the array, ember a tensor made from it."""
    return ("array", np.array(values, dtype=np.int64))


def _mask(shape, seed=0):
    return ("mask", np.random.default_rng(seed).random(shape) < 0.5)


#: x[key] on a (4, 5, 6) tensor; ("array", a) / ("mask", m) become tensors on the device
GET_KEYS: dict[str, object] = {
    "int": 1,
    "neg_int": -1,
    "slice": slice(1, 3),
    "neg_step": slice(None, None, -1),
    "neg_step2": slice(3, 0, -2),
    "neg_step_bounds": (slice(None), slice(-1, -5, -2)),
    "steps": (slice(None, None, 2), slice(1, None, 3)),
    "empty_slice": slice(3, 1),
    "ellipsis": (Ellipsis, 1),
    "ellipsis_mid": (0, Ellipsis, slice(None, None, -2)),
    "none": (None, slice(None), None),
    "mixed": (1, None, slice(None, None, -1)),
    "scalar": (1, 2, 3),
    "neg_bounds": (slice(-3, -1), -2),
    "full": (),
    "int_array": _i(2, 0, 3, 0),
    "neg_array": _i(-1, -4),
    "array_2d": ("array", np.array([[0, 1], [3, 2]], dtype=np.int64)),
    "two_arrays": (_i(0, 2, 1), _i(1, 4, 0)),
    "array_slice": (slice(None), _i(2, 0)),
    "int_and_array": (0, _i(1, 2)),
    "nonadjacent": (_i(0, 1), slice(None), _i(1, 2)),
    "array_after_slice": (slice(1, 3), _i(0, 4), _i(5, 1)),
    "mask_full": _mask((4, 5, 6)),
    "mask_rows": _mask((4,), 1),
    "mask_2d_then_int": (_mask((4, 5), 2), 1),
    "slice_mask": (slice(None), _mask((5,), 3)),
    "bool_true": True,
    "list": [0, 3],
}

#: x[key] = value on a (4, 5, 6) tensor; value "scalar" or a tensor of the given shape
SET_KEYS: dict[str, tuple[object, object]] = {
    "int_scalar": (1, "scalar"),
    "slice_tensor": ((slice(None), slice(1, 3)), (4, 2, 6)),
    "broadcast_row": ((slice(None), 0), (6,)),
    "neg_step": (slice(None, None, -2), (2, 5, 6)),
    "ellipsis": ((Ellipsis, -1), "scalar"),
    "mask": (_mask((4, 5, 6), 4), "scalar"),
    "mask_rows": (_mask((4,), 5), (5, 6)),
    "int_array": (_i(3, 0), (2, 5, 6)),
    "two_arrays": ((_i(0, 2), _i(4, 1)), (6,)),
    "none": ((None, 1), "scalar"),
}

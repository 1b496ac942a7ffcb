"""Shape and movement ops, for every dtype: values only move, so results must be exact."""

from __future__ import annotations

import numpy as np

import ember as em

from ..inputs import Case
from .base import ALL, OpSpec, x

__all__ = ["MOVEMENT"]


def _spec(name, fn, ref, cases, *, ops=None, grad=True):
    return OpSpec(name, fn, ref, ALL, cases, ops=ops, grad=grad)


def _np_split(a, indices_or_sections, axis=0):
    return list(np.split(a, indices_or_sections, axis=axis))


def _np_chunk(a, chunks, axis=0):
    n = a.shape[axis]
    size = -(-n // chunks)
    return [np.take(a, np.arange(i, min(n, i + size)), axis=axis) for i in range(0, n, size)]


def _np_repeat(a, repeats, axis=None):
    return np.repeat(a, repeats, axis=axis)


def _np_tri(fn):
    def ref(a, k=0):
        mask = fn(np.ones(a.shape[-2:], dtype=bool), k)
        return np.where(mask, a, np.zeros((), a.dtype))

    return ref


MOVEMENT: tuple[OpSpec, ...] = (
    _spec(
        "reshape",
        lambda a, shape: em.reshape(a, shape),
        lambda a, shape: np.reshape(a, shape),
        (
            Case("2d", (x((3, 4)),), {"shape": (4, 3)}, grad=True),
            Case("infer", (x((2, 3, 4)),), {"shape": (-1, 4)}),
            Case("0d", (x(()),), {"shape": (1, 1)}),
            Case("to0d", (x((1,)),), {"shape": ()}),
            Case("empty", (x((0, 3)),), {"shape": (3, 0)}),
            Case("noncontig", (x((3, 4), "noncontig"),), {"shape": (12,)}),
            Case("strided", (x((2, 6), "strided"),), {"shape": (3, 4)}),
            Case("flipped", (x((2, 3, 4), "flipped"),), {"shape": (6, 4)}),
        ),
    ),
    _spec(
        "permute_dims",
        em.permute_dims,
        np.transpose,
        (
            Case("3d", (x((2, 3, 4)),), {"axes": (2, 0, 1)}, grad=True),
            Case("negative", (x((2, 3, 4)),), {"axes": (-1, -3, -2)}),
            Case("empty", (x((0, 3)),), {"axes": (1, 0)}),
            Case("noncontig", (x((3, 4, 2), "noncontig"),), {"axes": (1, 2, 0)}),
            Case("strided", (x((3, 4), "strided"),), {"axes": (1, 0)}),
        ),
        ops=("permute",),
    ),
    _spec(
        "broadcast_to",
        em.broadcast_to,
        np.broadcast_to,
        (
            Case("expand", (x((3, 1)),), {"shape": (2, 3, 4)}, grad=True),
            Case("0d", (x(()),), {"shape": (2, 2)}),
            Case("empty", (x((1, 3)),), {"shape": (0, 3)}),
            Case("noncontig", (x((1, 4), "noncontig"),), {"shape": (3, 4)}),
            Case("flipped", (x((3, 1), "flipped"),), {"shape": (3, 5)}),
        ),
        ops=("expand",),
    ),
    _spec(
        "flip",
        em.flip,
        np.flip,
        (
            Case("all", (x((3, 4)),), {"axis": None}, grad=True),
            Case("axis1", (x((2, 3, 4)),), {"axis": 1}),
            Case("axes", (x((2, 3, 4)),), {"axis": (0, 2)}),
            Case("empty", (x((0, 3)),), {"axis": 0}),
            Case("noncontig", (x((3, 4), "noncontig"),), {"axis": 0}),
            Case("strided", (x((3, 4), "strided"),), {"axis": -1}),
        ),
    ),
    _spec(
        "pad",
        em.pad,
        lambda a, pad_width, value=0: np.pad(a, pad_width, constant_values=np.asarray(value).astype(a.dtype)),
        (
            Case("2d", (x((3, 4)),), {"pad_width": ((1, 2), (0, 3))}, grad=True),
            Case("value1", (x((3, 4)),), {"pad_width": ((2, 0), (1, 1)), "value": 1}),
            Case("1d", (x((5,)),), {"pad_width": ((3, 1),)}),
            Case("empty", (x((0, 2)),), {"pad_width": ((1, 1), (0, 0))}),
            Case("noncontig", (x((3, 4), "noncontig"),), {"pad_width": ((1, 0), (0, 2))}),
            Case("flipped", (x((2, 3, 2), "flipped"),), {"pad_width": ((0, 1), (1, 0), (1, 1))}),
        ),
    ),
    _spec(
        "concat",
        lambda *ts, axis=0: em.concat(list(ts), axis=axis),
        lambda *a, axis=0: np.concatenate(a, axis=axis),
        (
            Case("axis0", (x((2, 3)), x((4, 3))), {"axis": 0}, grad=True),
            Case("axis-1", (x((2, 3)), x((2, 1)), x((2, 2))), {"axis": -1}, grad=True),
            Case("flat", (x((2, 3)), x((4,))), {"axis": None}),
            Case("empty", (x((0, 3)), x((2, 3))), {"axis": 0}),
            Case("noncontig", (x((3, 4), "noncontig"), x((3, 2), "strided")), {"axis": 1}),
            Case("flipped", (x((2, 3), "flipped"), x((1, 3))), {"axis": 0}),
        ),
    ),
    _spec(
        "stack",
        lambda *ts, axis=0: em.stack(list(ts), axis=axis),
        lambda *a, axis=0: np.stack(a, axis=axis),
        (
            Case("axis0", (x((2, 3)), x((2, 3))), {"axis": 0}, grad=True),
            Case("axis-1", (x((2, 3)), x((2, 3)), x((2, 3))), {"axis": -1}),
            Case("0d", (x(()), x(())), {"axis": 0}),
            Case("noncontig", (x((3, 4), "noncontig"), x((3, 4), "flipped")), {"axis": 1}),
        ),
        ops=("concat", "reshape"),
    ),
    _spec(
        "squeeze",
        em.squeeze,
        lambda a, axis=None: np.squeeze(a, axis=axis),
        (
            Case("all", (x((1, 3, 1, 4)),), {"axis": None}, grad=True),
            Case("axis", (x((1, 3, 1, 4)),), {"axis": 2}),
            Case("to0d", (x((1, 1)),), {"axis": None}),
            Case("noncontig", (x((4, 1, 3), "noncontig"),), {"axis": 1}),
        ),
        ops=("reshape",),
    ),
    _spec(
        "expand_dims",
        em.expand_dims,
        np.expand_dims,
        (
            Case("front", (x((3, 4)),), {"axis": 0}, grad=True),
            Case("back", (x((3, 4)),), {"axis": -1}),
            Case("0d", (x(()),), {"axis": 0}),
            Case("noncontig", (x((3, 4), "noncontig"),), {"axis": 1}),
        ),
        ops=("reshape",),
    ),
    _spec(
        "swapaxes",
        em.swapaxes,
        lambda a, axis0, axis1: np.swapaxes(a, axis0, axis1),
        (
            Case("3d", (x((2, 3, 4)),), {"axis0": 0, "axis1": 2}, grad=True),
            Case("noncontig", (x((3, 4), "noncontig"),), {"axis0": -1, "axis1": -2}),
        ),
        ops=("permute",),
    ),
    _spec(
        "moveaxis",
        em.moveaxis,
        np.moveaxis,
        (
            Case("one", (x((2, 3, 4)),), {"source": 0, "destination": -1}, grad=True),
            Case("two", (x((2, 3, 4, 5)),), {"source": (0, 1), "destination": (3, 2)}),
        ),
        ops=("permute",),
    ),
    _spec(
        "matrix_transpose",
        em.matrix_transpose,
        lambda a: np.swapaxes(a, -1, -2),
        (
            Case("2d", (x((3, 4)),), grad=True),
            Case("batched", (x((2, 3, 4)),)),
            Case("strided", (x((3, 4), "strided"),)),
        ),
        ops=("permute",),
    ),
    _spec(
        "flatten",
        em.flatten,
        lambda a, start_axis=0, end_axis=-1: (
            a.reshape(a.shape[:start_axis] + (-1,) + a.shape[end_axis % a.ndim + 1 :]) if a.ndim else a.reshape(1)
        ),
        (
            Case("all", (x((2, 3, 4)),), grad=True),
            Case("middle", (x((2, 3, 4, 5)),), {"start_axis": 1, "end_axis": 2}),
            Case("0d", (x(()),)),
            Case("noncontig", (x((2, 3, 4), "noncontig"),), {"start_axis": 0, "end_axis": 1}),
        ),
        ops=("reshape",),
    ),
    _spec(
        "split",
        em.split,
        _np_split,
        (
            Case("sections", (x((6, 4)),), {"indices_or_sections": 3, "axis": 0}, grad=True),
            Case("indices", (x((3, 7)),), {"indices_or_sections": [2, 5], "axis": 1}),
            Case("noncontig", (x((4, 6), "noncontig"),), {"indices_or_sections": 2, "axis": 1}),
        ),
        ops=("slice",),
    ),
    _spec(
        "chunk",
        em.chunk,
        _np_chunk,
        (
            Case("uneven", (x((7, 3)),), {"chunks": 3, "axis": 0}, grad=True),
            Case("axis1", (x((3, 8)),), {"chunks": 4, "axis": 1}),
        ),
        ops=("slice",),
    ),
    _spec(
        "unstack",
        em.unstack,
        lambda a, axis=0: list(np.moveaxis(a, axis, 0)),
        (
            Case("axis0", (x((3, 4)),), {"axis": 0}, grad=True),
            Case("axis-1", (x((2, 3, 4)),), {"axis": -1}),
        ),
        ops=("slice", "reshape"),
    ),
    _spec(
        "tile",
        em.tile,
        np.tile,
        (
            Case("2d", (x((2, 3)),), {"reps": (2, 3)}, grad=True),
            Case("more_reps", (x((3,)),), {"reps": (2, 1, 2)}),
            Case("noncontig", (x((2, 3), "noncontig"),), {"reps": (1, 2)}),
        ),
        ops=("expand", "reshape"),
    ),
    _spec(
        "repeat",
        em.repeat,
        _np_repeat,
        (
            Case("int", (x((2, 3)),), {"repeats": 2, "axis": 1}, grad=True),
            Case("flat", (x((2, 3)),), {"repeats": 3, "axis": None}),
            Case("list", (x((3, 2)),), {"repeats": [1, 0, 2], "axis": 0}, grad=True),
        ),
        ops=("expand", "take"),
    ),
    _spec(
        "roll",
        em.roll,
        np.roll,
        (
            Case("axis", (x((3, 5)),), {"shift": 2, "axis": 1}, grad=True),
            Case("flat", (x((3, 4)),), {"shift": -5, "axis": None}),
            Case("multi", (x((3, 4, 2)),), {"shift": (1, -1), "axis": (0, 1)}),
            Case("noncontig", (x((3, 4), "noncontig"),), {"shift": 7, "axis": 0}),
        ),
        ops=("slice", "concat"),
    ),
    _spec(
        "tril",
        em.tril,
        _np_tri(np.tril),
        (
            Case("k0", (x((4, 5)),), grad=True),
            Case("k-1", (x((2, 4, 4)),), {"k": -1}),
            Case("k1", (x((5, 3)),), {"k": 1}),
            Case("noncontig", (x((4, 5), "noncontig"),), {"k": 0}),
        ),
        ops=("where",),
    ),
    _spec(
        "triu",
        em.triu,
        _np_tri(np.triu),
        (
            Case("k0", (x((4, 5)),), grad=True),
            Case("k-1", (x((2, 4, 4)),), {"k": -1}),
            Case("k2", (x((3, 5)),), {"k": 2}),
        ),
        ops=("where",),
    ),
    _spec(
        "meshgrid",
        em.meshgrid,
        np.meshgrid,
        (
            Case("xy", (x((3,)), x((4,))), {"indexing": "xy"}),
            Case("ij", (x((3,)), x((4,)), x((2,))), {"indexing": "ij"}),
        ),
        ops=("expand",),
        grad=False,
    ),
    _spec(
        "broadcast_arrays",
        em.broadcast_arrays,
        lambda *a: list(np.broadcast_arrays(*a)),
        (
            Case("two", (x((3, 1)), x((4,)))),
            Case("three", (x((2, 1, 1)), x((3, 1)), x(()))),
        ),
        ops=("expand",),
        grad=False,
    ),
    _spec(
        "clone",
        em.clone,
        np.copy,
        (
            Case("2d", (x((3, 4)),), grad=True),
            Case("noncontig", (x((3, 4), "noncontig"),)),
        ),
    ),
)

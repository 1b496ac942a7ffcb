"""Running a :class:`~ember.lazy.program.FusedProgram` on numpy arrays: compiled by numba when the
region is large enough to pay for a parallel loop, op by op through the numpy kernels otherwise.

Small regions (under :data:`MIN_ELEMENTS`), programs over 16-bit floats and programs with an op
the numba generator lacks run op by op through the same numpy kernels as the unfused path, so
they give its results exactly and compile nothing (the conformance suite's thousands of small
programs stay as fast as before). Large regions compile one kernel per (program, layout) with
numba (:mod:`ember_cpu.numba_codegen`), cached in memory and, through numba's own cache, on
disk under ``EMBER_CACHE_DIR/cpu-numba`` (``EMBER_KERNEL_CACHE=0`` keeps it in memory only).
An elementwise kernel of at least :data:`ember_cpu.parallel.MIN_SPLIT_ELEMENTS` runs in parts
of its outermost loop on several threads (:class:`Cuts`, :mod:`ember_cpu.parallel`).

A program with a trailing reduction (``FusedProgram.reduce``) runs the same way: large ones as
one numba loop nest that folds each row into an accumulator (:func:`reduce_plan`,
:func:`ember_cpu.numba_codegen.reduce_source`), small or 16-bit ones op by op and then through
the unfused path's own reduction kernel, which gives its results exactly.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ember import config
from ember.dtypes import as_dtype
from ember.lazy.program import FusedProgram
from ember.views import collapse

from . import settings
from .numba_codegen import (
    KERNEL_NAME,
    LIBM_OPS,
    NUMBA_OPS,
    NUMBA_REDUCTIONS,
    VECTOR_F32_OPS,
    Layout,
    RowLayout,
    compilable,
    libm_bound,
    reduce_source,
    source,
)
from .parallel import CHUNK_ELEMENTS, splitter

__all__ = ["MIN_ELEMENTS", "FUSION_REDUCTIONS", "FusedKernels", "numba_missing", "fusion_ops", "interpret", "plan"]

#: the reductions run_fused computes at the end of a program (Backend.fusion_reductions)
FUSION_REDUCTIONS = NUMBA_REDUCTIONS

#: regions of fewer elements run op by op: a kernel takes 0.3-2 s to compile and a parallel loop
#: ~10 µs to start, which small regions seldom pay back (at 2^16 the conformance suite's "large"
#: cases, 67 x 1031, compiled 31 kernels and took 173 s against 93 s unfused; every region of
#: W2-W6 has 2^17 elements or more)
MIN_ELEMENTS = 1 << 17


def numba_missing() -> str | None:
    """None if numba can be imported and is not switched off, else why the cpu backend neither
    fuses nor runs its numba kernels."""
    if not settings.numba():
        return "EMBER_CPU_NUMBA=0 switches numba off"
    if importlib.util.find_spec("numba") is None:
        return "numba is not installed (pip install 'ember-cpu[numba]')"
    return None


def fusion_ops(kernels: dict[str, Callable[..., Any]]) -> frozenset[str]:
    """The ops the lazy layer may defer: those the numba generator compiles that also have a
    numpy kernel (the op-by-op path runs every deferred op through it)."""
    return frozenset(op for op in NUMBA_OPS if op in kernels or op in ("cast", "copy"))


def interpret(prog: FusedProgram, operands: list[Any], shape: tuple[int, ...], kernels: dict[str, Any]) -> list[Any]:
    """Run ``prog`` op by op with the numpy ``kernels`` (the unfused path's own), in SSA order."""
    fitted = [_fit(v, shape) if kind == "tensor" else v for (_, kind), v in zip(prog.inputs, operands)]
    values = _evaluate(prog, fitted, kernels)
    out = []
    for o in prog.outputs:
        v = values[o]
        if v.shape != shape:
            v = np.broadcast_to(v, shape)
        out.append(v if v.flags.c_contiguous and v.base is None else np.array(v, order="C"))  # 0-d stays 0-d
    r = prog.reduce
    if r is not None:  # the unfused path's reduction kernel, over the value at full size
        v = values[r.value]
        if v.shape != shape:
            v = np.broadcast_to(v, shape)
        out.append(np.asarray(kernels[r.op](v, axes=r.axes, keepdims=r.keepdims), order="C"))  # 0-d stays 0-d
    return out


def _evaluate(prog: FusedProgram, operands: list[Any], kernels: dict[str, Any]) -> list[Any]:
    """Every SSA value of ``prog`` computed op by op by the numpy ``kernels`` (inputs first)."""
    values: list[Any] = []
    for (dt, kind), v in zip(prog.inputs, operands):
        values.append(np.asarray(v, dtype=as_dtype(dt).numpy) if kind == "scalar" else v)
    for op, dt, args in prog.instructions:
        xs = [values[a] if isinstance(a, int) else np.asarray(a.value, dtype=as_dtype(a.dtype).numpy) for a in args]
        if op == "cast":
            values.append(kernels["cast"](xs[0], dtype=as_dtype(dt)))
        elif op == "copy":
            values.append(np.array(xs[0], copy=True))
        else:
            values.append(kernels[op](*xs))
    return values


#: elements of one tile of :func:`tiled_reduce`: a value of the tile fits a core's L2 (256 KiB
#: of float32), and a tile is long enough that the ~10 us of its numpy calls stay small
TILE = 1 << 16


_UFUNCS = {"sum": np.add, "mean": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


def _start(op: str, dtype: np.dtype) -> Any:
    """The value an accumulator of ``op`` starts from."""
    if op in ("sum", "mean"):
        return 0
    if op == "prod":
        return 1
    if dtype.kind == "f":
        return -np.inf if op == "max" else np.inf
    info = np.iinfo(dtype)
    return info.min if op == "max" else info.max


def tiled_reduce(prog: FusedProgram, operands: list[Any], shape: tuple[int, ...], kernels: dict[str, Any]) -> list[Any]:
    """Run ``prog`` (with a trailing reduction) tile by tile: each tile of :data:`TILE` elements
    is computed op by op by the numpy ``kernels`` (their SIMD loops) while it sits in cache,
    reduced, and folded into the result, so no full-size value but the held outputs is written.
    Tiles split the outermost axes; a tile reducing a kept slice gives that slice's unfused
    result exactly, partial results of a split reduced axis combine (float32 sums in float64)."""
    r = prog.reduce
    assert r is not None
    rank = len(shape)
    d = next(k for k in range(rank) if math.prod(shape[k + 1 :]) <= TILE)
    step = max(1, TILE // math.prod(shape[d + 1 :]))
    full = [
        np.broadcast_to(_fit(v, shape), shape) if kind == "tensor" else v for (_, kind), v in zip(prog.inputs, operands)
    ]
    dts = prog.value_dtypes()
    outs = [np.empty(shape, dtype=as_dtype(dts[o]).numpy) for o in prog.outputs]
    vdt = as_dtype(dts[r.value]).numpy
    split = d in r.axes or any(a < d for a in r.axes)  # some result gets partials of several tiles
    adt = np.dtype(np.float64) if r.op in ("sum", "mean") and vdt == np.float32 and split else vdt
    keep_shape = tuple(1 if k in r.axes else n for k, n in enumerate(shape))
    acc = np.full(keep_shape, _start(r.op, adt), dtype=adt) if split else np.empty(keep_shape, dtype=vdt)
    fold = _UFUNCS[r.op]
    tensor = [kind == "tensor" for _, kind in prog.inputs]
    for head in np.ndindex(*shape[:d]):
        for c0 in range(0, shape[d], step):
            at = tuple(slice(i, i + 1) for i in head) + (slice(c0, min(shape[d], c0 + step)),)
            to = tuple(slice(0, 1) if k in r.axes else s for k, s in enumerate(at))
            values = _evaluate(prog, [v[at] if t else v for v, t in zip(full, tensor)], kernels)
            for k, o in enumerate(prog.outputs):
                outs[k][at] = values[o]
            v = values[r.value]
            tile = tuple(s.stop - s.start for s in at) + shape[d + 1 :]
            part = fold.reduce(v if v.shape == tile else np.broadcast_to(v, tile), axis=r.axes, keepdims=True)
            if split:
                fold(acc[to], part, out=acc[to])
            else:
                acc[to] = part
    if r.op == "mean":
        acc = acc / math.prod(shape[k] for k in r.axes)
    red = acc.astype(vdt, copy=False)
    return [*outs, red if r.keepdims else red.reshape(r.shape(shape))]


#: float32 ops whose numpy kernels are scipy.special's scalar loops and which the generator
#: vectorises (numba_codegen.VECTOR_F32_OPS): a program with one reduces fastest as split
_SCIPY_F32 = frozenset({"erf", "gelu", "sigmoid", "silu"})


def _reduce_route(prog: FusedProgram, shape: tuple[int, ...]) -> str:
    """How a large program with a reduction runs, from measurements on the dev machine (one
    thread, W4's regions, the 2026-12-05 log): ``split`` (one numba loop writing the reduced
    value, then the reduction kernel) when it has a scipy-backed float32 op the loop vectorises
    and no libm-bound one (GELU's backward with its bias gradient, (8, 128, 1024): 8.7 ms
    against 30 tiled and 42 as one loop nest), or when the reduction keeps the innermost axis
    (a bias gradient's sum over rows: 0.11 against 1.25 ms, the loop nest reading a row apart);
    ``tiled`` when an op is libm-bound in numba and numpy runs it with SIMD (exp: 5-25 ms
    against 13-43); ``numba`` (one loop nest) otherwise."""
    r = prog.reduce
    assert r is not None
    ops = prog.instructions
    can_split = r.value >= len(prog.inputs)  # an instruction's value, which a program can output
    if can_split and not libm_bound(prog) and any(dt == "float32" and op in _SCIPY_F32 for op, dt, _ in ops):
        return "split"
    if any(op in LIBM_OPS for op, _, _ in ops):
        return "tiled"
    axes = [d for d, n in enumerate(shape) if n != 1]
    return "split" if can_split and axes and axes[-1] not in r.axes else "numba"


def _fit(t: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``t`` without leading unit axes beyond ``shape``'s rank (a one-element handle of a 0-d
    value, as em.jit's replays and optimizer states hand in)."""
    extra = t.ndim - len(shape)
    if extra > 0 and all(d == 1 for d in t.shape[:extra]):
        return t.reshape(t.shape[extra:])
    return t


def _plan(
    shape: tuple[int, ...], tensors: list[np.ndarray]
) -> tuple[Layout, tuple[int, ...], list[Any], list[int], list[int]]:
    """:func:`plan`, and per tensor its element stride along the first collapsed axis (where a
    split kernel's part starts reading: :meth:`FusedKernels._launch`)."""
    rank = len(shape)
    strides = []
    tensors = [_fit(t, shape) for t in tensors]
    for t in tensors:
        pad = rank - t.ndim
        st = [0] * pad + [0 if t.shape[d] == 1 else t.strides[d] // t.itemsize for d in range(t.ndim)]
        strides.append(tuple(st))
    cshape, cstrides = collapse(shape, strides)
    contiguous = tuple(math.prod(cshape[d + 1 :]) for d in range(len(cshape)))
    modes: list[str] = []
    arrays: list[Any] = []
    args: list[int] = []
    for t, st in zip(tensors, cstrides):
        if all(s == 0 for s in st):
            modes.append("z")
            arrays.append(np.lib.stride_tricks.as_strided(t, shape=(1,), strides=(t.itemsize,)))
        elif st == contiguous:
            modes.append("c")
            arrays.append(np.lib.stride_tricks.as_strided(t, shape=(math.prod(cshape),), strides=(t.itemsize,)))
        elif min(st) < 0:
            modes.append("s")
            arrays.append(np.lib.stride_tricks.as_strided(t, shape=cshape, strides=tuple(s * t.itemsize for s in st)))
        else:
            mode = "r" if st[-1] == 1 else "b" if st[-1] == 0 else "f"
            modes.append(mode)
            span = 1 + sum((n - 1) * s for n, s in zip(cshape, st))
            arrays.append(np.lib.stride_tricks.as_strided(t, shape=(span,), strides=(t.itemsize,)))
            args += st[:-1] if mode != "f" else st
    strided = any(m in "srbf" for m in modes)
    layout = Layout(tuple(modes), len(cshape) if strided else 0)
    firsts = [st[0] if st else 0 for st in cstrides]
    return layout, cshape, arrays, args, firsts


def plan(shape: tuple[int, ...], tensors: list[np.ndarray]) -> tuple[Layout, tuple[int, ...], list[Any], list[int]]:
    """The layout of iterating ``shape`` over ``tensors``, the collapsed shape, the arrays the
    kernel reads and the element strides it takes as arguments. An input is a flat view
    (``c``), a one-element view (``z``), or, when some input is strided, the flat memory it
    spans read at an offset built from the coordinates: ``r`` when its last collapsed axis is
    contiguous, ``b`` when it is broadcast along it, ``f`` otherwise (its strides but that of
    ``r``/``b``'s last axis are arguments); a view with a negative stride is read through the
    collapsed coordinates (``s``)."""
    return _plan(shape, tensors)[:4]


def reduce_plan(
    shape: tuple[int, ...], axes: tuple[int, ...], tensors: list[np.ndarray], outs: list[np.ndarray], red: np.ndarray
) -> tuple[RowLayout, tuple[int, ...], tuple[int, ...], list[Any], list[Any], Any]:
    """The loop nest of reducing ``axes`` of ``shape``: the kept and the reduced axes each
    collapsed over every tensor and full-size output; returns the layout, the two collapsed
    shapes, the views the kernel reads and writes (indexed ``[kept.., reduced..]``) and the
    reduced result viewed over the kept axes."""
    rank = len(shape)
    kept = [d for d in range(rank) if d not in axes]
    tensors = [_fit(t, shape) for t in tensors]
    strides = []
    for t in [*tensors, *outs]:
        pad = rank - t.ndim
        strides.append([0] * pad + [0 if t.shape[d] == 1 else t.strides[d] // t.itemsize for d in range(t.ndim)])
    kshape, kst = collapse(tuple(shape[d] for d in kept), [tuple(st[d] for d in kept) for st in strides])
    rshape, rst = collapse(tuple(shape[d] for d in axes), [tuple(st[d] for d in axes) for st in strides])
    modes: list[str] = []
    views: list[Any] = []
    for k, t in enumerate([*tensors, *outs]):
        st = kst[k] + rst[k]
        if k < len(tensors) and all(s == 0 for s in st):
            modes.append("z")
            views.append(np.lib.stride_tricks.as_strided(t, shape=(1,), strides=(t.itemsize,)))
        else:
            if k < len(tensors):
                modes.append("s")
            views.append(
                np.lib.stride_tricks.as_strided(t, shape=kshape + rshape, strides=tuple(s * t.itemsize for s in st))
            )
    n = len(tensors)
    red_view = red.reshape(kshape)
    return RowLayout(tuple(modes), len(kshape), len(rshape)), kshape, rshape, views[:n], views[n:], red_view


#: a cached launch of an elementwise kernel (FusedKernels._launch): the compiled kernel, its
#: leading arguments (element count, collapsed shape, strides), per tensor input how to view it
#: (None: ``reshape(-1)``, a contiguous array's flat view; else the shape and byte strides of
#: :func:`plan`'s ``as_strided`` view), the outputs' numpy dtypes and how to cut the kernel's
#: arguments after the head for a part of the range (:class:`Cuts`)
Launch = tuple[
    Any, tuple[int, ...], tuple[tuple[tuple[int, ...], tuple[int, ...]] | None, ...], tuple[np.dtype, ...], "Cuts"
]


class Cuts:
    """How a part ``[lo, hi)`` of an elementwise kernel's outermost loop is called: the loop's
    length ``count`` (the first collapsed axis, or every element of a flat loop), the elements
    an outer step covers (``inner``), the collapsed shape's other axes and the stride arguments,
    and per argument after the head how to cut it: None (a scalar or a one-element view: as
    is), -1 (a view over the collapsed shape: its rows ``lo:hi``), else the element stride of
    the first axis (flat memory: from ``lo * stride`` on)."""

    __slots__ = ("count", "inner", "rank", "tail", "args", "heavy")

    def __init__(
        self, count: int, inner: int, rank: int, tail: tuple[int, ...], args: tuple[int | None, ...], heavy: bool
    ) -> None:
        self.count, self.inner, self.rank, self.tail, self.args = count, inner, rank, tail, args
        #: whether the program has a transcendental op (compute-bound: split from fewer elements)
        self.heavy = heavy

    def part(self, fn: Any, args: list[Any], lo: int, hi: int) -> None:
        """Run kernel ``fn`` over outer indices ``[lo, hi)``; ``args`` are the arguments after the head."""
        head = ((hi - lo) * self.inner, hi - lo, *self.tail) if self.rank else (hi - lo,)
        cut = [a if c is None else a[lo:hi] if c < 0 else a[lo * c :] for a, c in zip(args, self.args)]
        fn(*head, *cut)


#: cached launches kept before the cache starts over (a few per region of a training step)
_MAX_LAUNCHES = 4096


def _as_strided(t: np.ndarray, shape: tuple[int, ...], how: tuple[tuple[int, ...], tuple[int, ...]]) -> np.ndarray:
    """:func:`plan`'s view of a tensor input that is not one contiguous run, from its cached recipe."""
    return np.lib.stride_tricks.as_strided(_fit(t, shape), shape=how[0], strides=how[1])


def _sole_view(a: np.ndarray) -> bool:
    """Whether every array ``a`` views (its ``base`` chain) is held by nothing but its view: then
    writing ``a`` changes no other array's values (a kernel's result is a view of its flat
    output; a slice of a tensor another one holds is not)."""
    b = a.base
    while b is not None:
        if type(b) is not np.ndarray or sys.getrefcount(b) > _BASE_REFS:
            return False
        b = b.base
    return True


def _calibrate_base() -> int:
    """References :func:`_sole_view` sees to a base that only its view holds."""
    v = np.empty(2).reshape(1, 2)
    b = v.base
    return sys.getrefcount(b)


_BASE_REFS = _calibrate_base()


def _destinations(
    prog: FusedProgram, operands: list[Any], shape: tuple[int, ...], outs: list[Any]
) -> tuple[tuple[int, ...], list[Any]]:
    """Per output, the input it is stored into in place (-1: none; all -1 gives ``()``) and the
    array the kernel writes (None: a fresh one). An offered array (C-contiguous, writable, of
    the output's shape and dtype, viewing no array something else holds) is stored into in
    place when it is exactly one contiguous tensor operand that no other output takes, written
    directly when it overlaps no operand, and left alone otherwise (a partial overlap, a
    broadcast or strided operand over it)."""
    dts = prog.value_dtypes()
    writes = []
    given: list[Any] = []
    taken: set[int] = set()
    for k, d in enumerate(outs):
        j_in, g = -1, None
        if (
            d is not None
            and type(d) is np.ndarray
            and d.shape == shape
            and d.flags.c_contiguous
            and d.flags.writeable
            and d.dtype == as_dtype(dts[prog.outputs[k]]).numpy
            and _sole_view(d)
        ):
            over = [j for j in prog.tensor_inputs if np.may_share_memory(operands[j], d)]
            if not over:
                g = d
            elif len(over) == 1 and over[0] not in taken:
                t = operands[over[0]]
                if t.shape == shape and t.dtype == d.dtype and t.flags.c_contiguous and t.ctypes.data == d.ctypes.data:
                    j_in, g = over[0], d
                    taken.add(j_in)
        writes.append(j_in)
        given.append(g)
    return (tuple(writes) if taken else ()), given


class FusedKernels:
    """The host's fused kernels by (program, layout), compiled on first use; counts what ran."""

    def __init__(self, kernels: dict[str, Callable[..., Any]]) -> None:
        self.kernels = kernels
        self._cache: dict[tuple[FusedProgram, Layout | RowLayout], Any] = {}
        self._skip: dict[FusedProgram, str | None] = {}
        self._lock = threading.Lock()
        #: kernels compiled (or loaded from numba's disk cache), numba launches (those that also
        #: reduced), op-by-op programs, reductions run tile by tile (tiled_reduce), reductions run
        #: as a numba loop and the reduction kernel (_run_split)
        #: (and outputs stored in place into an operand, run's ``outs``)
        self.counts = {
            "compiled": 0, "numba": 0, "numba_reduce": 0, "op_by_op": 0, "tiled": 0, "split": 0, "in_place": 0,
        }  # fmt: skip
        self._split: dict[FusedProgram, FusedProgram] = {}
        self._launches: dict[tuple[Any, ...], Launch] = {}
        #: the threads large elementwise kernels are split over (ember_cpu.parallel)
        self.splitter = splitter

    def run(
        self, prog: FusedProgram, operands: list[Any], shape: tuple[int, ...], outs: list[Any] | None = None
    ) -> list[Any]:
        """Run ``prog`` over ``shape``; ``operands`` are numpy arrays and Python numbers in input
        order. ``outs``: per output an array (C-contiguous, of ``shape`` and the output's dtype)
        or None, offered to write it into (Backend.fusion_outs): the elementwise numba kernel
        writes one that no operand overlaps, or that is exactly a contiguous operand (``p - lr
        * g`` into ``p``, read at each element before it is stored), and returns it; any other
        offer, and every offer to a region run op by op or with a reduction, is left alone (a
        fresh result, as without ``outs``: a copy would cost what the offer saves)."""
        shape = tuple(shape)
        n = math.prod(shape)
        if n < MIN_ELEMENTS:  # first: hashing a program costs more than a small region's numpy ops
            self.counts["op_by_op"] += 1
            return interpret(prog, operands, shape, self.kernels)
        why = self._skip.get(prog, "")
        if why == "":
            why = self._skip[prog] = compilable(prog)
        if why is not None:
            self.counts["op_by_op"] += 1
            return interpret(prog, operands, shape, self.kernels)
        tensors = [operands[j] for j in prog.tensor_inputs]
        if prog.reduce is not None:
            route = _reduce_route(prog, shape)
            if route == "split":
                return self._run_split(prog, operands, shape)
            if route == "tiled":
                self.counts["tiled"] += 1
                return tiled_reduce(prog, operands, shape, self.kernels)
            return self._run_reduce(prog, operands, shape, tensors, prog.value_dtypes())
        writes: tuple[int, ...] = ()
        given: list[Any] = []
        if outs is not None:
            if len(outs) != len(prog.outputs):
                raise ValueError(f"run: outs has {len(outs)} arrays for {len(prog.outputs)} outputs")
            writes, given = _destinations(prog, operands, shape, outs)
        key = (prog, shape, writes, *[(t.shape, t.strides) for t in tensors])
        launch = self._launches.get(key)
        if launch is None:
            launch = self._launches[key] = self._launch(prog, shape, tensors, writes)
        fn, head, recipes, out_dtypes, cuts = launch
        args: list[Any] = []
        views = iter(zip(tensors, recipes))
        for (dt, kind), v in zip(prog.inputs, operands):
            if kind == "scalar":
                args.append(_scalar(v, dt))
            else:
                t, how = next(views)
                args.append(t.reshape(-1) if how is None else _as_strided(t, shape, how))
        if outs is None:
            results = [np.empty(n, dtype=d) for d in out_dtypes]
            self._call(fn, head, [*args, *results], cuts)
            return [o.reshape(shape) for o in results]
        results = [np.empty(n, dtype=d) if g is None else g.reshape(-1) for g, d in zip(given, out_dtypes)]
        self._call(fn, head, [*args, *[o for o, j in zip(results, writes or (-1,) * len(results)) if j < 0]], cuts)
        self.counts["in_place"] += sum(j >= 0 for j in writes)
        return [o.reshape(shape) if g is None else g for o, g in zip(results, given)]

    def _call(self, fn: Any, head: tuple[int, ...], args: list[Any], cuts: Cuts) -> None:
        """Kernel ``fn`` over its whole range: split over the helper threads
        (:mod:`ember_cpu.parallel`) when it is large, else in one call."""
        split = self.splitter
        if split.wanted(head[0], cuts.heavy):
            split.run(lambda lo, hi: cuts.part(fn, args, lo, hi), cuts.count, -(-CHUNK_ELEMENTS // cuts.inner))
        else:
            fn(*head, *args)
        self.counts["numba"] += 1

    def _launch(
        self, prog: FusedProgram, shape: tuple[int, ...], tensors: list[np.ndarray], writes: tuple[int, ...] = ()
    ) -> Launch:
        """What :meth:`run` needs to call ``prog``'s kernel over ``shape`` on arrays of these
        tensors' shapes and strides, worked out once (:func:`plan` and the kernel lookup took
        about 100 us per call of W2's update regions; see :data:`Launch`); ``writes``: the
        inputs outputs are stored into (:class:`Layout`)."""
        layout, cshape, arrays, steps, firsts = _plan(shape, tensors)
        if any(j >= 0 for j in writes):
            layout = Layout(layout.modes, layout.rank, writes)
        head = (math.prod(shape), *(list(cshape) + steps if layout.rank else ()))
        recipes: list[tuple[tuple[int, ...], tuple[int, ...]] | None] = []
        for t, a in zip(tensors, arrays):
            flat = t.flags.c_contiguous and a.shape == (t.size,) and a.strides == (t.itemsize,)
            recipes.append(None if flat else (a.shape, a.strides))
        if len(self._launches) >= _MAX_LAUNCHES:  # shapes that change every call: start over
            self._launches.clear()
        dts = prog.value_dtypes()
        out_dtypes = tuple(as_dtype(dts[o]).numpy for o in prog.outputs)
        rank = layout.rank
        inner = math.prod(cshape[1:]) if rank else 1
        per: list[int | None] = []
        modes = iter(zip(layout.modes, firsts))
        for _, kind in prog.inputs:
            if kind == "scalar":
                per.append(None)
                continue
            mode, first = next(modes)
            per.append(None if mode == "z" else -1 if mode == "s" else first if rank else 1)
        per += [inner] * sum(j < 0 for j in (layout.writes or (-1,) * len(prog.outputs)))
        heavy = any(op in LIBM_OPS or op in VECTOR_F32_OPS for op, _, _ in prog.instructions)
        cuts = Cuts(cshape[0] if rank else head[0], inner, rank, tuple(cshape[1:]) + tuple(steps), tuple(per), heavy)
        return self.kernel(prog, layout), head, tuple(recipes), out_dtypes, cuts

    def _run_split(self, prog: FusedProgram, operands: list[Any], shape: tuple[int, ...]) -> list[Any]:
        """The program's elementwise part as one (vectorised) numba loop that also writes the
        reduced value, then the unfused path's reduction kernel over it, whose result this is
        exactly (see :func:`_reduce_route` for when)."""
        r = prog.reduce
        assert r is not None
        elem = self._split.get(prog)
        if elem is None:
            outs = prog.outputs if r.value in prog.outputs else (*prog.outputs, r.value)
            elem = self._split[prog] = FusedProgram(prog.inputs, prog.instructions, outs)
        values = self.run(elem, operands, shape)
        v = values[elem.outputs.index(r.value)]
        self.counts["split"] += 1
        red = np.asarray(self.kernels[r.op](v, axes=r.axes, keepdims=r.keepdims), order="C")  # 0-d stays 0-d
        return [*values[: len(prog.outputs)], red]

    def _run_reduce(
        self, prog: FusedProgram, operands: list[Any], shape: tuple[int, ...], tensors: list[Any], dts: list[str]
    ) -> list[Any]:
        """One numba loop nest computing the program and folding its reduced value row by row."""
        r = prog.reduce
        assert r is not None
        outs = [np.empty(shape, dtype=as_dtype(dts[o]).numpy) for o in prog.outputs]
        red = np.empty(r.shape(shape), dtype=as_dtype(dts[r.value]).numpy)
        layout, kshape, rshape, views, out_views, red_view = reduce_plan(shape, r.axes, tensors, outs, red)
        fn = self.kernel(prog, layout)
        args: list[Any] = [*kshape, *rshape]
        it = iter(views)
        for (dt, kind), v in zip(prog.inputs, operands):
            args.append(_scalar(v, dt) if kind == "scalar" else next(it))
        fn(*args, *out_views, red_view)
        self.counts["numba"] += 1
        self.counts["numba_reduce"] += 1
        return [*outs, red]

    def kernel(self, prog: FusedProgram, layout: Layout | RowLayout) -> Any:
        """The compiled dispatcher of ``prog`` under ``layout`` (generated and imported on first use)."""
        key = (prog, layout)  # a RowLayout for a program with a reduction
        found = self._cache.get(key)
        if found is None:
            with self._lock:
                found = self._cache.get(key)
                if found is None:
                    found = self._cache[key] = _load(prog, layout)
                    self.counts["compiled"] += 1
        return found


def _scalar(value: Any, dt: str) -> Any:
    """A Python number as a numpy scalar of the input's dtype (numba types the argument by it)."""
    return as_dtype(dt).numpy.type(value)


#: the modification time every generated file gets: older numba releases stamp a cached function by its
#: source file's (mtime, size) (newer ones by a hash of its text), so rewriting the same text keeps the stamp
_SOURCE_MTIME_NS = 1_000_000_000 * 10**9


def _private(folder: os.PathLike[str]) -> bool:
    """Whether ``folder`` is this user's and not writable by everyone (numba loads its cached kernels
    from there); a group-writable one passes, as a umask of 002 (one group per user) makes them."""
    if not hasattr(os, "geteuid"):  # no POSIX owners (Windows): the user's cache directory is trusted
        return True
    st = os.stat(folder)
    return st.st_uid == os.geteuid() and not st.st_mode & 0o002


def _source(prog: FusedProgram, layout: Layout | RowLayout, *, cache: bool) -> str:
    if isinstance(layout, RowLayout):
        return reduce_source(prog, layout, cache=cache)
    return source(prog, layout, cache=cache)


def _load(prog: FusedProgram, layout: Layout | RowLayout) -> Any:
    """Generate the kernel's module and import it: from a file under the cache directory when the
    on-disk cache is on (numba's ``cache=True`` needs a real source file), else from memory."""
    disk = config.kernel_cache_enabled()
    text = _source(prog, layout, cache=disk)
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    name = f"ember_cpu_fused_{digest}"
    if disk:
        folder = config.cache_dir() / "cpu-numba"
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not _private(folder):
                raise PermissionError(f"{folder} is not this user's or is writable by everyone")
            # the file is written from the text generated here every time and never read back:
            # it only names the code for numba's cache; what runs is this process's own text
            path = folder / f"{name}.py"
            tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_text(text, encoding="utf-8")
            os.utime(tmp, ns=(_SOURCE_MTIME_NS, _SOURCE_MTIME_NS))
            os.replace(tmp, path)
            module = types.ModuleType(name)
            module.__file__ = str(path)
            sys.modules[name] = module  # numba's cache locates the function through its module
            exec(compile(text, str(path), "exec"), module.__dict__)  # noqa: S102 - our own generated source
            return getattr(module, KERNEL_NAME)
        except OSError:  # an unwritable or shared cache folder: compile in memory
            text = _source(prog, layout, cache=False)
    namespace: dict[str, Any] = {"__name__": name}
    exec(compile(text, f"<{name}>", "exec"), namespace)  # noqa: S102 - our own generated source
    return namespace[KERNEL_NAME]

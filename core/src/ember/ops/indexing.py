"""Indexing: gather / scatter_add / index_put (primitives), take, one_hot, nonzero, and the
``x[key]`` / ``x[key] = v`` machinery with numpy semantics (ints, slices, None, ``...``,
boolean masks, integer tensors)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..autodiff.mode import _STATE as _GRAD
from ..creation import arange, full, tensor, zeros
from ..creation import tensor as _t
from ..dispatch import apply, define, is_tensor
from ..dtypes import bool_, int64
from ..errors import AutodiffError, DTypeError, EmberIndexError, InvalidArgumentError, ShapeError
from ..lazy.jit import set_data
from ..shapes import broadcast_shapes, normalize_axis
from .elementwise import INT, _tensor_arg, where
from .movement import broadcast_to, expand_dims, flip, permute_dims, reshape, slice_tensor, stack

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = [
    "take_along_axis", "scatter_add", "index_put", "take", "getitem", "setitem", "one_hot",
    "nonzero", "argwhere",
]  # fmt: skip


def _zeros(x: Tensor) -> Tensor:

    return zeros(x._shape, dtype=x._dtype, device=x._device)


def _gather_vjp(g: Tensor, out: Tensor, x: Tensor, index: Tensor, axis: int) -> tuple[Any, ...]:
    return scatter_add(_zeros(x), index, g, axis), None


def _scatter_add_vjp(g: Tensor, out: Tensor, a: Tensor, index: Tensor, values: Tensor, axis: int) -> tuple[Any, ...]:
    return (g if a._rg else None), None, (take_along_axis(g, index, axis) if values._rg else None)


def _index_put_vjp(
    g: Tensor, out: Tensor, a: Tensor, values: Tensor, *indices: Tensor, accumulate: bool
) -> tuple[Any, ...]:
    ga = None
    if a._rg:
        ga = g if accumulate else index_put(g, indices, 0.0)
    gv = _advanced_take(g, indices) if values._rg else None
    return (ga, gv) + (None,) * len(indices)


GATHER = define("gather", kind="indexing", primitive=True, vjp=_gather_vjp)
SCATTER_ADD = define("scatter_add", kind="indexing", primitive=True, vjp=_scatter_add_vjp)
INDEX_PUT = define("index_put", kind="indexing", primitive=True, vjp=_index_put_vjp)


def _check_index(index: Tensor, op: str) -> None:
    if index._dtype not in INT:
        raise DTypeError(f"{op}: index must be an integer tensor, got {index._dtype}")


def take_along_axis(x: Any, indices: Any, axis: int = -1) -> Tensor:
    """Pick ``x[..., indices[..., i, ...], ...]`` along ``axis`` (numpy ``take_along_axis``)."""
    x = _tensor_arg(x, "take_along_axis")
    index = _tensor_arg(indices, "take_along_axis", x)
    _check_index(index, "take_along_axis")
    if index.ndim != x.ndim:
        raise ShapeError(f"take_along_axis: indices have {index.ndim} dims but x has {x.ndim}")
    ax = normalize_axis(axis, x.ndim, "take_along_axis")
    if index._dtype is not int64:
        index = index.astype(int64)
    index = _wrap_negative(index, x._shape[ax], "take_along_axis")
    outer = broadcast_shapes(
        tuple(1 if i == ax else d for i, d in enumerate(x._shape)),
        tuple(1 if i == ax else d for i, d in enumerate(index._shape)),
        op="take_along_axis",
    )
    xs = tuple(x._shape[ax] if i == ax else d for i, d in enumerate(outer))
    ishape = tuple(index._shape[ax] if i == ax else d for i, d in enumerate(outer))
    x = broadcast_to(x, xs)
    index = broadcast_to(index, ishape)
    return apply(GATHER, (x, index), {"axis": ax}, ishape, x._dtype)


def scatter_add(x: Any, indices: Any, values: Any, axis: int) -> Tensor:
    """A copy of ``x`` with ``values`` added at ``indices`` along ``axis`` (repeats add up)."""
    x = _tensor_arg(x, "scatter_add")
    index = _tensor_arg(indices, "scatter_add", x)
    _check_index(index, "scatter_add")
    values = _tensor_arg(values, "scatter_add", x)
    ax = normalize_axis(axis, x.ndim, "scatter_add")
    if index._dtype is not int64:
        index = index.astype(int64)
    if values._dtype is not x._dtype:
        values = values.astype(x._dtype)
    values = broadcast_to(values, index._shape) if values._shape != index._shape else values
    for i, (d, e) in enumerate(zip(x._shape, index._shape)):
        if i != ax and d != e:
            raise ShapeError(
                f"scatter_add: indices shape {index._shape} must match x shape {x._shape} outside axis {ax}"
            )
    if index.ndim != x.ndim:
        raise ShapeError(f"scatter_add: indices have {index.ndim} dims but x has {x.ndim}")
    index = _wrap_negative(index, x._shape[ax], "scatter_add")
    return apply(SCATTER_ADD, (x, index, values), {"axis": ax}, x._shape, x._dtype)


def _wrap_negative(index: Tensor, n: int, op: str = "index") -> Tensor:
    """Map negative indices to ``n + i``; on synchronous backends also check the range.

    The check reads the index range back to the host. Backends that queue work
    (``Backend.cheap_readback = False``: GPUs) skip it rather than stall every gather; their
    kernels clamp out-of-range indices instead of faulting.
    """
    if index.size == 0:
        return index
    if not index._device.backend.cheap_readback:
        return where(index < 0, index + n, index)
    lo = int(index.min().item())
    hi = int(index.max().item())
    if lo < -n or hi >= n:
        bad = hi if hi >= n else lo
        raise EmberIndexError(f"index {bad} is out of bounds for an axis of size {n}; valid indices are {-n}..{n - 1}")
    if lo < 0:
        index = where(index < 0, index + n, index)
    return index


def index_put(x: Any, indices: tuple[Any, ...], values: Any, accumulate: bool = False) -> Tensor:
    """A copy of ``x`` with ``x[indices] = values`` (integer tensors index the leading axes)."""
    x = _tensor_arg(x, "index_put")
    idx = [_tensor_arg(i, "index_put", x) for i in indices]
    if len(idx) > x.ndim:
        raise EmberIndexError(f"index_put: {len(idx)} index tensors for a tensor with {x.ndim} dims")
    for i in idx:
        _check_index(i, "index_put")
    idx = [(i if i._dtype is int64 else i.astype(int64)) for i in idx]
    idx = [_wrap_negative(i, x._shape[k], "index_put") for k, i in enumerate(idx)]
    bshape = broadcast_shapes(*(i._shape for i in idx), op="index_put") if idx else ()
    idx = [broadcast_to(i, bshape) for i in idx]
    target = bshape + x._shape[len(idx) :]
    if is_tensor(values):
        vals = values if values._dtype is x._dtype else values.astype(x._dtype)
    else:
        vals = full((), values, dtype=x._dtype, device=x._device)
    if vals._shape != target:
        if broadcast_shapes(vals._shape, target, op="index_put") != target:
            raise ShapeError(f"index_put: values of shape {vals._shape} do not fit the indexed shape {target}")
        vals = broadcast_to(vals, target)
    return apply(INDEX_PUT, (x, vals, *idx), {"accumulate": bool(accumulate)}, x._shape, x._dtype)


def _take_composite(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    shape = tuple(indices._shape[0] if i == axis else d for i, d in enumerate(x._shape))
    index = reshape(indices, tuple(-1 if i == axis else 1 for i in range(x.ndim)))
    return apply(GATHER, (x, broadcast_to(index, shape)), {"axis": axis}, shape, x._dtype)


def _take_vjp(g: Tensor, out: Tensor, x: Tensor, indices: Tensor, axis: int) -> tuple[Any, ...]:
    index = broadcast_to(reshape(indices, tuple(-1 if i == axis else 1 for i in range(x.ndim))), g._shape)
    return scatter_add(_zeros(x), index, g, axis), None


TAKE = define(
    "take",
    kind="indexing",
    native="take(a, indices, *, axis) -> handle  # indices: 1-D int64",
    composite=_take_composite,
    vjp=_take_vjp,
)


def take(x: Any, indices: Any, axis: int | None = None) -> Tensor:
    """Elements of ``x`` at 1-D ``indices`` along ``axis`` (flattened when None)."""
    x = _tensor_arg(x, "take")
    index = _tensor_arg(indices, "take", x)
    _check_index(index, "take")
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    ax = normalize_axis(axis, x.ndim, "take")
    if index.ndim != 1:
        flat = take(x, reshape(index, (-1,)), ax)
        return reshape(flat, x._shape[:ax] + index._shape + x._shape[ax + 1 :])
    if index._dtype is not int64:
        index = index.astype(int64)
    index = _wrap_negative(index, x._shape[ax], "take")
    shape = tuple(index._shape[0] if i == ax else d for i, d in enumerate(x._shape))
    return apply(TAKE, (x, index), {"axis": ax}, shape, x._dtype)


def check_class_range(index: Tensor, n: int, op: str, argument: str, ignore: int | None = None) -> None:
    """Refuse class indices outside ``[0, n)`` (``ignore`` exempt), on synchronous backends only.

    Like ``_wrap_negative``, the check reads the range back to the host, so backends that queue
    work (``cheap_readback = False``) skip it rather than stall on every call.
    """
    if index.size == 0 or not index._device.backend.cheap_readback:
        return
    valid = index if ignore is None else where(index == ignore, 0, index)
    lo = int(valid.min().item())
    hi = int(valid.max().item())
    if lo < 0 or hi >= n:
        bad = hi if hi >= n else lo
        also = f" or ignore_index={ignore}" if ignore is not None else ""
        raise EmberIndexError(
            f"{op}: {argument} holds class {bad}, outside 0..{n - 1} for {n} classes; "
            f"each entry must be in 0..{n - 1}{also} (check the number of classes and the labels)"
        )


def one_hot(indices: Any, num_classes: int, dtype: Any = None) -> Tensor:
    """``indices[..., None] == arange(num_classes)`` as ``dtype`` (float32 by default)."""

    index = _tensor_arg(indices, "one_hot")
    _check_index(index, "one_hot")
    if not isinstance(num_classes, int) or isinstance(num_classes, bool) or num_classes < 1:
        raise InvalidArgumentError(f"one_hot: num_classes must be a positive int, got {num_classes!r}")
    check_class_range(index, num_classes, "one_hot", "indices")
    return one_hot_unchecked(index, num_classes, "float32" if dtype is None else dtype)


def one_hot_unchecked(index: Tensor, num_classes: int, dtype: Any) -> Tensor:
    """:func:`one_hot` of indices already known to be in range (a loss's backward re-uses the
    forward's targets: checking them again would read them back to the host a second time)."""
    classes = arange(num_classes, device=index._device)
    index = index if index._dtype is int64 else index.astype(int64)  # no clone of int64 indices
    return (expand_dims(index, -1) == classes).astype(dtype)


def nonzero(x: Any) -> tuple[Tensor, ...]:
    """Indices of nonzero elements, one int64 tensor per axis (reads values back to the host)."""

    x = _tensor_arg(x, "nonzero")
    if x.ndim == 0:
        raise ShapeError("nonzero: 0-d tensors are not supported; use x.reshape(1)")
    found = np.nonzero(x.numpy())
    return tuple(tensor(np.asarray(f, dtype=np.int64), device=x._device) for f in found)


def argwhere(x: Any) -> Tensor:
    """Indices of nonzero elements as an (n, ndim) int64 tensor."""

    parts = nonzero(x)
    return stack(parts, axis=1)


# -- x[key] -------------------------------------------------------------------------------


def _is_int(k: Any) -> bool:
    return isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))


def _expand_key(x: Tensor, key: Any) -> list[tuple[str, Any]]:
    """Turn a key into one entry per source axis (plus 'new' entries for None)."""
    if not isinstance(key, tuple):
        key = (key,)
    entries: list[tuple[str, Any]] = []
    for k in key:
        if k is None:
            entries.append(("new", None))
        elif k is Ellipsis:
            entries.append(("ellipsis", None))
        elif isinstance(k, slice):
            entries.append(("slice", k))
        elif _is_int(k):
            entries.append(("int", int(k)))
        elif isinstance(k, (bool, np.bool_)):
            entries.append(("mask", tensor(bool(k), device=x._device)))
        elif isinstance(k, (str, bytes, float)):
            raise EmberIndexError(
                f"index: {k!r} ({type(k).__name__}) is not a valid index; use ints, slices, None, ..., "
                f"bool masks or integer tensors"
            )
        else:
            t = k if is_tensor(k) else _tensor_arg(k, "index", x)
            if t._dtype is bool_:
                entries.append(("mask", t))
            elif t._dtype in INT:
                entries.append(("adv", t))
            else:
                raise EmberIndexError(
                    f"index: only ints, slices, None, ..., bool masks and integer tensors are valid "
                    f"indices; got a tensor of dtype {t._dtype}"
                )
    consumed = sum(1 if kind in ("slice", "int", "adv") else (v.ndim if kind == "mask" else 0) for kind, v in entries)
    ellipses = [i for i, (kind, _) in enumerate(entries) if kind == "ellipsis"]
    if len(ellipses) > 1:
        raise EmberIndexError("index: an index can only have a single ellipsis (...)")
    if consumed > x.ndim:
        raise EmberIndexError(f"index: too many indices for a tensor with {x.ndim} dims ({consumed} given)")
    fill = [("slice", slice(None))] * (x.ndim - consumed)
    if ellipses:
        i = ellipses[0]
        entries = entries[:i] + fill + entries[i + 1 :]
    else:
        entries = entries + fill
    # boolean masks become integer index tensors (this reads the mask back to the host)
    out: list[tuple[str, Any]] = []
    axis = 0
    for kind, v in entries:
        if kind == "mask":
            dims = x._shape[axis : axis + v.ndim]
            # a mask axis of length 0 selects nothing, whatever the length of the axis it indexes
            # (the Array API suite's rule); otherwise the lengths must match
            if v.ndim and (len(dims) != v.ndim or any(m not in (d, 0) for m, d in zip(v._shape, dims))):
                raise EmberIndexError(f"index: boolean mask of shape {v._shape} does not match the indexed dims {dims}")
            if v.ndim == 0:
                out.append(("newmask", _t(np.nonzero(np.atleast_1d(v.numpy()))[0], device=x._device)))
                continue
            for part in nonzero(v):
                out.append(("adv", part))
            axis += v.ndim
        else:
            out.append((kind, v))
            if kind != "new":
                axis += 1
    return out


def _basic(x: Tensor, entries: list[tuple[str, Any]]) -> tuple[Tensor, list[tuple[str, Any]]]:
    """Apply slices and drop int axes when there is no advanced index; insert None axes."""
    starts, stops, steps, flips = [], [], [], []
    axis = 0
    for kind, v in entries:
        if kind in ("new", "newmask"):
            continue
        n = x._shape[axis]
        if kind == "slice":
            if v.step == 0:
                raise InvalidArgumentError(f"index: slice {v} has step 0; a slice step must be nonzero")
            start, stop, step = v.indices(n)
            if step < 0:
                # walk backwards: take the forward slice that covers the same elements, then flip
                count = max(0, -(-(stop - start) // step))
                first = start + (count - 1) * step if count else 0
                start, stop, step = (first, start + 1, -step) if count else (0, 0, 1)
                flips.append(axis)
            starts.append(start)
            stops.append(stop)
            steps.append(step)
        elif kind == "int":
            i = v + n if v < 0 else v
            if not 0 <= i < n:
                raise EmberIndexError(f"index {v} is out of bounds for axis {axis} with size {n}")
            starts.append(i)
            stops.append(i + 1)
            steps.append(1)
        else:  # advanced: keep the whole axis for now
            starts.append(0)
            stops.append(n)
            steps.append(1)
        axis += 1
    y = slice_tensor(x, starts, stops, steps)
    if flips:
        y = flip(y, tuple(flips))
    return y, entries


def getitem(x: Tensor, key: Any) -> Tensor:
    """``x[key]`` with numpy semantics; the result never aliases writable memory of ``x``."""
    entries = _expand_key(x, key)
    advanced = any(kind in ("adv", "newmask") for kind, _ in entries)
    if advanced:
        # integers next to advanced indices act as advanced indices (numpy)

        entries = [("adv", tensor(v, device=x._device)) if kind == "int" else (kind, v) for kind, v in entries]
    y, entries = _basic(x, entries)
    if not advanced:
        shape = []
        axis = 0
        for kind, _ in entries:
            if kind == "new":
                shape.append(1)
            elif kind == "slice":
                shape.append(y._shape[axis])
                axis += 1
            else:  # int
                axis += 1
        return reshape(y, tuple(shape))
    # insert new axes, then gather the advanced axes
    shape = []
    axis = 0
    plain: list[tuple[str, Any]] = []
    for kind, v in entries:
        if kind == "new":
            shape.append(1)
            plain.append(("slice", None))
        elif kind == "newmask":
            shape.append(1)
            plain.append(("adv", v))
        else:
            shape.append(y._shape[axis])
            plain.append((kind, v))
            axis += 1
    y = reshape(y, tuple(shape))
    positions = [i for i, (kind, _) in enumerate(plain) if kind == "adv"]
    return _gather_advanced(y, positions, [plain[i][1] for i in positions])


def _advanced_take(x: Tensor, indices: tuple[Tensor, ...]) -> Tensor:
    """``x[i0, i1, ...]`` for integer tensors indexing the leading axes."""
    return _gather_advanced(x, list(range(len(indices))), list(indices))


def _gather_advanced(y: Tensor, positions: list[int], index: list[Tensor]) -> Tensor:
    bshape = broadcast_shapes(*(t._shape for t in index), op="index")
    rest = [i for i in range(y.ndim) if i not in positions]
    moved = permute_dims(y, positions + rest)
    dims = [y._shape[p] for p in positions]
    linear = None
    for t, n in zip(index, dims):
        t = _wrap_negative(t.astype(int64) if t._dtype is not int64 else t, n, "index")
        linear = t if linear is None else linear * n + t
    lead = 1  # written out: -1 cannot be inferred when a kept axis is 0
    for n in dims:
        lead *= n
    flat = reshape(moved, (lead,) + tuple(y._shape[r] for r in rest))
    picked = take(flat, reshape(broadcast_to(linear, bshape), (-1,)), axis=0)
    out = reshape(picked, bshape + tuple(y._shape[r] for r in rest))
    adjacent = positions == list(range(positions[0], positions[0] + len(positions)))
    if adjacent and positions[0] > 0:
        nb = len(bshape)
        lead = positions[0]
        order = list(range(nb, nb + lead)) + list(range(nb)) + list(range(nb + lead, out.ndim))
        out = permute_dims(out, order)
    return out


def setitem(x: Tensor, key: Any, value: Any) -> None:
    """``x[key] = value``: rebinds ``x`` to an updated copy (not differentiable)."""
    if _GRAD.enabled and x._rg:
        raise AutodiffError(
            "x[key] = value on a tensor that requires grad is not differentiable; build the "
            "result with ember.where / index ops, or do the update inside ember.no_grad()"
        )

    if not (is_tensor(value) or isinstance(value, (int, float, bool))):
        value = _tensor_arg(value, "setitem", x)
    positions = getitem(arange(x.size, device=x._device).reshape(x._shape), key)
    flat = reshape(x, (-1,))
    vals = value
    if is_tensor(value):
        if value._device is not x._device and not value._device.same_hardware(x._device):
            raise ShapeError(
                f"setitem: the value lives on {value._device}, the tensor on {x._device}; move it with .to()"
            )
        vals = broadcast_to(value.astype(x._dtype) if value._dtype is not x._dtype else value, positions._shape)
        vals = reshape(vals, (-1,))
    updated = index_put(flat, (reshape(positions, (-1,)),), vals)
    set_data(x, reshape(updated, x._shape)._data)

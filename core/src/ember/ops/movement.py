"""Movement ops: reshape, permute, expand, slice, pad, flip, concat (primitives) and the
composites built from them (squeeze, stack, split, tile, repeat, roll, tril/triu...)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .. import dispatch as _dispatch
from ..amp import PROMOTE
from ..creation import arange, tensor, zeros
from ..dispatch import apply, define, is_tensor, lookup
from ..dtypes import int64, result_type
from ..errors import ArgumentTypeError, InvalidArgumentError, ShapeError
from ..shapes import as_int, as_ints, as_shape, broadcast_shapes, infer_reshape, normalize_axes, normalize_axis
from .elementwise import _tensor_arg, where

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = [
    "reshape", "permute_dims", "broadcast_to", "slice_tensor", "pad", "flip", "concat",
    "squeeze", "expand_dims", "swapaxes", "moveaxis", "flatten", "stack", "split", "chunk",
    "unstack", "tile", "repeat", "roll", "tril", "triu", "meshgrid", "broadcast_arrays",
]  # fmt: skip


def _reshape_vjp(g: Tensor, out: Tensor, x: Tensor, shape: Any) -> tuple[Any]:
    return (g.reshape(x._shape),)


def _permute_vjp(g: Tensor, out: Tensor, x: Tensor, axes: tuple[int, ...]) -> tuple[Any]:
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[a] = i
    return (permute_dims(g, tuple(inverse)),)


def _expand_vjp(g: Tensor, out: Tensor, x: Tensor, shape: Any) -> tuple[Any]:
    return (g,)  # the engine sums broadcast axes back to x's shape


def _axis_shape(k: int, ndim: int) -> tuple[int, ...]:
    """The shape (1, ..., -1, ..., 1) that lays a 1-D tensor along axis ``k``."""
    return tuple(-1 if i == k else 1 for i in range(ndim))


def _slice_vjp(g: Tensor, out: Tensor, x: Tensor, starts: Any, stops: Any, steps: Any) -> tuple[Any]:
    if all(s == 1 for s in steps):
        pads = tuple((st, dim - sp) for st, sp, dim in zip(starts, stops, x._shape))
        return (pad(g, pads),)
    # strided: scatter the gradient into zeros through an index grid, with the index_put primitive
    # (reached through the op table: ember.ops.indexing builds on this module, not the reverse)
    grad = zeros(x._shape, dtype=g._dtype, device=g._device)
    index = tuple(
        broadcast_to(
            arange(st, sp, sd, device=g._device).reshape(tuple(-1 if i == k else 1 for i in range(x.ndim))), g._shape
        )
        for k, (st, sp, sd) in enumerate(zip(starts, stops, steps))
    )
    return (apply(lookup("index_put"), (grad, g, *index), {"accumulate": False}, x._shape, g._dtype),)


def _pad_vjp(g: Tensor, out: Tensor, x: Tensor, pads: Any, value: Any) -> tuple[Any]:
    starts = tuple(lo for lo, _ in pads)
    stops = tuple(lo + d for (lo, _), d in zip(pads, x._shape))
    return (slice_tensor(g, starts, stops, (1,) * x.ndim),)


def _concat_vjp(g: Tensor, out: Tensor, *inputs: Tensor, axis: int) -> tuple[Any, ...]:
    grads = []
    offset = 0
    for t in inputs:
        n = t._shape[axis]
        starts = tuple(offset if i == axis else 0 for i in range(g.ndim))
        stops = tuple(offset + n if i == axis else d for i, d in enumerate(g._shape))
        grads.append(slice_tensor(g, starts, stops, (1,) * g.ndim) if t._rg else None)
        offset += n
    return tuple(grads)


RESHAPE = define("reshape", kind="movement", primitive=True, vjp=_reshape_vjp)
PERMUTE = define("permute", kind="movement", primitive=True, vjp=_permute_vjp)
EXPAND = define("expand", kind="movement", primitive=True, vjp=_expand_vjp)
SLICE = define("slice", kind="movement", primitive=True, vjp=_slice_vjp)
PAD = define("pad", kind="movement", primitive=True, vjp=_pad_vjp)
FLIP = define("flip", kind="movement", primitive=True, vjp=lambda g, out, x, axes: (flip(g, axes),))
CONCAT = define("concat", kind="movement", autocast=PROMOTE, primitive=True, vjp=_concat_vjp)


def reshape(x: Any, /, shape: Any, *, copy: bool | None = None) -> Tensor:
    """The same elements in a new shape (one entry may be -1)."""
    if type(x) is not _dispatch._TENSOR:
        x = _tensor_arg(x, "reshape")
    new = infer_reshape(x._shape, shape)
    if new == x._shape:
        return x
    return apply(RESHAPE, (x,), {"shape": new}, new, x._dtype)


#: (ndim, axes as given) -> the checked, non-negative permutation, for the permutes a model repeats
_PERMUTATIONS: dict[tuple[int, tuple[Any, ...]], tuple[int, ...]] = {}


def permute_dims(x: Any, axes: Sequence[int]) -> Tensor:
    """Reorder axes: output axis i is input axis ``axes[i]``."""
    x = _tensor_arg(x, "permute_dims")
    shape = x._shape
    if type(axes) is tuple or type(axes) is list:
        key = (len(shape), tuple(axes))
        try:
            norm = _PERMUTATIONS.get(key)
        except TypeError:  # an unhashable entry: the checks below say what is wrong
            norm = key = None
        if norm is None:
            norm = _permutation(x, axes)
            if key is not None:
                if len(_PERMUTATIONS) >= 4096:
                    _PERMUTATIONS.clear()
                _PERMUTATIONS[key] = norm
    else:
        norm = _permutation(x, axes)
    if norm == tuple(range(len(shape))):
        return x
    return apply(PERMUTE, (x,), {"axes": norm}, tuple([shape[a] for a in norm]), x._dtype)


def _permutation(x: Tensor, axes: Sequence[int]) -> tuple[int, ...]:
    """``axes`` checked to be a permutation of ``x``'s axes, made non-negative."""
    norm = tuple(normalize_axis(int(a), x.ndim, "permute_dims", "axes") for a in axes)
    if sorted(norm) != list(range(x.ndim)):
        raise ShapeError(f"permute_dims: axes={tuple(axes)} must be a permutation of 0..{x.ndim - 1}")
    return norm


def broadcast_to(x: Any, shape: Any) -> Tensor:
    """``x`` broadcast to ``shape`` (no copy where the backend can avoid one)."""
    x = _tensor_arg(x, "broadcast_to")
    shp = as_shape(shape, "shape", "broadcast_to")
    if shp == x._shape:
        return x
    if broadcast_shapes(x._shape, shp, op="broadcast_to") != shp:
        raise ShapeError(f"broadcast_to: cannot broadcast shape {x._shape} to {shp}")
    return apply(EXPAND, (x,), {"shape": shp}, shp, x._dtype)


def slice_tensor(x: Tensor, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> Tensor:
    """Basic slicing with normalised, in-range bounds and positive steps (one per axis)."""
    shape = tuple([max(0, -(-(sp - st) // sd)) for st, sp, sd in zip(starts, stops, steps)])
    if shape == x._shape:
        return x
    return apply(SLICE, (x,), {"starts": tuple(starts), "stops": tuple(stops), "steps": tuple(steps)}, shape, x._dtype)


def pad(x: Any, pad_width: Any, value: float = 0) -> Tensor:
    """Constant padding; ``pad_width`` is ((before, after), ...) per axis, or one pair for all."""
    x = _tensor_arg(x, "pad")
    if isinstance(pad_width, int) and not isinstance(pad_width, bool):
        pad_width = ((pad_width, pad_width),) * x.ndim
    if isinstance(pad_width, (str, bytes)) or not isinstance(pad_width, Iterable):
        raise ArgumentTypeError(
            f"pad: pad_width must be an int or a sequence of (before, after) pairs, got {pad_width!r}"
        )
    pad_width = tuple(pad_width)
    if pad_width and all(isinstance(w, int) and not isinstance(w, bool) for w in pad_width) and len(pad_width) <= 2:
        pad_width = ((pad_width[0], pad_width[-1]),)  # numpy: (pad,) or (before, after) for every axis
    pairs = []
    for pair in pad_width:
        widths = as_ints(pair, "pad", "pad_width")
        if len(widths) != 2:
            raise ShapeError(
                f"pad: pad_width={pad_width!r} must be an int or (before, after) pairs, one per axis; "
                f"got the entry {pair!r}"
            )
        pairs.append(widths)
    pads = tuple(pairs)
    if len(pads) == 1 and x.ndim > 1:
        pads = pads * x.ndim
    if len(pads) != x.ndim:
        raise ShapeError(f"pad: pad_width has {len(pads)} pairs but the tensor has {x.ndim} axes")
    if any(lo < 0 or hi < 0 for lo, hi in pads):
        raise ShapeError(f"pad: pad widths must be >= 0, got {pads}")
    if all(lo == 0 and hi == 0 for lo, hi in pads):
        return x
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(x._shape, pads))
    return apply(PAD, (x,), {"pads": pads, "value": value}, shape, x._dtype)


def flip(x: Any, axis: Any = None) -> Tensor:
    """Reverse the order of elements along ``axis`` (all axes when None)."""
    x = _tensor_arg(x, "flip")
    axes = normalize_axes(axis, x.ndim, "flip")
    if not axes:
        return x
    return apply(FLIP, (x,), {"axes": axes}, x._shape, x._dtype)


def concat(arrays: Sequence[Any], axis: int | None = 0) -> Tensor:
    """Join tensors along an existing axis (flattened first when ``axis`` is None)."""
    tensors = [_tensor_arg(a, "concat") for a in arrays]
    if not tensors:
        raise InvalidArgumentError("concat: needs at least one tensor")
    if axis is None:
        tensors = [t.reshape((-1,)) for t in tensors]
        axis = 0
    first = tensors[0]
    if first.ndim == 0:
        raise ShapeError("concat: 0-d tensors cannot be concatenated; use stack")
    ax = normalize_axis(axis, first.ndim, "concat")

    dt = result_type(*tensors) if len(tensors) > 1 else first._dtype
    tensors = [t if t._dtype is dt else t.astype(dt) for t in tensors]
    head, tail = first._shape[:ax], first._shape[ax + 1 :]
    for i, t in enumerate(tensors):  # every shape equal to the first's outside the axis (no generator per tensor)
        s = t._shape
        if len(s) != len(first._shape) or s[:ax] != head or s[ax + 1 :] != tail:
            raise ShapeError(
                f"concat: tensor {i} has shape {t._shape}, which differs from {first._shape} outside axis {ax}"
            )
    if len(tensors) == 1:
        return first
    total = 0
    for t in tensors:
        total += t._shape[ax]
    shape = head + (total,) + tail
    return apply(CONCAT, tuple(tensors), {"axis": ax}, shape, dt)


def stack(arrays: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis."""
    tensors = [_tensor_arg(a, "stack") for a in arrays]
    if not tensors:
        raise InvalidArgumentError("stack: needs at least one tensor")
    shape = tensors[0]._shape
    for i, t in enumerate(tensors):
        if t._shape != shape:
            raise ShapeError(f"stack: tensor {i} has shape {t._shape}, expected {shape}")
    ax = normalize_axis(axis, len(shape) + 1, "stack")
    return concat([expand_dims(t, ax) for t in tensors], axis=ax)


def squeeze(x: Any, axis: Any = None) -> Tensor:
    """Remove axes of length 1 (the given ones, or all when None)."""
    x = _tensor_arg(x, "squeeze")
    if axis is None:
        axes = tuple(i for i, d in enumerate(x._shape) if d == 1)
    else:
        axes = normalize_axes(axis, x.ndim, "squeeze")
        for a in axes:
            if x._shape[a] != 1:
                raise ShapeError(f"squeeze: axis {a} has length {x._shape[a]}, not 1 (shape {x._shape})")
    return reshape(x, tuple(d for i, d in enumerate(x._shape) if i not in axes))


def expand_dims(x: Any, /, axis: Any = 0) -> Tensor:
    """Insert axes of length 1 at ``axis`` (an int or a tuple of ints; ``()`` inserts none)."""
    x = _tensor_arg(x, "expand_dims")
    axes = (axis,) if not isinstance(axis, (tuple, list)) else tuple(axis)
    ndim = x.ndim + len(axes)
    positions = [normalize_axis(a, ndim, "expand_dims") for a in axes]
    if len(set(positions)) != len(positions):
        raise ShapeError(f"expand_dims: axis={axis!r} names one position twice; give each new axis once")
    shape = list(x._shape)
    for ax in sorted(positions):
        shape.insert(ax, 1)
    return reshape(x, tuple(shape))


def swapaxes(x: Any, axis0: int, axis1: int) -> Tensor:
    x = _tensor_arg(x, "swapaxes")
    ndim = len(x._shape)
    a = normalize_axis(axis0, ndim, "swapaxes", "axis0")
    b = normalize_axis(axis1, ndim, "swapaxes", "axis1")
    if a == b:
        return x
    axes = list(range(ndim))
    axes[a], axes[b] = axes[b], axes[a]
    return apply(PERMUTE, (x,), {"axes": tuple(axes)}, tuple([x._shape[i] for i in axes]), x._dtype)


def moveaxis(x: Any, source: Any, destination: Any) -> Tensor:
    x = _tensor_arg(x, "moveaxis")
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ShapeError("moveaxis: source and destination must have the same number of axes")
    src = [normalize_axis(a, x.ndim, "moveaxis", "source") for a in src]
    dst = [normalize_axis(a, x.ndim, "moveaxis", "destination") for a in dst]
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, order)


def flatten(x: Any, start_axis: int = 0, end_axis: int = -1) -> Tensor:
    """Merge axes ``start_axis..end_axis`` into one."""
    x = _tensor_arg(x, "flatten")
    if x.ndim == 0:
        return reshape(x, (1,))
    s = normalize_axis(start_axis, x.ndim, "flatten", "start_axis")
    e = normalize_axis(end_axis, x.ndim, "flatten", "end_axis")
    if e < s:
        raise ShapeError(f"flatten: end_axis ({end_axis}) comes before start_axis ({start_axis})")
    n = 1
    for d in x._shape[s : e + 1]:
        n *= d
    return reshape(x, x._shape[:s] + (n,) + x._shape[e + 1 :])


def _take_slice(x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    """``x[..., start:stop, ...]`` along ``axis`` (0 <= start <= stop <= length), ``x`` itself if whole."""
    shape = x._shape
    if start == 0 and stop == shape[axis]:
        return x
    ndim = len(shape)
    after = shape[axis + 1 :]
    params = {"starts": (0,) * axis + (start,) + (0,) * (ndim - axis - 1), "stops": shape[:axis] + (stop,) + after}
    params["steps"] = (1,) * ndim
    return apply(SLICE, (x,), params, shape[:axis] + (stop - start,) + after, x._dtype)


def split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
    """Split along ``axis`` into equal sections (an int) or at the given indices."""
    x = _tensor_arg(x, "split")
    ax = normalize_axis(axis, x.ndim, "split")
    n = x._shape[ax]
    if not isinstance(indices_or_sections, (list, tuple)) and not is_tensor(indices_or_sections):
        indices_or_sections = as_int(indices_or_sections, "split", "indices_or_sections")
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if k <= 0 or n % k:
            raise ShapeError(f"split: axis {ax} of length {n} does not divide into {k} equal sections")
        bounds = [i * (n // k) for i in range(k + 1)]
    else:
        cuts = indices_or_sections.tolist() if is_tensor(indices_or_sections) else indices_or_sections
        bounds = [0] + [max(0, min(n, i)) for i in as_ints(cuts, "split", "indices_or_sections")] + [n]
    return [_take_slice(x, ax, bounds[i], max(bounds[i], bounds[i + 1])) for i in range(len(bounds) - 1)]


def chunk(x: Any, chunks: int, axis: int = 0) -> list[Tensor]:
    """Split into ``chunks`` pieces of ceil(n / chunks) (the last may be smaller)."""
    x = _tensor_arg(x, "chunk")
    ax = normalize_axis(axis, x.ndim, "chunk")
    n = x._shape[ax]
    chunks = as_int(chunks, "chunk", "chunks")
    if chunks <= 0:
        raise InvalidArgumentError(f"chunk: chunks must be positive, got {chunks}")
    size = -(-n // chunks) if n else 0
    if size == 0:
        return [x]
    return [_take_slice(x, ax, i, min(n, i + size)) for i in range(0, n, size)]


def unstack(x: Any, axis: int = 0) -> tuple[Tensor, ...]:
    """The slices of ``x`` along ``axis``, each without that axis."""
    x = _tensor_arg(x, "unstack")
    ax = normalize_axis(axis, x.ndim, "unstack")
    return tuple(squeeze(_take_slice(x, ax, i, i + 1), ax) for i in range(x._shape[ax]))


def tile(x: Any, reps: Sequence[int]) -> Tensor:
    """Repeat the whole tensor ``reps[i]`` times along axis i."""
    x = _tensor_arg(x, "tile")
    reps = as_ints(reps, "tile", "reps")
    if any(r < 0 for r in reps):
        raise ShapeError(f"tile: reps={reps} must be >= 0")
    nd = max(x.ndim, len(reps))
    reps = (1,) * (nd - len(reps)) + reps
    x = reshape(x, (1,) * (nd - x.ndim) + x._shape)
    # insert a repeat axis before each axis, broadcast, merge
    inter = []
    for d in x._shape:
        inter += [1, d]
    expanded = broadcast_to(reshape(x, tuple(inter)), tuple(v for r, d in zip(reps, x._shape) for v in (r, d)))
    return reshape(expanded, tuple(r * d for r, d in zip(reps, x._shape)))


def repeat(x: Any, repeats: Any, axis: int | None = None) -> Tensor:
    """Repeat each element ``repeats`` times along ``axis`` (flattened when None)."""
    x = _tensor_arg(x, "repeat")
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    ax = normalize_axis(axis, x.ndim, "repeat")
    if isinstance(repeats, int) and repeats < 0:
        raise ShapeError(f"repeat: repeats must be >= 0, got {repeats}")
    if isinstance(repeats, int):
        shape = x._shape
        y = expand_dims(x, ax + 1)
        y = broadcast_to(y, shape[: ax + 1] + (repeats,) + shape[ax + 1 :])
        return reshape(y, shape[:ax] + (shape[ax] * repeats,) + shape[ax + 1 :])
    counts = list(as_ints(repeats.tolist() if is_tensor(repeats) else repeats, "repeat", "repeats"))
    if len(counts) == 1:  # one count broadcasts to every element (Array API)
        return repeat(x, counts[0], axis=ax)
    if any(c < 0 for c in counts):
        raise ShapeError(f"repeat: every repeat count must be >= 0, got {counts}")
    if len(counts) != x._shape[ax]:
        raise ShapeError(f"repeat: {len(counts)} repeat counts for axis {ax} of length {x._shape[ax]}")

    index = tensor([i for i, c in enumerate(counts) for _ in range(c)], dtype=int64, device=x._device)
    shape = x._shape[:ax] + (index._shape[0],) + x._shape[ax + 1 :]
    # the take op through the op table (ember.ops.indexing builds on this module, not the reverse)
    return apply(lookup("take"), (x, index), {"axis": ax}, shape, x._dtype)


def roll(x: Any, shift: Any, axis: Any = None) -> Tensor:
    """Rotate elements by ``shift`` along ``axis`` (the flattened tensor when None)."""
    x = _tensor_arg(x, "roll")
    if axis is None:
        return reshape(roll(reshape(x, (-1,)), shift, 0), x._shape)
    shifts = list(as_ints(shift, "roll", "shift"))
    axes = list(as_ints(axis, "roll", "axis"))
    if len(shifts) != len(axes):
        raise ShapeError(f"roll: shift={shift!r} and axis={axis!r} must have the same length")
    out = x
    for s, a in zip(shifts, axes):
        a = normalize_axis(a, x.ndim, "roll")
        n = x._shape[a]
        if n == 0:
            continue
        s %= n
        if s:
            out = concat([_take_slice(out, a, n - s, n), _take_slice(out, a, 0, n - s)], axis=a)
    return out


def _tri_mask(x: Tensor, k: int, lower: bool) -> Tensor:
    k = as_int(k, "tril" if lower else "triu", "k")

    if x.ndim < 2:
        raise ShapeError(f"{'tril' if lower else 'triu'}: needs at least 2 dimensions, got shape {x._shape}")
    n, m = x._shape[-2], x._shape[-1]
    rows = arange(n, device=x._device).reshape((n, 1))
    cols = arange(m, device=x._device).reshape((1, m))
    return (cols - rows <= k) if lower else (cols - rows >= k)


def tril(x: Any, k: int = 0) -> Tensor:
    """Zero the elements above diagonal ``k`` of the last two axes."""
    x = _tensor_arg(x, "tril")
    return where(_tri_mask(x, k, True), x, _zero_like(x))


def triu(x: Any, k: int = 0) -> Tensor:
    """Zero the elements below diagonal ``k`` of the last two axes."""
    x = _tensor_arg(x, "triu")
    return where(_tri_mask(x, k, False), x, _zero_like(x))


def _zero_like(x: Tensor) -> Any:
    return False if x._dtype.kind == "b" else 0


def meshgrid(*arrays: Any, indexing: str = "xy") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-D tensors (``indexing`` 'xy' or 'ij')."""
    if indexing not in ("xy", "ij"):
        raise InvalidArgumentError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    tensors = [_tensor_arg(a, "meshgrid") for a in arrays]
    for t in tensors:
        if t.ndim != 1:
            raise ShapeError(f"meshgrid: expects 1-D tensors, got shape {t._shape}")
    n = len(tensors)
    sizes = [t._shape[0] for t in tensors]
    if indexing == "xy" and n >= 2:
        sizes[0], sizes[1] = sizes[1], sizes[0]
    out = []
    for i, t in enumerate(tensors):
        pos = i
        if indexing == "xy" and n >= 2 and i < 2:
            pos = 1 - i
        shape = [1] * n
        shape[pos] = t._shape[0]
        out.append(broadcast_to(reshape(t, tuple(shape)), tuple(sizes)))
    return tuple(out)


def broadcast_arrays(*arrays: Any) -> tuple[Tensor, ...]:
    """The tensors broadcast against each other (a tuple, as the Array API says)."""
    tensors = [_tensor_arg(a, "broadcast_arrays") for a in arrays]
    shape = broadcast_shapes(*(t._shape for t in tensors), op="broadcast_arrays")
    return tuple(broadcast_to(t, shape) for t in tensors)


def broadcast_shapes_public(*shapes: Any) -> tuple[int, ...]:
    """The shape that ``shapes`` broadcast to (Array API ``broadcast_shapes``).

    >>> import ember as em
    >>> em.broadcast_shapes((2, 1), (3,))
    (2, 3)
    """
    if not shapes:
        return ()
    return broadcast_shapes(*(as_shape(s, "shapes", "broadcast_shapes") for s in shapes), op="broadcast_shapes")

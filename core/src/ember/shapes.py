"""Shape arithmetic shared by ops: broadcasting, axis normalisation, reshape inference."""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any

from .errors import ArgumentTypeError, AxisError, ShapeError

__all__ = [
    "Shape",
    "broadcast_shapes",
    "normalize_axis",
    "normalize_axes",
    "reduced_shape",
    "infer_reshape",
    "numel",
    "as_shape",
    "as_int",
    "as_ints",
]

Shape = tuple[int, ...]


def numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _as_dim(s: Any, argument: str, op: str, shape: Any) -> int:
    """One dimension: an int (or an integer-valued numpy scalar), never a float, bool or string."""
    if isinstance(s, bool) or not hasattr(s, "__index__"):
        raise ArgumentTypeError(
            f"{op}: {argument} must be an int or a sequence of ints, got {shape!r} "
            f"(entry {s!r} is a {type(s).__name__}); pass whole numbers, e.g. {op}((2, 3))"
        )
    return operator.index(s)


def as_int(value: Any, op: str, argument: str) -> int:
    """An int argument (an integer-valued numpy scalar too), refusing floats, bools and strings."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise ArgumentTypeError(f"{op}: {argument} must be an int, got {value!r} ({type(value).__name__})")
    return operator.index(value)


def as_ints(value: Any, op: str, argument: str) -> tuple[int, ...]:
    """An int or a sequence of ints, as a tuple."""
    if isinstance(value, (str, bytes)) or not (isinstance(value, Iterable) or hasattr(value, "__index__")):
        raise ArgumentTypeError(
            f"{op}: {argument} must be an int or a sequence of ints, got {value!r} ({type(value).__name__})"
        )
    if not isinstance(value, Iterable):
        return (as_int(value, op, argument),)
    return tuple(as_int(v, op, argument) for v in value)


def as_shape(shape: Any, argument: str = "shape", op: str = "op") -> Shape:
    """Normalise an int or a sequence of ints to a shape tuple, checking each entry."""
    if not isinstance(shape, (bool, Iterable)) and hasattr(shape, "__index__"):
        shape = (shape,)  # an int, or an integer numpy scalar
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Iterable):
        raise ArgumentTypeError(
            f"{op}: {argument} must be an int or a sequence of ints, got {shape!r} "
            f"({type(shape).__name__}); e.g. {op}((2, 3))"
        )
    out = tuple(_as_dim(s, argument, op, shape) for s in shape)
    for s in out:
        if s < 0:
            raise ShapeError(f"{op}: {argument}={out} has a negative dimension; every dimension must be >= 0")
    return out


#: (shape, shape) -> the shape they broadcast to, for the pairs a model meets every step
_BROADCASTS: dict[tuple[Any, Any], Shape] = {}


def broadcast_shapes(*shapes: Shape, op: str = "broadcast") -> Shape:
    """numpy broadcasting of several shapes; raises ShapeError naming both shapes."""
    if len(shapes) == 2:
        a, b = shapes
        if a == b:
            return a
        if type(a) is tuple and type(b) is tuple:
            out = _BROADCASTS.get(shapes)
            if out is None:
                out = _broadcast(shapes, op)  # a pair that does not broadcast raises, and is not kept
                if len(_BROADCASTS) >= 4096:
                    _BROADCASTS.clear()
                _BROADCASTS[shapes] = out
            return out
    return _broadcast(shapes, op)


def _broadcast(shapes: tuple[Shape, ...], op: str) -> Shape:
    ndim = max(len(s) for s in shapes)
    out = [1] * ndim
    for shape in shapes:
        offset = ndim - len(shape)
        for i, d in enumerate(shape):
            j = i + offset
            cur = out[j]
            if cur == d or d == 1:
                continue
            if cur == 1:
                out[j] = d
            else:
                listed = " and ".join(str(tuple(s)) for s in shapes)
                raise ShapeError(
                    f"{op}: shapes {listed} do not broadcast (axis {j - ndim}: {cur} vs {d}). "
                    f"Each axis must match or be 1."
                )
    return tuple(out)


def normalize_axis(axis: int, ndim: int, op: str = "op", argument: str = "axis") -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise ArgumentTypeError(
            f"{op}: {argument} must be an int (or a tuple of ints, or None), got {axis!r} ({type(axis).__name__})"
        )
    if not -ndim <= axis < max(ndim, 1) or (ndim == 0 and axis not in (0, -1)):
        raise AxisError(
            f"{op}: {argument}={axis} is out of range for a tensor with {ndim} dimension(s) "
            f"(valid: {-ndim}..{ndim - 1})"
        )
    return axis % ndim if ndim else 0


def normalize_axes(
    axis: int | Iterable[int] | None, ndim: int, op: str = "op", argument: str = "axis"
) -> tuple[int, ...]:
    """Axis or axes -> sorted tuple of non-negative axes; ``None`` means all axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int) and not isinstance(axis, bool):
        if ndim == 0:
            normalize_axis(axis, ndim, op, argument)
            return ()
        return (normalize_axis(axis, ndim, op, argument),)
    if isinstance(axis, (str, bytes)) or not isinstance(axis, Iterable):
        raise ArgumentTypeError(
            f"{op}: {argument} must be an int, a tuple of ints or None, got {axis!r} ({type(axis).__name__})"
        )
    axes = tuple(normalize_axis(a, ndim, op, argument) for a in axis)
    if ndim == 0:
        return ()
    if len(set(axes)) != len(axes):
        raise ShapeError(f"{op}: {argument}={tuple(axis)} names an axis twice")
    return tuple(sorted(axes))


def reduced_shape(shape: Shape, axes: tuple[int, ...], keepdims: bool) -> Shape:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


#: (old shape, requested tuple of ints) -> resolved shape, for the reshapes a model repeats every step
_RESHAPES: dict[tuple[Shape, Shape], Shape] = {}
_INT = {int}


def infer_reshape(old: Shape, new: Any, op: str = "reshape") -> Shape:
    """Resolve one ``-1`` in ``new`` and check the element count matches."""
    if type(new) is tuple and set(map(type, new)) == _INT:  # plain ints only: 2.0 and True are refused
        key = (old, new)
        out = _RESHAPES.get(key)
        if out is None:
            out = _infer_reshape(old, new, op)
            if len(_RESHAPES) >= 4096:
                _RESHAPES.clear()
            _RESHAPES[key] = out
        return out
    return _infer_reshape(old, new, op)


def _infer_reshape(old: Shape, new: Any, op: str) -> Shape:
    if not isinstance(new, (bool, Iterable)) and hasattr(new, "__index__"):
        new = (new,)
    if isinstance(new, (str, bytes)) or not isinstance(new, Iterable):
        raise ArgumentTypeError(f"{op}: shape must be an int or a sequence of ints, got {new!r} ({type(new).__name__})")
    new = tuple(_as_dim(s, "shape", op, new) for s in new)
    total = numel(old)
    unknown = [i for i, s in enumerate(new) if s == -1]
    if len(unknown) > 1:
        raise ShapeError(f"{op}: at most one dimension may be -1, got shape {new}")
    if any(s < -1 for s in new):
        raise ShapeError(f"{op}: shape {new} has a negative dimension other than -1 (the one inferred dimension)")
    if unknown:
        known = numel(s for s in new if s != -1)
        if known == 0 or total % known:
            raise ShapeError(f"{op}: cannot reshape a tensor of shape {old} ({total} elements) into {new}")
        new = tuple(total // known if s == -1 else s for s in new)
    if numel(new) != total:
        raise ShapeError(
            f"{op}: cannot reshape a tensor of shape {old} ({total} elements) into {new} ({numel(new)} elements)"
        )
    return new

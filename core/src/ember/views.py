"""Strided views for device backends: shape, strides and offset in elements, and the view arithmetic.

A :class:`View` describes how a tensor's elements sit in a flat buffer: element ``(i, j, ...)``
is at ``offset + i * strides[0] + j * strides[1] + ...``. A stride of 0 broadcasts an axis, a
negative stride walks it backwards (``flip``). Units are elements, not bytes, because a
backend's storage itemsize may differ from the dtype's (WGSL keeps int8 in 32-bit words);
:meth:`View.byte_strides` converts with the storage itemsize.

permute, expand, slice, flip and (where numpy would not copy) reshape give new views of the
same buffer. A backend's handle subclasses :class:`View`, adds its buffer and dtype, and
overrides :meth:`View.with_layout` so that those methods return handles of its own type; a
backend class that mixes in :class:`ViewMovement` gets the movement primitives as views.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .backend import native
from .errors import MissingMethodError

__all__ = ["View", "ViewMovement", "contiguous_strides", "collapse", "fold_shared_b"]

Shape = tuple[int, ...]
V = TypeVar("V", bound="View")

_STRIDES: dict[Shape, Shape] = {}


def contiguous_strides(shape: Shape) -> Shape:
    """C-order element strides of ``shape`` (memoised: shapes repeat in every training step)."""
    found = _STRIDES.get(shape)
    if found is None:
        strides = [0] * len(shape)
        step = 1
        for i in range(len(shape) - 1, -1, -1):
            strides[i] = step
            step *= max(shape[i], 1)
        found = tuple(strides)
        if len(_STRIDES) < 4096:
            _STRIDES[shape] = found
    return found


class View:
    """``shape``, ``strides`` (elements; None: C order) and ``offset`` (elements) over a flat buffer."""

    __slots__ = ("shape", "strides", "offset", "size")

    def __init__(self, shape: Shape, strides: Shape | None = None, offset: int = 0) -> None:
        self.shape = shape
        self.strides = contiguous_strides(shape) if strides is None else strides
        self.offset = offset
        n = 1
        for d in shape:
            n *= d
        #: the number of elements (numpy's ``size``)
        self.size = n

    def with_layout(self: V, shape: Shape, strides: Shape, offset: int) -> V:
        """A view of the same buffer with another layout; subclasses return their own type."""
        return type(self)(shape, strides, offset)  # type: ignore[call-arg]

    # -- facts -------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        """The number of elements (the same as ``size``)."""
        return self.size

    def is_contiguous(self) -> bool:
        """C order without gaps, as numpy's ``C_CONTIGUOUS`` (size-1 axes may have any stride; offset aside)."""
        if self.size == 0:
            return True
        step = 1
        for d, s in zip(reversed(self.shape), reversed(self.strides)):
            if d != 1:
                if s != step:
                    return False
                step *= d
        return True

    def is_broadcast(self) -> bool:
        """True when some element is seen more than once: an axis longer than 1 has stride 0 (never when empty)."""
        return self.size > 0 and any(s == 0 and d > 1 for d, s in zip(self.shape, self.strides))

    def span(self) -> tuple[int, int]:
        """(first, last + 1) element index the view touches in its buffer; ``(offset, offset)`` when empty."""
        if self.size == 0:
            return self.offset, self.offset
        lo = hi = self.offset
        for d, s in zip(self.shape, self.strides):
            if s > 0:
                hi += (d - 1) * s
            else:
                lo += (d - 1) * s
        return lo, hi + 1

    def byte_strides(self, itemsize: int) -> Shape:
        """The strides in bytes for a storage of ``itemsize`` bytes per element."""
        return tuple(s * itemsize for s in self.strides)

    def broadcast_strides(self, shape: Shape) -> Shape:
        """Strides that read this view broadcast to ``shape`` (numpy rules: new and size-1 axes get 0)."""
        if self.shape == shape:
            return self.strides
        lead = len(shape) - len(self.shape)
        strides = [0] * lead
        for d, s, out in zip(self.shape, self.strides, shape[lead:]):
            strides.append(s if d == out else 0)
        return tuple(strides)

    # -- views -------------------------------------------------------------------------------
    def rows_folded(self: V) -> V | None:
        """This (..., M, K) view as one (batch * M, K) matrix where every batch axis steps by whole
        rows (a matmul's A sharing one B: a linear layer over (batch, sequence, features) is then one
        GEMM), else None. No copy: the same buffer, offset and row step."""
        shape, strides = self.shape, self.strides
        rows, step = shape[-2], strides[-2]
        if rows < 2 or step == 0:
            return None
        for n, s in zip(reversed(shape[:-2]), reversed(strides[:-2])):
            if n != 1 and s != rows * step:
                return None
            rows *= n
        return self.with_layout((rows, shape[-1]), (step, strides[-1]), self.offset)

    def permute(self: V, axes: Sequence[int]) -> V:
        shape, strides = self.shape, self.strides  # lists, not generators: one frame each, not one per axis
        return self.with_layout(tuple([shape[i] for i in axes]), tuple([strides[i] for i in axes]), self.offset)

    def expand(self: V, shape: Shape) -> V:
        """numpy ``broadcast_to`` as a view: broadcast axes get stride 0."""
        shape = tuple(shape)
        return self.with_layout(shape, self.broadcast_strides(shape), self.offset)

    def slice(self: V, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> V:
        """``[start:stop:step]`` per axis (0 <= start <= stop <= dim, step >= 1, as the ``slice`` primitive)."""
        # lists, not generators: one frame each, not one per axis (a step's slices come this way)
        shape = tuple([max(0, -(-(e - s) // k)) for s, e, k in zip(starts, stops, steps)])
        strides = tuple([st * k for st, k in zip(self.strides, steps)])
        if 0 in shape:
            return self.with_layout(shape, strides, self.offset)
        offset = self.offset
        for s, st in zip(starts, self.strides):
            offset += s * st
        return self.with_layout(shape, strides, offset)

    def flip(self: V, axes: Sequence[int]) -> V:
        strides = list(self.strides)
        offset = self.offset
        for ax in axes:
            n = self.shape[ax]
            if n > 1:
                offset += (n - 1) * strides[ax]
                strides[ax] = -strides[ax]
        return self.with_layout(self.shape, tuple(strides), offset)

    def reshape(self: V, shape: Shape) -> V | None:
        """This view reshaped without a copy, or None where numpy would copy."""
        shape = tuple(shape)
        if self.size == 0 or self.is_contiguous():
            return self.with_layout(shape, contiguous_strides(shape), self.offset)
        strides = _reshape_strides(self.shape, self.strides, shape)
        return None if strides is None else self.with_layout(shape, strides, self.offset)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(shape={self.shape}, strides={self.strides}, offset={self.offset})"


class ViewMovement:
    """Backend mixin: the movement primitives over handles that are :class:`View` s, as views.

    ``class FooBackend(ViewMovement, Backend)`` and implement :meth:`make_contiguous`; reshape
    copies (through it) only where numpy would. pad and concat write memory, so they stay the
    backend's own.
    """

    def make_contiguous(self, a: Any) -> Any:
        """A C-contiguous copy of the handle ``a`` (a kernel launch on the device)."""
        raise MissingMethodError(f"{type(self).__name__} does not implement make_contiguous")

    @native
    def reshape(self, a: Any, *, shape: Shape) -> Any:
        shape = tuple(shape)
        view = a.reshape(shape)
        return view if view is not None else self.make_contiguous(a).reshape(shape)

    @native
    @staticmethod
    def permute(a: Any, *, axes: Sequence[int]) -> Any:
        return a.permute(axes)

    @native
    @staticmethod
    def expand(a: Any, *, shape: Shape) -> Any:
        return a.expand(tuple(shape))

    @native
    @staticmethod
    def slice(a: Any, *, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> Any:
        return a.slice(starts, stops, steps)

    @native
    @staticmethod
    def flip(a: Any, *, axes: Sequence[int]) -> Any:
        return a.flip(axes)


def fold_shared_b(a: V, b: View, product: Callable[[V, View], V]) -> V | None:
    """``a @ b`` for ``a`` (..., M, K) and a 2-D ``b`` as one ``product`` over ``a``'s rows folded
    into a (batch * M, K) matrix (:meth:`View.rows_folded`), its C-ordered (batch * M, N) result
    viewed back as (..., M, N); None where ``a`` is 2-D, ``b`` is not, or the batches do not follow
    the rows. One GEMM tiled and tuned for its real size instead of a batch of small ones."""
    if len(a.shape) < 3 or len(b.shape) != 2:
        return None
    flat = a.rows_folded()
    if flat is None:
        return None
    out = product(flat, b)
    shape = a.shape[:-1] + (b.shape[-1],)
    return out.with_layout(shape, contiguous_strides(shape), out.offset)


def _reshape_strides(shape: Shape, strides: Shape, new: Shape) -> Shape | None:
    """Strides of ``new`` over the same elements as (``shape``, ``strides``), or None (numpy's rule).

    Walks groups of old and new axes that cover the same number of elements; an old group
    must be contiguous within itself for a new group to split or merge it.
    """
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    new_axes = [i for i, d in enumerate(new) if d != 1]
    out = [0] * len(new)
    oi = ni = 0
    while oi < len(old) and ni < len(new_axes):
        o_count, n_count = old[oi][0], new[new_axes[ni]]
        oj, nj = oi + 1, ni + 1
        while o_count != n_count:
            if o_count < n_count:
                if oj >= len(old):
                    return None
                o_count *= old[oj][0]
                oj += 1
            else:
                if nj >= len(new_axes):
                    return None
                n_count *= new[new_axes[nj]]
                nj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        stride = old[oj - 1][1]
        for k in range(nj - 1, ni - 1, -1):
            out[new_axes[k]] = stride
            stride *= new[new_axes[k]]
        oi, ni = oj, nj
    if oi != len(old) or ni != len(new_axes):
        return None
    return tuple(out)


def collapse(shape: Shape, strides: Sequence[Shape]) -> tuple[Shape, list[Shape]]:
    """Drop size-1 axes and merge neighbours that every operand walks contiguously.

    ``strides`` holds one stride tuple per operand over ``shape``. Returns the collapsed shape
    (at least one axis) and each operand's strides for it; kernels then index fewer axes.
    """
    dims = [i for i, d in enumerate(shape) if d != 1]
    if not dims:
        return (1,), [(0,) for _ in strides]
    out_shape = [shape[dims[0]]]
    out_strides = [[s[dims[0]]] for s in strides]
    for i in dims[1:]:
        d = shape[i]
        if all(st[-1] == s[i] * d for st, s in zip(out_strides, strides)):
            out_shape[-1] *= d
            for st, s in zip(out_strides, strides):
                st[-1] = s[i]
        else:
            out_shape.append(d)
            for st, s in zip(out_strides, strides):
                st.append(s[i])
    return tuple(out_shape), [tuple(st) for st in out_strides]

"""The handle: a device buffer plus shape, strides and offset (in elements), and view math.

reshape (when the strides allow), permute, expand (stride 0), slice (offset and stride
steps) and flip (negative strides) make new handles over the same buffer without copying.
Kernels read inputs through their strides and write contiguous outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.dtypes import DType

from .memory import Block

__all__ = [
    "CLArray",
    "contiguous_strides",
    "reshape_view",
    "permute_view",
    "expand_view",
    "slice_view",
    "flip_view",
    "collapse",
    "numel",
]

Shape = tuple[int, ...]


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def contiguous_strides(shape: Sequence[int]) -> Shape:
    """C-order strides (in elements) of ``shape``."""
    strides = [0] * len(shape)
    acc = 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(shape[i], 1)
    return tuple(strides)


class CLArray:
    """A tensor's storage on an OpenCL device: ``block`` viewed as (shape, strides, offset)."""

    __slots__ = ("block", "shape", "strides", "offset", "dtype", "size")

    def __init__(self, block: Block | None, shape: Shape, strides: Shape, offset: int, dtype: DType) -> None:
        self.block = block
        self.shape = shape
        self.strides = strides
        self.offset = offset
        self.dtype = dtype
        self.size = numel(shape)

    @property
    def buf(self):  # noqa: ANN201  (cl.Buffer; pyopencl is not imported here)
        return self.block.buf if self.block is not None else None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_contiguous(self) -> bool:
        """True when the elements are laid out in C order with no gaps (offset aside)."""
        expected = 1
        for d, s in zip(reversed(self.shape), reversed(self.strides)):
            if d == 1:
                continue
            if s != expected:
                return False
            expected *= d
        return True

    def view(self, shape: Shape, strides: Shape, offset: int) -> CLArray:
        return CLArray(self.block, shape, strides, offset, self.dtype)

    def __repr__(self) -> str:
        return f"CLArray({self.dtype}, shape={self.shape}, strides={self.strides}, offset={self.offset})"


def reshape_view(a: CLArray, shape: Shape) -> CLArray | None:
    """``a`` reshaped without a copy, or None when the strides do not allow it (numpy's rule)."""
    if a.size == 0 or a.is_contiguous():
        return a.view(shape, contiguous_strides(shape), a.offset)
    old = [(d, s) for d, s in zip(a.shape, a.strides) if d != 1]
    new_strides = [0] * len(shape)
    oi = ni = 0
    new_nz = [i for i, d in enumerate(shape) if d != 1]
    # walk groups of old dims and new dims that cover the same number of elements
    while oi < len(old) and ni < len(new_nz):
        op, np_ = old[oi][0], shape[new_nz[ni]]
        oj, nj = oi + 1, ni + 1
        while op != np_:
            if op < np_:
                if oj >= len(old):
                    return None
                op *= old[oj][0]
                oj += 1
            else:
                if nj >= len(new_nz):
                    return None
                np_ *= shape[new_nz[nj]]
                nj += 1
        for k in range(oi, oj - 1):  # the old group must be contiguous within itself
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        stride = old[oj - 1][1]
        for k in range(nj - 1, ni - 1, -1):
            new_strides[new_nz[k]] = stride
            stride *= shape[new_nz[k]]
        oi, ni = oj, nj
    if oi != len(old) or ni != len(new_nz):
        return None
    return a.view(shape, tuple(new_strides), a.offset)


def permute_view(a: CLArray, axes: Sequence[int]) -> CLArray:
    return a.view(tuple(a.shape[i] for i in axes), tuple(a.strides[i] for i in axes), a.offset)


def expand_view(a: CLArray, shape: Shape) -> CLArray:
    """numpy ``broadcast_to`` as a view: broadcast axes get stride 0."""
    lead = len(shape) - a.ndim
    strides = [0] * lead
    for d_in, s_in, d_out in zip(a.shape, a.strides, shape[lead:]):
        strides.append(s_in if d_in == d_out else 0)
    return a.view(tuple(shape), tuple(strides), a.offset)


def broadcast_strides(a: CLArray, shape: Shape) -> Shape:
    """Strides that read ``a`` broadcast to ``shape``."""
    return expand_view(a, shape).strides


def slice_view(a: CLArray, starts: Sequence[int], stops: Sequence[int], steps: Sequence[int]) -> CLArray:
    shape = []
    strides = []
    offset = a.offset
    for st, sp, sd, stride in zip(starts, stops, steps, a.strides):
        n = max(0, -(-(sp - st) // sd))
        shape.append(n)
        strides.append(stride * sd)
        if n:
            offset += st * stride
    return a.view(tuple(shape), tuple(strides), offset)


def flip_view(a: CLArray, axes: Sequence[int]) -> CLArray:
    strides = list(a.strides)
    offset = a.offset
    for ax in axes:
        n = a.shape[ax]
        if n > 1:
            offset += (n - 1) * strides[ax]
            strides[ax] = -strides[ax]
    return a.view(a.shape, tuple(strides), offset)


def collapse(shape: Shape, strides: Sequence[Shape]) -> tuple[Shape, list[Shape]]:
    """Drop size-1 axes and merge neighbours that every operand walks contiguously.

    Returns the collapsed shape and each operand's strides for it (at least one axis).
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

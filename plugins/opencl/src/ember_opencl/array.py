"""The handle: a pooled device buffer viewed through an :class:`ember.views.View`.

reshape (when the strides allow), permute, expand (stride 0), slice (offset and stride steps)
and flip (negative strides) are the View's methods and make new handles over the same buffer
without copying. Kernels read inputs through their strides and write contiguous outputs.
"""

from __future__ import annotations

from math import prod
from typing import Any

from ember.dtypes import DType
from ember.memory import Block
from ember.views import View, contiguous_strides

__all__ = ["CLArray"]

Shape = tuple[int, ...]


class CLArray(View):
    """A tensor's storage on an OpenCL device: ``block`` (None when empty) viewed as (shape, strides, offset)."""

    # aux: what the op that made this handle left for its backward (the flash forward: the rows'
    # log-sum-exp), read only through this very handle (a view or an in-place change makes another)
    __slots__ = ("block", "dtype", "aux")

    def __init__(
        self, block: Block[Any] | None, shape: Shape, strides: Shape | None, offset: int, dtype: DType
    ) -> None:
        # View.__init__'s work, inline (every op makes a few handles)
        self.shape = shape
        self.strides = contiguous_strides(shape) if strides is None else strides
        self.offset = offset
        self.size = prod(shape)
        self.block = block
        self.dtype = dtype
        self.aux = None

    def with_layout(self, shape: Shape, strides: Shape, offset: int) -> CLArray:
        return CLArray(self.block, shape, strides, offset, self.dtype)

    @property
    def buf(self):  # noqa: ANN201  (cl.Buffer; pyopencl is not imported here)
        return self.block.raw if self.block is not None else None

    def __repr__(self) -> str:
        return f"CLArray({self.dtype}, shape={self.shape}, strides={self.strides}, offset={self.offset})"

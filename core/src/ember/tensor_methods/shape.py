"""Tensor's shape and movement methods (``x.reshape(...)``, ``x.permute(...)``, ``x.split(...)``...):
thin forwards to the functions of :mod:`ember.ops.movement`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..ops.movement import (
    broadcast_to,
    chunk,
    expand_dims,
    flatten,
    flip,
    moveaxis,
    permute_dims,
    repeat,
    reshape,
    roll,
    split,
    squeeze,
    swapaxes,
    tile,
    tril,
    triu,
)

if TYPE_CHECKING:  # annotations only: ember.tensor builds its class from this module (.importlinter)
    from ..tensor import Tensor

__all__ = ["ShapeMethods"]


class ShapeMethods:
    """Reshaping, axis movement, repetition and splitting."""

    __slots__ = ()

    def reshape(self, *shape: Any) -> Tensor:
        return reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)

    view = reshape

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Tensor:
        return flatten(self, start_axis, end_axis)

    def permute(self, *axes: Any) -> Tensor:
        return permute_dims(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes)

    def transpose(self, axis0: int = -2, axis1: int = -1) -> Tensor:
        return swapaxes(self, axis0, axis1)

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        return swapaxes(self, axis0, axis1)

    def moveaxis(self, source: Any, destination: Any) -> Tensor:
        return moveaxis(self, source, destination)

    def squeeze(self, axis: Any = None) -> Tensor:
        return squeeze(self, axis)

    def unsqueeze(self, axis: int) -> Tensor:
        return expand_dims(self, axis)

    def expand(self, *shape: Any) -> Tensor:
        return broadcast_to(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return broadcast_to(self, shape)

    def flip(self, axis: Any = None) -> Tensor:
        return flip(self, axis)

    def roll(self, shift: Any, axis: Any = None) -> Tensor:
        return roll(self, shift, axis)

    def repeat(self, repeats: Any, axis: int | None = None) -> Tensor:
        return repeat(self, repeats, axis)

    def tile(self, reps: Sequence[int]) -> Tensor:
        return tile(self, reps)

    def split(self, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
        return split(self, indices_or_sections, axis)

    def chunk(self, chunks: int, axis: int = 0) -> list[Tensor]:
        return chunk(self, chunks, axis)

    def tril(self, k: int = 0) -> Tensor:
        return tril(self, k)

    def triu(self, k: int = 0) -> Tensor:
        return triu(self, k)

"""Several results in one tensor: factorizations are single dispatched ops, so their results
(Q and R, eigenvalues and eigenvectors, ...) travel flattened and concatenated along the last
axis, and are split again by :func:`unpack` (whose slices carry the gradients back)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember as em

__all__ = ["pack", "unpack", "pack_numpy"]


def pack(parts: list[em.Tensor], batch: tuple[int, ...]) -> em.Tensor:
    """Flatten each part's trailing (non-batch) axes and concatenate them."""
    return em.concat([p.reshape(batch + (_trailing(p.shape, batch),)) for p in parts], axis=-1)


def pack_numpy(parts: list[np.ndarray], batch: tuple[int, ...], dtype: Any) -> np.ndarray:
    """:func:`pack` for host arrays (what the cpu and cuda kernels return), in ``dtype``."""
    xp = _array_module(parts[0])
    flat = [xp.reshape(p, batch + (_trailing(p.shape, batch),)).astype(dtype, copy=False) for p in parts]
    return xp.ascontiguousarray(xp.concatenate(flat, axis=-1))


def unpack(packed: em.Tensor, shapes: list[tuple[int, ...]]) -> list[em.Tensor]:
    """Split a packed tensor into parts of the given trailing shapes."""
    batch = tuple(packed.shape[:-1])
    out, start = [], 0
    for shape in shapes:
        size = math.prod(shape)
        out.append(packed[..., start : start + size].reshape(batch + tuple(shape)))
        start += size
    return out


def _trailing(shape: Any, batch: tuple[int, ...]) -> int:
    """The size of the non-batch axes, written out (-1 cannot be inferred when the batch is empty)."""
    return math.prod(tuple(shape)[len(batch) :])


def _array_module(a: Any) -> Any:
    return np if isinstance(a, np.ndarray) else __import__("cupy")

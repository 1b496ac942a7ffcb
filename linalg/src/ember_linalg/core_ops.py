"""The linalg names that ember's core already computes (matmul, tensordot, vecdot, outer,
diagonal, trace, vector_norm, matrix_transpose), re-exported with the Array API's signatures."""

from __future__ import annotations

from typing import Any

import ember as em

__all__ = ["matmul", "matrix_transpose", "tensordot", "vecdot", "outer", "diagonal", "trace", "vector_norm"]

matmul = em.matmul
matrix_transpose = em.matrix_transpose
tensordot = em.tensordot
vecdot = em.vecdot
outer = em.outer


def diagonal(x: Any, /, *, offset: int = 0) -> em.Tensor:
    """Diagonal ``offset`` of the last two axes."""
    return em.diagonal(x, offset)


def trace(x: Any, /, *, offset: int = 0, dtype: Any = None) -> em.Tensor:
    """Sum of diagonal ``offset`` of the last two axes, in ``dtype`` if given."""
    return em.diagonal(x, offset).sum(axis=-1, dtype=dtype)


def vector_norm(x: Any, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> em.Tensor:
    """p-norm over ``axis`` (all axes when None); of the magnitudes for complex ``x`` (a real result)."""
    if isinstance(x, em.Tensor) and x.dtype.kind == "c":
        x = x.abs()
    return em.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)

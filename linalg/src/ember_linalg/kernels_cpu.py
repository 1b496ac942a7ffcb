"""Native kernels for the ``cpu`` device: LAPACK through numpy.linalg, and scipy.linalg for what
numpy lacks (LU with its permutation, triangular solves). Handles of the cpu backend are numpy
arrays, so each kernel takes arrays and returns one, packed as the reference packs it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import LinAlgError
from .factorizations import CHOLESKY, EIG, EIGH, LU, QR, SLOGDET, SOLVE, SOLVE_TRIANGULAR, SVD
from .packing import pack_numpy

__all__ = ["register"]


def _phase(x: np.ndarray) -> np.ndarray:
    """The unit factor that turns ``x`` real and non-negative: a sign, or conj(x)/|x| for complex."""
    if np.iscomplexobj(x):
        size = np.abs(x)
        return np.where(size == 0, 1.0, np.conj(x) / np.where(size == 0, 1.0, size)).astype(x.dtype)
    return np.where(x < 0, -1.0, 1.0).astype(x.dtype)


def _canonical(u: np.ndarray) -> np.ndarray:
    """Per column, the factor that makes its largest-magnitude entry real and positive (as
    reference.canonical_columns does for real matrices), shape (..., 1, k)."""
    if u.size == 0:
        return np.ones(u.shape[:-2] + (1, u.shape[-1]), dtype=u.dtype)
    top = np.argmax(np.abs(u), axis=-2)[..., None, :]
    return _phase(np.take_along_axis(u, top, axis=-2))


def _hermitian(a: np.ndarray) -> np.ndarray:
    """``(a + a^H) / 2``."""
    return (a + np.conj(np.swapaxes(a, -1, -2))) * a.real.dtype.type(0.5)


def _lapack(op: str, fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except np.linalg.LinAlgError as exc:
        raise LinAlgError(f"{op}: {exc}") from None


def _cholesky(backend: Any, a: np.ndarray) -> np.ndarray:
    sym = _hermitian(a)
    return np.ascontiguousarray(_lapack("cholesky", lambda: np.linalg.cholesky(sym)))


def _qr(backend: Any, a: np.ndarray, complete: bool = False) -> np.ndarray:
    q, r = np.linalg.qr(a, mode="complete" if complete else "reduced")
    k = min(a.shape[-2:])
    d = _phase(np.diagonal(r[..., :k, :k], axis1=-2, axis2=-1))  # Q R = (Q conj(D)) (D R)
    if q.shape[-1] > k:
        d = np.concatenate([d, np.ones(d.shape[:-1] + (q.shape[-1] - k,), dtype=a.dtype)], axis=-1)
    # triu again: the zeros below the diagonal stay +0 whatever the sign flip
    return pack_numpy([q * np.conj(d)[..., None, :], np.triu(r * d[..., :, None])], a.shape[:-2], a.dtype)


def _eigh(backend: Any, a: np.ndarray) -> np.ndarray:
    w, v = np.linalg.eigh(_hermitian(a))
    return pack_numpy([w, v * _canonical(v)], a.shape[:-2], a.dtype)


def _svd(backend: Any, a: np.ndarray, full_matrices: bool = False) -> np.ndarray:
    u, s, vh = _lapack("svd", lambda: np.linalg.svd(a, full_matrices=full_matrices))
    k = min(a.shape[-2:])
    sign = _canonical(u[..., :, :k])
    u = np.concatenate([u[..., :, :k] * sign, u[..., :, k:]], axis=-1)
    vh = np.concatenate([vh[..., :k, :] * np.conj(np.swapaxes(sign, -1, -2)), vh[..., k:, :]], axis=-2)
    return pack_numpy([u, s, vh], a.shape[:-2], a.dtype)


def _lu(backend: Any, a: np.ndarray) -> np.ndarray:
    import scipy.linalg

    p, lower, upper = scipy.linalg.lu(a)
    return pack_numpy([p, lower, upper], a.shape[:-2], a.dtype)


def _solve(backend: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(_lapack("solve", lambda: np.linalg.solve(a, b)))


def _solve_triangular(
    backend: Any, a: np.ndarray, b: np.ndarray, upper: bool = False, left: bool = True, unitriangular: bool = False
) -> np.ndarray:
    import scipy.linalg

    if not left:  # X A = B  <=>  A^T X^T = B^T
        a, b, upper = np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2), not upper
    out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], dtype=b.dtype)
    for i in np.ndindex(out.shape[:-2]):
        out[i] = _lapack(
            "solve_triangular",
            lambda i=i: scipy.linalg.solve_triangular(a[i], b[i], lower=not upper, unit_diagonal=unitriangular),
        )
    return np.ascontiguousarray(out if left else np.swapaxes(out, -1, -2))


def _slogdet(backend: Any, a: np.ndarray) -> np.ndarray:
    sign, logabs = np.linalg.slogdet(a)
    return np.ascontiguousarray(np.stack([sign, logabs], axis=-1).astype(a.dtype))


def _eig(backend: Any, a: np.ndarray) -> np.ndarray:
    out = np.result_type(a.dtype, np.complex64)
    w, v = _lapack("eig", lambda: np.linalg.eig(a))
    v = v.astype(out)
    return pack_numpy([w, v * _canonical(v)], a.shape[:-2], out)


_KERNELS = {
    EIG: _eig,
    CHOLESKY: _cholesky,
    QR: _qr,
    EIGH: _eigh,
    SVD: _svd,
    LU: _lu,
    SOLVE: _solve,
    SOLVE_TRIANGULAR: _solve_triangular,
    SLOGDET: _slogdet,
}


def register(kind: str = "cpu") -> None:
    """Register every kernel of this module for device ``kind``."""
    for ext, fn in _KERNELS.items():
        ext.kernel(kind)(fn)

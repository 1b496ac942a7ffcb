"""Native kernels for the ``cuda`` device through CuPy (cuSOLVER): registered only when ember-cuda
is installed, and CuPy is imported inside the kernels, so nothing here runs without a GPU.
Ops without a kernel here (qr, lu, solve_triangular) run the Tensor-op reference on cuda."""

from __future__ import annotations

import importlib.util
from typing import Any

from .factorizations import CHOLESKY, EIGH, SLOGDET, SOLVE, SVD
from .packing import pack_numpy

__all__ = ["register"]


def _sym(a: Any) -> Any:
    return (a + a.swapaxes(-1, -2).conj()) * a.real.dtype.type(0.5)


def _canonical(u: Any) -> Any:
    import cupy

    if u.size == 0:
        return cupy.ones(u.shape[:-2] + (1, u.shape[-1]), dtype=u.dtype)
    top = cupy.take_along_axis(u, cupy.argmax(cupy.abs(u), axis=-2)[..., None, :], axis=-2)
    size = cupy.abs(top)
    return cupy.where(size == 0, 1.0, top.conj() / cupy.where(size == 0, 1.0, size)).astype(u.dtype)


def _cholesky(backend: Any, a: Any) -> Any:
    import cupy

    return cupy.ascontiguousarray(cupy.linalg.cholesky(_sym(a)))


def _eigh(backend: Any, a: Any) -> Any:
    import cupy

    w, v = cupy.linalg.eigh(_sym(a))
    return pack_numpy([w, v * _canonical(v)], a.shape[:-2], a.dtype)


def _svd(backend: Any, a: Any, full_matrices: bool = False) -> Any:
    import cupy

    u, s, vh = cupy.linalg.svd(a, full_matrices=full_matrices)
    k = min(a.shape[-2:])
    sign = _canonical(u[..., :, :k])
    u = cupy.concatenate([u[..., :, :k] * sign, u[..., :, k:]], axis=-1)
    vh = cupy.concatenate([vh[..., :k, :] * sign.swapaxes(-1, -2).conj(), vh[..., k:, :]], axis=-2)
    return pack_numpy([u, s, vh], a.shape[:-2], a.dtype)


def _solve(backend: Any, a: Any, b: Any) -> Any:
    import cupy

    return cupy.ascontiguousarray(cupy.linalg.solve(a, b))


def _slogdet(backend: Any, a: Any) -> Any:
    import cupy

    sign, logabs = cupy.linalg.slogdet(a)
    return cupy.ascontiguousarray(cupy.stack([sign, logabs], axis=-1).astype(a.dtype))


def register(kind: str = "cuda") -> bool:
    """Register the CuPy kernels when ember-cuda is installed; whether they were."""
    if importlib.util.find_spec("ember_cuda") is None:
        return False
    for ext, fn in ((CHOLESKY, _cholesky), (EIGH, _eigh), (SVD, _svd), (SOLVE, _solve), (SLOGDET, _slogdet)):
        ext.kernel(kind)(fn)
    return True

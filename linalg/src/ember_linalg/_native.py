"""The plan shared by the native opencl and wgpu kernels of ``linalg_svd``, ``linalg_lu``,
``linalg_solve`` and ``linalg_slogdet``: which launches each op takes, in which order, and what
the host does between them (one read-back per Jacobi sweep, the sort of the singular values).

A backend supplies the primitives of :class:`Launcher` (buffers, and one launch per kernel):

- SVD, one-sided (Hestenes) Jacobi: ``svd_init`` copies the matrix's columns into rows of a work
  buffer (tall: the columns of A; wide: the rows, i.e. the SVD of A^T as the reference does) and V^T
  = I; ``jacobi_round`` rotates the n/2 disjoint column pairs of one round-robin round, one
  work-group per pair (three dot products by a local reduction, then the rotation of both columns
  and of both rows of V^T unless |cos| between them is below tol = sqrt(m) eps), keeping the largest
  |cos| per slot; n-1 rounds (n for odd n) make a sweep, after which that measure is read back once:
  the loop stops when no pair was rotated, or when the measure stalls at rounding noise (< 8 tol).
  ``col_norms`` then gives the singular values, the host sorts them, and ``svd_finish`` writes U,
  S and Vh packed, with U's columns normalised and their signs canonical (as
  reference.canonical_columns).
- LU with partial pivoting on ``[A | B]``: per column ``lu_pivot`` (one work-group per matrix:
  pivot search, row swap, scaling of the column below the pivot) and ``lu_update`` (the rank-1
  update of the trailing rows, the right-hand sides included, so the forward substitution comes
  free); ``lu_pack`` writes P, L, U; ``back_step`` per column and ``back_finish`` solve U X = Y;
  ``logdet`` reads the diagonal. ``solve_triangular`` copies [A | B] (``tri_init``, transposed for
  X A = B) and runs the same substitution launches, upward or downward.
"""

from __future__ import annotations

import importlib.util
import math
import weakref
from typing import Any, Protocol

import numpy as np

from ember.errors import NotImplementedOpError

from .factorizations import LU, SLOGDET, SOLVE, SOLVE_TRIANGULAR, SVD
from .reference import _rounds

__all__ = [
    "kernel_table",
    "Launcher",
    "svd",
    "lu",
    "solve",
    "slogdet",
    "register_when_installed",
    "real_only",
    "SWEEP_CAP",
    "REAL_ONLY",
]

#: most Jacobi sweeps per SVD (quadratic convergence takes well under that for any sane input)
SWEEP_CAP = 40
#: (op name, device kind) of the kernels here: real dtypes only (complex input raises, as the reference does)
REAL_ONLY: set[tuple[str, str]] = set()
_PAIRS: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()


class Launcher(Protocol):
    """What a backend provides: buffers are backend handles; ``a``/``b`` inputs come with their
    element offset; every launch covers the whole batch."""

    rt: Any
    dtype: Any

    def empty(self, shape: tuple[int, ...], dtype: Any = None) -> Any: ...
    def upload_int(self, values: np.ndarray) -> Any: ...
    def download(self, h: Any) -> np.ndarray: ...
    def upload(self, values: np.ndarray) -> Any: ...
    def svd_init(self, a: Any, at: Any, vt: Any, batch: int, m: int, n: int, wide: bool) -> None: ...
    def jacobi_round(
        self, at: Any, vt: Any, pairs: Any, conv: Any, batch: int, nc: int, la: int, half: int, rnd: int, tol: float
    ) -> None: ...
    def col_norms(self, at: Any, s: Any, rows: int, la: int) -> None: ...
    def svd_finish(
        self, at: Any, vt: Any, s: Any, order: Any, out: Any, batch: int, m: int, n: int, wide: bool
    ) -> None: ...
    def lu_init(self, a: Any, b: Any, w: Any, perm: Any, sgn: Any, batch: int, m: int, n: int, r: int) -> None: ...
    def lu_pivot(self, w: Any, perm: Any, sgn: Any, batch: int, m: int, wd: int, j: int) -> None: ...
    def lu_update(self, w: Any, batch: int, m: int, wd: int, j: int) -> None: ...
    def lu_pack(self, w: Any, perm: Any, out: Any, batch: int, m: int, n: int, wd: int) -> None: ...
    def tri_init(self, a: Any, b: Any, w: Any, batch: int, n: int, r: int, tr: bool) -> None: ...
    def back_step(
        self, w: Any, batch: int, n: int, r: int, j: int, lower: bool = False, unit: bool = False
    ) -> None: ...
    def back_finish(
        self, w: Any, out: Any, batch: int, n: int, r: int, unit: bool = False, tr: bool = False
    ) -> None: ...
    def logdet(self, w: Any, sgn: Any, out: Any, batch: int, n: int) -> None: ...


def _batch(shape: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    batch = tuple(shape[:-2])
    return batch, math.prod(batch)


def pair_table(nc: int) -> np.ndarray:
    """The round-robin rounds of ``nc`` columns as int32 (rounds, half, 2); a pair whose second
    column is ``nc`` (the bye of an odd count) does nothing."""
    half = (nc + 1) // 2
    rounds = _rounds(nc)
    table = np.full((len(rounds), half, 2), nc, dtype=np.int32)
    for r, pairs in enumerate(rounds):
        if pairs:
            table[r, : len(pairs)] = np.asarray(pairs, dtype=np.int32)
    return table


def _pairs_for(k: Launcher, nc: int) -> tuple[Any, int, int]:
    cache = _PAIRS.setdefault(k.rt, {})
    found = cache.get(nc)
    if found is None:
        table = pair_table(nc)
        found = (k.upload_int(table), table.shape[0], table.shape[1])
        if len(cache) > 16:
            cache.clear()
        cache[nc] = found
    return found


def svd(k: Launcher, a: Any, full_matrices: bool = False) -> Any:
    """``linalg_svd``'s packed (U, S, Vh) of the contiguous handle ``a`` (..., m, n)."""
    m, n = a.shape[-2:]
    batch_shape, batch = _batch(tuple(a.shape))
    wide = m < n
    nc, la = (m, n) if wide else (n, m)  # columns rotated, and their length
    kk = min(m, n)
    out = k.empty(batch_shape + (m * kk + kk + kk * n,))
    if batch and kk:
        at, vt = k.empty((batch * nc * la,)), k.empty((batch * nc * nc,))
        k.svd_init(a, at, vt, batch, m, n, wide)
        if nc > 1:
            pairs, rounds, half = _pairs_for(k, nc)
            conv = k.empty((batch * half,))
            eps = float(np.finfo(k.dtype.numpy).eps)
            tol = eps * math.sqrt(la)
            last = math.inf
            for _ in range(SWEEP_CAP):
                for rnd in range(rounds):
                    k.jacobi_round(at, vt, pairs, conv, batch, nc, la, half, rnd, tol)
                worst = float(np.max(k.download(conv)))
                # converged: no pair was rotated (NaN input stops too); or stuck at rounding noise near tol
                if not worst > tol or (worst <= 8.0 * tol and worst >= 0.5 * last):
                    break
                last = worst
        s = k.empty((batch * nc,))
        k.col_norms(at, s, batch * nc, la)
        values = k.download(s).reshape(batch, nc)
        order = np.argsort(-values, axis=-1, kind="stable").astype(np.int32)
        k.svd_finish(at, vt, s, k.upload_int(order), out, batch, m, n, wide)
    if full_matrices and m != n and batch and kk:
        return _complete(k, out, batch_shape, m, n)
    return out


def _complete(k: Launcher, packed: Any, batch_shape: tuple[int, ...], m: int, n: int) -> Any:
    """full_matrices of a non-square matrix: the reduced factors completed to square U (or Vh)
    on the host, keeping the first k vectors (the extra ones are not unique; QR completes them)."""
    kk = min(m, n)
    host = k.download(packed).reshape((-1, m * kk + kk + kk * n)).astype(np.float64)
    u = host[:, : m * kk].reshape(-1, m, kk)
    s = host[:, m * kk : m * kk + kk]
    vh = host[:, m * kk + kk :].reshape(-1, kk, n)
    if m > n:
        u = np.concatenate([u, np.linalg.qr(u, mode="complete")[0][..., kk:]], axis=-1)
    else:
        v = np.swapaxes(vh, -1, -2)
        vh = np.swapaxes(np.concatenate([v, np.linalg.qr(v, mode="complete")[0][..., kk:]], axis=-1), -1, -2)
    flat = np.concatenate([u.reshape(u.shape[0], -1), s, vh.reshape(vh.shape[0], -1)], axis=-1)
    return k.upload(flat.reshape(batch_shape + (flat.shape[-1],)).astype(k.dtype.numpy))


def _factor(k: Launcher, a: Any, b: Any = None) -> tuple[Any, Any, Any, int, int, int, int]:
    """LU with partial pivoting of ``a`` (..., m, n), the right-hand sides ``b`` (..., m, r) carried
    along: the work buffer [L\\U | L^-1 P^T B], the permutation, its sign, and batch, m, n, width."""
    m, n = a.shape[-2:]
    _, batch = _batch(tuple(a.shape))
    r = 0 if b is None else b.shape[-1]
    wd = n + r
    w = k.empty((batch * m * wd,))
    perm = k.empty((batch * m,), "int32")
    sgn = k.empty((batch,))
    if batch * m * wd:
        k.lu_init(a, a if b is None else b, w, perm, sgn, batch, m, n, r)
        for j in range(min(m, n)):
            k.lu_pivot(w, perm, sgn, batch, m, wd, j)
            if j + 1 < m and j + 1 < wd:
                k.lu_update(w, batch, m, wd, j)
    return w, perm, sgn, batch, m, n, wd


def lu(k: Launcher, a: Any) -> Any:
    """``linalg_lu``'s packed (P, L, U) of the contiguous handle ``a``."""
    w, perm, _, batch, m, n, wd = _factor(k, a)
    kk = min(m, n)
    out = k.empty(tuple(a.shape[:-2]) + (m * m + m * kk + kk * n,))
    if batch and m:
        k.lu_pack(w, perm, out, batch, m, n, wd)
    return out


def solve(k: Launcher, a: Any, b: Any) -> Any:
    """``linalg_solve``: X with A X = B for contiguous handles ``a`` (..., n, n), ``b`` (..., n, r)."""
    w, _, _, batch, n, _, _ = _factor(k, a, b)
    r = b.shape[-1]
    out = k.empty(tuple(b.shape))
    if batch and n and r:
        for j in range(n - 1, 0, -1):
            k.back_step(w, batch, n, r, j)
        k.back_finish(w, out, batch, n, r)
    return out


def solve_triangular(k: Launcher, a: Any, b: Any, upper: bool, left: bool, unit: bool) -> Any:
    """``linalg_solve_triangular``: X with A X = B (left) or X A = B, reading one triangle of A; the
    right-hand form solves A^T X^T = B^T (copied transposed, the triangle flipped)."""
    n = a.shape[-1]
    _, batch = _batch(tuple(a.shape))
    r = b.shape[-1] if left else b.shape[-2]
    out = k.empty(tuple(b.shape))
    if batch and n and r:
        w = k.empty((batch * n * (n + r),))
        k.tri_init(a, b, w, batch, n, r, not left)
        lower = (not upper) if left else upper
        for j in range(n - 1) if lower else range(n - 1, 0, -1):
            k.back_step(w, batch, n, r, j, lower, unit)
        k.back_finish(w, out, batch, n, r, unit, not left)
    return out


def slogdet(k: Launcher, a: Any) -> Any:
    """``linalg_slogdet``: (sign, log|det|) stacked on a last axis of 2."""
    if a.shape[-1] == 0:  # the determinant of a 0x0 matrix is 1
        return k.upload(np.broadcast_to(np.array([1.0, 0.0]), tuple(a.shape[:-2]) + (2,)))
    w, _, sgn, batch, n, _, _ = _factor(k, a)
    out = k.empty(tuple(a.shape[:-2]) + (2,))
    if batch:
        k.logdet(w, sgn, out, batch, n)
    return out


def register_when_installed(ops: dict[Any, Any], kind: str, distribution: str) -> bool:
    """Register each ``ops`` kernel for ``kind`` when the backend's package ``distribution`` is
    installed (it is not imported here); whether they were."""
    if importlib.util.find_spec(distribution) is None:
        return False
    for op, fn in ops.items():
        op.kernel(kind)(fn)
        REAL_ONLY.add((op.name, kind))
    return True


def real_only(op: str, kind: str, *handles: Any) -> None:
    """Complex input has no kernel here (nor a reference): say so and what to do instead."""
    for h in handles:
        if h.dtype.kind == "c":
            raise NotImplementedOpError(
                f"{op}: complex {h.dtype} input has no {kind} kernel (the native {kind} kernels and the Tensor-op "
                f"reference are real: float32/float64); compute it on the cpu (x.to('cpu')), which has complex kernels"
            )


def kernel_table(kind: str, launcher: Any) -> dict[Any, Any]:
    """op -> native kernel of one API: each refuses complex input, makes its handles contiguous,
    takes ``launcher(backend, dtype)`` and runs the shared plan above."""

    def prepared(op: str, backend: Any, *handles: Any) -> tuple[Any, list[Any]]:
        real_only(op, kind, *handles)
        return launcher(backend, handles[0].dtype), [backend.make_contiguous(h) for h in handles]

    def svd_kernel(backend: Any, a: Any, full_matrices: bool = False) -> Any:
        k, (a,) = prepared("svd", backend, a)
        return svd(k, a, full_matrices)

    def lu_kernel(backend: Any, a: Any) -> Any:
        k, (a,) = prepared("lu", backend, a)
        return lu(k, a)

    def solve_kernel(backend: Any, a: Any, b: Any) -> Any:
        k, (a, b) = prepared("solve", backend, a, b)
        return solve(k, a, b)

    def slogdet_kernel(backend: Any, a: Any) -> Any:
        k, (a,) = prepared("slogdet", backend, a)
        return slogdet(k, a)

    def solve_triangular_kernel(
        backend: Any, a: Any, b: Any, upper: bool = False, left: bool = True, unitriangular: bool = False
    ) -> Any:
        k, (a, b) = prepared("solve_triangular", backend, a, b)
        return solve_triangular(k, a, b, upper, left, unitriangular)

    return {
        SVD: svd_kernel,
        LU: lu_kernel,
        SOLVE: solve_kernel,
        SLOGDET: slogdet_kernel,
        SOLVE_TRIANGULAR: solve_triangular_kernel,
    }

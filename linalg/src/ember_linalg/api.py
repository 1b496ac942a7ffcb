"""The ``em.linalg`` functions: the Array API ``linalg`` extension and more, batched over leading
axes. Factorizations and solvers go through the dispatched ops of ``factorizations.py``; the
rest are compositions of those and of core ops (whose gradients follow from theirs)."""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

import ember as em
from ember.errors import ArgumentTypeError, DTypeError, InvalidArgumentError, ShapeError

from .core_ops import vector_norm
from .factorizations import (
    CHOLESKY,
    EIG,
    EIGH,
    LU,
    QR,
    SLOGDET,
    SOLVE,
    SOLVE_TRIANGULAR,
    SVD,
    lu_shapes,
    qr_shapes,
    svd_shapes,
)
from .packing import unpack

__all__ = [
    "EighResult", "QRResult", "SlogdetResult", "SVDResult", "LUResult", "LUFactorResult", "LstsqResult",
    "cholesky", "qr", "eig", "eigvals", "eigh", "eigvalsh", "svd", "svdvals", "lu", "lu_factor", "lu_solve", "solve",
    "solve_triangular", "inv", "det", "slogdet", "pinv", "lstsq", "matrix_norm", "norm", "matrix_rank",
    "matrix_power", "cross",
]  # fmt: skip


class EighResult(NamedTuple):
    eigenvalues: em.Tensor
    eigenvectors: em.Tensor


class QRResult(NamedTuple):
    Q: em.Tensor  # noqa: N815 - the Array API's field names
    R: em.Tensor  # noqa: N815


class SlogdetResult(NamedTuple):
    sign: em.Tensor
    logabsdet: em.Tensor


class SVDResult(NamedTuple):
    U: em.Tensor  # noqa: N815
    S: em.Tensor  # noqa: N815
    Vh: em.Tensor  # noqa: N815


class LUResult(NamedTuple):
    P: em.Tensor  # noqa: N815
    L: em.Tensor  # noqa: N815
    U: em.Tensor  # noqa: N815


class LUFactorResult(NamedTuple):
    LU: em.Tensor  # noqa: N815
    pivots: em.Tensor


class LstsqResult(NamedTuple):
    solution: em.Tensor
    residuals: em.Tensor
    rank: em.Tensor
    singular_values: em.Tensor


_FLOATING = ("float32", "float64", "complex64", "complex128")


def _float(x: Any, op: str, name: str = "x", like: Any = None) -> em.Tensor:
    """``x`` as a floating-point tensor (real or complex), else a DTypeError naming ``name``."""
    if not isinstance(x, em.Tensor):
        x = em.asarray(x, device=None if like is None else like.device)
    if x.dtype.name not in _FLOATING:
        raise DTypeError(f"linalg.{op}: {name} must be float32, float64, complex64 or complex128, got {x.dtype}")
    return x


def _h(x: em.Tensor) -> em.Tensor:
    """The conjugate transpose of the last two axes (the transpose for real tensors)."""
    return em.conj(x).mT if x.dtype.kind == "c" else x.mT


def _real(x: em.Tensor) -> em.Tensor:
    """The real part of a result that is real by construction but travelled packed as complex."""
    return em.real(x) if x.dtype.kind == "c" else x


def _numeric(x: Any, op: str, name: str, like: Any = None) -> em.Tensor:
    """``x`` as a tensor of a numeric (not boolean) dtype."""
    if not isinstance(x, em.Tensor):
        x = em.asarray(x, device=None if like is None else like.device)
    if x.dtype.kind not in "iufc":
        raise DTypeError(f"linalg.{op}: {name} must have a numeric dtype, got {x.dtype}")
    return x


def _matrix(x: Any, op: str, square: bool = False) -> em.Tensor:
    x = _float(x, op)
    if x.ndim < 2:
        raise ShapeError(f"linalg.{op}: x must have at least 2 dimensions (..., M, N), got shape {tuple(x.shape)}")
    if square and x.shape[-1] != x.shape[-2]:
        raise ShapeError(f"linalg.{op}: x must be square in its last two axes (..., M, M), got {tuple(x.shape)}")
    return x


def _eye_like(x: em.Tensor) -> em.Tensor:
    return em.broadcast_to(em.eye(x.shape[-1], dtype=x.dtype, device=x.device), tuple(x.shape))


def cholesky(x: Any, /, *, upper: bool = False) -> em.Tensor:
    """Cholesky factor of a symmetric positive-definite ``x`` (lower, or ``upper``: ``U^T U == x``).

    >>> import ember as em
    >>> cholesky(em.tensor([[4.0, 2.0], [2.0, 5.0]]))
    tensor([[2., 0.],
            [1., 2.]], dtype=float32, device=cpu:0)
    """
    lower = CHOLESKY(_matrix(x, "cholesky", square=True))
    return _h(lower) if upper else lower


def qr(x: Any, /, *, mode: str = "reduced") -> QRResult:
    """``x = Q R`` with orthonormal Q and upper-triangular R whose diagonal is non-negative."""
    x = _matrix(x, "qr")
    if mode not in ("reduced", "complete"):
        raise InvalidArgumentError(f"linalg.qr: mode must be 'reduced' or 'complete', got {mode!r}")
    m, n = x.shape[-2:]
    complete = mode == "complete"
    q, r = unpack(QR(x, complete=complete), qr_shapes(m, n, complete))
    return QRResult(q, r)


def eigh(x: Any, /) -> EighResult:
    """Eigenvalues (ascending) and eigenvectors of the symmetric matrix ``(x + x^T)/2``.

    Each eigenvector's largest-magnitude entry is positive, so every backend returns the same vectors.
    """
    x = _matrix(x, "eigh", square=True)
    n = x.shape[-1]
    w, v = unpack(EIGH(x), [(n,), (n, n)])
    return EighResult(_real(w), v)


def eig(x: Any, /) -> EighResult:
    """Eigenvalues and eigenvectors of a general square matrix, complex (unit-norm vectors, each
    with its largest-magnitude entry real and positive). Forward only, where a native kernel runs."""
    x = _matrix(x, "eig", square=True)
    n = x.shape[-1]
    w, v = unpack(EIG(x), [(n,), (n, n)])
    return EighResult(w, v)


def eigvals(x: Any, /) -> em.Tensor:
    """Eigenvalues of a general square matrix, complex."""
    return eig(x).eigenvalues


def eigvalsh(x: Any, /) -> em.Tensor:
    """Eigenvalues (ascending) of the symmetric matrix ``(x + x^T)/2``."""
    return eigh(x).eigenvalues


def svd(x: Any, /, *, full_matrices: bool = True) -> SVDResult:
    """``x = U diag(S) Vh`` with S descending; each column of U has its largest-magnitude entry positive."""
    x = _matrix(x, "svd")
    m, n = x.shape[-2:]
    u, s, vh = unpack(SVD(x, full_matrices=bool(full_matrices)), svd_shapes(m, n, bool(full_matrices)))
    return SVDResult(u, _real(s), vh)


def svdvals(x: Any, /) -> em.Tensor:
    """Singular values, descending."""
    return svd(x, full_matrices=False).S


def lu(x: Any, /) -> LUResult:
    """``x = P L U`` with partial pivoting (L unit lower-triangular)."""
    x = _matrix(x, "lu")
    p, lower, upper = unpack(LU(x), lu_shapes(*x.shape[-2:]))
    return LUResult(p, lower, upper)


def _pivots(perm: np.ndarray) -> np.ndarray:
    """LAPACK-style row interchanges (0-based, as scipy.linalg.lu_factor) of a permutation."""
    piv = np.empty_like(perm)
    for b in np.ndindex(perm.shape[:-1]):
        where = list(range(perm.shape[-1]))  # where[r]: the position now holding original row r
        rows = list(range(perm.shape[-1]))  # rows[i]: the original row now at position i
        for i, target in enumerate(perm[b]):
            j = where[target]
            piv[b + (i,)] = j
            rows[i], rows[j] = rows[j], rows[i]
            where[rows[i]], where[rows[j]] = i, j
    return piv


def lu_factor(x: Any, /) -> LUFactorResult:
    """Compact LU of a square ``x``: ``L`` and ``U`` in one matrix and 0-based row interchanges
    (scipy.linalg.lu_factor's convention; the pivots are integer bookkeeping, worked out on the host)."""
    x = _matrix(x, "lu_factor", square=True)
    p, lower, upper = lu(x)
    packed = em.tril(lower, -1) + upper
    perm = em.argmax(_real(p), axis=-2)  # P^T x = L U: row i of L U is row perm[i] of x
    piv = _pivots(np.asarray(perm.numpy(), dtype=np.int64))
    return LUFactorResult(packed, em.tensor(piv, dtype="int64", device=x.device))


def lu_solve(lu_and_piv: Any, b: Any, /) -> em.Tensor:
    """Solve ``x @ X = b`` from :func:`lu_factor`'s result."""
    try:
        packed, piv = lu_and_piv
    except (TypeError, ValueError):
        raise ArgumentTypeError("linalg.lu_solve: lu_and_piv must be the (LU, pivots) pair of lu_factor") from None
    packed = _matrix(packed, "lu_solve", square=True)
    n = packed.shape[-1]
    host = np.asarray(piv.numpy() if isinstance(piv, em.Tensor) else piv, dtype=np.int64)
    if host.shape != tuple(packed.shape[:-1]):
        raise ShapeError(f"linalg.lu_solve: pivots must have shape {tuple(packed.shape[:-1])}, got {host.shape}")
    perm = np.broadcast_to(np.arange(n), host.shape).copy()
    for idx in np.ndindex(host.shape[:-1]):
        for i, j in enumerate(host[idx]):
            perm[idx + (i,)], perm[idx + (j,)] = perm[idx + (j,)], perm[idx + (i,)]
    lower = em.tril(packed, -1) + em.eye(n, dtype=packed.dtype, device=packed.device)
    upper = em.triu(packed)
    rhs, vector = _rhs(packed, b, "lu_solve")
    index = em.tensor(perm, dtype="int64", device=packed.device)[..., :, None]
    permuted = em.take_along_axis(rhs, em.broadcast_to(index, tuple(rhs.shape)), axis=-2)
    y = SOLVE_TRIANGULAR(lower, permuted, upper=False, left=True, unitriangular=True)
    out = SOLVE_TRIANGULAR(upper, y, upper=True, left=True, unitriangular=False)
    return out[..., 0] if vector else out


def _rhs(a: em.Tensor, b: Any, op: str) -> tuple[em.Tensor, bool]:
    """``b`` as (..., M, K) with ``a``'s batch broadcast in; whether it was a vector (M,)."""
    b = _float(b, op, "x2", like=a)
    n = a.shape[-1]
    vector = b.ndim == 1
    if vector:
        b = b[:, None]
    if b.ndim < 2 or b.shape[-2] != n:
        raise ShapeError(f"linalg.{op}: x2 must have shape (..., {n}, K) or ({n},), got {tuple(b.shape)}")
    dt = em.result_type(a.dtype, b.dtype)
    batch = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    return em.broadcast_to(b.astype(dt), batch + tuple(b.shape[-2:])), vector


def _broadcast_lhs(a: em.Tensor, b: em.Tensor) -> em.Tensor:
    return em.broadcast_to(a.astype(b.dtype), tuple(b.shape[:-2]) + tuple(a.shape[-2:]))


def solve(x1: Any, x2: Any, /) -> em.Tensor:
    """``X`` with ``x1 @ X == x2``; ``x2`` of shape (M,) is a vector, else (..., M, K)."""
    a = _matrix(x1, "solve", square=True)
    b, vector = _rhs(a, x2, "solve")
    out = SOLVE(_broadcast_lhs(a, b), b)
    return out[..., 0] if vector else out


def solve_triangular(x1: Any, x2: Any, /, *, upper: bool, left: bool = True, unitriangular: bool = False) -> em.Tensor:
    """``X`` with ``x1 @ X == x2`` (``left``) or ``X @ x1 == x2``, reading only x1's upper or lower triangle."""
    a = _matrix(x1, "solve_triangular", square=True)
    b = _float(x2, "solve_triangular", "x2", like=a)
    if b.ndim < 2:
        raise ShapeError(f"linalg.solve_triangular: x2 must have at least 2 dimensions, got {tuple(b.shape)}")
    n = a.shape[-1]
    if (b.shape[-2] if left else b.shape[-1]) != n:
        side = "rows" if left else "columns"
        raise ShapeError(f"linalg.solve_triangular: x2 {tuple(b.shape)} must have {n} {side} for x1 {tuple(a.shape)}")
    dt = em.result_type(a.dtype, b.dtype)
    batch = np.broadcast_shapes(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    a = em.broadcast_to(a.astype(dt), batch + (n, n))
    b = em.broadcast_to(b.astype(dt), batch + tuple(b.shape[-2:]))
    return SOLVE_TRIANGULAR(a, b, upper=bool(upper), left=bool(left), unitriangular=bool(unitriangular))


def inv(x: Any, /) -> em.Tensor:
    """The inverse of a square matrix (a LinAlgError where it is singular on the cpu)."""
    x = _matrix(x, "inv", square=True)
    return SOLVE(x, _eye_like(x))


def slogdet(x: Any, /) -> SlogdetResult:
    """Sign and natural log of the absolute determinant (sign 0 and logabsdet -inf when singular)."""
    out = SLOGDET(_matrix(x, "slogdet", square=True))
    return SlogdetResult(out[..., 0], _real(out[..., 1]))


def det(x: Any, /) -> em.Tensor:
    """The determinant, as ``sign * exp(logabsdet)`` (its gradient ``det * inv(x)^T``)."""
    sign, logabs = slogdet(x)
    return sign * logabs.exp()


def _cutoff(s: em.Tensor, m: int, n: int, rtol: Any) -> em.Tensor:
    """The singular values at or below which a matrix is treated as rank-deficient."""
    if rtol is None:
        rtol = max(m, n) * float(np.finfo(s.dtype.numpy).eps)
    if isinstance(rtol, em.Tensor):
        rtol = rtol.astype(s.dtype)[..., None] if rtol.ndim else rtol.astype(s.dtype)
    top = s.max(axis=-1, keepdims=True) if s.shape[-1] else s.sum(axis=-1, keepdims=True)
    return top * rtol


def pinv(x: Any, /, *, rtol: Any = None) -> em.Tensor:
    """Moore-Penrose pseudo-inverse; singular values <= ``rtol * max(S)`` count as zero."""
    x = _matrix(x, "pinv")
    u, s, vh = svd(x, full_matrices=False)
    keep = s > _cutoff(s, *x.shape[-2:], rtol)
    s_inv = em.where(keep, 1.0 / em.where(keep, s, 1.0), 0.0).astype(x.dtype)
    return (_h(vh) * s_inv[..., None, :]) @ _h(u)


def lstsq(a: Any, b: Any, /, *, rcond: Any = None) -> LstsqResult:
    """Least-squares solution of ``a @ X ~= b`` through the SVD; residuals are the squared 2-norms
    of ``b - a @ X`` per column (empty unless a is tall and of full rank, as numpy)."""
    a = _matrix(a, "lstsq")
    rhs, vector = _rhs_rows(a, b)
    u, s, vh = svd(a, full_matrices=False)
    m, n = a.shape[-2:]
    keep = s > _cutoff(s, m, n, rcond)
    s_inv = em.where(keep, 1.0 / em.where(keep, s, 1.0), 0.0).astype(a.dtype)
    x = (_h(vh) * s_inv[..., None, :]) @ (_h(u) @ rhs)
    rank = keep.astype("int64").sum(axis=-1)
    if m > n and bool((rank == n).all()):
        r = rhs - a @ x
        residuals = (r.abs() * r.abs()).sum(axis=-2)
    else:
        residuals = em.zeros((0,), dtype=a.dtype, device=a.device)
    if vector and residuals.shape[-1:] == (1,):
        residuals = residuals[..., 0]
    return LstsqResult(x[..., 0] if vector else x, residuals, rank, s)


def _rhs_rows(a: em.Tensor, b: Any) -> tuple[em.Tensor, bool]:
    b = _float(b, "lstsq", "b", like=a)
    vector = b.ndim == 1
    if vector:
        b = b[:, None]
    if b.shape[-2] != a.shape[-2]:
        raise ShapeError(f"linalg.lstsq: b must have {a.shape[-2]} rows for a {tuple(a.shape)}, got {tuple(b.shape)}")
    return b.astype(em.result_type(a.dtype, b.dtype)), vector


def matrix_norm(x: Any, /, *, keepdims: bool = False, ord: Any = "fro") -> em.Tensor:
    """Matrix norm over the last two axes: 'fro', 'nuc', 1, -1, 2, -2, inf, -inf."""
    x = _matrix(x, "matrix_norm")
    inf = float("inf")
    if ord == "fro":
        size = x.abs()
        out = (size * size).sum(axis=(-2, -1)).sqrt()
    elif ord in ("nuc", 2, -2):
        s = svdvals(x)
        out = s.sum(axis=-1) if ord == "nuc" else (s.max(axis=-1) if ord == 2 else s.min(axis=-1))
    elif ord in (1, -1):
        cols = x.abs().sum(axis=-2)
        out = cols.max(axis=-1) if ord == 1 else cols.min(axis=-1)
    elif ord in (inf, -inf):
        rows = x.abs().sum(axis=-1)
        out = rows.max(axis=-1) if ord == inf else rows.min(axis=-1)
    else:
        raise InvalidArgumentError(
            f"linalg.matrix_norm: ord must be 'fro', 'nuc', 1, -1, 2, -2, inf or -inf, got {ord!r}"
        )
    return out[..., None, None] if keepdims else out


def norm(x: Any, /, ord: Any = None, axis: Any = None, keepdims: bool = False) -> em.Tensor:
    """numpy.linalg.norm: a vector norm over one axis (or all, flattened), a matrix norm over two."""
    x = _float(x, "norm")
    if axis is None:
        if ord is not None and x.ndim == 2:
            return matrix_norm(x, keepdims=keepdims, ord=ord)
        if ord is not None and x.ndim != 1:
            raise InvalidArgumentError("linalg.norm: ord needs axis=None only for 1-D or 2-D input; pass axis")
        out = vector_norm(x.reshape((-1,)), ord=2 if ord is None else ord)
        return out.reshape((1,) * x.ndim) if keepdims else out
    if isinstance(axis, int):
        return vector_norm(x, axis=axis, keepdims=keepdims, ord=2 if ord is None else ord)
    axes = tuple(int(a) % x.ndim for a in axis)
    if len(axes) != 2 or axes[0] == axes[1]:
        raise InvalidArgumentError(f"linalg.norm: axis must be an int or two distinct axes, got {axis!r}")
    moved = em.moveaxis(x, axes, (-2, -1))
    out = matrix_norm(moved, ord="fro" if ord is None else ord)
    if keepdims:
        for a in sorted(axes):
            out = em.expand_dims(out, axis=a)
    return out


def matrix_rank(x: Any, /, *, rtol: Any = None) -> em.Tensor:
    """The number of singular values above ``rtol * max(S)`` (default rtol: max(M, N) * eps)."""
    x = _matrix(x, "matrix_rank")
    s = svdvals(x)
    return (s > _cutoff(s, *x.shape[-2:], rtol)).astype("int64").sum(axis=-1)


def matrix_power(x: Any, n: int, /) -> em.Tensor:
    """``x`` multiplied by itself ``n`` times (by squaring); ``n < 0`` powers the inverse, 0 gives I."""
    x = _matrix(x, "matrix_power", square=True)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ArgumentTypeError(f"linalg.matrix_power: n must be an int, got {n!r}")
    if n == 0:
        return _eye_like(x) * 1.0
    base = inv(x) if n < 0 else x
    result = None
    for bit in bin(abs(int(n)))[2:]:
        result = result if result is None else result @ result
        if bit == "1":
            result = base if result is None else result @ base
    return result


def cross(x1: Any, x2: Any, /, *, axis: int = -1) -> em.Tensor:
    """Cross product of 3-vectors along ``axis`` (broadcast over the other axes)."""
    a = _numeric(x1, "cross", "x1")
    b = _numeric(x2, "cross", "x2", like=a)
    nd = max(a.ndim, b.ndim)
    if not -min(a.ndim, b.ndim) <= axis < min(a.ndim, b.ndim) or a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"linalg.cross: axis={axis} is out of range for shapes {tuple(a.shape)}, {tuple(b.shape)}")
    back = axis - nd if axis >= 0 else axis
    if a.shape[back] != 3 or b.shape[back] != 3:
        raise ShapeError(f"linalg.cross: axis {axis} must have length 3, got {tuple(a.shape)} and {tuple(b.shape)}")
    a = em.moveaxis(a, back, -1)
    b = em.moveaxis(b, back, -1)
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    out = em.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)
    return em.moveaxis(out, -1, back)

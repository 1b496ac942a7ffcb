"""The reference algorithms, written in ember Tensor ops so that they run on every backend:
LU with partial pivoting, Cholesky, Householder QR, cyclic Jacobi for eigh and one-sided
(Hestenes) Jacobi for the SVD, and substitution for triangular systems.

Every loop runs over a matrix dimension (never over the batch) and updates whole matrices
through masks, so one pass handles any number of leading batch axes. They favour clarity and
portability over speed: a device with a native kernel uses that instead.
"""

from __future__ import annotations

import numpy as np

import ember as em

__all__ = [
    "symmetrize",
    "canonical_columns",
    "lu",
    "cholesky",
    "qr",
    "eigh",
    "svd",
    "solve_triangular",
    "solve",
    "slogdet",
    "jacobi_sweeps",
]


def _const(values: np.ndarray, like: em.Tensor) -> em.Tensor:
    return em.tensor(np.asarray(values), dtype=like.dtype, device=like.device)


def _index(values: np.ndarray, like: em.Tensor) -> em.Tensor:
    return em.tensor(np.asarray(values, dtype=np.int64), dtype="int64", device=like.device)


def symmetrize(a: em.Tensor) -> em.Tensor:
    """``(a + a^T) / 2``: the symmetric matrix eigh and cholesky work on."""
    return (a + a.mT) * 0.5


def _sign(x: em.Tensor) -> em.Tensor:
    """+1 or -1 (zero counts as positive)."""
    return em.where(x < 0, -1.0, 1.0).astype(x.dtype)


def canonical_columns(u: em.Tensor) -> em.Tensor:
    """Per column of ``u``, the sign that makes its largest-magnitude entry positive, shape (..., 1, k).

    Eigenvectors and singular vectors are defined up to sign; fixing it the same way in every
    kernel makes every backend return the same vectors."""
    if u.shape[-2] == 0 or u.shape[-1] == 0 or 0 in tuple(u.shape):
        return em.ones(tuple(u.shape[:-2]) + (1, u.shape[-1]), dtype=u.dtype, device=u.device)
    top = em.argmax(u.abs(), axis=-2, keepdims=True)
    return _sign(em.take_along_axis(u, top, axis=-2))


def lu(a: em.Tensor) -> tuple[em.Tensor, em.Tensor, em.Tensor, em.Tensor]:
    """``a = P @ L @ U`` by Gaussian elimination with partial pivoting; also the permutation's sign."""
    m, n = a.shape[-2:]
    k = min(m, n)
    batch = tuple(a.shape[:-2])
    rows = np.arange(m)
    perm = em.broadcast_to(_index(rows, a), batch + (m,))
    sign = em.ones(batch, dtype=a.dtype, device=a.device)
    for j in range(k):
        below = _const(rows >= j, a) > 0
        col = a[..., :, j]
        p = em.argmax(em.where(below, col.abs(), -1.0), axis=-1, keepdims=True)  # (..., 1)
        idx = _index(rows, a)
        swap = em.where(idx == j, p, em.where(idx == p, j, idx))  # (..., m)
        a = em.take_along_axis(a, em.broadcast_to(swap[..., :, None], batch + (m, n)), axis=-2)
        perm = em.take_along_axis(perm, swap, axis=-1)
        sign = sign * em.where(p[..., 0] == j, 1.0, -1.0).astype(a.dtype)
        pivot = a[..., j, j]
        safe = em.where(pivot == 0, 1.0, pivot)
        strictly_below = _const(rows > j, a)
        factors = a[..., :, j] / safe[..., None] * strictly_below  # (..., m)
        right = _const(np.arange(n) > j, a)
        a = a - factors[..., :, None] * (a[..., j, :] * right)[..., None, :]
        in_column = _const((rows[:, None] > j) & (np.arange(n)[None, :] == j), a) > 0
        a = em.where(in_column, factors[..., :, None], a)
    lower = em.tril(a[..., :, :k], -1) + em.eye(m, k, dtype=a.dtype, device=a.device)
    upper = em.triu(a[..., :k, :])
    p_matrix = (_index(rows, a)[:, None] == perm[..., None, :]).astype(a.dtype)
    return p_matrix, lower, upper, sign


def cholesky(a: em.Tensor) -> em.Tensor:
    """Lower-triangular ``L`` with ``L @ L^T == sym(a)`` (right-looking; NaN where not positive definite)."""
    a = symmetrize(a)
    n = a.shape[-1]
    rows = np.arange(n)
    out = em.zeros_like(a)
    for j in range(n):
        d = a[..., j, j].sqrt()
        col = a[..., :, j] / d[..., None] * _const(rows > j, a) + d[..., None] * _const(rows == j, a)
        out = out + col[..., :, None] * _const(rows == j, a)[None, :]
        a = a - col[..., :, None] * col[..., None, :]
    return out


def qr(a: em.Tensor, complete: bool = False) -> tuple[em.Tensor, em.Tensor]:
    """Householder QR, with the diagonal of ``R`` made non-negative (so Q and R are unique)."""
    m, n = a.shape[-2:]
    k = min(m, n)
    rows = np.arange(m)
    q = em.broadcast_to(em.eye(m, dtype=a.dtype, device=a.device), tuple(a.shape[:-2]) + (m, m))
    r = a
    for j in range(min(k, m - 1) if m > 1 else 0):
        x = r[..., :, j] * _const(rows >= j, a)
        alpha = x[..., j : j + 1]
        norm = (x * x).sum(axis=-1, keepdims=True).sqrt()
        v = x + _sign(alpha) * norm * _const(rows == j, a)
        vv = (v * v).sum(axis=-1, keepdims=True)
        beta = em.where(vv == 0, 0.0, 2.0 / em.where(vv == 0, 1.0, vv))
        r = r - (beta * v)[..., :, None] * (v[..., None, :] @ r)
        q = q - (q @ v[..., :, None]) * (beta * v)[..., None, :]
    kq = m if complete else k
    q, r = q[..., :, :kq], em.triu(r[..., :kq, :])
    d = _sign(em.diagonal(r[..., :k, :k]))  # (..., k)
    if kq > k:
        d = em.concat([d, em.ones(tuple(d.shape[:-1]) + (kq - k,), dtype=a.dtype, device=a.device)], axis=-1)
    return q * d[..., None, :], em.triu(r * d[..., :, None])


def jacobi_sweeps(n: int, dtype: em.DType) -> int:
    """Sweeps of cyclic Jacobi: convergence is quadratic once off-diagonal mass is small."""
    return (8 if dtype.itemsize <= 4 else 10) + int(np.ceil(np.log2(max(n, 2))))


def _rounds(n: int) -> list[list[tuple[int, int]]]:
    """Round-robin pairing of 0..n-1: each round rotates disjoint pairs, together every pair once."""
    players = list(range(n + (n % 2)))
    out = []
    for _ in range(len(players) - 1):
        half = len(players) // 2
        pairs = [(min(players[i], players[-1 - i]), max(players[i], players[-1 - i])) for i in range(half)]
        out.append([(p, q) for p, q in pairs if q < n])
        players = [players[0], players[-1]] + players[1:-1]
    return out


def _rotation_indices(n: int, pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Flat positions of (a_pp, a_qq, a_pq) for each pair, and where (c-1, c-1, s, -s) go in J."""
    pp = [p * n + p for p, _ in pairs]
    qq = [q * n + q for _, q in pairs]
    pq = [p * n + q for p, q in pairs]
    qp = [q * n + p for p, q in pairs]
    return np.array(pp + qq + pq), np.array(pp + qq + pq + qp)


def _jacobi(gram: callable, apply: callable, n: int, like: em.Tensor, sweeps: int) -> None:
    """Drive cyclic Jacobi: ``gram()`` gives the current symmetric matrix, ``apply(J)`` rotates.

    Each step rotates n/2 disjoint pairs at once: their entries are gathered from the flattened
    matrix and the rotations scattered into one matrix J (O(n) indices per step, no n^2 tables)."""
    batch = tuple(like.shape[:-2])
    eye = em.eye(n, dtype=like.dtype, device=like.device)
    zeros = em.zeros(batch + (n * n,), dtype=like.dtype, device=like.device)
    steps = []
    for pairs in _rounds(n):
        if pairs:
            read, write = _rotation_indices(n, pairs)
            steps.append((len(pairs), _index(read, like), em.broadcast_to(_index(write, like), batch + (len(write),))))
    tiny = float(np.finfo(like.dtype.numpy).tiny)
    for _ in range(sweeps):
        for count, read, write in steps:
            picked = em.take(gram().reshape(batch + (n * n,)), read, axis=-1)
            app, aqq, apq = picked[..., :count], picked[..., count : 2 * count], picked[..., 2 * count :]
            flat = apq.abs() <= tiny
            tau = (aqq - app) / (2.0 * em.where(flat, 1.0, apq))
            t = _sign(tau) / (tau.abs() + (1.0 + tau * tau).sqrt())
            t = em.where(flat, 0.0, t)
            c = 1.0 / (1.0 + t * t).sqrt()
            s = t * c
            values = em.concat([c - 1.0, c - 1.0, s, -s], axis=-1)
            apply(eye + em.scatter_add(zeros, write, values, -1).reshape(batch + (n, n)))


def eigh(a: em.Tensor) -> tuple[em.Tensor, em.Tensor]:
    """Eigenvalues (ascending) and eigenvectors of ``sym(a)`` by cyclic Jacobi rotations."""
    n = a.shape[-1]
    state = {"a": symmetrize(a), "v": em.broadcast_to(em.eye(n, dtype=a.dtype, device=a.device), tuple(a.shape))}

    def rotate(j: em.Tensor) -> None:
        state["a"] = j.mT @ state["a"] @ j
        state["v"] = state["v"] @ j

    _jacobi(lambda: state["a"], rotate, n, a, jacobi_sweeps(n, a.dtype))
    w = em.diagonal(state["a"])
    order = em.argsort(w, axis=-1)
    w = em.take_along_axis(w, order, axis=-1)
    v = em.take_along_axis(state["v"], em.broadcast_to(order[..., None, :], tuple(a.shape)), axis=-1)
    return w, v * canonical_columns(v)


def svd(a: em.Tensor) -> tuple[em.Tensor, em.Tensor, em.Tensor]:
    """Reduced SVD ``a = U diag(S) Vh`` by one-sided Jacobi; S descending, U's signs canonical."""
    m, n = a.shape[-2:]
    if m < n:
        u, s, vh = svd(a.mT)
        v, ut = vh.mT, u.mT
        sign = canonical_columns(v)
        return v * sign, s, ut * sign.mT
    state = {"a": a, "v": em.broadcast_to(em.eye(n, dtype=a.dtype, device=a.device), tuple(a.shape[:-2]) + (n, n))}

    def rotate(j: em.Tensor) -> None:
        state["a"] = state["a"] @ j
        state["v"] = state["v"] @ j

    _jacobi(lambda: state["a"].mT @ state["a"], rotate, n, a, jacobi_sweeps(n, a.dtype))
    cols = state["a"]
    s = (cols * cols).sum(axis=-2).sqrt()
    order = em.argsort(s, axis=-1, descending=True)
    s = em.take_along_axis(s, order, axis=-1)
    u = em.take_along_axis(cols, em.broadcast_to(order[..., None, :], tuple(cols.shape)), axis=-1)
    v = em.take_along_axis(state["v"], em.broadcast_to(order[..., None, :], tuple(state["v"].shape)), axis=-1)
    u = u / em.where(s == 0, 1.0, s)[..., None, :]
    sign = canonical_columns(u)
    return u * sign, s, (v * sign).mT


def solve_triangular(a: em.Tensor, b: em.Tensor, upper: bool, left: bool, unitriangular: bool) -> em.Tensor:
    """``X`` with ``a @ X == b`` (``left``) or ``X @ a == b``, reading only ``a``'s triangle."""
    if not left:
        return solve_triangular(a.mT, b.mT, not upper, True, unitriangular).mT
    n = a.shape[-1]
    a = em.triu(a) if upper else em.tril(a)
    rows = np.arange(n)
    x = em.zeros_like(b)
    for i in reversed(range(n)) if upper else range(n):
        residual = b[..., i, :] - (a[..., i : i + 1, :] @ x)[..., 0, :]
        row = residual if unitriangular else residual / a[..., i, i][..., None]
        x = x + _const(rows == i, a)[:, None] * row[..., None, :]
    return x


def solve(a: em.Tensor, b: em.Tensor) -> em.Tensor:
    """``X`` with ``a @ X == b`` through LU with partial pivoting."""
    p, lower, upper, _ = lu(a)
    y = solve_triangular(lower, p.mT @ b, upper=False, left=True, unitriangular=True)
    return solve_triangular(upper, y, upper=True, left=True, unitriangular=False)


def slogdet(a: em.Tensor) -> tuple[em.Tensor, em.Tensor]:
    """Sign and log of the absolute value of the determinant, from LU."""
    _, _, upper, sign = lu(a)
    d = em.diagonal(upper)
    sign = sign * _sign(d).prod(axis=-1) * em.where((d == 0).any(axis=-1), 0.0, 1.0).astype(a.dtype)
    return sign, d.abs().log().sum(axis=-1)

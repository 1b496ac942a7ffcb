"""The dispatched linalg ops: one ``@backend_extension`` per factorization or solver, each with
its reference (``reference.py``), its gradient rule next to it, its argument checks and the
small samples the conformance suite runs every kernel and gradient on.

Several results travel packed in one tensor (``packing.py``); the functions in ``api.py``
split them. Native kernels register per device kind in ``kernels_cpu.py`` / ``kernels_cuda.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as em
from ember.errors import InvalidArgumentError, NotImplementedOpError, ShapeError

from . import reference
from .packing import pack, unpack

__all__ = [
    "FLOATS",
    "CHOLESKY",
    "QR",
    "EIGH",
    "SVD",
    "LU",
    "SOLVE",
    "SOLVE_TRIANGULAR",
    "SLOGDET",
    "EIG",
    "EXTENSION_OPS",
    "qr_shapes",
    "svd_shapes",
    "lu_shapes",
]

#: what the ops take; complex only where a native kernel runs (the references and vjps are real)
FLOATS = ("float32", "float64", "complex64", "complex128")


def _real_only(op: str, *tensors: em.Tensor) -> None:
    """The references are written for real matrices: complex input needs a native kernel."""
    for t in tensors:
        if t.dtype.kind == "c":
            raise NotImplementedOpError(
                f"{op}: complex {t.dtype} input needs a native kernel, and {t.device.kind} has none for it "
                f"(the Tensor-op reference handles float32/float64; cpu has complex kernels)"
            )


# -- checks and samples ------------------------------------------------------------------------
def _matrix(op: str, a: em.Tensor, square: bool = False) -> None:
    if a.ndim < 2:
        raise ShapeError(f"{op}: x must have at least 2 dimensions (..., M, N), got shape {tuple(a.shape)}")
    if square and a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{op}: x must be square in its last two axes, got shape {tuple(a.shape)}")


def _square(op: str) -> Any:
    return lambda a, **params: _matrix(op, a, square=True)


def _rhs(op: str) -> Any:
    def check(a: em.Tensor, b: em.Tensor, **params: Any) -> None:
        _matrix(op, a, square=True)
        n = a.shape[-1]
        left = params.get("left", True)
        if b.ndim != a.ndim or tuple(b.shape[:-2]) != tuple(a.shape[:-2]):
            raise ShapeError(f"{op}: x2 must have x1's batch shape {tuple(a.shape[:-2])}, got {tuple(b.shape)}")
        if (b.shape[-2] if left else b.shape[-1]) != n:
            raise ShapeError(f"{op}: x2 of shape {tuple(b.shape)} does not match x1 of shape {tuple(a.shape)}")

    return check


def _well_conditioned(rng: np.random.Generator, shape: tuple[int, ...], spread: float = 4.0) -> np.ndarray:
    """A random matrix with singular values in [1, spread] (condition number <= spread)."""
    m, n = shape[-2:]
    k = min(m, n)
    u = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, k)))[0]
    v = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, k)))[0]
    s = np.linspace(spread, 1.0, k) * (1.0 + 0.05 * rng.random(shape[:-2] + (k,)))
    return (u * s[..., None, :]) @ np.swapaxes(v, -1, -2)


def _spd(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Symmetric positive definite with distinct eigenvalues in [1, 4]."""
    n = shape[-1]
    q = np.linalg.qr(rng.standard_normal(shape))[0]
    w = np.linspace(1.0, 4.0, n) + 0.05 * rng.random(shape[:-1])
    return (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)


def _one(a: em.Tensor, *_: Any, **__: Any) -> tuple[int, ...]:
    return tuple(a.shape[:-2])


# -- cholesky ----------------------------------------------------------------------------------
def _cholesky_sample(rng: np.random.Generator, dtype: str) -> list[Any]:
    return [((_spd(rng, (2, 3, 3)),), {})]


@em.backend_extension(
    "linalg_cholesky", dtypes=FLOATS, check=_square("cholesky"), sample=_cholesky_sample, tolerance=20.0
)
def CHOLESKY(a):  # noqa: N802 - ops are constants of this module
    """Lower Cholesky factor of ``(a + a^T)/2``."""
    _real_only("cholesky", a)
    return reference.cholesky(a)


@CHOLESKY.vjp
def _cholesky_vjp(ctx, g):
    lower = ctx.output
    phi = lower.mT @ em.tril(g)
    phi = em.tril(phi) - 0.5 * em.diagonal(phi)[..., None] * em.eye(phi.shape[-1], dtype=g.dtype, device=g.device)
    left = _tri(lower.mT, phi, upper=True, left=True)
    s = _tri(lower, left, upper=False, left=False)
    return (reference.symmetrize(s),)


# -- qr ----------------------------------------------------------------------------------------
def qr_shapes(m: int, n: int, complete: bool) -> list[tuple[int, ...]]:
    """Packed layout of ``linalg_qr``: Q then R."""
    k = m if complete else min(m, n)
    return [(m, k), (k, n)]


def _qr_reference(a, complete=False):
    _real_only("qr", a)
    q, r = reference.qr(a, complete)
    return pack([q, r], tuple(a.shape[:-2]))


def _qr_sample(rng: np.random.Generator, dtype: str) -> list[Any]:
    return [((_well_conditioned(rng, (2, 4, 3)),), {}), ((_well_conditioned(rng, (3, 3)),), {})]


QR = em.backend_extension(
    "linalg_qr", dtypes=FLOATS, check=lambda a, **p: _matrix("qr", a), sample=_qr_sample, tolerance=20.0
)(_qr_reference)


@QR.vjp
def _qr_vjp(ctx, g):
    a = ctx.inputs[0]
    m, n = a.shape[-2:]
    if ctx.params.get("complete", False) and m > n:
        raise InvalidArgumentError("qr: the gradient of mode='complete' for a tall matrix is not defined (not unique)")
    q, r = unpack(ctx.output, qr_shapes(m, n, ctx.params.get("complete", False)))
    gq, gr = unpack(g, qr_shapes(m, n, ctx.params.get("complete", False)))
    if m >= n:
        return (_qr_square_vjp(q, r, gq, gr),)
    x_r = r[..., :, :m]
    gx_r, gy_r = gr[..., :, :m], gr[..., :, m:]
    y = a[..., :, m:]
    gx = _qr_square_vjp(q, x_r, gq + y @ gy_r.mT, gx_r)
    return (em.concat([gx, q @ gy_r], axis=-1),)


def _qr_square_vjp(q, r, gq, gr):
    """The rule for m >= n: (gQ + Q copyltu(M)) R^-T with M = R gR^T - gQ^T Q."""
    m_ = r @ gr.mT - gq.mT @ q
    copyltu = em.tril(m_) + em.tril(m_, -1).mT
    return _tri(r.mT, gq + q @ copyltu, upper=False, left=False)


# -- eigh --------------------------------------------------------------------------------------
def _eigh_reference(a):
    _real_only("eigh", a)
    w, v = reference.eigh(a)
    return pack([w, v], tuple(a.shape[:-2]))


def _eigh_sample(rng: np.random.Generator, dtype: str) -> list[Any]:
    return [((_spd(rng, (2, 3, 3)) - 2.0,), {})]


EIGH = em.backend_extension("linalg_eigh", dtypes=FLOATS, check=_square("eigh"), sample=_eigh_sample, tolerance=50.0)(
    _eigh_reference
)


@EIGH.vjp
def _eigh_vjp(ctx, g):
    n = ctx.inputs[0].shape[-1]
    w, v = unpack(ctx.output, [(n,), (n, n)])
    gw, gv = unpack(g, [(n,), (n, n)])
    gap = w[..., None, :] - w[..., :, None]  # w_j - w_i
    eye = em.eye(n, dtype=g.dtype, device=g.device)
    f = (1.0 - eye) / (gap + eye)
    inner = f * (v.mT @ gv) + gw[..., None] * eye
    return (reference.symmetrize(v @ inner @ v.mT),)


# -- svd ---------------------------------------------------------------------------------------
def svd_shapes(m: int, n: int, full: bool) -> list[tuple[int, ...]]:
    """Packed layout of ``linalg_svd``: U, S, Vh."""
    k = min(m, n)
    return [(m, m if full else k), (k,), (n if full else k, n)]


def _svd_reference(a, full_matrices=False):
    _real_only("svd", a)
    u, s, vh = reference.svd(a)
    m, n = a.shape[-2:]
    if full_matrices and m != n:
        # complete the orthonormal basis (the extra vectors are not unique): QR with a positive R keeps
        # the first k columns as they are
        if m > n:
            u = reference.qr(u, complete=True)[0]
        else:
            vh = reference.qr(vh.mT, complete=True)[0].mT
    return pack([u, s, vh], tuple(a.shape[:-2]))


def _svd_sample(rng: np.random.Generator, dtype: str) -> list[Any]:
    return [((_well_conditioned(rng, (2, 4, 3)),), {}), ((_well_conditioned(rng, (2, 3)),), {})]


SVD = em.backend_extension(
    "linalg_svd", dtypes=FLOATS, check=lambda a, **p: _matrix("svd", a), sample=_svd_sample, tolerance=50.0
)(_svd_reference)


@SVD.vjp
def _svd_vjp(ctx, g):
    a = ctx.inputs[0]
    m, n = a.shape[-2:]
    full = ctx.params.get("full_matrices", False)
    if full and m != n:
        raise InvalidArgumentError(
            "svd: the gradient with full_matrices=True of a non-square matrix is not defined (the extra "
            "singular vectors are not unique); use full_matrices=False"
        )
    u, s, vh = unpack(ctx.output, svd_shapes(m, n, full))
    gu, gs, gvh = unpack(g, svd_shapes(m, n, full))
    k = min(m, n)
    v, gv = vh.mT, gvh.mT
    eye = em.eye(k, dtype=g.dtype, device=g.device)
    s2 = s * s
    gap = s2[..., None, :] - s2[..., :, None]  # s_j^2 - s_i^2
    f = (1.0 - eye) / (gap + eye)
    sm = s[..., None, :]  # multiplies columns
    ut_gu, vt_gv = u.mT @ gu, v.mT @ gv
    core = (f * (ut_gu - ut_gu.mT)) * sm + gs[..., None] * eye + s[..., :, None] * (f * (vt_gv - vt_gv.mT))
    out = u @ core @ vh
    inv_s = 1.0 / s
    if m > k:
        out = out + (gu - u @ ut_gu) * inv_s[..., None, :] @ vh
    if n > k:
        out = out + (u * inv_s[..., None, :]) @ (gv.mT - vt_gv.mT @ vh)
    return (out,)


# -- lu ----------------------------------------------------------------------------------------
def lu_shapes(m: int, n: int) -> list[tuple[int, ...]]:
    """Packed layout of ``linalg_lu``: P, L, U."""
    k = min(m, n)
    return [(m, m), (m, k), (k, n)]


def _lu_reference(a):
    _real_only("lu", a)
    p, lower, upper, _ = reference.lu(a)
    return pack([p, lower, upper], tuple(a.shape[:-2]))


def _lu_sample(rng: np.random.Generator, dtype: str) -> list[Any]:
    return [((_well_conditioned(rng, (2, 4, 4)),), {})]


LU = em.backend_extension("linalg_lu", dtypes=FLOATS, check=lambda a, **p: _matrix("lu", a), sample=_lu_sample)(
    _lu_reference
)


@LU.vjp
def _lu_vjp(ctx, g):
    m, n = ctx.inputs[0].shape[-2:]
    if m != n:
        raise InvalidArgumentError(f"lu: gradients are implemented for square matrices only, got {m}x{n}")
    p, lower, upper = unpack(ctx.output, lu_shapes(m, n))
    _, gl, gu = unpack(g, lu_shapes(m, n))
    phi = em.tril(lower.mT @ gl, -1) + em.triu(gu @ upper.mT)
    left = _tri(lower.mT, phi, upper=True, left=True, unitriangular=True)
    return (p @ _tri(upper.mT, left, upper=False, left=False),)


# -- solve -------------------------------------------------------------------------------------
def _solve_sample(rng: np.random.Generator, dtype: str) -> list[Any]:
    return [((_well_conditioned(rng, (2, 3, 3)), rng.standard_normal((2, 3, 2))), {})]


@em.backend_extension("linalg_solve", dtypes=FLOATS, check=_rhs("solve"), sample=_solve_sample, tolerance=20.0)
def SOLVE(a, b):  # noqa: N802
    """``X`` with ``a @ X == b``."""
    _real_only("solve", a, b)
    return reference.solve(a, b)


@SOLVE.vjp
def _solve_vjp(ctx, g):
    a, _ = ctx.inputs
    gb = SOLVE(a.mT, g)
    return (-(gb @ ctx.output.mT), gb)


# -- solve_triangular ----------------------------------------------------------------------------
def _tri_sample(rng: np.random.Generator, dtype: str) -> list[Any]:
    a = np.tril(rng.standard_normal((2, 3, 3)), -1) + np.diag([2.0, -1.5, 1.8])
    b = rng.standard_normal((2, 3, 2))
    return [
        ((a, b), {"upper": False, "left": True, "unitriangular": False}),
        ((np.swapaxes(a, -1, -2), np.swapaxes(b, -1, -2)), {"upper": True, "left": False, "unitriangular": True}),
    ]


@em.backend_extension(
    "linalg_solve_triangular", dtypes=FLOATS, check=_rhs("solve_triangular"), sample=_tri_sample, tolerance=20.0
)
def SOLVE_TRIANGULAR(a, b, upper=False, left=True, unitriangular=False):  # noqa: N802
    """``X`` with ``a @ X == b`` (or ``X @ a == b``), reading one triangle of ``a``."""
    _real_only("solve_triangular", a, b)
    return reference.solve_triangular(a, b, upper, left, unitriangular)


def _tri(a, b, upper, left, unitriangular=False):
    return SOLVE_TRIANGULAR(a, b, upper=upper, left=left, unitriangular=unitriangular)


@SOLVE_TRIANGULAR.vjp
def _solve_triangular_vjp(ctx, g):
    a, _ = ctx.inputs
    upper, left, unit = (ctx.params.get(k, d) for k, d in (("upper", False), ("left", True), ("unitriangular", False)))
    x = ctx.output
    gb = _tri(a.mT, g, upper=not upper, left=left, unitriangular=unit)
    ga = -(gb @ x.mT) if left else -(x.mT @ gb)
    ga = em.triu(ga, 1 if unit else 0) if upper else em.tril(ga, -1 if unit else 0)
    return (ga, gb)


# -- slogdet -----------------------------------------------------------------------------------
def _slogdet_reference(a):
    _real_only("slogdet", a)
    sign, logabs = reference.slogdet(a)
    return em.stack([sign, logabs], axis=-1)


def _slogdet_sample(rng: np.random.Generator, dtype: str) -> list[Any]:
    return [((_well_conditioned(rng, (2, 3, 3)),), {})]


SLOGDET = em.backend_extension(
    "linalg_slogdet", dtypes=FLOATS, check=_square("slogdet"), sample=_slogdet_sample, tolerance=20.0
)(_slogdet_reference)


@SLOGDET.vjp
def _slogdet_vjp(ctx, g):
    a = ctx.inputs[0]
    n = a.shape[-1]
    eye = em.broadcast_to(em.eye(n, dtype=a.dtype, device=a.device), tuple(a.shape))
    inv_t = SOLVE(a.mT, eye)
    return (g[..., 1][..., None, None] * inv_t,)


# -- eig (general, complex results) -------------------------------------------------------------
@em.backend_extension("linalg_eig", dtypes=FLOATS, check=_square("eig"))
def EIG(a):  # noqa: N802
    """Eigenvalues and eigenvectors of a general square matrix, packed, in the complex dtype."""
    raise NotImplementedOpError(
        f"eig: no Tensor-op reference yet (a general eigensolver with complex results), so it runs only where a "
        f"native kernel exists (cpu), forward only; {a.device.kind} has none"
    )


#: every op this package registers (what ``ember plugins`` lists)
EXTENSION_OPS = (CHOLESKY, QR, EIGH, SVD, LU, SOLVE, SOLVE_TRIANGULAR, SLOGDET, EIG)

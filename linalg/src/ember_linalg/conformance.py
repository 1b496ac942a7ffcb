"""Conformance cases of ember-linalg, added to the ember conformance suite through the
``ember_conformance_modules`` hook: every ``em.linalg`` function against numpy / scipy in
float64 on the device under test, and its gradient against central differences of that
reference.

Tolerances are the suite's dtype tolerances times ``scale``, which grows with the matrix size
and the condition number of the inputs (docs/linalg.md). Inputs are built with known spectra
(condition number <= 4, eigenvalue gaps >= 0.5), so the scale is a constant per case. Eigen- and
singular vectors follow ember's sign convention (largest-magnitude entry of each vector of
eigh's V and svd's U positive; QR's R with a non-negative diagonal), applied to numpy's results.

``quick`` marks the subset CI runs on the emulated devices (PoCL, lavapipe): one case per
algorithm, so the Tensor-op references are each exercised, forward and gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import scipy.linalg

import ember as em
from ember_conformance.checks import assert_close, check, check_gradients, require_dtype

EMBER_CONFORMANCE = True


@dataclass
class Case:
    """One function on one input: the ember call, the numpy reference, what is differentiated."""

    name: str
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    fn: Callable[..., Any]
    ref: Callable[..., Any]
    grad: tuple[int, ...] = (0,)
    scale: float = 50.0
    quick: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)


# -- inputs with known conditioning -------------------------------------------------------------
def _orth(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return np.linalg.qr(rng.standard_normal(shape))[0]


def general(*shape: int, spread: float = 4.0) -> Callable[[np.random.Generator], np.ndarray]:
    """Singular values spaced in [1, spread]: condition number <= spread, gaps >= (spread-1)/k."""

    def make(rng: np.random.Generator) -> np.ndarray:
        m, n = shape[-2:]
        k = min(m, n)
        u, v = _orth(rng, shape[:-2] + (m, k)), _orth(rng, shape[:-2] + (n, k))
        s = np.linspace(spread, 1.0, k)
        return (u * s[..., None, :]) @ np.swapaxes(v, -1, -2)

    return make


def spd(*shape: int, low: float = 1.0) -> Callable[[np.random.Generator], np.ndarray]:
    """Symmetric with eigenvalues spaced in [low, low + 3]."""

    def make(rng: np.random.Generator) -> np.ndarray:
        q = _orth(rng, shape)
        w = np.linspace(low, low + 3.0, shape[-1])
        return (q * w[..., None, :]) @ np.swapaxes(q, -1, -2)

    return make


def plain(*shape: int) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: rng.uniform(-1.0, 1.0, size=shape)


def triangular(n: int, upper: bool, batch: tuple[int, ...] = ()) -> Callable[[np.random.Generator], np.ndarray]:
    def make(rng: np.random.Generator) -> np.ndarray:
        a = rng.uniform(-0.5, 0.5, size=batch + (n, n)) + np.diag(np.linspace(1.5, 2.5, n))
        return np.triu(a) if upper else np.tril(a)

    return make


def _inputs(*makers: Callable[[np.random.Generator], np.ndarray]) -> Callable[[np.random.Generator], list[np.ndarray]]:
    return lambda rng: [m(rng) for m in makers]


# -- numpy references in ember's conventions ---------------------------------------------------
def _sym(a: np.ndarray) -> np.ndarray:
    return (a + np.swapaxes(a, -1, -2)) / 2


def _col_signs(u: np.ndarray) -> np.ndarray:
    top = np.argmax(np.abs(u), axis=-2)[..., None, :]
    return np.where(np.take_along_axis(u, top, axis=-2) < 0, -1.0, 1.0)


def np_eigh(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w, v = np.linalg.eigh(_sym(a))
    return w, v * _col_signs(v)


def np_svd(a: np.ndarray, full_matrices: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
    sign = _col_signs(u)
    return u * sign, s, vh * np.swapaxes(sign, -1, -2)


def np_qr(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q, r = np.linalg.qr(a)
    d = np.where(np.diagonal(r, axis1=-2, axis2=-1) < 0, -1.0, 1.0)
    return q * d[..., None, :], r * d[..., :, None]


def np_solve_triangular(a: np.ndarray, b: np.ndarray, upper: bool, left: bool = True, unit: bool = False) -> Any:
    a = np.triu(a) if upper else np.tril(a)
    if unit:
        a = a - np.diag(np.diagonal(a)) + np.eye(a.shape[-1])
    return np.linalg.solve(a, b) if left else np.swapaxes(np.linalg.solve(a.T, np.swapaxes(b, -1, -2)), -1, -2)


def np_lu_solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.linalg.solve(a, b)


def np_pinv(a: np.ndarray) -> np.ndarray:
    return np.linalg.pinv(a)


def np_matrix_power(a: np.ndarray, n: int) -> np.ndarray:
    return np.linalg.matrix_power(a, n)


def _la() -> Any:
    import ember_linalg

    return ember_linalg


CASES = [
    Case("cholesky", _inputs(spd(2, 3, 3)), lambda a: _la().cholesky(a),
         lambda a: np.linalg.cholesky(_sym(a)), quick=True),
    Case("cholesky_upper", _inputs(spd(3, 3)), lambda a: _la().cholesky(a, upper=True),
         lambda a: np.linalg.cholesky(_sym(a)).T),
    Case("qr_tall", _inputs(general(2, 4, 3)), lambda a: tuple(_la().qr(a)), np_qr, quick=True),
    Case("qr_wide", _inputs(general(3, 5)), lambda a: tuple(_la().qr(a)), np_qr),
    Case("eigh", _inputs(spd(2, 3, 3, low=-1.5)), lambda a: tuple(_la().eigh(a)), np_eigh, quick=True),
    Case("eigh_4", _inputs(spd(4, 4, low=-1.0)), lambda a: tuple(_la().eigh(a)), np_eigh),
    Case("eigvalsh", _inputs(spd(2, 3, 3)), lambda a: _la().eigvalsh(a), lambda a: np.linalg.eigvalsh(_sym(a))),
    Case("svd_tall", _inputs(general(2, 4, 3)), lambda a: tuple(_la().svd(a, full_matrices=False)), np_svd,
         quick=True),
    Case("svd_wide", _inputs(general(2, 4)), lambda a: tuple(_la().svd(a, full_matrices=False)), np_svd),
    Case("svd_square_full", _inputs(general(3, 3)), lambda a: tuple(_la().svd(a)),
         lambda a: np_svd(a, full_matrices=True)),
    Case("svdvals", _inputs(general(2, 4, 3)), lambda a: _la().svdvals(a),
         lambda a: np.linalg.svd(a, compute_uv=False)),
    Case("lu", _inputs(general(2, 4, 4)), lambda a: tuple(_la().lu(a)), lambda a: scipy.linalg.lu(a), quick=True),
    Case("lu_wide", _inputs(general(3, 4)), lambda a: tuple(_la().lu(a)), lambda a: scipy.linalg.lu(a), grad=()),
    Case("lu_solve", _inputs(general(3, 3), plain(3, 2)),
         lambda a, b: _la().lu_solve(_la().lu_factor(a), b), np_lu_solve, grad=(1,)),
    Case("solve", _inputs(general(2, 3, 3), plain(2, 3, 2)), lambda a, b: _la().solve(a, b), np.linalg.solve,
         grad=(0, 1), quick=True),
    Case("solve_vector", _inputs(general(3, 3), plain(3)), lambda a, b: _la().solve(a, b), np.linalg.solve,
         grad=(0, 1)),
    Case("solve_broadcast", _inputs(general(2, 3, 3), plain(3, 2)), lambda a, b: _la().solve(a, b),
         lambda a, b: np.linalg.solve(a, np.broadcast_to(b, (2, 3, 2))), grad=(0, 1)),
    Case("solve_triangular_upper", _inputs(triangular(3, True, (2,)), plain(2, 3, 2)),
         lambda a, b: _la().solve_triangular(a, b, upper=True),
         lambda a, b: np_solve_triangular(a, b, True), grad=(0, 1), quick=True),
    Case("solve_triangular_lower_right_unit", _inputs(triangular(3, False), plain(2, 3)),
         lambda a, b: _la().solve_triangular(a, b, upper=False, left=False, unitriangular=True),
         lambda a, b: np_solve_triangular(a, b, False, left=False, unit=True), grad=(0, 1)),
    Case("inv", _inputs(general(2, 3, 3)), lambda a: _la().inv(a), np.linalg.inv),
    Case("det", _inputs(general(2, 3, 3)), lambda a: _la().det(a), np.linalg.det, quick=True),
    Case("slogdet", _inputs(general(2, 3, 3)), lambda a: tuple(_la().slogdet(a)),
         lambda a: tuple(np.linalg.slogdet(a))),
    Case("pinv", _inputs(general(2, 4, 3)), lambda a: _la().pinv(a), np_pinv),
    Case("lstsq", _inputs(general(4, 3), plain(4, 2)), lambda a, b: _la().lstsq(a, b).solution,
         lambda a, b: np.linalg.lstsq(a, b, rcond=None)[0], grad=(0, 1)),
    Case("matrix_norm_fro", _inputs(plain(2, 3, 4)), lambda a: _la().matrix_norm(a),
         lambda a: np.linalg.norm(a, ord="fro", axis=(-2, -1))),
    Case("matrix_norm_nuc", _inputs(general(2, 3, 4)), lambda a: _la().matrix_norm(a, ord="nuc"),
         lambda a: np.linalg.norm(a, ord="nuc", axis=(-2, -1))),
    Case("matrix_norm_2", _inputs(general(2, 3, 4)), lambda a: _la().matrix_norm(a, ord=2),
         lambda a: np.linalg.norm(a, ord=2, axis=(-2, -1))),
    Case("matrix_norm_-2", _inputs(general(3, 4)), lambda a: _la().matrix_norm(a, ord=-2, keepdims=True),
         lambda a: np.linalg.norm(a, ord=-2, axis=(-2, -1), keepdims=True)),
    Case("matrix_norm_1", _inputs(plain(2, 3, 4)), lambda a: _la().matrix_norm(a, ord=1),
         lambda a: np.linalg.norm(a, ord=1, axis=(-2, -1))),
    Case("matrix_norm_inf", _inputs(plain(2, 3, 4)), lambda a: _la().matrix_norm(a, ord=float("inf")),
         lambda a: np.linalg.norm(a, ord=np.inf, axis=(-2, -1))),
    Case("norm_flat", _inputs(plain(2, 3, 4)), lambda a: _la().norm(a), lambda a: np.linalg.norm(a)),
    Case("norm_axes", _inputs(plain(2, 3, 4)), lambda a: _la().norm(a, axis=(0, 2), keepdims=True),
         lambda a: np.linalg.norm(a, axis=(0, 2), keepdims=True)),
    Case("vector_norm_1", _inputs(plain(2, 5)), lambda a: _la().vector_norm(a, axis=-1, ord=1),
         lambda a: np.linalg.norm(a, ord=1, axis=-1)),
    Case("vector_norm_-1.5", _inputs(plain(2, 5)), lambda a: _la().vector_norm(a, axis=-1, ord=-1.5),
         lambda a: np.linalg.norm(a, ord=-1.5, axis=-1)),
    Case("matrix_power_3", _inputs(plain(2, 3, 3)), lambda a: _la().matrix_power(a, 3),
         lambda a: np_matrix_power(a, 3)),
    Case("matrix_power_-2", _inputs(general(3, 3)), lambda a: _la().matrix_power(a, -2),
         lambda a: np_matrix_power(a, -2)),
    Case("cross", _inputs(plain(2, 3), plain(2, 3)), lambda a, b: _la().cross(a, b), np.cross, grad=(0, 1)),
    Case("cross_axis0", _inputs(plain(3, 2), plain(3, 2)), lambda a, b: _la().cross(a, b, axis=0),
         lambda a, b: np.cross(a, b, axis=0), grad=(0, 1)),
    Case("outer", _inputs(plain(3), plain(4)), lambda a, b: _la().outer(a, b), np.outer, grad=(0, 1)),
    Case("trace", _inputs(plain(2, 3, 3)), lambda a: _la().trace(a, offset=1),
         lambda a: np.trace(a, offset=1, axis1=-2, axis2=-1)),
    Case("diagonal", _inputs(plain(2, 3, 4)), lambda a: _la().diagonal(a, offset=-1),
         lambda a: np.diagonal(a, offset=-1, axis1=-2, axis2=-1)),
    Case("tensordot", _inputs(plain(2, 3, 4), plain(3, 4, 2)), lambda a, b: _la().tensordot(a, b, axes=2),
         lambda a, b: np.tensordot(a, b, axes=2), grad=(0, 1)),
    Case("vecdot", _inputs(plain(2, 3), plain(3)), lambda a, b: _la().vecdot(a, b),
         lambda a, b: np.sum(a * b, axis=-1), grad=(0, 1)),
    Case("matmul", _inputs(plain(2, 3, 4), plain(4, 2)), lambda a, b: _la().matmul(a, b), np.matmul, grad=(0, 1)),
]  # fmt: skip

DTYPES = [em.float32, em.float64]


def _ids(case: Case) -> str:
    """The case's name; the CI subset for emulated devices is tagged so ``-k quick`` selects it."""
    return f"{case.name}-quick" if case.quick else case.name


def _run(case: Case, device: em.Device, dtype: em.DType, seed: int) -> tuple[list[np.ndarray], list[em.Tensor]]:
    require_dtype(device, dtype)
    host = [np.asarray(x, dtype=np.float64) for x in case.inputs(np.random.default_rng(seed))]
    # the reference sees the values ember sees (rounded to dtype), so only ember's error is measured
    host = [x.astype(dtype.numpy).astype(np.float64) for x in host]
    return host, [em.tensor(x, dtype=dtype, device=device) for x in host]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("spec", CASES, ids=_ids)
def test_em_linalg(spec: Case, dtype: em.DType, device: em.Device) -> None:
    host, args = _run(spec, device, dtype, 0)
    got = _as_list(spec.fn(*args, **spec.kwargs))
    want = _as_list(spec.ref(*host, **spec.kwargs))
    check(len(got) == len(want), f"{spec.name}: {len(got)} results, numpy gives {len(want)}")
    for i, (g, w) in enumerate(zip(got, want)):
        check(tuple(g.shape) == np.shape(w), f"{spec.name} result {i}: shape {tuple(g.shape)}, numpy {np.shape(w)}")
        check(g.device == device, f"{spec.name} result {i} is on {g.device}, not {device}")
        assert_close(g, np.asarray(w), dtype, scale=spec.scale, what=f"{spec.name} result {i}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("spec", [c for c in CASES if c.grad], ids=_ids)
def test_em_linalg_gradient(spec: Case, dtype: em.DType, ad_device: em.Device) -> None:
    host, _ = _run(spec, ad_device, dtype, 1)
    args = [em.tensor(x, dtype=dtype, device=ad_device, requires_grad=i in spec.grad) for i, x in enumerate(host)]
    check_gradients(
        spec.fn, spec.ref, args, host, spec.grad, spec.kwargs, np.random.default_rng(2), scale=spec.scale / 5
    )


# -- complex: forward only (autodiff records real results only), where a native kernel exists ------
def _complex(*makers: Callable[[np.random.Generator], np.ndarray]) -> Callable[[np.random.Generator], list]:
    """Complex inputs: each maker's real matrix plus i times a second draw (same conditioning class)."""
    return lambda rng: [m(rng) + 0.5j * m(rng) for m in makers]


def _hermitian_pd(n: int, batch: tuple[int, ...] = (2,)) -> Callable[[np.random.Generator], list]:
    def make(rng: np.random.Generator) -> list[np.ndarray]:
        z = rng.standard_normal(batch + (n, n)) + 1j * rng.standard_normal(batch + (n, n))
        q = np.linalg.qr(z)[0]
        w = np.linspace(1.0, 4.0, n)
        return [(q * w[..., None, :]) @ np.conj(np.swapaxes(q, -1, -2))]

    return make


def _phase(x: np.ndarray) -> np.ndarray:
    return np.where(np.abs(x) == 0, 1.0, np.conj(x) / np.where(np.abs(x) == 0, 1.0, np.abs(x)))


def _np_eigh_c(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w, v = np.linalg.eigh((a + np.conj(np.swapaxes(a, -1, -2))) / 2)
    top = np.take_along_axis(v, np.argmax(np.abs(v), axis=-2)[..., None, :], axis=-2)
    return w, v * _phase(top)


def _np_svd_c(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    d = _phase(np.take_along_axis(u, np.argmax(np.abs(u), axis=-2)[..., None, :], axis=-2))
    return u * d, s, vh * np.conj(np.swapaxes(d, -1, -2))


def _np_qr_c(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q, r = np.linalg.qr(a)
    d = _phase(np.diagonal(r, axis1=-2, axis2=-1))
    return q * np.conj(d)[..., None, :], r * d[..., :, None]


#: (case, the dispatched ops it needs native kernels for)
COMPLEX_CASES = [
    (Case("solve", _complex(general(2, 3, 3), plain(2, 3, 2)), lambda a, b: _la().solve(a, b), np.linalg.solve),
     ("linalg_solve",)),
    (Case("inv", _complex(general(2, 3, 3)), lambda a: _la().inv(a), np.linalg.inv), ("linalg_solve",)),
    (Case("det", _complex(general(2, 3, 3)), lambda a: _la().det(a), np.linalg.det), ("linalg_slogdet",)),
    (Case("slogdet", _complex(general(3, 3)), lambda a: tuple(_la().slogdet(a)),
          lambda a: tuple(np.linalg.slogdet(a))), ("linalg_slogdet",)),
    (Case("cholesky", _hermitian_pd(3), lambda a: _la().cholesky(a),
          lambda a: np.linalg.cholesky(a)), ("linalg_cholesky",)),
    (Case("eigh", _hermitian_pd(3), lambda a: tuple(_la().eigh(a)), _np_eigh_c), ("linalg_eigh",)),
    (Case("svd", _complex(general(2, 4, 3)), lambda a: tuple(_la().svd(a, full_matrices=False)), _np_svd_c),
     ("linalg_svd",)),
    (Case("qr", _complex(general(2, 4, 3)), lambda a: tuple(_la().qr(a)), _np_qr_c), ("linalg_qr",)),
    (Case("pinv", _complex(general(4, 3)), lambda a: _la().pinv(a), np.linalg.pinv), ("linalg_svd",)),
    (Case("matrix_norm_fro", _complex(plain(2, 3, 4)), lambda a: _la().matrix_norm(a),
          lambda a: np.linalg.norm(a, axis=(-2, -1))), ()),
    (Case("lu", _complex(general(3, 3)), lambda a: tuple(_la().lu(a)), lambda a: scipy.linalg.lu(a)), ("linalg_lu",)),
]  # fmt: skip


@pytest.mark.parametrize("dtype", [em.complex64, em.complex128], ids=str)
@pytest.mark.parametrize("spec,ops", COMPLEX_CASES, ids=[c.name for c, _ in COMPLEX_CASES])
def test_em_linalg_complex(spec: Case, ops: tuple[str, ...], dtype: em.DType, device: em.Device) -> None:
    from ember.extension import EXTENSIONS

    from ._native import REAL_ONLY

    require_dtype(device, dtype)
    missing = [op for op in ops if device.kind not in EXTENSIONS[op].kernels or (op, device.kind) in REAL_ONLY]
    if missing:
        pytest.skip(
            f"complex {spec.name} needs native complex kernels; {device.kind} has none for {', '.join(missing)}"
        )
    host = [np.asarray(x, dtype=dtype.numpy) for x in spec.inputs(np.random.default_rng(5))]
    got = _as_list(spec.fn(*[em.tensor(x, dtype=dtype, device=device) for x in host]))
    want = _as_list(spec.ref(*[x.astype(np.complex128) for x in host]))
    rtol = 5e-4 if dtype is em.complex64 else 5e-9
    for i, (g, w) in enumerate(zip(got, want)):
        w = np.asarray(w)
        if not (spec.name == "lu" and i == 0):  # P travels in the input's dtype; scipy's is real
            kind = "f" if np.isrealobj(w) else "c"
            check(g.dtype.kind == kind, f"{spec.name} result {i} is {g.dtype}; numpy's is {w.dtype} (kind {kind!r})")
        np.testing.assert_allclose(g.numpy(), w, rtol=rtol, atol=rtol, err_msg=f"{spec.name} result {i}")


@pytest.mark.parametrize("dtype", [em.float32, em.float64, em.complex128], ids=str)
def test_em_linalg_eig(dtype: em.DType, device: em.Device) -> None:
    """A general eigensolver (complex results): A V == V diag(w), unit vectors, numpy's eigenvalues."""
    from ember.extension import EXTENSIONS

    require_dtype(device, dtype)
    if device.kind not in EXTENSIONS["linalg_eig"].kernels:
        pytest.skip(f"eig runs only where a native kernel exists; {device.kind} has none")
    rng = np.random.default_rng(6)
    a = rng.standard_normal((2, 4, 4)) + (0.5j * rng.standard_normal((2, 4, 4)) if dtype.kind == "c" else 0)
    a = a.astype(dtype.numpy)
    w, v = (t.numpy().astype(np.complex128) for t in _la().eig(em.tensor(a, dtype=dtype, device=device)))
    tol = 1e-4 if dtype is em.float32 else 1e-10
    np.testing.assert_allclose(a @ v, v * w[..., None, :], atol=tol * 10)
    np.testing.assert_allclose(np.linalg.norm(v, axis=-2), 1.0, atol=tol)
    want = np.linalg.eigvals(a.astype(np.complex128))
    gap = np.abs(w[..., :, None] - want[..., None, :])  # each eigenvalue near one of numpy's, and back
    near, back = gap.min(axis=-1).max(), gap.min(axis=-2).max()
    check(
        near < tol * 10 and back < tol * 10,
        f"eig ({dtype}): eigenvalues {w} and numpy's {want}: {near:.3g} from numpy's nearest, numpy's {back:.3g} "
        f"from ours (tol {tol * 10:g})",
    )


def test_em_linalg_errors(device: em.Device) -> None:
    la = _la()
    with pytest.raises(em.errors.ShapeError, match="square"):
        la.inv(em.ones((2, 3), device=device))
    with pytest.raises(em.errors.DTypeError, match="float32, float64"):
        la.det(em.ones((2, 2), dtype="int32", device=device))
    with pytest.raises(em.errors.ShapeError, match="x2"):
        la.solve(em.eye(3, device=device), em.ones((2,), device=device))


def test_em_linalg_lu_factor_pivots(device: em.Device) -> None:
    """Pivots in scipy.linalg.lu_factor's convention (0-based row interchanges)."""
    a = general(4, 4)(np.random.default_rng(3))
    packed, piv = _la().lu_factor(em.tensor(a, dtype=em.float32, device=device))
    want_lu, want_piv = scipy.linalg.lu_factor(a)
    np.testing.assert_array_equal(piv.numpy(), want_piv)
    assert_close(packed, want_lu, em.float32, scale=50.0, what="lu_factor LU")


def test_em_linalg_matrix_rank(device: em.Device) -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 5, 2)) @ rng.standard_normal((2, 2, 4))  # rank 2
    got = _la().matrix_rank(em.tensor(a, dtype=em.float32, device=device))
    np.testing.assert_array_equal(got.numpy(), np.linalg.matrix_rank(a))

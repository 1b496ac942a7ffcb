"""The native svd / lu / solve / slogdet kernels of opencl (PoCL here) and wgpu (lavapipe here):
against numpy / scipy in float64 on sizes beyond the conformance samples (tall, wide, odd column
counts, columns longer than a work-group, batches), the edge cases (1x1, singular matrices), and
a count of launches proving the native kernel ran."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import scipy.linalg

import ember as em
import ember_linalg as la
from ember_linalg import _native, kernels_opencl, kernels_wgpu
from ember_linalg.factorizations import LU, SLOGDET, SOLVE, SOLVE_TRIANGULAR, SVD

KINDS = [
    pytest.param(
        kind,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(f"ember_{kind}") is None, reason=f"ember-{kind} is not installed"
        ),
    )  # fmt: skip
    for kind in ("opencl", "wgpu")
]
CALLS = {"opencl": kernels_opencl.CALLS, "wgpu": kernels_wgpu.CALLS}
PREFIX = {"opencl": "la_", "wgpu": "linalg_"}


def _device(kind: str) -> em.Device:
    try:
        return em.Device(f"{kind}:0")
    except em.errors.DeviceUnavailableError as exc:  # no driver (no PoCL / lavapipe): say which
        pytest.skip(f"{kind}:0 is not available: {exc}")


def _dtypes(kind: str) -> list[em.DType]:
    """float32 everywhere, float64 where the device holds it (PoCL with cl_khr_fp64)."""
    dev = _device(kind)
    try:
        em.zeros((1,), dtype="float64", device=dev).numpy()
    except em.errors.EmberError:
        return [em.float32]
    return [em.float32, em.float64]


def _eps(dtype: em.DType) -> float:
    return float(np.finfo(dtype.numpy).eps)


def _ran(kind: str, kernel: str, before: int) -> bool:
    return CALLS[kind][PREFIX[kind] + kernel] > before


def _count(kind: str, kernel: str) -> int:
    return CALLS[kind][PREFIX[kind] + kernel]


def _canonical_svd(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numpy's reduced SVD with each U column's largest-magnitude entry positive (the convention)."""
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    top = np.take_along_axis(u, np.argmax(np.abs(u), axis=-2)[..., None, :], axis=-2)
    sign = np.where(top < 0, -1.0, 1.0)
    return u * sign, s, vh * np.swapaxes(sign, -1, -2)


def _spread(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A random matrix with well separated singular values in [1, 4]."""
    m, n = shape[-2:]
    k = min(m, n)
    u = np.linalg.qr(rng.standard_normal(shape[:-2] + (m, k)))[0]
    v = np.linalg.qr(rng.standard_normal(shape[:-2] + (n, k)))[0]
    return (u * np.linspace(4.0, 1.0, k)) @ np.swapaxes(v, -1, -2)


def test_registered_for_both_kinds():
    for kind in ("opencl", "wgpu"):
        installed = importlib.util.find_spec(f"ember_{kind}") is not None
        for op in (SVD, LU, SOLVE, SLOGDET, SOLVE_TRIANGULAR):
            assert (kind in op.kernels) == installed, (op.name, kind)


def test_pair_table_covers_every_pair_once():
    for nc in (2, 5, 8):
        table = _native.pair_table(nc)
        pairs = [tuple(p) for rnd in table for p in rnd if p[1] < nc]
        assert sorted(pairs) == [(p, q) for p in range(nc) for q in range(p + 1, nc)]
        for rnd in table:  # disjoint within a round
            cols = [c for p in rnd if p[1] < nc for c in p]
            assert len(cols) == len(set(cols))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [(1, 1), (5, 5), (2, 7, 4), (3, 4, 6), (9, 9), (300, 7), (6, 300)])
def test_svd_matches_numpy(kind, shape):
    dev = _device(kind)
    rng = np.random.default_rng(sum(shape))
    a = _spread(rng, shape)
    for dtype in _dtypes(kind):
        before = _count(kind, "jacobi")
        u, s, vh = la.svd(em.tensor(a, dtype=dtype, device=dev), full_matrices=False)
        u, s, vh = (np.asarray(x.numpy(), dtype=np.float64) for x in (u, s, vh))
        assert min(shape[-2:]) == 1 or _ran(kind, "jacobi", before)
        wu, ws, wvh = _canonical_svd(a)
        tol = 200 * _eps(dtype) * max(shape[-2:])
        np.testing.assert_allclose(s, ws, rtol=0, atol=tol * 4)
        np.testing.assert_allclose(u, wu, rtol=0, atol=tol)
        np.testing.assert_allclose(vh, wvh, rtol=0, atol=tol)


@pytest.mark.parametrize("kind", KINDS)
def test_svd_of_a_larger_general_matrix(kind):
    """64 x 48 with a wide spread of singular values: values and the factorization."""
    dev = _device(kind)
    a = np.random.default_rng(3).standard_normal((64, 48))
    u, s, vh = (
        np.asarray(x.numpy(), np.float64)
        for x in la.svd(em.tensor(a, dtype="float32", device=dev), full_matrices=False)
    )
    ws = np.linalg.svd(a, compute_uv=False)
    assert np.abs(s - ws).max() <= 1e-5 * ws[0]
    assert np.abs((u * s) @ vh - a).max() <= 1e-5 * ws[0]
    assert np.abs(u.T @ u - np.eye(48)).max() <= 1e-5


@pytest.mark.parametrize("kind", KINDS)
def test_svd_full_matrices_completes_the_basis(kind):
    dev = _device(kind)
    a = _spread(np.random.default_rng(4), (2, 5, 3))
    for shape_a in (a, np.swapaxes(a, -1, -2)):
        u, s, vh = (np.asarray(x.numpy(), np.float64) for x in la.svd(em.tensor(shape_a, dtype="float32", device=dev)))
        m, n = shape_a.shape[-2:]
        assert u.shape == (2, m, m) and vh.shape == (2, n, n)
        np.testing.assert_allclose(u @ np.swapaxes(u, -1, -2), np.broadcast_to(np.eye(m), (2, m, m)), atol=1e-5)
        np.testing.assert_allclose(vh @ np.swapaxes(vh, -1, -2), np.broadcast_to(np.eye(n), (2, n, n)), atol=1e-5)
        k = min(m, n)
        np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], shape_a, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_svd_of_a_zero_and_a_rank_one_matrix(kind):
    dev = _device(kind)
    s = la.svdvals(em.zeros((3, 4, 4), device=dev)).numpy()
    assert (s == 0).all()
    x = np.outer(np.arange(1.0, 6.0), np.arange(1.0, 5.0))
    np.testing.assert_allclose(la.svdvals(em.tensor(x, dtype="float32", device=dev)).numpy(),
                               np.linalg.svd(x, compute_uv=False), atol=1e-4)  # fmt: skip


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 3, 8, 70, 300])
def test_solve_matches_numpy(kind, n):
    dev = _device(kind)
    rng = np.random.default_rng(n)
    a = rng.standard_normal((2, n, n)) + n**0.5 * np.eye(n)  # a pivoting matrix of moderate condition
    b = rng.standard_normal((2, n, 3))
    want = np.linalg.solve(a, b)
    for dtype in _dtypes(kind):
        before = _count(kind, "lu_pivot")
        got = la.solve(em.tensor(a, dtype=dtype, device=dev), em.tensor(b, dtype=dtype, device=dev)).numpy()
        assert _ran(kind, "lu_pivot", before)
        cond = np.linalg.cond(a).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=20 * n * cond * _eps(dtype) * np.abs(want).max())


@pytest.mark.parametrize("kind", KINDS)
def test_inv_det_slogdet_lu(kind):
    dev = _device(kind)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, 6, 6))
    for dtype in _dtypes(kind):
        t = em.tensor(a, dtype=dtype, device=dev)
        tol = 1e3 * _eps(dtype)
        before = _count(kind, "logdet")
        np.testing.assert_allclose(
            la.inv(t).numpy(), np.linalg.inv(a), rtol=tol, atol=tol * np.abs(np.linalg.inv(a)).max()
        )
        np.testing.assert_allclose(la.det(t).numpy(), np.linalg.det(a), rtol=tol)
        sign, logabs = la.slogdet(t)
        want_sign, want_log = np.linalg.slogdet(a)
        np.testing.assert_array_equal(sign.numpy(), want_sign)
        np.testing.assert_allclose(logabs.numpy(), want_log, rtol=0, atol=tol)
        assert _ran(kind, "logdet", before)
        before = _count(kind, "lu_pack")
        p, lower, upper = (x.numpy() for x in la.lu(t))
        assert _ran(kind, "lu_pack", before)
        for i in range(3):
            wp, wl, wu = scipy.linalg.lu(a[i])
            np.testing.assert_array_equal(p[i], wp)
            np.testing.assert_allclose(lower[i], wl, atol=tol)
            np.testing.assert_allclose(upper[i], wu, atol=tol * np.abs(wu).max())
        packed, piv = la.lu_factor(t)
        want_lu, want_piv = scipy.linalg.lu_factor(a[0])
        np.testing.assert_array_equal(piv.numpy()[0], want_piv)
        np.testing.assert_allclose(packed.numpy()[0], want_lu, atol=tol * np.abs(want_lu).max())


@pytest.mark.parametrize("kind", KINDS)
def test_lu_of_non_square_matrices(kind):
    dev = _device(kind)
    rng = np.random.default_rng(8)
    for shape in ((5, 3), (3, 5)):
        a = rng.standard_normal(shape)
        p, lower, upper = (x.numpy() for x in la.lu(em.tensor(a, dtype="float32", device=dev)))
        wp, wl, wu = scipy.linalg.lu(a)
        np.testing.assert_array_equal(p, wp)
        np.testing.assert_allclose(lower, wl, atol=1e-5)
        np.testing.assert_allclose(upper, wu, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_singular_matrices_behave_as_the_reference(kind):
    """No exception (that would need a read-back): slogdet says sign 0 and -inf, solve gives non-finite values."""
    dev = _device(kind)
    sign, logabs = la.slogdet(em.zeros((2, 3, 3), device=dev))
    assert (sign.numpy() == 0).all() and np.isneginf(logabs.numpy()).all()
    assert (la.det(em.tensor([[1.0, 2.0], [2.0, 4.0]], device=dev)).numpy() == 0).all()
    x = la.solve(em.zeros((2, 2), device=dev), em.ones((2, 1), device=dev)).numpy()
    assert not np.isfinite(x).all()


@pytest.mark.parametrize("kind", KINDS)
def test_strided_input_and_gradient(kind):
    """A transposed view goes through make_contiguous; the gradient still flows (through the vjp)."""
    dev = _device(kind)
    a = np.random.default_rng(9).standard_normal((4, 4)) + 3 * np.eye(4)
    t = em.tensor(a, dtype="float32", device=dev)
    np.testing.assert_allclose(la.solve(t.mT, em.ones((4, 1), device=dev)).numpy(),
                               np.linalg.solve(a.T, np.ones((4, 1))), atol=1e-5)  # fmt: skip
    leaf = em.tensor(a, dtype="float32", device=dev.autodiff(), requires_grad=True)
    la.svdvals(leaf).sum().backward()  # d(nuclear norm)/da = U V^T
    u, _, vh = np.linalg.svd(a)
    np.testing.assert_allclose(leaf.grad.numpy(), u @ vh, atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_complex_input_says_it_needs_the_cpu(kind):
    dev = _device(kind)
    try:
        z = em.tensor(np.eye(2) * (1 + 1j), dtype="complex64", device=dev)
    except em.errors.EmberError:
        pytest.skip(f"{kind}:0 holds no complex64")
    with pytest.raises(em.errors.NotImplementedOpError, match="cpu"):
        la.solve(z, z).numpy()
    assert ("linalg_svd", kind) in _native.REAL_ONLY


@pytest.mark.parametrize("kind", KINDS)
def test_empty_matrices(kind):
    dev = _device(kind)
    u, s, vh = la.svd(em.zeros((2, 0, 3), device=dev), full_matrices=False)
    assert (u.shape, s.shape, vh.shape) == ((2, 0, 0), (2, 0), (2, 0, 3))
    assert tuple(la.solve(em.zeros((0, 3, 3), device=dev), em.zeros((0, 3, 2), device=dev)).shape) == (0, 3, 2)
    sign, logabs = la.slogdet(em.zeros((2, 0, 0), device=dev))
    np.testing.assert_array_equal(sign.numpy(), [1.0, 1.0])  # numpy: det of 0x0 is 1
    np.testing.assert_array_equal(logabs.numpy(), [0.0, 0.0])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [1, 5, 70])
def test_solve_triangular_and_lu_solve(kind, n):
    """Every (upper, left, unitriangular) form against numpy on the triangle; lu_solve goes through it."""
    dev = _device(kind)
    rng = np.random.default_rng(n)
    a = rng.standard_normal((2, n, n)) + 3 * np.eye(n)
    for upper in (True, False):
        for left in (True, False):
            for unit in (True, False):
                b = rng.standard_normal((2, n, 3) if left else (2, 3, n))
                t = np.triu(a) if upper else np.tril(a)
                if unit:
                    t[:, range(n), range(n)] = 1.0
                if left:
                    want = np.linalg.solve(t, b)
                else:
                    want = np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
                before = _count(kind, "back_finish")
                got = la.solve_triangular(
                    em.tensor(a, dtype="float32", device=dev), em.tensor(b, dtype="float32", device=dev),
                    upper=upper, left=left, unitriangular=unit,
                ).numpy()  # fmt: skip
                assert _ran(kind, "back_finish", before)
                np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * max(1.0, np.abs(want).max()))
    b = rng.standard_normal((n, 2))
    got = la.lu_solve(
        la.lu_factor(em.tensor(a[0], dtype="float32", device=dev)), em.tensor(b, dtype="float32", device=dev)
    )
    np.testing.assert_allclose(got.numpy(), np.linalg.solve(a[0], b), atol=1e-4)

"""ember-cuda's matmul straight into cuBLAS (blas.py) against numpy float64: the layouts it takes
(row-major, transposed, batched, broadcast), the ones it leaves to CuPy, and a CUDA-graph capture
of a step with a matmul, which CuPy's own matmul refuses."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cuda import blas, runtime

import ember as em

pytestmark = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)

CASES = [
    # (a, b, how each is viewed: "c" as made, "t" the transpose of a contiguous array), direct path?
    ((37, 53), (53, 29), "cc", True),
    ((53, 37), (53, 29), "tc", True),  # a = A.T
    ((37, 53), (29, 53), "ct", True),  # b = B.T: a weight gradient's x.T @ g has this form
    ((5, 37, 53), (53, 29), "cc", True),  # a batch against one matrix (stride 0)
    ((5, 37, 53), (5, 53, 29), "cc", True),
    ((2, 3, 37, 53), (1, 3, 53, 29), "cc", False),  # partly broadcast batch: CuPy's matmul
    ((1, 64), (64, 1), "cc", True),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("sa", "sb", "views", "direct"), CASES)
def test_matmul_matches_float64(dtype, sa, sb, views, direct):
    rng = np.random.default_rng(len(sa) + sa[-1])
    a, b = (rng.standard_normal(s).astype(dtype) for s in (sa, sb))
    ta, tb = (em.tensor(v, device="cuda:0") for v in (a, b))
    if views[0] == "t":
        a, ta = a.T, ta.mT
    if views[1] == "t":
        b, tb = b.T, tb.mT
    before = blas.CALLS["gemm"]
    got = (ta @ tb).numpy()
    assert (blas.CALLS["gemm"] == before + 1) == direct, "the direct cuBLAS path ran (or not) unexpectedly"
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.sqrt(a.shape[-1]))


@pytest.mark.parametrize(("sa", "transposed", "folds"), [((4, 6, 37, 53), False, True), ((5, 53, 37), True, False)])
def test_a_batch_sharing_b_runs_as_one_gemm(sa, transposed, folds):
    """(..., M, K) @ (K, N) with A's batches following its rows is one (batch * M, K) GEMM
    (``blas.CALLS["folded"]``); with each matrix of A transposed it stays a strided batch."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal((53, 29)).astype(np.float32)
    ta, tb = em.tensor(a, device="cuda:0"), em.tensor(b, device="cuda:0")
    if transposed:
        a, ta = np.swapaxes(a, -1, -2), ta.mT
    before = blas.CALLS["folded"]
    got = (ta @ tb).numpy()
    assert (blas.CALLS["folded"] == before + 1) == folds
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)


def test_a_matmul_step_is_captured_as_a_cuda_graph():
    dev = em.Device("cuda:0")
    rng = np.random.default_rng(5)
    w = em.tensor(rng.standard_normal((64, 32)).astype(np.float32), device=dev)

    @em.jit
    def f(x):
        return (x @ w).relu().sum(axis=0)

    xs = [rng.standard_normal((16, 64)).astype(np.float32) for _ in range(4)]
    got = [f(em.tensor(x, device=dev)).numpy() for x in xs]
    for x, g in zip(xs, got):
        want = np.maximum(x.astype(np.float64) @ w.numpy().astype(np.float64), 0).sum(axis=0)
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-4)
    (capture,) = f.captures
    assert "native (cuda)" in capture.describe(), capture.describe()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matmul_writes_into_out_and_sums_in_place(dtype):
    """``out=`` takes cuBLAS's store (conv's batch chunks); ``accumulate=True`` adds the product to
    what ``out`` holds (beta = 1), so a sum of products needs no temporary."""
    import cupy as cp

    matmul = blas.blas_kernels(cp, {"matmul": cp.matmul}, lambda: False)["matmul"]
    assert matmul.takes_out
    rng = np.random.default_rng(11)
    a, b, c = (rng.standard_normal(s).astype(dtype) for s in ((37, 53), (53, 29), (37, 29)))
    out = cp.asarray(c)
    before = blas.CALLS["gemm"]
    assert matmul(cp.asarray(a), cp.asarray(b), out=out, accumulate=True) is out
    matmul(cp.asarray(a.T).T, cp.asarray(b), out=out, accumulate=True)  # a transposed view, summed again
    assert blas.CALLS["gemm"] == before + 2
    want = c.astype(np.float64) + 2 * (a.astype(np.float64) @ b.astype(np.float64))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=tol, atol=tol * 10)
    matmul(cp.asarray(a), cp.asarray(b), out=out)  # without accumulate: overwritten
    np.testing.assert_allclose(cp.asnumpy(out), a.astype(np.float64) @ b.astype(np.float64), rtol=tol, atol=tol * 10)

"""The launch shapes a GPU gets (grid-stride loops, work-group reductions, tiled matmul), run
on whatever device is here by telling the runtime it is not a CPU."""

from __future__ import annotations

import numpy as np
import pytest
from ocl_helpers import assert_same

import ember as em


@pytest.fixture
def gpu_like(dev):
    rt = dev.backend.rt
    saved = rt.is_cpu, rt.compute_units
    rt.is_cpu, rt.compute_units = False, 4  # few "CUs" so the grid-stride loops iterate
    yield dev
    rt.is_cpu, rt.compute_units = saved


def test_gpu_launch_shapes_agree_with_cpu(gpu_like):
    dev = gpu_like
    rng = np.random.default_rng(3)
    host = rng.standard_normal((70, 300)).astype(np.float32)
    x, xc = em.tensor(host, device=dev), em.tensor(host)
    assert_same(em.gelu(x * 2.0 + x[:1]), em.gelu(xc * 2.0 + xc[:1]), rtol=1e-5, atol=1e-6)
    for axis in (0, 1, None):
        assert_same(x.sum(axis=axis), xc.sum(axis=axis), rtol=1e-4, atol=1e-4)
        assert_same(em.argmax(x, axis=axis), em.argmax(xc, axis=axis))
    assert_same(em.softmax(x, axis=1), em.softmax(xc, axis=1), rtol=1e-5, atol=1e-7)
    assert_same(em.softmax(x, axis=0), em.softmax(xc, axis=0), rtol=1e-5, atol=1e-7)
    assert_same(em.layer_norm(x, 300), em.layer_norm(xc, 300), rtol=1e-4, atol=1e-4)
    assert_same(x @ x.mT, xc @ xc.mT, rtol=1e-4, atol=1e-3)
    assert_same(x[:, :64].mT @ x[:, :64], xc[:, :64].mT @ xc[:, :64], rtol=1e-4, atol=1e-3)
    assert_same(em.cumulative_sum(x, axis=1), em.cumulative_sum(xc, axis=1), rtol=1e-4, atol=1e-3)
    t = rng.integers(0, 300, size=70)
    got = em.cross_entropy(x, em.tensor(t, device=dev), reduction="none")
    assert_same(got, em.cross_entropy(xc, em.tensor(t), reduction="none"), rtol=1e-5, atol=1e-5)


def test_gpu_many_rows(gpu_like):
    dev = gpu_like
    host = np.random.default_rng(4).standard_normal((17000, 40)).astype(np.float32)
    x, xc = em.tensor(host, device=dev), em.tensor(host)
    assert_same(x.sum(axis=1), xc.sum(axis=1), rtol=1e-5, atol=1e-5)
    assert_same(x.sum(axis=0), xc.sum(axis=0), rtol=1e-4, atol=1e-3)
    assert_same(em.log_softmax(x, axis=1), em.log_softmax(xc, axis=1), rtol=1e-5, atol=1e-5)


def test_gpu_leading_axis_reductions_run_as_columns_in_chunks(gpu_like):
    """A reduction over a leading axis (rows not contiguous) on a GPU: a work item per (row, chunk),
    rows fastest, then a pass over the chunks; each op against numpy float64 (argmax's ties across
    chunks go to the first index, as numpy's)."""
    from ember_opencl import reduce as reduce_mod

    dev = gpu_like
    rng = np.random.default_rng(5)
    host = rng.standard_normal((3000, 48)).astype(np.float32)
    host[[5, 2000, 2999], 7] = 9.0  # one column's maximum three times, in three chunks
    host[[40, 1500], 11] = -9.0
    x = em.tensor(host, device=dev)
    M, K = 48, 3000
    G = reduce_mod.column_chunks(dev.backend.rt, M, K, contiguous=False)
    assert 1 < G <= reduce_mod.COLUMN_MAX_CHUNKS and K // G >= reduce_mod.COLUMN_MIN_CHUNK
    reduce_mod._PLANS.clear()
    want = host.astype(np.float64)
    np.testing.assert_allclose(x.sum(axis=0).numpy(), want.sum(axis=0), rtol=1e-5, atol=1e-4)
    plan = next(p for k, p in reduce_mod._PLANS.items() if k[1] == "sum")
    assert len(plan.passes) == 2 and plan.passes[0][1][0] >= G * M  # (row, chunk) items, then the chunks
    np.testing.assert_array_equal(x.max(axis=0).numpy(), host.max(axis=0))
    np.testing.assert_array_equal(x.min(axis=0).numpy(), host.min(axis=0))
    np.testing.assert_array_equal(em.argmax(x, axis=0).numpy(), host.argmax(axis=0))
    np.testing.assert_array_equal(em.argmin(x, axis=0).numpy(), host.argmin(axis=0))
    np.testing.assert_array_equal((x > 2.5).any(axis=0).numpy(), (host > 2.5).any(axis=0))
    np.testing.assert_array_equal((x > -3.5).all(axis=0).numpy(), (host > -3.5).all(axis=0))
    ints = rng.integers(-1000, 1000, size=(3000, 48))
    np.testing.assert_array_equal(em.tensor(ints, device=dev).sum(axis=0).numpy(), ints.sum(axis=0))
    half = host.astype(np.float16)
    got = em.tensor(half, device=dev).sum(axis=0).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), half.astype(np.float64).sum(axis=0), rtol=2e-3, atol=0.1)
    # a transposed view: its last axis is the strided one
    np.testing.assert_allclose(x.mT.sum(axis=1).numpy(), want.sum(axis=0), rtol=1e-5, atol=1e-4)
    cube = rng.standard_normal((400, 6, 20)).astype(np.float32)
    got3 = em.tensor(cube, device=dev).sum(axis=(0,), keepdims=True).numpy()
    np.testing.assert_allclose(got3, cube.astype(np.float64).sum(axis=0, keepdims=True), rtol=1e-5, atol=1e-4)

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

"""ember-opencl takes the lazy layer's offer (Backend.fusion_outs): ``p.copy_(p - lr * g)`` stores
into p's old buffer, so an SGD step allocates no new parameter buffers and the pool's step plan
is not refused for the parameters and their replacements held at once. What every backend taking
the offer must do is in the conformance suite (ember_conformance/test_in_place.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.lazy.graph import stats
from ember_conformance.training import SmallMLP


def _block(t: em.Tensor):  # noqa: ANN202
    return em.lazy.materialize(t._data).block


@pytest.fixture
def dev():  # noqa: ANN201
    d = em.Device("opencl:0").autodiff()
    if not d.capabilities.fusion or not em.lazy.fusion_enabled():
        pytest.skip("fusion is off for this run (EMBER_FUSION=0): nothing is offered")
    return d


def test_sgd_updates_write_the_parameter_in_place(dev) -> None:  # noqa: ANN001
    gen = np.random.default_rng(3)
    p0 = gen.standard_normal((64, 96)).astype(np.float32)
    g0 = gen.standard_normal((64, 96)).astype(np.float32)
    p = em.tensor(p0, device=dev)
    g = em.tensor(g0, device=dev)
    with em.no_grad():
        p.copy_(p - 0.25 * g)  # the first result is a fresh buffer
        p.realize()
        where = _block(p).raw.int_ptr  # the driver buffer, not the Block (holding it would forbid the offer)
        before = stats(dev)["in_place"]
        for step in range(3):
            p.copy_(p - 0.25 * g)
            p.realize()
            assert _block(p).raw.int_ptr == where, f"step {step}: a new buffer"
    assert stats(dev)["in_place"] == before + 3
    want = p0.astype(np.float64) - 4 * 0.25 * g0.astype(np.float64)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-5, atol=1e-5)
    # the in-place launches ran a kernel of their own, compiled with no restrict pointer (the output
    # is an input's buffer)
    aliased = [key for key in dev.backend.rt._kernels if key[0] == "ew" and key[-1] == "alias"]
    assert aliased, "no in-place kernel was compiled"


def test_a_training_step_plans_its_memory_with_no_driver_calls(dev) -> None:  # noqa: ANN001
    """W2's MLP shape, smaller, trained with SGD (its parameters were replaced every step before this
    change, and on PoCL its step plan was refused): from the fourth step every request is planned."""
    mlp = SmallMLP(dev)
    pool = dev.backend.rt.pool  # this device's pool (other tests' Runtime objects register more)
    if pool.strategy != "adaptive":
        pytest.skip(f"the pool runs {pool.strategy!r} (EMBER_MEMORY): step plans are adaptive's")
    losses = []
    for step in range(10):
        losses.append(mlp.step())
        if step == 4:
            misses, planned = pool.misses, pool.planned
    assert pool.misses == misses, "driver allocations in steady state"
    assert pool.planned > planned
    assert losses[-1].item() < losses[0].item()

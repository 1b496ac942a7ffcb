"""ember-wgpu takes the lazy layer's offer (Backend.fusion_outs): ``p.copy_(p - lr * g)`` stores
into p's old buffer (bound once, read_write: the kernel stores through the operand's binding), so
an SGD step allocates no new parameter buffers and the pool's step plan is not refused for the
parameters and their replacements held at once. Values are checked against numpy float64. What
every backend taking the offer must do (a kept view forbids it, a value recomputed later keeps its
operand) is in the conformance suite (ember_conformance/test_in_place.py); here, what is wgpu's."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import ember as em
from ember.lazy.graph import stats
from ember_conformance.training import SmallMLP
from ember_wgpu.subbuffer import SubBuffer


def _storage(t: em.Tensor) -> Any:
    return em.lazy.materialize(t._data).storage


def _where(t: em.Tensor) -> tuple[int, int]:
    """The driver buffer and byte offset of ``t``'s block (not the Block: holding it forbids the offer)."""
    raw = _storage(t).raw
    if type(raw) is SubBuffer:
        return raw.buffer.uid, raw.offset
    return raw.uid, 0


@pytest.fixture
def ad(dev: Any) -> Any:
    d = dev.autodiff()
    if not d.capabilities.fusion or not em.lazy.fusion_enabled():
        pytest.skip("fusion is off for this run (EMBER_FUSION=0): nothing is offered")
    if not d.backend.fusion_outs:
        pytest.skip("EMBER_WGPU_IN_PLACE=0: the offer is declined")
    return d


def _steps(dev: Any, p0: np.ndarray, g0: np.ndarray, steps: int, lr: float) -> tuple[em.Tensor, list[tuple]]:
    """``steps`` + 1 SGD updates of p0 by g0 (the first writes into the upload's buffer, which only
    p held); where p lived after each."""
    p = em.tensor(p0, device=dev)
    g = em.tensor(g0, device=dev)
    places = []
    with em.no_grad():
        places.append(_where(p))
        for _ in range(steps + 1):
            p.copy_(p - lr * g)
            p.realize()
            places.append(_where(p))
    return p, places


@pytest.mark.parametrize("shape", [(64, 96), (7,), (300, 33)])
def test_sgd_updates_write_the_parameter_in_place(ad: Any, shape: tuple[int, ...]) -> None:
    gen = np.random.default_rng(3)
    p0 = gen.standard_normal(shape).astype(np.float32)
    g0 = gen.standard_normal(shape).astype(np.float32)
    before = stats(ad)["in_place"]
    p, places = _steps(ad, p0, g0, 3, 0.25)
    assert places == [places[0]] * 5, f"a new buffer in some step: {places}"
    assert stats(ad)["in_place"] == before + 4
    want = p0.astype(np.float64) - 4 * 0.25 * g0.astype(np.float64)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-5, atol=1e-5)


def test_in_place_into_a_range_carved_from_a_page(ad: Any) -> None:
    """Under ``adaptive`` with pages, p and g are ranges of one driver buffer: the update writes p's
    range in place (the twin binds the page read-write three times) and g's range keeps its values."""
    if ad.memory.strategy != "adaptive":
        pytest.skip(f"the pool runs {ad.memory.strategy!r}: pages are adaptive's")
    peak = em.ones((1 << 20,), dtype="float32", device=ad).realize()  # pages fit in the headroom of a 4 MiB peak
    del peak
    gc.collect()
    ad.synchronize()
    ad.memory.empty_cache()  # nothing in the free lists: the small requests below are carved
    gen = np.random.default_rng(6)
    p0 = gen.standard_normal((40, 24)).astype(np.float32)
    g0 = gen.standard_normal((40, 24)).astype(np.float32)
    p = em.tensor(p0, device=ad)
    g = em.tensor(g0, device=ad)
    with em.no_grad():
        p.copy_(p + 0.5 * g)
        p.realize()
        raw = _storage(p).raw
        assert type(raw) is SubBuffer, raw
        where = (raw.buffer.uid, raw.offset)
        del raw
        before = stats(ad)["in_place"]
        for _ in range(4):
            p.copy_(p * 0.5 - g)
            p.realize()
            assert _where(p) == where
    assert stats(ad)["in_place"] == before + 4
    want = p0.astype(np.float64) + 0.5 * g0.astype(np.float64)
    for _ in range(4):
        want = want * 0.5 - g0.astype(np.float64)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(g.numpy(), g0)


def test_a_kept_tensor_keeps_its_values(ad: Any) -> None:
    """The old p kept by the caller (``old = p.detach()``) holds the handle: nothing is offered, and
    ``old`` reads the values before the update."""
    gen = np.random.default_rng(7)
    p0 = gen.standard_normal((16, 20)).astype(np.float32)
    g0 = gen.standard_normal((16, 20)).astype(np.float32)
    p = em.tensor(p0, device=ad)
    g = em.tensor(g0, device=ad)
    with em.no_grad():
        p.copy_(p * 1.0)
        p.realize()
        old = p.detach()
        before = stats(ad)["in_place"]
        p.copy_(p - 0.5 * g)
        p.realize()
    assert stats(ad)["in_place"] == before
    np.testing.assert_array_equal(old.numpy(), p0)
    np.testing.assert_allclose(p.numpy(), p0.astype(np.float64) - 0.5 * g0, rtol=1e-6, atol=1e-6)


def test_a_training_step_plans_its_memory_with_no_driver_calls(ad: Any) -> None:
    """W2's MLP shape, smaller, trained with SGD (its parameters took a new buffer every step before
    this change, and on lavapipe its step plan was refused): from the fifth step every request is
    planned and no driver buffer is made; the loss goes down."""
    pool = ad.backend.rt.pool
    if pool.strategy != "adaptive":
        pytest.skip(f"the pool runs {pool.strategy!r} (EMBER_MEMORY): step plans are adaptive's")
    mlp = SmallMLP(ad)
    before = stats(ad)["in_place"]
    losses = []
    for step in range(10):
        losses.append(mlp.step())
        if step == 4:
            misses, planned = pool.misses, pool.planned
    assert stats(ad)["in_place"] - before >= 6 * 8  # every parameter in place from the second step on
    assert pool.misses == misses, "driver allocations in steady state"
    assert pool.planned > planned
    assert losses[-1].item() < losses[0].item()


@pytest.mark.parametrize("shape", [(4, 9), (130,)])
def test_an_output_that_is_an_operand_is_stored_through_its_binding(ad: Any, shape: tuple[int, ...]) -> None:
    """run_program with an operand as the output compiles the in-place variant: no binding of its own
    for the output, the operand's binding read-write (WebGPU forbids a writable binding aliasing
    another), one dispatch; the values are numpy's (a vec4 kernel with a partial last vec4 too)."""
    from ember.lazy.program import FusedProgram
    from ember_wgpu.kernels import elementwise as ew

    rt = ad.backend.rt
    gen = np.random.default_rng(8)
    p0 = gen.standard_normal(shape).astype(np.float32)
    g0 = gen.standard_normal(shape).astype(np.float32)
    p = rt.upload(p0, em.float32)
    g = rt.upload(g0, em.float32)
    f = "float32"
    # out = g * s - p (the operand written is the second tensor: the binding is not the first)
    program = FusedProgram(
        ((f, "tensor"), (f, "scalar"), (f, "tensor")), (("mul", f, (0, 1)), ("sub", f, (3, 2))), (4,)
    )
    dispatches = rt.dispatches
    (out,) = ew.run_program(rt, program, [g, 0.5, p], shape, [p])
    assert out is p
    assert rt.dispatches == dispatches + 1
    (plan,) = [v for k, v in rt.plans.items() if k[0] == program and k[1] == shape]
    assert plan.bound == ()  # no output bound: the dispatch bound g and p once each
    source = plan.pipe.source
    assert "var<storage, read_write> in1" in source and "out0" not in source
    assert "var<storage, read> in0" in source
    want = g0.astype(np.float64) * 0.5 - p0.astype(np.float64)
    np.testing.assert_allclose(rt.read([p])[0], want, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(rt.read([g])[0], g0)

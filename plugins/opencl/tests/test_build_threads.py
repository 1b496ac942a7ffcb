"""The build-thread setting (``EMBER_OPENCL_BUILD_THREADS``: a count >= 0, anything else a clear
error), and, with threads, a training step issuing every build it needs before it waits for any
(so a driver that compiles side by side would build them together)."""

from __future__ import annotations

import numpy as np
import pytest
from ocl_helpers import Gate

import ember as em
from ember.errors import InvalidArgumentError
from ember_opencl import runtime, settings
from ember_opencl.cache import ProgramCache


@pytest.mark.parametrize("value, threads", [("", 0), (" ", 0), ("0", 0), ("3", 3), (" 8 ", 8)])
def test_the_setting_is_a_count_of_threads(monkeypatch, value, threads):
    monkeypatch.setenv("EMBER_OPENCL_BUILD_THREADS", value)
    assert settings.build_threads() == threads


@pytest.mark.parametrize("value", ["many", "-1", "2.5", "auto"])
def test_a_bad_setting_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("EMBER_OPENCL_BUILD_THREADS", value)
    expected = r"EMBER_OPENCL_BUILD_THREADS=.*: expected threads \(a whole number >= 0\)"
    with pytest.raises(InvalidArgumentError, match=expected):
        settings.build_threads()


@pytest.mark.parametrize("threads", [0, 3])
def test_the_runtime_takes_the_thread_count(dev, monkeypatch, threads):
    monkeypatch.setattr(runtime, "BUILD_THREADS", threads)
    fresh = runtime.Runtime(dev.index)
    assert (fresh._builder is None) == (threads == 0)
    if fresh._builder is not None:
        assert fresh._builder._max_workers == threads
        fresh._builder.shutdown()


def _mlp_inputs():
    rng = np.random.default_rng(21)
    x = rng.standard_normal((12, 20)).astype(np.float32)
    y = rng.integers(0, 5, 12)
    w1 = (rng.standard_normal((20, 16)) / np.sqrt(20)).astype(np.float32)
    b1 = (0.1 * rng.standard_normal(16)).astype(np.float32)
    w2 = (rng.standard_normal((16, 5)) / 4).astype(np.float32)
    b2 = (0.1 * rng.standard_normal(5)).astype(np.float32)
    return x, y, {"w1": w1, "b1": b1, "w2": w2, "b2": b2}


def _reference(x, y, p, lr):
    """Loss and SGD-updated parameters of the step below, in float64 numpy."""
    p = {k: v.astype(np.float64) for k, v in p.items()}
    z1 = x @ p["w1"] + p["b1"]
    h = np.maximum(z1, 0)
    logits = h @ p["w2"] + p["b2"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    s = e.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = -(shifted[rows, y] - np.log(s[:, 0])).mean()
    g = e / s
    g[rows, y] -= 1.0
    g /= len(y)
    grads = {"w2": h.T @ g, "b2": g.sum(axis=0)}
    g = (g @ p["w2"].T) * (z1 > 0)
    grads.update(w1=x.T @ g, b1=g.sum(axis=0))
    return loss, {k: v - lr * grads[k] for k, v in p.items()}


def test_a_training_step_asks_for_all_its_programs_before_waiting_for_one(dev, tmp_path, monkeypatch):
    """Forward, cross-entropy, backward and an SGD update with every build held back: the step
    runs to its end on the host (its launches waiting in order), so all its programs are building
    together when the loss is read; then the results are the float64 reference's."""
    fresh = runtime.Runtime(dev.index)
    fresh.programs = ProgramCache(fresh.context, fresh.device, fresh.label, directory=tmp_path)
    gate = fresh._builder = Gate()
    monkeypatch.setattr(dev.backend, "rt", fresh)
    monkeypatch.setattr(dev.backend, "cheap_readback", False)  # as on a GPU: no mid-step index check
    try:
        ad = dev.autodiff()
        x_np, y_np, p_np = _mlp_inputs()
        x, y = em.tensor(x_np, device=ad), em.tensor(y_np, device=ad)
        params = {k: em.tensor(v, device=ad).requires_grad_() for k, v in p_np.items()}
        h = em.relu(x @ params["w1"] + params["b1"])
        loss = em.cross_entropy(h @ params["w2"] + params["b2"], y)
        loss.backward()
        with em.no_grad():
            for t in params.values():
                t.copy_(t - 0.1 * t.grad)
        asked = fresh.programs.stats["builds"]
        assert asked >= 8 and gate.submitted == asked  # every one on the pool, none built here
        assert fresh.waits["build_waits"] == 0 and fresh._deferred  # nothing waited; the launches queue
        gate.release()
        want_loss, want = _reference(x_np, y_np, p_np, 0.1)
        np.testing.assert_allclose(loss.item(), want_loss, rtol=1e-5)
        assert fresh.programs.stats["builds"] <= asked + 1  # at most the loss's read-back region after
        for k, t in params.items():
            np.testing.assert_allclose(t.numpy(), want[k], rtol=1e-4, atol=1e-6)
        assert fresh.waits["build_waits"] >= 1
    finally:
        gate.release()
        fresh.finish()
        gate.shutdown()

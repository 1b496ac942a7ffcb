"""em.jit on cuda: captures replay as one CUDA graph, a training step with matmuls included
(ember-cuda calls cuBLAS itself: CuPy's matmul refuses capture), and track eager. They need an
NVIDIA GPU and CuPy; elsewhere they skip with the reason the backend gives (CI has no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cuda import runtime

import ember as em
from ember import nn, optim

pytestmark = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)


def test_an_elementwise_capture_replays_as_a_cuda_graph() -> None:
    dev = em.Device.cuda(0)
    state = em.zeros((5,), device=dev)

    @em.jit
    def f(x):
        y = (x * 2.0).exp() - x.sum()
        state.copy_(state + y)
        return y

    rng = np.random.default_rng(0)
    ref = np.zeros(5)
    for _ in range(10):
        a = rng.standard_normal(5).astype(np.float32)
        out = f(em.tensor(a, device=dev))
        want = np.exp(a.astype(np.float64) * 2.0) - a.astype(np.float64).sum()
        ref += want
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(state.numpy(), ref, rtol=1e-5, atol=1e-4)
    (capture,) = f.captures
    assert capture.program.native is not None, capture.describe()
    assert "native (cuda)" in capture.describe()


def test_a_training_step_replayed_100_times_tracks_eager() -> None:
    ad = em.Device.cuda(0).autodiff()

    def mlp():
        em.seed(0)
        return nn.Sequential(nn.Linear(4, 16, device=ad), nn.Tanh(), nn.Linear(16, 2, device=ad))

    def step_fn(model, opt):
        def step(x, y):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            return loss

        return step

    model, twin = mlp(), mlp()
    jitted = em.jit(step_fn(model, optim.AdamW(model.parameters(), lr=1e-2)))
    eager = step_fn(twin, optim.AdamW(twin.parameters(), lr=1e-2))
    rng = np.random.default_rng(1)
    for i in range(100):
        x = rng.standard_normal((8, 4)).astype(np.float32)
        y = rng.standard_normal((8, 2)).astype(np.float32)
        lj = jitted(em.tensor(x, device=ad), em.tensor(y, device=ad))
        le = eager(em.tensor(x, device=ad), em.tensor(y, device=ad))
        np.testing.assert_allclose(lj.numpy(), le.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"loss, step {i}")
        for p, q in zip(model.parameters(), twin.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"step {i}")
    assert jitted.captures[0].replays == 98
    assert "native (cuda)" in jitted.captures[0].describe(), jitted.describe()

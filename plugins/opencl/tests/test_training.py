"""A tiny training loop on OpenCL follows the CPU run step for step."""

from __future__ import annotations

import numpy as np

import ember as em


def train(device: em.Device, steps: int = 5) -> list[float]:
    dev = device.autodiff()
    rng = np.random.default_rng(0)
    x = em.tensor(rng.standard_normal((32, 20)).astype(np.float32), device=dev)
    y = em.tensor(rng.integers(0, 4, size=32), device=dev)
    w1 = em.tensor((rng.standard_normal((20, 16)) * 0.3).astype(np.float32), device=dev, requires_grad=True)
    b1 = em.zeros((16,), device=dev, requires_grad=True)
    w2 = em.tensor((rng.standard_normal((16, 4)) * 0.3).astype(np.float32), device=dev, requires_grad=True)
    b2 = em.zeros((4,), device=dev, requires_grad=True)
    params = [w1, b1, w2, b2]
    losses = []
    for _ in range(steps):
        h = em.relu(x @ w1 + b1)
        loss = em.cross_entropy(h @ w2 + b2, y)
        loss.backward()
        with em.no_grad():
            for p in params:
                p.copy_(p - 0.5 * p.grad)
                p.grad = None
        losses.append(float(loss.item()))
    return losses


def test_mlp_training_matches_cpu(dev):
    got = train(dev)
    want = train(em.Device.cpu())
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert got[-1] < got[0]

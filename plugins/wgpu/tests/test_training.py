"""A tiny training loop (two Linear layers written with em ops, cross-entropy, backward, SGD via
``copy_`` under ``no_grad``) runs on wgpu and tracks the CPU run step for step."""

from __future__ import annotations

import numpy as np

import ember as em


def _train(device: str, steps: int = 8) -> list[float]:
    dev = em.Device(device).autodiff()
    rng = np.random.default_rng(0)
    x = em.tensor(rng.standard_normal((32, 20)).astype(np.float32), device=dev)
    y = em.tensor(rng.integers(0, 5, 32), device=dev)
    w1 = em.tensor((rng.standard_normal((20, 16)) * 0.3).astype(np.float32), device=dev, requires_grad=True)
    b1 = em.tensor(np.zeros(16, np.float32), device=dev, requires_grad=True)
    w2 = em.tensor((rng.standard_normal((16, 5)) * 0.3).astype(np.float32), device=dev, requires_grad=True)
    b2 = em.tensor(np.zeros(5, np.float32), device=dev, requires_grad=True)
    params = [w1, b1, w2, b2]
    losses = []
    for _ in range(steps):
        for p in params:
            p.grad = None
        h = (x @ w1 + b1).relu()
        loss = em.cross_entropy(h @ w2 + b2, y)
        loss.backward()
        with em.no_grad():
            for p in params:
                p.copy_(p - 0.5 * p.grad)
        losses.append(loss.item())
    return losses


def test_training_matches_cpu(dev):
    gpu = _train(str(dev.without_autodiff()))
    cpu = _train("cpu")
    np.testing.assert_allclose(gpu, cpu, rtol=1e-4, atol=1e-5)
    assert gpu[-1] < gpu[0]

"""A small training step every backend's tests can run: W2's MLP shape, smaller
(Linear(784, 256)-ReLU-Linear(256, 256)-ReLU-Linear(256, 10), cross-entropy, SGD), for tests that
watch what a real step does to a device (its buffers, its pool's plan, in-place updates)."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as em

__all__ = ["SmallMLP"]


class SmallMLP:
    """Parameters and a fixed batch on ``device`` (which must record autodiff), from ``seed``."""

    def __init__(self, device: em.Device, seed: int = 5, batch: int = 64) -> None:
        gen = np.random.default_rng(seed)
        self.device = device
        self.params: list[Any] = []
        for fan_in, fan_out in ((784, 256), (256, 256), (256, 10)):
            w = (gen.standard_normal((fan_in, fan_out)) * fan_in**-0.5).astype(np.float32)
            b = (gen.standard_normal(fan_out) * 0.1).astype(np.float32)
            self.params += [em.tensor(w, device=device).requires_grad_(), em.tensor(b, device=device).requires_grad_()]
        self.x = em.tensor(gen.standard_normal((batch, 784)).astype(np.float32), device=device)
        self.y = em.tensor(gen.integers(0, 10, batch), device=device)

    def step(self, lr: float = 0.1) -> Any:
        """One SGD step (``p.copy_(p - lr * p.grad)`` for every parameter), synchronized; its loss."""
        p = self.params
        for w in p:
            w.grad = None
        h = em.relu(self.x @ p[0] + p[1])
        h = em.relu(h @ p[2] + p[3])
        loss = em.cross_entropy(h @ p[4] + p[5], self.y)
        loss.backward()
        with em.no_grad():
            for w in p:
                w.copy_(w - lr * w.grad)
        self.device.synchronize()
        return loss

"""Kernels are compiled per program structure and layout class, not per shape: a training step
at a new batch size builds (or loads) no new program (issue 10's shape-generic target)."""

from __future__ import annotations

import numpy as np

import ember as em


def _programs(dev: em.Device) -> int:
    stats = dev.backend.rt.programs.stats
    return stats["builds"] + stats["disk_loads"]


def test_a_new_batch_size_compiles_nothing(dev):
    ad = dev.autodiff()
    em.seed(3)
    model = em.nn.Sequential(em.nn.Linear(20, 32), em.nn.GELU(), em.nn.Linear(32, 5)).to(ad)
    opt = em.optim.AdamW(model.parameters(), lr=1e-2)

    def step(batch: int) -> float:
        x = em.randn((batch, 20), device=ad)
        y = em.randint(0, 5, (batch,), device=ad)
        loss = em.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(3):  # by the third step the optimizer's state exists and its update regions
        step(8)  # (deferred from one step into the next) have their steady shape
    before = _programs(dev)
    losses = [step(b) for b in (13, 64, 3)]
    assert all(np.isfinite(losses))
    assert _programs(dev) == before, "a new batch size compiled (or loaded) a new kernel program"

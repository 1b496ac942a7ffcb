"""Kernels are compiled per program structure and layout class, not per shape: a training step
at a new batch size builds (or loads) no new program (issue 10's shape-generic target)."""

from __future__ import annotations

import numpy as np

import ember as em


def _programs(dev: em.Device) -> int:
    stats = dev.backend.rt.programs.stats
    return stats["builds"] + stats["disk_loads"]


def _as_in_a_fresh_process(dev: em.Device) -> None:
    """Forget the session runtime's kernels (its programs stay cached): earlier tests built some
    kernels alone that a fresh process builds with their family (a reduction's pair, both launch
    shapes), which a new batch size's launch shape would then build."""
    rt = dev.backend.rt
    rt._kernels.clear()
    rt._members.clear()


def test_a_new_batch_size_compiles_nothing(dev):
    _as_in_a_fresh_process(dev)
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


def test_w2_at_a_new_batch_size_compiles_nothing(dev):
    """W2's step (benchmarks/w2_mlp.py: matmul + bias, relu, cross-entropy, backward, SGD by copy_)."""
    ad = dev.autodiff()
    rng = np.random.default_rng(4)
    dims = ((30, 64), (64, 64), (64, 10))
    params = []
    for fan_in, fan_out in dims:
        params.append(em.tensor((rng.standard_normal((fan_in, fan_out)) / fan_in**0.5).astype(np.float32), device=ad))
        params.append(em.tensor((0.1 * rng.standard_normal(fan_out)).astype(np.float32), device=ad))
    params = [p.requires_grad_() for p in params]

    def step(batch: int) -> float:
        x = em.tensor(rng.standard_normal((batch, 30)).astype(np.float32), device=ad)
        y = em.tensor(rng.integers(0, 10, batch), device=ad)
        w1, b1, w2, b2, w3, b3 = params
        for p in params:
            p.grad = None
        h = em.relu(x @ w1 + b1)
        h = em.relu(h @ w2 + b2)
        loss = em.cross_entropy(h @ w3 + b3, y)
        loss.backward()
        with em.no_grad():
            for p in params:
                p.copy_(p - 0.01 * p.grad)
        return loss.item()

    for _ in range(2):
        step(32)
    before = _programs(dev)
    losses = [step(b) for b in (48, 7, 129)]
    assert all(np.isfinite(losses))
    assert _programs(dev) == before, "a new W2 batch size compiled (or loaded) a new kernel program"


def test_sorting_rows_of_any_length_that_fits_a_work_group_builds_one_program(dev):
    """The padded row length is an argument and the local memory the launch's: rows of 3 to 300
    sort with one program (a different length used to build one of its own)."""
    _as_in_a_fresh_process(dev)
    rng = np.random.default_rng(8)
    data = {n: rng.standard_normal((4, n)).astype(np.float32) for n in (3, 9, 64, 65, 300)}
    em.sort(em.tensor(data[3], device=dev), axis=-1).numpy()  # the program, built or loaded once
    before = _programs(dev)
    for n, a in data.items():
        got = em.sort(em.tensor(a, device=dev), axis=-1).numpy()
        np.testing.assert_array_equal(got, np.sort(a, axis=-1), err_msg=f"rows of {n}")
    assert _programs(dev) == before, "a new row length compiled (or loaded) a new sort program"

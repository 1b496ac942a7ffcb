"""em.jit on the device: a captured training step (forward, backward, optimizer update) replayed
step after step tracks an eager twin; results of replays match numpy; a new shape captures again.

The twin is the same model trained by eager calls on the same device (the path the rest of the
suite checks against numpy). Steps: 100 on every built-in backend (a replay compiles nothing
new, so even PoCL and lavapipe take seconds); FEW_STEPS on other kinds.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn, optim

from .checks import assert_close

STEPS = {"cpu": 100, "cuda": 100, "opencl": 100, "wgpu": 100}
FEW_STEPS = 6


def _mlp(ad_device, seed: int):
    em.seed(seed)
    return nn.Sequential(nn.Linear(4, 8, device=ad_device), nn.Tanh(), nn.Linear(8, 2, device=ad_device))


def _step_fn(model, opt):
    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


OPTIMIZERS = {
    "sgd-momentum": lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9),
    "adamw": lambda ps: optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_jit_training_step_matches_eager(name, ad_device):
    """Every replayed step leaves the parameters where the eager twin's step leaves them."""
    model = _mlp(ad_device, 0)
    twin = _mlp(ad_device, 0)  # the same seed: the same initial weights
    jitted = em.jit(_step_fn(model, OPTIMIZERS[name](model.parameters())))
    eager = _step_fn(twin, OPTIMIZERS[name](twin.parameters()))
    rng = np.random.default_rng(0)
    steps = STEPS.get(ad_device.kind, FEW_STEPS)
    for i in range(steps):
        x = rng.standard_normal((6, 4)).astype(np.float32)
        y = rng.standard_normal((6, 2)).astype(np.float32)
        lj = jitted(em.tensor(x, device=ad_device), em.tensor(y, device=ad_device))
        le = eager(em.tensor(x, device=ad_device), em.tensor(y, device=ad_device))
        np.testing.assert_allclose(lj.numpy(), le.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"loss, step {i}")
        for (k, p), q in zip(model.named_parameters(), twin.parameters()):
            np.testing.assert_allclose(p.numpy(), q.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"{k}, step {i}")
    (capture,) = jitted.captures
    assert capture.replays == steps - 2  # the first call makes the optimizer's state, the second is captured


def test_jit_replays_compute_new_inputs_and_recapture_new_shapes(device):
    """Replays read the new arguments; a new shape is a new capture; Python runs at capture only."""
    seen = []

    @em.jit
    def f(x, w):
        seen.append(x.shape)
        return (x @ w).tanh() * 2.0 + x.sum(axis=1, keepdims=True)

    rng = np.random.default_rng(1)
    for rows in (3, 3, 3, 5, 5):
        a = rng.standard_normal((rows, 4)).astype(np.float32)
        b = rng.standard_normal((4, 2)).astype(np.float32)
        out = f(em.tensor(a, device=device), em.tensor(b, device=device))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        assert_close(out, np.tanh(a64 @ b64) * 2.0 + a64.sum(axis=1, keepdims=True), em.float32, scale=4.0)
    assert seen == [(3, 4), (5, 4)]
    assert [c.replays for c in f.captures] == [2, 1]
    if device.capabilities.fusion and em.lazy.fusion_enabled() and device.capabilities.fusion_min_elements <= 6:
        assert f.captures[0].counts().get("run_fused", 0) >= 1  # the fused region replays as one kernel

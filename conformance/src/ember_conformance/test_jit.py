"""em.jit on the device: a captured training step (forward, backward, optimizer update) replayed
step after step tracks a float64 numpy twin, as the same steps run eagerly do; replays read new
inputs, keep earlier results intact and recapture new shapes; ``EMBER_JIT_NATIVE=0`` keeps
ember's step list.

The checks live in :mod:`ember_conformance.jit_checks`, public, so that a backend's own tests
run the same ones and add what only the backend can see (its native replay ran). Steps: 100 on
every built-in backend (a replay compiles nothing new, so even PoCL and lavapipe take seconds);
FEW_STEPS on other kinds.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

from .jit_checks import OPTIMIZERS, check_new_inputs_and_shapes, check_result_views, check_training

STEPS = {"cpu": 100, "cuda": 100, "opencl": 100, "wgpu": 100}
FEW_STEPS = 6
EAGER_STEPS = 20


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_jit_training_step_matches_float64(name, ad_device):
    """Every replayed step leaves the loss and the parameters where a float64 twin's step leaves them."""
    check_training(ad_device, optimizer=name, steps=STEPS.get(ad_device.kind, FEW_STEPS))


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_eager_training_steps_match_float64(name, ad_device):
    """The same training without em.jit: the baseline the replays are held to, on this device."""
    check_training(ad_device, optimizer=name, steps=EAGER_STEPS, jit=False)


def test_jit_replays_compute_new_inputs_and_recapture_new_shapes(device):
    """Replays read the new arguments; a new shape is a new capture; Python runs at capture only."""
    f = check_new_inputs_and_shapes(device)
    if device.capabilities.fusion and em.lazy.fusion_enabled() and device.capabilities.fusion_min_elements <= 6:
        assert f.captures[0].counts().get("run_fused", 0) >= 1  # the fused region replays as one kernel


def test_jit_results_that_view_arguments_constants_and_slices(device):
    """Results of earlier replays survive later ones, views of arguments and constants included."""
    check_result_views(device)


def test_jit_native_0_keeps_the_step_list(device, monkeypatch):
    """``EMBER_JIT_NATIVE=0``: no backend replay; ember replays its step list and says why."""
    monkeypatch.setenv("EMBER_JIT_NATIVE", "0")
    f = em.jit(lambda x: x * 2.0 + 1.0)
    for v in (1.0, 2.0):
        np.testing.assert_allclose(f(em.tensor([v], device=device)).numpy(), [2 * v + 1])
    assert f.captures[0].program.native is None and "EMBER_JIT_NATIVE=0" in f.describe()

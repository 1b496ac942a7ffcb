"""em.jit on cuda: captures replay as one CUDA graph, a training step with matmuls included
(ember-cuda calls cuBLAS itself: CuPy's matmul refuses capture), and track a float64 twin
(ember_conformance.jit_checks). They need an NVIDIA GPU and CuPy; elsewhere they skip with the
reason the backend gives (CI has no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cuda import runtime

import ember as em
from ember_conformance.jit_checks import assert_native_replay, check_training

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


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_a_training_step_replayed_100_times_tracks_float64(optimizer: str) -> None:
    step = check_training(em.Device.cuda(0).autodiff(), optimizer=optimizer, steps=100)
    assert_native_replay(step, "cuda")

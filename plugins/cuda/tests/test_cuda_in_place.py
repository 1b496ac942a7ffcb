"""ember-cuda takes the lazy layer's offer (Backend.fusion_outs): ``p.copy_(p - lr * g)`` stores
into p's old buffer, so an SGD step allocates no new parameter buffers (as torch's ``sub_``). Needs
an NVIDIA GPU and CuPy; elsewhere these skip with the backend's reason. What every backend taking
the offer must do (a kept view forbids it, a value recomputed later keeps its operand) is in the
conformance suite (ember_conformance/test_in_place.py); here, what is cuda's: the buffer's address."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cuda import runtime

import ember as em
from ember.lazy import materialize, stats
from ember_conformance.training import SmallMLP

pytestmark = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)


@pytest.fixture
def dev() -> em.Device:
    """cuda:0 with autodiff and fusion on (whatever EMBER_FUSION says), back as it was afterwards."""
    device = em.Device.cuda(0).autodiff()
    if not device.backend.fusion_outs:
        pytest.skip("EMBER_CUDA_IN_PLACE=0: the offer is declined")
    with em.lazy.fusion(True, device):
        yield device


def _address(t: em.Tensor) -> int:
    return materialize(t._data).data.ptr  # an int: holding the array would forbid the offer


def test_sgd_updates_write_the_parameter_in_place(dev) -> None:  # noqa: ANN001
    gen = np.random.default_rng(3)
    p0 = gen.standard_normal((64, 96)).astype(np.float32)
    g0 = gen.standard_normal((64, 96)).astype(np.float32)
    p = em.tensor(p0, device=dev)
    g = em.tensor(g0, device=dev)
    with em.no_grad():
        p.copy_(p - 0.25 * g)  # the first result is a fresh buffer
        p.realize()
        where = _address(p)
        before = stats(dev)["in_place"]
        for step in range(3):
            p.copy_(p - 0.25 * g)
            p.realize()
            assert _address(p) == where, f"step {step}: a new buffer"
    assert stats(dev)["in_place"] == before + 3
    want = p0.astype(np.float64) - 4 * 0.25 * g0.astype(np.float64)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-5, atol=1e-5)


def test_a_training_step_reuses_its_parameter_buffers(dev) -> None:  # noqa: ANN001
    """W2's MLP shape, smaller, trained with SGD: from the second step every parameter keeps its
    buffer, and the loss goes down."""
    mlp = SmallMLP(dev)
    losses, addresses = [], []
    for _ in range(6):
        losses.append(mlp.step().item())
        addresses.append([_address(w) for w in mlp.params])
    assert addresses[-1] == addresses[1] == addresses[2]
    assert losses[-1] < losses[0]

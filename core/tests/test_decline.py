"""A native kernel may decline its operands by returning ``NotImplemented``: dispatch then computes
the op by its composite (recorded for autodiff as the kernel's result would be), so a backend
covers the cases its kernel takes and leaves the rest to the core's rule, with no copy of it."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.plugins import BackendSpec, get_registry

#: (op, axis) of every call the picky kernel saw, and whether it declined
SEEN: list[tuple[str, int, bool]] = []


class PickyBackend(em.Backend):
    """numpy underneath; its softmax runs the CPU kernel over the last axis only and declines the rest."""

    name = "picky"

    def __init__(self, device: em.Device) -> None:
        super().__init__(device)
        from ember_cpu.backend import CpuBackend

        self._cpu = CpuBackend(device)

    def implementation(self, op: str):
        cpu = self._cpu.implementation(op)
        if op != "softmax":
            return cpu

        def softmax(a, *, axis):
            declined = axis not in (-1, len(a.shape) - 1)
            SEEN.append((op, axis, declined))
            return NotImplemented if declined else cpu(a, axis=axis)

        return softmax


class PickyPlugin:
    @em.hookimpl
    def ember_register_backends(self, registry) -> None:
        registry.add_backend(BackendSpec(name="picky", kinds=("picky",), loader=lambda: PickyBackend))


@pytest.fixture
def picky() -> em.Device:
    reg = get_registry()
    if "picky" not in reg.specs:
        reg.discover()
        reg.register(PickyPlugin(), name="picky-test-plugin")
    SEEN.clear()
    return em.Device("picky:0").autodiff()


def _softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0])
def test_a_declined_op_runs_its_composite_and_its_gradient_is_the_ops(picky, axis):
    x64 = np.random.default_rng(5).standard_normal((4, 6))
    x = em.tensor(x64.astype(np.float32), device=picky, requires_grad=True)
    w64 = np.random.default_rng(6).standard_normal((4, 6))
    y = em.softmax(x, axis=axis)
    (y * em.tensor(w64.astype(np.float32), device=picky)).sum().backward()
    want = _softmax64(x64, axis)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    # softmax's vjp: p * (w - sum(p * w))
    grad = want * (w64 - (want * w64).sum(axis=axis, keepdims=True))
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-4, atol=1e-6)
    calls = [s for s in SEEN if s[0] == "softmax"]
    assert calls and calls[0][2] == (axis == 0), f"the kernel saw {SEEN}"
    assert y._node is not None and y._node.op.name == "softmax", "recorded as the op, not as its composite's ops"

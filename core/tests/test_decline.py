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


def test_em_jit_replays_the_composite_of_a_declined_op(picky):
    """A capture notes the composite's kernels, not the declined call: replays match eager."""
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(3)]

    def fn(x):
        return em.softmax(x, axis=0) * 2.0

    jitted = em.jit(fn)
    for i, x64 in enumerate(xs):
        x = em.tensor(x64, device=picky)
        np.testing.assert_allclose(jitted(x).numpy(), 2.0 * _softmax64(x64.astype(np.float64), 0), rtol=1e-5)
        if i == 0:
            assert any(s[2] for s in SEEN), "the kernel declined at capture"
            SEEN.clear()
    assert not SEEN, f"a replay called the declined kernel again: {SEEN}"


def test_onnx_export_traces_a_declined_op_as_the_op(picky, tmp_path):
    """The exporter runs the composite for a declined call and still writes the op's node."""
    pytest.importorskip("onnx")
    onnxruntime = pytest.importorskip("onnxruntime")
    x64 = np.random.default_rng(8).standard_normal((3, 5)).astype(np.float32)

    def f(x):
        return em.softmax(x, axis=0) * 2.0  # (the product reads what the declined call gave)

    path = tmp_path / "declined.onnx"
    proto = em.onnx.export(f, (em.tensor(x64, device=picky),), path, opset=18)
    ops = [n.op_type for n in proto.graph.node]
    assert ops.count("Softmax") == 1 and "Exp" not in ops, f"the op's node, not its composite's pieces: {ops}"
    assert any(s[2] for s in SEEN), "the kernel declined while tracing"
    sess = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"input_0": x64})
    np.testing.assert_allclose(got, 2.0 * _softmax64(x64.astype(np.float64), 0), rtol=1e-5, atol=1e-6)

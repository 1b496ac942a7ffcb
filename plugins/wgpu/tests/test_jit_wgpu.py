"""em.jit's native replay on WebGPU (replay.py): a training step replayed as one command buffer
per replay tracks a numpy float64 reference step by step, with no dispatch through the Python op
path; a new shape captures again; a step that reads back to the host falls back to the step list."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember as em
from ember import optim
from ember_wgpu.runtime import Runtime

STEPS = 100
LR = 0.05


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the kernels dispatched through the usual batch (recording mode is not counted)."""
    seen: list[str] = []
    plain = Runtime.dispatch

    def counted(self: Runtime, pipe: Any, params: bytes, buffers: Any, groups: Any, name: str = "") -> None:
        seen.append(name or pipe.name)
        plain(self, pipe, params, buffers, groups, name)

    monkeypatch.setattr(Runtime, "dispatch", counted)
    return seen


def _reference_step(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """One SGD step of the tanh MLP in float64, backward by hand; updates ``p`` in place."""
    h = np.tanh(x @ p["w1"] + p["b1"])
    out = h @ p["w2"] + p["b2"]
    loss = float(np.mean((out - y) ** 2))
    dout = 2.0 * (out - y) / out.size
    dz = (dout @ p["w2"].T) * (1.0 - h**2)
    grads = {"w2": h.T @ dout, "b2": dout.sum(0), "w1": x.T @ dz, "b1": dz.sum(0)}
    for k, g in grads.items():
        p[k] -= LR * g
    return loss


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_training_step_replays_as_one_command_buffer(dev: em.Device, launches: list[str], fused: bool) -> None:
    """Unfused, each scalar is an uploaded constant the replay must keep apart from its buffers."""
    with em.lazy.fusion(fused, dev):
        _train_and_compare(dev, launches)


def _train_and_compare(dev: em.Device, launches: list[str]) -> None:
    ad = dev.autodiff()
    rng = np.random.default_rng(0)
    init = {
        "w1": rng.standard_normal((5, 8)) * 0.5,
        "b1": rng.standard_normal(8) * 0.1,
        "w2": rng.standard_normal((8, 3)) * 0.5,
        "b2": rng.standard_normal(3) * 0.1,
    }
    ref = {k: v.astype(np.float32).astype(np.float64) for k, v in init.items()}
    params = {k: em.tensor(v.astype(np.float32), device=ad, requires_grad=True) for k, v in init.items()}
    opt = optim.SGD(list(params.values()), lr=LR)

    @em.jit
    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        h = em.tanh(x @ params["w1"] + params["b1"])
        loss = em.mean((h @ params["w2"] + params["b2"] - y) ** 2)
        loss.backward()
        opt.step()
        return loss

    losses, want = [], []
    for i in range(STEPS):
        x = rng.standard_normal((7, 5)).astype(np.float32)
        y = rng.standard_normal((7, 3)).astype(np.float32)
        if i == 1:
            launches.clear()  # the capture ran through the usual path; replays must not
            rt = dev.backend.rt
            dispatches = rt.dispatches
        losses.append(step(em.tensor(x, device=ad), em.tensor(y, device=ad)))  # kept: later replays must not overwrite
        want.append(_reference_step(ref, x.astype(np.float64), y.astype(np.float64)))
        for k, p in params.items():
            np.testing.assert_allclose(p.numpy(), ref[k], rtol=2e-4, atol=2e-5, err_msg=f"{k}, step {i}")
    np.testing.assert_allclose([float(v.item()) for v in losses], want, rtol=2e-4, atol=1e-6)
    (capture,) = step.captures
    native = capture.program.native
    assert capture.program.native_backend == "wgpu" and "native (wgpu)" in step.describe()
    assert native.replays == capture.replays == STEPS - 1
    assert native.kernels > 0 and native.launched == native.kernels * native.replays
    assert rt.dispatches - dispatches == native.launched  # the device counter saw every replayed dispatch
    assert launches == [], f"replays queued {len(launches)} kernels through the op path: {sorted(set(launches))}"


def test_new_shape_captures_again_and_strided_arguments_are_copied_in(dev: em.Device) -> None:
    seen = []

    @em.jit
    def f(x: Any, w: Any) -> Any:
        seen.append(x.shape)
        return (x @ w).tanh() * 2.0 + x.sum(axis=1, keepdims=True)

    rng = np.random.default_rng(1)
    for rows, transposed in ((3, False), (3, False), (3, True), (6, False), (6, True)):
        a = rng.standard_normal((rows, 4)).astype(np.float32)
        b = rng.standard_normal((4, 2)).astype(np.float32)
        x = em.tensor(np.ascontiguousarray(a.T), device=dev).permute((1, 0)) if transposed else em.tensor(a, device=dev)
        out = f(x, em.tensor(b, device=dev))
        a64 = a.astype(np.float64)
        want = np.tanh(a64 @ b.astype(np.float64)) * 2.0 + a64.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)
    assert seen == [(3, 4), (6, 4)]
    assert [c.replays for c in f.captures] == [2, 1]
    assert [c.program.native_backend for c in f.captures] == ["wgpu", "wgpu"]
    assert [c.program.native.replays for c in f.captures] == [2, 1]


def test_results_that_view_arguments_constants_and_slices(dev: em.Device) -> None:
    """Results over a fixed input buffer are copied out, views of a constant are handed back as they are."""
    c = em.tensor(np.arange(6, dtype=np.float32), device=dev)

    @em.jit
    def f(x: Any) -> Any:
        return x.reshape((2, 3)), c.reshape((3, 2)), (x * 2.0)[1:4], em.zeros((2,), device=dev) + 1.0

    kept = []
    for v in (1.0, 2.0, 3.0, 4.0):
        kept.append((v, f(em.tensor(np.arange(6, dtype=np.float32) * v, device=dev))))
    for v, (a, b, s, z) in kept:  # read after every replay ran: none overwrote an earlier result
        base = np.arange(6, dtype=np.float64)
        np.testing.assert_array_equal(a.numpy(), (base * v).reshape(2, 3))
        np.testing.assert_array_equal(b.numpy(), base.reshape(3, 2))
        np.testing.assert_array_equal(s.numpy(), (base * v * 2.0)[1:4])
        np.testing.assert_array_equal(z.numpy(), [1.0, 1.0])
    assert f.captures[0].program.native.replays == 3


_round_trip = em.backend_extension("jit_replay_host_round_trip_wgpu")(lambda x: x * 3.0)


@_round_trip.kernel("wgpu")
def _round_trip_wgpu(backend: Any, x: Any) -> Any:
    """Host work between enqueues: what an enqueue list cannot hold."""
    return backend.from_numpy(backend.to_numpy(x) * np.float32(3.0))


def test_a_host_readback_falls_back_to_the_step_list(dev: em.Device) -> None:
    f = em.jit(lambda x: _round_trip(x + 1.0) - 1.0)
    for v in (1.0, 2.0, 3.0):
        np.testing.assert_allclose(f(em.tensor([v, -v], device=dev)).numpy(), [3 * v + 2, -3 * v + 2], rtol=1e-6)
    (capture,) = f.captures
    assert capture.program.native is None and capture.replays == 2
    note = capture.program.native_note
    assert "no WebGPU command buffer" in note and "back to the host" in note
    assert "step list (no WebGPU command buffer" in f.describe()


def test_ember_jit_native_0_keeps_the_step_list(dev: em.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMBER_JIT_NATIVE", "0")
    f = em.jit(lambda x: x * 2.0 + 1.0)
    for v in (1.0, 2.0):
        np.testing.assert_allclose(f(em.tensor([v], device=dev)).numpy(), [2 * v + 1])
    assert f.captures[0].program.native is None and "EMBER_JIT_NATIVE=0" in f.describe()


def test_a_replays_buffers_count_in_memory_stats_until_it_dies(dev: em.Device) -> None:
    """A native replay's private pool shows in ``memory_stats()`` (``jitN``) beside the device's,
    and goes, with its buffers, when the jitted function is dropped."""
    import gc

    gc.collect()
    x = em.tensor(np.ones((64, 64), np.float32), device=dev)
    before = dev.memory_stats()

    @em.jit
    def f(x: Any) -> Any:
        y = x
        for _ in range(3):
            y = (y @ x).tanh() + 1.0
        return y

    for _ in range(3):
        out = f(x)
    out.numpy()
    stats = dev.memory_stats()
    jit = {name: p for name, p in stats["pools"].items() if name.startswith("jit")}
    assert f.captures[0].program.native is not None and len(jit) == 1
    held = next(iter(jit.values()))["reserved_bytes"]
    assert held >= 64 * 64 * 4  # a step result at least (the pool reuses between steps)
    assert stats["reserved_bytes"] == sum(p["reserved_bytes"] for p in stats["pools"].values())
    del f, out
    gc.collect()
    after = dev.memory_stats()
    assert not [name for name in after["pools"] if name.startswith("jit")]
    assert after["in_use_bytes"] == before["in_use_bytes"]

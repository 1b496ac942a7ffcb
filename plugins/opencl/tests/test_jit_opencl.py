"""em.jit's native replay on OpenCL (replay.py): a training step replayed as one enqueue list
tracks a numpy float64 reference step by step, with no launch through the Python op path; a
new shape captures again; a step that reads back to the host falls back to the step list.
The shared checks are ember_conformance.jit_checks; these add that OpenCL's replay ran."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember as em
from ember_conformance.jit_checks import (
    assert_native_replay,
    check_new_inputs_and_shapes,
    check_replay_pool_in_memory_stats,
    check_result_views,
    check_training,
)
from ember_opencl.runtime import Runtime

STEPS = 100


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the kernels queued through the usual launch path (recording mode is not counted)."""
    seen: list[str] = []
    plain = Runtime.launch

    def counted(self: Runtime, knl: Any, gsize: Any, lsize: Any, args: Any) -> None:
        seen.append(knl.function_name)
        plain(self, knl, gsize, lsize, args)

    monkeypatch.setattr(Runtime, "launch", counted)
    return seen


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
def test_training_step_replays_as_one_enqueue_list(dev: em.Device, launches: list[str], fused: bool) -> None:
    """Unfused, each scalar is an uploaded constant the replay must keep apart from its buffers."""
    with em.lazy.fusion(fused, dev):
        step = check_training(dev.autodiff(), steps=STEPS, before_replays=launches.clear)
    (native,) = assert_native_replay(step, "opencl")
    assert native.replays == STEPS - 1
    assert launches == [], f"replays queued {len(launches)} kernels through the op path: {sorted(set(launches))}"


def test_new_shape_captures_again_and_strided_arguments_are_copied_in(dev: em.Device) -> None:
    f = check_new_inputs_and_shapes(dev)
    assert [n.replays for n in assert_native_replay(f, "opencl")] == [2, 1]


def test_results_that_view_arguments_constants_and_slices(dev: em.Device) -> None:
    """Results over a fixed input buffer are copied out, views of a constant are handed back as they are."""
    (native,) = assert_native_replay(check_result_views(dev), "opencl")
    assert native.replays == 3


_round_trip = em.backend_extension("jit_replay_host_round_trip_opencl")(lambda x: x * 3.0)


@_round_trip.kernel("opencl")
def _round_trip_opencl(backend: Any, x: Any) -> Any:
    """Host work between enqueues: what an enqueue list cannot hold."""
    return backend.from_numpy(backend.to_numpy(x) * np.float32(3.0))


def test_a_host_readback_falls_back_to_the_step_list(dev: em.Device) -> None:
    f = em.jit(lambda x: _round_trip(x + 1.0) - 1.0)
    for v in (1.0, 2.0, 3.0):
        np.testing.assert_allclose(f(em.tensor([v, -v], device=dev)).numpy(), [3 * v + 2, -3 * v + 2], rtol=1e-6)
    (capture,) = f.captures
    assert capture.program.native is None and capture.replays == 2
    note = capture.program.native_note
    assert "no OpenCL enqueue list" in note and "back to the host" in note
    assert "step list (no OpenCL enqueue list" in f.describe()


def test_without_clclonekernel_each_launch_gets_a_new_kernel_object(
    dev: em.Device, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenCL < 2.1 has no clCloneKernel: the bound launches are new kernels of the same programs."""
    import pyopencl as cl

    def no_clone(self: Any) -> Any:
        raise cl.LogicError("clCloneKernel failed: INVALID_OPERATION")

    monkeypatch.setattr(cl.Kernel, "clone", no_clone)
    f = em.jit(lambda x, y: em.sum(em.tanh(x @ y) * 2.0, axis=0) + 1.0)
    rng = np.random.default_rng(3)
    for _ in range(3):
        a = rng.standard_normal((5, 4)).astype(np.float32)
        b = rng.standard_normal((4, 3)).astype(np.float32)
        out = f(em.tensor(a, device=dev), em.tensor(b, device=dev)).numpy()
        want = np.sum(np.tanh(a.astype(np.float64) @ b.astype(np.float64)) * 2.0, axis=0) + 1.0
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    native = f.captures[0].program.native
    assert native is not None and native.replays == 2 and native.kernels >= 2


def test_a_replays_buffers_count_in_memory_stats_until_it_dies(dev: em.Device) -> None:
    """A native replay's private pool shows in ``memory_stats()`` (``jitN``) beside the device's,
    and goes, with its buffers, when the jitted function is dropped."""
    check_replay_pool_in_memory_stats(dev)

"""synchronize(): each wait mode leaves the queue empty and the results computed; a repeated
step does not rewrite its parameter block; bad settings name the variable."""

from __future__ import annotations

import math

import numpy as np
import pytest
from wgpu_checks import check_unchecked_dispatch_is_validation_error

import ember as em
from ember.errors import InvalidArgumentError
from ember_wgpu import recorder as recorder_mod
from ember_wgpu import runtime as runtime_mod
from ember_wgpu import settings


def _queue_empty(rt) -> bool:  # noqa: ANN001
    from wgpu.backends.wgpu_native import ffi, lib

    return bool(lib.wgpuDevicePoll(rt.device._internal, False, ffi.NULL) & 0xFF)


def _w6_reference(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    t = x.astype(np.float64) * a + b
    erf = np.vectorize(math.erf)
    return 0.5 * t * (1.0 + erf(t / math.sqrt(2.0))) / (1.0 + np.exp(-x.astype(np.float64)))


@pytest.fixture
def mode(rt, request):  # noqa: ANN001, ANN201
    saved, saved_spin = rt.sync_mode, rt.spin_s
    rt.sync_mode = request.param
    yield request.param
    rt.sync_mode, rt.spin_s = saved, saved_spin


@pytest.mark.parametrize("mode", ["spin", "wait", "map"], indirect=True)
@pytest.mark.parametrize("spin_us", [2000, 0])
def test_each_mode_waits_for_the_queue(dev, rt, mode, spin_us):
    """After synchronize() the queue is empty (spin, wait) and the held result equals numpy's (float64)."""
    rt.spin_s = spin_us / 1e6  # 0: the spin gives up at once and the blocking poll waits
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal(1 << 16).astype(np.float32) for _ in range(3)]
    x, a, b = (em.tensor(v, device=dev) for v in xs)
    waits = rt.waits
    y = em.gelu(x * a + b) * em.sigmoid(x)
    dev.synchronize()
    assert rt.waits == waits + 1
    if mode != "map":  # map_sync resolves once the fence's submit has run; its own empty submit may still be queued
        assert _queue_empty(rt)
    np.testing.assert_allclose(y.numpy(), _w6_reference(*xs), rtol=2e-5, atol=1e-6)


def test_repeated_step_skips_the_parameter_write(dev, rt):
    """The same launch twice, each synchronized: the second batch's parameter bytes equal the
    first's, so the uniform arena is written once; a new shape writes it again."""
    rng = np.random.default_rng(4)
    x = em.tensor(rng.standard_normal(1000).astype(np.float32), device=dev)

    def step(t):  # noqa: ANN001, ANN202
        y = em.tanh(t * 3.0 + 1.0)
        dev.synchronize()
        return y

    step(x)
    writes = rt.arena_writes
    y = step(x)
    assert rt.arena_writes == writes
    np.testing.assert_allclose(y.numpy(), np.tanh(x.numpy().astype(np.float64) * 3.0 + 1.0), rtol=2e-6, atol=1e-7)
    x2 = em.tensor(rng.standard_normal(1004).astype(np.float32), device=dev)
    y2 = step(x2)
    assert rt.arena_writes == writes + 1
    np.testing.assert_allclose(y2.numpy(), np.tanh(x2.numpy().astype(np.float64) * 3.0 + 1.0), rtol=2e-6, atol=1e-7)


def test_default_mode_follows_the_adapter(rt, monkeypatch):
    monkeypatch.delenv("EMBER_WGPU_SYNC", raising=False)
    assert settings.sync_mode(rt.device, cpu=True) == "wait"
    assert settings.sync_mode(rt.device, cpu=False) == "spin"
    monkeypatch.setenv("EMBER_WGPU_SYNC", "map")
    assert settings.sync_mode(rt.device, cpu=False) == "map"


def test_bad_settings_name_the_variable(rt, monkeypatch):
    monkeypatch.setenv("EMBER_WGPU_SYNC", "sleep")
    with pytest.raises(InvalidArgumentError, match="EMBER_WGPU_SYNC='sleep': expected one of spin, wait, map"):
        settings.sync_mode(rt.device, cpu=False)
    monkeypatch.setenv("EMBER_WGPU_SPIN_US", "2ms")
    with pytest.raises(InvalidArgumentError, match="EMBER_WGPU_SPIN_US"):
        settings.spin_seconds()


@pytest.mark.parametrize("kind", ["native", "public"])
def test_both_recorders_record_and_report_invalid_batches(dev, rt, kind, monkeypatch):
    """Each recorder runs a fused step to numpy's values; an invalid dispatch (workgroups over the
    limit, unchecked) is still reported at the flush as a WgpuValidationError naming the kernel."""
    rt.synchronize()
    saved = rt.recorder
    monkeypatch.setenv("EMBER_WGPU_RECORDER", kind)
    rt.recorder = recorder_mod.recorder(rt.device, rt.queue)
    try:
        assert rt.recorder.kind == kind
        rng = np.random.default_rng(5)
        xs = [rng.standard_normal(999).astype(np.float32) for _ in range(3)]
        x, a, b = (em.tensor(v, device=dev) for v in xs)
        y = em.gelu(x * a + b) * em.sigmoid(x)
        dev.synchronize()
        np.testing.assert_allclose(y.numpy(), _w6_reference(*xs), rtol=2e-5, atol=1e-6)
        check_unchecked_dispatch_is_validation_error(rt, "too_wide")
        z = em.tanh(x)
        dev.synchronize()  # the device still works
        np.testing.assert_allclose(z.numpy(), np.tanh(xs[0].astype(np.float64)), rtol=2e-6, atol=1e-7)
    finally:
        rt.recorder = saved


def test_bad_recorder_setting_names_the_variable(rt, monkeypatch):
    monkeypatch.setenv("EMBER_WGPU_RECORDER", "fast")
    with pytest.raises(InvalidArgumentError, match="EMBER_WGPU_RECORDER.*native, public, timed"):
        recorder_mod.recorder(rt.device, rt.queue)


@pytest.mark.parametrize("mode", ["spin", "wait", "map"], indirect=True)
def test_read_is_one_submit_and_keeps_its_staging_buffer(dev, rt, mode, monkeypatch):
    """A readback of queued results (a view with an offset among them) is the batch and the
    copies in one submit, values as numpy's; the staging buffer is kept for the next read unless
    it is larger than the keep limit."""
    from ember import dtypes as D
    from ember_wgpu.kernels import elementwise as ew

    x = rt.upload(np.arange(1000, dtype=np.float32), D.float32)
    rt.synchronize()
    y = ew.apply_op(rt, "mul", [x, 2.0])
    z = ew.apply_op(rt, "add", [x.slice((3,), (503,), (2,)), 1.0])
    submits = rt.submits
    got_y, got_z = rt.read([y, z])
    assert rt.submits == submits + 1
    np.testing.assert_array_equal(got_y, np.arange(1000, dtype=np.float64) * 2)
    np.testing.assert_array_equal(got_z, np.arange(3, 503, 2, dtype=np.float64) + 1)
    kept = rt._staging_buf
    assert kept is not None
    assert rt.read([y])[0][999] == 1998.0 and rt._staging_buf is kept
    monkeypatch.setattr(runtime_mod, "_STAGING_KEEP", 16)
    rt._staging_buf = None
    assert rt.read([z])[0][0] == 4.0 and rt._staging_buf is None  # over the limit: destroyed after the read


@pytest.mark.parametrize("idle_us", [1.0, 0.0])
def test_an_idle_device_gets_the_open_batch_at_once(dev, rt, idle_us):
    """With idle polls on (and chunked submits off), a step's launches go to the device as soon as it
    is found idle (after a sync it is) instead of waiting for the sync; with them off, nothing is
    submitted before the sync. The product chain equals float64 numpy's either way."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((192, 192)).astype(np.float32)
    w = (rng.standard_normal((192, 192)) / 14).astype(np.float32)
    x, wt = em.tensor(a, device=dev), em.tensor(w, device=dev)
    dev.synchronize()
    saved = (rt.submit_every, rt.submit_groups, rt.submit_idle_s * 1e6)
    rt.set_submit_every(0, 1, idle_us=idle_us)
    try:
        submits, idle = rt.submits, rt.idle_submits
        y = x
        for _ in range(3):
            y = (y @ wt).realize()
        early, early_idle = rt.submits - submits, rt.idle_submits - idle
        got = y.numpy()
    finally:
        rt.set_submit_every(*saved[:2], idle_us=saved[2])
    if idle_us:
        assert early_idle >= 1 and early >= early_idle
    else:
        assert early == early_idle == 0
    want = a.astype(np.float64)
    for _ in range(3):
        want = want @ w
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_bad_idle_poll_setting_names_the_variable(monkeypatch):
    monkeypatch.setenv("EMBER_WGPU_SUBMIT_IDLE_US", "often")
    with pytest.raises(InvalidArgumentError, match="EMBER_WGPU_SUBMIT_IDLE_US"):
        settings.submit_idle_s()
    monkeypatch.setenv("EMBER_WGPU_SUBMIT_IDLE_US", "-5")
    with pytest.raises(InvalidArgumentError, match="EMBER_WGPU_SUBMIT_IDLE_US"):
        settings.submit_idle_s()

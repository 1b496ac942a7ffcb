"""Adapters and limits, the buffer pool, batching, and error translation."""

from __future__ import annotations

import numpy as np
import pytest
from wgpu_checks import check_unchecked_dispatch_is_validation_error

import ember as em
from ember import dtypes as D
from ember_wgpu import adapters
from ember_wgpu.errors import WgpuDeviceLostError, WgpuKernelError, WgpuLimitError
from ember_wgpu.kernels import elementwise as ew


def test_describe_shows_backend_features_and_limits(dev):
    info = dev.describe()
    assert info["backend"] in ("Vulkan", "Metal", "D3D12", "OpenGL")
    for key in ("max-buffer-size", "max-storage-buffer-binding-size", "max-compute-workgroup-size-x",
                "max-storage-buffers-per-shader-stage"):  # fmt: skip
        assert key in info["limits"]
    assert isinstance(info["features"], list)


def test_adapter_order_is_stable():
    first = [a.info["device"] for a in adapters.adapters()]
    adapters.adapters.cache_clear()
    assert [a.info["device"] for a in adapters.adapters()] == first


def test_device_gets_the_adapters_maximum_limits(rt):
    for key in ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage"):
        assert rt.device.limits[key] == rt.adapter.limits[key]


def test_tensor_over_the_binding_limit_names_the_limit(rt):
    too_big = rt.max_binding + 16
    with pytest.raises(WgpuLimitError, match="max-storage-buffer-binding-size") as info:
        rt.alloc(too_big)
    assert str(too_big) in str(info.value)
    with pytest.raises(WgpuLimitError, match="max-storage-buffer-binding-size"):
        rt.empty((too_big // 4,), D.float32)  # a kernel's output: the same check


def test_pool_reuses_buffers(rt):
    x = rt.upload(np.ones(1000, np.float32), D.float32)
    ew.apply_op(rt, "add", [x, 1.0])  # result freed at once
    rt.flush()
    hits = rt.pool.hits
    for _ in range(5):
        ew.apply_op(rt, "add", [x, 1.0])
    assert rt.pool.hits >= hits + 5


def test_dispatches_are_batched(rt, sync_points_only, monkeypatch):
    x = rt.upload(np.ones(64, np.float32), D.float32)
    rt.flush()
    pressed = []  # submits of the pool making room (adaptive's step plan switching over, say)
    flush = rt.pool.on_pressure
    monkeypatch.setattr(rt.pool, "on_pressure", lambda: (pressed.append(1), flush()))
    submits = rt.submits
    y = x
    for _ in range(100):
        y = ew.apply_op(rt, "add", [y, x])
    assert rt.submits == submits + len(pressed)  # no dispatch submits by itself: only the pool's
    assert len(pressed) <= 2
    before_read = rt.submits
    assert rt.read([y])[0][0] == 101.0
    assert rt.submits <= before_read + 2  # the batch, then the readback copy


def test_chunked_submits_start_small_after_a_sync_point_and_keep_results(rt):
    """Under ``submit_every`` the open batch goes to the device every few dispatches (4 after a sync
    point, doubling up to the setting) once it holds ``submit_groups`` workgroups, so it runs while
    the host records; results do not change."""
    every, groups = rt.submit_every, rt.submit_groups
    try:
        x = rt.upload(np.ones(64, np.float32), D.float32)
        rt.set_submit_every(16, groups=0)
        for _ in range(2):  # the second time, the pool has what the chain needs: no submit of its own
            rt.synchronize()
            submits = rt.submits
            y = x
            for _ in range(60):  # chunks of 4, 8, 16, 16, 16: five submits, none left open
                y = ew.apply_op(rt, "add", [y, x])
        assert rt.submits - submits == 5 and rt._count == 0
        assert rt.read([y])[0][0] == 61.0
        submits = rt.submits
        for _ in range(4):  # the read was a sync point: the next submit comes after 4 dispatches again
            y = ew.apply_op(rt, "mul", [y, 1.0])
        assert rt.submits == submits + 1
        rt.set_submit_every(16, groups=6)  # one workgroup a launch: a chunk waits for its sixth
        rt.synchronize()
        submits = rt.submits
        for _ in range(5):
            y = ew.apply_op(rt, "mul", [y, 1.0])
        assert rt.submits == submits and rt._count == 5
        y = ew.apply_op(rt, "mul", [y, 1.0])
        assert rt.submits == submits + 1 and rt._count == 0
        rt.set_submit_every(0)  # sync points only
        submits = rt.submits
        for _ in range(100):
            y = ew.apply_op(rt, "sub", [y, x])
        assert rt.submits == submits and rt._count == 100
        np.testing.assert_array_equal(rt.read([y])[0], np.full(64, -39.0, np.float32))
    finally:
        rt.set_submit_every(every, groups)  # MAX_BATCH: sync points only


def test_a_repeated_step_writes_no_parameters_and_a_changed_one_does(rt):
    """Parameters start at the arena's start after each sync point: a step repeating its launches
    finds its bytes on the device already (also across chunked submits); a changed scalar is written."""
    every, groups = rt.submit_every, rt.submit_groups
    try:
        rt.set_submit_every(4, groups=0)  # three submits of 4 launches in a step of 12
        x = rt.upload(np.arange(64, dtype=np.float32), D.float32)

        def step(scale):
            y = x
            for _ in range(6):
                y = ew.apply_op(rt, "mul", [ew.apply_op(rt, "add", [y, 1.0]), scale])
            rt.synchronize()
            return y

        step(1.0)
        writes = rt.arena_writes
        y = step(1.0)
        assert rt.arena_writes == writes
        np.testing.assert_array_equal(rt.read([y])[0], np.arange(64, dtype=np.float32) + 6)
        y = step(0.5)
        assert rt.arena_writes > writes
        want = np.arange(64, dtype=np.float64)
        for _ in range(6):
            want = (want + 1.0) * 0.5
        np.testing.assert_allclose(rt.read([y])[0], want, rtol=1e-6)
    finally:
        rt.set_submit_every(every, groups)


def test_submit_settings_are_checked(rt, monkeypatch):
    from ember.errors import InvalidArgumentError
    from ember_wgpu import settings

    monkeypatch.setenv("EMBER_WGPU_SUBMIT_EVERY", "often")
    with pytest.raises(InvalidArgumentError, match="EMBER_WGPU_SUBMIT_EVERY"):
        settings.submit_every(cpu=False)
    monkeypatch.setenv("EMBER_WGPU_SUBMIT_EVERY", "")
    assert settings.submit_every(cpu=True) == settings.MAX_BATCH  # CPU adapters: sync points only
    assert settings.submit_every(cpu=False) == 32
    monkeypatch.setenv("EMBER_WGPU_SUBMIT_GROUPS", "lots")
    with pytest.raises(InvalidArgumentError, match="EMBER_WGPU_SUBMIT_GROUPS"):
        settings.submit_groups()
    monkeypatch.setenv("EMBER_WGPU_SUBMIT_GROUPS", "")
    assert settings.submit_groups() == settings.SUBMIT_GROUPS
    with pytest.raises(InvalidArgumentError, match="submit_every"):
        rt.set_submit_every(-1)


def test_memory_stats(dev):
    stats = dev.memory_stats()
    for key in ("reserved_bytes", "in_use_bytes", "peak_reserved_bytes", "peak_in_use_bytes"):
        assert stats[key] >= 0
    assert stats["pools"]["device"]["cache_limit_bytes"] == 2 << 30
    for key in ("pipelines", "bind_groups_cached", "submits", "dispatches"):
        assert key in stats["extra"]


@pytest.mark.parametrize("strategy", ["static", "adaptive"])
def test_upload_avoids_buffers_the_open_batch_uses(dev, rt, strategy):
    """queue.write_buffer runs before the batch it lands in: it must not write a buffer a pending kernel
    uses. static hands the upload another buffer; adaptive (whose step plan hands out its ranges only
    to requests that avoid nothing) hands it the same and submits the batch first."""
    before = dev.memory.strategy
    em.Device(str(dev), memory=strategy)
    try:
        x = rt.upload(np.arange(256, dtype=np.float32), D.float32)
        rt.flush()
        y = ew.apply_op(rt, "mul", [x, 2.0])  # recorded, not submitted
        busy = y.buffer
        del y  # its buffer is free again, but the open batch still writes it
        submits = rt.submits
        z = rt.upload(np.ones(256, np.float32), D.float32)
        if strategy == "static":
            assert z.buffer is not busy and rt.submits == submits
            w = ew.apply_op(rt, "add", [x, 1.0])  # a kernel's output may take it: it runs after the mul
            assert w.buffer is busy
        else:
            assert z.buffer is busy and rt.submits == submits + 1
            w = ew.apply_op(rt, "add", [x, 1.0])
        z_host, w_host = rt.read([z, w])
        np.testing.assert_array_equal(z_host, np.ones(256, np.float32))
        np.testing.assert_array_equal(w_host, np.arange(256, dtype=np.float32) + 1)
    finally:
        em.Device(str(dev), memory=before)


@pytest.mark.parametrize("strategy", ["static", "adaptive"])
def test_freed_buffers_over_the_cache_limit_are_destroyed_after_a_submit(dev, rt, strategy):
    """A buffer the open batch writes, released when its block dies, is destroyed after the submit."""
    before = dev.memory.strategy
    em.Device(str(dev), memory=strategy)
    limit, rt.pool.cache_limit = rt.pool.cache_limit, 0
    try:
        x = rt.upload(np.ones(1000, np.float32), D.float32)
        rt.flush()
        rt.pool.empty()  # earlier tests' cached buffers go now, not while the op below makes room
        rt.flush()
        rt.pool.trim()
        frees = rt.pool.frees
        ew.apply_op(rt, "add", [x, 1.0])  # freed at once, but the open batch writes it
        assert rt.pool.frees == frees  # kept until the submit
        rt.flush()
        assert rt.pool.frees == frees + 1
    finally:
        rt.pool.cache_limit = limit
        em.Device(str(dev), memory=before)


def test_bad_kernel_names_the_kernel_and_saves_source(rt, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    with pytest.raises(WgpuKernelError, match="broken_kernel") as info:
        rt.pipeline("broken_kernel", "fn main( {", ("w",))
    assert "saved at" in str(info.value)
    assert list(tmp_path.rglob("broken_kernel-*.wgsl"))


def test_invalid_batch_becomes_validation_error(rt):
    # a dispatch whose workgroup count the runtime did not check: wgpu rejects it at finish()
    check_unchecked_dispatch_is_validation_error(rt, "tiny")
    assert rt.read([ew.fill(rt, (2,), 3.0, D.float32)])[0].tolist() == [3.0, 3.0]  # the device still works


def test_too_many_workgroups_is_a_limit_error(rt):
    out = rt.empty((4,), D.float32)
    pipe = rt.pipeline("tiny2", "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
                       "@compute @workgroup_size(1) fn main() { y[0] = 2.0; }", ("w",))  # fmt: skip
    with pytest.raises(WgpuLimitError, match="max-compute-workgroups-per-dimension"):
        rt.dispatch(pipe, bytes(16), [out.buffer], (rt.max_groups + 1, 1, 1), "tiny2")


def test_lost_device_is_reported_at_the_next_sync(rt):
    rt._watcher.lost = "The WGPU device was lost (Unknown): simulated"
    try:
        with pytest.raises(WgpuDeviceLostError, match="simulated"):
            rt.synchronize()
    finally:
        rt._watcher.lost = None


def _stale_cache_steps(pool_cls):  # noqa: ANN001, ANN202
    """Fill the cache with four stale size classes, then run five steps that each take two
    buffers of another class and free them; returns (new buffers of that class, the pool)."""
    from ember.memory import size_class

    made, released = [], []

    def allocate(n: int) -> list[int]:
        made.append(n)
        return [n]

    step = size_class(100000)
    pool = pool_cls(allocate, released.append, cache_limit=2 * step, defer_release=True)
    stale = [pool.acquire(50000 + 8192 * k) for k in range(4)]
    del stale
    pool.trim()
    assert pool.cached > step  # the stale classes fill most of the cache
    for _ in range(5):
        a, b = pool.acquire(100000), pool.acquire(100000)
        del a, b
        pool.trim()
    return made.count(step), pool


@pytest.mark.parametrize("strategy", ["static", "adaptive"])
def test_pool_keeps_the_sizes_in_use_when_its_cache_is_full(strategy):
    """W6 after W1-W5: a cache full of stale sizes must not make every step allocate anew (the
    pool gives up the sizes returned least recently instead)."""
    import functools

    from ember.memory import BufferPool

    new, pool = _stale_cache_steps(functools.partial(BufferPool, strategy=strategy))
    assert new <= 2, f"{new} new buffers over five steps: the steps after the first should reuse theirs"
    assert pool.cached <= pool.cache_limit


def test_kernels_compile_without_naga_runtime_checks(rt, monkeypatch):
    """By default a kernel's module comes from wgpu-native's trusted entry point (no bounds clamps,
    no loop bounding); ``EMBER_WGPU_CHECKS=1`` keeps naga's checks. Both compute the same."""
    from ember_wgpu import settings, trusted

    source = (
        "@group(0) @binding(1) var<storage, read_write> y: array<f32>;\n"
        "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) {\n"
        "  if (g.x < arrayLength(&y)) { y[g.x] = f32(g.x) * 0.5; } }"
    )
    results = {}
    for checked in (False, True):
        monkeypatch.setattr(rt, "checked", checked)
        before = trusted.MADE["modules"]
        pipe = rt.pipeline(f"half_index_{int(checked)}", source, ("w",))
        assert trusted.MADE["modules"] - before == (0 if checked else 1)
        out = rt.empty((100,), D.float32)
        rt.dispatch(pipe, bytes(16), [out.buffer], (2, 1, 1), "half_index")
        results[checked] = rt.read([out])[0]
    np.testing.assert_array_equal(results[False], np.arange(100, dtype=np.float32) * 0.5)
    np.testing.assert_array_equal(results[True], results[False])
    monkeypatch.setenv("EMBER_WGPU_CHECKS", "1")
    assert settings.checked()
    monkeypatch.setenv("EMBER_WGPU_CHECKS", "maybe")
    with pytest.raises(em.errors.InvalidArgumentError, match="EMBER_WGPU_CHECKS='maybe': expected 1 or 0"):
        settings.checked()

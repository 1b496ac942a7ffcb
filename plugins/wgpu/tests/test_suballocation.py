"""Sub-allocation on wgpu: under ``adaptive`` small blocks are ranges carved out of pages, and a
repeated training step's blocks ranges of one arena (the step plan); a carved block's raw is a
SubBuffer that bindings, copies, uploads and readbacks place at its offset. Results are checked
against numpy float64 and against the same run under ``static`` (whole buffers)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import ember as em
import ember.memory.pool as pool_module
from ember import dtypes as D
from ember_wgpu.kernels import elementwise as ew
from ember_wgpu.subbuffer import SubBuffer


@pytest.fixture
def adaptive(dev: Any) -> Iterator[tuple[Any, Any, Any]]:
    """The device under ``adaptive`` with pages to carve from (a 4 MiB peak seen, the cache empty);
    its strategy as before afterwards."""
    before = dev.memory.strategy
    (pool,) = dev.memory.pools()
    em.Device(str(dev), memory="adaptive")
    _settle(dev)
    peak = em.ones((1 << 20,), dtype="float32", device=dev).realize()  # pages fit in the headroom of a 4 MiB peak
    del peak
    _settle(dev)
    dev.memory.empty_cache()  # nothing in the free lists: small requests below are carved
    yield dev, pool, dev.backend.rt
    _settle(dev)
    em.Device(str(dev), memory=before)


def _settle(dev: Any) -> None:
    gc.collect()
    dev.synchronize()


def _handle(t: em.Tensor) -> Any:
    """The WgpuArray of ``t`` (realized: a deferred tensor's is its lazy node's)."""
    data = t.realize()._data
    return getattr(data, "real", None) or data


def _raw(t: em.Tensor) -> Any:
    return _handle(t).storage.raw


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def test_carved_blocks_bind_copy_upload_and_read_back(adaptive: tuple[Any, Any, Any]) -> None:
    """Uploads, elementwise, matmul, a reduction, a copy of a strided view and readbacks over blocks
    carved from pages give numpy's float64 results."""
    dev, pool, rt = adaptive
    carved, dispatches = pool.carved, rt.dispatches
    rng = np.random.default_rng(1)
    a_np = rng.standard_normal((24, 40)).astype(np.float32)
    b_np = rng.standard_normal((24, 40)).astype(np.float32)
    w_np = rng.standard_normal((40, 12)).astype(np.float32)
    a, b, w = (em.tensor(v, device=dev) for v in (a_np, b_np, w_np))  # uploads into carved ranges
    s = (a * 2.0 + b).realize()
    m = (a @ w).realize()
    r = em.sum(s, axis=0).realize()
    v = a[3:17:2, 5:33].T.reshape((196,)).realize()  # a copy of a strided view of a carved block
    raws = [_raw(t) for t in (a, b, w, s, m, r, v)]
    assert all(type(x) is SubBuffer for x in raws), raws
    assert len({(x.buffer.uid, x.offset) for x in raws}) == len(raws)  # ranges of their own
    assert any(x.offset for x in raws)  # not all at the start of a page
    assert pool.carved - carved >= len(raws)
    assert dev.memory_stats()["pools"]["device"]["pages"] > 0
    assert rt.dispatches - dispatches >= 4  # the kernels ran on the device
    a64, b64 = _f64(a_np), _f64(b_np)
    np.testing.assert_array_equal(a.numpy(), a_np)
    np.testing.assert_allclose(s.numpy(), a64 * 2.0 + b64, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(m.numpy(), a64 @ _f64(w_np), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r.numpy(), (a64 * 2.0 + b64).sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(v.numpy(), a_np[3:17:2, 5:33].T.reshape(196))
    np.testing.assert_array_equal(a[3:17:2, 5:33].numpy(), a_np[3:17:2, 5:33])  # a strided readback
    one = rt.read([_handle(x) for x in (m, v, r)])  # several carved blocks into one staging buffer
    np.testing.assert_allclose(one[0], a64 @ _f64(w_np), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(one[1], a_np[3:17:2, 5:33].T.reshape(196))


def test_a_dispatch_reading_and_writing_one_page_runs_the_read_write_twin(adaptive: tuple[Any, Any, Any]) -> None:
    """WebGPU refuses a buffer bound read-only and read-write in one dispatch: an op whose input and
    output are ranges of one page runs its kernel's twin with every binding read-write."""
    dev, _, rt = adaptive
    x = em.tensor(np.arange(64, dtype=np.float32), device=dev)
    y = em.exp(x * 0.01).realize()
    rx, ry = _raw(x), _raw(y)
    assert type(rx) is SubBuffer and type(ry) is SubBuffer and rx.buffer is ry.buffer
    twins = [p for p in rt._pipelines.values() if p.name.endswith("_rw")]
    assert twins and all("var<storage, read>" not in p.source for p in twins)
    np.testing.assert_allclose(y.numpy(), np.exp(np.arange(64) * 0.01), rtol=1e-6)


def test_an_upload_into_a_range_the_open_batch_uses_submits_it_first(adaptive: tuple[Any, Any, Any]) -> None:
    """queue.write_buffer runs before the batch it lands in: an upload handed a range that a pending
    kernel writes (its block died in the meantime) submits the batch before writing."""
    dev, _, rt = adaptive
    a_np = np.linspace(-1, 1, 256, dtype=np.float32)
    a = em.tensor(a_np, device=dev)
    b = (a * 2.0 + 1.0).realize()  # written by a kernel of the open batch
    c = (b * 3.0).realize()
    busy = _raw(b)
    assert rt._in_batch(busy)
    del b
    submits = rt.submits
    data = np.full(256, 7.0, np.float32)
    d = em.tensor(data, device=dev)  # the free list hands back b's range
    assert _raw(d) is busy and rt.submits == submits + 1
    np.testing.assert_array_equal(d.numpy(), data)
    np.testing.assert_allclose(c.numpy(), (_f64(a_np) * 2.0 + 1.0) * 3.0, rtol=1e-6)


def test_a_page_the_open_batch_uses_goes_after_the_submit(
    adaptive: tuple[Any, Any, Any], sync_points_only: Any
) -> None:
    """A page released while a pending kernel still binds a range of it is destroyed after the
    batch is submitted (before it, the submit would fail validation): released from outside an
    acquire (here empty_cache()) it waits for the next submit, counted in reserved."""
    dev, pool, rt = adaptive
    xs = [rt.upload(np.full(32, float(i), np.float32), D.float32) for i in range(8)]
    ys = [ew.apply_op(rt, "exp", [x]) for x in xs]  # recorded into the open batch, not submitted
    pages = {x.storage.raw.buffer for x in xs + ys}
    assert rt._count and all(rt._holds(page) for page in pages)
    del xs, ys
    gc.collect()
    reserved, submits = pool.reserved, rt.submits
    dev.memory.empty_cache()  # the pages, empty now, go back to the driver
    assert {raw.uid for raw in pool.deferred} >= {page.uid for page in pages}
    assert pool.reserved == reserved and rt.submits == submits  # held and counted until the submit
    dev.synchronize()  # the submit validates (a destroyed buffer in it would raise WgpuValidationError)
    assert not pool.deferred and pool.reserved < reserved
    assert not any(page.uid in rt._subs for page in pages)  # their views went with them


def test_making_room_releases_a_page_the_open_batch_uses_after_submitting_it(
    adaptive: tuple[Any, Any, Any], sync_points_only: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside an acquire (adaptive making room) a page the open batch uses is released at once,
    the batch submitted first: kept to a later submit, it would stay held beside the new buffer."""
    dev, pool, rt = adaptive
    xs = [rt.upload(np.full(32, float(i), np.float32), D.float32) for i in range(8)]
    ys = [ew.apply_op(rt, "exp", [x]) for x in xs]  # recorded into the open batch, not submitted
    pages = {x.storage.raw.buffer for x in xs + ys}
    del xs, ys
    gc.collect()
    monkeypatch.setattr(pool, "_make_room", lambda excess, size: pool._empty_free())  # cached blocks, then empty pages
    assert pool.cached  # _miss makes room only when something is cached: the blocks just freed
    monkeypatch.setattr(pool_module, "HEADROOM", -0.5)  # ... and past the headroom over the peak in use
    submits, frees = rt.submits, pool.frees
    big = rt.alloc(2 << 20)  # a large request: _miss -> _make_room -> the empty pages go
    assert rt.submits == submits + 1 and not rt._count  # the batch went first, validated
    assert pool.frees - frees >= len(pages) and not pool.deferred
    del big
    dev.synchronize()


def _step_losses(dev: Any, steps: int) -> tuple[list[float], list[int]]:
    """A transformer-style block (layer norm, projections, gelu) forward and backward, ``steps``
    times over fixed inputs: the loss and the driver allocations of each step."""
    ad = dev.autodiff()
    rng = np.random.default_rng(0)
    b, s, d, ff = 2, 32, 64, 256
    x = em.tensor(rng.standard_normal((b, s, d)).astype(np.float32), device=ad)
    shapes = {"ln_w": (d,), "ln_b": (d,), "w1": (d, ff), "b1": (ff,), "w2": (ff, d), "b2": (d,)}
    p = {k: em.tensor((rng.standard_normal(v) * 0.1).astype(np.float32), device=ad) for k, v in shapes.items()}
    for t in p.values():
        t.requires_grad_()
    losses, allocations = [], []
    for _ in range(steps):
        for t in p.values():
            t.grad = None
        h = em.layer_norm(x, d, p["ln_w"], p["ln_b"])
        out = x + em.gelu(h @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
        loss = (out * out).mean()
        loss.backward()
        losses.append(loss.item())
        before = dev.memory_stats()["allocations"]
        allocations.append(before)
        del h, out, loss
    allocations.append(dev.memory_stats()["allocations"])
    return losses, list(np.diff(allocations))


def test_a_repeated_training_step_reaches_the_step_plan(dev: Any) -> None:
    """Once steps repeat, adaptive serves them from one arena buffer (no driver calls), with the
    losses of a run under static."""
    before = dev.memory.strategy
    (pool,) = dev.memory.pools()
    try:
        em.Device(str(dev), memory="static")
        _settle(dev)
        static, _ = _step_losses(dev, 8)
        em.Device(str(dev), memory="adaptive")
        _settle(dev)
        planned = pool.planned
        losses, allocations = _step_losses(dev, 8)
        assert pool.planned - planned > 0
        assert allocations[-3:] == [0, 0, 0], allocations
        np.testing.assert_allclose(losses, static, rtol=1e-6)
    finally:
        _settle(dev)
        em.Device(str(dev), memory=before)


def test_a_copy_between_two_ranges_of_one_page_goes_through_a_bounce_buffer(adaptive: tuple[Any, Any, Any]) -> None:
    """WebGPU refuses a buffer-to-buffer copy within one buffer (an em.jit replay copies its inputs
    into fixed buffers, which may be ranges of the same page): the recorder bounces it."""
    dev, _, rt = adaptive
    data = np.arange(100, dtype=np.float32)
    x = em.tensor(data, device=dev)
    y = em.tensor(np.zeros(100, np.float32), device=dev)
    rx, ry = _raw(x), _raw(y)
    assert rx.buffer is ry.buffer and rx.offset != ry.offset
    rt.flush()
    rt.recorder.submit(rt.recorder.copies([(rx, 0, ry, 0, 400)]))
    np.testing.assert_array_equal(y.numpy(), data)
    assert rt.recorder._bounce is not None

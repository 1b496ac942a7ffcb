"""Host writes that do not wait for the queue. Constants (``full``: autodiff's seed, a layer norm's
default affine parameters) are written by the queue (clEnqueueFillBuffer); uploads keep pyopencl's
transfer event (whose destructor waits until the copy has run, behind every queued kernel) until it is
seen complete, copying the caller's array first. Before, every upload and constant held the host until
the queue drained (W4's step made five). The values against numpy, every storage width; the order
behind launches still waiting for their programs; em.jit's recording keeps its held uploads; uploads
written from pinned slots (GPUs: ember_opencl.staging) hold the caller's values."""

from __future__ import annotations

import numpy as np
import pytest
from ocl_helpers import Gate

import ember as em
from ember.dtypes import as_dtype
from ember_opencl import runtime
from ember_opencl.cache import ProgramCache
from ember_opencl.elementwise import run_program, unary_program


@pytest.fixture
def counted(monkeypatch):
    """Counts of the runtime's host copies and fills from here on."""
    calls = {"copy_in": 0, "fill": 0}
    cls = runtime.Runtime
    copy_in, fill = cls._copy_in, cls._fill

    def counting_copy(self, *a):  # noqa: ANN001, ANN002, ANN202
        calls["copy_in"] += 1
        return copy_in(self, *a)

    def counting_fill(self, *a):  # noqa: ANN001, ANN002, ANN202
        calls["fill"] += 1
        return fill(self, *a)

    monkeypatch.setattr(cls, "_copy_in", counting_copy)
    monkeypatch.setattr(cls, "_fill", counting_fill)
    return calls


@pytest.mark.parametrize(
    ("dtype", "value"),
    [("float32", -2.5), ("int32", 7), ("bool", True), ("bfloat16", 3.25), ("complex64", 1.5 - 2j), ("int8", -3)],
)
def test_full_is_filled_by_the_queue_with_the_exact_value(dev, counted, dtype, value):
    t = em.full((3, 5), value, dtype=dtype, device=dev)
    got = t.numpy()
    want = np.full((3, 5), value, dtype=as_dtype(dtype).numpy)
    assert got.dtype == want.dtype and (got == want).all(), (got, want)
    assert counted == {"copy_in": 0, "fill": 1}


def test_float64_constants_where_the_device_has_doubles(dev, counted):
    if not dev.backend.rt.fp64:
        pytest.skip(f"{dev} has no float64 (cl_khr_fp64)")
    got = em.full((4,), 1 / 3, dtype="float64", device=dev).numpy()
    assert (got == np.full(4, 1 / 3)).all() and counted["fill"] == 1


def test_autodiffs_seed_and_a_layer_norm_without_affine_parameters_upload_nothing(dev, counted):
    rng = np.random.default_rng(3)
    x_np, g_np = (rng.standard_normal((4, 6)).astype(np.float32) for _ in range(2))
    ad = dev.autodiff()
    x = em.tensor(x_np, device=ad).requires_grad_()
    g = em.tensor(g_np, device=ad)
    counted["copy_in"] = 0
    (em.layer_norm(x, 6) * g).sum().backward()
    assert counted["copy_in"] == 0 and counted["fill"] >= 3, counted  # ones, zeros and the seed
    xd, gd = x_np.astype(np.float64), g_np.astype(np.float64)
    sigma = np.sqrt(xd.var(-1, keepdims=True) + 1e-5)
    xhat = (xd - xd.mean(-1, keepdims=True)) / sigma
    want = (gd - gd.mean(-1, keepdims=True) - xhat * (gd * xhat).mean(-1, keepdims=True)) / sigma
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-4, atol=1e-5)


def test_a_fill_waits_in_order_behind_launches_waiting_for_their_programs(dev, tmp_path):
    rt = runtime.Runtime(dev.index)
    rt.programs = ProgramCache(rt.context, rt.device, rt.label, directory=tmp_path)
    rt._builder = Gate()
    try:
        a = rt.upload(np.arange(6, dtype=np.float32), as_dtype("float32"))
        e = run_program(rt, unary_program("exp", "float32", "float32"), [a], a.shape)[0]
        assert rt._deferred, "the launch did not wait for its program"
        c = rt.constant(4.0, as_dtype("float32"))  # queued behind the waiting launch
        assert rt._deferred[-1].func == rt._fill
        rt._builder.release()
        np.testing.assert_allclose(rt.download(e), np.exp(np.arange(6.0)), rtol=2e-6)
        assert rt.download(c).tolist() == [4.0]
    finally:
        rt._builder.release()
        rt._builder.shutdown()


def test_recording_an_em_jit_step_keeps_its_constants_as_held_uploads(dev, counted):
    w = em.tensor(np.ones((3,), np.float32), device=dev)

    @em.jit
    def step(x):
        return (x * w + em.full((3,), 2.0, device=dev)).sum()

    xs = [np.arange(3, dtype=np.float32) + k for k in range(3)]
    got = [float(step(em.tensor(x, device=dev)).numpy()) for x in xs]
    assert got == [float((x + 2.0).sum()) for x in xs]


def test_an_upload_waits_for_nothing_and_the_callers_array_is_free_at_once(dev, monkeypatch):
    rt = dev.backend.rt
    rt.finish()
    monkeypatch.setattr(rt, "_pinned", False)  # the plain path (a GPU's uploads take pinned slots)
    monkeypatch.setattr(rt, "staging", None)
    host = np.arange(12, dtype=np.float32)
    a = rt.upload(host, as_dtype("float32"))
    assert len(rt._in_flight) == 1, "the transfer's event is kept (dropping it would wait for the queue)"
    host[:] = -1  # the caller may change its array at once: the upload copied it
    assert rt.download(a).tolist() == list(range(12))
    assert rt._in_flight == [], "a read-back has waited for every transfer before it"


def test_finished_uploads_are_let_go_and_a_large_one_waits_for_its_transfer(dev, monkeypatch):
    rt = dev.backend.rt
    rt.finish()
    monkeypatch.setattr(rt, "_pinned", False)
    monkeypatch.setattr(rt, "staging", None)
    monkeypatch.setattr(runtime, "IN_FLIGHT_CHECK", 4)
    arrays = [rt.upload(np.full(5, k, np.float32), as_dtype("float32")) for k in range(3)]
    rt._queue.finish()  # all three have run
    arrays.append(rt.upload(np.full(5, 3, np.float32), as_dtype("float32")))  # the fourth: finished ones go
    assert len(rt._in_flight) <= 1
    monkeypatch.setattr(runtime, "IN_FLIGHT_CHECK", 100)
    monkeypatch.setattr(runtime, "IN_FLIGHT_BYTES", 30)  # or by the host bytes they hold: 20 + 20 > 30
    rt._queue.finish()
    arrays.append(rt.upload(np.full(5, 4, np.float32), as_dtype("float32")))
    assert len(rt._in_flight) <= 1 and rt._in_flight_bytes == 20 * len(rt._in_flight)
    monkeypatch.setattr(runtime, "UPLOAD_COPY_BYTES", 16)
    before = len(rt._in_flight)
    arrays.append(rt.upload(np.full(5, 5, np.float32), as_dtype("float32")))  # 20 bytes: a blocking transfer
    assert len(rt._in_flight) == before
    assert [rt.download(a).tolist() for a in arrays] == [[float(k)] * 5 for k in range(6)]
    assert rt._in_flight == [] and rt._in_flight_bytes == 0


@pytest.fixture
def pinned(dev, monkeypatch):
    """The session runtime's uploads through a ring of two 64-byte pinned slots (GPUs take slots by
    default; the CPU device here is made to), restored afterwards."""
    from ember_opencl.staging import Staging

    rt = dev.backend.rt
    rt.finish()
    ring = Staging(rt.context, rt._queue, slot_bytes=64, slots=2)
    monkeypatch.setattr(rt, "staging", ring)
    monkeypatch.setattr(rt, "_pinned", True)
    return ring


@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "uint8", "bool"])
def test_uploads_written_from_pinned_slots_hold_the_callers_values(dev, pinned, dtype):
    rt = dev.backend.rt
    dt = as_dtype(dtype)
    if dt not in dev.capabilities.dtypes:
        pytest.skip(f"{dev} has no {dtype}")
    rng = np.random.default_rng(0)
    hosts = [(rng.standard_normal(n) * 50).astype(dt.numpy) for n in (1, 7, 8, 30)]
    before = pinned.writes
    handles = [rt.upload(h, dt) for h in hosts]
    fitting = sum(h.nbytes <= 64 for h in hosts)
    assert pinned.writes - before == fitting  # a larger one took the plain path
    assert len(rt._in_flight) == len(hosts) - fitting  # (a slot keeps its own write's event)
    for h in hosts:
        h[...] = 0  # the caller may change its arrays at once: the slots hold copies
    rng = np.random.default_rng(0)  # the same values drawn again
    for a, n in zip(handles, (1, 7, 8, 30)):
        want = (rng.standard_normal(n) * 50).astype(dt.numpy)
        np.testing.assert_array_equal(rt.download(a).view(dt.numpy), want)


def test_the_ring_wraps_and_every_write_arrives(dev, pinned):
    """Five uploads through two slots: each slot is written again once its previous write has run
    (waited for where it has not), and every upload holds its own values."""
    rt = dev.backend.rt
    before = pinned.writes
    handles = [rt.upload(np.full(4, k, np.float32), as_dtype("float32")) for k in range(5)]
    assert pinned.writes - before == 5
    assert [rt.download(a).tolist() for a in handles] == [[float(k)] * 4 for k in range(5)]
    rt.finish()
    assert all(e is None for e in pinned._events)  # a finish let every write's event go


def test_pinned_uploads_are_on_for_gpus_and_switched_by_the_environment(monkeypatch):
    from ember_opencl.staging import enabled

    monkeypatch.delenv("EMBER_OPENCL_PINNED", raising=False)
    assert enabled(is_cpu=False) and not enabled(is_cpu=True)
    monkeypatch.setenv("EMBER_OPENCL_PINNED", "0")
    assert not enabled(is_cpu=False)
    monkeypatch.setenv("EMBER_OPENCL_PINNED", "1")
    assert enabled(is_cpu=True)

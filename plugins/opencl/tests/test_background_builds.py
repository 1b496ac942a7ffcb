"""Programs built on the runtime's thread pool while the host goes on queuing (runtime._Pending):
the same results as building before the launch, in queue order, each program built once, and a
program that fails to build raising its clear error where its kernel is first needed."""

from __future__ import annotations

import numpy as np
import pytest
from ocl_helpers import Gate

from ember.dtypes import as_dtype
from ember_opencl import runtime, settings
from ember_opencl.cache import ProgramCache
from ember_opencl.elementwise import binary_program, run_program, unary_program
from ember_opencl.errors import KernelBuildError

F32 = as_dtype("float32")
RNG = np.random.default_rng(12)
X = RNG.uniform(0.5, 2.0, (5, 7)).astype(np.float32)
Y = RNG.uniform(0.5, 2.0, (5, 7)).astype(np.float32)
TWICE = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }"
BROKEN = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= undeclared; }"


@pytest.fixture
def rt(dev, tmp_path):
    """A runtime of its own with an empty program cache in ``tmp_path`` and a gated build pool."""
    fresh = runtime.Runtime(dev.index)
    fresh.programs = ProgramCache(fresh.context, fresh.device, fresh.label, directory=tmp_path)
    fresh._builder = Gate()
    yield fresh
    fresh._builder.release()
    fresh._builder.shutdown()


def _unary(rt, op, a):
    return run_program(rt, unary_program(op, "float32", "float32"), [a], a.shape)[0]


def _binary(rt, op, a, b):
    return run_program(rt, binary_program(op, "float32", "float32", False), [a, b], a.shape)[0]


def test_launches_wait_in_order_for_their_programs(rt):
    a = rt.upload(X, F32)
    e = _unary(rt, "exp", a)  # its program is building: the launch waits on the host
    assert rt._deferred, "the launch did not wait for its program"
    b = rt.upload(Y, F32)  # an upload after it waits behind it (its buffer may be one a kernel reads)
    s = _binary(rt, "add", e, b)
    out = _unary(rt, "sqrt", s)
    assert rt.programs.stats["builds"] == 3  # counted when asked for, though none has run yet
    rt._builder.release()
    np.testing.assert_allclose(rt.download(out), np.sqrt(np.exp(X.astype(np.float64)) + Y), rtol=2e-6)
    assert not rt._deferred
    assert all(type(k) is not runtime._Pending for k, _ in rt._kernels.values())  # all resolved, real kernels
    assert rt.programs.stats["builds"] == 3


def test_background_and_foreground_builds_give_the_same_kernels(rt, dev, tmp_path, monkeypatch):
    rt._builder.release()
    monkeypatch.setattr(runtime, "BUILD_THREADS", 0)
    serial = runtime.Runtime(dev.index)
    serial.programs = ProgramCache(serial.context, serial.device, serial.label, directory=tmp_path / "serial")
    assert serial._builder is None
    results = []
    for r in (rt, serial):
        a, b = r.upload(X, F32), r.upload(Y, F32)
        results.append(r.download(_binary(r, "mul", _unary(r, "log", a), b)))
        assert {k[0] for k in r._kernels} == {"ew"} and len(r._kernels) == 2
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_allclose(results[0], np.log(X.astype(np.float64)) * Y, rtol=2e-6)
    assert rt.programs.stats["builds"] == serial.programs.stats["builds"] == 2


def test_a_program_is_built_once_however_often_it_is_asked_for(rt):
    futures = [rt.programs.request(TWICE, rt.options, rt._builder) for _ in range(3)]
    knl, _ = rt.kernel("twice", lambda: (TWICE, "twice", [None]))
    again, _ = rt.kernel("twice", lambda: pytest.fail("make() ran twice for one key"))
    assert again is knl
    assert rt.programs.stats["builds"] == 1 and rt._builder.submitted == 1
    a = rt.upload(X.ravel(), F32)
    rt.launch(knl, (a.size,), None, [a.buf])
    rt.launch(again, (a.size,), None, [a.buf])
    rt._builder.release()
    np.testing.assert_array_equal(rt.download(a), 4 * X.ravel())  # both launches ran, once each
    assert len({f.result() for f in futures}) == 1
    assert rt.programs.stats["builds"] == 1 and rt.programs.stats["memory_hits"] == 3


def test_a_failed_background_build_raises_its_error_where_the_kernel_is_needed(rt):
    knl, _ = rt.kernel("broken", lambda: (BROKEN, "twice", [None]))  # no error yet: it builds meanwhile
    assert type(knl) is runtime._Pending
    a = rt.upload(X.ravel(), F32)
    rt.launch(knl, (a.size,), None, [a.buf])
    rt._builder.release()
    with pytest.raises(KernelBuildError, match="failed to build") as first:
        rt.download(a)
    assert "undeclared" in str(first.value)  # the build log's excerpt
    assert not rt._deferred  # what waited behind it is dropped, not run later
    with pytest.raises(KernelBuildError) as second:  # asked for again: the same error, not a second build
        rt.kernel("broken", lambda: (BROKEN, "twice", [None]))
    assert str(second.value) == str(first.value)
    assert rt.programs.stats["builds"] == 1
    np.testing.assert_array_equal(rt.download(a), X.ravel())  # the queue works on


def test_without_threads_a_failed_build_raises_at_once(dev, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "BUILD_THREADS", 0)
    serial = runtime.Runtime(dev.index)
    serial.programs = ProgramCache(serial.context, serial.device, serial.label, directory=tmp_path)
    with pytest.raises(KernelBuildError, match="failed to build"):
        serial.kernel("broken", lambda: (BROKEN, "twice", [None]))


def test_build_threads_setting(monkeypatch):
    monkeypatch.setenv("EMBER_OPENCL_BUILD_THREADS", "3")
    assert settings.build_threads() == 3
    monkeypatch.setenv("EMBER_OPENCL_BUILD_THREADS", "many")
    with pytest.raises(ValueError, match="EMBER_OPENCL_BUILD_THREADS='many': expected threads"):
        settings.build_threads()


def test_a_buffer_freed_behind_waiting_launches_is_released_after_them(rt):
    a = rt.upload(X, F32)
    out = _unary(rt, "exp", a)  # waits for its program
    spare = rt._allocate(256)
    rt._release(spare)  # (what the pool does when it makes room)
    assert rt._deferred[-1].__self__ is spare  # its release is queued behind the launch, not run before it
    rt._builder.release()
    np.testing.assert_allclose(rt.download(out), np.exp(X.astype(np.float64)), rtol=2e-6)
    assert not rt._deferred

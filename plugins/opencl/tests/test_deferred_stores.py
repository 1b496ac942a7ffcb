"""On a CPU device a program built here is stored on disk later, not at its build (PoCL compiles a
program again to give its binary back: 1.6-2.9 s of W2's cold first result): at the first read-back
that finds nothing built since the previous one, when many wait, or at exit; the next process
then loads what was stored."""

from __future__ import annotations

import numpy as np
import pytest

from ember.dtypes import as_dtype
from ember_opencl import runtime
from ember_opencl.cache import ProgramCache
from ember_opencl.elementwise import run_program, unary_program

F32 = as_dtype("float32")
X = np.linspace(0.5, 2.0, 23, dtype=np.float32)
ONE = "__kernel void one(__global float* x) { x[0] = 1.0f; }"


def _stored(cache: ProgramCache) -> int:
    return sum(p.suffix == ".bin" for p in cache.disk.directory.iterdir()) if cache.disk.directory.exists() else 0


@pytest.fixture
def rt(dev, tmp_path):
    """A runtime of its own whose program cache (empty, in ``tmp_path``) defers its stores."""
    fresh = runtime.Runtime(dev.index)
    fresh.programs = ProgramCache(fresh.context, fresh.device, fresh.label, directory=tmp_path)
    fresh.programs.defer_stores = True
    return fresh


def _exp(rt: runtime.Runtime, op: str = "exp") -> np.ndarray:
    x = rt.upload(X, F32)
    return rt.download(run_program(rt, unary_program(op, "float32", "float32"), [x], x.shape)[0])


def test_stored_once_a_read_back_finds_nothing_new(rt, tmp_path):
    np.testing.assert_allclose(_exp(rt), np.exp(X.astype(np.float64)), rtol=2e-6)  # a first step
    assert rt.programs.unstored == 1 and _stored(rt.programs) == 0
    assert rt.programs.info()["binary_s"] == 0.0  # no binary read back before the first result
    _exp(rt, "log")  # a step that built another program: still nothing stored
    assert rt.programs.unstored == 2 and _stored(rt.programs) == 0
    _exp(rt)  # a step that built nothing: both stored
    assert rt.programs.unstored == 0 and _stored(rt.programs) == 2
    fresh = ProgramCache(rt.context, rt.device, rt.label, directory=tmp_path)  # (as the next process's)
    for source, options in list(rt.programs._programs):
        fresh.program(source, options)
    assert fresh.stats["disk_loads"] == 2 and fresh.stats["builds"] == 0


def test_many_waiting_are_stored_at_the_next_read_back(rt, monkeypatch):
    monkeypatch.setattr(runtime, "STORE_AFTER", 2)
    _exp(rt)
    assert rt.programs.unstored == 1
    _exp(rt, "log")  # a new program at each read-back, but two wait now
    assert rt.programs.unstored == 0 and _stored(rt.programs) == 2


def test_a_cache_that_does_not_defer_stores_at_once(dev, tmp_path):
    cache = ProgramCache(dev.backend.rt.context, dev.backend.rt.device, "t", directory=tmp_path)
    cache.program(ONE, "")
    assert cache.unstored == 0 and _stored(cache) == 1 and cache.seconds["binary_s"] > 0
    assert cache.store_deferred() == 0


def test_a_cpu_runtime_defers(dev):
    """(What is left at exit is stored then: test_cache_random_errors' second process loads the
    programs of a first one that read one result back and exited.)"""
    assert runtime.Runtime(dev.index).programs.defer_stores == bool(dev.backend.rt.is_cpu)


def test_no_binary_is_read_back_with_the_disk_cache_off(dev, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", "0")
    rt = dev.backend.rt
    for defer in (False, True):
        cache = ProgramCache(rt.context, rt.device, "t", directory=tmp_path)
        cache.defer_stores = defer
        cache.program(ONE, "")
        cache.store_deferred()
        assert cache.seconds["binary_s"] == 0.0 and _stored(cache) == 0

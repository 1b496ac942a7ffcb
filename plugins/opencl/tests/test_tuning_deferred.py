"""A GPU's first-use GEMM tuning waits for the runtime's first read-back: the GEMMs of a new
process's first step run the untuned choice (the tuner's candidate builds took 28 of the 32 s of
W2's cold first step on an H100), and the first large GEMM after it is tuned as before."""

from __future__ import annotations

import numpy as np
import pytest

from ember.dtypes import as_dtype
from ember_opencl import matmul as mm
from ember_opencl import runtime, tune
from ember_opencl.gemm_source import Tiling

WINNER = Tiling(32, 32, 8, 2, 4, vw=2, chunk=1, db=True)


@pytest.fixture
def rt(dev, tmp_path, monkeypatch):
    """A GPU-like runtime of its own, tuning allowed, its choices stored in ``tmp_path``, and the
    tuner's timing loop replaced by one that records what it was asked to tune."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("EMBER_AUTOTUNE", "1")
    fresh = runtime.Runtime(dev.index)
    fresh.is_cpu = False  # a CPU device is never tuned
    asked = []

    def fake_tune(rt, dt, M, N, K, **kwargs):
        asked.append((dt, M, N, K))
        tune.record(rt, dt, tune.shape_class(M, N, K), WINNER)
        return WINNER, []

    monkeypatch.setattr(tune._TUNER, "tune", fake_tune)
    fresh.asked = asked
    return fresh


def test_no_tuning_before_the_first_read_back(rt):
    big = (1024, 1024, 1024)  # M N K = 2**30: tuned on first use on a GPU
    assert rt.read_backs == 0
    assert tune.lookup(rt, "float32", *big) is None and not rt.asked
    assert mm.choose(rt, "float32", *big) == mm._pick(rt, 1024, 1024)  # the untuned choice runs
    assert not rt.asked
    rt.download(rt.upload(np.arange(3, dtype=np.float32), as_dtype("float32")))  # a first result
    assert rt.read_backs == 1
    assert mm.choose(rt, "float32", *big) == WINNER  # now the first large GEMM is tuned...
    assert rt.asked == [("float32", *big)]
    assert tune.lookup(rt, "float32", *big) == WINNER and len(rt.asked) == 1  # ...once
    assert tune.lookup(rt, "float32", 64, 64, 64) is None and len(rt.asked) == 1  # small GEMMs never


def test_a_stored_choice_is_used_before_the_first_read_back(rt):
    tune.record(rt, "float32", tune.shape_class(2048, 2048, 2048), WINNER)
    tune.forget(rt)  # read from the store, as a new process would
    assert rt.read_backs == 0
    assert mm.choose(rt, "float32", 2048, 2048, 2048) == WINNER and not rt.asked

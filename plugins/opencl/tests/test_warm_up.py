"""The compiler's warm-up build (runtime.Runtime._warm_up): started on a thread of its own on a GPU
whose programs are not in ember's disk cache yet, and nowhere else; the runtime works on meanwhile."""

from __future__ import annotations

import numpy as np

from ember.dtypes import as_dtype
from ember_opencl import runtime
from ember_opencl.cache import ProgramCache
from ember_opencl.elementwise import run_program, unary_program

F32 = as_dtype("float32")


def _runtime(dev, directory):
    fresh = runtime.Runtime(dev.index)
    fresh.programs = ProgramCache(fresh.context, fresh.device, fresh.label, directory=directory)
    return fresh


def test_a_gpu_with_no_stored_program_warms_its_compiler_up(dev, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "WARM_UP", True)
    rt = _runtime(dev, tmp_path)
    rt.is_cpu = False
    thread = rt._warm_up()
    assert thread is not None and thread.name == "ember-opencl-warm-up"
    x = np.linspace(-2, 2, 37, dtype=np.float32)  # the host goes on meanwhile, builds included
    out = run_program(rt, unary_program("exp", "float32", "float32"), [rt.upload(x, F32)], x.shape)[0]
    np.testing.assert_allclose(rt.download(out), np.exp(x.astype(np.float64)), rtol=2e-6)
    thread.join(120)
    assert not thread.is_alive() and rt.waits["warm_up_s"] > 0
    assert rt.programs.stats["builds"] == 1  # the warm-up is no program of the cache's


def test_no_warm_up_where_programs_are_stored_on_a_cpu_or_when_off(dev, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "WARM_UP", True)
    rt = _runtime(dev, tmp_path)
    rt.is_cpu = False
    rt.programs.program("__kernel void one(__global float* x) { x[0] = 1.0f; }", rt.options)  # stored on disk
    assert any(p.suffix == ".bin" for p in rt.programs.disk.directory.iterdir())
    assert rt._warm_up() is None  # a warm process: it loads binaries
    cpu = _runtime(dev, tmp_path / "empty")
    cpu.is_cpu = True
    assert cpu._warm_up() is None
    monkeypatch.setattr(runtime, "WARM_UP", False)
    cpu.is_cpu = False
    assert cpu._warm_up() is None
    if dev.backend.rt.is_cpu:  # this device's own runtime (PoCL here) started none
        assert dev.backend.rt.waits["warm_up_s"] == 0.0

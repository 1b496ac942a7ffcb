"""The compiler's warm-up (runtime.Runtime._warm_up): started on a thread of its own on a GPU whose
programs are not in ember's disk cache yet, and nowhere else; it builds the generic float32 GEMMs
(runtime.HEAD_START) that a step then finds built; the runtime works on meanwhile."""

from __future__ import annotations

import numpy as np

from ember.dtypes import as_dtype
from ember_opencl import matmul as matmul_module
from ember_opencl import runtime
from ember_opencl.cache import ProgramCache
from ember_opencl.elementwise import run_program, unary_program
from ember_opencl.matmul import matmul

F32 = as_dtype("float32")


def _runtime(dev, directory):
    fresh = runtime.Runtime(dev.index)
    fresh.programs = ProgramCache(fresh.context, fresh.device, fresh.label, directory=directory)
    return fresh


def test_a_gpu_with_no_stored_program_warms_its_compiler_up(dev, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "WARM_UP", True)
    monkeypatch.setattr(runtime, "HEAD_START", True)  # (off by default: measured slower on an H100)
    monkeypatch.setattr(matmul_module, "GENERIC_AFTER_FIRST_RESULT", True)  # the exp's read-back comes first
    rt = _runtime(dev, tmp_path)
    rt.is_cpu = False
    thread = rt._warm_up()
    assert thread is not None and thread.name == "ember-opencl-warm-up"
    x = np.linspace(-2, 2, 37, dtype=np.float32)  # the host goes on meanwhile, builds included
    out = run_program(rt, unary_program("exp", "float32", "float32"), [rt.upload(x, F32)], x.shape)[0]
    np.testing.assert_allclose(rt.download(out), np.exp(x.astype(np.float64)), rtol=2e-6)
    thread.join(300)
    assert not thread.is_alive() and rt.waits["warm_up_s"] > 0
    # the warm-up built the generic float32 GEMMs (large and small tilings) through the cache...
    assert rt.programs.stats["builds"] == 3
    a, b = np.linspace(-1, 1, 130 * 24, dtype=np.float32).reshape(130, 24), np.ones((24, 132), np.float32)
    got = rt.download(matmul(rt, rt.upload(a, F32), rt.upload(b, F32)))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    assert rt.programs.stats["builds"] == 3  # ...so a GEMM a step asks for is built already


def test_without_head_start_the_warm_up_is_no_program_of_the_caches(dev, tmp_path, monkeypatch):
    monkeypatch.setattr(runtime, "WARM_UP", True)
    monkeypatch.setattr(runtime, "HEAD_START", False)
    rt = _runtime(dev, tmp_path)
    rt.is_cpu = False
    thread = rt._warm_up()
    thread.join(120)
    assert not thread.is_alive() and rt.waits["warm_up_s"] > 0
    assert rt.programs.stats["builds"] == 0


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

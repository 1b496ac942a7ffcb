"""Programs compiled in worker processes (EMBER_OPENCL_BUILD_PROCESSES, ember_opencl.build_worker):
the same results as building here, the binary stored for the next process, a source that does not
compile raising its KernelBuildError with the log, and a worker that dies leaving the build to this
process."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ember.dtypes import as_dtype
from ember.errors import InvalidArgumentError
from ember_opencl import runtime, settings
from ember_opencl.build_worker import BuildProcesses
from ember_opencl.cache import ProgramCache
from ember_opencl.elementwise import binary_program, run_program, unary_program
from ember_opencl.errors import KernelBuildError

F32 = as_dtype("float32")
RNG = np.random.default_rng(31)
X = RNG.uniform(0.5, 2.0, (4, 9)).astype(np.float32)
Y = RNG.uniform(0.5, 2.0, (4, 9)).astype(np.float32)
ONE = "__kernel void one(__global float* x) { x[0] = 1.0f; }"
BROKEN = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= undeclared; }"


@pytest.fixture
def rt(dev, tmp_path, monkeypatch):
    """A runtime of its own with two build workers and an empty program cache in ``tmp_path``."""
    monkeypatch.setattr(runtime, "BUILD_PROCESSES", 2)
    monkeypatch.setattr(runtime, "BUILD_THREADS", 0)
    fresh = runtime.Runtime(dev.index)
    workers = fresh.programs.processes
    assert isinstance(workers, BuildProcesses) and workers.count == 2
    assert fresh._builder is not None and fresh._builder._max_workers == 2  # two builds under way at once
    fresh.programs = ProgramCache(fresh.context, fresh.device, fresh.label, directory=tmp_path)
    fresh.programs.processes = workers
    yield fresh
    fresh._builder.shutdown()
    workers.close()


def test_programs_built_by_workers_give_the_same_results(rt, tmp_path):
    a, b = rt.upload(X, F32), rt.upload(Y, F32)
    e = run_program(rt, unary_program("log", "float32", "float32"), [a], a.shape)[0]
    out = run_program(rt, binary_program("mul", "float32", "float32", False), [e, b], a.shape)[0]
    np.testing.assert_allclose(rt.download(out), np.log(X.astype(np.float64)) * Y, rtol=2e-6)
    info = rt.programs.info()
    assert info["builds"] == 2 and info["process_builds"] == 2 and info["process_failures"] == 0
    assert info["binary_s"] == 0.0  # no binary read back here: the worker's came with the build
    assert info["disk"]["writes"] == 2  # stored for the next process
    rt.programs.program(ONE, rt.options)
    again = ProgramCache(rt.context, rt.device, rt.label, directory=tmp_path)  # (as the next process's)
    again.program(ONE, rt.options)
    assert again.stats["disk_loads"] == 1 and again.stats["builds"] == 0


def test_a_source_that_does_not_compile_raises_its_log(rt):
    with pytest.raises(KernelBuildError, match="failed to build") as err:
        rt.programs.program(BROKEN, rt.options)
    assert "undeclared" in str(err.value)  # the worker's build log
    assert rt.programs.processes.stats["process_failures"] == 0  # the worker is fine and kept


def test_a_dead_worker_leaves_the_build_to_this_process(rt):
    workers = rt.programs.processes
    workers.start()
    for worker in list(workers._workers):
        worker.proc.kill()
        worker.proc.wait()
    assert rt.programs.program(ONE, rt.options) is not None and rt.programs.stats["builds"] == 1
    a = rt.upload(X, F32)
    out = run_program(rt, unary_program("sqrt", "float32", "float32"), [a], a.shape)[0]
    np.testing.assert_allclose(rt.download(out), np.sqrt(X.astype(np.float64)), rtol=2e-6)
    assert workers.stats["process_builds"] == 0 and workers.stats["process_failures"] == 2
    assert not workers._workers  # a dead worker is not used again
    out = run_program(rt, unary_program("exp", "float32", "float32"), [a], a.shape)[0]  # none left: here
    np.testing.assert_allclose(rt.download(out), np.exp(X.astype(np.float64)), rtol=2e-6)


@pytest.mark.parametrize("value", ["two", "-2"])
def test_a_bad_setting_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("EMBER_OPENCL_BUILD_PROCESSES", value)
    expected = r"EMBER_OPENCL_BUILD_PROCESSES=.*: expected worker processes \(a whole number >= 0\)"
    with pytest.raises(InvalidArgumentError, match=expected):
        settings.build_processes()
    monkeypatch.setenv("EMBER_OPENCL_BUILD_PROCESSES", " 3 ")
    assert settings.build_processes() == 3
    monkeypatch.setenv("EMBER_OPENCL_BUILD_PROCESSES", "")
    assert settings.build_processes() is None  # unset: the runtime chooses


def test_a_cold_gpu_runtime_hands_the_head_start_programs_to_its_workers(rt, monkeypatch):
    """With build processes the warm-up builds nothing here: the generic GEMMs go to the workers
    at once (runtime.HEAD_START), and a matmul then finds its program built by them."""
    from ember_opencl.matmul import head_start_sources, matmul

    monkeypatch.setattr(runtime, "WARM_UP", True)
    monkeypatch.setattr(runtime, "HEAD_START", True)
    rt.is_cpu, rt.compute_units = False, 4
    assert rt._warm_up() is None  # no warm-up thread of its own
    sources = head_start_sources(rt)
    assert sources and all(rt.programs.holds(s, rt.options) for s in sources)
    a, b = RNG.standard_normal((130, 24)).astype(np.float32), RNG.standard_normal((24, 132)).astype(np.float32)
    got = rt.download(matmul(rt, rt.upload(a, F32), rt.upload(b, F32)))  # the 64 x 64 tiling's
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)
    for source in sources:  # (the large tiling's may still be building)
        rt.programs.program(source, rt.options)
    info = rt.programs.info()
    assert info["builds"] == len(sources) and info["process_builds"] == len(sources), info


def test_unset_the_workers_are_four_for_a_cold_gpu_runtime_on_a_big_host(monkeypatch):
    """EMBER_OPENCL_BUILD_PROCESSES unset: workers only where a cold GPU runtime has cores to spare."""
    monkeypatch.delenv("EMBER_OPENCL_BUILD_PROCESSES", raising=False)
    assert settings.build_processes() is None
    monkeypatch.setattr(runtime, "BUILD_PROCESSES", None)
    monkeypatch.setattr(runtime, "_host_cpus", lambda: 16)
    assert runtime._auto_build_processes(is_cpu=False, cold=True) == runtime.AUTO_BUILD_PROCESSES == 4
    assert runtime._auto_build_processes(is_cpu=False, cold=False) == 0  # stored binaries: nothing to build
    assert runtime._auto_build_processes(is_cpu=True, cold=True) == 0  # PoCL compiles on the host's cores
    monkeypatch.setattr(runtime, "_host_cpus", lambda: 2)
    assert runtime._auto_build_processes(is_cpu=False, cold=True) == 0  # no core to spare (CI's machine)
    monkeypatch.setattr(runtime, "BUILD_PROCESSES", 0)  # set: the setting wins, either way
    monkeypatch.setattr(runtime, "_host_cpus", lambda: 16)
    assert runtime._auto_build_processes(is_cpu=False, cold=True) == 0
    monkeypatch.setattr(runtime, "BUILD_PROCESSES", 3)
    assert runtime._auto_build_processes(is_cpu=True, cold=False) == 3


def test_a_cold_runtime_asks_for_its_workers_when_unset(dev, monkeypatch):
    """Unset, a runtime opening with ember's cache empty for its device asks for the automatic count,
    and starts that many workers (the device is taken for a GPU's here: PoCL's own answer is none)."""
    monkeypatch.setattr(runtime, "BUILD_PROCESSES", None)
    monkeypatch.setattr(runtime, "BUILD_THREADS", 0)
    monkeypatch.setattr(runtime, "WARM_UP", False)
    monkeypatch.setattr(runtime, "_host_cpus", lambda: 16)
    monkeypatch.setattr(runtime.Runtime, "_cold", lambda self: True)
    asked = []
    auto = runtime._auto_build_processes

    def as_gpu(is_cpu: bool, cold: bool) -> int:
        asked.append((is_cpu, cold))
        return auto(False, cold)

    monkeypatch.setattr(runtime, "_auto_build_processes", as_gpu)
    fresh = runtime.Runtime(dev.index)
    workers = fresh.programs.processes
    try:
        assert asked == [(fresh.is_cpu, True)]
        assert isinstance(workers, BuildProcesses) and workers.count == 4
        assert fresh._builder is not None and fresh._builder._max_workers == 4
    finally:
        fresh._builder.shutdown()
        workers.close()


def test_idle_workers_end_and_later_builds_happen_here(rt):
    """Workers with ``idle_s`` end once no build ran for that long (their device contexts go); the next
    program then builds in this process, as without workers."""
    fresh = BuildProcesses(2, rt.programs.processes.where, idle_s=0.3)
    rt.programs.processes = fresh
    try:
        a = rt.upload(X, F32)
        out = run_program(rt, unary_program("exp", "float32", "float32"), [a], a.shape)[0]
        np.testing.assert_allclose(rt.download(out), np.exp(X.astype(np.float64)), rtol=2e-6)
        assert fresh.stats["process_builds"] == 1 and len(fresh._workers) == 2
        for _ in range(100):  # (the idle check runs every idle_s / 4)
            if not fresh._workers:
                break
            time.sleep(0.05)
        assert not fresh._workers and fresh.stats["idle_closed"] == 2
        builds = rt.programs.stats["builds"]
        out = run_program(rt, unary_program("sqrt", "float32", "float32"), [a], a.shape)[0]
        np.testing.assert_allclose(rt.download(out), np.sqrt(X.astype(np.float64)), rtol=2e-6)
        assert rt.programs.stats["builds"] == builds + 1 and fresh.stats["process_builds"] == 1  # built here
    finally:
        fresh.close()


def test_the_automatic_workers_end_when_idle_and_asked_for_ones_stay(dev, monkeypatch):
    """The default's workers carry runtime.AUTO_IDLE_S; workers set by the variable live with the process."""
    monkeypatch.setattr(runtime, "BUILD_THREADS", 0)
    monkeypatch.setattr(runtime, "WARM_UP", False)
    monkeypatch.setattr(runtime.Runtime, "_cold", lambda self: True)
    monkeypatch.setattr(runtime, "_auto_build_processes", lambda is_cpu, cold: 1)
    for setting, idle in ((None, runtime.AUTO_IDLE_S), (1, None)):
        monkeypatch.setattr(runtime, "BUILD_PROCESSES", setting)
        fresh = runtime.Runtime(dev.index)
        try:
            assert fresh.programs.processes.idle_s == idle
        finally:
            fresh._builder.shutdown()
            fresh.programs.processes.close()

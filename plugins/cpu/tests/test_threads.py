"""The BLAS thread policy (ember_cpu.threads): the count it picks from measured load, with the
clock and /proc/stat replaced by fakes, and a matmul through the backend that consults it."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.errors import InvalidArgumentError
from ember_cpu import threads


class _FakeLib:
    def __init__(self) -> None:
        self.calls: list[int] = []

    def set_num_threads(self, n: int) -> None:
        self.calls.append(n)


@pytest.fixture
def fake(monkeypatch):
    """A 4-core policy whose clock, own CPU time and machine busy time the test moves."""
    state = {"wall": 100.0, "busy": 1000.0, "own": 5.0}
    lib = _FakeLib()
    monkeypatch.setenv("EMBER_CPU_BLAS_THREADS", "auto")
    monkeypatch.setattr(threads, "_cores", lambda: 4)
    monkeypatch.setattr(threads, "_controller", lambda: [lib])
    monkeypatch.setattr(threads, "_busy_seconds", lambda: state["busy"])
    monkeypatch.setattr(threads.time, "monotonic", lambda: state["wall"])
    monkeypatch.setattr(threads.time, "process_time", lambda: state["own"])
    return threads.BlasThreads(), state, lib


def _advance(state, seconds: float, own_cores: float, other_cores: float) -> None:
    state["wall"] += seconds
    state["own"] += own_cores * seconds
    state["busy"] += (own_cores + other_cores) * seconds


def test_threads_follow_other_processes_load(fake):
    policy, state, lib = fake
    policy.update()  # first sample only
    assert policy.threads is None and lib.calls == []
    _advance(state, 1.0, own_cores=4.0, other_cores=0.0)  # only this process busy: every core
    policy.update()
    assert policy.threads == 4 and policy.others == pytest.approx(0.0)
    _advance(state, 1.0, own_cores=1.0, other_cores=2.6)  # others hold 2.6 cores: 1.4 left -> 1
    policy.update()
    assert policy.threads == 1 and policy.others == pytest.approx(2.6)
    _advance(state, 1.0, own_cores=1.0, other_cores=1.0)  # 3 left
    policy.update()
    assert policy.threads == 3
    assert lib.calls == [4, 1, 3]


def test_no_remeasure_within_a_window(fake):
    policy, state, lib = fake
    policy.update()
    _advance(state, threads.WINDOW / 2, own_cores=0.0, other_cores=4.0)
    policy.update()
    assert policy.threads is None and lib.calls == []


def test_fixed_count_from_environment(fake, monkeypatch):
    _, _, lib = fake
    monkeypatch.setenv("EMBER_CPU_BLAS_THREADS", "1")
    policy = threads.BlasThreads()
    policy.update()
    policy.update()
    assert policy.threads == 1 and lib.calls == [1]
    for unset in ("0", ""):  # the default leaves numpy's BLAS alone
        monkeypatch.setenv("EMBER_CPU_BLAS_THREADS", unset)
        off = threads.BlasThreads()
        off.update()
        assert off.threads is None and lib.calls == [1]
    monkeypatch.setenv("EMBER_CPU_BLAS_THREADS", "many")
    with pytest.raises(InvalidArgumentError, match="EMBER_CPU_BLAS_THREADS"):
        threads.BlasThreads()


def test_blas_kernels_consult_the_policy(monkeypatch):
    """With the split products off (ember_cpu.gemm), the BLAS-bound kernels first ask the policy."""
    from ember_cpu import gemm  # noqa: PLC0415
    from ember_cpu.backend import BLAS_OPS, _fits_threads  # noqa: PLC0415

    monkeypatch.setattr(gemm.policy, "on", False)

    impl = em.Device("cpu").backend.implementation
    assert impl("matmul").__wrapped__ is not None and impl("conv").__wrapped__ is not None
    assert not hasattr(impl("add"), "__wrapped__") and "matmul" in BLAS_OPS
    seen = []
    monkeypatch.setattr(threads.blas_threads, "update", lambda: seen.append(1))
    kernel = _fits_threads(lambda a, b: a @ b)  # binds the (patched) update when wrapping
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    np.testing.assert_array_equal(kernel(a, a.T), a @ a.T)
    assert seen == [1]


def test_only_numpys_blas_is_changed(monkeypatch):
    """scipy's own OpenBLAS (or another library's) is left alone when numpy's is loaded."""
    import os

    threadpoolctl = pytest.importorskip("threadpoolctl")
    site = os.path.dirname(os.path.dirname(os.path.abspath(np.__file__)))

    class _Lib:
        def __init__(self, path):
            self.filepath = path

    class _Controller:
        def __init__(self, paths):
            self.lib_controllers = [_Lib(p) for p in paths]

        def select(self, **_):
            return self

    ours = os.path.join(site, "numpy.libs", "libscipy_openblas64_.so")
    scipys = os.path.join(site, "scipy.libs", "libscipy_openblas.so")
    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", lambda: _Controller([scipys, ours]))
    assert [c.filepath for c in threads._controller()] == [ours]
    conda = "/opt/conda/lib/libopenblas.so"
    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", lambda: _Controller([conda]))
    assert [c.filepath for c in threads._controller()] == [conda]
    monkeypatch.setattr(threadpoolctl, "ThreadpoolController", lambda: _Controller([]))
    assert threads._controller() is None

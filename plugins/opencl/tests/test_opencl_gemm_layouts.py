"""The GEMM's operand layouts and deep split-K on a GPU-like runtime, against numpy float64: a
product with B transposed runs the tiling tuned for that layout (the class's row-major choice
otherwise), and a large product whose tiles leave compute units idle runs as K slices and a sum."""

from __future__ import annotations

import numpy as np
import pytest

from ember.dtypes import as_dtype
from ember_conformance.tuning_checks import check_layout_choice_runs
from ember_opencl import matmul as mm
from ember_opencl import tune
from ember_opencl.gemm_source import Tiling

RNG = np.random.default_rng(5)
PLAIN = Tiling(32, 32, 8, 2, 4, vw=2, chunk=1, db=True)
FOR_TB = Tiling(32, 64, 8, 4, 8, vw=2, chunk=4, db=True)


@pytest.fixture
def gpu_like(dev, tmp_path, monkeypatch):
    """The device's runtime taking a GPU's paths, with its tuning choices stored in ``tmp_path``."""
    rt = dev.backend.rt
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(rt, "is_cpu", False)
    tune.forget(rt)
    yield rt
    tune.forget(rt)
    mm.tuning_changed()


def _up(rt, arr):
    return rt.upload(np.ascontiguousarray(arr), as_dtype(arr.dtype))


def _ran(rt, tiling):
    return any(isinstance(k, tuple) and k[:1] == ("matmul",) and k[2] == tiling for k in rt._kernels)


def test_a_transposed_operand_runs_its_layouts_choice(gpu_like):
    rt = gpu_like
    rt._kernels = {k: v for k, v in rt._kernels.items() if not (isinstance(k, tuple) and k[:1] == ("matmul",))}

    def product(a, b, transposed):
        bv = _up(rt, b.T).permute((1, 0)) if transposed else _up(rt, b)  # (K, N), strides (1, K) if transposed
        assert mm._layout(_up(rt, a), bv) == ("tB" if transposed else "")
        return rt.download(mm.matmul(rt, _up(rt, a), bv))

    check_layout_choice_runs(tune, rt, PLAIN, FOR_TB, product, lambda t: _ran(rt, t))


def test_a_deep_gemm_of_few_tiles_runs_as_k_slices(gpu_like, monkeypatch):
    """64 x 64 outputs make 4 tiles of 32 x 32 for 64 compute units: K = 4096 is cut in 4 slices
    (the fewest the wave model prices lowest), whose products are summed."""
    rt = gpu_like
    M, K, N = 64, 4096, 64
    monkeypatch.setattr(mm, "AUTOTUNE_FLOPS", 1)  # (this size stands in for a tuned, large one)
    monkeypatch.setattr(rt, "compute_units", 64)
    tune.record(rt, "float32", tune.shape_class(M, N, K, "tA"), PLAIN)
    assert mm._slices(rt, "float32", M, N, K, "tA") == 4
    split = []
    real = mm._split_k
    monkeypatch.setattr(mm, "_split_k", lambda rt, s, a, b, t=None: split.append(s) or real(rt, s, a, b, t))
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    at = _up(rt, a.T).permute((1, 0))  # x.T @ g, as a weight gradient comes
    got = rt.download(mm.matmul(rt, at, _up(rt, b)))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)
    assert split == [4]
    monkeypatch.setattr(rt, "compute_units", 2)  # 4 tiles fill 2 units twice over: left whole
    assert mm._slices(rt, "float32", M, N, K, "tA") == 0


def test_the_tuner_times_a_deep_gemm_of_few_tiles_as_its_plan_runs_it(gpu_like, monkeypatch):
    """A candidate tiling leaving compute units idle on a deep product is timed in the K slices a plan
    with it tuned would cut (``matmul.as_tuned_runs``), not whole: else a small tiling that fills the
    units wins the class, and its product is never split."""
    rt = gpu_like
    M, K, N = 64, 4096, 64
    monkeypatch.setattr(mm, "AUTOTUNE_FLOPS", 1)  # (this size stands in for a large one)
    monkeypatch.setattr(rt, "compute_units", 64)
    split = []
    real = mm._split_k
    monkeypatch.setattr(mm, "_split_k", lambda rt, s, a, b, t=None: split.append((s, t)) or real(rt, s, a, b, t))
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    got = rt.download(tune._TUNER.matmul(rt, _up(rt, a), _up(rt, b), PLAIN))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)
    assert split == [(4, PLAIN)], "timed whole: the tuner would not see the split it chooses for"
    assert _ran(rt, PLAIN)
    monkeypatch.setattr(rt, "compute_units", 2)  # 4 tiles fill 2 units twice over: timed whole
    tune._TUNER.matmul(rt, _up(rt, a), _up(rt, b), PLAIN)
    assert len(split) == 1


@pytest.mark.parametrize("sw", [3, 8])
def test_tiles_walked_in_bands_cover_the_output(dev, sw):
    """Work-groups placed by bands of sw tile rows (the last band shorter) write every tile once,
    over a batch too."""
    rt = dev.backend.rt
    t = Tiling(16, 16, 8, 2, 2, vw=2, chunk=1, db=True, sw=sw)
    a = RNG.standard_normal((2, 100, 37)).astype(np.float32)  # 7 tile rows: bands of 3, 3, 1 (or one of 7)
    b = RNG.standard_normal((37, 70)).astype(np.float32)
    got = rt.download(mm.matmul(rt, _up(rt, a), _up(rt, b), t))
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)
    assert _ran(rt, t)

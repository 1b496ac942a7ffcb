"""The untuned tiled GEMM reads its operands' alignment as a kernel argument: aligned and
unaligned operands of one shape class share one program (W2's first step on a GPU built the
same GEMM twice, once per alignment: 7 GEMM programs, now 5), and both paths give numpy's result.
A tuned or given tiling keeps its specialised kernels (what the tuner timed is what runs)."""

from __future__ import annotations

import numpy as np
import pytest

from ember.dtypes import as_dtype
from ember_opencl import matmul as mm
from ember_opencl import runtime
from ember_opencl.array import CLArray

F32 = as_dtype("float32")


@pytest.fixture
def rt(dev, tmp_path, monkeypatch):
    """A GPU-like runtime of its own (the tiled kernels), with an empty program cache."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    fresh = runtime.Runtime(dev.index)
    fresh.is_cpu, fresh.compute_units = False, 4
    return fresh


def _upload(rt: runtime.Runtime, host: np.ndarray) -> CLArray:
    return rt.upload(np.ascontiguousarray(host, dtype=np.float32), F32)


def _transposed(rt: runtime.Runtime, host: np.ndarray) -> CLArray:
    """``host.T`` as a transposed view of ``host`` uploaded (strides swapped, not copied)."""
    a = _upload(rt, host)
    return a.with_layout(host.shape[::-1], a.strides[::-1], 0)


def _gemm_kernels(rt: runtime.Runtime) -> list:
    return [key for key in rt._kernels if key[0] == "matmul"]


def test_aligned_and_unaligned_share_one_program(rt):
    rng = np.random.default_rng(5)
    # the W2 pair: dh = dlogits @ W3.T (K = 10: rows of 10, unaligned) and dh = dh2 @ W2.T (aligned)
    # (130 x 132 outputs: the 64 x 64 tiling with float4 loads, as W2's smaller GEMMs on a GPU)
    cases = [(rng.standard_normal((130, 10)), rng.standard_normal((132, 10))),
             (rng.standard_normal((130, 64)), rng.standard_normal((132, 64)))]  # fmt: skip
    for a, w in cases:
        got = rt.download(mm.matmul(rt, _upload(rt, a), _transposed(rt, w)))
        np.testing.assert_allclose(got, a @ w.T, rtol=1e-5, atol=1e-5)
    keys = _gemm_kernels(rt)
    assert len(keys) == 1 and keys[0][-1] == "dynamic", keys
    assert rt.programs.stats["builds"] == 1  # one program ran both (and gave numpy's answer)
    source, _ = mm.gemm_source(*keys[0][1:-1], dynamic_align=True)
    assert "(al & 1)" in source and "vload4" in source  # both load paths are in it


@pytest.mark.parametrize("m,n,k", [(130, 130, 40), (132, 128, 13), (130, 132, 20), (20, 16, 8)])
def test_every_alignment_path_matches_numpy(rt, m, n, k):
    """Unaligned C (N % 4), unaligned A (K % 4), an offset into a buffer, all aligned; the 64 x 64
    tiling with float4 loads and the tiny one without."""
    rng = np.random.default_rng(m * n + k)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    whole = _upload(rt, np.concatenate([np.zeros(1), a.ravel()]))  # A at offset 1: unaligned
    shifted = whole.with_layout((m, k), (k, 1), 1)
    for lhs in (_upload(rt, a), shifted):
        got = rt.download(mm.matmul(rt, lhs, _upload(rt, b)))
        np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    got = rt.download(mm.matmul(rt, _transposed(rt, a.T), _transposed(rt, b.T)))
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert all(key[-1] == "dynamic" for key in _gemm_kernels(rt))


def test_a_given_tiling_stays_specialised(rt):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((40, 24)), rng.standard_normal((24, 36))
    t = mm.TILINGS["gpu_small"]
    got = rt.download(mm.matmul(rt, _upload(rt, a), _upload(rt, b), t))
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    (key,) = _gemm_kernels(rt)
    assert key[-1] == (True, True, True)  # the static aligned kernel, as the tuner times it
    assert "(al & 1)" not in mm.gemm_source(*key[1:-1], aligned=key[-1])[0]

"""The untuned tiled GEMM reads its operands' layout (which axis is contiguous, stride-1 vector
loads, alignment) from a kernel argument: every transpose and alignment of a shape class shares
one program (W2's first step on a GPU built 7 GEMM programs, one per tiling, transpose and
alignment: 2.95 of its 3.9 s of builds on an H100), and every path gives numpy's result. A tuned
or given tiling keeps its specialised kernels (what the tuner timed is what runs)."""

from __future__ import annotations

import numpy as np
import pytest

from ember.dtypes import as_dtype
from ember_opencl import matmul as mm
from ember_opencl import runtime
from ember_opencl.array import CLArray
from ember_opencl.gemm_source import gemm_source

F32 = as_dtype("float32")


@pytest.fixture
def rt(dev, tmp_path, monkeypatch):
    """A GPU-like runtime of its own (the tiled kernels), with an empty program cache."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(mm, "GENERIC_AFTER_FIRST_RESULT", True)  # these tests read results back
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


def test_every_layout_shares_one_program(rt):
    """W2's GEMMs on a GPU: x @ W (NN), dlogits @ W3.T with rows of 10 (NT, unaligned), dh @ W.T
    (NT, aligned), h.T @ dh (TN), and TT: one program of the 64 x 64 tiling runs them all."""
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((130, 64)), rng.standard_normal((64, 132))
    a10, w10 = rng.standard_normal((130, 10)), rng.standard_normal((132, 10))
    cases = [
        (_upload(rt, a), _upload(rt, b), a @ b),
        (_upload(rt, a10), _transposed(rt, w10), a10 @ w10.T),
        (_upload(rt, a), _transposed(rt, b.T), a @ b),
        (_transposed(rt, a.T), _upload(rt, b), a @ b),
        (_transposed(rt, a.T), _transposed(rt, b.T), a @ b),
    ]
    for lhs, rhs, want in cases:
        np.testing.assert_allclose(rt.download(mm.matmul(rt, lhs, rhs)), want, rtol=1e-5, atol=1e-5)
    keys = _gemm_kernels(rt)
    assert len(keys) == 1 and keys[0][-1] == "generic" and keys[0][2] == mm.TILINGS["gpu_small"], keys
    assert rt.programs.stats["builds"] == 1  # one program ran all five (and gave numpy's answers)
    source, _ = gemm_source(*keys[0][1:-1], generic=True)
    assert "(lay & 1)" in source and "vload4" in source  # both load paths are in it


@pytest.mark.parametrize("m,n,k", [(130, 130, 40), (132, 128, 13), (130, 132, 20), (20, 16, 8)])
def test_every_layout_path_matches_numpy(rt, m, n, k):
    """Unaligned C (N % 4), unaligned A (K % 4), an offset into a buffer, a column stride of 2 (no
    vector loads), all aligned, each transposed or not; the 64 x 64 tiling with float4 loads and the
    tiny one without."""
    rng = np.random.default_rng(m * n + k)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    whole = _upload(rt, np.concatenate([np.zeros(1), a.ravel()]))  # A at offset 1: unaligned
    shifted = whole.with_layout((m, k), (k, 1), 1)
    spread = _upload(rt, np.stack([b, b], axis=-1))  # B's columns 2 apart: scalar loads
    strided = spread.with_layout((k, n), (2 * n, 2), 0)
    lefts = [_upload(rt, a), shifted, _transposed(rt, a.T)]
    rights = [_upload(rt, b), strided, _transposed(rt, b.T)]
    for lhs in lefts:
        for rhs in rights:
            got = rt.download(mm.matmul(rt, lhs, rhs))
            np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert [key[-1] for key in _gemm_kernels(rt)] == ["generic"]


def test_a_given_tiling_stays_specialised(rt):
    rng = np.random.default_rng(6)
    a, b = rng.standard_normal((40, 24)), rng.standard_normal((24, 36))
    t = mm.TILINGS["gpu_small"]
    got = rt.download(mm.matmul(rt, _upload(rt, a), _upload(rt, b), t))
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    (key,) = _gemm_kernels(rt)
    assert key[-1] == (True, True, True)  # the static aligned kernel, as the tuner times it
    assert "(lay & 1)" not in gemm_source(*key[1:-1], aligned=key[-1])[0]


def test_batched_and_broadcast_layouts_share_the_program(rt):
    """A batch of transposed left operands times one right operand (stride 0 over the batch), and
    batches of transposed operands: one generic batched program. (A batch of row-major left
    operands times one right operand folds into a 2-D GEMM instead: ``View.rows_folded``.)"""
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((3, 24, 130)), rng.standard_normal((24, 132))  # a stored transposed
    ua = _upload(rt, a)
    lhs = ua.with_layout((3, 130, 24), (ua.strides[0], ua.strides[2], ua.strides[1]), 0)
    assert lhs.rows_folded() is None
    got = rt.download(mm.matmul(rt, lhs, _upload(rt, b)))
    np.testing.assert_allclose(got, a.transpose(0, 2, 1) @ b, rtol=1e-5, atol=1e-5)
    at, bt = rng.standard_normal((2, 24, 130)), rng.standard_normal((2, 132, 24))  # stored transposed
    ua, ub = _upload(rt, at), _upload(rt, bt)
    lhs = ua.with_layout((2, 130, 24), (ua.strides[0], ua.strides[2], ua.strides[1]), 0)
    rhs = ub.with_layout((2, 24, 132), (ub.strides[0], ub.strides[2], ub.strides[1]), 0)
    got = rt.download(mm.matmul(rt, lhs, rhs))
    np.testing.assert_allclose(got, at.transpose(0, 2, 1) @ bt.transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    assert [key[-1] for key in _gemm_kernels(rt)] == ["generic"] and rt.programs.stats["builds"] == 1


@pytest.mark.parametrize("dt", ["int32", "uint32"])
def test_integer_gemms_run_generic_and_exact(rt, dt):
    rng = np.random.default_rng(9)
    a, b = rng.integers(0, 7, (130, 20)).astype(dt), rng.integers(0, 7, (20, 132)).astype(dt)
    ua, ub = rt.upload(a, as_dtype(dt)), rt.upload(np.ascontiguousarray(b.T), as_dtype(dt))
    rhs = ub.with_layout((20, 132), ub.strides[::-1], 0)  # B stored transposed
    for lhs, right in ((ua, rt.upload(b, as_dtype(dt))), (ua, rhs)):
        np.testing.assert_array_equal(rt.download(mm.matmul(rt, lhs, right)), a @ b)
    assert [key[-1] for key in _gemm_kernels(rt)] == ["generic"]


def test_a_gpu_specialises_untuned_gemms_after_its_first_result(dev, tmp_path, monkeypatch):
    """On a GPU the generic program serves only the cold first step: after the first read-back an
    untuned GEMM gets its specialised kernel (NVIDIA ran the generic one 1.35-1.75x slower)."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    fresh = runtime.Runtime(dev.index)
    fresh.is_cpu, fresh.compute_units = False, 4
    gen = np.random.default_rng(7)
    a, b = gen.standard_normal((96, 64)), gen.standard_normal((64, 80))
    first = mm.matmul(fresh, _upload(fresh, a), _upload(fresh, b))
    assert [k[-1] for k in _gemm_kernels(fresh)] == ["generic"]
    np.testing.assert_allclose(fresh.download(first), a @ b, rtol=1e-4, atol=1e-4)  # the first read-back
    second = mm.matmul(fresh, _upload(fresh, a), _upload(fresh, b))
    kinds = sorted(str(k[-1]) for k in _gemm_kernels(fresh))
    assert len(kinds) == 2 and "generic" in kinds, kinds  # the same product, now its specialised program
    np.testing.assert_allclose(fresh.download(second), a @ b, rtol=1e-4, atol=1e-4)

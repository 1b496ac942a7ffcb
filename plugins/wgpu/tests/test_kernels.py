"""The templated kernels on paths the conformance suite's small shapes do not reach: the large
matmul tile with transposed operands, split reductions, long sorts and scans, colliding
atomic adds (including the 64-bit carry) and index_put's last-writer rule."""

from __future__ import annotations

import numpy as np
import pytest

from ember import dtypes as D
from ember_conformance import nn_reference
from ember_wgpu.kernels import indexing, matmul, reduce, scan, sort

RNG = np.random.default_rng(7)


def _t(rt, arr):
    """A transposed view of ``arr`` stored transposed (no copy on the device)."""
    h = rt.upload(np.ascontiguousarray(arr.T), D.as_dtype(arr.dtype))
    return h.permute((1, 0))


@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("m, k, n", [(520, 70, 530), (33, 17, 65)])
def test_matmul_transposed_operands(rt, ta, tb, m, k, n):
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    A = _t(rt, a) if ta else rt.upload(a, D.float32)
    B = _t(rt, b) if tb else rt.upload(b, D.float32)
    got = rt.read([matmul.matmul(rt, A, B)])[0]
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_broadcast_batch_float16(rt):
    a = RNG.standard_normal((3, 1, 9, 12)).astype(np.float16)
    b = RNG.standard_normal((4, 12, 5)).astype(np.float16)
    got = rt.read([matmul.matmul(rt, rt.upload(a, D.float16), rt.upload(b, D.float16))])[0]
    expected = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=4e-3, atol=4e-3)


def test_split_reduction_of_a_long_row(rt):
    x = RNG.standard_normal(300_001).astype(np.float32)
    X = rt.upload(x, D.float32)
    np.testing.assert_allclose(
        rt.read([reduce.reduce(rt, X, "sum", (0,), False)])[0], x.sum(dtype=np.float64), rtol=1e-5
    )
    np.testing.assert_allclose(
        rt.read([reduce.reduce(rt, X, "mean", (0,), False)])[0], x.mean(dtype=np.float64), rtol=1e-4
    )
    assert rt.read([reduce.reduce(rt, X, "max", (0,), False)])[0] == x.max()


@pytest.mark.parametrize("axes", [(0,), (1,), (0, 2), (1, 2)])
def test_reductions_over_axis_blocks(rt, axes):
    x = RNG.standard_normal((40, 3, 700)).astype(np.float32)
    got = rt.read([reduce.reduce(rt, rt.upload(x, D.float32), "sum", axes, True)])[0]
    np.testing.assert_allclose(got, x.sum(axis=axes, keepdims=True), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("keepdims", [False, True])
def test_separate_axes_reduce_block_by_block_without_a_full_size_copy(rt, op, keepdims):
    # a conv's bias gradient: axes (0, 2, 3) of (N, C, H, W); the inner block first, then the batch
    x = RNG.standard_normal((16, 8, 20, 21)).astype(np.float32)
    X = rt.upload(x, D.float32)
    rt.pool.reset_peaks()
    base = rt.pool.in_use
    got = reduce.reduce(rt, X, op, (0, 2, 3), keepdims)
    peak = rt.pool.peak_in_use - base
    np.testing.assert_allclose(
        rt.read([got])[0], getattr(np, op)(x.astype(np.float64), axis=(0, 2, 3), keepdims=keepdims), rtol=1e-5
    )
    assert peak < x.nbytes // 8  # (N, C) partials and the result; the old road permuted a copy of all of x


def test_argmax_first_of_ties(rt):
    x = np.array([[1, 5, 5, 2], [7, 7, 7, 7], [0, -1, 3, 3]], np.int64)
    got = rt.read([reduce.reduce(rt, rt.upload(x, D.int64), "argmax", (1,), False)])[0]
    np.testing.assert_array_equal(got, x.argmax(axis=1))


@pytest.mark.parametrize("descending", [False, True])
def test_long_stable_argsort(rt, descending):
    x = RNG.integers(0, 50, (3, 5000)).astype(np.float32)
    got = rt.read([sort.sort(rt, rt.upload(x, D.float32), 1, descending, values=False)])[0]
    if descending:
        n = x.shape[1]
        expected = np.flip(n - 1 - np.argsort(np.flip(x, 1), axis=1, kind="stable"), 1)
    else:
        expected = np.argsort(x, axis=1, kind="stable")
    np.testing.assert_array_equal(got, expected)


def test_cumsum_rows_and_columns(rt):
    x = RNG.integers(-9, 9, (5, 1000)).astype(np.int64)
    X = rt.upload(x, D.int64)
    np.testing.assert_array_equal(rt.read([scan.cumsum(rt, X, 1)])[0], np.cumsum(x, axis=1))
    np.testing.assert_array_equal(rt.read([scan.cumsum(rt, X, 0)])[0], np.cumsum(x, axis=0))


@pytest.mark.parametrize("dtype", [D.float32, D.int32, D.int64, D.float16, D.uint8])
def test_scatter_add_with_collisions(rt, dtype):
    base = np.zeros((4, 3), dtype.numpy)
    index = RNG.integers(0, 4, (50, 3))
    big = 2**33 if dtype is D.int64 else 1
    values = (np.ones((50, 3)) * big).astype(dtype.numpy)
    got = rt.read(
        [indexing.scatter_add(rt, rt.upload(base, dtype), rt.upload(index, D.int64), rt.upload(values, dtype), 0)]
    )[0]
    expected = base.copy()
    np.add.at(expected, (index, np.arange(3)[None, :]), values)
    np.testing.assert_array_equal(got, expected)


def test_int64_atomic_carry(rt):
    base = np.array([2**32 - 1], np.int64)
    index = np.zeros(1000, np.int64)
    values = np.full(1000, 2**32 - 1, np.int64)
    out = indexing.scatter_add(rt, rt.upload(base, D.int64), rt.upload(index, D.int64), rt.upload(values, D.int64), 0)
    assert rt.read([out])[0][0] == base[0] + values.sum()


def test_index_put_last_write_wins(rt):
    a = np.zeros(5, np.float32)
    idx = np.array([1, 3, 1, 1, 4, 3], np.int64)
    vals = np.arange(6, dtype=np.float32) + 10
    out = indexing.index_put(rt, rt.upload(a, D.float32), rt.upload(vals, D.float32), [rt.upload(idx, D.int64)], False)
    expected = a.copy()
    expected[idx] = vals
    np.testing.assert_array_equal(rt.read([out])[0], expected)


def test_layer_norm_backward_runs_as_one_row_kernel(dev, rt, monkeypatch):
    """em.layer_norm's input gradient on wgpu is the layer_norm_backward row kernel (not the
    composite's reductions), matching float64; rows longer than a workgroup loop."""
    import ember as em
    from ember_wgpu.runtime import Runtime

    seen = []
    plain = Runtime.dispatch

    def counted(self, pipe, params, buffers, groups, name=""):
        seen.append(name or pipe.name)
        plain(self, pipe, params, buffers, groups, name)

    monkeypatch.setattr(Runtime, "dispatch", counted)
    rows, n, eps = 6, 600, 1e-5
    xs, ws, bs, gs = (RNG.standard_normal(s) for s in ((rows, n), (n,), (n,), (rows, n)))
    ad = dev.autodiff()
    x = em.tensor(xs.astype(np.float32), device=ad, requires_grad=True)
    w, b, g = (em.tensor(a.astype(np.float32), device=ad) for a in (ws, bs, gs))
    (em.layer_norm(x, (n,), w, b, eps) * g).sum().backward()
    got = x.grad.numpy()
    assert "layer_norm_backward" in seen
    want, _, _ = nn_reference.layer_norm_grads(gs, xs, 1, ws, eps)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)

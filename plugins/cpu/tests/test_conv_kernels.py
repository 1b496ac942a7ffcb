"""The cpu backend's 2-D convolution and pooling kernels (ember_cpu.conv_kernels) against float64
loops in numpy, over odd shapes, strides, asymmetric padding, dilation and groups, with a check
that the numba kernel (not the shared numpy kernel) ran."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ember as em

pytest.importorskip("numba", reason="the numba kernels need numba (pip install 'ember-cpu[numba]')")

from ember_cpu import conv_kernels  # noqa: E402 - after the skip
from ember_cpu.backend import NATIVE_CALLS  # noqa: E402


def _conv_reference(x, w, b, stride, padding, dilation, groups):
    """float64 loops: y, and the function that maps an output gradient to (gx, gw, gb)."""
    n, cin, h, wd = x.shape
    cout, cg, kh, kw = w.shape
    (pt, pb), (pl, pr) = padding
    oh = (h + pt + pb - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + pl + pr - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    per_group = cout // groups
    taps = []  # (b, co, i, j, ci, u, v, y, x) of every tap that reads the input
    for b_, co, i, j, c, u, v in itertools.product(
        range(n), range(cout), range(oh), range(ow), range(cg), range(kh), range(kw)
    ):
        yy, xx = i * stride[0] - pt + u * dilation[0], j * stride[1] - pl + v * dilation[1]
        if 0 <= yy < h and 0 <= xx < wd:
            taps.append((b_, co, i, j, (co // per_group) * cg + c, c, u, v, yy, xx))
    y = np.zeros((n, cout, oh, ow))
    for b_, co, i, j, ci, c, u, v, yy, xx in taps:
        y[b_, co, i, j] += w[co, c, u, v] * x[b_, ci, yy, xx]
    if b is not None:
        y += b.reshape(1, -1, 1, 1)

    def grads(g):
        gx, gw = np.zeros(x.shape), np.zeros(w.shape)
        for b_, co, i, j, ci, c, u, v, yy, xx in taps:
            gx[b_, ci, yy, xx] += w[co, c, u, v] * g[b_, co, i, j]
            gw[co, c, u, v] += x[b_, ci, yy, xx] * g[b_, co, i, j]
        return gx, gw, g.sum(axis=(0, 2, 3))

    return y, grads


CASES = [
    # (n, cin, cout, (h, w), kernel, stride, padding, dilation, groups); padding as em.conv takes it
    (2, 1, 5, (9, 8), (3, 3), (1, 1), 1, (1, 1), 1),  # W3's first layer: K = 9
    (3, 6, 4, (7, 6), (3, 3), (1, 1), 1, (1, 1), 1),  # W3's second layer in small
    (2, 6, 4, (9, 11), (2, 3), (2, 1), (0, 2), (1, 2), 2),  # odd everything, groups
    (2, 4, 4, (7, 5), (3, 3), (1, 1), 1, (1, 1), 4),  # depthwise
    (1, 3, 5, (8, 9), (3, 2), (1, 2), (1, 0), (2, 1), 1),  # stride on the width only
    (2, 8, 6, (5, 6), (1, 1), (1, 1), 0, (1, 1), 2),  # 1x1
    (2, 5, 3, (10, 9), (2, 3), (1, 1), "same", (2, 2), 1),  # dilated, asymmetric "same" padding
    (2, 4, 3, (6, 7), (5, 1), (1, 1), (2, 0), (1, 1), 1),  # K = 20 > SMALL_K
]


def _pairs(padding, kernel, dilation):
    """em.conv's padding as (lo, hi) pairs ("same": the extra on the high side, as PyTorch)."""
    if padding == "same":
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)
    p = (padding,) * 2 if isinstance(padding, int) else padding
    return tuple((v, v) for v in p)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_forward_and_gradients_match_float64_loops(case, dtype):
    n, cin, cout, hw, kernel, stride, padding, dilation, groups = case
    gen = np.random.default_rng(7)
    xv = gen.standard_normal((n, cin, *hw)).astype(dtype)
    wv = gen.standard_normal((cout, cin // groups, *kernel)).astype(dtype)
    bv = gen.standard_normal(cout).astype(dtype)
    dev = em.Device("cpu").autodiff()
    x, w, b = (em.tensor(v, device=dev, requires_grad=True) for v in (xv, wv, bv))
    before = dict(NATIVE_CALLS)
    y = em.conv(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    pads = _pairs(padding, kernel, dilation)
    want, grads = _conv_reference(*(v.astype(np.float64) for v in (xv, wv, bv)), stride, pads, dilation, groups)
    gv = gen.standard_normal(want.shape).astype(dtype)
    (y * em.tensor(gv, device=dev)).sum().backward()
    for op in ("conv", "conv_weight_grad", "conv_transpose"):
        assert NATIVE_CALLS[op] == before[op] + 1, f"the native {op} did not run"
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=tol, atol=tol)
    gx, gw, gb = grads(gv.astype(np.float64))
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=tol, atol=tol)
    np.testing.assert_allclose(w.grad.numpy(), gw, rtol=tol, atol=tol)
    np.testing.assert_allclose(b.grad.numpy(), gb, rtol=tol, atol=tol)


def test_conv_transpose_with_an_infinite_weight_matches_the_reference():
    """inf and NaN land exactly where the reference's sums put them (the fold adds only in-bounds runs)."""
    gen = np.random.default_rng(8)
    g = gen.standard_normal((2, 3, 5, 4))
    w = gen.standard_normal((3, 2, 3, 3))
    w[1, 0, 2, 2] = np.inf
    dev = em.Device("cpu")
    before = NATIVE_CALLS["conv_transpose"]
    got = em.conv_transpose(em.tensor(g, device=dev), em.tensor(w, device=dev), padding=1).numpy()
    want = np.zeros((2, 2, 5, 4))
    for b_, ci, i, j, co, u, v in itertools.product(
        range(2), range(3), range(5), range(4), range(2), range(3), range(3)
    ):
        yy, xx = i - 1 + u, j - 1 + v
        if 0 <= yy < 5 and 0 <= xx < 4:
            want[b_, co, yy, xx] += w[ci, co, u, v] * g[b_, ci, i, j]
    assert NATIVE_CALLS["conv_transpose"] == before + 1, "the native conv_transpose did not run"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation", "groups"),
    [((2, 3), (1, 1), ((0, 1), (2, 0)), (1, 2), 2), ((3, 3), (1, 2), ((2, 0), (0, 3)), (2, 1), 1)],
)
def test_the_kernels_take_asymmetric_padding(kernel, stride, padding, dilation, groups):
    gen = np.random.default_rng(11)
    x, w = gen.standard_normal((2, 4, 9, 10)), gen.standard_normal((6, 4 // groups, *kernel))
    want, grads = _conv_reference(x, w, None, stride, padding, dilation, groups)
    g = gen.standard_normal(want.shape)
    gx, gw, _ = grads(g)
    np.testing.assert_allclose(conv_kernels.conv2d(x, w, None, stride, padding, dilation, groups), want, rtol=1e-12)
    got_w = conv_kernels.conv2d_weight_grad(g, x, kernel, stride, padding, dilation, groups)
    np.testing.assert_allclose(got_w, gw, rtol=1e-12)
    got_x = conv_kernels.conv2d_transpose(g, w, None, (9, 10), stride, padding, dilation, groups)
    np.testing.assert_allclose(got_x, gx, rtol=1e-12, atol=1e-12)


def test_conv_runs_in_batch_slices_when_the_columns_exceed_the_budget(monkeypatch):
    monkeypatch.setattr(conv_kernels, "COLUMN_BUDGET", 1)  # one sample a slice
    gen = np.random.default_rng(9)
    x, w, b = gen.standard_normal((3, 4, 6, 5)), gen.standard_normal((5, 4, 3, 3)), gen.standard_normal(5)
    g = gen.standard_normal((3, 5, 6, 5))
    pads = ((1, 1), (1, 1))
    want, grads = _conv_reference(x, w, b, (1, 1), pads, (1, 1), 1)
    gx, gw, _ = grads(g)
    np.testing.assert_allclose(conv_kernels.conv2d(x, w, b, (1, 1), pads, (1, 1), 1), want, rtol=1e-12)
    np.testing.assert_allclose(conv_kernels.conv2d_weight_grad(g, x, (3, 3), (1, 1), pads, (1, 1), 1), gw, rtol=1e-12)
    got = conv_kernels.conv2d_transpose(g, w, None, (6, 5), (1, 1), pads, (1, 1), 1)
    np.testing.assert_allclose(got, gx, rtol=1e-12, atol=1e-12)


def _max_pool_reference(x, kernel, stride):
    n, c, h, w = x.shape
    oh, ow = (h - kernel[0]) // stride[0] + 1, (w - kernel[1]) // stride[1] + 1
    out = np.empty((n, c, oh, ow), dtype=x.dtype)
    for b_, ch, i, j in itertools.product(range(n), range(c), range(oh), range(ow)):
        win = x[b_, ch, i * stride[0] : i * stride[0] + kernel[0], j * stride[1] : j * stride[1] + kernel[1]]
        out[b_, ch, i, j] = np.nan if np.isnan(win).any() else win.max()
    return out


@pytest.mark.parametrize(("kernel", "stride"), [((2, 2), (2, 2)), ((3, 2), (2, 3)), ((3, 3), (1, 1))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_matches_a_reference_with_nan_and_runs_the_numba_kernel(kernel, stride, dtype):
    gen = np.random.default_rng(10)
    xv = gen.standard_normal((2, 3, 9, 7)).astype(dtype)
    xv[0, 0, 0, 0] = np.nan  # NaN propagates, as numpy's maximum
    xv[1, 2, 3, 3] = -np.inf
    before = NATIVE_CALLS["max_pool"]
    got = em.max_pool(em.tensor(xv, device="cpu"), kernel, stride=stride).numpy()
    assert NATIVE_CALLS["max_pool"] == before + 1, "the numba max pool did not run"
    np.testing.assert_array_equal(got, _max_pool_reference(xv, kernel, stride))


def test_padded_max_pool_takes_the_numpy_kernel():
    xv = np.arange(2 * 1 * 5 * 5, dtype=np.float32).reshape(2, 1, 5, 5)
    before = NATIVE_CALLS["max_pool"]
    got = em.max_pool(em.tensor(xv, device="cpu"), 3, stride=2, padding=1).numpy()
    assert NATIVE_CALLS["max_pool"] == before
    assert got.shape == (2, 1, 3, 3) and got[0, 0, 0, 0] == xv[0, 0, 1, 1]


def test_the_weight_gradient_takes_the_forward_columns_and_inference_keeps_none():
    gen = np.random.default_rng(12)
    xv, wv = gen.standard_normal((2, 3, 6, 5)), gen.standard_normal((4, 3, 3, 3))
    dev = em.Device("cpu").autodiff()
    x = em.tensor(xv, device=dev)
    w = em.tensor(wv, device=dev, requires_grad=True)
    hits = conv_kernels.COLUMNS.hits
    y = em.conv(x, w, padding=1)
    gv = gen.standard_normal(y.shape)
    (y * em.tensor(gv, device=dev)).sum().backward()
    assert conv_kernels.COLUMNS.hits == hits + 1, "the weight gradient recomputed the forward's columns"
    _, grads = _conv_reference(xv, wv, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    np.testing.assert_allclose(w.grad.numpy(), grads(gv)[1], rtol=1e-12)
    assert not conv_kernels.COLUMNS.entries, "a taken entry stayed in the cache"
    with em.no_grad():
        z = em.conv(em.tensor(xv + 1.0, device=dev), w, padding=1)  # its input is freed at once
    assert z.shape == y.shape and not conv_kernels.COLUMNS.entries, "an inference pass left columns behind"


def test_the_loops_split_over_the_blas_thread_count_when_parallel_is_on(monkeypatch):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    monkeypatch.setattr(conv_kernels, "PARALLEL", False)
    assert conv_kernels.kernel_threads() == 1  # serial by default
    monkeypatch.setattr(conv_kernels, "PARALLEL", True)
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        assert conv_kernels.kernel_threads() == 1
    assert conv_kernels.kernel_threads() >= 1
    seen = []
    monkeypatch.setattr(conv_kernels, "kernel_threads", lambda: 3)
    conv_kernels.split(lambda tag, lo, hi: seen.append((tag, lo, hi)), 10, "k")
    assert sorted(seen) == [("k", 0, 3), ("k", 3, 6), ("k", 6, 10)]
    seen.clear()
    conv_kernels.split(lambda tag, lo, hi: seen.append((tag, lo, hi)), 3, "k")  # too few to split
    assert seen == [("k", 0, 3)]
    # three parts of every kernel give the float64 loops' values
    gen = np.random.default_rng(13)
    x, w, b = gen.standard_normal((3, 4, 7, 6)), gen.standard_normal((5, 4, 3, 3)), gen.standard_normal(5)
    pads = ((1, 1), (1, 1))
    want, grads = _conv_reference(x, w, b, (1, 1), pads, (1, 1), 1)
    g = gen.standard_normal(want.shape)
    gx, gw, _ = grads(g)
    np.testing.assert_allclose(conv_kernels.conv2d(x, w, b, (1, 1), pads, (1, 1), 1), want, rtol=1e-12)
    np.testing.assert_allclose(conv_kernels.conv2d_weight_grad(g, x, (3, 3), (1, 1), pads, (1, 1), 1), gw, rtol=1e-12)
    got = conv_kernels.conv2d_transpose(g, w, None, (7, 6), (1, 1), pads, (1, 1), 1)
    np.testing.assert_allclose(got, gx, rtol=1e-12, atol=1e-12)
    x1 = gen.standard_normal((3, 1, 8, 9))
    w1 = gen.standard_normal((4, 1, 3, 3))
    np.testing.assert_allclose(
        conv_kernels.conv2d(x1, w1, None, (1, 1), pads, (1, 1), 1),
        _conv_reference(x1, w1, None, (1, 1), pads, (1, 1), 1)[0], rtol=1e-12,
    )  # fmt: skip
    np.testing.assert_array_equal(conv_kernels.max_pool2d(x, (2, 2), (2, 2)), _max_pool_reference(x, (2, 2), (2, 2)))


def test_scratch_buffers_are_reused_without_changing_results():
    gen = np.random.default_rng(14)
    x, w = gen.standard_normal((8, 16, 12, 12)), gen.standard_normal((24, 16, 3, 3))  # columns > 1 MiB
    pads = ((1, 1), (1, 1))
    want, grads = _conv_reference(x[:1], w, None, (1, 1), pads, (1, 1), 1)
    g = gen.standard_normal((8, 24, 12, 12))
    firsts = [conv_kernels.conv2d_transpose(g, w, None, (12, 12), (1, 1), pads, (1, 1), 1) for _ in range(3)]
    assert any(conv_kernels.SCRATCH.free.values()), "no temporary went back to the pool"
    for again in firsts[1:]:
        np.testing.assert_array_equal(again, firsts[0])
    for _ in range(2):
        got = conv_kernels.conv2d(x, w, None, (1, 1), pads, (1, 1), 1)
        np.testing.assert_allclose(got[:1], want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(firsts[0][:1], grads(g[:1])[0], rtol=1e-12, atol=1e-12)

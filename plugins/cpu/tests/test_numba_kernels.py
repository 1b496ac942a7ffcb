"""The cpu backend's hand-written numba kernels against numpy float64 references, with a check
that the numba kernel (not the shared numpy kernel) ran."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ember as em

pytest.importorskip("numba", reason="the numba kernels need numba (pip install 'ember-cpu[numba]')")

from ember_conformance import nn_reference as ref  # noqa: E402
from ember_cpu.backend import NATIVE_CALLS  # noqa: E402 - after the skip


def _max_pool_grad_reference(x, g, kernel, stride, padding, dilation):
    """Loop over windows in float64: each window's gradient goes to its first maximum (none when
    the window holds a NaN: its maximum is NaN, which no element equals)."""
    n, c, h, w = x.shape
    (ph, _), (pw, _) = padding
    oh, ow = g.shape[2:]
    grad = np.zeros(x.shape, dtype=np.float64)
    for b, ch, i, j in itertools.product(range(n), range(c), range(oh), range(ow)):
        best, where = None, None
        for u, v in itertools.product(range(kernel[0]), range(kernel[1])):
            y, xx = i * stride[0] - ph + u * dilation[0], j * stride[1] - pw + v * dilation[1]
            inside = 0 <= y < h and 0 <= xx < w
            value = x[b, ch, y, xx] if inside else -np.inf  # padding is -inf
            if best is None or value > best:  # strictly greater: the first maximum wins ties
                best, where = value, ((y, xx) if inside else None)
            if np.isnan(value):
                best, where = np.nan, None
                break
        if where is not None:
            grad[b, ch, where[0], where[1]] += g[b, ch, i, j]
    return grad


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation"),
    [(2, 2, 0, 1), (3, 2, 1, 1), (3, 1, 1, 2), (3, 3, 0, 1), (2, 3, 0, 1)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("hw", [(9, 8), (8, 6)])  # (8, 6) with 2x2 windows: every element covered
def test_max_pool_backward_matches_a_float64_reference(kernel, stride, padding, dilation, dtype, hw):
    gen = np.random.default_rng(0)
    xv = gen.standard_normal((2, 3, *hw)).astype(dtype)
    xv[0, 0, :2, :2] = 1.5  # a tie: the first maximum takes the gradient
    xv[1, 1, :3, :3] = -np.inf  # windows whose maximum is -inf: the first element (not a pad) takes it
    xv[1, 2, 1, 1] = np.nan  # windows holding a NaN: no gradient
    dev = em.Device("cpu").autodiff()
    x = em.tensor(xv, device=dev, requires_grad=True)
    y = em.max_pool(x, kernel, stride=stride, padding=padding, dilation=dilation)
    gv = gen.standard_normal(y.shape).astype(dtype)
    before = NATIVE_CALLS["max_pool_backward"]
    (y * em.tensor(gv, device=dev)).sum().backward()
    assert NATIVE_CALLS["max_pool_backward"] == before + 1, "the numba max-pool backward did not run"
    k, s, d = (kernel,) * 2, (stride,) * 2, (dilation,) * 2
    want = _max_pool_grad_reference(xv.astype(np.float64), gv.astype(np.float64), k, s, ((padding,) * 2,) * 2, d)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-6)


def _col2im_reference(cols, size, kernel, stride, padding, dilation):
    """Loop in float64: column (c, u, v) x (i, j) adds into pixel (i*s - p + u*d, j*s - p + v*d)."""
    n, ckk, _ = cols.shape
    c = ckk // (kernel[0] * kernel[1])
    oh = (size[0] + 2 * padding - dilation * (kernel[0] - 1) - 1) // stride + 1
    ow = (size[1] + 2 * padding - dilation * (kernel[1] - 1) - 1) // stride + 1
    out = np.zeros((n, c) + tuple(size), dtype=np.float64)
    for b, ch, u, v, i, j in itertools.product(
        range(n), range(c), range(kernel[0]), range(kernel[1]), range(oh), range(ow)
    ):
        y, xx = i * stride - padding + u * dilation, j * stride - padding + v * dilation
        if 0 <= y < size[0] and 0 <= xx < size[1]:
            out[b, ch, y, xx] += cols[b, (ch * kernel[0] + u) * kernel[1] + v, i * ow + j]
    return out


@pytest.mark.parametrize(("kernel", "stride", "padding", "dilation"), [((3, 3), 1, 1, 1), ((2, 3), 2, 1, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fold_matches_a_float64_reference(kernel, stride, padding, dilation, dtype):
    gen = np.random.default_rng(1)
    size = (7, 6)
    oh = (size[0] + 2 * padding - dilation * (kernel[0] - 1) - 1) // stride + 1
    ow = (size[1] + 2 * padding - dilation * (kernel[1] - 1) - 1) // stride + 1
    cols = gen.standard_normal((2, 3 * kernel[0] * kernel[1], oh * ow)).astype(dtype)
    before = NATIVE_CALLS["fold"]
    y = em.fold(em.tensor(cols, device="cpu"), size, kernel, stride=stride, padding=padding, dilation=dilation)
    got = y.numpy()
    assert NATIVE_CALLS["fold"] == before + 1, "the numba fold did not run"
    want = _col2im_reference(cols.astype(np.float64), size, kernel, stride, padding, dilation)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _conv_input_grad_reference(g, w, size, stride, padding, groups):
    """Loop in float64: each output gradient flows back to the inputs its window read."""
    n, cout, oh, ow = g.shape
    _, cg, kh, kw = w.shape
    gx = np.zeros((n, cg * groups) + tuple(size), dtype=np.float64)
    for b, co, i, j, ci, u, v in itertools.product(
        range(n), range(cout), range(oh), range(ow), range(cg), range(kh), range(kw)
    ):
        y, xx = i * stride - padding + u, j * stride - padding + v
        if 0 <= y < size[0] and 0 <= xx < size[1]:
            gx[b, (co // (cout // groups)) * cg + ci, y, xx] += w[co, ci, u, v] * g[b, co, i, j]
    return gx


@pytest.mark.parametrize(("stride", "padding", "groups"), [(1, 1, 1), (2, 0, 2)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_input_gradient_runs_the_numba_col2im(stride, padding, groups, dtype):
    gen = np.random.default_rng(2)
    xv = gen.standard_normal((2, 4, 7, 6)).astype(dtype)
    wv = gen.standard_normal((6, 4 // groups, 3, 3)).astype(dtype)
    dev = em.Device("cpu").autodiff()
    x = em.tensor(xv, device=dev, requires_grad=True)
    y = em.conv(x, em.tensor(wv, device=dev), stride=stride, padding=padding, groups=groups)
    gv = gen.standard_normal(y.shape).astype(dtype)
    before = NATIVE_CALLS["conv_transpose"]
    (y * em.tensor(gv, device=dev)).sum().backward()
    assert NATIVE_CALLS["conv_transpose"] == before + 1, "the numba conv_transpose did not run"
    want = _conv_input_grad_reference(gv.astype(np.float64), wv.astype(np.float64), (7, 6), stride, padding, groups)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5, atol=1e-5)


def _layer_norm_reference(x, w, b, g, eps):
    """float64 layer norm over the last axis, and its gradients for x, w and b at cotangent g."""
    return (ref.layer_norm(x, 1, w, b, eps), *ref.layer_norm_grads(g, x, 1, w, eps))


def _layer_norm_step(dtype, shape=(3, 5, 33), eps=1e-5, grads=(True, True, True)):
    gen = np.random.default_rng(3)
    xv = (gen.standard_normal(shape) * 2.0 + 0.5).astype(dtype)
    wv, bv = (gen.standard_normal(shape[-1:]).astype(dtype) for _ in range(2))
    gv = gen.standard_normal(shape).astype(dtype)
    dev = em.Device("cpu").autodiff()
    x, w, b = (em.tensor(v, device=dev, requires_grad=r) for v, r in zip((xv, wv, bv), grads))
    y = em.layer_norm(x, shape[-1], w, b, eps=eps)
    (y * em.tensor(gv, device=dev)).sum().backward()
    got = (y.detach().numpy(),) + tuple(t.grad.numpy() if r else None for t, r in zip((x, w, b), grads))
    want = _layer_norm_reference(*(v.astype(np.float64) for v in (xv, wv, bv, gv)), eps)
    return got, want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("grads", [(True, True, True), (False, True, True), (True, False, True)])
def test_layer_norm_forward_and_gradients_run_the_numba_kernels(dtype, grads):
    before = dict(NATIVE_CALLS)
    got, want = _layer_norm_step(dtype, grads=grads)
    calls = {op: NATIVE_CALLS[op] - before[op] for op in ("layer_norm", "layer_norm_backward", "layer_norm_grads")}
    if grads[1] and grads[2]:  # the forward, then one pass for [gx,] gw and gb
        assert calls == {"layer_norm": 1, "layer_norm_backward": 0, "layer_norm_grads": 1}, calls
    else:  # the forward, the input gradient, and the normalised input for gw when it is wanted
        assert calls == {"layer_norm": 1 + grads[1], "layer_norm_backward": 1, "layer_norm_grads": 0}, calls
    tol = 1e-5 if dtype == np.float32 else 1e-12
    for name, a, b in zip(("y", "grad x", "grad w", "grad b"), got, want):
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=name)


def test_layer_norm_grads_of_many_rows_and_16_bit_floats():
    """W4's (1024, 256) rows (the column sums over many rows), and float16 through numpy in float32."""
    got, want = _layer_norm_step(np.float32, shape=(8, 128, 256))
    for name, a, b in zip(("y", "grad x", "grad w", "grad b"), got, want):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-4, err_msg=name)
    before = NATIVE_CALLS["layer_norm_grads"]
    got, want = _layer_norm_step(np.float16, shape=(4, 16))
    assert NATIVE_CALLS["layer_norm_grads"] == before  # 16-bit: the numpy path
    for name, a, b in zip(("y", "grad x", "grad w", "grad b"), got, want):
        np.testing.assert_allclose(a.astype(np.float64), b, rtol=2e-2, atol=2e-2, err_msg=name)


def test_without_numba_the_numpy_kernels_run(monkeypatch):
    from ember_cpu import backend  # noqa: PLC0415 - the module whose switch the test turns

    monkeypatch.setattr(backend, "NO_FUSION", "numba switched off for this test")
    before = dict(NATIVE_CALLS)
    got, want = _layer_norm_step(np.float64)
    gen = np.random.default_rng(4)
    cols = gen.standard_normal((2, 27, 42))
    folded = em.fold(em.tensor(cols, device="cpu"), (7, 6), 3, padding=1).numpy()
    assert NATIVE_CALLS == before, "a numba kernel ran although numba is switched off"
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(folded, _col2im_reference(cols, (7, 6), (3, 3), 1, 1, 1), rtol=1e-12, atol=1e-12)


def _cross_entropy_reference(x, t, smoothing, ignore):
    """Per-row softmax cross-entropy in float64 (a target equal to ``ignore`` gives 0)."""
    x = x.astype(np.float64)
    out = np.zeros(x.shape[0])
    for r, k in enumerate(t):
        if k == ignore:
            continue
        m = x[r].max()
        m = 0.0 if np.isinf(m) else m
        logp = x[r] - m - np.log(np.exp(x[r] - m).sum())
        out[r] = (1 - smoothing) * -logp[k] - smoothing / x.shape[1] * logp.sum()
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
@pytest.mark.parametrize("ignore", [-100, 3])
def test_cross_entropy_runs_the_numba_kernel(dtype, smoothing, ignore):
    """W2's (128, 10) logits with large, -inf and ignored entries: per-sample losses, the mean and
    its gradient against float64; the numba kernel ran once per forward."""
    gen = np.random.default_rng(7)
    xv = (gen.standard_normal((128, 10)) * 4).astype(dtype)
    xv[0, 2], xv[1, :] = 80.0, -np.inf  # a large logit; a row of -inf (NaN loss, as the numpy kernel)
    tv = gen.integers(0, 10, 128)
    tv[5] = ignore
    dev = em.Device("cpu").autodiff()
    before = NATIVE_CALLS["cross_entropy"]
    per = em.cross_entropy(em.tensor(xv, device=dev), em.tensor(tv, device=dev), ignore_index=ignore,
                           reduction="none", label_smoothing=smoothing).numpy()  # fmt: skip
    assert NATIVE_CALLS["cross_entropy"] == before + 1, "the numba cross-entropy did not run"
    want = _cross_entropy_reference(xv, tv, smoothing, ignore)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    assert per.dtype == dtype and np.isnan(per[1]) == (tv[1] != ignore)
    keep = np.arange(128) != 1
    np.testing.assert_allclose(per[keep], want[keep], rtol=tol, atol=tol)
    # the mean's gradient over the finite rows (the backward rule is core's; the forward feeds it)
    rows = np.flatnonzero(keep)
    x = em.tensor(xv[rows], device=dev, requires_grad=True)
    loss = em.cross_entropy(x, em.tensor(tv[rows], device=dev), ignore_index=ignore, label_smoothing=smoothing)
    loss.backward()
    valid = tv[rows] != ignore
    np.testing.assert_allclose(float(loss.numpy()), want[rows].sum() / valid.sum(), rtol=tol * 10, atol=tol)
    x64 = xv[rows].astype(np.float64)
    p = np.exp(x64 - x64.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    hot = np.eye(10)[np.where(valid, tv[rows], 0)] * (1 - smoothing) + smoothing / 10
    grad = (p - hot) * valid[:, None] / valid.sum()
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=tol * 10, atol=tol)


def test_cross_entropy_of_other_shapes_and_16_bit_floats_runs_the_numpy_kernel():
    """(N, C, d) logits and float16 take the shared kernel, with the same values."""
    gen = np.random.default_rng(8)
    x3 = gen.standard_normal((4, 5, 3)).astype(np.float32)
    t3 = gen.integers(0, 5, (4, 3))
    x16 = gen.standard_normal((6, 5)).astype(np.float16)
    t16 = gen.integers(0, 5, 6)
    before = NATIVE_CALLS["cross_entropy"]
    got3 = em.cross_entropy(em.tensor(x3), em.tensor(t3), reduction="none").numpy()
    got16 = em.cross_entropy(em.tensor(x16), em.tensor(t16), reduction="none").numpy()
    assert NATIVE_CALLS["cross_entropy"] == before
    flat = np.moveaxis(x3, 1, -1).reshape(-1, 5)
    want3 = _cross_entropy_reference(flat, t3.reshape(-1), 0.0, -100).reshape(4, 3)
    np.testing.assert_allclose(got3, want3, rtol=1e-5, atol=1e-6)
    want16 = _cross_entropy_reference(x16, t16, 0.0, -100)
    np.testing.assert_allclose(got16.astype(np.float64), want16, rtol=2e-3, atol=2e-3)

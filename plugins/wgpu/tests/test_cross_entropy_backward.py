"""wgpu's native cross_entropy_backward (kernels/nn.py, one workgroup a row) against a numpy float64
reference: softmax minus the (smoothed) one-hot, ignored rows zero; logits, target and g read in
place through their strides (the forward shares that code: checked here on strided logits too)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember as em
from ember.ops.nn import cross_entropy_backward

RNG = np.random.default_rng(11)


def _reference(g: np.ndarray, x: np.ndarray, t: np.ndarray, smoothing: float, ignore: int) -> np.ndarray:
    """g * (softmax(x) - (1 - smoothing) * onehot(t) - smoothing / C) along axis 1, 0 where t == ignore."""
    x = x.astype(np.float64)
    c = x.shape[1]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    p = e / e.sum(axis=1, keepdims=True)
    valid = t != ignore
    hot = (np.expand_dims(np.where(valid, t, 0), 1) == np.arange(c).reshape((1, c) + (1,) * (x.ndim - 2))) * 1.0
    hot = hot * (1.0 - smoothing) + smoothing / c
    return np.expand_dims(np.where(valid, g.astype(np.float64), 0.0), 1) * (p - hot)


def _case(shape: tuple[int, ...], ignore: int = -100) -> tuple[np.ndarray, np.ndarray]:
    x = (RNG.standard_normal(shape) * 3).astype(np.float32)
    t = RNG.integers(0, shape[1], (shape[0],) + shape[2:])
    t.flat[:: max(t.size // 3, 1)] = ignore  # some ignored rows, the first among them
    return x, t


def _run(dev: Any, g: Any, x: np.ndarray, t: np.ndarray, **kw: Any) -> np.ndarray:
    be = dev.backend
    out = be.cross_entropy_backward(g, be.from_numpy(x), be.from_numpy(t), **kw)
    return be.to_numpy(out)


def _forward_reference(x: np.ndarray, t: np.ndarray, smoothing: float, ignore: int) -> np.ndarray:
    x = x.astype(np.float64)
    c = x.shape[1]
    logp = x - x.max(axis=1, keepdims=True)
    logp = logp - np.log(np.exp(logp).sum(axis=1, keepdims=True))
    valid = t != ignore
    picked = np.take_along_axis(logp, np.expand_dims(np.where(valid, t, 0), 1), 1)[:, 0]
    loss = (1.0 - smoothing) * -picked - smoothing / c * logp.sum(axis=1)
    return np.where(valid, loss, 0.0)


def _views(be: Any, x: np.ndarray) -> list[tuple[str, Any, np.ndarray]]:
    """(name, handle, its values) of logits views over other layouts: class axis transposed in
    memory, sliced with an offset, channels-last (N, H, W, C) memory seen as (N, C, H, W)."""
    n, c = x.shape[:2]
    out = []
    if x.ndim == 2:
        xt = be.from_numpy(np.ascontiguousarray(x.T)).permute((1, 0))
        wide = np.zeros((n + 1, c + 3), np.float32)
        wide[1:, 2 : 2 + c] = x
        sliced = be.from_numpy(wide).with_layout((n, c), (c + 3, 1), c + 3 + 2)
        out += [("transposed", xt, x), ("sliced", sliced, x)]
    else:
        last = be.from_numpy(np.ascontiguousarray(np.moveaxis(x, 1, -1))).permute(
            (0, x.ndim - 1, *range(1, x.ndim - 1))
        )
        out += [("contiguous", be.from_numpy(x), x), ("channels_last", last, x)]
    return out


@pytest.mark.parametrize("shape", [(6, 5), (4, 3, 5, 2), (3, 700)], ids=["2d", "4d", "wide"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_matches_reference(dev: Any, shape: tuple[int, ...], smoothing: float) -> None:
    """2-D and (N, C, H, W) logits, a class count above the workgroup's 256, with and without smoothing:
    one dispatch (no copy of the logits to put the class axis last)."""
    x, t = _case(shape, ignore=-1)
    g = RNG.standard_normal(t.shape).astype(np.float32)
    be = dev.backend
    gh, xh, th = be.from_numpy(g), be.from_numpy(x), be.from_numpy(t)
    before = be.rt.dispatches
    out = be.cross_entropy_backward(gh, xh, th, label_smoothing=smoothing, ignore_index=-1)
    assert be.rt.dispatches == before + 1
    got = be.to_numpy(out)
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, _reference(g, x, t, smoothing, -1), rtol=1e-5, atol=1e-6)
    assert not got[(0, slice(None)) + (0,) * (x.ndim - 2)].any()  # the first row, ignored


def test_one_kernel_and_broadcast_g_not_copied(dev: Any) -> None:
    """A broadcast g (stride 0, as autodiff's mean gives) costs one dispatch in all: the row kernel."""
    be, rt = dev.backend, dev.backend.rt
    x, t = _case((8, 10))
    g = be.from_numpy(np.array([0.125], np.float32)).expand((8,))
    assert g.strides == (0,)
    xh, th = be.from_numpy(x), be.from_numpy(t)
    before = rt.dispatches
    out = be.cross_entropy_backward(g, xh, th, label_smoothing=0.0, ignore_index=-100)
    assert rt.dispatches == before + 1
    assert ("cross_entropy_backward", "float32", "int64") in rt.kernels  # the native kernel, compiled
    np.testing.assert_allclose(be.to_numpy(out), _reference(np.full(8, 0.125), x, t, 0.0, -100), rtol=1e-5, atol=1e-7)


def test_strided_and_flipped_g(dev: Any) -> None:
    """g every other element of a buffer (offset 1), and flipped: read in place, one dispatch."""
    be, rt = dev.backend, dev.backend.rt
    x, t = _case((5, 9))
    base = RNG.standard_normal(11).astype(np.float32)
    xh, th, bh = be.from_numpy(x), be.from_numpy(t), be.from_numpy(base)
    strided = bh.with_layout((5,), (2,), 1)
    flipped = bh.with_layout((5,), (-1,), 10)
    for view, values in ((strided, base[1::2]), (flipped, base[::-1][:5])):
        before = rt.dispatches
        out = be.cross_entropy_backward(view, xh, th, label_smoothing=0.1, ignore_index=-100)
        assert rt.dispatches == before + 1
        np.testing.assert_allclose(be.to_numpy(out), _reference(values, x, t, 0.1, -100), rtol=1e-5, atol=1e-6)


def test_spatial_g_broadcast_over_spatial_axes(dev: Any) -> None:
    """(N, H, W) g broadcast from (N, 1, 1): rows split (N, H * W), read in place, one dispatch."""
    be = dev.backend
    x, t = _case((2, 4, 3, 3))
    g = RNG.standard_normal((2, 1, 1)).astype(np.float32)
    gh, xh, th = be.from_numpy(g).expand((2, 3, 3)), be.from_numpy(x), be.from_numpy(t)
    before = be.rt.dispatches
    out = be.cross_entropy_backward(gh, xh, th, label_smoothing=0.0, ignore_index=-100)
    assert be.rt.dispatches == before + 1
    want = _reference(np.broadcast_to(g, (2, 3, 3)), x, t, 0.0, -100)
    np.testing.assert_allclose(be.to_numpy(out), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(5, 300), (2, 3, 4, 5)], ids=["2d", "4d"])
def test_strided_logits_read_in_place(dev: Any, shape: tuple[int, ...]) -> None:
    """Logits views of other layouts, forward and backward: right, and no copy (one dispatch each)."""
    be = dev.backend
    x, t = _case(shape, ignore=-1)
    g = RNG.standard_normal(t.shape).astype(np.float32)
    gh, th = be.from_numpy(g), be.from_numpy(t)
    for name, xh, values in _views(be, x):
        before = be.rt.dispatches
        grad = be.cross_entropy_backward(gh, xh, th, label_smoothing=0.1, ignore_index=-1)
        loss = be.cross_entropy(xh, th, label_smoothing=0.1, ignore_index=-1)
        assert be.rt.dispatches == before + 2, name
        want = _reference(g, values, t, 0.1, -1)
        np.testing.assert_allclose(be.to_numpy(grad), want, rtol=1e-5, atol=1e-6, err_msg=name)
        want = _forward_reference(values, t, 0.1, -1)
        np.testing.assert_allclose(be.to_numpy(loss), want, rtol=1e-5, atol=1e-5, err_msg=name)


def test_rows_that_do_not_collapse_are_copied(dev: Any) -> None:
    """5-D logits sliced so that their rows' axes fold to no fewer than three: a C-order copy first."""
    be = dev.backend
    full = RNG.standard_normal((2, 3, 2, 4, 3)).astype(np.float32)
    x = full[:, :, :, 1:3]
    t = RNG.integers(0, 3, (2, 2, 2, 3))
    g = RNG.standard_normal(t.shape).astype(np.float32)
    xh = be.from_numpy(full).with_layout(x.shape, (72, 24, 12, 3, 1), 3)
    gh, th = be.from_numpy(g), be.from_numpy(t)
    before = be.rt.dispatches
    grad = be.cross_entropy_backward(gh, xh, th, label_smoothing=0.0, ignore_index=-100)
    assert be.rt.dispatches == before + 2  # the copy, the kernel
    np.testing.assert_allclose(be.to_numpy(grad), _reference(g, x, t, 0.0, -100), rtol=1e-5, atol=1e-6)
    loss = be.cross_entropy(xh, th, label_smoothing=0.0, ignore_index=-100)
    np.testing.assert_allclose(be.to_numpy(loss), _forward_reference(x, t, 0.0, -100), rtol=1e-5, atol=1e-5)


def test_out_of_range_class_has_no_one_hot(dev: Any) -> None:
    """A class outside [0, C) (unchecked here) is no class: g * softmax, as the composite's one-hot."""
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    t = np.array([7, -5, 2**32 + 1])
    g = np.ones(3, np.float32)
    got = _run(dev, dev.backend.from_numpy(g), x, t, label_smoothing=0.0, ignore_index=-100)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_float16(dev: Any) -> None:
    """float16 logits and g (f16 storage where the adapter has it, else f32 rounded): within half precision."""
    be = dev.backend
    if em.float16 not in be.supported_dtypes:
        pytest.skip("no float16 on this adapter")
    x, t = _case((4, 300))
    x16 = x.astype(np.float16)
    g = RNG.standard_normal(4).astype(np.float16)
    out = be.cross_entropy_backward(
        be.from_numpy(g), be.from_numpy(x16), be.from_numpy(t), label_smoothing=0.0, ignore_index=-100
    )
    got = be.to_numpy(out)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, _reference(g, x16, t, 0.0, -100), rtol=2e-3, atol=2e-4)


def test_autodiff_uses_native_kernel(dev: Any) -> None:
    """cross_entropy(..., reduction='mean')'s gradient through ember's autodiff runs the native kernel."""
    be = dev.backend
    x, t = _case((6, 7))
    ad = dev.autodiff()
    xt = em.tensor(x, device=ad, requires_grad=True)
    tt = em.tensor(t, device=ad)
    loss = em.cross_entropy(xt, tt)
    kernels = be.rt.kernels
    kernels.pop(("cross_entropy_backward", "float32", "int64"), None)
    loss.backward()
    assert ("cross_entropy_backward", "float32", "int64") in kernels
    valid = t != -100
    g = np.where(valid, 1.0 / valid.sum(), 0.0)
    np.testing.assert_allclose(xt.grad.numpy(), _reference(g, x, t, 0.0, -100), rtol=1e-5, atol=1e-7)
    direct = cross_entropy_backward(em.tensor(g.astype(np.float32), device=ad), xt.detach(), tt)
    np.testing.assert_allclose(direct.numpy(), _reference(g, x, t, 0.0, -100), rtol=1e-5, atol=1e-7)

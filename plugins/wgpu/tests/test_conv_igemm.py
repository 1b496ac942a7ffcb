"""Implicit-GEMM conv and conv_transpose (kernels/conv.py) in their layouts: images folded into the
GEMM's columns, tap-major rows where a k-step divides the channels per group (``inner``), unit-stride
transposes, and column runs split over launches; against core's unfold + matmul composite on the cpu
device in float64 (another algorithm)."""

from __future__ import annotations

import numpy as np
import pytest

from ember import dtypes as D
from ember_wgpu.kernels import conv

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _no_autotune(monkeypatch):
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")


def _reference(xs, ws, stride, pad, dil, groups):
    """(x, w, bias, output, output gradient g, x's gradient) from the cpu device in float64."""
    import ember as em

    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    bias = RNG.standard_normal(ws[0]).astype(np.float32)
    cpu = em.Device.cpu().autodiff()
    xc = em.tensor(x.astype(np.float64), device=cpu, requires_grad=True)
    wc, bc = em.tensor(w.astype(np.float64), device=cpu), em.tensor(bias.astype(np.float64), device=cpu)
    want = em.conv(xc, wc, bc, stride=stride, padding=pad, dilation=dil, groups=groups)
    g = RNG.standard_normal(want.shape).astype(np.float32)
    (want * em.tensor(g.astype(np.float64), device=cpu)).sum().backward()
    return x, w, bias, want.numpy(), g, xc.grad.numpy()


CASES = [
    # x shape, w shape, stride, padding, dilation, groups: inner (16 channels a group), W3's layout
    ((3, 16, 7, 6), (8, 16, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    # inner over two groups, stride 2 (the transpose divides by it), dilation 2
    ((2, 32, 9, 8), (16, 16, 3, 3), (2, 2), (2, 1), (2, 1), 2),
    # tap-major rows in both kernels over two groups, the transpose dividing by a stride of 2
    ((2, 32, 7, 6), (32, 16, 3, 3), (2, 1), (1, 1), (1, 1), 2),
    # 64 output channels a group (the prefetching 64-row tile), a 1x1 kernel (one tap: not inner)
    ((2, 8, 5, 5), (64, 8, 1, 1), (1, 1), (0, 0), (1, 1), 1),
    # one input channel (W3's first layer: 9 rows of K, not inner), 3-D
    ((2, 1, 10, 9), (32, 1, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((2, 8, 4, 5, 3), (4, 8, 2, 3, 2), (1, 2, 1), (1, 0, 1), (1, 1, 2), 1),
]


def _launched(rt, monkeypatch):
    """The names of the kernels ``rt`` dispatches from now on."""
    names = []
    dispatch = rt.dispatch
    monkeypatch.setattr(
        rt,
        "dispatch",
        lambda pipe, params, bufs, groups, name="": (names.append(name), dispatch(pipe, params, bufs, groups, name))[1],
    )
    return names


@pytest.mark.parametrize("xs, ws, stride, pad, dil, groups", CASES)
def test_conv_and_input_gradient_in_the_default_tilings(rt, monkeypatch, xs, ws, stride, pad, dil, groups):
    x, w, bias, want, g, gx_want = _reference(xs, ws, stride, pad, dil, groups)
    pads = tuple((p, p) for p in pad)
    up = lambda a: rt.upload(a, D.float32)  # noqa: E731
    rt.plans.clear()
    names = _launched(rt, monkeypatch)
    got = rt.read([conv.conv(rt, up(x), up(w), up(bias), stride, pads, dil, groups)])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    gx = conv.conv_transpose(rt, up(g), up(w), None, xs[2:], stride, pads, dil, groups)
    np.testing.assert_allclose(rt.read([gx])[0], gx_want, rtol=1e-4, atol=1e-4)
    assert {"conv_igemm", "transpose_igemm"} <= set(names)  # the implicit kernels ran
    cg, kv, m = xs[1] // groups, int(np.prod(ws[2:])), ws[0] // groups
    bk = conv._conv_config(rt, m, 1 << 20, cg * kv, "float32").bk
    (fwd,) = [p for k, p in rt.plans.items() if k[0] == "conv"]
    assert fwd.inner == (kv > 1 and cg % bk == 0)
    cg_t, m_t = ws[0] // groups, ws[1]  # the transpose's channels per group and rows
    bk_t = conv._conv_config(rt, m_t, 1 << 20, cg_t * kv, "float32").bk
    (back,) = [p for k, p in rt.plans.items() if k[0] == "conv_transpose"]
    assert back.inner == (kv > 1 and cg_t % bk_t == 0)


def _same_padded_plans(rt, xs, ws):
    """conv and its input gradient of a 3x3 'same' conv (stride 1) checked against the reference;
    -> the two plans made (``rt.plans`` cleared first)."""
    x, w, bias, want, g, gx_want = _reference(xs, ws, (1, 1), (1, 1), (1, 1), 1)
    up = lambda a: rt.upload(a, D.float32)  # noqa: E731
    pads = ((1, 1), (1, 1))
    rt.plans.clear()
    got = rt.read([conv.conv(rt, up(x), up(w), up(bias), (1, 1), pads, (1, 1), 1)])[0]
    gx = rt.read([conv.conv_transpose(rt, up(g), up(w), None, xs[2:], (1, 1), pads, (1, 1), 1)])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gx, gx_want, rtol=1e-4, atol=1e-4)
    return [p for p in rt.plans.values() if isinstance(p, conv._ConvPlan)]


def test_tap_major_rows_and_unit_strides_are_taken_where_they_apply(rt):
    """W3's second layer at a small batch: both kernels read tap-major rows; the transpose of a
    stride-1 conv divides by no stride."""
    plans = _same_padded_plans(rt, (2, 32, 14, 14), (64, 32, 3, 3))
    assert len(plans) == 2 and all(p.inner for p in plans)
    assert any(k[:2] == ("conv_igemm", "transpose") and k[7] and k[8] for k in rt.kernels)  # inner, unit


def test_columns_beyond_one_grid_axis_run_as_more_launches(rt, monkeypatch):
    """A batch whose column tiles pass the grid's limit runs as runs of whole images, each launch
    writing its images' outputs (here a limit of 2 tiles: 128-wide tiles, 80 positions an image)."""
    monkeypatch.setattr(conv.mm, "_MAX_Z", 2)
    plans = _same_padded_plans(rt, (5, 16, 8, 10), (8, 16, 3, 3))
    assert [len(p.launches) for p in plans] == [2, 2]  # 3 images, then 2


def test_a_strided_input_view(rt):
    """x read through its strides (a channel slice of a larger tensor, images a whole block apart)."""
    xs, ws = (3, 16, 6, 7), (8, 16, 3, 3)
    x, w, bias, want, g, _ = _reference(xs, ws, (1, 1), (1, 1), (1, 1), 1)
    big = np.zeros((3, 24, 6, 7), np.float32)
    big[:, 4:20] = x
    base = rt.upload(big, D.float32)
    view = base.with_layout(xs, (24 * 42, 42, 7, 1), 4 * 42)
    got = rt.read([conv.conv(rt, view, rt.upload(w, D.float32), rt.upload(bias, D.float32), (1, 1),
                             ((1, 1), (1, 1)), (1, 1), 1)])[0]  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_the_weights_copy_outlives_its_dispatches_under_exclusive(dev, rt):
    """The conv kernels read a copy of the weights (tap-major rows, or the transpose's layout) that the
    launch function dropped before recording its dispatches: under ``exclusive`` with the batch
    submitted after every dispatch (as a GPU adapter's chunks do) its driver buffer was destroyed at
    once and the dispatch bound a destroyed buffer (wgpu's validation error; benchmarks.memory on the
    H100). Now it lives until its dispatches are recorded; the results against the reference."""
    import ember as em

    before = dev.memory.strategy
    every, groups = rt.submit_every, rt.submit_groups
    try:
        em.Device(str(dev), memory="exclusive")
        rt.set_submit_every(1, 0)
        plans = _same_padded_plans(rt, (2, 32, 14, 14), (64, 32, 3, 3))
        assert len(plans) == 2 and all(p.inner for p in plans)  # both kernels read a copy of the weights
    finally:
        rt.set_submit_every(every, groups)
        dev.synchronize()
        em.Device(str(dev), memory=before)

"""ember-cuda's 2-D convolution and max-pool kernels (conv.py) against the cpu backend in float64
(whose kernels the conformance suite holds to direct numpy loops): forward, input and weight
gradients, for each layout ``conv.OPTIONS`` selects, with the launch counters showing the CUDA
kernels ran. ``test_conv_without_gpu.py`` runs the same kernels on the CPU against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ember_cuda import conv, runtime

import ember as em

pytestmark = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)

CONV_CASES = [
    # (x shape, w shape, conv keyword arguments)
    ((4, 3, 11, 9), (5, 3, 3, 3), {"padding": 1}),
    ((2, 2, 12, 10), (4, 2, 3, 2), {"stride": (2, 1), "padding": (1, 0), "dilation": (1, 2)}),
    ((3, 4, 8, 8), (6, 4, 2, 4), {"padding": "same"}),  # asymmetric padding (an even kernel)
    ((64, 1, 28, 28), (32, 1, 3, 3), {"padding": 1}),  # W3's first layer
    ((16, 32, 14, 14), (64, 32, 3, 3), {"padding": 1}),  # W3's second layer
    ((2, 3, 11, 10), (4, 3, 5, 5), {"stride": 2, "padding": 2}),
    ((3, 16, 9, 10), (72, 16, 3, 3), {"padding": 1}),  # implicit GEMM: two tiles of rows, 8 channels a k-step
    ((2, 24, 11, 9), (40, 24, 3, 3), {"stride": 2, "padding": 1}),  # the transpose's exact division
]
_COLUMNS = {**conv.OPTIONS, "implicit": False}  # im2col + cuBLAS
LAYOUTS = {
    "implicit": {**conv.OPTIONS, "implicit": True},  # the default
    "columns": _COLUMNS,
    "by-sample": {**_COLUMNS, "forward_by_sample": 0, "transpose_by_sample": 0, "wgrad_partials": 0.25},
    "partials": {**_COLUMNS, "forward_by_sample": 0, "transpose_by_sample": 0, "wgrad_partials": 1e9},
    "one-gemm": {**_COLUMNS, "forward_by_sample": conv.NEVER, "transpose_by_sample": conv.NEVER, "wgrad_partials": 0},
}


def _pair(dtype: str, xs: tuple[int, ...], ws: tuple[int, ...], seed: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s).astype(dtype) for s in (xs, ws, ws[:1]))


def _conv_step(device: str, x: np.ndarray, w: np.ndarray, b: np.ndarray, g: np.ndarray, kw: dict) -> list:
    device = em.Device(device).autodiff()
    tx, tw, tb = (em.tensor(v, device=device).requires_grad_() for v in (x, w, b))
    y = em.conv(tx, tw, tb, **kw)
    (y * em.tensor(g, device=device)).sum().backward()
    return [y.numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("xs", "ws", "kw"), CONV_CASES)
def test_conv_forward_and_gradients_match_float64(dtype, xs, ws, kw, layout, monkeypatch):
    for k, v in LAYOUTS[layout].items():
        monkeypatch.setitem(conv.OPTIONS, k, v)
    x, w, b = _pair(dtype, xs, ws, sum(xs) + sum(ws))
    y64 = em.conv(
        em.tensor(x.astype(np.float64)), em.tensor(w.astype(np.float64)), em.tensor(b.astype(np.float64)), **kw
    )
    g = np.random.default_rng(1).standard_normal(y64.shape).astype(dtype)
    before = dict(conv.CALLS)
    got = _conv_step("cuda:0", x, w, b, g, kw)
    ran = {k: conv.CALLS[k] - before.get(k, 0) for k in conv.CALLS}
    ran = {k: v for k, v in ran.items() if v}
    if layout == "implicit":  # a kernel a convolution; the weight gradient of few columns by partials
        implicit_wgrad = ws[1] * ws[2] * ws[3] >= conv.OPTIONS["implicit_wgrad_columns"]
        assert ran.get("igemm_conv") == 1 and ran.get("igemm_transpose") == 1, ran
        assert ran.get("igemm_wgrad", 0) == int(implicit_wgrad) and ran.get("im2col", 0) == int(not implicit_wgrad)
        assert "col2im" not in ran, ran
    else:
        _columns_ran(ran, y64.shape, ws)
    want = _conv_step("cpu", *(v.astype(np.float64) for v in (x, w, b, g)), kw)
    tol = 2e-5 if dtype == "float32" else 1e-12
    for name, a, e in zip(("y", "dx", "dw", "db"), got, want):
        assert a.dtype == np.dtype(dtype), name
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol * float(np.abs(e).max()), err_msg=name)


def _columns_ran(ran: dict, shape: tuple[int, ...], ws: tuple[int, ...]) -> None:
    # forward and weight gradient: an im2col each; input gradient: col2im; a transpose for each of the
    # forward's y, the input gradient's g and the weight gradient's g that is not done by sample
    length = math.prod(shape[2:])
    forward, transpose = (length >= conv.OPTIONS[k] for k in ("forward_by_sample", "transpose_by_sample"))
    partials = ws[1] * ws[2] * ws[3] <= conv.OPTIONS["wgrad_partials"] * length
    swaps = (not forward) + (not transpose) + (not partials)
    assert ran.get("im2col") == 2 and ran.get("col2im") == 1 and ran.get("swap01", 0) == swaps, ran
    assert ran.get("pack_weight", 0) == int(forward), ran


POOL_CASES = [
    ((2, 3, 8, 8), {"kernel_size": 2}),
    ((1, 2, 7, 5), {"kernel_size": 3, "stride": 2, "padding": 1}),  # overlapping windows, padding
    ((2, 2, 9, 10), {"kernel_size": (2, 3), "stride": (2, 1), "dilation": (2, 1)}),
    ((2, 2, 9, 7), {"kernel_size": 2}),  # tiled, a row and a column past the last window
    ((2, 2, 7, 8), {"kernel_size": 3, "padding": 1}),  # tiled with padding
    ((64, 32, 28, 28), {"kernel_size": 2}),  # W3's first pool
]


@pytest.mark.parametrize(("shape", "kw"), POOL_CASES)
def test_max_pool_and_its_gradient_route_to_the_first_maximum(shape, kw):
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-3, 4, shape).astype(np.float32)  # many ties: the first maximum takes the gradient
    x.reshape(-1)[::97] = np.nan  # a NaN wins its window and takes no gradient (NaN != NaN)
    g = rng.standard_normal(em.max_pool(em.tensor(x), **kw).shape).astype(np.float32)
    out = {}
    for device in ("cuda:0", "cpu"):
        before = dict(conv.CALLS)
        t = em.tensor(x, device=em.Device(device).autodiff()).requires_grad_()
        y = em.max_pool(t, **kw)
        (y * em.tensor(g, device=t.device)).sum().backward()
        out[device] = (y.numpy(), t.grad.numpy())
        if device == "cuda:0":
            assert conv.CALLS["max_pool"] == before.get("max_pool", 0) + 1
            assert conv.CALLS["max_pool_backward"] == before.get("max_pool_backward", 0) + 1
    np.testing.assert_array_equal(out["cuda:0"][0], out["cpu"][0])
    np.testing.assert_allclose(out["cuda:0"][1], out["cpu"][1], rtol=1e-6, atol=1e-6)


def test_other_ranks_and_groups_take_the_shared_kernels():
    x = np.random.default_rng(3).standard_normal((2, 4, 9)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((4, 2, 3)).astype(np.float32)
    before = dict(conv.CALLS)
    got = em.conv(em.tensor(x, device="cuda:0"), em.tensor(w, device="cuda:0"), groups=2).numpy()
    assert dict(conv.CALLS) == before, "a grouped 1-D convolution ran the 2-D kernels"
    want = em.conv(em.tensor(x.astype(np.float64)), em.tensor(w.astype(np.float64)), groups=2).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)

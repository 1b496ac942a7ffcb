"""The kernels of window.py and conv.py against numpy float64 references, in both index widths: the
window kernels (max-pool gradient by window or by input, unfold, fold, pooling), the implicit-GEMM
conv and its input gradient over several tilings, and the magic-number division both use."""

from __future__ import annotations

import itertools

import conv_reference as ref
import numpy as np
import pytest

import ember as em
from ember_opencl import conv, window
from ember_opencl.gemm_source import Tiling, magic
from ember_opencl.matmul import TILINGS

RNG = np.random.default_rng(5)


def _up(rt, arr):
    return rt.upload(np.ascontiguousarray(arr), em.dtypes.as_dtype(arr.dtype))


def test_magic_division_is_exact():
    """floor(x / d) == (mul_hi(x, m) + x) >> s for x < 2**31: small, power-of-two and large divisors."""
    divisors = list(range(1, 200)) + [2**k + e for k in range(2, 31) for e in (-1, 0, 1)]
    divisors += [int(d) for d in RNG.integers(1, 2**31, 300)]
    for d in divisors:
        m, s = magic(d)
        assert 0 < m < 2**32
        x = np.concatenate([RNG.integers(0, 2**31, 4000), np.arange(2000), [2**31 - 1, d - 1, d, d + 1]])
        x = x[(x >= 0) & (x < 2**31)].astype(np.uint64)
        q = (((x * np.uint64(m)) >> np.uint64(32)) + x) >> np.uint64(s)
        np.testing.assert_array_equal(q, x // np.uint64(d), err_msg=f"divisor {d}")


def _windows(shape, kernel, stride, pads, dil):
    blocks = [
        (s + lo + hi - d * (k - 1) - 1) // st + 1 for s, (lo, hi), k, st, d in zip(shape, pads, kernel, stride, dil)
    ]
    return blocks, list(itertools.product(*[range(b) for b in blocks]))


def _pool_grad_ref(x, g, kernel, stride, pads, dil):
    """numpy float64: each window's gradient goes to its first maximum (padding is -inf; none on NaN)."""
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    out = np.zeros(x.shape)
    blocks, wins = _windows(x.shape[2:], kernel, stride, pads, dil)
    for n, c in np.ndindex(*x.shape[:2]):
        for b in wins:
            taps = []
            for k in itertools.product(*[range(kk) for kk in kernel]):
                p = tuple(bb * s + kk * d - lo for bb, kk, s, d, (lo, _) in zip(b, k, stride, dil, pads))
                inside = all(0 <= q < sz for q, sz in zip(p, x.shape[2:]))
                taps.append((x64[(n, c) + p] if inside else -np.inf, p if inside else None))
            best = np.nan if any(np.isnan(v) for v, _ in taps) else max(v for v, _ in taps)
            for v, p in taps:
                if v == best:
                    if p is not None:
                        out[(n, c) + p] += g64[(n, c) + b]
                    break
    return out


POOLS = [  # x shape, kernel, stride, pads, dilation, which kernel runs
    ((2, 3, 9, 7), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), "max_pool_backward_tiled"),  # past the last window
    ((2, 2, 8, 8), (3, 2), (3, 2), ((1, 1), (1, 1)), (1, 1), "max_pool_backward_tiled"),  # padded windows
    ((2, 2, 11), (3,), (3,), ((2, 0),), (1,), "max_pool_backward_tiled"),
    ((1, 2, 5, 4, 6), (2, 2, 3), (2, 2, 3), ((0, 0), (1, 1), (0, 0)), (1, 1, 1), "max_pool_backward_tiled"),
    ((2, 3, 9, 7), (3, 3), (2, 1), ((1, 1), (1, 1)), (1, 1), "max_pool_backward"),  # overlapping windows
    ((2, 2, 10, 9), (2, 2), (2, 2), ((0, 0), (0, 0)), (2, 1), "max_pool_backward"),  # dilated
]


@pytest.mark.parametrize("index", ["int", "long"])
@pytest.mark.parametrize("shape, kernel, stride, pads, dil, kind", POOLS)
def test_max_pool_backward(dev, monkeypatch, shape, kernel, stride, pads, dil, kind, index):
    """Ties go to the window's first maximum, a NaN window routes nothing; x read through a transposed
    view. ``kind`` is the kernel that must have run (a thread per window when windows tile the input)."""
    rt = dev.backend.rt
    monkeypatch.setattr(window, "_index", lambda *extents: index)
    x = RNG.integers(-3, 4, shape).astype(np.float32)  # many ties
    x.reshape(-1)[5] = np.nan
    xt = _up(rt, np.swapaxes(x, 0, 1).copy()).permute((1, 0) + tuple(range(2, x.ndim)))
    y = window.max_pool(rt, xt, kernel, stride, pads, dil)
    g = RNG.standard_normal(y.shape).astype(np.float32)
    before = window.CALLS[kind]
    got = dev.backend.to_numpy(window.max_pool_backward(rt, _up(rt, g), xt, kernel, stride, pads, dil))
    assert window.CALLS[kind] == before + 1
    np.testing.assert_allclose(got, _pool_grad_ref(x, g, kernel, stride, pads, dil), rtol=1e-6, atol=1e-6)
    assert ("window", kind, "float32", len(kernel), index) in rt._kernels


def test_tiles_needs_disjoint_windows():
    assert window.tiles((2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1))
    assert not window.tiles((2, 2), (2, 1), ((0, 0), (0, 0)), (1, 1))  # overlap
    assert not window.tiles((2, 2), (2, 2), ((0, 0), (0, 0)), (1, 2))  # dilated
    assert not window.tiles((2,), (2,), ((2, 0),), (1,))  # a window of padding only


def _unfold_ref(x, kernel, stride, pads, dil, value):
    n, c = x.shape[:2]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(pads), constant_values=value)
    blocks, wins = _windows(x.shape[2:], kernel, stride, pads, dil)
    taps = list(itertools.product(*[range(k) for k in kernel]))
    out = np.zeros((n, c, len(taps), len(wins)))
    for j, b in enumerate(wins):
        for t, k in enumerate(taps):
            p = tuple(bb * s + kk * d for bb, kk, s, d in zip(b, k, stride, dil))
            out[:, :, t, j] = xp[(slice(None), slice(None)) + p]
    return out.reshape(n, c * len(taps), len(wins))


@pytest.mark.parametrize("index", ["int", "long"])
@pytest.mark.parametrize(
    "shape, kernel, stride, pads, dil",
    [((2, 3, 9, 7), (3, 2), (2, 1), ((1, 2), (0, 1)), (1, 2)), ((2, 2, 12), (3,), (2,), ((1, 1),), (1,))],
)
def test_unfold_fold_pool(dev, monkeypatch, shape, kernel, stride, pads, dil, index):
    """unfold (pad value 0.5), its adjoint fold, and max / avg pooling in both index widths."""
    rt = dev.backend.rt
    monkeypatch.setattr(window, "_index", lambda *extents: index)
    x = RNG.standard_normal(shape).astype(np.float32)
    cols = window.unfold(rt, _up(rt, x), kernel, stride, pads, dil, 0.5)
    want = _unfold_ref(x, kernel, stride, pads, dil, 0.5)
    np.testing.assert_allclose(dev.backend.to_numpy(cols), want, rtol=1e-6, atol=1e-6)
    # fold is unfold's adjoint: <unfold(x), c> == <x, fold(c)> (pad value 0)
    c = RNG.standard_normal(want.shape).astype(np.float32)
    folded = dev.backend.to_numpy(window.fold(rt, _up(rt, c), shape[2:], kernel, stride, pads, dil)).astype(np.float64)
    lhs = (_unfold_ref(x, kernel, stride, pads, dil, 0.0) * c).sum()
    np.testing.assert_allclose((x.astype(np.float64) * folded).sum(), lhs, rtol=1e-4)
    ref = _unfold_ref(x, kernel, stride, pads, dil, -np.inf).reshape(shape[0], shape[1], -1, want.shape[-1])
    got = dev.backend.to_numpy(window.max_pool(rt, _up(rt, x), kernel, stride, pads, dil))
    np.testing.assert_allclose(got.reshape(ref.shape[0], ref.shape[1], -1), ref.max(axis=2), rtol=1e-6)
    ones = (1,) * len(kernel)
    if dil == ones:
        divisor = [np.full(b, float(kernel[d])) for d, b in enumerate(got.shape[2:])]
        avg = dev.backend.to_numpy(window.avg_pool(rt, _up(rt, x), kernel, stride, pads, divisor))
        zero = _unfold_ref(x, kernel, stride, pads, dil, 0.0).reshape(ref.shape)
        np.testing.assert_allclose(avg.reshape(ref.shape[0], ref.shape[1], -1), zero.mean(axis=2), rtol=1e-5)


# -- implicit-GEMM conv: the images of the batch as GEMM columns ---------------------------------
IGEMM_TILINGS = {
    "c4db-64": Tiling(64, 128, 16, 8, 8, vw=4, chunk=4, db=True),  # the column part hoisted
    "c4db-64-rp": conv._GPU_CONV_TILINGS[2][1],  # W3's conv2 tile on GPUs: k-step 8, register prefetch
    "rows16": Tiling(16, 128, 16, 4, 8, vw=4, chunk=4, db=True),  # 64 work items, 128 columns: not hoisted
    "odd_rp": TILINGS["odd_rp"],  # register prefetch, 2-wide A loads
    "tiny": TILINGS["tiny"],  # chunk 1: scalar stores
    "narrow": conv._GPU_NARROW_TILINGS[-1][1],  # a weight gradient of few columns (W3's first layer)
}


@pytest.mark.parametrize("index", ["int", "long"])
@pytest.mark.parametrize("tiling", list(IGEMM_TILINGS))
@pytest.mark.parametrize("cin, cout, groups", [(5, 6, 1), (32, 16, 2)])
def test_implicit_conv_batch_as_columns(dev, monkeypatch, cin, cout, groups, tiling, index):
    """conv (with bias) and its input gradient (conv_transpose) against numpy float64: 2-D with stride,
    dilation and uneven padding, L = 5 * 4 positions per image (column tiles straddle images; float4
    stores only where four columns are adjacent), input through a transposed view. 16 channels per
    group (both GEMMs' rows) take the tap-major rows (a k-step's rows share one tap), 5 and 3 not."""
    rt = dev.backend.rt
    monkeypatch.setattr(conv, "_index", lambda *extents: index)
    t = IGEMM_TILINGS[tiling]
    x = RNG.standard_normal((3, cin, 9, 8)).astype(np.float32)
    w = RNG.standard_normal((cout, cin // groups, 3, 2)).astype(np.float32)
    bias = RNG.standard_normal(cout).astype(np.float32)
    stride, pads, dil = (2, 2), ((1, 2), (0, 1)), (1, 2)
    xt = _up(rt, np.swapaxes(x, 0, 1).copy()).permute((1, 0, 2, 3))
    before = dict(conv.CALLS)
    y = conv.conv(rt, xt, _up(rt, w), _up(rt, bias), stride, pads, dil, groups, t)
    want = ref.conv(x, w, bias, stride, pads, dil, groups)
    assert want.shape[2:] == (5, 4)
    np.testing.assert_allclose(dev.backend.to_numpy(y), want, rtol=1e-4, atol=1e-4)
    g = RNG.standard_normal(want.shape).astype(np.float32)
    gx = conv.conv_transpose(rt, _up(rt, g), _up(rt, w), None, x.shape[2:], stride, pads, dil, groups, t)
    want_gx = ref.conv_transpose(g, w, x.shape[2:], stride, pads, dil, groups)
    np.testing.assert_allclose(dev.backend.to_numpy(gx), want_gx, rtol=1e-4, atol=1e-4)
    for kind in ("conv_igemm", "transpose_igemm"):
        assert conv.CALLS[kind] == before.get(kind, 0) + 1
    keys = {k[1:5] + (bool(k[11].step),) for k in rt._kernels if isinstance(k, tuple) and k[0] == "conv_igemm"}
    inner = cin // groups % t.tk == 0, cout // groups % t.tk == 0  # rows of conv, of conv_transpose
    assert {("conv", "float32", t, 1, inner[0]), ("transpose", "float32", t, 1, inner[1])} <= keys


def test_gpu_conv_tiling_by_rows(dev, monkeypatch):
    """A GPU's conv tile is the smallest of the conv family holding M rows (W3: 32 and 64)."""
    rt = dev.backend.rt
    monkeypatch.setattr(rt, "is_cpu", False)
    monkeypatch.setattr(conv, "fits", lambda rt, t, dt: True)
    for m, rows in ((8, 16), (32, 32), (64, 64), (96, 128)):
        assert conv._conv_tiling(rt, "float32", m, 100352, 288).tm == rows
    assert conv._conv_tiling(rt, "float32", 32, 9, 784) == conv._GPU_NARROW_TILINGS[-1][1]  # conv1's dW


def _wgrad_ref(g, x, kernel, stride, pads, dil, groups):
    """numpy float64: dw[o, c, tap] = sum over n, q of g[n, o, q] * padded x[n, g*cg + c, q * stride + tap * dil]."""
    g64 = g.astype(np.float64)
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(pads))
    n, cout = g.shape[:2]
    cg, og = x.shape[1] // groups, cout // groups
    blocks = g.shape[2:]
    out = np.zeros((cout, cg, *kernel))
    for tap in np.ndindex(*kernel):
        sl = tuple(slice(t * d, t * d + (b - 1) * s + 1, s) for t, d, s, b in zip(tap, dil, stride, blocks))
        patch = xp[(slice(None), slice(None)) + sl]
        for q in range(groups):
            gq = g64[:, q * og : (q + 1) * og].reshape(n, og, -1)
            part = np.einsum("noq,ncq->oc", gq, patch[:, q * cg : (q + 1) * cg].reshape(n, cg, -1))
            out[(slice(q * og, (q + 1) * og), slice(None)) + tap] = part
    return out


@pytest.mark.parametrize("index", ["int", "long"])
@pytest.mark.parametrize(
    "tiling, xs, ws, stride, pads, dil, groups",
    [
        ("c4db-64", (3, 4, 9, 8), (6, 2, 3, 2), (2, 1), ((1, 2), (0, 1)), (1, 2), 2),
        ("odd_rp", (3, 5, 9, 8), (6, 5, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
        ("tiny", (2, 3, 13), (4, 3, 4), (3,), ((2, 1),), (1,), 1),
        ("narrow", (3, 1, 11, 10), (20, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
        ("odd24", (2, 3, 9, 8), (5, 3, 3, 3), (1, 2), ((1, 1), (0, 2)), (2, 1), 1),
    ],
)
def test_conv_weight_grad(dev, monkeypatch, tiling, xs, ws, stride, pads, dil, groups, index):
    """Per-image GEMMs of g against gathered im2col columns, summed over the images; g through a
    transposed view (copied to contiguous rows), x through a transposed view (read in place). With no
    floor on the partials' size, the 1-D case (partials larger than g and x) takes two rounds. The
    output position of a row is computed once per k-step, except with odd24 (24 work items)."""
    rt = dev.backend.rt
    monkeypatch.setattr(conv, "_index", lambda *extents: index)
    monkeypatch.setattr(conv, "PARTIALS_FLOOR", 0)
    x = RNG.standard_normal(xs).astype(np.float32)
    want_y = ref.conv(x, RNG.standard_normal(ws).astype(np.float32), None, stride, pads, dil, groups)
    g = RNG.standard_normal(want_y.shape).astype(np.float32)
    swap = (1, 0) + tuple(range(2, x.ndim))
    xt = _up(rt, np.swapaxes(x, 0, 1).copy()).permute(swap)
    gt = _up(rt, np.swapaxes(g, 0, 1).copy()).permute(swap)
    before = conv.CALLS["wgrad_igemm"]
    t = IGEMM_TILINGS.get(tiling) or Tiling(32, 24, 16, 4, 8)  # odd24: 24 work items, the k part per element
    got = conv.conv_weight_grad(rt, gt, xt, ws[2:], stride, pads, dil, groups, t)
    assert conv.CALLS["wgrad_igemm"] == before + (2 if len(xs) == 3 else 1)
    want = _wgrad_ref(g, x, ws[2:], stride, pads, dil, groups)
    np.testing.assert_allclose(dev.backend.to_numpy(got), want, rtol=1e-4, atol=1e-4)


def test_native_weight_grad_switch(dev, monkeypatch):
    """Where conv is native (GPUs; a CPU with EMBER_OPENCL_IMPLICIT_CONV=1) its weight gradient is too,
    unless EMBER_OPENCL_NATIVE_WGRAD=0 (the composite, to compare)."""
    monkeypatch.setenv("EMBER_OPENCL_IMPLICIT_CONV", "1")
    monkeypatch.delenv("EMBER_OPENCL_NATIVE_WGRAD", raising=False)
    assert {"conv", "conv_transpose", "conv_weight_grad"} <= set(dev.backend.native_kernels())
    monkeypatch.setenv("EMBER_OPENCL_NATIVE_WGRAD", "0")
    table = dev.backend.native_kernels()
    assert "conv" in table and "conv_weight_grad" not in table

"""The skinny GEMM (few output columns, a large A: ``ember_opencl.skinny``), on whatever OpenCL
device is here told it is a GPU: both layouts of A, odd sizes, offset and strided views, one
K slice and many, float32 / float64 / float16, against numpy float64; and what stays tiled."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.lazy import materialize

M, K = 517, 523  # (M * K just above skinny.MIN_ELEMENTS; neither a multiple of a tile or a vector)


@pytest.fixture
def gpu_like(dev, monkeypatch):
    from ember_opencl import matmul, skinny

    rt = dev.backend.rt
    monkeypatch.setattr(rt, "is_cpu", False)
    monkeypatch.setattr(rt, "compute_units", 4)
    monkeypatch.setattr(matmul, "_PLANS", {})  # (plans made under other settings of the module's knobs)
    return dev, skinny


def _operands(dev, layout: str, n: int, dt: str, m: int = M, k: int = K, seed: int = 0):
    """(a, b) on the device and their float64 values: ``a`` (m, k) an offset view of a larger
    array, K-fast (row-major rows of a wider matrix) or M-fast (a transposed one); ``b`` (k, n) a
    transposed view."""
    rng = np.random.default_rng(seed)
    if layout == "k":
        host = rng.standard_normal((m + 3, k + 7)).astype(dt)
        a, a64 = em.tensor(host, device=dev)[2 : 2 + m, 5 : 5 + k], host[2 : 2 + m, 5 : 5 + k]
    else:
        host = rng.standard_normal((k + 7, m + 3)).astype(dt)
        a, a64 = em.tensor(host, device=dev)[5 : 5 + k, 1 : 1 + m].mT, host[5 : 5 + k, 1 : 1 + m].T
    bh = rng.standard_normal((n + 1, k)).astype(dt)
    b, b64 = em.tensor(bh, device=dev)[1:].mT, bh[1:].T
    return a, b, a64.astype(np.float64), b64.astype(np.float64)


def _check(got: em.Tensor, want: np.ndarray, dt: str) -> None:
    assert got.shape == want.shape and got.dtype.name == dt, (got.shape, got.dtype)
    rtol, atol = {"float32": (1e-4, 1e-3), "float64": (1e-12, 1e-10), "float16": (4e-3, 0.1)}[dt]
    np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("layout", ["k", "m"])
@pytest.mark.parametrize("n", [1, 3, 10, 16])
def test_skinny_float32_both_layouts(gpu_like, layout, n):
    dev, skinny = gpu_like
    a, b, a64, b64 = _operands(dev, layout, n, "float32", seed=n)
    calls = skinny.CALLS
    _check(a @ b, a64 @ b64, "float32")
    assert skinny.CALLS == calls + 1
    _check(a @ b, a64 @ b64, "float32")  # the plan kept from the first call
    assert skinny.CALLS == calls + 2


@pytest.mark.parametrize("layout", ["k", "m"])
@pytest.mark.parametrize("dt", ["float64", "float16"])
def test_skinny_other_floats(gpu_like, layout, dt):
    dev, skinny = gpu_like
    if dt == "float64" and "cl_khr_fp64" not in dev.backend.rt.device.extensions:
        pytest.skip("no float64 on this device")
    a, b, a64, b64 = _operands(dev, layout, 10, dt, seed=3)
    calls = skinny.CALLS
    _check(a @ b, a64 @ b64, dt)
    assert skinny.CALLS == calls + 1


@pytest.mark.parametrize("layout", ["k", "m"])
@pytest.mark.parametrize("min_slice", [10**9, 64])
@pytest.mark.parametrize("pf", [True, False])
def test_skinny_one_slice_and_many(gpu_like, monkeypatch, layout, min_slice, pf):
    """One K slice (the kernel writes C itself) and many (slices of 64, the last one short: partials
    summed), for float32 and float16 (its partials in float); with the next tile's loads in
    registers during this one's compute (``Config.pf``) and without."""
    import dataclasses

    dev, skinny = gpu_like
    configs = {mode: dataclasses.replace(cfg, pf=pf) for mode, cfg in skinny.CONFIGS.items()}
    monkeypatch.setattr(skinny, "CONFIGS", configs)
    monkeypatch.setattr(skinny, "MIN_SLICE", min_slice)
    monkeypatch.setattr(skinny, "GROUPS_PER_CU", 64)
    for dt in ("float32", "float16"):
        a, b, a64, b64 = _operands(dev, layout, 5, dt, seed=7)
        p = skinny.plan(dev.backend.rt, materialize(a._data), materialize(b._data))
        assert (p.slices == 1) == (min_slice > K), p.slices
        calls = skinny.CALLS
        _check(a @ b, a64 @ b64, dt)
        assert skinny.CALLS == calls + 1


def test_skinny_strided_fast_axis(gpu_like):
    """A's fast axis with stride 2 (every other column / row): the scalar loads of either layout; and
    rows in reverse (a negative stride)."""
    dev, skinny = gpu_like
    rng = np.random.default_rng(11)
    host = rng.standard_normal((601, 2 * 521)).astype(np.float32)
    bh = rng.standard_normal((521, 7)).astype(np.float32)
    b = em.tensor(bh, device=dev)
    x = em.tensor(host, device=dev)
    calls = skinny.CALLS
    _check(x[:, 1::2] @ b, host[:, 1::2].astype(np.float64) @ bh, "float32")
    hostt = rng.standard_normal((521, 2 * 601)).astype(np.float32)
    xt = em.tensor(hostt, device=dev)
    _check(xt[:, ::2].mT @ b, hostt[:, ::2].T.astype(np.float64) @ bh, "float32")
    _check(x[::-1, 2:523] @ b, host[::-1, 2:523].astype(np.float64) @ bh, "float32")
    _check(xt[::-1, 100:700].mT @ b, hostt[::-1, 100:700].T.astype(np.float64) @ bh, "float32")
    assert skinny.CALLS == calls + 4


def test_skinny_few_rows(gpu_like):
    """Three rows of a long K (one partial block of rows, many slices)."""
    dev, skinny = gpu_like
    for layout in ("k", "m"):
        a, b, a64, b64 = _operands(dev, layout, 4, "float32", m=3, k=90001, seed=5)
        calls = skinny.CALLS
        _check(a @ b, a64 @ b64, "float32")
        assert skinny.CALLS == calls + 1


def test_what_stays_tiled(gpu_like, monkeypatch):
    """N above MAX_N, a small A, a batch, a CPU device and SKINNY off take the other kernels."""
    from ember_opencl import matmul

    dev, skinny = gpu_like
    calls = skinny.CALLS
    a, b, a64, b64 = _operands(dev, "k", skinny.MAX_N + 1, "float32")
    _check(a @ b, a64 @ b64, "float32")
    a, b, a64, b64 = _operands(dev, "m", 10, "float32", m=200, k=300)
    _check(a @ b, a64 @ b64, "float32")
    ones = em.tensor(np.ones((2, 300, 1000), np.float32), device=dev)  # (a batch of B: not folded into 2-D)
    _check(ones @ em.tensor(np.ones((2, 1000, 2), np.float32), device=dev), np.full((2, 300, 2), 1000.0), "float32")
    a, b, a64, b64 = _operands(dev, "k", 10, "float32")
    monkeypatch.setattr(matmul, "SKINNY", False)
    _check(a @ b, a64 @ b64, "float32")
    monkeypatch.setattr(matmul, "SKINNY", True)
    monkeypatch.setattr(dev.backend.rt, "is_cpu", True)
    _check(a @ b, a64 @ b64, "float32")
    assert skinny.CALLS == calls


def test_linear_layer_gradients(gpu_like):
    """W2's last layer in small: ``h @ w`` forward and its weight gradient ``h.T @ g`` (a transposed
    view) both run skinny; the input gradient ``g @ w.T`` (N = 700) stays tiled."""
    dev, skinny = gpu_like
    dev = dev.autodiff()
    rng = np.random.default_rng(13)
    h64, w64, g64 = rng.standard_normal((600, 700)), rng.standard_normal((700, 10)), rng.standard_normal((600, 10))
    h = em.tensor(h64.astype(np.float32), device=dev, requires_grad=True)
    w = em.tensor(w64.astype(np.float32), device=dev, requires_grad=True)
    calls = skinny.CALLS
    y = h @ w
    (y * em.tensor(g64.astype(np.float32), device=dev)).sum().backward()
    h64, w64 = h64.astype(np.float32).astype(np.float64), w64.astype(np.float32).astype(np.float64)
    g64 = g64.astype(np.float32).astype(np.float64)
    _check(y.detach(), h64 @ w64, "float32")
    _check(w.grad, h64.T @ g64, "float32")
    _check(h.grad, g64 @ w64.T, "float32")
    assert skinny.CALLS == calls + 2

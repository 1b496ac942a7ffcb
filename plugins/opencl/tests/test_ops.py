"""Every primitive on OpenCL against the numpy CPU backend: dtypes, views, broadcasting, edge sizes."""

from __future__ import annotations

import numpy as np
import pytest
from ocl_helpers import assert_same

import ember as em
from ember.dtypes import as_dtype
from ember_conformance import nn_reference

RNG = np.random.default_rng(0)
FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def host(dtype: str, shape: tuple[int, ...], special: bool = False) -> np.ndarray:
    dt = as_dtype(dtype)
    if dt.kind == "b":
        return RNG.random(shape) < 0.5
    if dt.kind == "f":
        x = RNG.standard_normal(shape) * 3
        if special and x.size >= 4:
            x.flat[:4] = [np.nan, np.inf, -np.inf, -0.0]
        return x.astype(dt.numpy)
    info = np.iinfo(dt.numpy)
    lo, hi = max(info.min, -50), min(info.max, 50)
    return RNG.integers(lo, hi, size=shape).astype(dt.numpy)


def pair(dtype: str, shape: tuple[int, ...], dev: em.Device, special: bool = False) -> tuple[em.Tensor, em.Tensor]:
    a = host(dtype, shape, special)
    return em.tensor(a, device=dev), em.tensor(a, device="cpu")


def tol(dtype: str) -> dict[str, float]:
    return {"float16": dict(rtol=2e-3, atol=2e-3), "bfloat16": dict(rtol=2e-2, atol=2e-2)}.get(
        dtype, dict(rtol=2e-6 if dtype == "float32" else 1e-12, atol=1e-6 if dtype == "float32" else 1e-12)
    )


UNARY_F = "neg abs sign exp log sqrt rsqrt sin cos tanh erf floor ceil round trunc reciprocal isnan isinf".split()


@pytest.mark.parametrize("dtype", FLOATS)
def test_unary_float(dev, dtype):
    x, xc = pair(dtype, (5, 7), dev, special=True)
    for op in UNARY_F:
        fn = getattr(em, {"neg": "negative"}.get(op, op))
        t = tol(dtype)
        if op in ("erf", "tanh", "exp", "sin", "cos", "log") and dtype == "float32":
            t = dict(rtol=4e-6, atol=1e-6)
        assert_same(fn(x), fn(xc), **t)


@pytest.mark.parametrize("dtype", INTS + ["bool"])
def test_unary_int(dev, dtype):
    x, xc = pair(dtype, (4, 6), dev)
    ops = ["bitwise_invert"] if dtype == "bool" else ["negative", "abs", "sign", "floor", "round", "bitwise_invert"]
    if dtype == "bool":
        ops.append("logical_not")
    for op in ops:
        if op in ("negative", "abs", "sign") and dtype.startswith("u"):
            continue
        assert_same(getattr(em, op)(x), getattr(em, op)(xc))


BINARY = "add subtract multiply divide floor_divide remainder pow maximum minimum atan2".split()
COMPARE = "equal not_equal less less_equal greater greater_equal".split()


@pytest.mark.parametrize("dtype", FLOATS)
def test_binary_float(dev, dtype):
    a, ac = pair(dtype, (3, 1, 5), dev, special=True)
    b, bc = pair(dtype, (4, 5), dev)
    for op in BINARY + COMPARE:
        fn = getattr(em, op)
        t = tol(dtype)
        if op == "pow" and dtype == "float32":
            t = dict(rtol=1e-5, atol=1e-6)
        assert_same(fn(a, b), fn(ac, bc), **t)
        assert_same(fn(a, 0.5), fn(ac, 0.5), **t)
    assert_same(a**2, ac**2, **tol(dtype))


@pytest.mark.parametrize("dtype", INTS)
def test_binary_int(dev, dtype):
    a, ac = pair(dtype, (6, 5), dev)
    b, bc = pair(dtype, (5,), dev)
    for op in ["add", "subtract", "multiply", "floor_divide", "remainder", "maximum", "minimum"] + COMPARE:
        fn = getattr(em, op)
        assert_same(fn(a, b), fn(ac, bc))
        assert_same(fn(a, 3), fn(ac, 3))
        if op in ("floor_divide", "remainder"):
            assert_same(fn(a, 0), fn(ac, 0))
    for op in ["bitwise_and", "bitwise_or", "bitwise_xor"]:
        assert_same(getattr(em, op)(a, b), getattr(em, op)(ac, bc))
    small_b = em.tensor(np.abs(host(dtype, (5,))) % 4, device=dev)
    assert_same(a**small_b, ac ** small_b.to("cpu"))


def test_signed_floordiv_corners(dev):
    a = np.array([-7, 7, -7, 7, -(2**31), 5, 0], dtype=np.int32)
    b = np.array([2, -2, -2, 2, -1, 0, 3], dtype=np.int32)
    for op in ("floor_divide", "remainder"):
        got = getattr(em, op)(em.tensor(a, device=dev), em.tensor(b, device=dev))
        want = getattr(em, op)(em.tensor(a), em.tensor(b))
        assert_same(got, want)


def test_float_floordiv_remainder_signs(dev):
    a = np.array([-7.5, 7.5, -7.5, 7.5, 0.0, -0.0, 5.0, np.inf, 1.0], dtype=np.float32)
    b = np.array([2.0, -2.0, -2.0, 2.0, 3.0, 3.0, 0.0, 2.0, np.inf], dtype=np.float32)
    for op in ("floor_divide", "remainder"):
        got = getattr(em, op)(em.tensor(a, device=dev), em.tensor(b, device=dev)).numpy()
        want = getattr(em, op)(em.tensor(a), em.tensor(b)).numpy()
        np.testing.assert_array_equal(got, want)
        finite = ~np.isnan(want)  # the sign of a NaN is not specified
        np.testing.assert_array_equal(np.signbit(got[finite]), np.signbit(want[finite]))


def test_logical_and_bool_ops(dev):
    a, ac = pair("bool", (3, 4), dev)
    b, bc = pair("bool", (4,), dev)
    for op in ("logical_and", "logical_or", "logical_xor", "equal", "not_equal", "bitwise_and", "bitwise_xor"):
        assert_same(getattr(em, op)(a, b), getattr(em, op)(ac, bc))


def test_round_half_to_even(dev):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4999], dtype=np.float32)
    assert_same(em.round(em.tensor(x, device=dev)), em.round(em.tensor(x)))


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16", "uint8"])
def test_where_cast(dev, dtype):
    c, cc = pair("bool", (4, 1), dev)
    a, ac = pair(dtype, (4, 5), dev)
    b, bc = pair(dtype, (5,), dev)
    assert_same(em.where(c, a, b), em.where(cc, ac, bc))
    for target in ["float32", "int32", "bool", "float16", "int64", "uint8", "bfloat16", "float64"]:
        if dtype == "float16" and target in ("uint8",):
            continue
        assert_same(a.astype(target), ac.astype(target), **tol(target))


def test_native_composites(dev):
    x, xc = pair("float32", (6, 9), dev, special=True)
    for op in ("relu", "sigmoid", "gelu", "silu", "softplus"):
        fn = getattr(em, op, None) or getattr(em.nn.functional, op)
        assert_same(fn(x), fn(xc), rtol=1e-5, atol=1e-6)
    for op in ("exp2", "expm1", "log2", "log10", "log1p", "tan", "atan", "sinh", "cosh", "asinh"):
        assert_same(getattr(em, op)(x), getattr(em, op)(xc), rtol=2e-5, atol=1e-6)


# -- views and movement ---------------------------------------------------------------------
def test_views_are_free_and_correct(dev):
    x, xc = pair("float32", (4, 5, 6), dev)
    before = dev.memory_stats()["allocations"]
    y = em.permute_dims(x, (2, 0, 1))[1:5:2, ::-1, 1:]
    yc = em.permute_dims(xc, (2, 0, 1))[1:5:2, ::-1, 1:]
    assert dev.memory_stats()["allocations"] == before
    assert_same(y, yc)
    assert_same(y + 1.0, yc + 1.0)
    assert_same(y.reshape((-1,)), yc.reshape((-1,)))
    assert_same(em.broadcast_to(x[:, :1, :], (4, 5, 6)) * 2.0, em.broadcast_to(xc[:, :1, :], (4, 5, 6)) * 2.0)
    assert_same(em.flip(x, axis=(0, 2)), em.flip(xc, axis=(0, 2)))


def test_pad_concat(dev):
    x, xc = pair("int32", (3, 4), dev)
    assert_same(em.pad(x, ((1, 2), (0, 3)), value=7), em.pad(xc, ((1, 2), (0, 3)), value=7))
    y, yc = pair("int32", (3, 2), dev)
    assert_same(em.concat([x, y.mT.mT, x[:, ::2]], axis=1), em.concat([xc, yc, xc[:, ::2]], axis=1))
    assert_same(em.stack([x, x], axis=0), em.stack([xc, xc], axis=0))


def test_empty_and_zero_d(dev):
    e, ec = pair("float32", (0, 3), dev)
    assert_same(e + 1.0, ec + 1.0)
    assert_same(e.sum(axis=0), ec.sum(axis=0))
    assert_same(e.sum(axis=1), ec.sum(axis=1))
    s, sc = pair("float32", (), dev)
    assert_same(s * 2.0, sc * 2.0)
    assert_same(em.tensor(3, device=dev) + 4, em.tensor(3) + 4)


# -- reductions ------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "int32", "int64", "float16", "uint8", "float64"])
def test_reductions(dev, dtype):
    x, xc = pair(dtype, (5, 6, 7), dev)
    for axes in [None, 0, 1, 2, (0, 2), (1, 2)]:
        for keep in (False, True):
            for op in ("sum", "max", "min"):
                assert_same(getattr(em, op)(x, axis=axes, keepdims=keep), getattr(em, op)(xc, axis=axes, keepdims=keep),
                            **tol(dtype))  # fmt: skip
    for axis in (0, 1, 2):
        assert_same(em.argmax(x, axis=axis), em.argmax(xc, axis=axis))
        assert_same(em.argmin(x, axis=axis, keepdims=True), em.argmin(xc, axis=axis, keepdims=True))
    assert_same(em.argmax(x), em.argmax(xc))
    assert_same(em.prod(x[:, :2, :3], axis=1), em.prod(xc[:, :2, :3], axis=1), **tol(dtype))
    assert_same(em.any(x > 0, axis=1), em.any(xc > 0, axis=1))
    assert_same(em.all(x > 0, axis=(0, 2)), em.all(xc > 0, axis=(0, 2)))


def test_big_reductions_two_pass(dev):
    x, xc = pair("float32", (3, 200_000), dev)
    assert_same(x.sum(axis=1), xc.sum(axis=1), rtol=1e-4, atol=1e-2)
    assert_same(em.argmax(x, axis=1), em.argmax(xc, axis=1))
    assert_same(x.max(), xc.max())
    f = np.full(100_003, 1.0, np.float32)
    f[[5, 70_000]] = 3.0
    assert int(em.argmax(em.tensor(f, device=dev)).item()) == 5


def test_arg_reductions_nan_and_ties(dev):
    x = np.array([[1.0, 3.0, 3.0, np.nan, 2.0, np.nan], [0.0, -1.0, -1.0, 0.0, -1.0, 5.0]], np.float32)
    for fn in (em.argmax, em.argmin):
        assert_same(fn(em.tensor(x, device=dev), axis=1), fn(em.tensor(x), axis=1))


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16"])
def test_cumsum(dev, dtype):
    x, xc = pair(dtype, (4, 300), dev)
    for axis in (0, 1):
        assert_same(em.cumulative_sum(x, axis=axis), em.cumulative_sum(xc, axis=axis), rtol=1e-4, atol=1e-3)
    y, yc = pair(dtype, (5000,), dev)
    assert_same(em.cumulative_sum(y), em.cumulative_sum(yc), rtol=1e-3, atol=5e-2)


# -- matmul, sort, indexing ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
def test_matmul(dev, dtype):
    a, ac = pair(dtype, (2, 1, 37, 70), dev)
    b, bc = pair(dtype, (3, 70, 29), dev)
    t = dict(rtol=1e-4, atol=1e-3) if dtype == "float32" else tol(dtype)
    if dtype == "float16":
        t = dict(rtol=1e-2, atol=5e-1)
    assert_same(a @ b, ac @ bc, **t)
    assert_same(b.mT @ a.mT, bc.mT @ ac.mT, **t)  # transposed reads
    v, vc = pair(dtype, (70,), dev)
    assert_same(a @ v, ac @ vc, **t)


def test_matmul_large_tiles(dev):
    a, ac = pair("float32", (130, 257), dev)
    b, bc = pair("float32", (257, 67), dev)
    assert_same(a @ b, ac @ bc, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8", "float16", "int64"])
def test_sort_stable(dev, dtype):
    x = host(dtype, (3, 50))
    if dtype == "float32":
        x[0, :6] = [np.nan, 1.0, np.nan, -0.0, 0.0, 1.0]
    x[1, :] = x[1, 0]  # all ties
    for desc in (False, True):
        for n in (50, 7, 1):
            t, tc = em.tensor(x[:, :n], device=dev), em.tensor(x[:, :n])
            assert_same(em.sort(t, axis=1, descending=desc), em.sort(tc, axis=1, descending=desc))
            assert_same(em.argsort(t, axis=1, descending=desc), em.argsort(tc, axis=1, descending=desc))
    t, tc = em.tensor(x, device=dev), em.tensor(x)
    assert_same(em.argsort(t, axis=0), em.argsort(tc, axis=0))


def test_sort_long_rows_global_network(dev):
    x = RNG.integers(0, 100, size=(2, 3000)).astype(np.int32)
    t, tc = em.tensor(x, device=dev), em.tensor(x)
    for desc in (False, True):
        assert_same(em.argsort(t, axis=1, descending=desc), em.argsort(tc, axis=1, descending=desc))


@pytest.mark.parametrize("dtype", ["float32", "int64", "float16", "int8", "float64"])
def test_gather_scatter(dev, dtype):
    x, xc = pair(dtype, (4, 6), dev)
    idx = RNG.integers(0, 6, size=(4, 9))
    i, ic = em.tensor(idx, device=dev), em.tensor(idx)
    assert_same(em.take_along_axis(x, i, axis=1), em.take_along_axis(xc, ic, axis=1))
    v, vc = pair(dtype, (4, 9), dev)
    t = tol(dtype)
    assert_same(em.scatter_add(x, i, v, axis=1), em.scatter_add(xc, ic, vc, axis=1), **t)
    idx0 = RNG.integers(0, 4, size=(7, 6))
    v0, v0c = pair(dtype, (7, 6), dev)
    got = em.scatter_add(x, em.tensor(idx0, device=dev), v0, axis=0)
    assert_same(got, em.scatter_add(xc, em.tensor(idx0), v0c, axis=0), **t)


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_index_put(dev, dtype):
    x, xc = pair(dtype, (5, 3), dev)
    rows = np.array([4, 0, 4, 2])
    v, vc = pair(dtype, (4, 3), dev)
    for acc in (False, True):
        got = em.index_put(x, (em.tensor(rows, device=dev),), v, accumulate=acc)
        want = em.index_put(xc, (em.tensor(rows),), vc, accumulate=acc)
        assert_same(got, want)
    y = em.tensor(host(dtype, (5, 3)), device=dev)
    y[1:3, 0] = 9
    yc = em.tensor(y.numpy())
    assert_same(y, yc)


def test_getitem_advanced(dev):
    x, xc = pair("float32", (6, 5), dev)
    key = (em.tensor([0, 5, 2], device=dev), slice(None, None, 2))
    keyc = (em.tensor([0, 5, 2]), slice(None, None, 2))
    assert_same(x[key], xc[keyc])
    assert_same(x[x > 0], xc[xc > 0])


# -- nn fast paths -----------------------------------------------------------------------------
def test_softmax_family(dev):
    x, xc = pair("float32", (3, 4, 50), dev, special=False)
    for axis in (0, 1, 2, -1):
        assert_same(em.softmax(x, axis=axis), em.softmax(xc, axis=axis), rtol=1e-5, atol=1e-7)
        assert_same(em.log_softmax(x, axis=axis), em.log_softmax(xc, axis=axis), rtol=1e-5, atol=1e-5)
    assert_same(em.logsumexp(x, axis=(0, 2)), em.logsumexp(xc, axis=(0, 2)), rtol=1e-5, atol=1e-5)
    w = np.full((2, 300), -np.inf, np.float32)
    w[1, 3] = 1.0
    assert_same(em.softmax(em.tensor(w, device=dev)), em.softmax(em.tensor(w)))


def test_norms_ce_attention(dev):
    x, xc = pair("float32", (4, 3, 64), dev)
    w, wc = pair("float32", (3, 64), dev)
    b, bc = pair("float32", (3, 64), dev)
    assert_same(em.layer_norm(x, (3, 64), w, b), em.layer_norm(xc, (3, 64), wc, bc), rtol=1e-4, atol=1e-4)
    assert_same(em.layer_norm(x, 64), em.layer_norm(xc, 64), rtol=1e-4, atol=1e-4)
    assert_same(em.rms_norm(x, (64,), w[0]), em.rms_norm(xc, (64,), wc[0]), rtol=1e-4, atol=1e-4)
    logits, lc = pair("float32", (8, 5, 3), dev)
    tgt = RNG.integers(0, 5, size=(8, 3))
    tgt[0, 0] = -100
    for ls in (0.0, 0.1):
        got = em.cross_entropy(logits, em.tensor(tgt, device=dev), reduction="none", label_smoothing=ls)
        want = em.cross_entropy(lc, em.tensor(tgt), reduction="none", label_smoothing=ls)
        assert_same(got, want, rtol=1e-5, atol=1e-5)
    q, qc = pair("float32", (2, 3, 5, 8), dev)
    k, kc = pair("float32", (2, 3, 7, 8), dev)
    v, vc = pair("float32", (2, 3, 7, 4), dev)
    m, mc = pair("bool", (5, 7), dev)
    for kw, kwc in [({}, {}), ({"is_causal": True}, {"is_causal": True}), ({"attn_mask": m}, {"attn_mask": mc})]:
        got = em.scaled_dot_product_attention(q, k, v, **kw)
        want = em.scaled_dot_product_attention(qc, kc, vc, **kwc)
        assert_same(got, want, rtol=1e-4, atol=1e-5)


def test_arange_full(dev):
    assert_same(em.arange(0, 1, 0.1, device=dev), em.arange(0, 1, 0.1), rtol=0, atol=0)
    assert_same(em.arange(-5, 20, 3, device=dev), em.arange(-5, 20, 3))
    assert_same(em.full((2, 3), 1.5, dtype="float16", device=dev), em.full((2, 3), 1.5, dtype="float16"))
    assert_same(em.zeros((3,), dtype="bfloat16", device=dev) + 1.0, em.zeros((3,), dtype="bfloat16") + 1.0)


# -- convolution and pooling (native unfold / fold / pooling kernels) -------------------------------
def _grads(device: em.Device, fn, *arrays: np.ndarray) -> list[np.ndarray]:
    ad = device.autodiff()
    ts = [em.tensor(a, device=ad, requires_grad=True) for a in arrays]
    out = fn(*ts)
    (out * out).sum().backward()
    return [out.numpy()] + [t.grad.numpy() for t in ts]


@pytest.mark.parametrize(
    "fn",
    [
        lambda x, w: em.conv(x, w, padding=1),
        lambda x, w: em.conv(x, w, stride=2, dilation=2, padding=2),
        lambda x, w: em.conv(x[:, :2], w[:2, :1], groups=2),
    ],
)
def test_conv2d_forward_backward(dev, fn):
    x = host("float32", (2, 4, 9, 8))
    w = host("float32", (6, 4, 3, 3))
    for got, want in zip(_grads(dev, fn, x, w), _grads(em.Device.cpu(), fn, x, w)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: em.max_pool(x, 2),
        lambda x: em.max_pool(x, 3, stride=2, padding=1),
        lambda x: em.avg_pool(x, 2),
        lambda x: em.avg_pool(x, 3, stride=2, padding=1, count_include_pad=False),
        lambda x: em.max_pool(x[:, :, 0], 2),
    ],
)
def test_pooling_forward_backward(dev, fn):
    x = host("float32", (2, 3, 8, 7))
    x[0, 0, :2, :2] = 1.0  # ties: the gradient goes to the first maximum
    for got, want in zip(_grads(dev, fn, x), _grads(em.Device.cpu(), fn, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tiling", ["gpu_large", "gpu_k8", "gpu_small", "cpu", "tiny"])
def test_matmul_every_tiling(dev, tiling):
    """The GPU tilings are exercised here too (a CPU device picks the vector kernel by itself)."""
    from ember_opencl.matmul import TILINGS, matmul

    a, ac = pair("float32", (2, 1, 131, 45), dev)
    b, bc = pair("float32", (3, 45, 70), dev)
    rt = dev.backend.rt
    for x, y, xc, yc in [(a, b, ac, bc), (b.mT, a.mT, bc.mT, ac.mT)]:
        out = matmul(rt, x._data, y._data, TILINGS[tiling])
        got = dev.backend.to_numpy(out)
        np.testing.assert_allclose(got, (xc @ yc).numpy(), rtol=1e-4, atol=1e-4)


def test_a_gpu_clamps_out_of_range_indices_instead_of_reading_them_back(dev, monkeypatch):
    """On a GPU (``cheap_readback`` False) no index range is read back to the host, so the gather,
    scatter and index_put kernels clamp: a bad index touches the nearest element, never memory
    outside the buffer. Checked here on the CI device by switching the flag as a GPU sets it."""
    monkeypatch.setattr(dev.backend, "cheap_readback", False)
    a = host("float32", (3, 5))
    x = em.tensor(a, device=dev)
    idx = np.array([[0, 7, -2, 4], [9, -9, 1, 3], [2, 2, 5, 100]])
    wrapped = np.clip(np.where(idx < 0, idx + 5, idx), 0, 4)  # the core wraps negatives once, the kernel clamps
    got = em.take_along_axis(x, em.tensor(idx, device=dev), axis=1).numpy()
    np.testing.assert_array_equal(got, np.take_along_axis(a, wrapped, axis=1))
    v = host("float32", idx.shape)
    got = em.scatter_add(x, em.tensor(idx, device=dev), em.tensor(v, device=dev), axis=1).numpy()
    want = a.astype(np.float64).copy()
    for r in range(3):
        np.add.at(want[r], wrapped[r], v[r])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    rows = np.array([1, 6, 2])
    vals = host("float32", (3, 5))
    got = em.index_put(x, (em.tensor(rows, device=dev),), em.tensor(vals, device=dev), accumulate=True).numpy()
    want = a.astype(np.float64).copy()
    np.add.at(want, np.clip(rows, 0, 2), vals)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    loss = em.cross_entropy(em.tensor(a, device=dev), em.tensor(np.array([1, 8, 0]), device=dev), reduction="none")
    assert np.isfinite(loss.numpy()).all()


@pytest.mark.parametrize("layout", ["contiguous", "every-other-row", "transposed"])
@pytest.mark.parametrize("rows", [2, 64], ids=["work-group-rows", "work-item-rows"])
def test_layer_norm_backward_runs_as_one_row_kernel(dev, monkeypatch, rows, layout):
    """em.layer_norm's input gradient is the layer_norm_backward row kernel (not the composite's
    reductions), matching float64; few long rows take a work-group each, many rows a work item.
    Rows at a stride (x a slice of every other row) are read in place, forward and backward;
    rows whose elements are strided (x transposed) are copied first."""
    from ember_opencl import nn
    from ember_opencl.runtime import Runtime

    keys, copies = [], []
    plain = Runtime.kernel
    monkeypatch.setattr(Runtime, "kernel", lambda self, key, *a, **k: keys.append(key) or plain(self, key, *a, **k))
    plain_contiguous = nn.contiguous
    monkeypatch.setattr(nn, "contiguous", lambda rt, a: copies.append(a.shape) or plain_contiguous(rt, a))
    n, eps = 600, 1e-5
    xs, ws, bs, gs = (RNG.standard_normal(s) for s in ((rows, n), (n,), (n,), (rows, n)))
    ad = dev.autodiff()
    if layout == "every-other-row":
        stored = np.zeros((2 * rows, n))
        stored[::2] = xs
    else:
        stored = xs.T if layout == "transposed" else xs
    leaf = em.tensor(stored.astype(np.float32), device=ad, requires_grad=True)
    x = {"contiguous": leaf, "every-other-row": leaf[::2], "transposed": leaf.permute((1, 0))}[layout]
    w, b, g = (em.tensor(a.astype(np.float32), device=ad) for a in (ws, bs, gs))
    (em.layer_norm(x, (n,), w, b, eps) * g).sum().backward()
    got = leaf.grad.numpy()
    got = {"contiguous": got, "every-other-row": got[::2], "transposed": got.T}[layout]
    assert any(k[0] == "norm" and k[-1] == "backward" for k in keys if isinstance(k, tuple))
    if layout == "transposed":
        assert copies, "a transposed x was expected to be copied into contiguous rows"
    else:
        assert copies == [], f"the norm kernels copied {copies} instead of reading the rows in place"
    want, _, _ = nn_reference.layer_norm_grads(gs, xs, 1, ws, eps)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("shape", [(6, 7), (2, 100), (3, 40, 5)], ids=["item-rows", "work-group-rows", "spatial"])
@pytest.mark.parametrize("ls", [0.0, 0.1])
def test_cross_entropy_backward_runs_as_one_row_kernel(dev, monkeypatch, shape, ls):
    """The loss's gradient with respect to the logits is the ember_ce_grad row kernel (not softmax, a
    one-hot from arange and a mask), against float64: g * (softmax - smoothed one-hot), ignored rows 0."""
    from ember.ops.nn import cross_entropy_backward
    from ember_opencl.runtime import Runtime

    keys = []
    plain = Runtime.kernel
    monkeypatch.setattr(Runtime, "kernel", lambda self, key, *a, **k: keys.append(key) or plain(self, key, *a, **k))
    n, c, rest = shape[0], shape[1], shape[2:]
    x = RNG.standard_normal(shape)
    t = RNG.integers(0, c, size=(n, *rest))
    t.flat[1] = -100
    g = RNG.standard_normal((n, *rest))
    got = cross_entropy_backward(
        em.tensor(g.astype(np.float32), device=dev),
        em.tensor(x.astype(np.float32), device=dev),
        em.tensor(t, device=dev),
        label_smoothing=ls,
    ).numpy()
    moved = np.moveaxis(x, 1, -1)
    p = np.exp(moved - moved.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    hot = (1 - ls) * (np.arange(c) == np.where(t == -100, 0, t)[..., None]) + ls / c
    want = np.moveaxis(np.where(t == -100, 0.0, g)[..., None] * (p - hot), -1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert any(k[0] == "ce_grad" for k in keys if isinstance(k, tuple)), keys
    assert not any(k[0] == "softmax" for k in keys if isinstance(k, tuple)), "the composite ran"

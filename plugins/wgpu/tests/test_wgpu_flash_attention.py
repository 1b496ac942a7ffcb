"""The flash-style attention kernels of ember-wgpu (kernels/attention.py): the forward and the three
gradients against a float64 numpy reference (causal or not, L != S, head sizes 32/64/96/128, batch
axes that broadcast, rows that see no key), each checking through ``CALLS`` that the kernel ran, and
the composite taking what the kernels do not (a mask, another head size)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.ops.attention import attention_backward
from ember_wgpu.kernels import attention

RNG = np.random.default_rng(7)


def _reference(q, k, v, g, causal, scale, mask=None):  # type: ignore[no-untyped-def]
    """(out, gq, gk, gv) in float64: softmax(q k^T scale [+ mask]) v and the composite rule's gradients
    (a row that sees no key: NaN out, zero gradients)."""
    q, k, v, g = (np.asarray(x, np.float64) for x in (q, k, v, g))
    s = q @ np.swapaxes(k, -1, -2) * scale
    L, S = s.shape[-2:]
    if causal:
        s = np.where(np.arange(S)[None, :] <= np.arange(L)[:, None] + (S - L), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    top = s.max(-1, keepdims=True)
    top = np.where(np.isinf(top), 0.0, top)
    e = np.exp(s - top)
    with np.errstate(invalid="ignore"):
        p = e / e.sum(-1, keepdims=True)
    out = p @ v
    p = np.where(np.isnan(p), 0.0, p)
    gv = np.swapaxes(p, -1, -2) @ g
    gp = g @ np.swapaxes(v, -1, -2)
    gs = p * (gp - (gp * p).sum(-1, keepdims=True))
    return out, gs @ k * scale, np.swapaxes(gs, -1, -2) @ q * scale, gv


def _data(*shapes):  # type: ignore[no-untyped-def]
    return [RNG.standard_normal(s).astype(np.float32) for s in shapes]


def _close(got, want, tol):  # type: ignore[no-untyped-def]
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=tol, atol=tol)


CASES = [
    # (q batch, k/v batch, L, S, head, causal)
    ((2, 3), (2, 3), 70, 90, 64, False),
    ((2, 3), (2, 3), 70, 90, 64, True),
    ((1, 2), (1, 2), 100, 37, 32, True),  # L > S: the first 63 rows see no key
    ((2,), (2,), 65, 130, 96, True),
    ((1,), (1,), 33, 200, 128, False),
    ((1,), (1,), 150, 40, 128, True),
    ((3, 2), (1, 2), 17, 17, 64, True),  # k, v broadcast over q's first batch axis
    ((), (), 1, 1, 32, False),
]


@pytest.fixture(autouse=True)
def _flash_backward(dev, monkeypatch):  # type: ignore[no-untyped-def]
    """These tests check the flash backward, which the backend leaves out of its table unless
    ``EMBER_WGPU_FLASH_BACKWARD=1`` (slower than the composite on an H100): put it in for the test."""
    import ember.ops.attention as ops_attention

    name = "scaled_dot_product_attention_backward"
    monkeypatch.setitem(dev._impls, name, getattr(dev.backend, name))
    native = ops_attention._has_native  # (what autodiff's rule asks before it takes the packed op)
    monkeypatch.setattr(ops_attention, "_has_native", lambda t, op: op == name or native(t, op))


def test_the_flash_backward_is_opt_in(dev, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("EMBER_WGPU_FLASH_BACKWARD", raising=False)
    assert "scaled_dot_product_attention_backward" not in dev.backend.native_kernels()
    monkeypatch.setenv("EMBER_WGPU_FLASH_BACKWARD", "1")
    assert "scaled_dot_product_attention_backward" in dev.backend.native_kernels()


def _packed(dev, g, q, k, v, causal, scale, *mask):  # type: ignore[no-untyped-def]
    """The packed backward op's gq, gk, gv, each over the broadcast batch shape."""
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    shapes = [lead + q.shape[-2:], lead + k.shape[-2:], lead + v.shape[-2:]]
    args = [em.tensor(x, device=dev) for x in (g, q, k, v, *mask)]
    flat = attention_backward(*args, is_causal=causal, scale=scale).numpy()
    out, start = [], 0
    for shape in shapes:
        n = int(np.prod(shape))
        out.append(flat[start : start + n].reshape(shape))
        start += n
    return out


@pytest.mark.parametrize("qb, kb, L, S, head, causal", CASES)
def test_kernels_against_float64(dev, qb, kb, L, S, head, causal) -> None:  # type: ignore[no-untyped-def]
    q, k, v = _data(qb + (L, head), kb + (S, head), kb + (S, head))
    (g,) = _data(np.broadcast_shapes(qb, kb) + (L, head))
    scale = 1 / np.sqrt(head)
    want = _reference(q, k, v, g, causal, scale)
    before = attention.CALLS.copy()
    y = em.nn.functional.scaled_dot_product_attention(*(em.tensor(x, device=dev) for x in (q, k, v)), is_causal=causal)
    _close(y.numpy(), want[0], 2e-5)
    assert attention.CALLS["scaled_dot_product_attention"] == before["scaled_dot_product_attention"] + 1
    for got, ref in zip(_packed(dev, g, q, k, v, causal, scale), want[1:]):
        _close(got, ref, 5e-5)
    after = attention.CALLS["scaled_dot_product_attention_backward"]
    assert after == before["scaled_dot_product_attention_backward"] + 1
    assert attention.CALLS["attention_backward_declined"] == before["attention_backward_declined"]


@pytest.mark.parametrize("causal", [False, True])
def test_autodiff_takes_the_kernels(dev, causal) -> None:  # type: ignore[no-untyped-def]
    """``backward()`` through attention runs the native backward (one launch of the three kernels)."""
    q, k, v, g = _data((2, 4, 48, 64), (2, 4, 80, 64), (2, 4, 80, 64), (2, 4, 48, 64))
    scale = 0.3
    want = _reference(q, k, v, g, causal, scale)
    before = attention.CALLS["scaled_dot_product_attention_backward"]
    ad = dev.autodiff()
    qt, kt, vt = (em.tensor(x, device=ad, requires_grad=True) for x in (q, k, v))
    y = em.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, scale=scale)
    (y * em.tensor(g, device=ad)).sum().backward()
    for t, ref in zip((qt, kt, vt), want[1:]):
        _close(t.grad.numpy(), ref, 5e-5)
    assert attention.CALLS["scaled_dot_product_attention_backward"] == before + 1


@pytest.mark.parametrize("dtype, tol", [("float16", 2e-2), ("bfloat16", 6e-2)])
def test_low_precision_inputs(dev, dtype, tol) -> None:  # type: ignore[no-untyped-def]
    """float16 (f16 storage where the adapter has shader-f16) and bfloat16: read into f32, rounded on store."""
    q, k, v, g = _data((2, 40, 64), (2, 56, 64), (2, 56, 64), (2, 40, 64))
    cast = [em.tensor(x, device=dev).astype(dtype) for x in (q, k, v, g)]
    exact = [x.astype("float32").numpy() for x in cast]  # the rounded inputs, as the reference's
    want = _reference(*exact[:3], exact[3], True, 0.125)
    before = attention.CALLS.copy()
    y = em.nn.functional.scaled_dot_product_attention(*cast[:3], is_causal=True, scale=0.125)
    assert y.dtype.name == dtype
    _close(y.astype("float32").numpy(), want[0], tol)
    flat = attention_backward(cast[3], *cast[:3], is_causal=True, scale=0.125)
    assert flat.dtype.name == dtype
    flat = flat.astype("float32").numpy()
    n_q, n_k = q.size, k.size
    for got, ref in zip((flat[:n_q], flat[n_q : n_q + n_k], flat[n_q + n_k :]), want[1:]):
        _close(got, ref.reshape(-1), tol)
    assert attention.CALLS["scaled_dot_product_attention"] == before["scaled_dot_product_attention"] + 1
    after = attention.CALLS["scaled_dot_product_attention_backward"]
    assert after == before["scaled_dot_product_attention_backward"] + 1


@pytest.mark.parametrize("head, with_mask", [(48, False), (64, True)])
def test_composite_takes_the_rest(dev, head, with_mask) -> None:  # type: ignore[no-untyped-def]
    """A mask or another head size: the composite forward; the backward kernel declines, and the
    core's composite rule gives the packed gradients."""
    q, k, v, g = _data((2, 30, head), (2, 45, head), (2, 45, head), (2, 30, head))
    mask = (RNG.random((30, 45)) < 0.7) if with_mask else None
    mask_args = (mask,) if with_mask else ()
    want = _reference(q, k, v, g, True, 0.2, mask)
    before = attention.CALLS.copy()
    args = [em.tensor(x, device=dev) for x in (q, k, v, *mask_args)]
    y = em.nn.functional.scaled_dot_product_attention(*args, is_causal=True, scale=0.2)
    _close(y.numpy(), want[0], 2e-5)
    for got, ref in zip(_packed(dev, g, q, k, v, True, 0.2, *mask_args), want[1:]):
        _close(got, ref, 5e-5)
    assert attention.CALLS["scaled_dot_product_attention"] == before["scaled_dot_product_attention"]
    assert attention.CALLS["attention_backward_declined"] == before["attention_backward_declined"] + 1


def test_geometry_fits_the_limits(rt) -> None:  # type: ignore[no-untyped-def]
    """Every kernel's tiles within 32 KiB and the adapter's workgroup memory, 64-128 invocations."""
    for head in attention.HEAD_SIZES:
        for kind in ("forward", "stats", "dq", "dkdv"):
            geo = attention.geometry(rt, kind, head)
            assert geo is not None
            h, rows, bn = geo
            assert 64 <= h * rows <= 128 and (head // 4) % h == 0


class _Limits:
    """A runtime's limits as geometry() reads them (a smaller adapter than this machine's)."""

    def __init__(self, shared: int, invocations: int = 256) -> None:
        self.shared_bytes = shared
        self.limits = {"max-compute-invocations-per-workgroup": invocations, "max-compute-workgroup-size-x": 256}


def test_geometry_shrinks_or_declines() -> None:
    """WebGPU's default 16 KiB: smaller key tiles, still 64-128 invocations; less than any tile or
    too few invocations: no geometry (the composite runs)."""
    for head in attention.HEAD_SIZES:
        for kind in ("forward", "stats", "dq", "dkdv"):
            geo = attention.geometry(_Limits(16384), kind, head)  # type: ignore[arg-type]
            assert geo is not None
            big = attention.geometry(_Limits(32768), kind, head)  # type: ignore[arg-type]
            assert big is not None and geo[2] <= big[2]
    assert attention.geometry(_Limits(4096), "dkdv", 128) is None  # type: ignore[arg-type]
    assert attention.geometry(_Limits(32768, invocations=64), "dq", 128) is None  # type: ignore[arg-type]


@pytest.mark.parametrize("budget, head", [(16384, 128), (8192, 64)])
def test_small_tiles(dev, rt, monkeypatch, budget, head) -> None:  # type: ignore[no-untyped-def]
    """The kernels with the tiles a smaller adapter gets (8 or 4 keys a step), still exact."""
    monkeypatch.setattr(attention, "_BUDGET", budget)
    assert attention.geometry(rt, "dkdv", head)[2] <= 8
    q, k, v, g = _data((2, 37, head), (2, 29, head), (2, 29, head), (2, 37, head))
    want = _reference(q, k, v, g, True, 0.1)
    before = attention.CALLS.copy()
    y = em.nn.functional.scaled_dot_product_attention(*(em.tensor(x, device=dev) for x in (q, k, v)), is_causal=True,
                                                      scale=0.1)  # fmt: skip
    _close(y.numpy(), want[0], 2e-5)
    for got, ref in zip(_packed(dev, g, q, k, v, True, 0.1), want[1:]):
        _close(got, ref, 5e-5)
    assert attention.CALLS["scaled_dot_product_attention"] == before["scaled_dot_product_attention"] + 1
    after = attention.CALLS["scaled_dot_product_attention_backward"]
    assert after == before["scaled_dot_product_attention_backward"] + 1


def _views(dev, layout, b, h, L, S, d):  # type: ignore[no-untyped-def]
    """q, k, v, g as ember views of one layout (and their numpy values, (b, h, n, d)); whether the
    kernels read them in place."""
    if layout == "fused":  # W4: one (b, n, 3 h d) projection split into heads: strided, read in place
        x = RNG.standard_normal((b, L, 3 * h * d)).astype(np.float32)
        t = em.tensor(x, device=dev)
        parts = [em.permute_dims(p.reshape((b, L, h, d)), (0, 2, 1, 3)) for p in em.split(t, 3, axis=-1)]
        arrays = [np.transpose(p.reshape(b, L, h, d), (0, 2, 1, 3)) for p in np.split(x, 3, axis=-1)]
    elif layout == "offset1":  # a head sliced from column 1: not whole vec4s, copied
        x = RNG.standard_normal((3, b, h, L, d + 1)).astype(np.float32)
        t = em.tensor(x, device=dev)
        parts = [t[i, :, :, :, 1:] for i in range(3)]
        arrays = [x[i, :, :, :, 1:] for i in range(3)]
    elif layout == "flipped":  # negative row strides: copied
        x = RNG.standard_normal((3, b, h, L, d)).astype(np.float32)
        t = em.tensor(x, device=dev)
        parts = [em.flip(t[i], axis=2) for i in range(3)]
        arrays = [x[i, :, :, ::-1] for i in range(3)]
    else:  # "batch4": four batch axes that collapse to none fewer: copied
        x = RNG.standard_normal((3, 2, b, 2, h, L, d)).astype(np.float32)
        t = em.tensor(x, device=dev)
        parts = [em.permute_dims(t[i], (1, 0, 3, 2, 4, 5)) for i in range(3)]
        arrays = [np.transpose(x[i], (1, 0, 3, 2, 4, 5)) for i in range(3)]
    g = RNG.standard_normal(arrays[0].shape).astype(np.float32)
    return parts, arrays, em.tensor(g, device=dev), g, layout == "fused"


@pytest.mark.parametrize("layout", ["fused", "offset1", "flipped", "batch4"])
def test_strided_operands(dev, rt, layout) -> None:  # type: ignore[no-untyped-def]
    """Operands read through their strides where they are whole vec4s (one dispatch, no copy), else
    copied first; the same values either way."""
    (q, k, v), arrays, gt, g, in_place = _views(dev, layout, 2, 2, 40, 40, 64)
    want = _reference(*arrays, g, True, 0.125)
    for x in (q, k, v, gt):
        x.realize()
    rt.synchronize()
    before = rt.dispatches
    y = em.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.125)
    y.realize()
    forward_dispatches = rt.dispatches - before
    _close(y.numpy(), want[0], 2e-5)
    if in_place:
        assert forward_dispatches == 1
    else:
        assert forward_dispatches > 1
    lead = arrays[0].shape[:-2]
    flat = attention_backward(gt, q, k, v, is_causal=True, scale=0.125).numpy()
    n = arrays[0].size
    for i, ref in enumerate(want[1:]):
        _close(flat[i * n : (i + 1) * n].reshape(lead + ref.shape[-2:]), ref, 5e-5)


@pytest.mark.parametrize("mask_shape", [(50, 60), (3, 1, 50, 60), None])
def test_composite_backward_in_batch_slices(dev, mask_shape) -> None:  # type: ignore[no-untyped-def]
    """Scores larger than any operand (declined by the kernels: head size 8): the core's composite
    backward runs a slice of the first batch axis at a time (a mask sliced along with it where it
    has that axis), the same gradients."""
    q, k, v, g = _data((3, 2, 50, 8), (1, 2, 60, 8), (3, 2, 60, 8), (3, 2, 50, 8))
    mask = None if mask_shape is None else RNG.random(mask_shape) < 0.8
    want = _reference(q, k, v, g, False, 0.3, mask)
    before = attention.CALLS["attention_backward_declined"]
    got = _packed(dev, g, q, k, v, False, 0.3, *(() if mask is None else (mask,)))
    for x, ref in zip(got, want[1:]):
        _close(x, ref, 5e-5)
    assert attention.CALLS["attention_backward_declined"] == before + 1

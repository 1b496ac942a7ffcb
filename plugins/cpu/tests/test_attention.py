"""The cpu backend's attention kernels (ember_cpu.attention) against float64 numpy references:
forward and the packed backward, odd shapes, masks, causal masks with rows that see no key,
broadcast batches, several blocks of heads, 16-bit inputs, the numpy row passes, and a check
that the native kernels (not the shared kernel and the composite rule) ran."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember_cpu import attention as attn
from ember_cpu.backend import NATIVE_CALLS

AD = em.Device.cpu().autodiff()


def _reference(q, k, v, g, mask=None, causal=False, scale=None):
    """(out, gq, gk, gv) in float64; forward rows that see no key are NaN, their gradients 0."""
    q, k, v, g = (np.asarray(a, dtype=np.float64) for a in (q, k, v, g))
    sc = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * sc
    n, m = s.shape[-2:]
    if causal:
        s = np.where(np.arange(m)[None, :] <= np.arange(n)[:, None] + (m - n), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    mx = s.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(s - np.where(np.isinf(mx), 0.0, mx))
        p = e / e.sum(axis=-1, keepdims=True)
    out = np.matmul(p, v)
    p = np.where(np.isnan(p), 0.0, p)
    gp = np.matmul(g, np.swapaxes(v, -1, -2))
    gs = p * (gp - (gp * p).sum(axis=-1, keepdims=True)) * sc
    return out, np.matmul(gs, k), np.matmul(np.swapaxes(gs, -1, -2), q), np.matmul(np.swapaxes(p, -1, -2), g)


def _sum_to(a, shape):
    """``a`` summed over the axes that ``shape`` broadcasts (a gradient of a broadcast operand)."""
    lead = a.ndim - len(shape)
    a = a.sum(axis=tuple(range(lead)))
    return a.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1 and a.shape[i] != 1), keepdims=True)


CASES = {
    "odd": ((2, 3, 5, 3), (2, 3, 7, 3), 6, {}),
    "heads": ((2, 4, 33, 16), (2, 4, 33, 16), 16, {}),
    "causal": ((2, 9, 8), (2, 9, 8), 5, {"is_causal": True}),
    "causal_more_keys": ((2, 5, 8), (2, 9, 8), 5, {"is_causal": True}),
    "causal_more_queries": ((3, 6, 4), (3, 3, 4), 4, {"is_causal": True}),  # rows 0-2 see no key
    "bool_mask": ((2, 5, 4), (2, 6, 4), 5, {"mask": "bool"}),
    "additive_mask": ((2, 5, 4), (2, 6, 4), 5, {"mask": "add", "scale": 0.3}),
    "broadcast_kv": ((2, 3, 5, 4), (1, 3, 6, 4), 5, {}),
    "blocks": ((3, 40, 64, 8), (3, 40, 64, 8), 8, {}),  # 40 heads of 64 x 64 scores: several blocks
    "no_batch": ((5, 4), (7, 4), 3, {}),
}


def _inputs(case, dtype, seed=0):
    shape_q, shape_k, ev, kw = CASES[case]
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_k).astype(dtype)
    v = rng.standard_normal(shape_k[:-1] + (ev,)).astype(dtype)
    batch = np.broadcast_shapes(shape_q[:-2], shape_k[:-2])
    g = rng.standard_normal(batch + shape_q[-2:-1] + (ev,)).astype(dtype)
    kw = dict(kw)
    kind = kw.pop("mask", None)
    mask = None
    if kind == "bool":
        mask = rng.random((shape_q[-2], shape_k[-2])) > 0.3
        mask[1] = False  # a row that sees no key
    elif kind == "add":
        mask = rng.standard_normal((shape_q[-2], shape_k[-2])).astype(dtype)
    return q, k, v, g, mask, kw


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_forward_and_gradients_run_the_native_kernels(case, dtype):
    q, k, v, g, mask, kw = _inputs(case, dtype)
    tq, tk, tv = (em.tensor(a, device=AD, requires_grad=True) for a in (q, k, v))
    extra = {} if mask is None else {"attn_mask": em.tensor(mask, device=AD)}
    before = dict(NATIVE_CALLS)
    out = em.scaled_dot_product_attention(tq, tk, tv, **extra, **kw)
    (out * em.tensor(g, device=AD)).sum().backward()
    assert NATIVE_CALLS["scaled_dot_product_attention"] == before["scaled_dot_product_attention"] + 1
    assert NATIVE_CALLS["scaled_dot_product_attention_backward"] == before["scaled_dot_product_attention_backward"] + 1
    want = _reference(q, k, v, g, mask, kw.get("is_causal", False), kw.get("scale"))
    tol = {"rtol": 2e-5, "atol": 2e-6} if dtype == np.float32 else {"rtol": 1e-11, "atol": 1e-12}
    np.testing.assert_allclose(out.detach().numpy(), want[0], **tol)  # NaN where the reference is NaN
    for t, w in zip((tq, tk, tv), want[1:]):
        np.testing.assert_allclose(t.grad.numpy(), _sum_to(w, t.shape), **tol)


@pytest.mark.parametrize("case", ["odd", "causal_more_queries", "bool_mask", "additive_mask"])
def test_the_numpy_row_passes_match_the_numba_ones(monkeypatch, case):
    """Without numba the same blocks run numpy row passes: the same values."""
    q, k, v, g, mask, kw = _inputs(case, np.float64)
    causal, scale = kw.get("is_causal", False), kw.get("scale", 0.5)
    fast = attn.attention_forward(q, k, v, mask, is_causal=causal, scale=scale)
    fast_grads = attn.attention_backward(g, q, k, v, mask, is_causal=causal, scale=scale)
    monkeypatch.setattr(attn, "_rows", lambda: None)
    slow = attn.attention_forward(q, k, v, mask, is_causal=causal, scale=scale)
    slow_grads = attn.attention_backward(g, q, k, v, mask, is_causal=causal, scale=scale)
    np.testing.assert_allclose(slow, fast, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(slow_grads, fast_grads, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_inputs_compute_in_float32(dtype):
    q, k, v, g, _, _ = _inputs("odd", np.float32)
    dt = getattr(em, dtype)
    tq, tk, tv = (em.tensor(a, device=AD).astype(dt).requires_grad_() for a in (q, k, v))
    out = em.scaled_dot_product_attention(tq, tk, tv)
    (out * em.tensor(g, device=AD).astype(dt)).sum().backward()
    assert out.dtype == dt and tq.grad.dtype == dt
    rounded = [t.detach().astype(em.float32).numpy() for t in (tq, tk, tv)]
    want = _reference(*rounded, em.tensor(g, device=AD).astype(dt).astype(em.float32).numpy())
    tol = {"rtol": 2e-2, "atol": 2e-2}
    np.testing.assert_allclose(out.astype(em.float32).numpy(), want[0], **tol)
    for t, w in zip((tq, tk, tv), want[1:]):
        np.testing.assert_allclose(t.grad.astype(em.float32).numpy(), w, **tol)


def test_the_output_keeps_the_layout_of_heads_cut_from_one_projection():
    """q as (B, L, H, E) memory seen as (B, H, L, E): the output lies the same way, so the usual
    permute-and-merge of the heads is a view."""
    rng = np.random.default_rng(1)
    b, n, h, e = 2, 6, 3, 4
    qkv = rng.standard_normal((b, n, 3, h, e)).astype(np.float32)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    out = attn.attention_forward(q, k, v, None, is_causal=False, scale=0.5)
    merged = out.transpose(0, 2, 1, 3).reshape(b, n, h * e)
    assert np.shares_memory(merged, out)
    g = np.ones_like(out)
    np.testing.assert_allclose(out, _reference(q, k, v, g, scale=0.5)[0], rtol=2e-5, atol=2e-6)


def test_exp_helpers_are_accurate():
    pytest.importorskip("numba")
    from numba import njit

    from ember_cpu.attention_kernels import exp_f32, exp_f64

    @njit
    def run(x32, x64, out32, out64):
        for i in range(x32.size):
            out32[i] = exp_f32(x32[i])
            out64[i] = exp_f64(x64[i])

    x64 = np.concatenate([np.linspace(-100.0, 0.0, 20001), [-np.inf, np.nan, -87.5, -1e-8]])
    x32 = x64.astype(np.float32)
    out32, out64 = np.empty_like(x32), np.empty_like(x64)
    run(x32, x64, out32, out64)
    want = np.exp(x32.astype(np.float64))
    np.testing.assert_allclose(out32, want, rtol=3e-7, atol=1e-37, equal_nan=True)
    np.testing.assert_allclose(out64, np.exp(x64), rtol=1e-9, atol=0, equal_nan=True)


def test_blocks_on_worker_threads_give_the_serial_result(monkeypatch):
    """Blocks spread over threads (each product then on one BLAS thread) write their own slices:
    the same bits as the blocks run in order, and the BLAS's thread count is put back. (With the
    split products off: ember_cpu.gemm's blocks are tests/test_gemm.py's.)"""
    from ember_cpu import gemm  # noqa: PLC0415

    monkeypatch.setattr(gemm.policy, "on", False)
    q, k, v, g, mask, kw = _inputs("blocks", np.float32)

    def both():
        return (
            attn.attention_forward(q, k, v, mask, is_causal=False, scale=0.3),
            attn.attention_backward(g, q, k, v, mask, is_causal=False, scale=0.3),
        )

    attn._WORKERS.threads()  # finds the BLAS (once)
    monkeypatch.setattr(attn._WORKERS, "threads", lambda: 2)
    if not attn._WORKERS._libs:
        pytest.skip("threadpoolctl cannot pin numpy's BLAS here: the blocks always run in order")
    before = [lib.num_threads for lib in attn._WORKERS._libs]
    threaded = both()
    assert [lib.num_threads for lib in attn._WORKERS._libs] == before
    monkeypatch.setattr(attn._WORKERS, "threads", lambda: 1)
    serial = both()
    for a, b in zip(threaded, serial):
        np.testing.assert_array_equal(a, b)


def test_empty_lengths():
    """No queries: empty results; no keys: a zero output (an empty sum) and zero gradients."""
    for sq, sk in (((2, 0, 4), (2, 3, 4)), ((2, 3, 4), (2, 0, 4)), ((0, 3, 4), (0, 3, 4))):
        q, k = np.ones(sq, np.float32), np.ones(sk, np.float32)
        v = np.ones(sk[:-1] + (5,), np.float32)
        g = np.ones(sq[:-1] + (5,), np.float32)
        out = attn.attention_forward(q, k, v, None, is_causal=False, scale=0.5)
        packed = attn.attention_backward(g, q, k, v, None, is_causal=False, scale=0.5)
        assert out.shape == sq[:-1] + (5,) and not out.any()
        assert packed.shape == (q.size + k.size + v.size,) and not packed.any()

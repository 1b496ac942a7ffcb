"""ONNX handlers: Attention (opset 23+) and RotaryEmbedding, in ember ops."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember as em

from ..tensor import Tensor
from .registry import Context, OnnxNode, handler
from .util import const, dtype_of, host, on, unsupported


def _heads(t: Tensor, n: int) -> Tensor:
    """(B, S, n*h) -> (B, n, S, h)."""
    b, s, hidden = t.shape
    return t.reshape((b, s, n, hidden // n)).permute((0, 2, 1, 3))


def _allowed(rule: Any, lq: int, lk: int, offset: Any, dt: Any, device: Any) -> Tensor:
    """0 where ``rule(i + offset - j)`` holds, -inf elsewhere: (lq, lk), or (B, 1, lq, lk)
    when ``offset`` has one entry per batch."""
    i = np.arange(lq).reshape(lq, 1)
    j = np.arange(lk).reshape(1, lk)
    if np.ndim(offset):
        d = (i + np.reshape(offset, (-1, 1, 1))) - j
        return on(np.where(rule(d), 0.0, -np.inf).astype(dt.numpy)[:, None], device)
    return on(np.where(rule(i + int(offset) - j), 0.0, -np.inf).astype(dt.numpy), device)


def _safe_softmax(x: Tensor) -> Tensor:
    """Softmax over the last axis where a row of only -inf gives zeros, not NaN."""
    m = em.max(x, axis=-1, keepdims=True)
    m = em.where(em.isinf(m) & (m < 0), em.zeros_like(m), m)
    e = em.exp(x - m)
    s = em.sum(e, axis=-1, keepdims=True)
    return e / em.where(s == 0, em.ones_like(s), s)


@handler("Attention", since=23)
def _attention(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    xs = xs + [None] * (7 - len(xs))
    xs[6] = xs[6] if len(xs) > 6 else None
    q, k, v, mask, past_k, past_v, nonpad = xs[:7]
    if nonpad is not None and past_k is not None:
        raise unsupported(node, "Attention with both nonpad_kv_seqlen and a past cache")
    rank3 = q.ndim == 3
    if rank3:
        qh, kvh = node.attr("q_num_heads"), node.attr("kv_num_heads")
        q, k, v = _heads(q, qh), _heads(k, kvh), _heads(v, kvh)
    scale = node.attr("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    root = math.sqrt(scale)
    if past_k is not None:
        k = em.concat([past_k, k], axis=2)
    if past_v is not None:
        v = em.concat([past_v, v], axis=2)
    present_k, present_v = k, v
    lq, lk = q.shape[2], k.shape[2]
    dt = q.dtype
    bias = em.zeros((lq, lk), dtype=dt, device=q.device)
    neg_inf = const(-math.inf, q)
    if mask is not None and mask.shape[-1] < lk:
        pad = lk - mask.shape[-1]
        widths = ((0, 0),) * (mask.ndim - 1) + ((0, pad),)
        mask = em.pad(mask, widths, value=False if mask.dtype.name == "bool" else -math.inf)
    if mask is not None and mask.dtype.name == "bool":
        mask = em.where(mask, em.zeros((), dtype=dt, device=q.device), neg_inf)
    # the query rows' positions among the keys: a scalar, or one per batch (external cache)
    if nonpad is not None:
        offset: Any = host(nonpad).reshape(-1).astype(np.int64) - lq
    else:
        offset = past_k.shape[2] if past_k is not None else 0
    if node.attr("is_causal", 0):
        base = mask if mask is not None else bias
        bias = base + _allowed(lambda d: d >= 0, lq, lk, offset, dt, q.device)
    elif mask is not None:
        bias = bias + mask
    left, right = node.attr("left_window_size", -1), node.attr("right_window_size", -1)
    if left >= 0 or right >= 0:

        def window(d: np.ndarray) -> np.ndarray:
            ok = np.ones(d.shape, dtype=bool)
            if left >= 0:
                ok &= d <= left
            if right >= 0:
                ok &= -d <= right
            return ok

        bias = bias + _allowed(window, lq, lk, offset, dt, q.device)
    if nonpad is not None:
        keep = np.arange(lk).reshape(1, lk) < host(nonpad).reshape(-1, 1)
        pad = np.where(keep, 0.0, -np.inf).astype(dt.numpy).reshape(keep.shape[0], 1, 1, lk)
        bias = bias + on(pad, q.device)
    h = q.shape[1]
    if k.shape[1] != h:
        reps = h // k.shape[1]
        k = em.repeat(k, reps, axis=1)
        v = em.repeat(v, reps, axis=1)
    qk = em.matmul(q * root, (k * root).mT)
    softcap = node.attr("softcap")
    mode = node.attr("qk_matmul_output_mode", 0)
    if softcap:
        qk = em.tanh(qk / softcap) * softcap
    scores = qk + bias
    qk_out = scores if mode == 2 else qk
    precision = node.attr("softmax_precision")
    if precision is not None:
        scores = scores.astype(dtype_of(precision, node))
    probs = _safe_softmax(scores)
    m = em.max(bias, axis=-1, keepdims=True)
    probs = em.where(em.isinf(m) & (m < 0), em.zeros_like(probs), probs).astype(dt)
    if mode == 3:
        qk_out = probs
    y = em.matmul(probs, v)
    if rank3:
        y = y.permute((0, 2, 1, 3))
        y = y.reshape((y.shape[0], y.shape[1], -1))
    return [y, present_k, present_v, qk_out.astype(dt)]


@handler("RotaryEmbedding", since=23)
def _rotary(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, cos, sin = xs[0], xs[1], xs[2]
    pos = xs[3] if len(xs) > 3 else None
    interleaved = bool(node.attr("interleaved", 0))
    rank3 = x.ndim == 3
    if rank3:
        n = node.attr("num_heads")
        b, s, hidden = x.shape
        x = x.reshape((b, s, n, hidden // n))
    else:
        x = x.permute((0, 2, 1, 3))  # (B, S, N, H)
    if pos is not None:
        cos = em.take(cos, pos.reshape((-1,)).astype("int64"), axis=0).reshape(pos.shape + (cos.shape[-1],))
        sin = em.take(sin, pos.reshape((-1,)).astype("int64"), axis=0).reshape(pos.shape + (sin.shape[-1],))
    head = x.shape[-1]
    rot = node.attr("rotary_embedding_dim", 0) or head
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    half = rot // 2
    cos = em.expand_dims(cos[..., :half], axis=2)  # (B, S, 1, half)
    sin = em.expand_dims(sin[..., :half], axis=2)
    if interleaved:
        x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]
    else:
        x1, x2 = x_rot[..., :half], x_rot[..., half:]
    r1 = x1 * cos - x2 * sin
    r2 = x2 * cos + x1 * sin
    if interleaved:
        out = em.stack([r1, r2], axis=-1).reshape(x_rot.shape)
    else:
        out = em.concat([r1, r2], axis=-1)
    y = em.concat([out, x_pass], axis=-1) if rot < head else out
    if rank3:
        return y.reshape((y.shape[0], y.shape[1], -1))
    return y.permute((0, 2, 1, 3))


def _split_heads(t: Tensor, n: int) -> Tensor:
    b, s, hd = t.shape
    return t.reshape((b, s, n, hd // n)).permute((0, 2, 1, 3))


@handler("LinearAttention")
def _linear_attention(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    xs = xs + [None] * (6 - len(xs))
    q, k, v, past, decay, beta = xs[:6]
    rule = node.attr("update_rule", "gated_delta")
    qh, kvh = node.attr("q_num_heads"), node.attr("kv_num_heads")
    if not qh or not kvh or qh % kvh:
        raise unsupported(node, f"LinearAttention with q_num_heads={qh}, kv_num_heads={kvh}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise unsupported(node, f"update_rule {rule!r} with these decay/beta inputs")
    out_dt = q.dtype
    f32 = "float32"
    b, t, _ = q.shape
    dk = q.shape[-1] // qh
    dv = v.shape[-1] // kvh
    group = qh // kvh
    q4, k4, v4 = (_split_heads(a.astype(f32), n) for a, n in ((q, qh), (k, kvh), (v, kvh)))
    if decay is not None:
        d4 = decay.astype(f32)
        if d4.shape[-1] == kvh:
            d4 = d4.reshape((b, t, kvh, 1)).permute((0, 2, 1, 3))
        else:
            d4 = _split_heads(d4, kvh)
    if beta is not None:
        b4 = beta.astype(f32).reshape((b, t, beta.shape[-1], 1)).permute((0, 2, 1, 3))
    state_dt = past.dtype if past is not None else out_dt
    state = past.astype(f32) if past is not None else em.zeros((b, kvh, dk, dv), dtype=f32, device=q.device)
    scale = node.attr("scale") or 1.0 / math.sqrt(dk)
    outs = []
    for i in range(t):
        qt, kt, vt = q4[:, :, i, :], k4[:, :, i, :], v4[:, :, i, :]
        if gating:
            state = state * em.expand_dims(em.exp(d4[:, :, i, :]), axis=-1)
        if delta:
            retrieved = em.squeeze(em.matmul(em.expand_dims(kt, axis=2), state), axis=2)
            vt = b4[:, :, i, :] * (vt - retrieved)
        state = state + em.expand_dims(kt, axis=-1) * em.expand_dims(vt, axis=-2)
        read = em.repeat(state, group, axis=1) if group > 1 else state
        outs.append(em.squeeze(em.matmul(em.expand_dims(qt, axis=2), read), axis=2) * scale)
    y = em.stack(outs, axis=2).permute((0, 2, 1, 3)).reshape((b, t, qh * dv))
    return [y.astype(out_dt), state.astype(state_dt)]

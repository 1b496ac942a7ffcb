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

"""Kernels for ember's neural-network composites (same signatures as the composites), over any
registered array module: each finds its library from its first input.

Each computes in float32 for 16-bit inputs and rounds the result back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .registry import module_of

__all__ = ["KERNELS"]


def _wide(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*arrays: Any, **kw: Any) -> Any:
        m = module_of(arrays[0])
        dt = arrays[0].dtype
        if dt.itemsize == 2:
            conv = [a.astype(m.xp.float32) if isinstance(a, m.ndarray) and a.dtype == dt else a for a in arrays]
            return m.xp.asarray(fn(*conv, **kw)).astype(dt)
        return m.xp.asarray(fn(*arrays, **kw))

    wrapped.__name__ = fn.__name__
    return wrapped


@_wide
def relu(a: Any) -> Any:
    xp = module_of(a).xp
    return xp.maximum(a, 0) if a.dtype.kind == "f" else xp.maximum(a, a.dtype.type(0))


@_wide
def sigmoid(a: Any) -> Any:
    return module_of(a).expit(a).astype(a.dtype, copy=False)  # one pass, ~3x faster than exp/where


@_wide
def gelu(a: Any) -> Any:
    m = module_of(a)
    return (0.5 * a * (1.0 + m.erf(a * a.dtype.type(0.7071067811865476)))).astype(a.dtype, copy=False)


@_wide
def silu(a: Any) -> Any:
    return (a * sigmoid(a)).astype(a.dtype, copy=False)


@_wide
def softplus(a: Any) -> Any:
    xp = module_of(a).xp
    return (xp.maximum(a, 0) + xp.log1p(xp.exp(-xp.abs(a)))).astype(a.dtype, copy=False)


def _max_keep(a: Any, axis: Any) -> Any:
    xp = module_of(a).xp
    m = xp.max(a, axis=axis, keepdims=True)
    return xp.where(xp.isinf(m), 0, m)


@_wide
def softmax(a: Any, *, axis: int) -> Any:
    xp = module_of(a).xp
    e = xp.exp(a - _max_keep(a, axis))
    return e / xp.sum(e, axis=axis, keepdims=True)


@_wide
def softmax_backward(y: Any, g: Any, *, axis: int) -> Any:
    xp = module_of(y).xp
    return y * (g - xp.sum(g * y, axis=axis, keepdims=True))


@_wide
def log_softmax(a: Any, *, axis: int) -> Any:
    xp = module_of(a).xp
    s = a - _max_keep(a, axis)
    return s - xp.log(xp.sum(xp.exp(s), axis=axis, keepdims=True))


@_wide
def logsumexp(a: Any, *, axes: tuple[int, ...], keepdims: bool) -> Any:
    xp = module_of(a).xp
    m = _max_keep(a, axes)
    out = xp.log(xp.sum(xp.exp(a - m), axis=axes, keepdims=True)) + m
    return out if keepdims else xp.squeeze(out, axis=axes)


@_wide
def layer_norm(x: Any, w: Any, b: Any, *, eps: float) -> Any:
    xp = module_of(x).xp
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    mu = xp.mean(x, axis=axes, keepdims=True)
    d = x - mu
    var = xp.mean(d * d, axis=axes, keepdims=True)
    return d * (1.0 / xp.sqrt(var + eps)).astype(x.dtype, copy=False) * w + b


@_wide
def rms_norm(x: Any, w: Any, *, eps: float) -> Any:
    xp = module_of(x).xp
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    r = 1.0 / xp.sqrt(xp.mean(x * x, axis=axes, keepdims=True) + eps)
    return x * r.astype(x.dtype, copy=False) * w


@_wide
def cross_entropy(logits: Any, target: Any, *, label_smoothing: float, ignore_index: int) -> Any:
    xp = module_of(logits).xp
    logp = log_softmax(logits, axis=1)
    valid = target != ignore_index
    safe = xp.where(valid, target, 0)
    picked = xp.take_along_axis(logp, xp.expand_dims(safe, 1), axis=1).squeeze(1)
    loss = -picked
    if label_smoothing:
        c = logits.shape[1]
        loss = (1.0 - label_smoothing) * loss - (label_smoothing / c) * xp.sum(logp, axis=1)
    return xp.where(valid, loss, 0).astype(logits.dtype, copy=False)


@_wide
def cross_entropy_backward(g: Any, logits: Any, target: Any, *, label_smoothing: float, ignore_index: int) -> Any:
    xp = module_of(logits).xp
    c = logits.shape[1]
    valid = target != ignore_index
    safe = xp.expand_dims(xp.where(valid, target, 0), 1)
    classes = xp.arange(c).reshape((1, c) + (1,) * (logits.ndim - 2))
    hot = (safe == classes).astype(logits.dtype)
    if label_smoothing:
        hot = hot * (1.0 - label_smoothing) + label_smoothing / c
    scale = xp.expand_dims(xp.where(valid, g, 0), 1).astype(logits.dtype, copy=False)
    return (scale * (softmax(logits, axis=1) - hot)).astype(logits.dtype, copy=False)


@_wide
def attention(q: Any, k: Any, v: Any, *mask: Any, is_causal: bool, scale: float) -> Any:
    xp = module_of(q).xp
    s = xp.matmul(q, xp.swapaxes(k, -1, -2)) * q.dtype.type(scale)
    if is_causal:
        n, m = q.shape[-2], k.shape[-2]
        causal = xp.arange(m)[None, :] <= xp.arange(n)[:, None] + (m - n)
        s = xp.where(causal, s, -xp.inf)
    if mask:
        mk = mask[0]
        s = xp.where(mk, s, -xp.inf) if mk.dtype == xp.bool_ else s + mk
    p = softmax(s, axis=-1)
    return xp.matmul(p, v)


KERNELS: dict[str, Callable[..., Any]] = {
    "relu": relu,
    "sigmoid": sigmoid,
    "gelu": gelu,
    "silu": silu,
    "softplus": softplus,
    "softmax": softmax,
    "softmax_backward": softmax_backward,
    "log_softmax": log_softmax,
    "logsumexp": logsumexp,
    "layer_norm": layer_norm,
    "rms_norm": rms_norm,
    "cross_entropy": cross_entropy,
    "cross_entropy_backward": cross_entropy_backward,
    "scaled_dot_product_attention": attention,
}

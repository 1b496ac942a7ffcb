"""Neural-network composites: softmax, normalisation, cross-entropy, attention."""

from __future__ import annotations

import numpy as np

import ember as em
from ember.ops.attention import attention_backward, attention_backward_from_output
from ember.ops.nn import cross_entropy_backward, layer_norm_backward, layer_norm_grads, softmax_backward

from ..inputs import Arg, Case, Domain
from .base import FLOAT, OpSpec, x

__all__ = ["NN"]


def _np_softmax(a, axis=-1):
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    e = np.exp(a - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def _np_log_softmax(a, axis=-1):
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    s = a - m
    return s - np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


def _np_normalize(a, axes, eps):
    mu = np.mean(a, axis=axes, keepdims=True)
    var = np.mean((a - mu) ** 2, axis=axes, keepdims=True)
    return (a - mu) / np.sqrt(var + eps)


def _np_layer_norm(a, w=None, b=None, eps=1e-5, n=1):
    y = _np_normalize(a, tuple(range(a.ndim - n, a.ndim)), eps)
    return y * (1.0 if w is None else w) + (0.0 if b is None else b)


def _np_layer_norm_backward(g, a, w, eps=1e-5):
    axes = tuple(range(a.ndim - w.ndim, a.ndim))
    mu = np.mean(a, axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(np.mean((a - mu) ** 2, axis=axes, keepdims=True) + eps)
    xhat, gh = (a - mu) * rstd, g * w
    return rstd * (gh - np.mean(gh, axis=axes, keepdims=True) - xhat * np.mean(gh * xhat, axis=axes, keepdims=True))


def _np_cross_entropy_backward(g, a, t, label_smoothing=0.0, ignore_index=-100):
    """g * (softmax(a) - smoothed one-hot(t)) along the class axis 1, zero where t is ignored."""
    c = a.shape[1]
    p = _np_softmax(a, axis=1)
    valid = t != ignore_index
    hot = np.moveaxis(np.eye(c)[np.where(valid, t, 0)], -1, 1) * (1 - label_smoothing) + label_smoothing / c
    return np.expand_dims(np.where(valid, g, 0.0), 1) * (p - hot)


def _np_rms_norm(a, w, eps=1e-6):
    axes = tuple(range(a.ndim - w.ndim, a.ndim))
    return a / np.sqrt(np.mean(a * a, axis=axes, keepdims=True) + eps) * w


def _bn_shape(a):
    return (1, a.shape[1]) + (1,) * (a.ndim - 2)


def _np_batch_norm_train(a, w, b, eps=1e-5):
    y = _np_normalize(a, (0,) + tuple(range(2, a.ndim)), eps)
    return y * w.reshape(_bn_shape(a)) + b.reshape(_bn_shape(a))


def _np_batch_norm_eval(a, rm, rv, w, b, eps=1e-5):
    s = _bn_shape(a)
    return (a - rm.reshape(s)) / np.sqrt(rv.reshape(s) + eps) * w.reshape(s) + b.reshape(s)


def _np_cross_entropy(logits, target, weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    if logits.ndim == 1:
        logits, target = logits[None], target[None]
    c = logits.shape[1]
    logp = _np_log_softmax(logits, axis=1)
    w = np.ones(c) if weight is None else weight
    if target.dtype.kind == "f":  # class probabilities
        t = target * (1.0 - label_smoothing) + label_smoothing / c
        loss = -np.sum(t * logp * w.reshape((1, c) + (1,) * (logits.ndim - 2)), axis=1)
        return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()
    valid = target != ignore_index
    safe = np.where(valid, target, 0)
    picked = np.take_along_axis(logp, safe[:, None], axis=1)[:, 0]
    loss = -(1.0 - label_smoothing) * picked - (label_smoothing / c) * np.sum(logp, axis=1)
    wt = np.where(valid, w[safe], 0.0)
    loss = np.where(valid, loss * w[safe], 0.0)
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / wt.sum()


def _np_attention(q, k, v, mask=None, is_causal=False, scale=None):
    sc = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * sc
    if is_causal:
        n, m = q.shape[-2], k.shape[-2]
        s = np.where(np.arange(m)[None, :] <= np.arange(n)[:, None] + (m - n), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    return np.matmul(_np_softmax(s, axis=-1), v)


def _attention(q, k, v, mask=None, is_causal=False, scale=None):
    return em.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)


def _np_layer_norm_grads(g, a, w, eps=1e-5, need_x=True):
    axes = tuple(range(a.ndim - w.ndim, a.ndim))
    lead = tuple(range(a.ndim - w.ndim))
    xhat = _np_normalize(a, axes, eps)
    parts = [np.sum(g * xhat, axis=lead), np.sum(g, axis=lead)]
    if need_x:
        parts.insert(0, _np_layer_norm_backward(g, a, w, eps))
    return np.concatenate([np.ravel(p) for p in parts])


def _np_attention_backward(g, q, k, v, mask=None, is_causal=False, scale=None):
    """(gq, gk, gv) flattened and concatenated; rows that see no key give zero gradients."""
    sc = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * sc
    if is_causal:
        n, m = q.shape[-2], k.shape[-2]
        s = np.where(np.arange(m)[None, :] <= np.arange(n)[:, None] + (m - n), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    with np.errstate(invalid="ignore"):
        p = _np_softmax(s, axis=-1)
    p = np.where(np.isnan(p), 0.0, p)
    gp = np.matmul(g, np.swapaxes(v, -1, -2))
    gs = p * (gp - np.sum(gp * p, axis=-1, keepdims=True)) * sc
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    grads = (np.matmul(gs, k), np.matmul(np.swapaxes(gs, -1, -2), q), np.matmul(np.swapaxes(p, -1, -2), g))
    return np.concatenate([np.broadcast_to(t, batch + a.shape[-2:]).reshape(-1) for t, a in zip(grads, (q, k, v))])


def _attention_backward(g, q, k, v, mask=None, is_causal=False, scale=None):
    masks = () if mask is None else (mask,)
    return attention_backward(g, q, k, v, *masks, is_causal=is_causal, scale=scale)


def _attention_backward_from_output(g, q, k, v, mask=None, is_causal=False, scale=None):
    """The backward given the forward's result, computed here (what a backend kept with it included)."""
    masks = () if mask is None else (mask,)
    out = _attention(q, k, v, mask, is_causal, scale)
    return attention_backward_from_output(g, q, k, v, out, *masks, is_causal=is_causal, scale=scale)


_ATTENTION_BACKWARD_CASES = (
    Case("basic", (x((2, 3, 6)), x((2, 3, 4)), x((2, 5, 4)), x((2, 5, 6)))),
    Case("heads", (x((2, 2, 5, 3)), x((2, 2, 5, 4)), x((2, 2, 7, 4)), x((2, 2, 7, 3)))),
    Case("causal", (x((1, 4, 3)), x((1, 4, 4)), x((1, 4, 4)), x((1, 4, 3))), {"is_causal": True}),
    # more queries than keys: the first rows see no key (zero gradients)
    Case("causal_empty", (x((2, 6, 3)), x((2, 6, 4)), x((2, 3, 4)), x((2, 3, 3))), {"is_causal": True}),
    Case("bool_mask", (x((2, 3, 6)), x((2, 3, 4)), x((2, 5, 4)), x((2, 5, 6)), Arg((3, 5), "mask"))),
    Case("additive_mask", (x((2, 3, 6)), x((2, 3, 4)), x((2, 5, 4)), x((2, 5, 6)), x((3, 5))), {"scale": 0.3}),
    # gk and gv sum the broadcast batch too: a backend computing in 16 bits (ember-checked's
    # float16) rounds that sum of products of products once more (3.7% seen, 1.6% allowed before)
    Case("broadcast_kv", (x((2, 3, 6)), x((2, 3, 4)), x((1, 5, 4)), x((1, 5, 6))), tol=2.5),
    Case("noncontig", (x((2, 3, 6)), x((2, 3, 4), "noncontig"), x((2, 5, 4), "flipped"), x((2, 5, 6), "strided"))),
    Case(
        "tiled_causal",
        (x((2, 2, 70, 32)), x((2, 2, 70, 32)), x((2, 2, 90, 32)), x((2, 2, 90, 32))),
        {"is_causal": True},
        tol=2.0,
        # 16-bit backends sum 70-90-term products of products in 16 bits: the smaller
        # cases check those dtypes
        only=frozenset({"float32", "float64"}),
    ),
)

_POS = Domain(0.5, 2.0)

_SOFTMAX_CASES = (
    Case("last", (x((3, 5)),), {"axis": -1}, grad=True),
    Case("axis0", (x((4, 3, 2)),), {"axis": 0}, grad=True),
    Case("noncontig", (x((4, 5), "noncontig"),), {"axis": 1}),
    Case("large", (x((67, 1031)),), {"axis": -1}),
    Case("big_values", (x((3, 6), domain=Domain(50.0, 90.0)),), {"axis": -1}),
    Case("special", (x((4, 8)),), {"axis": -1}, special=True),
)


def _np_softmax_backward(y, g, axis=-1):
    return y * (g - np.sum(g * y, axis=axis, keepdims=True))


_SOFTMAX_BACKWARD_CASES = (
    Case("last", (x((3, 5)), x((3, 5))), {"axis": -1}, grad=True),
    Case("axis0", (x((4, 3, 2)), x((4, 3, 2))), {"axis": 0}, grad=True),
    Case("rows", (x((2, 3, 70)), x((2, 3, 70), "noncontig")), {"axis": 2}),
)

NN: tuple[OpSpec, ...] = (
    OpSpec("softmax", em.softmax, _np_softmax, FLOAT, _SOFTMAX_CASES, grad=True, tol=2.0),
    OpSpec(
        "softmax_backward",
        lambda y, g, axis=-1: softmax_backward(y, g, axis),
        _np_softmax_backward,
        FLOAT,
        _SOFTMAX_BACKWARD_CASES,
        grad=True,
        tol=2.0,
    ),
    OpSpec("log_softmax", em.log_softmax, _np_log_softmax, FLOAT, _SOFTMAX_CASES, grad=True, tol=2.0),
    OpSpec(
        "layer_norm",
        lambda a, w, b: em.layer_norm(a, w.shape, w, b),
        lambda a, w, b: _np_layer_norm(a, w, b, n=w.ndim),
        FLOAT,
        (
            Case("last", (x((2, 3, 4)), x((4,)), x((4,))), grad=True),
            Case("last2", (x((2, 3, 4)), x((3, 4)), x((3, 4))), grad=True),
            Case("noncontig", (x((3, 5), "noncontig"), x((5,)), x((5,), "flipped"))),
            Case("large", (x((64, 1024)), x((1024,)), x((1024,)))),
        ),
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "layer_norm_plain",
        lambda a: em.layer_norm(a, a.shape[-1:]),
        lambda a: _np_layer_norm(a),
        FLOAT,
        (Case("last", (x((3, 6)),), grad=True),),
        ops=("layer_norm",),
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "layer_norm_backward",
        lambda g, a, w: layer_norm_backward(g, a, w),
        _np_layer_norm_backward,
        FLOAT,
        (
            Case("last", (x((2, 3, 4)), x((2, 3, 4)), x((4,))), grad=True),
            Case("last2", (x((2, 3, 4)), x((2, 3, 4)), x((3, 4))), grad=True),
            Case("noncontig", (x((3, 5)), x((3, 5), "noncontig"), x((5,), "flipped"))),
            Case("large", (x((64, 1024)), x((64, 1024)), x((1024,)))),
        ),
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "rms_norm",
        lambda a, w: em.rms_norm(a, w.shape, w),
        _np_rms_norm,
        FLOAT,
        (
            Case("last", (x((2, 3, 4)), x((4,))), grad=True),
            Case("last2", (x((2, 3, 4)), x((3, 4))), grad=True),
            Case("noncontig", (x((3, 5), "noncontig"), x((5,)))),
        ),
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "batch_norm",
        lambda a, w, b: em.batch_norm(a, None, None, w, b, training=True),
        _np_batch_norm_train,
        FLOAT,
        (
            Case("2d", (x((6, 3)), x((3,)), x((3,))), grad=True),
            Case("4d", (x((2, 3, 2, 2)), x((3,)), x((3,))), grad=True),
            Case("noncontig", (x((2, 3, 5), "noncontig"), x((3,)), x((3,)))),
        ),
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "batch_norm_eval",
        lambda a, rm, rv, w, b: em.batch_norm(a, rm, rv, w, b, training=False),
        _np_batch_norm_eval,
        FLOAT,
        (Case("3d", (x((2, 3, 4)), x((3,)), x((3,), domain=_POS), x((3,)), x((3,))), grad=True),),
        ops=(),
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "cross_entropy",
        em.cross_entropy,
        _np_cross_entropy,
        FLOAT,
        (
            Case("mean", (x((4, 5)), Arg((4,), "index", hi=5)), grad=True),
            Case("spatial", (x((2, 3, 4)), Arg((2, 4), "index", hi=3)), grad=True),
            Case("sum", (x((4, 5)), Arg((4,), "index", hi=5)), {"reduction": "sum"}),
            Case("none", (x((4, 5)), Arg((4,), "index", hi=5)), {"reduction": "none"}, grad=True),
            Case("smoothing", (x((4, 5)), Arg((4,), "index", hi=5)), {"label_smoothing": 0.1}, grad=True),
            Case("ignore", (x((6, 5)), Arg((6,), "index", lo=-1, hi=5)), {"ignore_index": -1}, grad=True),
            Case("1d", (x((5,)), Arg((), "index", hi=5))),
            Case("probs", (x((4, 5)), x((4, 5), domain=Domain(0.0, 1.0))), grad=True),
            Case("large", (x((256, 1000)), Arg((256,), "index", hi=1000))),
        ),
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "cross_entropy_backward",
        cross_entropy_backward,
        _np_cross_entropy_backward,
        FLOAT,
        (
            Case("rows", (x((4,)), x((4, 5)), Arg((4,), "index", hi=5))),
            Case("classes10", (x((6,)), x((6, 10)), Arg((6,), "index", hi=10))),
            Case("spatial", (x((2, 4)), x((2, 3, 4)), Arg((2, 4), "index", hi=3))),
            Case("smoothing", (x((4,)), x((4, 5)), Arg((4,), "index", hi=5)), {"label_smoothing": 0.1}),
            Case("ignore", (x((6,)), x((6, 5)), Arg((6,), "index", lo=-1, hi=5)), {"ignore_index": -1}),
            Case("noncontig", (x((3,), "flipped"), x((3, 5), "noncontig"), Arg((3,), "index", hi=5))),
            Case("large", (x((256,)), x((256, 1000)), Arg((256,), "index", hi=1000))),
        ),
        tol=4.0,
    ),
    OpSpec(
        "cross_entropy_weighted",
        lambda a, t, w: em.cross_entropy(a, t, weight=w),
        lambda a, t, w: _np_cross_entropy(a, t, weight=w),
        FLOAT,
        (Case("mean", (x((6, 5)), Arg((6,), "index", hi=5), x((5,), domain=_POS)), grad=True),),
        ops=("cross_entropy",),
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "scaled_dot_product_attention",
        _attention,
        _np_attention,
        FLOAT,
        (
            Case("basic", (x((2, 3, 4)), x((2, 5, 4)), x((2, 5, 6))), grad=True),
            Case("causal", (x((1, 4, 4)), x((1, 4, 4)), x((1, 4, 3))), {"is_causal": True}, grad=True),
            Case("bool_mask", (x((2, 3, 4)), x((2, 5, 4)), x((2, 5, 6)), Arg((3, 5), "mask"))),
            Case("additive_mask", (x((2, 3, 4)), x((2, 5, 4)), x((2, 5, 6)), x((3, 5))), grad=True),
            Case("scale", (x((2, 3, 4)), x((2, 3, 4)), x((2, 3, 4))), {"scale": 0.3}),
            Case("heads", (x((2, 2, 3, 4)), x((2, 2, 5, 4)), x((2, 2, 5, 4)))),
            Case("noncontig", (x((2, 3, 4), "noncontig"), x((2, 5, 4), "flipped"), x((2, 5, 6), "strided"))),
            # a head size and lengths that tiled kernels take (ember-cuda's flash kernel: 64-row tiles);
            # twice the tolerance: a backend computing float16 in float16 (ember-checked) sums 32- and
            # 90-term products in it
            Case("tiled", (x((1, 65, 32)), x((1, 66, 32)), x((1, 66, 32))), grad=True, tol=2.0),
            Case(
                "tiled_causal",
                (x((2, 2, 70, 32)), x((2, 2, 90, 32)), x((2, 2, 90, 32))),
                {"is_causal": True},
                tol=2.0,
            ),
        ),
        grad=True,
        tol=4.0,
    ),
    OpSpec(
        "layer_norm_grads",
        lambda g, a, w, need_x=True: layer_norm_grads(g, a, w, need_x=need_x),
        _np_layer_norm_grads,
        FLOAT,
        (
            Case("last", (x((2, 3, 4)), x((2, 3, 4)), x((4,)))),
            Case("last2", (x((2, 3, 4)), x((2, 3, 4)), x((3, 4)))),
            Case("params_only", (x((2, 3, 5)), x((2, 3, 5)), x((5,))), {"need_x": False}),
            Case("noncontig", (x((3, 5)), x((3, 5), "noncontig"), x((5,), "flipped"))),
            # gw and gb sum 64 rows: 16-bit backends sum them in 16 bits (the smaller cases check those)
            Case("large", (x((64, 1024)), x((64, 1024)), x((1024,))), only=frozenset({"float32", "float64"})),
        ),
        tol=4.0,
    ),
    OpSpec(
        "scaled_dot_product_attention_backward",
        _attention_backward,
        _np_attention_backward,
        FLOAT,
        _ATTENTION_BACKWARD_CASES,
        tol=4.0,
    ),
    OpSpec(
        "scaled_dot_product_attention_backward_from_output",
        _attention_backward_from_output,
        _np_attention_backward,
        FLOAT,
        _ATTENTION_BACKWARD_CASES,
        # its own draws put one float16 value of the composite's "heads" case (every op rounding
        # to 16 bits; g . p - delta cancels) at 1.4x the row above's bound on ember-opencl
        tol=6.0,
    ),
)

"""Independent numpy float64 references of the ``ember.nn`` layers (forward only; the
conformance tests take gradients of these by central differences), and layer_norm's gradients
in closed form, for backends' tests of a native ``layer_norm_backward`` kernel.

Every function takes the layer's state as a dict of numpy arrays keyed by PyTorch's
parameter names (``weight``, ``in_proj_weight``, ``weight_ih_l0``...), so the tests also pin
the names. Written from the PyTorch documentation's formulas, without ember.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "linear",
    "conv2d",
    "conv_transpose2d",
    "layer_norm",
    "layer_norm_grads",
    "rms_norm",
    "group_norm",
    "batch_norm_train",
    "batch_norm_eval",
    "embedding",
    "lstm",
    "gru",
    "multi_head_attention",
    "encoder_layer",
    "sigmoid",
    "softmax",
    "gelu",
]

State = dict[str, np.ndarray]
_erf = np.vectorize(math.erf, otypes=[np.float64])


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isinf(m), 0.0, m)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = x @ w.T
    return y if b is None else y + b


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
) -> np.ndarray:
    """Direct convolution (cross-correlation) of (N, C, H, W) by (O, C / groups, kh, kw)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (wd + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, ho, wo))
    for g in range(groups):
        xs = xp[:, g * cg : (g + 1) * cg]
        ws = w[g * og : (g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh : i * dh + sh * (ho - 1) + 1 : sh, j * dw : j * dw + sw * (wo - 1) + 1 : sw]
                out[:, g * og : (g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out if b is None else out + b[None, :, None, None]


def conv_transpose2d(
    x: np.ndarray,
    w: np.ndarray,
    b: np.ndarray | None,
    stride: tuple[int, int],
    padding: tuple[int, int],
    output_padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
) -> np.ndarray:
    """Transposed convolution by scattering: weight (C_in, C_out / groups, kh, kw)."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    wo = (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    full = np.zeros((n, og * groups, ho + 2 * ph, wo + 2 * pw))
    cg = c // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                contrib = np.einsum("nchw,co->nohw", x[:, g * cg : (g + 1) * cg], w[g * cg : (g + 1) * cg, :, i, j])
                rows = slice(i * dh, i * dh + sh * (h - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (wd - 1) + 1, sw)
                full[:, g * og : (g + 1) * og, rows, cols] += contrib
    out = full[:, :, ph : ph + ho, pw : pw + wo]
    return out if b is None else out + b[None, :, None, None]


def layer_norm(x: np.ndarray, ndim: int, w: np.ndarray | None, b: np.ndarray | None, eps: float) -> np.ndarray:
    axes = tuple(range(x.ndim - ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    if w is not None:
        y = y * w
    return y if b is None else y + b


def layer_norm_grads(
    g: np.ndarray, x: np.ndarray, ndim: int, w: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of ``sum(layer_norm(x, ndim, w, b, eps) * g)`` for x, w and b:
    rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)), sum(g * xhat) and sum(g) over the
    leading axes."""
    axes = tuple(range(x.ndim - ndim, x.ndim))
    mu = x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=axes, keepdims=True) + eps)
    xhat, gh = (x - mu) * rstd, g * w
    dx = rstd * (gh - gh.mean(axis=axes, keepdims=True) - xhat * (gh * xhat).mean(axis=axes, keepdims=True))
    lead = tuple(range(x.ndim - ndim))
    return dx, (g * xhat).sum(axis=lead), g.sum(axis=lead)


def rms_norm(x: np.ndarray, ndim: int, w: np.ndarray | None, eps: float) -> np.ndarray:
    axes = tuple(range(x.ndim - ndim, x.ndim))
    y = x / np.sqrt((x * x).mean(axis=axes, keepdims=True) + eps)
    return y if w is None else y * w


def group_norm(x: np.ndarray, groups: int, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1)
    mu = g.mean(axis=-1, keepdims=True)
    var = ((g - mu) ** 2).mean(axis=-1, keepdims=True)
    y = ((g - mu) / np.sqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * w.reshape(shape) + b.reshape(shape)


def _bn_axes(x: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return (0,) + tuple(range(2, x.ndim)), (1, x.shape[1]) + (1,) * (x.ndim - 2)


def batch_norm_train(x: np.ndarray, s: State, momentum: float, eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Output with batch statistics, and the updated running mean and (unbiased) variance."""
    axes, shape = _bn_axes(x)
    mu = x.mean(axis=axes)
    var = x.var(axis=axes)
    count = x.size // x.shape[1]
    y = (x - mu.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    y = y * s["weight"].reshape(shape) + s["bias"].reshape(shape)
    rm = (1 - momentum) * s["running_mean"] + momentum * mu
    rv = (1 - momentum) * s["running_var"] + momentum * var * count / (count - 1)
    return y, rm, rv


def batch_norm_eval(x: np.ndarray, s: State, eps: float) -> np.ndarray:
    _, shape = _bn_axes(x)
    y = (x - s["running_mean"].reshape(shape)) / np.sqrt(s["running_var"].reshape(shape) + eps)
    return y * s["weight"].reshape(shape) + s["bias"].reshape(shape)


def embedding(idx: np.ndarray, w: np.ndarray, padding_idx: int | None, frozen: np.ndarray) -> np.ndarray:
    """Rows of ``w``; rows at ``padding_idx`` come from ``frozen`` (a constant: no gradient)."""
    out = w[idx]
    if padding_idx is not None:
        out = np.where((idx == padding_idx)[..., None], frozen[idx], out)
    return out


def _rnn(
    cell: Any,
    gates: int,
    x: np.ndarray,
    s: State,
    num_layers: int,
    bidirectional: bool,
    batch_first: bool,
    states: list[np.ndarray],
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Shared layer/direction loop; ``states`` are (layers * dirs, N, H) arrays (h, and c for LSTM)."""
    seq = x.transpose(1, 0, 2) if batch_first else x
    dirs = 2 if bidirectional else 1
    finals: list[list[np.ndarray]] = [[] for _ in states]
    inp = seq
    for layer in range(num_layers):
        outs = []
        for d in range(dirs):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            w_ih, w_hh = s["weight_ih" + sfx], s["weight_hh" + sfx]
            b_ih = s.get("bias_ih" + sfx, np.zeros(w_ih.shape[0]))
            b_hh = s.get("bias_hh" + sfx, np.zeros(w_hh.shape[0]))
            carry = [st[layer * dirs + d] for st in states]
            ys = [None] * inp.shape[0]
            steps = range(inp.shape[0] - 1, -1, -1) if d else range(inp.shape[0])
            for t in steps:
                carry = cell(inp[t] @ w_ih.T + b_ih, carry[0] @ w_hh.T + b_hh, carry)
                ys[t] = carry[0]
            outs.append(np.stack(ys))
            for i, c in enumerate(carry):
                finals[i].append(c)
        inp = np.concatenate(outs, axis=-1)
    out = inp.transpose(1, 0, 2) if batch_first else inp
    return out, [np.stack(f) for f in finals]


def _lstm_cell(xw: np.ndarray, hw: np.ndarray, carry: list[np.ndarray]) -> list[np.ndarray]:
    i, f, g, o = np.split(xw + hw, 4, axis=-1)
    c = sigmoid(f) * carry[1] + sigmoid(i) * np.tanh(g)
    return [sigmoid(o) * np.tanh(c), c]


def _gru_cell(xw: np.ndarray, hw: np.ndarray, carry: list[np.ndarray]) -> list[np.ndarray]:
    xr, xz, xn = np.split(xw, 3, axis=-1)
    hr, hz, hn = np.split(hw, 3, axis=-1)
    r, z = sigmoid(xr + hr), sigmoid(xz + hz)
    n = np.tanh(xn + r * hn)
    return [(1 - z) * n + z * carry[0]]


def lstm(
    x: np.ndarray,
    s: State,
    num_layers: int,
    hidden: int,
    bidirectional: bool,
    batch_first: bool,
    h0: np.ndarray | None = None,
    c0: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(output, h_n, c_n), gates in PyTorch's order i, f, g, o."""
    n = x.shape[0] if batch_first else x.shape[1]
    shape = (num_layers * (2 if bidirectional else 1), n, hidden)
    h0 = np.zeros(shape) if h0 is None else h0
    c0 = np.zeros(shape) if c0 is None else c0
    out, (h, c) = _rnn(_lstm_cell, 4, x, s, num_layers, bidirectional, batch_first, [h0, c0])
    return out, h, c


def gru(
    x: np.ndarray,
    s: State,
    num_layers: int,
    hidden: int,
    bidirectional: bool,
    batch_first: bool,
    h0: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(output, h_n), gates in PyTorch's order r, z, n."""
    n = x.shape[0] if batch_first else x.shape[1]
    shape = (num_layers * (2 if bidirectional else 1), n, hidden)
    h0 = np.zeros(shape) if h0 is None else h0
    out, (h,) = _rnn(_gru_cell, 3, x, s, num_layers, bidirectional, batch_first, [h0])
    return out, h


def multi_head_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    s: State,
    num_heads: int,
    batch_first: bool,
    attn_mask: np.ndarray | None = None,
    key_padding_mask: np.ndarray | None = None,
    is_causal: bool = False,
    prefix: str = "",
) -> tuple[np.ndarray, np.ndarray]:
    """(output, head-averaged weights (N, L, S)); boolean masks are True where attention is not allowed."""
    if not batch_first:
        q, k, v = (t.transpose(1, 0, 2) for t in (q, k, v))
    n, lq, e = q.shape
    sk = k.shape[1]
    d = e // num_heads
    if prefix + "in_proj_weight" in s:
        wq, wk, wv = np.split(s[prefix + "in_proj_weight"], 3)
    else:
        wq, wk, wv = (s[prefix + f"{c}_proj_weight"] for c in "qkv")
    bq, bk, bv = np.split(s.get(prefix + "in_proj_bias", np.zeros(3 * e)), 3)

    def heads(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
        y = x @ w.T + b
        return y.reshape(n, y.shape[1], num_heads, d).transpose(0, 2, 1, 3)

    qh, kh, vh = heads(q, wq, bq), heads(k, wk, bk), heads(v, wv, bv)
    scores = qh @ kh.transpose(0, 1, 3, 2) / math.sqrt(d)
    add = np.zeros((n, 1, lq, sk))
    if attn_mask is not None:
        m = np.where(attn_mask, -np.inf, 0.0) if attn_mask.dtype == bool else attn_mask
        add = add + (m.reshape(n, num_heads, lq, sk) if m.ndim == 3 else m)
    if key_padding_mask is not None:
        add = add + np.where(key_padding_mask, -np.inf, 0.0)[:, None, None, :]
    if is_causal:
        add = add + np.where(np.triu(np.ones((lq, sk), dtype=bool), 1), -np.inf, 0.0)
    p = softmax(scores + add, axis=-1)
    out = (p @ vh).transpose(0, 2, 1, 3).reshape(n, lq, e)
    out = linear(out, s[prefix + "out_proj.weight"], s.get(prefix + "out_proj.bias"))
    if not batch_first:
        out = out.transpose(1, 0, 2)
    return out, p.mean(axis=1)


def encoder_layer(
    x: np.ndarray,
    s: State,
    nhead: int,
    norm_first: bool,
    activation: str,
    eps: float,
    batch_first: bool,
    key_padding_mask: np.ndarray | None = None,
    is_causal: bool = False,
) -> np.ndarray:
    """PyTorch's TransformerEncoderLayer without dropout."""
    act = gelu if activation == "gelu" else (lambda t: np.maximum(t, 0.0))

    def norm(t: np.ndarray, i: int) -> np.ndarray:
        return layer_norm(t, 1, s[f"norm{i}.weight"], s.get(f"norm{i}.bias"), eps)

    def sa(t: np.ndarray) -> np.ndarray:
        return multi_head_attention(
            t,
            t,
            t,
            s,
            nhead,
            batch_first,
            key_padding_mask=key_padding_mask,
            is_causal=is_causal,
            prefix="self_attn.",
        )[0]

    def ff(t: np.ndarray) -> np.ndarray:
        hidden = act(linear(t, s["linear1.weight"], s.get("linear1.bias")))
        return linear(hidden, s["linear2.weight"], s.get("linear2.bias"))

    if norm_first:
        x = x + sa(norm(x, 1))
        return x + ff(norm(x, 2))
    x = norm(x + sa(x), 1)
    return norm(x + ff(x), 2)

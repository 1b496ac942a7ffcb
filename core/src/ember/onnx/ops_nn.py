"""ONNX handlers: convolution, pooling, normalization, resizing, losses."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember as em

from ..tensor import Tensor
from .ops_tensor import pad_tensor
from .registry import Context, OnnxNode, handler
from .util import bad, checked_shape, const, host, ints, norm_axis, on, unsupported


# -- padding rules -----------------------------------------------------------------------------
def _pads(node: OnnxNode, sizes: tuple[int, ...], kernel: list[int], strides: list[int], dil: list[int]) -> list[int]:
    """ONNX ``pads`` ([begin..., end...]) after ``auto_pad``."""
    nd = len(kernel)
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for n, k, s, d in zip(sizes, kernel, strides, dil):
            out = -(-n // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
            small, big = total // 2, total - total // 2
            lo.append(small if auto == "SAME_UPPER" else big)
            hi.append(big if auto == "SAME_UPPER" else small)
        return lo + hi
    if auto == "VALID":
        return [0] * (2 * nd)
    if auto not in ("NOTSET", ""):
        raise bad(node, f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto!r}")
    pads = node.attr("pads") or [0] * (2 * nd)
    if len(pads) != 2 * nd:
        raise bad(node, f"pads has {len(pads)} entries; it needs {2 * nd}")
    return list(pads)


def _spatial_pad(x: Tensor, pads: list[int], value: float) -> Tensor:
    nd = len(pads) // 2
    full = [0, 0] + pads[:nd] + [0, 0] + pads[nd:]
    return pad_tensor(x, full, value, "constant", None, OnnxNode("", "Pad", "", [], []))


def _kernel_args(node: OnnxNode, x: Tensor, kernel: list[int]) -> tuple[list[int], list[int], list[int]]:
    nd = len(kernel)
    strides = node.attr("strides") or [1] * nd
    dil = node.attr("dilations") or [1] * nd
    return strides, dil, _pads(node, tuple(x.shape[2:]), kernel, strides, dil)


# -- convolution -------------------------------------------------------------------------------
@handler("Conv")
def _conv(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    kernel = node.attr("kernel_shape") or list(w.shape[2:])
    strides, dil, pads = _kernel_args(node, x, kernel)
    nd = len(kernel)
    if not 1 <= nd <= 3:
        raise unsupported(node, f"a convolution over {nd} spatial dims (ember convolves 1 to 3)")
    lo, hi = pads[:nd], pads[nd:]
    if lo == hi:
        padding: Any = tuple(lo)
    else:
        x = _spatial_pad(x, pads, 0.0)
        padding = 0
    return em.conv(x, w, b, stride=tuple(strides), padding=padding, dilation=tuple(dil), groups=node.attr("group", 1))


def _crop_or_pad(y: Tensor, lo: list[int], hi: list[int]) -> Tensor:
    """Remove ``lo``/``hi`` elements from each spatial axis's ends (negative values add zeros)."""
    nd = len(lo)
    pads = [-v for v in lo] + [-v for v in hi]
    full = [0, 0] + pads[:nd] + [0, 0] + pads[nd:]
    return pad_tensor(y, full, 0.0, "constant", None, OnnxNode("", "Pad", "", [], []))


@handler("ConvTranspose")
def _conv_transpose(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    kernel = node.attr("kernel_shape") or list(w.shape[2:])
    nd = len(kernel)
    strides = node.attr("strides") or [1] * nd
    dil = node.attr("dilations") or [1] * nd
    outpad = node.attr("output_padding") or [0] * nd
    groups = node.attr("group", 1)
    full = em.conv_transpose(x, w, None, stride=tuple(strides), dilation=tuple(dil), groups=groups)
    sizes = x.shape[2:]
    spans = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    out_shape = node.attr("output_shape")
    auto = node.attr("auto_pad", "NOTSET")
    if out_shape or auto in ("SAME_UPPER", "SAME_LOWER"):
        if not out_shape:
            out_shape = [n * s for n, s in zip(sizes, strides)]
        out_shape = list(out_shape)[-nd:]
        lo, hi = [], []
        for n, s, sp, o, m in zip(sizes, strides, spans, outpad, out_shape):
            total = s * (n - 1) + o + sp - m
            half = int(total / 2)  # C's division, toward zero
            if auto == "SAME_LOWER":
                lo.append(total - half)
                hi.append(half)
            else:
                lo.append(half)
                hi.append(total - half)
    else:
        pads = node.attr("pads") or [0] * (2 * nd)
        lo, hi = list(pads[:nd]), list(pads[nd:])
    # output_padding extends the far end with positions no input reaches
    y = _crop_or_pad(full, lo, [h - o for h, o in zip(hi, outpad)])
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nd)
    return y


# -- pooling -----------------------------------------------------------------------------------
def _pool_out(n: int, k: int, s: int, d: int, lo: int, hi: int, ceil: bool) -> int:
    span = (k - 1) * d + 1
    num = n + lo + hi - span
    o = (-(-num // s) if ceil else num // s) + 1
    if ceil and (o - 1) * s >= n + lo:
        o -= 1
    return o


def _pool_prepare(node: OnnxNode, x: Tensor, value: float) -> tuple[Tensor, list[int], list[int], list[int]]:
    """``x`` padded on the host's rule (explicit pads and the ceil-mode tail), kernel, strides, dilations."""
    kernel = node.attr("kernel_shape")
    if not kernel:
        raise bad(node, "kernel_shape is required")
    strides, dil, pads = _kernel_args(node, x, kernel)
    nd = len(kernel)
    ceil = bool(node.attr("ceil_mode", 0))
    tails = []
    for i in range(nd):
        n, k, s, d = x.shape[2 + i], kernel[i], strides[i], dil[i]
        o = _pool_out(n, k, s, d, pads[i], pads[nd + i], ceil)
        need = (o - 1) * s + (k - 1) * d + 1 - (n + pads[i] + pads[nd + i])
        tails.append(max(need, 0))
    full = pads[:nd] + [p + t for p, t in zip(pads[nd:], tails)]
    if any(full):
        x = _spatial_pad(x, full, value)
    return x, kernel, strides, dil


@handler("MaxPool")
def _max_pool(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    if len(node.outputs) > 1 and node.outputs[1]:
        raise unsupported(node, "MaxPool's Indices output")
    dt = x.dtype
    if not dt.is_floating:
        if dt.bits > 16:
            raise unsupported(node, f"MaxPool on {dt} (ember pools floating tensors)")
        x = x.astype("float32")  # exact for 8- and 16-bit integers
    xp, kernel, strides, dil = _pool_prepare(node, x, -math.inf)
    return em.max_pool(xp, tuple(kernel), stride=tuple(strides), dilation=tuple(dil)).astype(dt)


@handler("AveragePool")
def _avg_pool(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    xp, kernel, strides, dil = _pool_prepare(node, x, 0.0)
    pool = _window_mean if any(d != 1 for d in dil) else None
    y = pool(xp, kernel, strides, dil) if pool else em.avg_pool(xp, tuple(kernel), stride=tuple(strides))
    # which positions each window's mean counts: the input, the explicit padding when
    # count_include_pad, never the ceil-mode tail past the padding
    nd = len(kernel)
    pads = _kernel_args(node, x, kernel)[2]
    mask = em.ones((1, 1) + tuple(x.shape[2:]), dtype=x.dtype, device=x.device)
    mask = _spatial_pad(mask, pads, 1.0 if node.attr("count_include_pad", 0) else 0.0)
    tail = [xp.shape[2 + i] - mask.shape[2 + i] for i in range(nd)]
    if any(tail):
        mask = _spatial_pad(mask, [0] * nd + tail, 0.0)
    share = pool(mask, kernel, strides, dil) if pool else em.avg_pool(mask, tuple(kernel), stride=tuple(strides))
    return y / share


def _window_mean(x: Tensor, kernel: list[int], strides: list[int], dil: list[int]) -> Tensor:
    """Mean over dilated windows, through unfold (the pooling ops take no dilation)."""
    n, c = x.shape[:2]
    nd = len(kernel)
    outs = [(x.shape[2 + i] - (kernel[i] - 1) * dil[i] - 1) // strides[i] + 1 for i in range(nd)]
    if nd == 1:
        x4 = em.expand_dims(x, axis=2)
        cols = em.unfold(x4, (1, kernel[0]), stride=(1, strides[0]), dilation=(1, dil[0]))
    elif nd == 2:
        cols = em.unfold(x, tuple(kernel), stride=tuple(strides), dilation=tuple(dil))
    else:
        # 3-d: pool the last two axes per slice of the first, then the first axis by hand
        k0, s0, d0 = kernel[0], strides[0], dil[0]
        parts = []
        for o in range(outs[0]):
            start = o * s0
            win = [x[:, :, start + j * d0] for j in range(k0)]
            parts.append(
                _window_mean(
                    em.stack(win, axis=2).reshape((n, c * k0) + tuple(x.shape[3:])), kernel[1:], strides[1:], dil[1:]
                )
                .reshape((n, c, k0, outs[1], outs[2]))
                .mean(axis=2)
            )
        return em.stack(parts, axis=2)
    k = 1
    for v in kernel:
        k *= v
    return cols.reshape((n, c, k, -1)).mean(axis=2).reshape((n, c) + tuple(outs))


@handler("LpPool")
def _lp_pool(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    p = node.attr("p", 2)
    xp, kernel, strides, dil = _pool_prepare(node, x, 0.0)
    k = float(np.prod(kernel))
    powered = em.abs(xp) ** float(p)
    if any(d != 1 for d in dil):
        s = _window_mean(powered, kernel, strides, dil) * k
    else:
        s = em.avg_pool(powered, tuple(kernel), stride=tuple(strides)) * k
    return s ** (1.0 / p)


@handler("GlobalAveragePool")
def _global_avg(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return em.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@handler("GlobalMaxPool")
def _global_max(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return em.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@handler("GlobalLpPool")
def _global_lp(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    p = float(node.attr("p", 2))
    return em.sum(em.abs(x) ** p, axis=tuple(range(2, x.ndim)), keepdims=True) ** (1.0 / p)


# -- normalization -----------------------------------------------------------------------------
def _channel(t: Tensor, nd: int) -> Tensor:
    return t.reshape((1, -1) + (1,) * (nd - 2))


@handler("BatchNormalization")
def _batch_norm(ctx: Context, node: OnnxNode, xs: list[Any]) -> Any:
    x, scale, bias, mean, var = xs[:5]
    eps = node.attr("epsilon", 1e-5)
    training = bool(node.attr("training_mode", 0))
    if training:
        axes = (0,) + tuple(range(2, x.ndim))
        mu = em.mean(x, axis=axes)
        v = em.mean((x - _channel(mu, x.ndim)) ** 2, axis=axes)
        mom = node.attr("momentum", 0.9)
        y = (x - _channel(mu, x.ndim)) / em.sqrt(_channel(v, x.ndim) + eps) * _channel(scale, x.ndim)
        y = y + _channel(bias, x.ndim)
        return [y, mean * mom + mu * (1 - mom), var * mom + v * (1 - mom)]
    inv = em.rsqrt(_channel(var, x.ndim) + eps) * _channel(scale, x.ndim)
    return (x - _channel(mean, x.ndim)) * inv + _channel(bias, x.ndim)


@handler("InstanceNormalization")
def _instance_norm(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, scale, bias = xs
    eps = node.attr("epsilon", 1e-5)
    axes = tuple(range(2, x.ndim))
    mu = em.mean(x, axis=axes, keepdims=True)
    v = em.mean((x - mu) ** 2, axis=axes, keepdims=True)
    return (x - mu) / em.sqrt(v + eps) * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@handler("LayerNormalization")
def _layer_norm(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    x, scale = xs[0], xs[1]
    bias = xs[2] if len(xs) > 2 else None
    axis = norm_axis(node.attr("axis", -1), x.ndim, node)
    eps = node.attr("epsilon", 1e-5)
    axes = tuple(range(axis, x.ndim))
    stash = node.attr("stash_type", 1)
    shape = tuple(x.shape[axis:])
    only_y = not any(node.outputs[1:])  # Mean and InvStdDev unused: ember's own layer_norm op,
    # so an exported ember model comes back bit for bit and a backend's native kernel runs
    if only_y and x.dtype.name in ("float32", "float64") and tuple(scale.shape) == shape:
        if bias is not None and tuple(bias.shape) != shape:
            bias = em.broadcast_to(bias, shape)
        return [em.nn.functional.layer_norm(x, shape, scale, bias, eps=eps)]
    xc = x.astype("float32") if stash == 1 and x.dtype.name in ("float16", "bfloat16") else x
    mu = em.mean(xc, axis=axes, keepdims=True)
    v = em.mean((xc - mu) ** 2, axis=axes, keepdims=True)
    inv = em.rsqrt(v + eps)
    y = ((xc - mu) * inv).astype(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return [y, mu, inv]


@handler("RMSNormalization")
def _rms_norm(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, scale = xs[0], xs[1]
    axis = norm_axis(node.attr("axis", -1), x.ndim, node)
    eps = node.attr("epsilon", 1e-5)
    axes = tuple(range(axis, x.ndim))
    xc = x.astype("float32") if x.dtype.name in ("float16", "bfloat16") else x
    y = xc * em.rsqrt(em.mean(xc * xc, axis=axes, keepdims=True) + eps)
    return y.astype(x.dtype) * scale


@handler("GroupNormalization")
def _group_norm(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, scale, bias = xs
    g = node.attr("num_groups")
    eps = node.attr("epsilon", 1e-5)
    n, c = x.shape[:2]
    xg = x.reshape((n, g, -1))
    mu = em.mean(xg, axis=2, keepdims=True)
    v = em.mean((xg - mu) ** 2, axis=2, keepdims=True)
    y = ((xg - mu) / em.sqrt(v + eps)).reshape(x.shape)
    if ctx.opset < 21 and scale.shape[0] == g and g != c:  # opset 18: one scale per group
        scale = em.repeat(scale, c // g)
        bias = em.repeat(bias, c // g)
    return y * _channel(scale, x.ndim) + _channel(bias, x.ndim)


@handler("MeanVarianceNormalization")
def _mvn(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    axes = tuple(norm_axis(a, x.ndim, node) for a in node.attr("axes", [0, 2, 3]))
    mu = em.mean(x, axis=axes, keepdims=True)
    v = em.mean(x * x, axis=axes, keepdims=True) - mu * mu
    return (x - mu) / (em.sqrt(v) + 1e-9)


@handler("LpNormalization")
def _lp_norm(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    axis = norm_axis(node.attr("axis", -1), x.ndim, node)
    p = node.attr("p", 2)
    if p == 1:
        n = em.sum(em.abs(x), axis=axis, keepdims=True)
    elif p == 2:
        n = em.sqrt(em.sum(x * x, axis=axis, keepdims=True))
    else:
        raise bad(node, f"p must be 1 or 2, got {p}")
    return em.where(n == 0, em.zeros_like(x), x / n)


@handler("LRN")
def _lrn(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    size = node.attr("size")
    alpha, beta, bias = node.attr("alpha", 1e-4), node.attr("beta", 0.75), node.attr("bias", 1.0)
    c = x.shape[1]
    sq = x * x
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = pad_tensor(sq, [0, lo] + [0] * (x.ndim - 2) + [0, hi] + [0] * (x.ndim - 2), 0.0, "constant", None, node)
    key = [slice(None)] * x.ndim
    total = None
    for i in range(size):
        key[1] = slice(i, i + c)
        part = padded[tuple(key)]
        total = part if total is None else total + part
    return x / (total * (alpha / size) + bias) ** beta


# -- losses ------------------------------------------------------------------------------------
def _nll(logp: Tensor, target: Tensor, weight: Tensor | None, reduction: str, ignore: int | None) -> Tensor:
    """ONNX NegativeLogLikelihoodLoss of log-probabilities (N, C, d1, ...) and targets (N, d1, ...)."""
    t = target.astype("int64")
    valid = None
    if ignore is not None:
        valid = t != ignore
        t = em.where(valid, t, em.zeros_like(t))
    picked = em.squeeze(em.take_along_axis(logp, em.expand_dims(t, axis=1), axis=1), axis=1)
    loss = -picked
    if weight is not None:
        w = em.take(weight, t.reshape((-1,)), axis=0).reshape(t.shape)
    else:
        w = em.ones(t.shape, dtype=logp.dtype, device=logp.device)
    if valid is not None:
        w = em.where(valid, w, em.zeros_like(w))
    loss = loss * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return em.sum(loss)
    if reduction == "mean":
        if weight is None and valid is None:
            return em.mean(loss)
        return em.sum(loss) / em.sum(w)
    raise AssertionError(f"unreachable: reduction {reduction!r} is checked by the handlers")


@handler("NegativeLogLikelihoodLoss")
def _nll_loss(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    logp, target = xs[0], xs[1]
    weight = xs[2] if len(xs) > 2 else None
    reduction = node.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise bad(node, f"reduction must be none, sum or mean, got {reduction!r}")
    return _nll(logp, target, weight, reduction, node.attr("ignore_index"))


@handler("SoftmaxCrossEntropyLoss")
def _sce_loss(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    scores, target = xs[0], xs[1]
    weight = xs[2] if len(xs) > 2 else None
    reduction = node.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise bad(node, f"reduction must be none, sum or mean, got {reduction!r}")
    logp = em.log_softmax(scores, axis=1)
    return [_nll(logp, target, weight, reduction, node.attr("ignore_index")), logp]


# -- resizing ----------------------------------------------------------------------------------
#: Resize's coordinate_transformation_mode and nearest_mode values (ONNX opset 19)
_COORDINATE_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coords(
    mode: str, m: int, n: int, scale: float, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Where output positions ``0..m-1`` fall in the input (and which fall outside the roi)."""
    i = np.arange(m, dtype=np.float64)
    outside = None
    if mode == "half_pixel":
        x = (i + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        adjust = m / (scale * n)
        x = n / 2 * (1 - adjust) + (i + 0.5) / scale - 0.5
    elif mode == "pytorch_half_pixel":
        x = (i + 0.5) / scale - 0.5 if m > 1 else np.zeros(m)
    elif mode == "align_corners":
        resized = n * scale  # ONNX divides by the unrounded output length
        x = i * (n - 1) / (resized - 1) if m > 1 else np.zeros(m)
    elif mode == "asymmetric":
        x = i / scale
    elif mode == "tf_crop_and_resize":
        start, end = roi if roi is not None else (0.0, 1.0)
        if m > 1:
            x = start * (n - 1) + i * (end - start) * (n - 1) / (m - 1)
        else:
            x = np.full(m, 0.5 * (start + end) * (n - 1))
        outside = (x < 0) | (x > n - 1)
    else:
        raise AssertionError(f"unreachable: coordinate_transformation_mode {mode!r} is checked by _resize_matrix")
    return x, outside


def _nearest(x: np.ndarray, how: str) -> np.ndarray:
    if how == "round_prefer_floor":
        return np.where(x - np.floor(x) == 0.5, np.floor(x), np.round(x))
    if how == "round_prefer_ceil":
        return np.where(x - np.floor(x) == 0.5, np.ceil(x), np.round(x))
    if how == "floor":
        return np.floor(x)
    if how == "ceil":
        return np.ceil(x)
    raise AssertionError(f"unreachable: nearest_mode {how!r} is checked by _resize_matrix")


def _cubic_kernel(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter ``a`` at distances ``d``."""
    d = np.abs(d)
    return np.where(
        d <= 1,
        ((a + 2) * d - (a + 3)) * d * d + 1,
        np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0),
    )


def _cubic_weights(t: np.ndarray, a: float) -> np.ndarray:
    """Weights of taps at offsets -1, 0, 1, 2 for fractional position ``t``."""
    return np.stack(
        [_cubic_kernel(t + 1, a), _cubic_kernel(t, a), _cubic_kernel(1 - t, a), _cubic_kernel(2 - t, a)], axis=-1
    )


def _resize_matrix(node: OnnxNode, n: int, m: int, scale: float, roi: tuple[float, float] | None) -> tuple[Any, Any]:
    """An (m, n) interpolation matrix for one axis (or a gather index for nearest), and the roi mask."""
    mode = node.attr("mode", "nearest")
    ctm = node.attr("coordinate_transformation_mode", "half_pixel")
    if ctm not in _COORDINATE_MODES:
        raise bad(node, f"coordinate_transformation_mode must be one of {', '.join(_COORDINATE_MODES)}; got {ctm!r}")
    x, outside = _source_coords(ctm, m, n, scale, roi)
    if mode == "nearest":
        how = node.attr("nearest_mode", "round_prefer_floor")
        if how not in _NEAREST_MODES:
            raise bad(node, f"nearest_mode must be one of {', '.join(_NEAREST_MODES)}; got {how!r}")
        idx = np.clip(_nearest(x, how), 0, n - 1).astype(np.int64)
        return idx, outside
    w = np.zeros((m, n))
    rows = np.arange(m)
    x0 = np.floor(x)
    t = x - x0
    a = node.attr("cubic_coeff_a", -0.75)
    if node.attr("antialias", 0) and scale < 1 and mode in ("linear", "cubic"):
        # a filter stretched by 1/scale: more taps, each weighed at its distance times scale
        exact = x0 == x
        x0 = np.where(exact, x0 - 1, x0)  # ONNX takes the left neighbour at exact positions
        t = x - x0
        start = int(np.floor((-1 if mode == "linear" else -2) / scale) + 1)
        offsets = np.arange(start, 2 - start)
        dist = (offsets[None, :] - t[:, None]) * scale
        if mode == "linear":
            weights = np.clip(1 - np.abs(dist), 0, 1)
        else:
            weights = _cubic_kernel(dist, a)
        weights = weights / weights.sum(axis=-1, keepdims=True)
        taps = [x0 + o for o in offsets]
    elif mode == "linear":
        taps, weights = [x0, x0 + 1], np.stack([1 - t, t], axis=-1)
    elif mode == "cubic":
        taps = [x0 - 1, x0, x0 + 1, x0 + 2]
        weights = _cubic_weights(t, a)
    else:
        raise bad(node, f"mode must be nearest, linear or cubic, got {mode!r}")
    if mode == "cubic" and node.attr("exclude_outside", 0):
        inside = np.stack([(p >= 0) & (p <= n - 1) for p in taps], axis=-1)
        weights = weights * inside
        total = weights.sum(axis=-1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    for j, p in enumerate(taps):
        np.add.at(w, (rows, np.clip(p, 0, n - 1).astype(np.int64)), weights[:, j])
    return w, outside


def _resize(
    ctx: Context, node: OnnxNode, x: Tensor, scales: list[float] | None, sizes: list[int] | None, roi: Any
) -> Tensor:
    nd = x.ndim
    axes = node.attr("axes")
    axes = [norm_axis(a, nd, node) for a in axes] if axes else list(range(nd))
    in_sizes = [x.shape[a] for a in axes]
    if sizes:
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            ratios = [s / n for s, n in zip(sizes, in_sizes)]
            r = min(ratios) if policy == "not_larger" else max(ratios)
            sizes = [int(math.floor(r * n + 0.5)) for n in in_sizes]
            scales = [r] * len(axes)
        else:
            scales = [s / n for s, n in zip(sizes, in_sizes)]
        outs = list(sizes)
    elif scales:
        outs = [int(math.floor(n * s)) for n, s in zip(in_sizes, scales)]
    else:
        raise bad(node, "give scales or sizes")
    rois: list[Any] = [None] * len(axes)
    if roi is not None and len(roi):
        k = len(roi) // 2
        rois = [(float(roi[i]), float(roi[i + k])) for i in range(k)]
        if len(rois) != len(axes):
            rois = [rois[a] for a in axes] if len(rois) == nd else [None] * len(axes)
        if node.attr("coordinate_transformation_mode") == "tf_crop_and_resize" and not sizes:
            outs = [int(math.floor(n * (hi - lo) * s)) for n, (lo, hi), s in zip(in_sizes, rois, scales)]
    checked_shape([outs[axes.index(i)] if i in axes else d for i, d in enumerate(x.shape)], node)
    extrap = node.attr("extrapolation_value", 0.0)
    y = x
    for a, n, m, s, r in zip(axes, in_sizes, outs, scales, rois):
        if n == m and node.attr("mode", "nearest") == "nearest" and s == 1.0:
            continue
        table, outside = _resize_matrix(node, n, m, float(s), r)
        if table.ndim == 1:
            y = em.take(y, on(table, ctx.device), axis=a)
        else:
            w = on(table.astype(y.dtype.numpy), ctx.device)
            moved = em.moveaxis(y, a, -1)
            y = em.moveaxis(em.matmul(moved, w.mT), -1, a)
        if outside is not None and outside.any():
            shape = [1] * nd
            shape[a] = m
            mask = on(outside.reshape(shape), ctx.device)
            y = em.where(mask, const(extrap, y), y)
    return y


@handler("Resize", since=10)
def _resize10(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    if ctx.opset < 11:
        return _resize(ctx, node, x, [float(v) for v in host(xs[1]).reshape(-1)], None, None)
    roi = host(xs[1]).reshape(-1) if len(xs) > 1 and xs[1] is not None and xs[1].size else None
    scales = [float(v) for v in host(xs[2]).reshape(-1)] if len(xs) > 2 and xs[2] is not None and xs[2].size else None
    sizes = ints(xs[3]) if len(xs) > 3 and xs[3] is not None and xs[3].size else None
    if ctx.opset < 13 and node.attr("coordinate_transformation_mode") is None:
        node.attrs["coordinate_transformation_mode"] = "half_pixel"
    return _resize(ctx, node, x, scales, sizes, roi)


@handler("Upsample", since=7)
def _upsample(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    scales = node.attr("scales") if len(xs) < 2 else [float(v) for v in host(xs[1]).reshape(-1)]
    node.attrs.setdefault("coordinate_transformation_mode", "asymmetric")
    node.attrs.setdefault("nearest_mode", "floor")
    return _resize(ctx, node, x, scales, None, None)

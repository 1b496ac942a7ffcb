"""Neural-network composites with gradient rules: activations, softmax, normalisation,
dropout, cross-entropy and embedding (attention: ember.ops.attention). Backends may implement any natively."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ..amp import FLOAT32
from ..autodiff.mode import is_grad_enabled, no_grad
from ..backend import EXTENSION_KERNELS
from ..creation import ones, zeros
from ..dispatch import apply, define, to_host
from ..dtypes import int64
from ..errors import ArgumentTypeError, DTypeError, InvalidArgumentError, ShapeError
from ..random import rand
from ..shapes import normalize_axis
from .elementwise import (
    FLOAT,
    NUMERIC,
    _reject,
    _tensor_arg,
    erf,
    exp,
    log1p,
    maximum,
    rsqrt,
    tanh,
    where,
)
from .indexing import check_class_range, one_hot_unchecked, take, take_along_axis
from .movement import concat, expand_dims, slice_tensor
from .reduction import logsumexp, max, mean, sum

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = [
    "relu", "gelu", "silu", "sigmoid", "softplus", "leaky_relu", "elu", "mish", "hardtanh",
    "softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm", "dropout", "cross_entropy",
    "embedding",
]  # fmt: skip

_SQRT_HALF = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _float_arg(x: Any, op: str) -> Tensor:
    x = _tensor_arg(x, op)
    if x._dtype not in FLOAT:
        raise _reject(op, FLOAT, x._dtype)
    return x


def _act(op: Any, x: Any, **params: Any) -> Tensor:
    x = _float_arg(x, op.name)
    return apply(op, (x,), params, x._shape, x._dtype)


# -- activations -------------------------------------------------------------------------
def _sigmoid(x: Tensor) -> Tensor:
    e = exp(-(x.abs()))
    return where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _gelu(x: Tensor) -> Tensor:
    return 0.5 * x * (1.0 + erf(x * _SQRT_HALF))


def _gelu_vjp(g: Tensor, y: Tensor, x: Tensor) -> tuple[Any]:
    cdf = 0.5 * (1.0 + erf(x * _SQRT_HALF))
    pdf = exp(-0.5 * x * x) * _INV_SQRT_2PI
    return (g * (cdf + x * pdf),)


def _gelu_tanh(x: Tensor) -> Tensor:
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)))


def _softplus(x: Tensor) -> Tensor:
    return maximum(x, 0.0) + log1p(exp(-(x.abs())))


RELU = define(
    "relu",
    kind="elementwise_unary",
    native="relu(a) -> handle",
    composite=lambda x: where(x <= 0, 0.0 if x._dtype.kind == "f" else 0, x),  # NaN stays NaN
    vjp=lambda g, y, x: (where(y > 0, g, 0.0),),  # y, not x: the input need not be kept (ember.autodiff.node)
)
SIGMOID = define(
    "sigmoid",
    kind="elementwise_unary",
    native="sigmoid(a) -> handle",
    composite=_sigmoid,
    vjp=lambda g, y, x: (g * y * (1.0 - y),),
)
GELU = define(
    "gelu", kind="elementwise_unary", native="gelu(a) -> handle  # exact (erf) form", composite=_gelu, vjp=_gelu_vjp
)
GELU_TANH = define(
    "gelu_tanh", kind="elementwise_unary", native="gelu_tanh(a) -> handle  # tanh approximation", composite=_gelu_tanh
)
SILU = define(
    "silu",
    kind="elementwise_unary",
    native="silu(a) -> handle",
    composite=lambda x: x * sigmoid(x),
    vjp=lambda g, y, x: (g * (sigmoid(x) * (1.0 + x * (1.0 - sigmoid(x)))),),
)
SOFTPLUS = define(
    "softplus",
    kind="elementwise_unary",
    native="softplus(a) -> handle",
    composite=_softplus,
    vjp=lambda g, y, x: (g * sigmoid(x),),
)


def relu(x: Any) -> Tensor:
    """max(x, 0)."""
    x = _tensor_arg(x, "relu")
    if x._dtype not in NUMERIC:
        raise _reject("relu", NUMERIC, x._dtype)
    return apply(RELU, (x,), {}, x._shape, x._dtype)


def sigmoid(x: Any) -> Tensor:
    """1 / (1 + exp(-x)), computed without overflow."""
    return _act(SIGMOID, x)


def gelu(x: Any, approximate: str = "none") -> Tensor:
    """Gaussian error linear unit: exact (erf) or ``approximate='tanh'``."""
    if approximate == "none":
        return _act(GELU, x)
    if approximate == "tanh":
        return _act(GELU_TANH, x)
    raise InvalidArgumentError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(x: Any) -> Tensor:
    """x * sigmoid(x) (swish)."""
    return _act(SILU, x)


def softplus(x: Any, beta: float = 1.0) -> Tensor:
    """log(1 + exp(beta x)) / beta, computed without overflow."""
    if beta == 1.0:
        return _act(SOFTPLUS, x)
    return _act(SOFTPLUS, _float_arg(x, "softplus") * beta) / beta


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Tensor:
    x = _float_arg(x, "leaky_relu")
    return where(x > 0, x, x * negative_slope)


def elu(x: Any, alpha: float = 1.0) -> Tensor:
    x = _float_arg(x, "elu")
    return where(x > 0, x, alpha * x.expm1())


def mish(x: Any) -> Tensor:
    """x * tanh(softplus(x))."""
    x = _float_arg(x, "mish")
    return x * tanh(softplus(x))


def hardtanh(x: Any, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    for name, v in (("min_val", min_val), ("max_val", max_val)):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ArgumentTypeError(f"hardtanh: {name} must be a number, got {v!r}")
    if not min_val <= max_val:
        raise InvalidArgumentError(f"hardtanh: min_val={min_val!r} must be <= max_val={max_val!r}")
    return _float_arg(x, "hardtanh").clip(min_val, max_val)


# -- softmax -----------------------------------------------------------------------------
def _softmax(x: Tensor, axis: int) -> Tensor:
    m = max(x, axis=axis, keepdims=True).detach()
    m = where(m.isinf(), 0.0, m)
    e = exp(x - m)
    return e / sum(e, axis=axis, keepdims=True)


def _softmax_vjp(g: Tensor, y: Tensor, x: Tensor, axis: int) -> tuple[Any]:
    return (softmax_backward(y, g, axis),)


def _softmax_backward(y: Tensor, g: Tensor, axis: int) -> Tensor:
    return y * (g - sum(g * y, axis=axis, keepdims=True))


def _softmax_backward_vjp(c: Tensor, out: Tensor, y: Tensor, g: Tensor, axis: int) -> tuple[Any, ...]:
    # out = y * (g - <g, y>): d/dg = y * (c - <c, y>); d/dy = c * (g - <g, y>) - g * <c, y>
    cy = sum(c * y, axis=axis, keepdims=True)
    gy = (c * (g - sum(g * y, axis=axis, keepdims=True)) - g * cy) if y._rg else None
    gg = (y * (c - cy)) if g._rg else None
    return gy, gg


#: the gradient of softmax, ``y * (g - sum(g * y, axis))`` for ``y = softmax(x)``: one op, so a
#: backend can make it one pass (attention's backward spends its largest tensor here)
SOFTMAX_BACKWARD = define(
    "softmax_backward",
    kind="reduction",
    native="softmax_backward(y, g, *, axis) -> handle  # y * (g - sum(g * y, axis, keepdims))",
    autocast=FLOAT32,
    composite=_softmax_backward,
    vjp=_softmax_backward_vjp,
)


def softmax_backward(y: Any, g: Any, axis: int = -1) -> Tensor:
    """``y * (g - sum(g * y, axis))``: the vector-Jacobian product of softmax at output ``y``."""
    y = _float_arg(y, "softmax_backward")
    g = _tensor_arg(g, "softmax_backward", y)
    if g._shape != y._shape:
        raise ShapeError(f"softmax_backward: y {y._shape} and g {g._shape} must have the same shape")
    if y.ndim == 0:
        return y * 0.0
    ax = normalize_axis(axis, y.ndim, "softmax_backward")
    return apply(SOFTMAX_BACKWARD, (y, g), {"axis": ax}, y._shape, y._dtype)


def _log_softmax_vjp(g: Tensor, y: Tensor, x: Tensor, axis: int) -> tuple[Any]:
    return (g - exp(y) * sum(g, axis=axis, keepdims=True),)


SOFTMAX = define(
    "softmax",
    kind="reduction",
    native="softmax(a, *, axis) -> handle",
    autocast=FLOAT32,
    composite=_softmax,
    vjp=_softmax_vjp,
)


def _log_softmax(x: Tensor, axis: int) -> Tensor:
    # shift by the maximum first: x - max is exact near it, so large inputs keep their precision
    m = max(x, axis=axis, keepdims=True).detach()
    shifted = x - where(m.isinf(), 0.0, m)
    return shifted - logsumexp(shifted, axis=axis, keepdims=True)


LOG_SOFTMAX = define(
    "log_softmax",
    kind="reduction",
    native="log_softmax(a, *, axis) -> handle",
    autocast=FLOAT32,
    composite=_log_softmax,
    vjp=_log_softmax_vjp,
)


def softmax(x: Any, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis``, stable for large inputs."""
    x = _float_arg(x, "softmax")
    ax = normalize_axis(axis, x.ndim, "softmax") if x.ndim else 0
    if x.ndim == 0:
        return x * 0.0 + 1.0
    return apply(SOFTMAX, (x,), {"axis": ax}, x._shape, x._dtype)


def log_softmax(x: Any, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along ``axis``."""
    x = _float_arg(x, "log_softmax")
    if x.ndim == 0:
        return x * 0.0
    ax = normalize_axis(axis, x.ndim, "log_softmax")
    return apply(LOG_SOFTMAX, (x,), {"axis": ax}, x._shape, x._dtype)


# -- rules that take a backend's one kernel for several gradients -------------------------
#: (device, extension kernels registered) -> the device's native ops: a rule asks whether a packed
#: gradient op is native (capabilities takes ~2 ms to compute, so once per device)
_NATIVE_OPS: dict[tuple[Any, int], frozenset[str]] = {}


def _has_native(t: Tensor, name: str) -> bool:
    """Whether ``t``'s device computes op ``name`` natively: a rule then takes the packed op,
    which on other backends would be its composite plus a concatenation."""
    key = (t._device, len(EXTENSION_KERNELS))
    ops = _NATIVE_OPS.get(key)
    if ops is None:
        ops = _NATIVE_OPS[key] = t._device.capabilities.native_ops
    return name in ops


# -- normalisation -----------------------------------------------------------------------
def _normalize(x: Tensor, axes: tuple[int, ...], eps: float) -> tuple[Tensor, Tensor]:
    """(x - mean) * rstd over ``axes``, and rstd (keepdims)."""
    mu = mean(x, axis=axes, keepdims=True)
    d = x - mu
    var = mean(d * d, axis=axes, keepdims=True)
    rstd = rsqrt(var + eps)
    return d * rstd, rstd


def _normalize_vjp(
    g: Tensor, x: Tensor, w: Tensor, b: Tensor, axes: tuple[int, ...], eps: float
) -> tuple[Any, Any, Any]:
    xhat, rstd = _normalize(x, axes, eps)
    gw = g * xhat if w._rg else None
    gb = g if b._rg else None
    gx = _normalized_input_grad(g, w, xhat, rstd, axes) if x._rg else None
    return gx, gw, gb


def _normalized_input_grad(g: Tensor, w: Tensor, xhat: Tensor, rstd: Tensor, axes: tuple[int, ...]) -> Tensor:
    gh = g * w
    return rstd * (gh - mean(gh, axis=axes, keepdims=True) - xhat * mean(gh * xhat, axis=axes, keepdims=True))


def _layer_axes(x: Tensor, n: int) -> tuple[int, ...]:
    return tuple(range(x.ndim - n, x.ndim))


def _layer_norm_backward(g: Tensor, x: Tensor, w: Tensor, eps: float) -> Tensor:
    axes = _layer_axes(x, w.ndim)
    xhat, rstd = _normalize(x, axes, eps)
    return _normalized_input_grad(g, w, xhat, rstd, axes)  # whether or not x records gradients


#: the gradient of layer norm with respect to its input, ``rstd * (g*w - mean(g*w) - xhat *
#: mean(g*w*xhat))`` over weight.ndim trailing axes: one op, so a backend can make it one pass
LAYER_NORM_BACKWARD = define(
    "layer_norm_backward",
    kind="other",
    native="layer_norm_backward(g, x, weight, *, eps) -> handle  # d layer_norm / d x",
    autocast=FLOAT32,
    composite=_layer_norm_backward,
)


def layer_norm_backward(g: Any, x: Any, weight: Any, eps: float = 1e-5) -> Tensor:
    """The vector-Jacobian product of ``layer_norm`` with respect to ``x``, at cotangent ``g``."""
    x = _float_arg(x, "layer_norm_backward")
    g = _tensor_arg(g, "layer_norm_backward", x)
    w = _tensor_arg(weight, "layer_norm_backward", x)
    if g._shape != x._shape:
        raise ShapeError(f"layer_norm_backward: x {x._shape} and g {g._shape} must have the same shape")
    if w.ndim > x.ndim or x._shape[x.ndim - w.ndim :] != w._shape:
        raise ShapeError(f"layer_norm_backward: weight {w._shape} must match the trailing axes of x {x._shape}")
    return apply(LAYER_NORM_BACKWARD, (g, x, w), {"eps": float(eps)}, x._shape, x._dtype)


def _layer_norm_grads(g: Tensor, x: Tensor, w: Tensor, eps: float, need_x: bool) -> Tensor:
    axes = _layer_axes(x, w.ndim)
    xhat, rstd = _normalize(x, axes, eps)
    lead = tuple(range(x.ndim - w.ndim))
    parts = [sum(g * xhat, axis=lead) if lead else g * xhat, sum(g, axis=lead) if lead else g]
    if need_x:
        parts.insert(0, _normalized_input_grad(g, w, xhat, rstd, axes))
    return concat([t.reshape((-1,)) for t in parts], axis=0)


#: layer norm's gradients in one op: ``[gx,] gw, gb`` (gw and gb summed over the leading axes),
#: flattened and concatenated, so that a backend computes all three from one pass over g and x
LAYER_NORM_GRADS = define(
    "layer_norm_grads",
    kind="other",
    native="layer_norm_grads(g, x, weight, *, eps, need_x) -> handle  # [gx,] gw, gb flattened and concatenated",
    autocast=FLOAT32,
    composite=_layer_norm_grads,
    differentiable=False,
)


def layer_norm_grads(g: Any, x: Any, weight: Any, eps: float = 1e-5, need_x: bool = True) -> Tensor:
    """Layer norm's gradients at cotangent ``g``: ``[gx,] gw, gb`` flattened and concatenated
    (gx in x's shape when ``need_x``, then gw and gb in weight's shape)."""
    x = _float_arg(x, "layer_norm_grads")
    g = _tensor_arg(g, "layer_norm_grads", x)
    w = _tensor_arg(weight, "layer_norm_grads", x)
    if g._shape != x._shape:
        raise ShapeError(f"layer_norm_grads: x {x._shape} and g {g._shape} must have the same shape")
    if w.ndim > x.ndim or x._shape[x.ndim - w.ndim :] != w._shape:
        raise ShapeError(f"layer_norm_grads: weight {w._shape} must match the trailing axes of x {x._shape}")
    n = (x.size if need_x else 0) + 2 * w.size
    return apply(LAYER_NORM_GRADS, (g, x, w), {"eps": float(eps), "need_x": bool(need_x)}, (n,), x._dtype)


def _layer_norm_vjp(g: Tensor, y: Tensor, x: Tensor, w: Tensor, b: Tensor, eps: float) -> tuple[Any, Any, Any]:
    if (
        w._rg
        and b._rg
        and not is_grad_enabled()  # the packed op records no graph: not under create_graph
        and _has_native(x, LAYER_NORM_GRADS.name)
    ):
        # the backend's one pass for all three (cpu: numba, per row)
        packed = layer_norm_grads(g, x, w, eps, bool(x._rg))
        start = x.size if x._rg else 0
        gw, gb = (slice_tensor(packed, (i,), (i + w.size,), (1,)).reshape(w._shape) for i in (start, start + w.size))
        gx = slice_tensor(packed, (0,), (start,), (1,)).reshape(x._shape) if x._rg else None
        return gx, gw, gb
    # xhat is layer_norm without affine parameters: one op (a backend's native pass), not five
    gx = layer_norm_backward(g, x, w, eps) if x._rg else None
    gw = g * layer_norm(x, w._shape, eps=eps) if w._rg else None
    return gx, gw, (g if b._rg else None)


LAYER_NORM = define(
    "layer_norm",
    kind="other",
    native="layer_norm(x, weight, bias, *, eps) -> handle  # over weight.ndim trailing axes",
    autocast=FLOAT32,
    composite=lambda x, w, b, eps: _normalize(x, _layer_axes(x, w.ndim), eps)[0] * w + b,
    vjp=_layer_norm_vjp,
)


def _affine_params(shape: tuple[int, ...], weight: Any, bias: Any, like: Tensor, op: str) -> tuple[Tensor, Tensor]:

    w = ones(shape, dtype=like._dtype, device=like._device) if weight is None else _tensor_arg(weight, op, like)
    b = zeros(shape, dtype=like._dtype, device=like._device) if bias is None else _tensor_arg(bias, op, like)
    for name, t in (("weight", w), ("bias", b)):
        if t._shape != shape:
            raise ShapeError(f"{op}: {name} has shape {t._shape}, expected {shape}")
    return w, b


def layer_norm(x: Any, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` axes, then scale and shift."""
    x = _float_arg(x, "layer_norm")
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if x._shape[x.ndim - len(shape) :] != shape:
        raise ShapeError(f"layer_norm: normalized_shape {shape} does not match the trailing axes of {x._shape}")
    w, b = _affine_params(shape, weight, bias, x, "layer_norm")
    return apply(LAYER_NORM, (x, w, b), {"eps": float(eps)}, x._shape, x._dtype)


def _rms(x: Tensor, axes: tuple[int, ...], eps: float) -> Tensor:
    return rsqrt(mean(x * x, axis=axes, keepdims=True) + eps)


def _rms_vjp(g: Tensor, y: Tensor, x: Tensor, w: Tensor, eps: float) -> tuple[Any, Any]:
    axes = _layer_axes(x, w.ndim)
    r = _rms(x, axes, eps)
    xn = x * r
    gw = g * xn if w._rg else None
    gx = None
    if x._rg:
        gh = g * w
        gx = r * (gh - xn * mean(gh * xn, axis=axes, keepdims=True))
    return gx, gw


RMS_NORM = define(
    "rms_norm",
    kind="other",
    native="rms_norm(x, weight, *, eps) -> handle  # over weight.ndim trailing axes",
    composite=lambda x, w, eps: x * _rms(x, _layer_axes(x, w.ndim), eps) * w,
    vjp=_rms_vjp,
)


def rms_norm(x: Any, normalized_shape: Any, weight: Any = None, eps: float = 1e-6) -> Tensor:
    """x / sqrt(mean(x**2) + eps) over the trailing axes, times ``weight``."""
    x = _float_arg(x, "rms_norm")
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if x._shape[x.ndim - len(shape) :] != shape:
        raise ShapeError(f"rms_norm: normalized_shape {shape} does not match the trailing axes of {x._shape}")
    w, _ = _affine_params(shape, weight, None, x, "rms_norm")
    return apply(RMS_NORM, (x, w), {"eps": float(eps)}, x._shape, x._dtype)


def _bn_axes(x: Tensor) -> tuple[int, ...]:
    return (0,) + tuple(range(2, x.ndim))


def _bn_shape(x: Tensor) -> tuple[int, ...]:
    return (1, x._shape[1]) + (1,) * (x.ndim - 2)


BATCH_NORM = define(
    "batch_norm",
    kind="other",
    native="batch_norm(x, weight, bias, *, eps) -> handle  # batch statistics over all axes but 1",
    composite=lambda x, w, b, eps: (
        _normalize(x, _bn_axes(x), eps)[0] * w.reshape(_bn_shape(x)) + b.reshape(_bn_shape(x))
    ),
    vjp=lambda g, y, x, w, b, eps: _bn_vjp(g, x, w, b, eps),
)


def _bn_vjp(g: Tensor, x: Tensor, w: Tensor, b: Tensor, eps: float) -> tuple[Any, Any, Any]:
    shape = _bn_shape(x)
    axes = _bn_axes(x)
    # the reshaped w/b made here do not carry w._rg/b._rg (backward runs without recording),
    # so ask for their gradients through the originals' flags
    gx, _, _ = _normalize_vjp(g, x, w.reshape(shape), b.reshape(shape), axes, eps)
    xhat = _normalize(x, axes, eps)[0] if w._rg else None
    gw = (g * xhat).sum(axis=axes) if w._rg else None
    gb = g.sum(axis=axes) if b._rg else None
    return gx, gw, gb


def batch_norm(
    x: Any,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Any = None,
    bias: Any = None,
    training: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalisation over all axes but 1 (channels). In training the batch statistics
    are used and ``running_mean``/``running_var`` are updated in place (unbiased variance)."""
    x = _float_arg(x, "batch_norm")
    if x.ndim < 2:
        raise ShapeError(f"batch_norm: expects (N, C, ...) input, got shape {x._shape}")
    c = x._shape[1]
    w, b = _affine_params((c,), weight, bias, x, "batch_norm")
    if training or running_mean is None or running_var is None:
        axes = _bn_axes(x)
        n = x.size // c if c else 0
        if training and n <= 1:
            raise ShapeError(f"batch_norm: need more than one value per channel in training, got shape {x._shape}")
        if training and running_mean is not None and running_var is not None:
            with no_grad():
                xd = x.detach()
                mu = mean(xd, axis=axes)
                var = mean((xd - mu.reshape(_bn_shape(x))) ** 2, axis=axes) * (n / (n - 1))
                running_mean.copy_(running_mean * (1 - momentum) + mu * momentum)
                running_var.copy_(running_var * (1 - momentum) + var * momentum)
        return apply(BATCH_NORM, (x, w, b), {"eps": float(eps)}, x._shape, x._dtype)
    shape = _bn_shape(x)
    scale = rsqrt(running_var.reshape(shape) + eps) * w.reshape(shape)
    return (x - running_mean.reshape(shape)) * scale + b.reshape(shape)


# -- dropout, embedding, cross-entropy ---------------------------------------------------
def dropout(x: Any, p: float = 0.5, training: bool = True, key: Any = None) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by 1 / (1 - p)."""
    x = _float_arg(x, "dropout")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0

    keep = rand(x._shape, dtype=x._dtype, device=x._device.without_autodiff(), key=key) >= p
    return where(keep, x * (1.0 / (1.0 - p)), 0.0)


def embedding(indices: Any, weight: Any) -> Tensor:
    """Rows of ``weight`` picked by integer ``indices`` (any shape)."""
    w = _tensor_arg(weight, "embedding")
    idx = _tensor_arg(indices, "embedding", w)
    if idx._dtype.kind not in "iu":
        raise DTypeError(f"embedding: indices must be integers, got {idx._dtype}")
    if w.ndim != 2:
        raise ShapeError(f"embedding: weight must be 2-D (num_embeddings, dim), got shape {w._shape}")
    return take(w, idx, axis=0)


def _ce_composite(logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    logp = log_softmax(logits, axis=1)
    valid = target != ignore_index
    safe = where(valid, target, 0)
    picked = take_along_axis(logp, expand_dims(safe, 1), 1).reshape(target._shape)
    loss = -picked
    if label_smoothing:
        c = logits._shape[1]
        loss = (1.0 - label_smoothing) * loss - (label_smoothing / c) * sum(logp, axis=1)
    return where(valid, loss, 0.0)


def _ce_vjp(
    g: Tensor, out: Tensor, logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int
) -> tuple[Any, Any]:
    if not is_grad_enabled() and _has_native(logits, CROSS_ENTROPY_BACKWARD.name):
        # the backend's one kernel for the whole gradient (no graph recorded: not under create_graph)
        params = {"label_smoothing": label_smoothing, "ignore_index": ignore_index}
        return (apply(CROSS_ENTROPY_BACKWARD, (g, logits, target), params, logits._shape, logits._dtype), None)
    return (_ce_grad(g, logits, target, label_smoothing, ignore_index), None)


def _ce_grad(g: Tensor, logits: Tensor, target: Tensor, label_smoothing: float, ignore_index: int) -> Tensor:
    """d loss / d logits at cotangent ``g`` (per sample): ``g * (softmax(logits) - smoothed one-hot)``,
    zero on the rows of ignored targets."""
    c = logits._shape[1]
    p = softmax(logits, axis=1)
    # the ignored targets' rows get no gradient: masked, unless one read of the targets (a backend
    # whose reads are cheap) shows none is ignored, or the one-hot of ignore_index is a zero row
    masked = _any_ignored(target, ignore_index)
    valid = target != ignore_index if masked else None
    safe = where(valid, target, 0) if masked and 0 <= ignore_index < c else target
    hot = one_hot_unchecked(safe, c, logits._dtype)  # (..., C) with class last; the forward checked the range
    if logits.ndim > 2:  # the class axis back in its place (axis 1); (N, C) has it there already
        hot = hot.moveaxis(-1, 1)
    if label_smoothing:
        hot = hot * (1.0 - label_smoothing) + label_smoothing / c
    scale = expand_dims(where(valid, g, 0.0) if masked else g, 1)
    return scale * (p - hot)


#: the gradient of the per-sample cross-entropy with respect to the logits, in one op, so that a
#: backend computes it in one pass over the logits (autodiff's rule otherwise makes softmax, a
#: one-hot from arange, a mask and three elementwise ops of it)
CROSS_ENTROPY_BACKWARD = define(
    "cross_entropy_backward",
    kind="other",
    native="cross_entropy_backward(g, logits, target, *, label_smoothing, ignore_index) -> handle  # d loss / d logits",
    autocast=FLOAT32,
    composite=_ce_grad,
    differentiable=False,
)


def cross_entropy_backward(
    g: Any, logits: Any, target: Any, label_smoothing: float = 0.0, ignore_index: int = -100
) -> Tensor:
    """The gradient of ``cross_entropy(logits, target, reduction='none', ...)`` with respect to the
    logits at per-sample cotangent ``g`` (target's shape); integer class targets only."""
    logits = _float_arg(logits, "cross_entropy_backward")
    g = _tensor_arg(g, "cross_entropy_backward", logits)
    target = _tensor_arg(target, "cross_entropy_backward", logits)
    if logits.ndim < 2:
        raise ShapeError(f"cross_entropy_backward: logits need (N, C, ...), got shape {logits._shape}")
    expected = (logits._shape[0],) + logits._shape[2:]
    if target._dtype.kind not in "iu" or target._shape != expected or g._shape != expected:
        raise ShapeError(
            f"cross_entropy_backward: logits {logits._shape} need integer target and g of shape {expected}, "
            f"got target {target._dtype} {target._shape} and g {g._shape}"
        )
    target = target.astype(int64) if target._dtype is not int64 else target
    params = {"label_smoothing": float(label_smoothing), "ignore_index": int(ignore_index)}
    return apply(CROSS_ENTROPY_BACKWARD, (g, logits, target), params, logits._shape, logits._dtype)


def _any_ignored(target: Tensor, ignore_index: int) -> bool:
    """Whether some target equals ``ignore_index``: read back on a backend whose reads are cheap,
    else assumed (the caller masks on the device)."""
    if not target._device.backend.cheap_readback:
        return True
    return bool((to_host(target) == ignore_index).any())


def _checked_targets(target: Tensor, c: int, ignore_index: int) -> int | None:
    """Refuse class indices outside ``[0, c)`` (``ignore_index`` exempt) and count the ignored ones,
    from one read of the targets where the backend's reads are cheap; None where none was read
    (a backend that queues work is not stalled for it, as :func:`check_class_range`)."""
    if not target.size or not target._device.backend.cheap_readback:
        return None
    host = to_host(target)
    hit = host == ignore_index
    ignored = int(np.count_nonzero(hit))
    kept = host[~hit] if ignored else host
    if kept.size and (int(kept.min()) < 0 or int(kept.max()) >= c):
        check_class_range(target, c, "cross_entropy", "target", ignore=ignore_index)  # raises, with its message
    return ignored


CROSS_ENTROPY = define(
    "cross_entropy",
    kind="other",
    native="cross_entropy(logits, target, *, label_smoothing, ignore_index) -> handle  # per-sample loss; target int64",
    autocast=FLOAT32,
    composite=_ce_composite,
    vjp=_ce_vjp,
)


def cross_entropy(
    logits: Any,
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy. ``logits`` (N, C, ...) and integer ``target`` (N, ...), or
    ``target`` of class probabilities with the logits' shape.

    ``reduction='mean'`` averages over non-ignored targets (weighted by ``weight`` when given).
    """
    logits = _float_arg(logits, "cross_entropy")
    target = _tensor_arg(target, "cross_entropy", logits)
    if logits.ndim < 1:
        raise ShapeError("cross_entropy: logits need a class axis")
    if logits.ndim == 1:
        logits = expand_dims(logits, 0)
        target = expand_dims(target, 0)
    if reduction not in ("mean", "sum", "none"):
        raise InvalidArgumentError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, (int, float)):
        raise ArgumentTypeError(f"cross_entropy: label_smoothing must be a number in [0, 1], got {label_smoothing!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise InvalidArgumentError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing!r}")
    c = logits._shape[1]
    if target._dtype.kind == "f":
        if target._shape != logits._shape:
            raise ShapeError(
                f"cross_entropy: probability targets must have the logits' shape {logits._shape}, got {target._shape}"
            )
        t = target if not label_smoothing else target * (1.0 - label_smoothing) + label_smoothing / c
        logp = log_softmax(logits, axis=1)
        if weight is not None:
            w = _tensor_arg(weight, "cross_entropy", logits)
            logp = logp * w.reshape((1, c) + (1,) * (logits.ndim - 2))
        loss = -sum(t * logp, axis=1)
        if reduction == "none":
            return loss
        return loss.sum() if reduction == "sum" else loss.mean()
    if target._dtype.kind not in "iu":
        raise DTypeError(
            f"cross_entropy: target must hold class indices (integers) or probabilities, got {target._dtype}"
        )
    expected = (logits._shape[0],) + logits._shape[2:]
    if target._shape != expected:
        raise ShapeError(f"cross_entropy: logits {logits._shape} need target of shape {expected}, got {target._shape}")
    target = target.astype(int64) if target._dtype is not int64 else target
    ignored = _checked_targets(target, c, int(ignore_index))
    if ignored is None:
        check_class_range(target, c, "cross_entropy", "target", ignore=int(ignore_index))
    # with class weights, PyTorch weights the smoothing term per class (sum_c w_c log p_c), not by
    # w[target]: the weighted case computes the two terms apart
    smoothing = float(label_smoothing) if weight is None else 0.0
    loss = apply(
        CROSS_ENTROPY,
        (logits, target),
        {"label_smoothing": smoothing, "ignore_index": int(ignore_index)},
        target._shape,
        logits._dtype,
    )
    if weight is None and ignored is not None:  # the read counted the targets taken: no mask to sum
        if reduction == "none":
            return loss
        return loss.sum() if reduction == "sum" else loss.sum() / float(target.size - ignored)
    valid = (target != ignore_index).astype(logits._dtype)
    if weight is not None:
        w = _tensor_arg(weight, "cross_entropy", logits)
        if w._shape != (c,):
            raise ShapeError(f"cross_entropy: weight must have shape ({c},), got {w._shape}")
        wt = take(w, where(target != ignore_index, target, 0).reshape((-1,)), axis=0).reshape(target._shape)
        valid = valid * wt
        loss = loss * wt
        if label_smoothing:
            w_c = w.reshape((1, c) + (1,) * (logits.ndim - 2))
            smooth = -sum(log_softmax(logits, axis=1) * w_c, axis=1) * (target != ignore_index).astype(logits._dtype)
            loss = (1.0 - label_smoothing) * loss + (label_smoothing / c) * smooth
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / valid.sum()

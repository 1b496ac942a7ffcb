"""``ember.nn.functional`` (import as ``F``): the layers as functions, and the losses.

Signatures follow ``torch.nn.functional`` (``dim=`` rather than ``axis=``, PyTorch argument
order); each function forwards to the ember op that computes it, so backends that implement
those ops natively are used.

>>> import ember as em
>>> from ember.nn import functional as F
>>> F.relu(em.tensor([-1.0, 2.0])).tolist()
[0.0, 2.0]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..dtypes import finfo
from ..errors import InvalidArgumentError, NotImplementedOpError, ShapeError
from ..ops import nn as _nn
from ..ops.attention import scaled_dot_product_attention as _attention
from ..ops.conv import conv as _conv_op
from ..ops.conv import conv_transpose as _conv_transpose_op
from ..ops.elementwise import _tensor_arg, where
from ..ops.indexing import one_hot as _one_hot
from ..ops.linalg import linear as _linear
from ..ops.linalg import vector_norm
from ..ops.movement import expand_dims, squeeze
from ..ops.movement import pad as _pad
from ..ops.pooling import adaptive_avg_pool, adaptive_max_pool, avg_pool, max_pool
from ..ops.pooling import interpolate as _interpolate
from ..tensor import Tensor
from .losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)

__all__ = [
    "linear", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "max_pool1d", "max_pool2d",
    "avg_pool1d", "avg_pool2d", "adaptive_avg_pool2d", "adaptive_max_pool2d", "interpolate",
    "relu", "gelu", "silu", "sigmoid", "tanh", "softmax", "log_softmax", "leaky_relu", "elu", "softplus",
    "mish", "hardtanh", "layer_norm", "group_norm", "rms_norm", "batch_norm", "dropout", "embedding",
    "scaled_dot_product_attention", "pad", "normalize", "one_hot",
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
]  # fmt: skip


# -- linear and convolution --------------------------------------------------------------
def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None, *, name: str = "linear") -> Tensor:
    """x @ weight.T + bias, for x of shape (..., in_features) and weight (out_features, in_features)."""
    return _linear(x, weight, bias, name=name)


def _batched(x: Tensor, nd: int, name: str, layout: str) -> tuple[Tensor, bool]:
    """``x`` with a batch axis (and whether one was added), checking the rank."""
    if x.ndim == nd + 2:
        return x, False
    if x.ndim == nd + 1:
        return expand_dims(x, 0), True
    raise ShapeError(f"{name}: expected a {nd + 1}-D (C, {layout}) or {nd + 2}-D (N, C, {layout}) input, got {x.shape}")


_LAYOUT = {1: "L", 2: "H, W", 3: "D, H, W"}


def _conv(x: Tensor, weight: Tensor, bias: Any, nd: int, name: str, transposed: bool = False, **params: Any) -> Tensor:
    x = _tensor_arg(x, name)
    given = x.shape
    x, added = _batched(x, nd, name, _LAYOUT[nd])
    if weight.ndim != nd + 2:
        raise ShapeError(f"{name}: weight must be {nd + 2}-D, got shape {weight.shape}")
    groups = params.get("groups", 1)
    c_in = weight.shape[0] if transposed else weight.shape[1] * groups
    if x.shape[1] != c_in:
        raise ShapeError(
            f"{name}: expected {c_in} input channels (axis {1 - added} of the input), got input of shape {given} "
            f"for weight of shape {weight.shape}"
        )
    op = _conv_transpose_op if transposed else _conv_op
    out = op(x, weight, bias, **params)
    return squeeze(out, 0) if added else out


def _conv_transpose(
    x: Tensor, weight: Tensor, bias: Any, nd: int, name: str, stride: Any, padding: Any, output_padding: Any,
    groups: int, dilation: Any,
) -> Tensor:  # fmt: skip
    """The transposed convolution of conv_transpose1d/2d (their argument order)."""
    params = {"stride": stride, "padding": padding, "output_padding": output_padding, "dilation": dilation}
    return _conv(x, weight, bias, nd, name, True, groups=groups, **params)


def conv1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    name: str = "conv1d",
) -> Tensor:
    """1-D convolution of (N, C_in, L) by weight (C_out, C_in / groups, k)."""
    return _conv(x, weight, bias, 1, name, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    name: str = "conv2d",
) -> Tensor:
    """2-D convolution of (N, C_in, H, W) by weight (C_out, C_in / groups, kh, kw)."""
    return _conv(x, weight, bias, 2, name, stride=stride, padding=padding, dilation=dilation, groups=groups)


def conv_transpose1d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
    *,
    name: str = "conv_transpose1d",
) -> Tensor:
    """Transposed 1-D convolution; weight (C_in, C_out / groups, k)."""
    return _conv_transpose(x, weight, bias, 1, name, stride, padding, output_padding, groups, dilation)


def conv_transpose2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
    *,
    name: str = "conv_transpose2d",
) -> Tensor:
    """Transposed 2-D convolution; weight (C_in, C_out / groups, kh, kw)."""
    return _conv_transpose(x, weight, bias, 2, name, stride, padding, output_padding, groups, dilation)


# -- pooling -----------------------------------------------------------------------------
def _tuple(value: Any, n: int) -> Any:
    return (value,) * n if isinstance(value, int) else value


def _pool(x: Tensor, nd: int, name: str, fn: Callable[..., Tensor], *args: Any, **params: Any) -> Tensor:
    x, added = _batched(_tensor_arg(x, name), nd, name, _LAYOUT[nd])
    out = fn(x, *args, **params)
    return squeeze(out, 0) if added else out


def _max_pool(
    x: Tensor, nd: int, name: str, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool
) -> Tensor:
    """``max_pool`` of an nd-D input with int arguments spread over the nd axes (max_pool1d/2d)."""
    k, st, pad, dil = (_tuple(v, nd) for v in (kernel_size, stride, padding, dilation))
    return _pool(x, nd, name, max_pool, k, stride=st, padding=pad, dilation=dil, ceil_mode=ceil_mode)


def _avg_pool(
    x: Tensor, nd: int, name: str, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool, count_include_pad: bool
) -> Tensor:
    """``avg_pool`` of an nd-D input with int arguments spread over the nd axes (avg_pool1d/2d)."""
    k, st, pad = (_tuple(v, nd) for v in (kernel_size, stride, padding))
    return _pool(
        x, nd, name, avg_pool, k, stride=st, padding=pad, ceil_mode=ceil_mode, count_include_pad=count_include_pad
    )


def max_pool1d(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    *,
    name: str = "max_pool1d",
) -> Tensor:
    return _max_pool(x, 1, name, kernel_size, stride, padding, dilation, ceil_mode)


def max_pool2d(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    *,
    name: str = "max_pool2d",
) -> Tensor:
    """Max over (kh, kw) windows of (N, C, H, W) (stride defaults to the kernel size)."""
    return _max_pool(x, 2, name, kernel_size, stride, padding, dilation, ceil_mode)


def avg_pool1d(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    *,
    name: str = "avg_pool1d",
) -> Tensor:
    return _avg_pool(x, 1, name, kernel_size, stride, padding, ceil_mode, count_include_pad)


def avg_pool2d(
    x: Tensor,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    *,
    name: str = "avg_pool2d",
) -> Tensor:
    """Mean over (kh, kw) windows of (N, C, H, W)."""
    return _avg_pool(x, 2, name, kernel_size, stride, padding, ceil_mode, count_include_pad)


def _adaptive_pool(x: Tensor, output_size: Any, name: str, fn: Callable[..., Tensor]) -> Tensor:
    """``fn`` (adaptive_avg_pool / adaptive_max_pool) to (H_out, W_out); ``None`` keeps that axis."""
    x_ = _tensor_arg(x, name)
    size = _tuple(output_size, 2)
    size = tuple(x_.shape[-2 + i] if s is None else s for i, s in enumerate(size))
    return _pool(x_, 2, name, fn, size)


def adaptive_avg_pool2d(x: Tensor, output_size: Any, *, name: str = "adaptive_avg_pool2d") -> Tensor:
    """Mean pooling to a fixed (H_out, W_out); ``None`` in output_size keeps that axis."""
    return _adaptive_pool(x, output_size, name, adaptive_avg_pool)


def adaptive_max_pool2d(x: Tensor, output_size: Any, *, name: str = "adaptive_max_pool2d") -> Tensor:
    return _adaptive_pool(x, output_size, name, adaptive_max_pool)


def interpolate(x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """Resize (N, C, *spatial): see ``ember.interpolate``."""
    return _interpolate(x, *args, **kwargs)


# -- activations -------------------------------------------------------------------------
def relu(x: Tensor) -> Tensor:
    return _nn.relu(x)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return _nn.gelu(x, approximate=approximate)


def silu(x: Tensor) -> Tensor:
    return _nn.silu(x)


def sigmoid(x: Tensor) -> Tensor:
    return _nn.sigmoid(x)


def tanh(x: Tensor) -> Tensor:
    return _tensor_arg(x, "tanh").tanh()


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    return _nn.softmax(x, axis=dim)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return _nn.log_softmax(x, axis=dim)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return _nn.leaky_relu(x, negative_slope)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    return _nn.elu(x, alpha)


def softplus(x: Tensor, beta: float = 1.0) -> Tensor:
    return _nn.softplus(x, beta)


def mish(x: Tensor) -> Tensor:
    return _nn.mish(x)


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return _nn.hardtanh(x, min_val, max_val)


# -- normalisation -----------------------------------------------------------------------
def layer_norm(
    x: Tensor, normalized_shape: Any, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` axes, then scale and shift."""
    return _nn.layer_norm(x, normalized_shape, weight, bias, eps)


def rms_norm(x: Tensor, normalized_shape: Any, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """x / sqrt(mean(x**2) + eps) over the trailing axes; ``eps=None`` is the dtype's machine epsilon."""
    x = _tensor_arg(x, "rms_norm")
    return _nn.rms_norm(x, normalized_shape, weight, finfo(x.dtype).eps if eps is None else eps)


def group_norm(
    x: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
    *,
    name: str = "group_norm",
) -> Tensor:
    """Normalise (N, C, *) over each group of C / num_groups channels and all spatial axes."""
    x = _tensor_arg(x, name)
    if x.ndim < 2:
        raise ShapeError(f"{name}: expected an (N, C, ...) input, got shape {x.shape}")
    n, c = x.shape[0], x.shape[1]
    if c % num_groups:
        raise ShapeError(f"{name}: {c} channels do not split into num_groups={num_groups} groups")
    grouped = x.reshape((n, num_groups, -1))
    out = _nn.layer_norm(grouped, (grouped.shape[-1],), eps=eps).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def batch_norm(
    x: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Batch normalisation over all axes but 1; in training the running stats are updated in place."""
    return _nn.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)


def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """x / max(||x||_p, eps) along ``dim``."""
    x = _tensor_arg(x, "normalize")
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not p > 0:
        raise InvalidArgumentError(f"normalize: p must be a number > 0 (the norm's order, e.g. 2), got {p!r}")
    return x / vector_norm(x, axis=dim, keepdims=True, ord=p).clip(eps, None)


# -- dropout, embedding, attention, padding ----------------------------------------------
def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero elements with probability ``p`` and scale the rest by 1 / (1 - p) (training only)."""
    return _nn.dropout(x, p, training)


def embedding(indices: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of ``weight`` picked by ``indices``; the ``padding_idx`` row gets no gradient."""
    out = _nn.embedding(indices, weight)
    if padding_idx is not None and out.requires_grad:
        pad_rows = expand_dims(_tensor_arg(indices, "embedding", weight) == padding_idx, -1)
        out = where(pad_rows, out.detach(), out)
    return out


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> Tensor:
    """softmax(q k^T * scale + mask) v; a boolean ``attn_mask`` is True where attention is allowed."""
    return _attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale, dropout_p=dropout_p)


def pad(x: Tensor, pad: Sequence[int], mode: str = "constant", value: float = 0.0) -> Tensor:
    """PyTorch-order padding: ``(left, right)`` of the last axis, then of the one before..."""
    if mode != "constant":
        raise NotImplementedOpError(f"pad: only mode='constant' is implemented, got {mode!r}")
    x = _tensor_arg(x, "pad")
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise ShapeError(f"pad: expected an even number of at most {2 * x.ndim} sizes, got {tuple(pad)}")
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    return _pad(x, widths, value)


def one_hot(indices: Tensor, num_classes: int = -1) -> Tensor:
    """Integer one-hot encoding with the classes on a new last axis."""
    idx = _tensor_arg(indices, "one_hot")
    n = int(idx.max().item()) + 1 if num_classes < 0 else num_classes
    return _one_hot(idx, n, dtype="int64")

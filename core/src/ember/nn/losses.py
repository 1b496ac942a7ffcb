"""Loss functions (PyTorch semantics); ``reduction`` is 'mean', 'sum' or 'none'."""

from __future__ import annotations

from typing import Any

from ..errors import DTypeError, InvalidArgumentError, ShapeError
from ..ops import nn as _nn
from ..ops.elementwise import _tensor_arg, where
from ..ops.indexing import check_class_range, take, take_along_axis
from ..ops.movement import expand_dims
from ..tensor import Tensor

__all__ = [
    "cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
]  # fmt: skip

cross_entropy = _nn.cross_entropy


def _reduce(loss: Tensor, reduction: str, name: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise InvalidArgumentError(f"{name}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _pair(input: Any, target: Any, name: str) -> tuple[Tensor, Tensor]:
    x = _tensor_arg(input, name)
    if not x.dtype.is_floating:
        raise DTypeError(f"{name}: input must be floating-point, got {x.dtype}")
    t = _tensor_arg(target, name, x)
    if t.shape != x.shape:
        raise ShapeError(f"{name}: input has shape {x.shape} but target has shape {t.shape}; they must match")
    if t.dtype is not x.dtype:
        t = t.astype(x.dtype)
    return x, t


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """(input - target) ** 2."""
    x, t = _pair(input, target, "mse_loss")
    d = x - t
    return _reduce(d * d, reduction, "mse_loss")


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    """|input - target|."""
    x, t = _pair(input, target, "l1_loss")
    return _reduce((x - t).abs(), reduction, "l1_loss")


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """0.5 d**2 / beta where |d| < beta, else |d| - 0.5 beta."""
    x, t = _pair(input, target, "smooth_l1_loss")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta >= 0:
        raise InvalidArgumentError(f"smooth_l1_loss: beta must be a number >= 0, got {beta!r}")
    d = (x - t).abs()
    if beta == 0:
        return _reduce(d, reduction, "smooth_l1_loss")
    return _reduce(where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta), reduction, "smooth_l1_loss")


def huber_loss(input: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """0.5 d**2 where |d| < delta, else delta (|d| - 0.5 delta)."""
    x, t = _pair(input, target, "huber_loss")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not delta > 0:
        raise InvalidArgumentError(f"huber_loss: delta must be a number > 0, got {delta!r}")
    d = (x - t).abs()
    return _reduce(where(d < delta, 0.5 * d * d, delta * (d - 0.5 * delta)), reduction, "huber_loss")


def binary_cross_entropy(
    input: Tensor, target: Tensor, weight: Tensor | None = None, reduction: str = "mean"
) -> Tensor:
    """-(t log p + (1 - t) log(1 - p)) for probabilities ``input``; logs are clamped at -100."""
    p, t = _pair(input, target, "binary_cross_entropy")
    loss = -(t * p.log().clip(-100.0, None) + (1.0 - t) * (1.0 - p).log().clip(-100.0, None))
    if weight is not None:
        loss = loss * _tensor_arg(weight, "binary_cross_entropy", p)
    return _reduce(loss, reduction, "binary_cross_entropy")


def binary_cross_entropy_with_logits(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    reduction: str = "mean",
    pos_weight: Tensor | None = None,
) -> Tensor:
    """Sigmoid + binary cross-entropy in one stable expression (no overflow for large logits)."""
    x, t = _pair(input, target, "binary_cross_entropy_with_logits")
    neg_log_p = _nn.softplus(-x)  # -log(sigmoid(x))
    neg_log_q = _nn.softplus(x)  # -log(1 - sigmoid(x))
    pos = t * neg_log_p
    if pos_weight is not None:
        pos = pos * _tensor_arg(pos_weight, "binary_cross_entropy_with_logits", x)
    loss = pos + (1.0 - t) * neg_log_q
    if weight is not None:
        loss = loss * _tensor_arg(weight, "binary_cross_entropy_with_logits", x)
    return _reduce(loss, reduction, "binary_cross_entropy_with_logits")


def kl_div(input: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """target * (log target - input) for log-probabilities ``input``; 'batchmean' divides by N."""
    x, t = _pair(input, target, "kl_div")
    if log_target:
        loss = t.exp() * (t - x)
    else:
        safe = where(t > 0, t, 1.0)
        loss = where(t > 0, t * safe.log(), 0.0) - t * x
    if reduction == "batchmean":
        return loss.sum() / (x.shape[0] if x.ndim else 1)
    return _reduce(loss, reduction, "kl_div")


def nll_loss(
    input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean"
) -> Tensor:
    """-input[n, target[n]] for log-probabilities ``input`` (N, C, ...) and class indices (N, ...)."""
    x = _tensor_arg(input, "nll_loss")
    t = _tensor_arg(target, "nll_loss", x)
    if x.ndim == 1:
        x, t = expand_dims(x, 0), expand_dims(t, 0)
    if t.dtype.kind not in "iu":
        raise DTypeError(f"nll_loss: target must hold class indices (integers), got {t.dtype}")
    expected = (x.shape[0],) + x.shape[2:]
    if x.ndim < 2 or t.shape != expected:
        raise ShapeError(f"nll_loss: input {x.shape} needs a target of shape {expected}, got {t.shape}")
    check_class_range(t, x.shape[1], "nll_loss", "target", ignore=int(ignore_index))
    valid = t != ignore_index
    safe = where(valid, t, 0).astype("int64")
    picked = take_along_axis(x, expand_dims(safe, 1), 1).reshape(t.shape)
    w = valid.astype(x.dtype)
    if weight is not None:
        wt = _tensor_arg(weight, "nll_loss", x)
        if wt.shape != (x.shape[1],):
            raise ShapeError(f"nll_loss: weight must have shape ({x.shape[1]},), got {wt.shape}")
        w = w * take(wt, safe.reshape((-1,)), axis=0).reshape(t.shape)
    loss = -picked * w
    if reduction == "mean":
        return loss.sum() / w.sum()
    return _reduce(loss, reduction, "nll_loss")

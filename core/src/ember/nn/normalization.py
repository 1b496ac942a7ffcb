"""Normalisation layers: BatchNorm1d/2d, LayerNorm, RMSNorm, GroupNorm (PyTorch semantics)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..autodiff.mode import no_grad
from ..creation import ones, zeros
from ..device import device_arg
from ..errors import ArgumentTypeError, InvalidArgumentError, ShapeError
from ..shapes import as_int, as_ints
from ..tensor import Tensor
from . import functional as F
from . import init
from ._util import check_rank, check_size, new_param, param_dtype
from .config import Config
from .module import Module, Parameter

__all__ = [
    "BatchNorm1d", "BatchNorm1dConfig", "BatchNorm2d", "BatchNorm2dConfig", "LayerNorm", "LayerNormConfig",
    "RMSNorm", "RMSNormConfig", "GroupNorm", "GroupNormConfig",
]  # fmt: skip


def _shape(normalized_shape: Any, layer: str = "LayerNorm") -> tuple[int, ...]:
    shape = as_ints(normalized_shape, layer, "normalized_shape")
    if any(s < 1 for s in shape):
        raise InvalidArgumentError(f"{layer}: every normalized_shape entry must be >= 1, got {normalized_shape!r}")
    return shape


def _ones_param(shape: tuple[int, ...], device: Any, dtype: Any) -> Parameter:
    return Parameter(init.ones_(new_param(shape, device, dtype)))


def _zeros_param(shape: tuple[int, ...], device: Any, dtype: Any) -> Parameter:
    return Parameter(init.zeros_(new_param(shape, device, dtype)))


@dataclass
class _BatchNormConfig(Config):
    num_features: int
    eps: float = 1e-5
    momentum: float | None = 0.1
    affine: bool = True
    track_running_stats: bool = True


@dataclass
class BatchNorm1dConfig(_BatchNormConfig):
    """Batch normalisation of (N, C) or (N, C, L) over all axes but C."""


@dataclass
class BatchNorm2dConfig(_BatchNormConfig):
    """Batch normalisation of (N, C, H, W) over all axes but C."""


class _BatchNorm(Module):
    ranks: tuple[int, ...] = (4,)
    layout = "(N, C, H, W)"

    def __init__(self, config: _BatchNormConfig, device: Any, dtype: Any) -> None:
        super().__init__()
        self._config = config
        c = config.num_features
        if as_int(c, type(self).__name__, "num_features") < 1:
            raise InvalidArgumentError(f"{type(self).__name__}: num_features must be >= 1, got {c!r}")
        self.num_features, self.eps, self.momentum = c, config.eps, config.momentum
        self.affine, self.track_running_stats = config.affine, config.track_running_stats
        if self.affine:
            self.weight = _ones_param((c,), device, dtype)
            self.bias = _zeros_param((c,), device, dtype)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if self.track_running_stats:
            dt = param_dtype(dtype)
            dev = device_arg(device).without_autodiff()
            self.register_buffer("running_mean", zeros((c,), dtype=dt, device=dev))
            self.register_buffer("running_var", ones((c,), dtype=dt, device=dev))
            self.register_buffer("num_batches_tracked", zeros((), dtype="int64", device=dev))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            init.zeros_(self.num_batches_tracked)

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        check_rank(x, self.ranks, name, self.layout)
        check_size(x, 1, self.num_features, name, "num_features", self.layout)
        update = self.training and self.track_running_stats
        factor = self.momentum
        if update:
            if x.size // x.shape[1] <= 1:
                raise ShapeError(f"{name}: training needs more than one value per channel, got input {x.shape}")
            with no_grad():
                self.num_batches_tracked.copy_(self.num_batches_tracked + 1)
            if factor is None:
                factor = 1.0 / self.num_batches_tracked.item()
        use_batch_stats = self.training or not self.track_running_stats
        return F.batch_norm(
            x,
            self.running_mean if not use_batch_stats or update else None,
            self.running_var if not use_batch_stats or update else None,
            self.weight,
            self.bias,
            training=use_batch_stats,
            momentum=0.0 if factor is None else factor,
            eps=self.eps,
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of (N, C) or (N, C, L); running statistics are used in eval mode."""

    config_class = BatchNorm1dConfig
    ranks = (2, 3)
    layout = "(N, C) or (N, C, L)"

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(BatchNorm1dConfig(num_features, eps, momentum, affine, track_running_stats), device, dtype)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of (N, C, H, W); running statistics are used in eval mode."""

    config_class = BatchNorm2dConfig
    ranks = (4,)
    layout = "(N, C, H, W)"

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(BatchNorm2dConfig(num_features, eps, momentum, affine, track_running_stats), device, dtype)


@dataclass
class LayerNormConfig(Config):
    """Normalisation over the trailing normalized_shape axes."""

    normalized_shape: int | tuple[int, ...]
    eps: float = 1e-5
    elementwise_affine: bool = True
    bias: bool = True


def _check_trailing(x: Any, shape: tuple[int, ...], layer: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise ArgumentTypeError(f"{layer}: expected a Tensor, got {type(x).__name__}")
    if x.shape[x.ndim - len(shape) :] != shape or x.ndim < len(shape):
        raise ShapeError(f"{layer}: expected input of shape (..., {', '.join(map(str, shape))}), got {x.shape}")
    return x


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing ``normalized_shape`` axes."""

    config_class = LayerNormConfig

    def __init__(
        self,
        normalized_shape: Any,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self._config = LayerNormConfig(normalized_shape, eps, elementwise_affine, bias)
        self.normalized_shape, self.eps, self.elementwise_affine = _shape(normalized_shape), eps, elementwise_affine
        if elementwise_affine:
            self.weight = _ones_param(self.normalized_shape, device, dtype)
            if bias:
                self.bias = _zeros_param(self.normalized_shape, device, dtype)
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        _check_trailing(x, self.normalized_shape, "LayerNorm")
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


@dataclass
class RMSNormConfig(Config):
    """Root-mean-square normalisation over the trailing axes; eps None = the dtype's epsilon."""

    normalized_shape: int | tuple[int, ...]
    eps: float | None = None
    elementwise_affine: bool = True


class RMSNorm(Module):
    """x / sqrt(mean(x**2) + eps) * weight over the trailing ``normalized_shape`` axes."""

    config_class = RMSNormConfig

    def __init__(
        self,
        normalized_shape: Any,
        eps: float | None = None,
        elementwise_affine: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self._config = RMSNormConfig(normalized_shape, eps, elementwise_affine)
        self.normalized_shape, self.eps, self.elementwise_affine = (
            _shape(normalized_shape, "RMSNorm"),
            eps,
            elementwise_affine,
        )
        if elementwise_affine:
            self.weight = _ones_param(self.normalized_shape, device, dtype)
        else:
            self.register_parameter("weight", None)

    def forward(self, x: Tensor) -> Tensor:
        _check_trailing(x, self.normalized_shape, "RMSNorm")
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)


@dataclass
class GroupNormConfig(Config):
    """Normalisation of (N, C, *) over groups of C / num_groups channels."""

    num_groups: int
    num_channels: int
    eps: float = 1e-5
    affine: bool = True


class GroupNorm(Module):
    """Normalises each group of ``num_channels / num_groups`` channels of (N, C, *), then scales per channel."""

    config_class = GroupNormConfig

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise InvalidArgumentError(
                f"GroupNorm: num_channels={num_channels} must be divisible by num_groups={num_groups}"
            )
        self._config = GroupNormConfig(num_groups, num_channels, eps, affine)
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = _ones_param((num_channels,), device, dtype)
            self.bias = _zeros_param((num_channels,), device, dtype)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        check_rank(x, tuple(range(2, 9)), "GroupNorm", "(N, C, *)")
        check_size(x, 1, self.num_channels, "GroupNorm", "num_channels", "(N, C, *)")
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps, name="GroupNorm")

"""Pooling layers over ``ember.max_pool`` / ``avg_pool`` / ``adaptive_*_pool``; input (N, C, *spatial)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..tensor import Tensor
from . import functional as F
from .config import Config
from .module import Module

__all__ = [
    "MaxPool1d", "MaxPool1dConfig", "MaxPool2d", "MaxPool2dConfig", "AvgPool1d", "AvgPool1dConfig",
    "AvgPool2d", "AvgPool2dConfig", "AdaptiveAvgPool2d", "AdaptiveAvgPool2dConfig",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool2dConfig",
]  # fmt: skip


@dataclass
class _MaxPoolConfig(Config):
    kernel_size: int | tuple[int, ...]
    stride: int | tuple[int, ...] | None = None
    padding: int | tuple[int, ...] = 0
    dilation: int | tuple[int, ...] = 1
    ceil_mode: bool = False


@dataclass
class MaxPool1dConfig(_MaxPoolConfig):
    """Max over windows of (N, C, L); stride defaults to kernel_size."""


@dataclass
class MaxPool2dConfig(_MaxPoolConfig):
    """Max over windows of (N, C, H, W); stride defaults to kernel_size."""


class _MaxPool(Module):
    def __init__(self, config: _MaxPoolConfig) -> None:
        super().__init__()
        self._config = config
        self.kernel_size, self.stride, self.padding = config.kernel_size, config.stride, config.padding
        self.dilation, self.ceil_mode = config.dilation, config.ceil_mode


class MaxPool1d(_MaxPool):
    """Max over windows of (N, C, L)."""

    config_class = MaxPool1dConfig

    def __init__(
        self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False
    ) -> None:
        super().__init__(MaxPool1dConfig(kernel_size, stride, padding, dilation, ceil_mode))

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool1d(
            x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, name="MaxPool1d"
        )


class MaxPool2d(_MaxPool):
    """Max over (kh, kw) windows of (N, C, H, W)."""

    config_class = MaxPool2dConfig

    def __init__(
        self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False
    ) -> None:
        super().__init__(MaxPool2dConfig(kernel_size, stride, padding, dilation, ceil_mode))

    def forward(self, x: Tensor) -> Tensor:
        return F.max_pool2d(
            x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, name="MaxPool2d"
        )


@dataclass
class _AvgPoolConfig(Config):
    kernel_size: int | tuple[int, ...]
    stride: int | tuple[int, ...] | None = None
    padding: int | tuple[int, ...] = 0
    ceil_mode: bool = False
    count_include_pad: bool = True


@dataclass
class AvgPool1dConfig(_AvgPoolConfig):
    """Mean over windows of (N, C, L)."""


@dataclass
class AvgPool2dConfig(_AvgPoolConfig):
    """Mean over windows of (N, C, H, W)."""


class _AvgPool(Module):
    def __init__(self, config: _AvgPoolConfig) -> None:
        super().__init__()
        self._config = config
        self.kernel_size, self.stride, self.padding = config.kernel_size, config.stride, config.padding
        self.ceil_mode, self.count_include_pad = config.ceil_mode, config.count_include_pad


class AvgPool1d(_AvgPool):
    """Mean over windows of (N, C, L)."""

    config_class = AvgPool1dConfig

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__(AvgPool1dConfig(kernel_size, stride, padding, ceil_mode, count_include_pad))

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool1d(
            x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad, name="AvgPool1d"
        )


class AvgPool2d(_AvgPool):
    """Mean over (kh, kw) windows of (N, C, H, W)."""

    config_class = AvgPool2dConfig

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__(AvgPool2dConfig(kernel_size, stride, padding, ceil_mode, count_include_pad))

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(
            x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad, name="AvgPool2d"
        )


@dataclass
class AdaptiveAvgPool2dConfig(Config):
    """Mean pooling of (N, C, H, W) to a fixed output_size (an int, or a pair that may hold None)."""

    output_size: int | tuple[int | None, int | None]


class AdaptiveAvgPool2d(Module):
    """Mean pooling of (N, C, H, W) to a fixed (H_out, W_out) whatever the input size."""

    config_class = AdaptiveAvgPool2dConfig

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self._config = AdaptiveAvgPool2dConfig(output_size)
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(x, self.output_size, name="AdaptiveAvgPool2d")


@dataclass
class AdaptiveMaxPool2dConfig(Config):
    """Max pooling of (N, C, H, W) to a fixed output_size."""

    output_size: int | tuple[int | None, int | None]


class AdaptiveMaxPool2d(Module):
    """Max pooling of (N, C, H, W) to a fixed (H_out, W_out) whatever the input size."""

    config_class = AdaptiveMaxPool2dConfig

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self._config = AdaptiveMaxPool2dConfig(output_size)
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return F.adaptive_max_pool2d(x, self.output_size, name="AdaptiveMaxPool2d")

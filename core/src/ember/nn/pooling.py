"""Pooling layers over ``ember.max_pool`` / ``avg_pool`` / ``adaptive_*_pool``; input (N, C, *spatial)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

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
    """The constructor and forward MaxPool1d and MaxPool2d share; ``function`` is their F.max_pool*d."""

    config_class: ClassVar[type[_MaxPoolConfig]]
    function: ClassVar[Callable[..., Tensor]]

    def __init__(
        self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False
    ) -> None:
        super().__init__()
        self._config = config = self.config_class(kernel_size, stride, padding, dilation, ceil_mode)
        self.kernel_size, self.stride, self.padding = config.kernel_size, config.stride, config.padding
        self.dilation, self.ceil_mode = config.dilation, config.ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        return self.function(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode, name=name)


class MaxPool1d(_MaxPool):
    """Max over windows of (N, C, L)."""

    config_class = MaxPool1dConfig
    function = staticmethod(F.max_pool1d)


class MaxPool2d(_MaxPool):
    """Max over (kh, kw) windows of (N, C, H, W)."""

    config_class = MaxPool2dConfig
    function = staticmethod(F.max_pool2d)


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
    """The constructor and forward AvgPool1d and AvgPool2d share; ``function`` is their F.avg_pool*d."""

    config_class: ClassVar[type[_AvgPoolConfig]]
    function: ClassVar[Callable[..., Tensor]]

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> None:
        super().__init__()
        self._config = config = self.config_class(kernel_size, stride, padding, ceil_mode, count_include_pad)
        self.kernel_size, self.stride, self.padding = config.kernel_size, config.stride, config.padding
        self.ceil_mode, self.count_include_pad = config.ceil_mode, config.count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        return self.function(
            x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad, name=name
        )


class AvgPool1d(_AvgPool):
    """Mean over windows of (N, C, L)."""

    config_class = AvgPool1dConfig
    function = staticmethod(F.avg_pool1d)


class AvgPool2d(_AvgPool):
    """Mean over (kh, kw) windows of (N, C, H, W)."""

    config_class = AvgPool2dConfig
    function = staticmethod(F.avg_pool2d)


class _AdaptivePool(Module):
    """The constructor and forward AdaptiveAvgPool2d and AdaptiveMaxPool2d share."""

    config_class: ClassVar[type[AdaptiveAvgPool2dConfig | AdaptiveMaxPool2dConfig]]
    function: ClassVar[Callable[..., Tensor]]

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self._config = self.config_class(output_size)
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return self.function(x, self.output_size, name=type(self).__name__)


@dataclass
class AdaptiveAvgPool2dConfig(Config):
    """Mean pooling of (N, C, H, W) to a fixed output_size (an int, or a pair that may hold None)."""

    output_size: int | tuple[int | None, int | None]


class AdaptiveAvgPool2d(_AdaptivePool):
    """Mean pooling of (N, C, H, W) to a fixed (H_out, W_out) whatever the input size."""

    config_class = AdaptiveAvgPool2dConfig
    function = staticmethod(F.adaptive_avg_pool2d)


@dataclass
class AdaptiveMaxPool2dConfig(Config):
    """Max pooling of (N, C, H, W) to a fixed output_size."""

    output_size: int | tuple[int | None, int | None]


class AdaptiveMaxPool2d(_AdaptivePool):
    """Max pooling of (N, C, H, W) to a fixed (H_out, W_out) whatever the input size."""

    config_class = AdaptiveMaxPool2dConfig
    function = staticmethod(F.adaptive_max_pool2d)

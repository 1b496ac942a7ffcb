"""Convolution layers over ``ember.conv`` / ``ember.conv_transpose``; input (N, C, *spatial)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import InvalidArgumentError, NotImplementedOpError
from ..shapes import as_int, as_ints
from ..tensor import Tensor
from . import functional as F
from . import init
from ._util import new_param, uniform_param
from .config import Config
from .module import Module, Parameter

__all__ = [
    "Conv1d", "Conv1dConfig", "Conv2d", "Conv2dConfig",
    "ConvTranspose1d", "ConvTranspose1dConfig", "ConvTranspose2d", "ConvTranspose2dConfig",
]  # fmt: skip


_MINIMUM = {"kernel_size": 1, "stride": 1, "dilation": 1, "padding": 0, "output_padding": 0}


def _ntuple(value: Any, n: int, name: str, layer: str) -> tuple[int, ...]:
    out = as_ints(value, layer, name)
    if len(out) == 1 and not isinstance(value, (tuple, list)):
        out = out * n
    if len(out) != n:
        raise InvalidArgumentError(f"{layer}: {name} needs {n} values, got {value!r}")
    low = _MINIMUM.get(name, 0)
    if any(v < low for v in out):
        raise InvalidArgumentError(f"{layer}: every {name} must be >= {low}, got {value!r}")
    return out


@dataclass
class _ConvConfig(Config):
    in_channels: int
    out_channels: int
    kernel_size: int | tuple[int, ...]
    stride: int | tuple[int, ...] = 1
    padding: int | str | tuple[int, ...] = 0
    dilation: int | tuple[int, ...] = 1
    groups: int = 1
    bias: bool = True
    padding_mode: str = "zeros"


@dataclass
class Conv1dConfig(_ConvConfig):
    """1-D convolution; padding is an int, a tuple, 'same' or 'valid'."""


@dataclass
class Conv2dConfig(_ConvConfig):
    """2-D convolution; padding is an int, a pair, 'same' or 'valid'."""


class _ConvNd(Module):
    nd = 2
    transposed = False

    def __init__(
        self,
        config: Any,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any,
        padding: Any,
        dilation: Any,
        groups: int,
        bias: bool,
        padding_mode: str,
        device: Any,
        dtype: Any,
        output_padding: Any = 0,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        self._config = config
        for arg, v in (("in_channels", in_channels), ("out_channels", out_channels), ("groups", groups)):
            if as_int(v, name, arg) < 1:
                raise InvalidArgumentError(f"{name}: {arg} must be >= 1, got {v!r}")
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise InvalidArgumentError(
                f"{name}: in_channels={in_channels} and out_channels={out_channels} must both be divisible "
                f"by groups={groups}"
            )
        if padding_mode != "zeros":
            raise NotImplementedOpError(f"{name}: only padding_mode='zeros' is implemented, got {padding_mode!r}")
        n = self.nd
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _ntuple(kernel_size, n, "kernel_size", name)
        self.stride = _ntuple(stride, n, "stride", name)
        self.padding = padding if isinstance(padding, str) else _ntuple(padding, n, "padding", name)
        if isinstance(padding, str) and (padding not in ("same", "valid") or self.transposed):
            raise InvalidArgumentError(
                f"{name}: padding must be an int or a tuple (or 'same'/'valid' for Conv), got {padding!r}"
            )
        self.dilation = _ntuple(dilation, n, "dilation", name)
        self.output_padding = _ntuple(output_padding, n, "output_padding", name)
        self.padding_mode = padding_mode
        if self.transposed:
            shape = (in_channels, out_channels // groups) + self.kernel_size
        else:
            shape = (out_channels, in_channels // groups) + self.kernel_size
        w = new_param(shape, device, dtype)
        self.weight = Parameter(init.kaiming_uniform_(w, a=math.sqrt(5)))
        if bias:
            fan_in, _ = init.fan_in_and_fan_out(w)
            self.bias = uniform_param((out_channels,), 1 / math.sqrt(fan_in) if fan_in else 0, device, dtype)
        else:
            self.register_parameter("bias", None)

    def _params(self) -> dict[str, Any]:
        return {"stride": self.stride, "padding": self.padding, "dilation": self.dilation, "groups": self.groups}

    def forward(self, x: Tensor) -> Tensor:
        name = type(self).__name__
        if self.transposed:
            fn = F.conv_transpose1d if self.nd == 1 else F.conv_transpose2d
            return fn(x, self.weight, self.bias, output_padding=self.output_padding, name=name, **self._params())
        fn = F.conv1d if self.nd == 1 else F.conv2d
        return fn(x, self.weight, self.bias, name=name, **self._params())


class _Conv(_ConvNd):
    """The constructor Conv1d and Conv2d share: the arguments of their config, then device and dtype."""

    config_class: ClassVar[type[_ConvConfig]]

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        cfg = self.config_class(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, padding_mode
        )
        super().__init__(cfg, **cfg.kwargs(), device=device, dtype=dtype)


class Conv1d(_Conv):
    """1-D convolution of (N, C_in, L) -> (N, C_out, L_out); weight (C_out, C_in / groups, k)."""

    config_class = Conv1dConfig
    nd = 1


class Conv2d(_Conv):
    """2-D convolution of (N, C_in, H, W) -> (N, C_out, H_out, W_out); weight (C_out, C_in / groups, kh, kw).

    >>> import ember as em
    >>> from ember import nn
    >>> nn.Conv2d(3, 8, 3, padding=1)(em.ones((2, 3, 5, 5))).shape
    (2, 8, 5, 5)
    """

    config_class = Conv2dConfig
    nd = 2


@dataclass
class _ConvTransposeConfig(Config):
    in_channels: int
    out_channels: int
    kernel_size: int | tuple[int, ...]
    stride: int | tuple[int, ...] = 1
    padding: int | tuple[int, ...] = 0
    output_padding: int | tuple[int, ...] = 0
    groups: int = 1
    bias: bool = True
    dilation: int | tuple[int, ...] = 1
    padding_mode: str = "zeros"


@dataclass
class ConvTranspose1dConfig(_ConvTransposeConfig):
    """Transposed 1-D convolution (the gradient of Conv1d with respect to its input)."""


@dataclass
class ConvTranspose2dConfig(_ConvTransposeConfig):
    """Transposed 2-D convolution (the gradient of Conv2d with respect to its input)."""


class _ConvTranspose(_ConvNd):
    """The constructor ConvTranspose1d and ConvTranspose2d share (PyTorch's argument order)."""

    config_class: ClassVar[type[_ConvTransposeConfig]]
    transposed = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        output_padding: Any = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: Any = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        cfg = self.config_class(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            output_padding,
            groups,
            bias,
            dilation,
            padding_mode,
        )
        super().__init__(cfg, **cfg.kwargs(), device=device, dtype=dtype)


class ConvTranspose1d(_ConvTranspose):
    """Transposed 1-D convolution; weight (C_in, C_out / groups, k)."""

    config_class = ConvTranspose1dConfig
    nd = 1


class ConvTranspose2d(_ConvTranspose):
    """Transposed 2-D convolution (N, C_in, H, W) -> (N, C_out, H_out, W_out); weight (C_in, C_out / groups, kh, kw)."""

    config_class = ConvTranspose2dConfig
    nd = 2

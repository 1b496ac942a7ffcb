"""Parameter initialisers (PyTorch's names, fan modes and gains), applied in place.

Each one draws from ember's Philox stream (the global one, or ``key=``), so the same seed
gives the same initial weights on every device, then writes the values into the tensor with
``copy_`` under ``no_grad`` and returns it.

>>> import ember as em
>>> from ember import nn
>>> w = em.zeros((3, 4))
>>> nn.init.constant_(w, 0.5).tolist()[0]
[0.5, 0.5, 0.5, 0.5]
"""

from __future__ import annotations

import math
from typing import Any

from ..autodiff.mode import no_grad
from ..errors import InvalidArgumentError
from ..random import Key, normal, uniform
from ..tensor import Tensor

__all__ = [
    "calculate_gain", "fan_in_and_fan_out", "uniform_", "normal_", "constant_", "zeros_", "ones_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
]  # fmt: skip

_LINEAR = (
    "linear",
    "identity",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "sigmoid",
)


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for ``nonlinearity`` (PyTorch's table)."""
    if nonlinearity in _LINEAR:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3.0
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1.0 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4.0
    raise InvalidArgumentError(
        f"calculate_gain: unknown nonlinearity {nonlinearity!r}; expected one of "
        f"{', '.join(_LINEAR + ('tanh', 'relu', 'leaky_relu', 'selu'))}"
    )


def fan_in_and_fan_out(t: Tensor) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of shape (out, in, *kernel)."""
    if t.ndim < 2:
        raise InvalidArgumentError(
            f"nn.init: fan in and fan out need a tensor with at least 2 dimensions (out, in, ...), "
            f"got shape {t.shape}; use uniform_ or normal_ for a bias"
        )
    receptive = 1
    for s in t.shape[2:]:
        receptive *= s
    return t.shape[1] * receptive, t.shape[0] * receptive


def _fan(t: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise InvalidArgumentError(f"nn.init: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = fan_in_and_fan_out(t)
    return fan_in if mode == "fan_in" else fan_out


def _write(t: Tensor, values: Any) -> Tensor:
    with no_grad():
        t.copy_(values)
    return t


def _place(t: Tensor) -> dict[str, Any]:
    return {"shape": t.shape, "dtype": t.dtype, "device": t.device.without_autodiff()}


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, key: Key | None = None) -> Tensor:
    """Fill with samples uniform on [a, b)."""
    return _write(t, uniform(a, b, **_place(t), key=key))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, key: Key | None = None) -> Tensor:
    """Fill with normal samples."""
    return _write(t, normal(mean, std, **_place(t), key=key))


def constant_(t: Tensor, value: float) -> Tensor:
    return _write(t, value)


def zeros_(t: Tensor) -> Tensor:
    return _write(t, 0)


def ones_(t: Tensor) -> Tensor:
    return _write(t, 1)


def xavier_uniform_(t: Tensor, gain: float = 1.0, key: Key | None = None) -> Tensor:
    """Glorot uniform: bound = gain * sqrt(6 / (fan_in + fan_out))."""
    if t.size == 0:
        return t
    fan_in, fan_out = fan_in_and_fan_out(t)
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(t, -bound, bound, key=key)


def xavier_normal_(t: Tensor, gain: float = 1.0, key: Key | None = None) -> Tensor:
    """Glorot normal: std = gain * sqrt(2 / (fan_in + fan_out))."""
    if t.size == 0:
        return t
    fan_in, fan_out = fan_in_and_fan_out(t)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)), key=key)


def kaiming_uniform_(
    t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", key: Key | None = None
) -> Tensor:
    """He uniform: bound = gain * sqrt(3 / fan); ``a`` is the leaky_relu slope."""
    if t.size == 0:
        _fan(t, mode)  # still check the arguments
        return t  # nothing to fill (a layer with 0 features), as in PyTorch
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / _fan(t, mode))
    return uniform_(t, -bound, bound, key=key)


def kaiming_normal_(
    t: Tensor, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu", key: Key | None = None
) -> Tensor:
    """He normal: std = gain / sqrt(fan)."""
    if t.size == 0:
        _fan(t, mode)
        return t
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(t, mode))
    return normal_(t, 0.0, std, key=key)

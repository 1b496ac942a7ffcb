"""Helpers shared by the layer modules: parameter creation and input checks."""

from __future__ import annotations

from typing import Any

from ..creation import empty
from ..device import device_arg
from ..dtypes import DType, as_dtype, default_float
from ..errors import ArgumentTypeError, DTypeError, ShapeError
from ..tensor import Tensor
from . import init
from .module import Parameter

__all__ = ["param_dtype", "new_param", "uniform_param", "check_rank", "check_size"]


def param_dtype(dtype: Any) -> DType:
    """The dtype of a layer's parameters: ``dtype``, else the default float."""
    dt = default_float() if dtype is None else as_dtype(dtype)
    if not dt.is_floating:
        raise DTypeError(f"layer parameters must be floating-point, got dtype {dt}")
    return dt


def new_param(shape: tuple[int, ...], device: Any, dtype: Any) -> Tensor:
    """An uninitialised float tensor for a parameter (``device``/``dtype`` as layers accept them)."""
    return empty(shape, dtype=param_dtype(dtype), device=device_arg(device))


def uniform_param(shape: tuple[int, ...], bound: float, device: Any, dtype: Any) -> Parameter:
    """A parameter uniform on [-bound, bound) (PyTorch's default for biases and RNN weights)."""
    return Parameter(init.uniform_(new_param(shape, device, dtype), -bound, bound))


def check_rank(x: Any, ranks: tuple[int, ...], layer: str, layout: str) -> Tensor:
    """``x`` if it is a tensor with one of ``ranks`` dimensions; else an error naming ``layer``."""
    if not isinstance(x, Tensor):
        raise ArgumentTypeError(f"{layer}: expected a Tensor, got {type(x).__name__}")
    if x.ndim not in ranks:
        raise ShapeError(f"{layer}: expected input of shape {layout}, got shape {x.shape} ({x.ndim}-D)")
    return x


def check_size(x: Tensor, axis: int, size: int, layer: str, what: str, layout: str) -> None:
    """Raise a ShapeError naming ``layer`` unless ``x.shape[axis] == size``."""
    if x.shape[axis] != size:
        raise ShapeError(
            f"{layer}: expected input of shape {layout} with {what}={size} on axis {axis}, got shape {x.shape}"
        )

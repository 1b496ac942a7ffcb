"""Helpers the ONNX op handlers share: host values of small tensors, dtypes, constants."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..creation import from_numpy
from ..dtypes import DType, as_dtype
from ..errors import OnnxModelError, UnsupportedOnnxOpError
from ..tensor import Tensor
from . import proto
from .registry import OnnxNode

__all__ = ["host", "ints", "const", "dtype_of", "unsupported", "bad", "norm_axis", "like", "checked_shape"]


def host(t: Tensor) -> np.ndarray:
    """``t``'s values on the host (for shapes, axes and other small operands)."""
    return np.asarray(t.numpy())


def ints(t: Tensor | None) -> list[int] | None:
    """A 0-d or 1-d integer tensor as a list of Python ints (None stays None)."""
    if t is None:
        return None
    return [int(v) for v in host(t).reshape(-1)]


def const(values: Any, like: Tensor, dtype: Any = None) -> Tensor:
    """``values`` as a tensor on ``like``'s device (``like``'s dtype unless ``dtype``)."""
    dt = as_dtype(dtype) if dtype is not None else like.dtype
    arr = np.asarray(values, dtype=dt.numpy, order="C")
    return from_numpy(arr, device=like.device)


def on(values: np.ndarray, device: Any) -> Tensor:
    """A numpy array as a tensor on ``device``."""
    return from_numpy(np.asarray(values, order="C"), device=device)  # 0-d stays 0-d


def dtype_of(code: int, node: OnnxNode) -> DType:
    """The ember dtype of ONNX element type ``code``."""
    np_dtype = proto.ONNX_TO_NUMPY.get(int(code))
    if np_dtype is None:
        if int(code) == 16:  # BFLOAT16
            return as_dtype("bfloat16")
        raise unsupported(node, f"element type {proto.type_name(int(code))}")
    return as_dtype(np_dtype)


def unsupported(node: OnnxNode, what: str) -> UnsupportedOnnxOpError:
    """The error for a node using a feature ember does not import."""
    return UnsupportedOnnxOpError(f"onnx: {node.where()}: ember does not import {what}")


def bad(node: OnnxNode, what: str) -> OnnxModelError:
    """The error for a node whose attributes or inputs are invalid."""
    return OnnxModelError(f"onnx: {node.where()}: {what}")


def norm_axis(axis: int, ndim: int, node: OnnxNode) -> int:
    """``axis`` in ``[0, ndim)``, checked."""
    if not -ndim <= axis < max(ndim, 1):
        raise bad(node, f"axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % ndim if ndim else 0


def like(x: Tensor, value: float) -> Tensor:
    """A 0-d tensor holding ``value`` in ``x``'s dtype on its device."""
    return const(value, x)


def checked_shape(shape: Any, node: OnnxNode, what: str = "output") -> tuple[int, ...]:
    """A shape read from a model's data, refused when negative or past ember's element limit
    (a hostile file must not make ember allocate without bound)."""
    dims = tuple(int(d) for d in shape)
    count = 1
    for d in dims:
        if d < 0:
            raise bad(node, f"the {what} shape {dims} has a negative dimension")
        count *= d
    if count > proto.MAX_TENSOR_ELEMENTS:
        raise bad(
            node, f"the {what} shape {dims} has {count} elements, over ember's limit of {proto.MAX_TENSOR_ELEMENTS}"
        )
    return dims

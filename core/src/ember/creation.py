"""Tensor creation: from Python data, numpy, DLPack, and filled or ranged tensors."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from . import dispatch
from .device import Device, check_dtype, device_arg
from .dispatch import OPS, apply, create, define, is_tensor, make_tensor
from .dtypes import DType, as_dtype, bool_, default_complex, default_float, default_int
from .errors import ArgumentTypeError, DTypeError, InvalidArgumentError, ShapeError
from .shapes import as_int, as_shape

if TYPE_CHECKING:  # annotations only: ember.tensor imports this module (a runtime import is a cycle)
    from .tensor import Tensor

__all__ = [
    "tensor", "asarray", "from_numpy", "from_dlpack", "zeros", "ones", "full", "empty",
    "arange", "linspace", "eye", "zeros_like", "ones_like", "full_like", "empty_like",
    "device_arg", "check_dtype",
]  # fmt: skip


FROM_NUMPY = define("from_numpy", kind="creation", primitive=True, differentiable=False)
TO_NUMPY = define("to_numpy", kind="transfer", primitive=True, differentiable=False)
FULL = define("full", kind="creation", primitive=True, differentiable=False)
ARANGE = define("arange", kind="creation", primitive=True, differentiable=False)


def _finish(t: Tensor, requires_grad: bool) -> Tensor:
    return t.requires_grad_() if requires_grad else t


def _from_host(arr: np.ndarray, dtype: DType, device: Device, op: str) -> Tensor:
    check_dtype(device, dtype, op)
    arr = np.array(arr, dtype=dtype.numpy, copy=True, order="C")
    return create(FROM_NUMPY, device, (arr,), {}, arr.shape, dtype)


def _infer(data: Any) -> tuple[np.ndarray, DType]:
    """numpy array and ember dtype for Python/numpy data (Python floats -> float32)."""
    python_data = not isinstance(data, (np.ndarray, np.generic))
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as exc:
        if "inhomogeneous" in str(exc):
            raise ShapeError(
                "tensor: nested lists of different lengths (ragged data) do not form a tensor; "
                "pad the rows to one length"
            ) from None
        raise InvalidArgumentError(f"tensor: cannot convert {type(data).__name__} to a tensor: {exc}") from None
    if arr.dtype == object or arr.dtype.kind in "US" or (arr.dtype.kind == "V" and arr.dtype.name != "bfloat16"):
        raise DTypeError(
            f"tensor: data of type {type(data).__name__} gives a numpy array of dtype "
            f"{arr.dtype}; expected numbers or booleans (ragged nested lists are not tensors)"
        )
    if python_data and arr.dtype == np.complex128:
        return arr, default_complex()
    if python_data and arr.dtype == np.float64:
        return arr, default_float()
    if python_data and arr.dtype.kind == "i":
        return arr, default_int()
    return arr, as_dtype(arr.dtype, "data")


def tensor(data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, scalars, numpy arrays, tensors).

    Python floats become float32 and ints int64 unless ``dtype`` says otherwise.

    >>> import ember as em
    >>> em.tensor([[1, 2], [3, 4]]).dtype
    ember.int64
    >>> em.tensor([0.5, 1.5], dtype=em.float64).tolist()
    [0.5, 1.5]
    """
    if is_tensor(data):
        dev = data._device if device is None else device_arg(device)
        out = data.detach().to(dev.without_autodiff() if not dev.autodiff_enabled else dev)
        out = out if dtype is None else out.astype(dtype)
        out = make_tensor(out._data, out._shape, out._dtype, dev)
        return _finish(out, requires_grad)
    dev = device_arg(device)
    arr, dt = _infer(data)  # checks the data (ragged, strings, None...) whatever the dtype
    if dtype is not None:
        dt = as_dtype(dtype)
        if not isinstance(data, (np.ndarray, np.generic)) and arr.dtype.kind == "f" and dt.kind in "iu":
            # Python ints beyond int64 (2**63 + 1 beside a 0) make numpy infer float64: convert
            # them straight into the integer dtype instead, so no digit is lost
            try:
                arr = np.asarray(data, dtype=dt.numpy)
            except (TypeError, ValueError, OverflowError):
                pass  # leave it to the cast below, which says what does not fit
    return _finish(_from_host(arr, dt, dev, "tensor"), requires_grad)


def asarray(obj: Any, dtype: Any = None, device: Any = None, copy: bool | None = None) -> Tensor:
    """Like :func:`tensor`, but returns ``obj`` itself when it already fits (Array API)."""
    if is_tensor(obj):
        out = obj
        if device is not None:
            out = out.to(device_arg(device))
        if dtype is not None and as_dtype(dtype) is not out._dtype:
            out = out.astype(dtype)
        if copy and out is obj:
            out = out.clone()
        return out
    return tensor(obj, dtype=dtype, device=device)


def from_numpy(array: np.ndarray, device: Any = None) -> Tensor:
    """A tensor with a copy of a numpy array's values, keeping its dtype."""
    if not isinstance(array, np.ndarray):
        raise ArgumentTypeError(f"from_numpy: expected a numpy.ndarray, got {type(array).__name__}")
    return tensor(array, device=device)


def from_dlpack(obj: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """A tensor from any object with ``__dlpack__`` (numpy, CuPy, PyTorch, another ember tensor).

    The values are copied into the device's own memory, as ``copy=None`` allows; ``copy=False``
    (never copy) is refused unless ``obj`` is already an ember tensor on ``device``.
    """
    if is_tensor(obj):
        out = obj if device is None else obj.to(device_arg(device))
        if copy is False and out is not obj:
            raise InvalidArgumentError(
                f"from_dlpack: copy=False, but moving the tensor to {device} copies it; pass copy=None"
            )
        return out.clone() if copy and out is obj else out
    if not hasattr(obj, "__dlpack__"):
        raise ArgumentTypeError(f"from_dlpack: {type(obj).__name__} has no __dlpack__ method")
    if copy is False:
        raise InvalidArgumentError(
            f"from_dlpack: copy=False asks to share {type(obj).__name__}'s memory, but ember keeps its own "
            f"copy of data from other libraries; pass copy=None or copy=True"
        )
    return dispatch.from_dlpack(device_arg(device), obj)


def _fill_dtype(value: Any) -> DType:
    if isinstance(value, bool):
        return bool_
    if isinstance(value, int):
        return default_int()
    if isinstance(value, float):
        return default_float()
    if isinstance(value, complex):
        return default_complex()
    raise ArgumentTypeError(
        f"full: fill_value must be a bool, int, float or complex (or a 0-d tensor), got {type(value).__name__}"
    )


def full(shape: Any, fill_value: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value``."""
    return _full(shape, fill_value, dtype, device, requires_grad, "full")


def _full(shape: Any, fill_value: Any, dtype: Any, device: Any, requires_grad: bool, op: str) -> Tensor:
    shp = as_shape(shape, "shape", op)
    if is_tensor(fill_value):
        fill_value = fill_value.item()
    if isinstance(fill_value, np.generic):
        fill_value = fill_value.item()
    if isinstance(fill_value, (str, bytes)) or not isinstance(fill_value, (bool, int, float, complex)):
        raise ArgumentTypeError(
            f"{op}: fill_value must be a bool, int, float or complex (or a 0-d tensor), got {type(fill_value).__name__}"
        )
    dt = _fill_dtype(fill_value) if dtype is None else as_dtype(dtype)
    dev = device_arg(device)
    check_dtype(dev, dt, "full")
    if isinstance(fill_value, complex) and dt.kind != "c":
        raise DTypeError(f"{op}: fill_value {fill_value!r} is complex but dtype is {dt}; use a complex dtype")
    if dt.kind == "c":
        value: Any = complex(fill_value)
    elif dt.kind == "f":
        value = float(fill_value)
    elif dt.kind == "b":
        value = bool(fill_value)
    else:
        if isinstance(fill_value, float) and not float(fill_value).is_integer():
            raise DTypeError(f"full: fill_value {fill_value!r} is not an integer but dtype is {dt}")
        value = int(fill_value)
    out = create(FULL, dev, (), {"shape": shp, "value": value, "dtype": dt}, shp, dt)
    return _finish(out, requires_grad)


def zeros(shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros (float32 unless ``dtype`` says otherwise)."""
    dt = default_float() if dtype is None else dtype
    return _full(shape, 0, dt, device, requires_grad, "zeros")


def ones(shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones (float32 unless ``dtype`` says otherwise)."""
    dt = default_float() if dtype is None else dtype
    return _full(shape, 1, dt, device, requires_grad, "ones")


def empty(shape: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor whose values are unspecified (ember fills it with zeros)."""
    return _full(shape, 0, default_float() if dtype is None else dtype, device, requires_grad, "empty")


def _like(x: Tensor, dtype: Any, device: Any, op: str = "zeros_like") -> tuple[DType, Device]:
    if not is_tensor(x):
        raise ArgumentTypeError(
            f"{op}: x must be an ember Tensor, got {type(x).__name__}; for an array use em.asarray(x) first"
        )
    return (x._dtype if dtype is None else as_dtype(dtype)), (x._device if device is None else device_arg(device))


def full_like(x: Tensor, fill_value: Any, dtype: Any = None, device: Any = None) -> Tensor:
    dt, dev = _like(x, dtype, device, "full_like")
    return full(x._shape, fill_value, dtype=dt, device=dev)


def zeros_like(x: Tensor, dtype: Any = None, device: Any = None) -> Tensor:
    dt, dev = _like(x, dtype, device, "zeros_like")
    return full(x._shape, 0, dtype=dt, device=dev)


def ones_like(x: Tensor, dtype: Any = None, device: Any = None) -> Tensor:
    dt, dev = _like(x, dtype, device, "ones_like")
    return full(x._shape, 1, dtype=dt, device=dev)


def empty_like(x: Tensor, dtype: Any = None, device: Any = None) -> Tensor:
    return zeros_like(x, dtype=dtype, device=device)


def arange(start: Any, stop: Any = None, step: Any = 1, dtype: Any = None, device: Any = None) -> Tensor:
    """Values ``start, start + step, ...`` below ``stop`` (Array API semantics)."""
    if stop is None:
        start, stop = 0, start
    for name, v in (("start", start), ("stop", stop), ("step", step)):
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise ArgumentTypeError(f"arange: {name} must be an int or float, got {v!r}")
    if step == 0:
        raise InvalidArgumentError("arange: step must not be zero")
    size = max(0, math.ceil((stop - start) / step))
    if dtype is None:
        dt = default_float() if any(isinstance(v, float) for v in (start, stop, step)) else default_int()
    else:
        dt = as_dtype(dtype)
    dev = device_arg(device)
    check_dtype(dev, dt, "arange")
    if dt.kind in "iu":
        start, step = int(start), int(step)
    else:
        start, step = float(start), float(step)
    params = {"start": start, "step": step, "size": size, "dtype": dt}
    return create(ARANGE, dev, (), params, (size,), dt)


def linspace(
    start: float, stop: float, num: int, dtype: Any = None, device: Any = None, endpoint: bool = True
) -> Tensor:
    """``num`` evenly spaced values from ``start`` to ``stop``."""
    if not isinstance(num, int) or num < 0:
        raise InvalidArgumentError(f"linspace: num must be a non-negative int, got {num!r}")
    dt = default_float() if dtype is None else as_dtype(dtype)
    if dt.kind != "f":
        raise DTypeError(f"linspace: dtype must be floating-point, got {dt}")
    div = (num - 1) if endpoint else num
    step = (stop - start) / div if div > 0 else 0.0
    idx = arange(num, dtype=dt, device=device)
    out = idx * float(step) + float(start)
    if endpoint and num > 1:
        out = _set_last(out, float(stop))
    return out


def _set_last(x: Tensor, value: float) -> Tensor:
    n = x._shape[0]
    last = arange(n, device=x._device) == n - 1
    fill = full((), value, dtype=x._dtype, device=x._device)
    return apply(OPS["where"], (last, fill, x), {}, x._shape, x._dtype)


def eye(n_rows: int, n_cols: int | None = None, k: int = 0, dtype: Any = None, device: Any = None) -> Tensor:
    """A 2-D tensor with ones on diagonal ``k`` and zeros elsewhere."""
    if n_cols is None:
        n_cols = n_rows
    n_rows, n_cols = as_int(n_rows, "eye", "n_rows"), as_int(n_cols, "eye", "n_cols")
    k = as_int(k, "eye", "k")
    if n_rows < 0 or n_cols < 0:
        raise ShapeError(f"eye: sizes must be >= 0, got {n_rows}x{n_cols}")
    dt = default_float() if dtype is None else as_dtype(dtype)
    k = max(-n_rows, min(k, n_cols))  # a diagonal outside the matrix: all zeros (and k fits int64)
    rows = arange(n_rows, device=device).reshape((n_rows, 1))
    cols = arange(n_cols, device=device).reshape((1, n_cols))
    return (rows + k == cols).astype(dt)


def _convert(obj: Any, like: Tensor | None) -> Tensor:
    """Data that meets a tensor in an op becomes a tensor on that tensor's device."""
    return asarray(obj, device=None if like is None else like._device)


dispatch.set_converter(_convert)

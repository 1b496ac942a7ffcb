"""Tensor: one class for every device. It holds a backend handle plus shape, dtype, device.

Methods are thin forwards to the functions in :mod:`ember.ops`; the functions are the
definitions. Tensors are values: ops never change their inputs. ``x[i] = v`` rebinds ``x``
to a new handle, so other tensors made from ``x`` before keep their values.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from . import creation, dispatch
from .autodiff.api import backward
from .device import Device
from .dispatch import binary, make_tensor, set_tensor_class
from .dtypes import DType
from .errors import ArgumentTypeError, AutodiffError, InvalidArgumentError
from .lazy.jit import set_grad
from .ops.elementwise import (
    ADD,
    DIV,
    MUL,
    SUB,
    abs,
    acos,
    acosh,
    add,
    asin,
    asinh,
    atan,
    atanh,
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    ceil,
    clip,
    cos,
    cosh,
    divide,
    equal,
    erf,
    exp,
    exp2,
    expm1,
    floor,
    floor_divide,
    greater,
    greater_equal,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    log,
    log1p,
    log2,
    log10,
    logical_not,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    positive,
    pow,
    reciprocal,
    remainder,
    round,
    rsqrt,
    sign,
    sin,
    sinh,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    trunc,
    where,
)
from .ops.indexing import getitem, scatter_add, setitem, take, take_along_axis
from .ops.linalg import argsort, matmul, matrix_transpose, sort, topk, vector_norm
from .ops.movement import (
    broadcast_to,
    chunk,
    expand_dims,
    flatten,
    flip,
    moveaxis,
    permute_dims,
    repeat,
    reshape,
    roll,
    split,
    squeeze,
    swapaxes,
    tile,
    tril,
    triu,
)
from .ops.nn import gelu, log_softmax, relu, sigmoid, silu, softmax, softplus
from .ops.reduction import (
    all,
    any,
    argmax,
    argmin,
    cumulative_sum,
    logsumexp,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
)
from .transfer import astype, clone, copy_, to

__all__ = ["Tensor", "make_tensor"]

#: the Array API revisions ``__array_namespace__(api_version=...)`` accepts (ember follows the last)
_API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12", "2025.12")

#: Python numbers a reflected ``+``/``*`` takes as the right operand (``2 * x`` is ``x * 2``)
_NUMBERS = frozenset((int, float))


class Tensor:
    """An n-dimensional array on a device. Make one with ``em.tensor`` or ``em.zeros``...

    >>> import ember as em
    >>> x = em.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> (x @ x).sum().item()
    54.0
    """

    __slots__ = ("_data", "_shape", "_dtype", "_device", "_node", "_rg", "_grad", "__weakref__")
    __array_priority__ = 1000  # numpy defers to Tensor's reflected operators

    _data: Any
    _shape: tuple[int, ...]
    _dtype: DType
    _device: Device
    _node: Any
    _rg: bool
    _grad: Tensor | None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise ArgumentTypeError(
            "ember.Tensor cannot be subclassed: dispatch relies on its exact type. Wrap a tensor "
            "in your own class instead (nn.Parameter marks parameters that way)."
        )

    def __init__(self, data: Any, dtype: Any = None, device: Any = None, requires_grad: bool = False) -> None:
        src = creation.tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)
        for name in ("_data", "_shape", "_dtype", "_device", "_node", "_rg", "_grad"):
            setattr(self, name, getattr(src, name))

    # -- metadata ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Dimensions, a tuple of ints."""
        return self._shape

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def device(self) -> Device:
        return self._device

    @property
    def ndim(self) -> int:
        return len(self._shape)

    @property
    def size(self) -> int:
        """Number of elements."""
        n = 1
        for s in self._shape:
            n *= s
        return n

    def numel(self) -> int:
        return self.size

    def dim(self) -> int:
        return len(self._shape)

    @property
    def T(self) -> Tensor:
        """Transpose of a tensor with at most 2 dimensions."""
        if self.ndim > 2:
            raise InvalidArgumentError(
                f"T: defined for at most 2 dimensions (Array API); this tensor has "
                f"{self.ndim}. Use x.mT to transpose the last two axes or x.permute(...)."
            )
        return self.permute(tuple(reversed(range(self.ndim))))

    @property
    def mT(self) -> Tensor:
        """Transpose of the last two axes (matrix transpose, batched)."""
        return matrix_transpose(self)

    # -- autodiff ------------------------------------------------------------------------
    @property
    def requires_grad(self) -> bool:
        return self._rg

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.requires_grad_(value)

    def requires_grad_(self, value: bool = True) -> Tensor:
        """Mark this leaf as needing a gradient. Autodiff is a property of the device (Burn):
        the tensor must live on an autodiff device, e.g. ``Device.cpu().autodiff()``."""
        if not value:
            if self._node is not None:
                raise AutodiffError("requires_grad_(False) applies to leaves; use .detach() on results of ops")
            self._rg = False
            return self
        if self._dtype.kind not in "fc":
            raise AutodiffError(
                f"requires_grad_: only floating-point and complex tensors have gradients; this one is {self._dtype}"
            )
        dev = self._device
        if not dev.autodiff_enabled:
            plain = f"{dev.kind}:{dev.index}"
            raise AutodiffError(
                f"requires_grad_: the tensor lives on {plain}, which has autodiff off, so no graph would be "
                f"recorded. Autodiff is a property of the device: create the tensor on "
                f"Device({plain!r}).autodiff(), or move it there with x.to(x.device.autodiff())."
            )
        self._rg = True
        return self

    @property
    def grad(self) -> Tensor | None:
        """Gradient accumulated by ``backward()`` (leaves only)."""
        return self._grad

    @grad.setter
    def grad(self, value: Tensor | None) -> None:
        if value is not None and not isinstance(value, Tensor):
            raise ArgumentTypeError(f"Tensor.grad: grad must be a Tensor or None, got {type(value).__name__}")
        set_grad(self, value)

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self) -> str | None:
        """Name of the op that produced this tensor in the graph, if recorded."""
        return None if self._node is None else self._node.op.name

    def backward(
        self, grad: Tensor | None = None, *, retain_graph: bool | None = None, create_graph: bool = False
    ) -> None:
        """Accumulate gradients of this tensor into ``.grad`` of every leaf it depends on."""
        backward(self, grad, retain_graph=retain_graph, create_graph=create_graph)

    def detach(self) -> Tensor:
        """The same values, cut from the graph."""
        return make_tensor(self._data, self._shape, self._dtype, self._device)

    def _with_device(self, device: Device) -> Tensor:
        return make_tensor(self._data, self._shape, self._dtype, device)

    def realize(self) -> Tensor:
        """Compute this tensor now if the lazy layer deferred it (fusing devices); returns self."""
        return dispatch.realize(self)

    # -- conversion ----------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """Values as a numpy array (read-only when it shares memory with the tensor)."""
        return dispatch.to_host(self)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        arr = self.numpy()
        if dtype is not None:
            arr = arr.astype(dtype)
        return np.array(arr, copy=True) if copy else arr

    def __dlpack__(
        self, /, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: bool | None = None
    ) -> Any:
        """A DLPack capsule of this tensor's values (the Array API's keywords passed to the producer)."""
        obj = dispatch.to_dlpack(self, dl_device)  # a host copy when the CPU asks a device tensor
        kwargs = {
            k: v for k, v in (("max_version", max_version), ("dl_device", dl_device), ("copy", copy)) if v is not None
        }
        return obj.__dlpack__(stream=stream, **kwargs) if stream is not None else obj.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return dispatch.to_dlpack(self).__dlpack_device__()

    def tolist(self) -> Any:
        return self.numpy().tolist()

    def item(self) -> Any:
        """The single element as a Python scalar."""
        if self.size != 1:
            raise InvalidArgumentError(
                f"item: the tensor has {self.size} elements (shape {self._shape}); item() needs exactly one"
            )
        return self.numpy().reshape(()).item()

    def __bool__(self) -> bool:
        if self.size != 1:
            raise InvalidArgumentError(
                f"the truth value of a tensor with {self.size} elements is ambiguous; use .any() or .all()"
            )
        return bool(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __float__(self) -> float:
        return float(self.item())

    def __complex__(self) -> complex:
        return complex(self.item())

    def __index__(self) -> int:
        if not self._dtype.is_integer:
            raise ArgumentTypeError(f"only integer tensors can be used as an index, not {self._dtype}")
        return int(self.item())

    def __len__(self) -> int:
        if not self._shape:
            raise ArgumentTypeError("len(): a 0-d tensor has no length; use x.size for the element count")
        return self._shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        if not self._shape:
            raise ArgumentTypeError("iter(): a 0-d tensor cannot be iterated; use x.item() for its value")
        return (self[i] for i in range(self._shape[0]))

    def __array_namespace__(self, /, *, api_version: str | None = None) -> Any:
        """The module of the Array API functions that work on this tensor: ``ember`` itself."""
        if api_version is not None and api_version not in _API_VERSIONS:
            raise InvalidArgumentError(
                f"__array_namespace__: api_version={api_version!r} is not a revision ember follows; "
                f"use one of {_API_VERSIONS} or None"
            )
        return sys.modules[__package__]

    def to_device(self, device: Any, /, *, stream: Any = None) -> Tensor:
        """This tensor on ``device`` (Array API); ``stream`` must be None (ember orders work per device)."""
        if stream is not None:
            raise InvalidArgumentError("to_device: stream must be None; ember queues work in order on each device")
        return to(self, Device(device))

    def to(self, target: Any = None, dtype: Any = None) -> Tensor:
        """Move to a device and/or convert to a dtype: ``x.to("opencl")``, ``x.to(em.float16)``."""
        return to(self, target, dtype)

    def cpu(self) -> Tensor:
        return to(self, Device.cpu())

    def astype(self, dtype: Any, *, copy: bool = True, device: Any = None) -> Tensor:
        return astype(self, dtype, copy=copy, device=device)

    def float(self) -> Tensor:
        return astype(self, "float32")

    def double(self) -> Tensor:
        return astype(self, "float64")

    def half(self) -> Tensor:
        return astype(self, "float16")

    def long(self) -> Tensor:
        return astype(self, "int64")

    def int(self) -> Tensor:
        return astype(self, "int32")

    def bool(self) -> Tensor:
        return astype(self, "bool")

    def clone(self) -> Tensor:
        """A copy that records in the graph like any op."""
        return clone(self)

    def copy_(self, other: Any) -> Tensor:
        """Replace this tensor's values with ``other``'s (broadcast, cast), outside autodiff."""
        return copy_(self, other)

    def zero_(self) -> Tensor:
        return copy_(self, 0)

    def fill_(self, value: Any) -> Tensor:
        return copy_(self, value)

    def contiguous(self) -> Tensor:
        return self

    # -- printing ------------------------------------------------------------------------
    def __repr__(self) -> str:
        try:
            arr = self.numpy()
            body = np.array2string(
                np.asarray(arr, dtype=np.float32) if self._dtype.name == "bfloat16" else arr,
                separator=", ",
                prefix="tensor(",
                threshold=200,
                edgeitems=3,
            )
        except Exception as exc:  # printing must not raise
            body = f"<unreadable: {exc}>"
        extra = f", dtype={self._dtype}, device={self._device.kind}:{self._device.index}"
        if self._node is not None:
            extra += f", grad_fn={self._node.op.name}"
        elif self._rg:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    __hash__ = object.__hash__

    # -- operators -----------------------------------------------------------------------
    # the four arithmetic operators call dispatch's binary road themselves (a frame less per op, W1);
    # ``2 * x`` and ``2 + x`` go straight to ``x * 2`` and ``x + 2``, as binary would swap them
    def __add__(self, other: Any) -> Tensor:
        return binary(ADD, self, other)

    def __radd__(self, other: Any) -> Tensor:
        return binary(ADD, self, other) if type(other) in _NUMBERS else add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return binary(SUB, self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return subtract(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return binary(MUL, self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return binary(MUL, self, other) if type(other) in _NUMBERS else multiply(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return binary(DIV, self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return divide(other, self)

    def __floordiv__(self, other: Any) -> Tensor:
        return floor_divide(self, other)

    def __rfloordiv__(self, other: Any) -> Tensor:
        return floor_divide(other, self)

    def __mod__(self, other: Any) -> Tensor:
        return remainder(self, other)

    def __rmod__(self, other: Any) -> Tensor:
        return remainder(other, self)

    def __pow__(self, other: Any) -> Tensor:
        return pow(self, other)

    def __rpow__(self, other: Any) -> Tensor:
        return pow(other, self)

    def __matmul__(self, other: Any) -> Tensor:
        return matmul(self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return matmul(other, self)

    def __neg__(self) -> Tensor:
        return negative(self)

    def __pos__(self) -> Tensor:
        return positive(self)

    def __abs__(self) -> Tensor:
        return abs(self)

    def __invert__(self) -> Tensor:
        return bitwise_invert(self)

    def __and__(self, other: Any) -> Tensor:
        return bitwise_and(self, other)

    def __rand__(self, other: Any) -> Tensor:
        return bitwise_and(other, self)

    def __or__(self, other: Any) -> Tensor:
        return bitwise_or(self, other)

    def __ror__(self, other: Any) -> Tensor:
        return bitwise_or(other, self)

    def __xor__(self, other: Any) -> Tensor:
        return bitwise_xor(self, other)

    def __rxor__(self, other: Any) -> Tensor:
        return bitwise_xor(other, self)

    def __lshift__(self, other: Any) -> Tensor:
        return bitwise_left_shift(self, other)

    def __rshift__(self, other: Any) -> Tensor:
        return bitwise_right_shift(self, other)

    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return equal(self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return not_equal(self, other)

    def __lt__(self, other: Any) -> Tensor:
        return less(self, other)

    def __le__(self, other: Any) -> Tensor:
        return less_equal(self, other)

    def __gt__(self, other: Any) -> Tensor:
        return greater(self, other)

    def __ge__(self, other: Any) -> Tensor:
        return greater_equal(self, other)

    def __getitem__(self, key: Any) -> Tensor:
        return getitem(self, key)

    def __setitem__(self, key: Any, value: Any) -> None:
        setitem(self, key, value)

    # -- elementwise methods -------------------------------------------------------------
    def abs(self) -> Tensor:
        return abs(self)

    def neg(self) -> Tensor:
        return negative(self)

    def sign(self) -> Tensor:
        return sign(self)

    def exp(self) -> Tensor:
        return exp(self)

    def exp2(self) -> Tensor:
        return exp2(self)

    def expm1(self) -> Tensor:
        return expm1(self)

    def log(self) -> Tensor:
        return log(self)

    def log2(self) -> Tensor:
        return log2(self)

    def log10(self) -> Tensor:
        return log10(self)

    def log1p(self) -> Tensor:
        return log1p(self)

    def sqrt(self) -> Tensor:
        return sqrt(self)

    def rsqrt(self) -> Tensor:
        return rsqrt(self)

    def square(self) -> Tensor:
        return square(self)

    def sin(self) -> Tensor:
        return sin(self)

    def cos(self) -> Tensor:
        return cos(self)

    def tan(self) -> Tensor:
        return tan(self)

    def asin(self) -> Tensor:
        return asin(self)

    def acos(self) -> Tensor:
        return acos(self)

    def atan(self) -> Tensor:
        return atan(self)

    def sinh(self) -> Tensor:
        return sinh(self)

    def cosh(self) -> Tensor:
        return cosh(self)

    def tanh(self) -> Tensor:
        return tanh(self)

    def asinh(self) -> Tensor:
        return asinh(self)

    def acosh(self) -> Tensor:
        return acosh(self)

    def atanh(self) -> Tensor:
        return atanh(self)

    def erf(self) -> Tensor:
        return erf(self)

    def floor(self) -> Tensor:
        return floor(self)

    def ceil(self) -> Tensor:
        return ceil(self)

    def round(self) -> Tensor:
        return round(self)

    def trunc(self) -> Tensor:
        return trunc(self)

    def reciprocal(self) -> Tensor:
        return reciprocal(self)

    def isnan(self) -> Tensor:
        return isnan(self)

    def isinf(self) -> Tensor:
        return isinf(self)

    def isfinite(self) -> Tensor:
        return isfinite(self)

    def logical_not(self) -> Tensor:
        return logical_not(self)

    def pow(self, other: Any) -> Tensor:
        return pow(self, other)

    def maximum(self, other: Any) -> Tensor:
        return maximum(self, other)

    def minimum(self, other: Any) -> Tensor:
        return minimum(self, other)

    def clip(self, min: Any = None, max: Any = None) -> Tensor:
        return clip(self, min, max)

    clamp = clip

    def relu(self) -> Tensor:
        return relu(self)

    def gelu(self, approximate: str = "none") -> Tensor:
        return gelu(self, approximate=approximate)

    def silu(self) -> Tensor:
        return silu(self)

    def sigmoid(self) -> Tensor:
        return sigmoid(self)

    def softplus(self) -> Tensor:
        return softplus(self)

    def softmax(self, axis: int = -1) -> Tensor:
        return softmax(self, axis=axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        return log_softmax(self, axis=axis)

    # -- reductions ----------------------------------------------------------------------
    def sum(self, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
        return sum(self, axis=axis, keepdims=keepdims, dtype=dtype)

    def prod(self, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
        return prod(self, axis=axis, keepdims=keepdims, dtype=dtype)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return mean(self, axis=axis, keepdims=keepdims)

    def var(self, axis: Any = None, keepdims: bool = False, correction: float = 0.0) -> Tensor:
        return var(self, axis=axis, keepdims=keepdims, correction=correction)

    def std(self, axis: Any = None, keepdims: bool = False, correction: float = 0.0) -> Tensor:
        return std(self, axis=axis, keepdims=keepdims, correction=correction)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return max(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return min(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return argmin(self, axis=axis, keepdims=keepdims)

    def any(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return any(self, axis=axis, keepdims=keepdims)

    def all(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return all(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis: int | None = None) -> Tensor:
        return cumulative_sum(self, axis=axis)

    def logsumexp(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return logsumexp(self, axis=axis, keepdims=keepdims)

    def norm(self, ord: Any = 2, axis: Any = None, keepdims: bool = False) -> Tensor:
        return vector_norm(self, axis=axis, keepdims=keepdims, ord=ord)

    # -- shape and movement --------------------------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        return reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)

    view = reshape

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Tensor:
        return flatten(self, start_axis, end_axis)

    def permute(self, *axes: Any) -> Tensor:
        return permute_dims(self, axes[0] if len(axes) == 1 and not isinstance(axes[0], int) else axes)

    def transpose(self, axis0: int = -2, axis1: int = -1) -> Tensor:
        return swapaxes(self, axis0, axis1)

    def swapaxes(self, axis0: int, axis1: int) -> Tensor:
        return swapaxes(self, axis0, axis1)

    def moveaxis(self, source: Any, destination: Any) -> Tensor:
        return moveaxis(self, source, destination)

    def squeeze(self, axis: Any = None) -> Tensor:
        return squeeze(self, axis)

    def unsqueeze(self, axis: int) -> Tensor:
        return expand_dims(self, axis)

    def expand(self, *shape: Any) -> Tensor:
        return broadcast_to(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)

    def broadcast_to(self, shape: Sequence[int]) -> Tensor:
        return broadcast_to(self, shape)

    def flip(self, axis: Any = None) -> Tensor:
        return flip(self, axis)

    def roll(self, shift: Any, axis: Any = None) -> Tensor:
        return roll(self, shift, axis)

    def repeat(self, repeats: Any, axis: int | None = None) -> Tensor:
        return repeat(self, repeats, axis)

    def tile(self, reps: Sequence[int]) -> Tensor:
        return tile(self, reps)

    def split(self, indices_or_sections: Any, axis: int = 0) -> list[Tensor]:
        return split(self, indices_or_sections, axis)

    def chunk(self, chunks: int, axis: int = 0) -> list[Tensor]:
        return chunk(self, chunks, axis)

    def tril(self, k: int = 0) -> Tensor:
        return tril(self, k)

    def triu(self, k: int = 0) -> Tensor:
        return triu(self, k)

    # -- indexing, linear algebra, sorting -----------------------------------------------
    def gather(self, index: Tensor, axis: int) -> Tensor:
        return take_along_axis(self, index, axis)

    def take(self, indices: Any, axis: int | None = None) -> Tensor:
        return take(self, indices, axis)

    def scatter_add(self, index: Tensor, values: Tensor, axis: int) -> Tensor:
        return scatter_add(self, index, values, axis)

    def masked_fill(self, mask: Tensor, value: Any) -> Tensor:
        return where(mask, value, self)

    def matmul(self, other: Any) -> Tensor:
        return matmul(self, other)

    def sort(self, axis: int = -1, descending: bool = False) -> Tensor:
        return sort(self, axis=axis, descending=descending)

    def argsort(self, axis: int = -1, descending: bool = False) -> Tensor:
        return argsort(self, axis=axis, descending=descending)

    def topk(self, k: int, axis: int = -1, largest: bool = True) -> tuple[Tensor, Tensor]:
        return topk(self, k, axis=axis, largest=largest)


set_tensor_class(Tensor)

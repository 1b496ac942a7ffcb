"""Tensor: one class for every device. It holds a backend handle plus shape, dtype, device.

This module holds the class's state, construction, metadata and autodiff entry points; the
method groups live in :mod:`ember.tensor_methods`, one module each (operators, elementwise,
reductions, shape, indexing, conversion, printing), and ``Tensor`` inherits them. Methods are
thin forwards to the functions in :mod:`ember.ops`; the functions are the definitions. Tensors
are values: ops never change their inputs. ``x[i] = v`` rebinds ``x`` to a new handle, so other
tensors made from ``x`` before keep their values.
"""

from __future__ import annotations

from typing import Any

from . import creation, dispatch
from .autodiff.api import backward
from .device import Device
from .dispatch import make_tensor, set_tensor_class
from .dtypes import DType
from .errors import ArgumentTypeError, AutodiffError, InvalidArgumentError
from .lazy.jit import _ACTIVE as _CAPTURES
from .ops.linalg import matrix_transpose
from .tensor_methods import (
    ConversionMethods,
    ElementwiseMethods,
    IndexingMethods,
    Operators,
    Printing,
    ReductionMethods,
    ShapeMethods,
)

__all__ = ["Tensor", "make_tensor"]


class Tensor(
    Operators, ElementwiseMethods, ReductionMethods, ShapeMethods, IndexingMethods, ConversionMethods, Printing
):
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
        if _CAPTURES:  # set_grad, inline: a running em.jit capture sees the assignment
            _CAPTURES[0].assigned(self, "_grad")
        self._grad = value

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


set_tensor_class(Tensor)

"""Tensor's conversions: to numpy, DLPack and Python scalars (``x.numpy()``, ``float(x)``...), the
Array API namespace, and to other devices and dtypes (``x.to(...)``, ``x.astype(...)``, ``x.clone()``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dispatch
from ..device import Device
from ..errors import ArgumentTypeError, InvalidArgumentError
from ..transfer import astype, clone, copy_, to

#: the Array API revisions ``__array_namespace__(api_version=...)`` accepts (ember follows the last)
_API_VERSIONS = ("2021.12", "2022.12", "2023.12", "2024.12", "2025.12")

#: the package ``__array_namespace__`` returns: ``ember`` itself
_NAMESPACE = __name__.partition(".")[0]

if TYPE_CHECKING:  # annotations only: ember.tensor builds its class from this module (.importlinter)
    from ..tensor import Tensor

__all__ = ["ConversionMethods"]


class ConversionMethods:
    """Host, DLPack and Python-scalar conversion; device and dtype conversion."""

    __slots__ = ()

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
        return sys.modules[_NAMESPACE]

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

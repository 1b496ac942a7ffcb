"""The Array API inspection API: ``ember.__array_namespace_info__()`` and its answers.

Libraries written against the standard (scikit-learn's ``array_api_dispatch``, SciPy,
array-api-extra) ask this object which devices exist, which dtypes a device holds and what
the namespace can do.
"""

from __future__ import annotations

from typing import Any

from .device import Device, device_arg
from .dtypes import EVERY_DTYPE, DType, default_complex, default_float, default_int, isdtype
from .errors import InvalidArgumentError

__all__ = ["__array_api_version__", "__array_namespace_info__", "Info"]

#: the revision of the Python Array API standard ember's namespace follows
__array_api_version__ = "2025.12"

#: dtype kinds ``Info.dtypes(kind=...)`` accepts, as in ``isdtype``
_KINDS = ("bool", "signed integer", "unsigned integer", "integral", "real floating", "complex floating", "numeric")


#: ember dtypes the standard does not define
_NOT_STANDARD = frozenset(("float16", "bfloat16"))


class Info:
    """What ``ember.__array_namespace_info__()`` returns (the standard's inspection object)."""

    def capabilities(self) -> dict[str, Any]:
        """Optional features: boolean indexing and data-dependent shapes (``nonzero``, ``unique_*``)."""
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": None}

    def default_device(self) -> Device:
        """The device arrays are made on without ``device=`` (``EMBER_DEVICE``, else cpu)."""
        return Device.default()

    def devices(self) -> tuple[Device, ...]:
        """Every device of every backend that loads on this machine (a tuple, as the standard says)."""
        return tuple(Device.available())

    def default_dtypes(self, *, device: Any = None) -> dict[str, DType]:
        """The default dtypes of each kind (the same on every device)."""
        device_arg(device)  # a bad device spec is an error here too
        return {
            "real floating": default_float(),
            "complex floating": default_complex(),
            "integral": default_int(),
            "indexing": default_int(),
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, DType]:
        """The dtypes ``device`` holds (the default device when None), by name, of ``kind``.

        ``kind`` is a kind name as :func:`ember.isdtype` takes (``"real floating"``...), a tuple of
        them, or None for every dtype; float16 and bfloat16 are not in the standard and are left out.
        """
        dev = device_arg(device)
        if kind is not None:
            for k in kind if isinstance(kind, tuple) else (kind,):
                if not isinstance(k, str) or k not in _KINDS:
                    raise InvalidArgumentError(
                        f"__array_namespace_info__().dtypes: kind={k!r} is not a dtype kind; expected one of {_KINDS}"
                    )
        held = dev.backend.supported_dtypes
        return {
            dt.name: dt
            for dt in EVERY_DTYPE
            if dt in held and dt.name not in _NOT_STANDARD and (kind is None or isdtype(dt, kind))
        }


def __array_namespace_info__() -> Info:
    """The inspection object of ember's namespace (Array API standard)."""
    return Info()

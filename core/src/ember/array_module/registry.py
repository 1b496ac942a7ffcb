"""The numpy-compatible libraries the shared kernels know, keyed by array type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

__all__ = ["ArrayModule", "register", "module_of", "array_meta"]


@dataclass(frozen=True)
class ArrayModule:
    """One numpy-compatible library: its namespace ``xp``, array type and special functions."""

    xp: ModuleType
    ndarray: type
    #: the error function and the logistic sigmoid (scipy.special's / cupyx.scipy.special's)
    erf: Callable[[Any], Any]
    expit: Callable[[Any], Any]
    #: keyword arguments that make ``xp.sort`` / ``xp.argsort`` stable
    stable_sort: dict[str, Any] = field(default_factory=dict)


_MODULES: dict[type, ArrayModule] = {}


def register(module: ArrayModule) -> ArrayModule:
    """Make ``module`` the one the shared kernels use for arrays of ``module.ndarray``."""
    _MODULES[module.ndarray] = module
    return module


def module_of(a: Any) -> ArrayModule:
    """The registered library of array ``a``."""
    return _MODULES[type(a)]


#: numpy dtype -> ember dtype name: ``dtype.name`` is computed in Python on every call, and the
#: lazy layer asks for it once per operand of every fused region
_DTYPE_NAMES: dict[Any, str] = {}


def array_meta(a: Any) -> tuple[tuple[int, ...], str]:
    """``(shape, ember dtype name)`` of a numpy-compatible array (a backend's ``handle_meta``)."""
    dt = a.dtype
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = "bool" if dt.kind == "b" else dt.name
    return a.shape, name

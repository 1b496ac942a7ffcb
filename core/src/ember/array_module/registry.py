"""The numpy-compatible libraries the shared kernels know, keyed by array type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

__all__ = ["ArrayModule", "register", "module_of"]


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

"""Native kernels over a numpy-compatible array module, shared by the backends built on one.

The CPU backend computes with numpy and the CUDA backend with CuPy; both libraries speak the
same array API, so one set of kernels serves both. A backend describes its library once as an
:class:`ArrayModule` (the module, its array type and the special functions numpy lacks),
:func:`register` s it, and takes :func:`kernels` as the bulk of its native table; it keeps only
what is specific to its device (creation, transfer, random bits, memory, fast paths).

Handles are the library's arrays and are never written after creation. 16-bit floats compute
the heavy ops in float32 and round back, as PyTorch does on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import conv, nn, primitives
from .registry import ArrayModule, array_meta, module_of, register

__all__ = ["ArrayModule", "register", "module_of", "array_meta", "kernels"]


def kernels(module: ArrayModule) -> dict[str, Callable[..., Any]]:
    """op name -> native kernel for every op the shared kernels implement over ``module``."""
    register(module)
    return {**primitives.primitives(module), **nn.KERNELS, **conv.KERNELS}

"""CUDA and CuPy failures as ember errors that name what ran and what to try."""

from __future__ import annotations

from typing import Any

from ember.errors import EmberError

__all__ = ["CudaError", "KernelLaunchError", "DeviceMemoryError", "human", "describe_args"]


class CudaError(EmberError, RuntimeError):
    """The CUDA runtime or driver reported an error while ember ran an op."""


class KernelLaunchError(CudaError):
    """A kernel failed to compile or launch; the message names the op and its operands."""


class DeviceMemoryError(EmberError, MemoryError):
    """The GPU ran out of memory."""


def human(n: int) -> str:
    """Bytes in the largest unit that keeps the number above 1."""
    value = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} bytes" if unit == "bytes" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"  # pragma: no cover - the loop returns first


def describe_args(args: tuple[Any, ...], params: dict[str, Any]) -> str:
    """``float32[64, 3], int64[64]`` for the operands, then the parameters, for an error message."""
    parts = []
    for a in args:
        shape = getattr(a, "shape", None)
        if shape is not None:
            parts.append(f"{getattr(a.dtype, 'name', a.dtype)}{list(shape)}")
        else:
            parts.append(repr(a))
    parts += [f"{k}={v!r}" for k, v in params.items()]
    return ", ".join(parts)

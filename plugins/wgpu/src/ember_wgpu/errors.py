"""ember errors for what WebGPU reports: rejected kernels, invalid commands, limits, lost devices.

Each subclasses :class:`ember.errors.EmberError` and the built-in it resembles, and its message
says which kernel or resource, what wgpu said, and what to try.
"""

from __future__ import annotations

from ember.errors import EmberError

__all__ = [
    "WgpuError",
    "WgpuKernelError",
    "WgpuValidationError",
    "WgpuLimitError",
    "WgpuOutOfMemoryError",
    "WgpuDeviceLostError",
]


class WgpuError(EmberError, RuntimeError):
    """Something the WebGPU device or driver refused."""


class WgpuKernelError(WgpuError):
    """A generated WGSL kernel failed to compile or its pipeline failed to build."""


class WgpuValidationError(WgpuError):
    """wgpu's validation rejected a batch of recorded commands."""


class WgpuLimitError(EmberError, ValueError):
    """A tensor or dispatch exceeds one of the adapter's limits."""


class WgpuOutOfMemoryError(EmberError, MemoryError):
    """The device could not allocate a buffer, even after the pool released its free buffers."""


class WgpuDeviceLostError(WgpuError):
    """The device was lost (driver reset, crash or timeout); its tensors are gone."""

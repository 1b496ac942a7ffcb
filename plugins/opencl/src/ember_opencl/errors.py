"""Driver errors turned into ember errors that say what happened and what to try.

Every failure the OpenCL driver reports reaches the user as a subclass of
:class:`ember.errors.EmberError` (and of the matching built-in): a kernel that does not
build, device memory running out, a device index that does not exist, no platform at all.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ember.errors import DeviceUnavailableError, EmberError

__all__ = [
    "OpenCLError",
    "KernelBuildError",
    "DeviceMemoryError",
    "NO_PLATFORM_HINT",
    "no_platform_error",
    "translate",
    "driver_errors",
]

NO_PLATFORM_HINT = (
    "on a machine without a GPU install PoCL (apt-get install pocl-opencl-icd ocl-icd-libopencl1); "
    "with a GPU, install its vendor's OpenCL driver (an .icd file in /etc/OpenCL/vendors, or a "
    "folder named by OCL_ICD_VENDORS)"
)

#: OpenCL status codes that mean "the device ran out of something"
_OUT_OF_MEMORY = {-4: "MEM_OBJECT_ALLOCATION_FAILURE", -5: "OUT_OF_RESOURCES", -6: "OUT_OF_HOST_MEMORY"}


class OpenCLError(EmberError, RuntimeError):
    """The OpenCL driver reported an error while ember ran an op."""


class KernelBuildError(OpenCLError):
    """A generated OpenCL C kernel did not compile on this device."""


class DeviceMemoryError(EmberError, MemoryError):
    """The OpenCL device ran out of memory or resources."""


def no_platform_error(detail: str = "") -> DeviceUnavailableError:
    """The error for a machine where the ICD loader finds no OpenCL platform."""
    extra = f" ({detail})" if detail else ""
    return DeviceUnavailableError(f"no OpenCL platform found{extra}: {NO_PLATFORM_HINT}. `ember doctor` explains more.")


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "code", None)
    if callable(code):  # pyopencl's Error.code is a method
        try:
            code = code()
        except Exception:
            code = None
    return code if isinstance(code, int) else None


def translate(exc: BaseException, what: str, device: str, stats: dict[str, Any] | None = None) -> Exception:
    """An ember error for the pyopencl exception ``exc`` raised while doing ``what``."""
    code = _code(exc)
    text = str(exc).strip() or type(exc).__name__
    if code in _OUT_OF_MEMORY or "MEM_OBJECT_ALLOCATION_FAILURE" in text or "OUT_OF_RESOURCES" in text:
        name = _OUT_OF_MEMORY.get(code or 0, "out of memory")
        used = ""
        if stats:
            used = (
                f" ember holds {stats.get('in_use_bytes', 0) / 2**20:.1f} MiB in live tensors and "
                f"{stats.get('cached_bytes', 0) / 2**20:.1f} MiB in its buffer pool."
            )
        return DeviceMemoryError(
            f"{device}: the device ran out of memory or resources ({name}) while {what}.{used} "
            f"Try a smaller batch or model, free tensors you no longer need (del x), or "
            f"release the pool with device.backend.empty_cache()."
        )
    return OpenCLError(f"{device}: OpenCL error while {what}: {text}")


@contextmanager
def driver_errors(what: str, device: str, stats: Any = None) -> Iterator[None]:
    """Turn pyopencl errors raised inside the block into ember errors."""
    try:
        yield
    except EmberError:
        raise
    except Exception as exc:
        if type(exc).__module__.split(".")[0] != "pyopencl" and not _code(exc):
            raise
        raise translate(exc, what, device, stats() if callable(stats) else stats) from exc

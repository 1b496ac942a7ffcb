"""Finding CuPy, the driver and the GPUs, and saying which one is missing.

CuPy is imported here and nowhere earlier. Its compiled kernels are cached on disk by CuPy
itself (NVRTC output, keyed by source and architecture); unless ``CUPY_CACHE_DIR`` is set, that
cache lives under ember's cache directory so that ``EMBER_CACHE_DIR`` moves it and
``EMBER_KERNEL_CACHE=0`` keeps it in memory only, as for the other backends.
"""

from __future__ import annotations

import os
from functools import lru_cache
from types import ModuleType
from typing import Any

from ember import config
from ember.errors import MissingDependencyError

__all__ = ["cupy", "device_count", "why_unavailable", "describe", "INSTALL_HINT", "kernel_cache_dir"]

INSTALL_HINT = (
    'install CuPy for your CUDA version: pip install "ember[cuda13]" (CUDA 13) or "ember[cuda12]" '
    "(CUDA 12); `nvidia-smi` shows the CUDA version the driver supports"
)


def kernel_cache_dir() -> str:
    """Where CuPy keeps compiled kernels for ember (CUPY_CACHE_DIR wins when set)."""
    return os.environ.get("CUPY_CACHE_DIR") or str(config.cache_dir() / "cuda" / "cupy")


@lru_cache(maxsize=1)
def _import() -> tuple[ModuleType | None, str]:
    if "CUPY_CACHE_DIR" not in os.environ:
        os.environ["CUPY_CACHE_DIR"] = kernel_cache_dir()
    if not config.kernel_cache_enabled() and "CUPY_CACHE_IN_MEMORY" not in os.environ:
        os.environ["CUPY_CACHE_IN_MEMORY"] = "1"
    try:
        import cupy
    except ImportError as exc:
        return None, f"CuPy is not installed ({exc}): {INSTALL_HINT}"
    except Exception as exc:  # a broken CuPy install raises more than ImportError
        return None, f"CuPy failed to import ({type(exc).__name__}: {exc}): reinstall it; {INSTALL_HINT}"
    return cupy, ""


def cupy() -> ModuleType:
    """The CuPy module, or a MissingDependencyError that says what to install."""
    module, reason = _import()
    if module is None:
        raise MissingDependencyError(f"the cuda backend needs CuPy: {reason}")
    return module


@lru_cache(maxsize=1)
def _probe() -> tuple[int, str]:
    module, reason = _import()
    if module is None:
        return 0, reason
    try:
        n = module.cuda.runtime.getDeviceCount()
    except Exception as exc:
        text = str(exc)
        if "INSUFFICIENT_DRIVER" in text or "driver version is insufficient" in text:
            return 0, (
                f"the NVIDIA driver is older than CuPy's CUDA runtime needs ({text}): update the driver, "
                f"or install the CuPy for an older CUDA ({INSTALL_HINT})"
            )
        if "NO_DEVICE" in text or "no CUDA-capable device" in text:
            return 0, f"no NVIDIA GPU is visible ({text}); check `nvidia-smi` and CUDA_VISIBLE_DEVICES"
        return 0, (
            f"the CUDA driver could not be used ({type(exc).__name__}: {text}): install the NVIDIA driver "
            "(`nvidia-smi` should list the GPU)"
        )
    if n == 0:
        return 0, "the CUDA driver found no GPU; check `nvidia-smi` and CUDA_VISIBLE_DEVICES"
    return n, ""


def device_count() -> int:
    """GPUs CUDA can use here; 0 when CuPy, the driver or a GPU is missing."""
    return _probe()[0]


def why_unavailable() -> str:
    """Why :func:`device_count` is 0 (CuPy, driver or GPU missing), or ''."""
    return _probe()[1]


def describe(index: int) -> dict[str, Any]:
    """Name, memory and features of GPU ``index``."""
    cp = cupy()
    props = cp.cuda.runtime.getDeviceProperties(index)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    major, minor = props["major"], props["minor"]
    return {
        "name": name,
        "vendor": "NVIDIA",
        "memory_bytes": int(props["totalGlobalMem"]),
        "compute_capability": f"{major}.{minor}",
        "multiprocessors": int(props["multiProcessorCount"]),
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "cuda_driver": cp.cuda.runtime.driverGetVersion(),
        "cupy": cp.__version__,
        "fp16": major >= 6,
        "bf16": major >= 8,
        "fp64": True,
    }

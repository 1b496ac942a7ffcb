"""Every setting ember reads from the environment, in one place.

| variable                  | meaning                                                  | default        |
|---------------------------|----------------------------------------------------------|----------------|
| EMBER_DEVICE              | the device ``Device.default()`` returns                  | ``cpu``        |
| EMBER_PLUGINS             | comma-separated allow-list of plugin entry-point names   | all installed  |
| EMBER_PLUGIN_TIMEOUT      | seconds a plugin may take to import or load its backend  | ``60``         |
| EMBER_CACHE_DIR           | where compiled kernels are cached                        | user cache dir |
| EMBER_KERNEL_CACHE        | ``0`` turns the on-disk kernel cache off                 | ``1``          |
| EMBER_FUSION              | ``0``: fusing backends run every op eagerly (no lazy)    | ``1``          |
| EMBER_FUSE_REDUCE         | ``0``: no reduction joins a fused region's kernel        | ``1``          |
| EMBER_FUSION_MIN_ELEMENTS | smaller results with no deferred operand run at once     | the backend's  |
| EMBER_NN_FUSED            | ``0``: nn layers never call installed fused ops          | ``1``          |
| EMBER_JIT_NATIVE          | ``0``: ``em.jit`` replays step lists, no backend replays | ``1``          |
| EMBER_MEMORY              | device pool strategy: adaptive, static or exclusive      | ``adaptive``   |
| EMBER_OPENCL_DEVICE       | default OpenCL device index                              | ``0``          |
| EMBER_WGPU_ADAPTER        | default WGPU adapter index                               | ``0``          |

Values are read when asked for, so tests can change the environment.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .errors import InvalidArgumentError

if TYPE_CHECKING:  # pathlib loads with the first cache_dir() call, not with ``import ember``
    from pathlib import Path

__all__ = [
    "default_device",
    "plugin_allow_list",
    "plugin_timeout",
    "cache_dir",
    "kernel_cache_enabled",
    "nn_fused_enabled",
    "fusion_enabled",
    "fuse_reductions_enabled",
    "fusion_min_elements",
    "jit_native_enabled",
    "memory_strategy",
    "MEMORY_STRATEGIES",
    "opencl_device",
    "wgpu_adapter",
]


def default_device() -> str:
    """The device spec named by ``EMBER_DEVICE`` (``cpu`` when unset)."""
    return os.environ.get("EMBER_DEVICE", "").strip() or "cpu"


def plugin_allow_list() -> frozenset[str] | None:
    """Plugin names allowed by ``EMBER_PLUGINS`` (lower case: names match case-insensitively);
    ``None`` allows every installed plugin."""
    raw = os.environ.get("EMBER_PLUGINS", "").strip()
    if not raw:
        return None
    return frozenset(name.strip().lower() for name in raw.split(",") if name.strip())


def plugin_timeout() -> float:
    """Seconds a plugin's import, registration or backend loader may take (``EMBER_PLUGIN_TIMEOUT``)."""
    raw = os.environ.get("EMBER_PLUGIN_TIMEOUT", "").strip()
    if not raw:
        return 60.0
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InvalidArgumentError(f"EMBER_PLUGIN_TIMEOUT={raw!r}: expected a positive number of seconds, e.g. 60")
    return value


def cache_dir() -> Path:
    """Directory for on-disk kernel caches (``EMBER_CACHE_DIR``, else the user cache dir)."""
    from pathlib import Path

    raw = os.environ.get("EMBER_CACHE_DIR", "").strip()
    if raw:
        return Path(raw).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".cache") / "ember"


def kernel_cache_enabled() -> bool:
    """Whether compiled kernels are read from and written to ``cache_dir()`` (``EMBER_KERNEL_CACHE=0``: no)."""
    return _flag("EMBER_KERNEL_CACHE")


def fusion_enabled() -> bool:
    """Whether backends that fuse defer elementwise ops into fused kernels (``EMBER_FUSION=0``: no)."""
    return _flag("EMBER_FUSION")


def fuse_reductions_enabled() -> bool:
    """Whether a trailing reduction joins its region's fused kernel where the backend offers it
    (``EMBER_FUSE_REDUCE=0``: no, the region is realized and the reduction kernel runs after)."""
    return _flag("EMBER_FUSE_REDUCE")


def fusion_min_elements(default: int) -> int:
    """Result size below which an op with no deferred operand runs at once instead of joining a
    fused region (``EMBER_FUSION_MIN_ELEMENTS``; unset: ``default``, the backend's own choice).
    Deferring costs host time per op; on a host-bound step, small ops may be cheaper run at once."""
    raw = os.environ.get("EMBER_FUSION_MIN_ELEMENTS", "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise InvalidArgumentError(
            f"EMBER_FUSION_MIN_ELEMENTS={raw!r}: expected a whole number >= 0, e.g. 65536 (0: defer every op)"
        )
    return value


def nn_fused_enabled() -> bool:
    """Whether nn layers call an installed extension's fused ops (ember-fused) where the device has
    their kernel (``EMBER_NN_FUSED=0``: no, always the unfused sequence)."""
    return _flag("EMBER_NN_FUSED")


def jit_native_enabled() -> bool:
    """Whether ``em.jit`` asks the backend for a native replay of a capture (CUDA graph, OpenCL
    enqueue list, WebGPU command buffer); ``EMBER_JIT_NATIVE=0``: the step list always."""
    return _flag("EMBER_JIT_NATIVE")


#: the strategies of ember.memory's pools (docs/memory.md), the default first
MEMORY_STRATEGIES = ("adaptive", "static", "exclusive")


def memory_strategy() -> str:
    """The pool strategy of devices not given one (``EMBER_MEMORY``: adaptive, static or exclusive)."""
    raw = os.environ.get("EMBER_MEMORY", "").strip().lower()
    if not raw:
        return MEMORY_STRATEGIES[0]
    if raw not in MEMORY_STRATEGIES:
        raise InvalidArgumentError(
            f"EMBER_MEMORY={raw!r}: expected one of {', '.join(MEMORY_STRATEGIES)} (unset: adaptive)"
        )
    return raw


def _flag(name: str) -> bool:
    """An on/off setting that is on unless set to 0, false, off or no."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "off", "no")


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InvalidArgumentError(f"{name}={raw!r} is not an integer device index") from None


def opencl_device() -> int:
    """Default OpenCL device index (``EMBER_OPENCL_DEVICE``)."""
    return _int_env("EMBER_OPENCL_DEVICE", 0)


def wgpu_adapter() -> int:
    """Default WGPU adapter index (``EMBER_WGPU_ADAPTER``)."""
    return _int_env("EMBER_WGPU_ADAPTER", 0)

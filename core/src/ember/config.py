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
| EMBER_AUTOTUNE            | ``0``: large GEMMs are not tuned on first use            | ``1``          |
| EMBER_AUTOTUNE_BUDGET     | seconds a first-use tuning may take                      | ``20``         |
| EMBER_OPENCL_DEVICE       | default OpenCL device index                              | ``0``          |
| EMBER_WGPU_ADAPTER        | default WGPU adapter index                               | ``0``          |

Values are read when asked for, so tests can change the environment. Plugins read their own
settings (``EMBER_CPU_*``, ``EMBER_CUDA_*``, ``EMBER_OPENCL_*``, ``EMBER_WGPU_*``, each listed in its
``settings`` module) through the readers here, :func:`env_flag`, :func:`env_int`, :func:`env_float`
and :func:`env_choice`, so every setting takes the same spellings and a bad value gets the same
kind of error: the variable, the value, what it takes and an example.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, overload

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
    "autotune_enabled",
    "autotune_budget",
    "MEMORY_STRATEGIES",
    "opencl_device",
    "wgpu_adapter",
    "env_flag",
    "env_int",
    "env_float",
    "env_choice",
    "settings_table",
    "unknown_settings",
    "read_errors",
    "check",
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
    return env_float("EMBER_PLUGIN_TIMEOUT", 60.0, what="a positive number of seconds", example="60", positive=True)


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
    return env_flag("EMBER_KERNEL_CACHE", True)


def fusion_enabled() -> bool:
    """Whether backends that fuse defer elementwise ops into fused kernels (``EMBER_FUSION=0``: no)."""
    return env_flag("EMBER_FUSION", True)


def fuse_reductions_enabled() -> bool:
    """Whether a trailing reduction joins its region's fused kernel where the backend offers it
    (``EMBER_FUSE_REDUCE=0``: no, the region is realized and the reduction kernel runs after)."""
    return env_flag("EMBER_FUSE_REDUCE", True)


def fusion_min_elements(default: int) -> int:
    """Result size below which an op with no deferred operand runs at once instead of joining a
    fused region (``EMBER_FUSION_MIN_ELEMENTS``; unset: ``default``, the backend's own choice).
    Deferring costs host time per op; on a host-bound step, small ops may be cheaper run at once."""
    return env_int("EMBER_FUSION_MIN_ELEMENTS", default, what="elements", example="65536", zero="defer every op")


def nn_fused_enabled() -> bool:
    """Whether nn layers call an installed extension's fused ops (ember-fused) where the device has
    their kernel (``EMBER_NN_FUSED=0``: no, always the unfused sequence)."""
    return env_flag("EMBER_NN_FUSED", True)


def jit_native_enabled() -> bool:
    """Whether ``em.jit`` asks the backend for a native replay of a capture (CUDA graph, OpenCL
    enqueue list, WebGPU command buffer); ``EMBER_JIT_NATIVE=0``: the step list always."""
    return env_flag("EMBER_JIT_NATIVE", True)


#: the strategies of ember.memory's pools (docs/memory.md), the default first
MEMORY_STRATEGIES = ("adaptive", "static", "exclusive")


def memory_strategy() -> str:
    """The pool strategy of devices not given one (``EMBER_MEMORY``: adaptive, static or exclusive)."""
    return env_choice("EMBER_MEMORY", MEMORY_STRATEGIES, MEMORY_STRATEGIES[0])


# -- the readers every setting goes through ----------------------------------------------------
_ON = frozenset(("1", "true", "on", "yes"))
_OFF = frozenset(("0", "false", "off", "no"))


def autotune_enabled() -> bool:
    """Whether a large untuned GEMM may be tuned on first use (``EMBER_AUTOTUNE``, default on)."""
    return env_flag("EMBER_AUTOTUNE", True)


def autotune_budget() -> float:
    """Seconds a first-use tuning may take (``EMBER_AUTOTUNE_BUDGET``)."""
    return env_float("EMBER_AUTOTUNE_BUDGET", 20.0, what="seconds", example="20", positive=True)


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


@overload
def env_flag(name: str, default: bool) -> bool: ...
@overload
def env_flag(name: str, default: None) -> bool | None: ...


def env_flag(name: str, default: bool | None) -> bool | None:
    """The on/off setting ``name``: 1, true, on or yes; 0, false, off or no (any case); unset or
    empty: ``default`` (None where the caller decides per device). Anything else is refused, so a
    typo does not silently mean "on"."""
    raw = _raw(name).lower()
    if not raw:
        return default
    if raw in _ON:
        return True
    if raw in _OFF:
        return False
    raise InvalidArgumentError(
        f"{name}={raw!r}: expected 1 or 0 (true/false, on/off and yes/no also work)"
        + ("" if default is None else f"; unset means {int(default)}")
    )


def _expected(name: str, raw: str, what: str, example: str, zero: str | None) -> InvalidArgumentError:
    notes = f" (0: {zero})" if zero else ""
    return InvalidArgumentError(f"{name}={raw!r}: expected {what}, e.g. {example}{notes}")


def env_int(
    name: str,
    default: int,
    *,
    what: str = "a whole number",
    example: str = "1",
    minimum: int = 0,
    zero: str | None = None,
) -> int:
    """The whole-number setting ``name`` (at least ``minimum``; unset or empty: ``default``). A bad
    value's error names the variable and says ``what`` it counts, with an ``example`` and what 0 means
    (``zero``) where that is special."""
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _expected(name, raw, f"{what} (a whole number >= {minimum})", example, zero) from None
    if value < minimum:
        raise _expected(name, raw, f"{what} (a whole number >= {minimum})", example, zero)
    return value


def env_float(
    name: str,
    default: float,
    *,
    what: str = "a number",
    example: str = "1",
    positive: bool = False,
    zero: str | None = None,
) -> float:
    """The number setting ``name`` (>= 0, or > 0 where ``positive``; unset or empty: ``default``)."""
    raw = _raw(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value > 0 if positive else value >= 0):  # NaN fails both
        raise _expected(name, raw, what + ("" if positive else " (>= 0)"), example, zero)
    return value


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    """The setting ``name`` as one of ``choices`` (any case; unset or empty: ``default``)."""
    raw = _raw(name).lower()
    if not raw:
        return default
    if raw not in choices:
        raise InvalidArgumentError(f"{name}={raw!r}: expected one of {', '.join(choices)} (unset: {default})")
    return raw


def opencl_device() -> int:
    """Default OpenCL device index (``EMBER_OPENCL_DEVICE``)."""
    return env_int("EMBER_OPENCL_DEVICE", 0, what="a device index", example="0")


def wgpu_adapter() -> int:
    """Default WGPU adapter index (``EMBER_WGPU_ADAPTER``)."""
    return env_int("EMBER_WGPU_ADAPTER", 0, what="a device index", example="0")


# -- the tables -----------------------------------------------------------------------------------
_ROW = re.compile(r"^\|\s*(EMBER_[A-Z0-9_]+)\s*\|([^|\n]*)\|([^|\n]*)\|\s*$", re.MULTILINE)


def settings_table(doc: str | None) -> list[tuple[str, str, str]]:
    """The rows (variable, meaning, default) of the settings table in ``doc``: this module's docstring,
    or a plugin's ``settings`` module's (``ember settings`` lists them all)."""

    def plain(cell: str) -> str:
        return cell.strip().replace("``", "")

    return [(name, plain(meaning), plain(default)) for name, meaning, default in _ROW.findall(doc or "")]


def read_errors(readers: list[Callable[[], object]]) -> list[str]:
    """The messages of the readers that refuse the value set now (a settings module's ``check()``)."""
    errors = []
    for read in readers:
        try:
            read()
        except InvalidArgumentError as exc:
            errors.append(str(exc))
    return errors


def check() -> list[str]:
    """What ``ember settings`` reports of core's settings: the values set that cannot be read."""
    return read_errors(
        [plugin_timeout, kernel_cache_enabled, fusion_enabled, fuse_reductions_enabled, nn_fused_enabled,
         jit_native_enabled, memory_strategy, autotune_enabled, autotune_budget, opencl_device, wgpu_adapter,
         lambda: fusion_min_elements(0)]
    )  # fmt: skip


def unknown_settings(known: set[str]) -> list[tuple[str, list[str]]]:
    """``EMBER_*`` variables set in the environment that no table in ``known`` lists (a misspelt setting
    is otherwise ignored without a word), each with the known names it is closest to."""
    import difflib  # (here: `import ember` loads this module, and only the CLI asks this)

    return [
        (name, difflib.get_close_matches(name, sorted(known), n=2, cutoff=0.8))
        for name in sorted(os.environ)
        if name.startswith("EMBER_") and name not in known
    ]

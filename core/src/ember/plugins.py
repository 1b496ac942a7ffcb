"""Plugin discovery: pluggy hookspecs, entry points, and the registry of backends.

Plugins are modules named by the entry-point groups ``ember.backends`` and
``ember.extensions``. Each implements some of the hooks below with ``@ember.hookimpl``.
Discovery is lazy (nothing happens at ``import ember``) and isolated: a plugin that fails
to import or to register is recorded with its error and never breaks the others.
"""

from __future__ import annotations

import threading
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pluggy

from . import config
from .errors import DeviceUnavailableError, PluginError

if TYPE_CHECKING:  # annotations only: nothing in the registry needs Backend at run time
    from .backend import Backend

__all__ = [
    "hookspec",
    "hookimpl",
    "BackendSpec",
    "PluginInfo",
    "PluginRegistry",
    "get_registry",
    "set_registry",
    "ENTRY_POINT_GROUPS",
    "PluginConflictWarning",
    "contained",
]

hookspec = pluggy.HookspecMarker("ember")
hookimpl = pluggy.HookimplMarker("ember")

ENTRY_POINT_GROUPS = ("ember.backends", "ember.extensions")

#: what to install for backends ember knows by name, used in error messages
_INSTALL_HINTS = {
    "cpu": 'pip install "ember[cpu]"',
    "opencl": 'pip install "ember[opencl]"',
    "wgpu": 'pip install "ember[wgpu]"',
    "cuda": 'pip install "ember[cuda13]" (CUDA 13) or "ember[cuda12]" (CUDA 12)',
    # planned backends: say so rather than name a package that does not exist yet
    "remote": "no remote backend is released yet (ember-remote is planned)",
}


class PluginConflictWarning(UserWarning):
    """Two plugins register the same device kind: the higher priority serves it."""


def contained(fn: Callable[[], Any], what: str, timeout: float | None = None) -> Any:
    """Run a plugin's code (its import, its hooks, its backend loader) so that it cannot take
    the process down: any exception, ``SystemExit`` included, comes back as a
    :class:`PluginError` naming ``what``, and code still running after ``timeout`` seconds
    (``EMBER_PLUGIN_TIMEOUT``) is abandoned with an error saying so. Ctrl-C still interrupts."""
    limit = config.plugin_timeout() if timeout is None else timeout
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - SystemExit from a plugin must not end ember
            box["error"] = exc

    worker = threading.Thread(target=run, name=f"ember-plugin: {what}", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        raise PluginError(
            f"{what} did not finish within {limit:g} s and was abandoned (it may hang: fix or uninstall it, "
            f"leave it out with EMBER_PLUGINS, or allow more time with EMBER_PLUGIN_TIMEOUT)"
        )
    error = box.get("error")
    if isinstance(error, KeyboardInterrupt):
        raise error
    if error is not None:
        kind = "exited" if isinstance(error, SystemExit) else "raised"
        raise PluginError(f"{what} {kind} {type(error).__name__}: {error}") from error
    return box.get("value")


class HookSpecs:
    """The whole plugin contract: three hooks."""

    @hookspec
    def ember_register_backends(self, registry: PluginRegistry) -> None:
        """Add backends with ``registry.add_backend(BackendSpec(...))``."""

    @hookspec
    def ember_register_extensions(self, registry: PluginRegistry) -> None:
        """Add extension ops (``@backend_extension`` functions, kernels) to ember."""

    @hookspec
    def ember_conformance_modules(self) -> list[str]:
        """Return importable module names of extra conformance tests."""


@dataclass(frozen=True)
class BackendSpec:
    """One backend a plugin offers: its name, the device kinds it serves, how to load it.

    ``loader()`` imports the heavy library (cupy, pyopencl, wgpu) and returns the Backend
    class. It runs the first time a device of one of ``kinds`` is used. When two specs
    serve a kind, the higher ``priority`` wins.
    """

    name: str
    kinds: tuple[str, ...]
    loader: Callable[[], type[Backend]]
    priority: int = 0


@dataclass
class PluginInfo:
    """What ``ember plugins`` shows for one plugin."""

    name: str
    group: str
    distribution: str = "?"
    version: str = "?"
    status: str = "ok"  # ok | failed | disabled
    error: str = ""
    detail: str = ""
    backends: list[str] = field(default_factory=list)
    #: names of the extension ops the plugin registered (``registry.add_extensions``)
    extensions: list[str] = field(default_factory=list)
    #: the name pluggy knows the plugin by: ``name``, or ``name@distribution`` when two
    #: distributions ship an entry point of the same name
    key: str = ""


class PluginRegistry:
    """Holds discovered plugins and the backends they registered. Loading is idempotent."""

    def __init__(self) -> None:
        self.manager = pluggy.PluginManager("ember")
        self.manager.add_hookspecs(HookSpecs)
        self.plugins: dict[str, PluginInfo] = {}
        self.specs: dict[str, list[BackendSpec]] = {}
        #: id(spec) -> the plugin that registered it (for ``ember plugins`` / ``ember doctor``)
        self.owners: dict[int, str] = {}
        self._backend_classes: dict[str, type[Backend]] = {}
        self._load_errors: dict[str, str] = {}
        self._current: PluginInfo | None = None
        self._discovered = False
        self._lock = threading.RLock()

    # -- called by plugins -------------------------------------------------------------
    def add_backend(self, spec: BackendSpec) -> None:
        """Register a backend. Called from a plugin's ``ember_register_backends`` hook."""
        who = (self._current.key or self._current.name) if self._current else "<direct>"
        if not isinstance(spec, BackendSpec):
            raise PluginError(f"plugin {who!r}: add_backend expects a BackendSpec, got {spec!r}")
        if not spec.kinds or not all(isinstance(k, str) and k for k in spec.kinds):
            raise PluginError(f"plugin {who!r}: BackendSpec.kinds must be non-empty names")
        if not callable(spec.loader):
            raise PluginError(f"plugin {who!r}: BackendSpec.loader must be callable")
        for kind in spec.kinds:
            specs = self.specs.setdefault(kind.lower(), [])
            others = sorted({self.owners.get(id(s), "?") for s in specs} - {who})
            specs.append(spec)
            specs.sort(key=lambda s: -s.priority)
            self.owners[id(spec)] = who
            if others:
                warnings.warn(
                    f"plugin {who!r} registers device kind {kind!r}, which plugin(s) {', '.join(others)} also "
                    f"serve; {self.provider(kind)!r} serves Device({kind!r}) (the highest priority). "
                    f"`ember plugins` shows who serves what; EMBER_PLUGINS chooses.",
                    PluginConflictWarning,
                    stacklevel=2,
                )
        if self._current is not None:
            self._current.backends.extend(spec.kinds)

    def add_extensions(self, *extensions: Any) -> None:
        """Record extension ops (``@backend_extension`` objects) as the current plugin's, so that
        ``ember plugins`` lists them. Called from a plugin's ``ember_register_extensions`` hook."""
        who = (self._current.key or self._current.name) if self._current else "<direct>"
        for ext in extensions:
            name = getattr(ext, "name", None)
            if not isinstance(name, str):
                raise PluginError(f"plugin {who!r}: add_extensions expects @backend_extension ops, got {ext!r}")
            if self._current is not None and name not in self._current.extensions:
                self._current.extensions.append(name)

    def provider(self, kind: str) -> str | None:
        """The plugin whose backend serves ``kind`` (the highest-priority spec's), or None."""
        specs = self.specs.get(kind.lower())
        return self.owners.get(id(specs[0]), "?") if specs else None

    # -- discovery -----------------------------------------------------------------------
    def discover(self) -> None:
        """Load every entry-point plugin once (respecting ``EMBER_PLUGINS``)."""
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            from importlib import metadata  # lazily: scanning entry points is not free

            allow = config.plugin_allow_list()
            found = [(group, ep) for group in ENTRY_POINT_GROUPS for ep in metadata.entry_points(group=group)]
            for group, ep in sorted(found, key=lambda g_ep: (g_ep[0], g_ep[1].name, _dist_name(g_ep[1]))):
                info = PluginInfo(name=ep.name, group=group)
                dist = getattr(ep, "dist", None)
                if dist is not None:
                    info.distribution = dist.metadata["Name"] or "?"
                    info.version = dist.version or "?"
                key = ep.name
                if key in self.plugins:
                    known = self.plugins[key]
                    if known.group == "direct" or known.distribution == info.distribution:
                        continue  # registered in-process under that name, or the same distribution seen twice
                    key = f"{ep.name}@{info.distribution}"
                    if key in self.plugins:
                        continue
                info.key = key
                self.plugins[key] = info
                if allow is not None and ep.name.lower() not in allow:
                    info.status = "disabled"
                    info.error = f"not in EMBER_PLUGINS={','.join(sorted(allow))}"
                    continue
                try:
                    module = contained(ep.load, f"plugin {ep.name!r} ({info.distribution}): importing {ep.value}")
                except PluginError as exc:  # a broken or hanging plugin must not break ember
                    self._fail(info, exc.__cause__ or exc, message=None if exc.__cause__ else str(exc))
                    continue
                self._register_module(module, info)

    def register(self, plugin: ModuleType | object, name: str | None = None) -> PluginInfo:
        """Register a plugin object directly (tests, notebooks, in-process backends)."""
        with self._lock:
            pname = name or getattr(plugin, "__name__", None) or type(plugin).__name__
            info = PluginInfo(name=pname, group="direct", distribution="-", version="-", key=pname)
            self.plugins[pname] = info
            self._register_module(plugin, info)
            return info

    def _register_module(self, module: Any, info: PluginInfo) -> None:
        key = info.key or info.name
        try:
            self.manager.register(module, name=key)
        except Exception as exc:
            self._fail(info, exc)
            return
        for hook_name in ("ember_register_backends", "ember_register_extensions"):
            hook = getattr(self.manager.hook, hook_name)
            for impl in hook.get_hookimpls():
                if impl.plugin_name != key:
                    continue
                self._current = info
                try:
                    contained(lambda f=impl.function: f(registry=self), f"plugin {info.name!r}: {hook_name}")
                except PluginError as exc:
                    self._fail(info, exc.__cause__ or exc, message=None if exc.__cause__ else str(exc))
                finally:
                    self._current = None

    @staticmethod
    def _fail(info: PluginInfo, exc: BaseException, message: str | None = None) -> None:
        info.status = "failed"
        info.error = message or f"{type(exc).__name__}: {exc}"
        info.detail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))

    def conformance_modules(self) -> list[str]:
        """Module names that extensions add to the conformance suite."""
        self.discover()
        found: list[str] = []
        for names in self.manager.hook.ember_conformance_modules():
            found.extend(names or [])
        return found

    # -- backends ------------------------------------------------------------------------
    def kinds(self) -> list[str]:
        """Every device kind some working plugin serves."""
        self.discover()
        return sorted(self.specs)

    def backend_class(self, kind: str) -> type[Backend]:
        """The Backend class serving ``kind``, loading it on first use."""
        self.discover()
        with self._lock:
            found = self._backend_classes.get(kind)
            if found is not None:
                return found
            specs = self.specs.get(kind)
            if not specs:
                raise DeviceUnavailableError(self._no_backend_message(kind))
            errors = []
            for spec in specs:
                try:
                    cls = contained(spec.loader, f"backend {spec.name!r} ({self.owners.get(id(spec), '?')}) loader")
                except PluginError as exc:
                    cause = exc.__cause__
                    reason = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
                    errors.append(f"backend {spec.name!r} failed to load: {reason}")
                    continue
                self._backend_classes[kind] = cls
                return cls
            self._load_errors[kind] = "; ".join(errors)
            hint = _INSTALL_HINTS.get(kind, "")
            raise DeviceUnavailableError(
                f"no {kind!r} device: "
                + "; ".join(errors)
                + (f". To install what it needs: {hint}" if hint else "")
                + ". `ember doctor` explains more."
            )

    def _no_backend_message(self, kind: str) -> str:
        disabled = [p for p in self.plugins.values() if p.status == "disabled" and kind in p.name.lower()]
        if disabled:
            names = ", ".join(sorted(p.name for p in disabled))
            return (
                f"no {kind!r} device: plugin {names} is installed but left out by "
                f"{disabled[0].error.removeprefix('not in ')}; "
                f"add it to EMBER_PLUGINS (names match case-insensitively) or unset EMBER_PLUGINS"
            )
        failed = [p for p in self.plugins.values() if p.status == "failed"]
        msg = f"no installed plugin provides {kind!r} devices"
        related = [p for p in failed if kind in p.name]
        if related:
            p = related[0]
            msg += f": plugin {p.name!r} ({p.distribution}) failed to import ({p.error})"
        known = self.kinds()
        msg += f". Known kinds: {', '.join(known) if known else 'none'}."
        hint = _INSTALL_HINTS.get(kind)
        if hint:
            msg += f" To add it: {hint}"
        return msg

    def load_error(self, kind: str) -> str | None:
        return self._load_errors.get(kind)

    def device_counts(self) -> dict[str, int]:
        """kind -> number of devices, for every kind whose backend loads (``Device.available()``)."""
        found: dict[str, int] = {}
        for kind in self.kinds():
            try:
                found[kind] = self.backend_class(kind).device_count()
            except Exception:
                continue
        return found


_REGISTRY: PluginRegistry | None = None


def _dist_name(ep: Any) -> str:
    dist = getattr(ep, "dist", None)
    return (dist.metadata["Name"] or "") if dist is not None else ""


def get_registry() -> PluginRegistry:
    """The process-wide registry (discovers entry points on first use)."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = PluginRegistry()
    return _REGISTRY


def set_registry(registry: PluginRegistry | None) -> PluginRegistry | None:
    """Swap the process-wide registry (tests); returns the previous one."""
    global _REGISTRY
    previous, _REGISTRY = _REGISTRY, registry
    return previous

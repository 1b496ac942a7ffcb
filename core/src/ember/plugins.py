"""Plugin discovery: pluggy hookspecs, entry points, and the registry of backends.

Plugins are modules named by the entry-point groups ``ember.backends`` and
``ember.extensions``. Each implements some of the hooks below with ``@ember.hookimpl``.
Discovery is lazy and isolated: a plugin that fails to import or to register is recorded
with its error and never breaks the others. Nothing happens at ``import ember``; the first
device opened imports the ``ember.backends`` plugins and runs their
``ember_register_backends`` (cheap modules: a backend's library loads with its ``loader``);
everything else (the ``ember.extensions`` plugins, ``ember_register_extensions``) waits
for :meth:`PluginRegistry.discover`, which ``ember plugins``, ``kinds()``, the conformance
suite and the nn layers' fused road call. Entry points are read from the ``*.dist-info``
folders on ``sys.path`` directly (importlib.metadata, 30-50 ms to import and scan, only
where the path holds something else, such as a zip file or a distribution finder).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import threading
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
    "BACKENDS_GROUP",
    "EXTENSIONS_GROUP",
    "PluginConflictWarning",
    "contained",
    "EntryPoint",
    "find_entry_points",
]

hookspec = pluggy.HookspecMarker("ember")
hookimpl = pluggy.HookimplMarker("ember")

BACKENDS_GROUP = "ember.backends"
EXTENSIONS_GROUP = "ember.extensions"
ENTRY_POINT_GROUPS = (BACKENDS_GROUP, EXTENSIONS_GROUP)
_HOOKS = ("ember_register_backends", "ember_register_extensions")

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


@dataclass(frozen=True)
class EntryPoint:
    """One entry point of an installed distribution: ``name = value`` in ``group``."""

    name: str
    value: str
    group: str
    distribution: str = "?"
    version: str = "?"

    def load(self) -> Any:
        """Import the module ``value`` names (and the attribute after its ``:``), as importlib.metadata does."""
        match = _EP_VALUE.match(self.value)
        if match is None:
            raise PluginError(f"entry point {self.name!r} = {self.value!r}: not 'module' or 'module:attribute'")
        obj: Any = importlib.import_module(match.group("module"))
        for attr in filter(None, (match.group("attr") or "").split(".")):
            obj = getattr(obj, attr)
        return obj


#: importlib.metadata's grammar of an entry point's value
_EP_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")


def find_entry_points(groups: tuple[str, ...] = ENTRY_POINT_GROUPS) -> list[EntryPoint]:
    """The entry points of ``groups`` of every distribution on ``sys.path``, each distribution once
    (the first found, as importlib.metadata counts them). Reads the ``*.dist-info`` and ``*.egg-info``
    folders itself (a few ms); importlib.metadata (30-50 ms) answers where the path holds a zip
    file or an egg, or where an import hook other than the standard one finds distributions."""
    found = _scan_path(groups)
    return found if found is not None else _scan_metadata(groups)


def _scan_path(groups: tuple[str, ...]) -> list[EntryPoint] | None:
    """:func:`find_entry_points` over plain folders; None when the path needs importlib.metadata."""
    from importlib.machinery import PathFinder

    if any(hasattr(f, "find_distributions") and f is not PathFinder for f in sys.meta_path):
        return None
    wanted = set(groups)
    seen: set[str] = set()
    found: list[EntryPoint] = []
    for entry in sys.path:
        root = os.fspath(entry) if isinstance(entry, (str, os.PathLike)) else None
        if root is None:
            continue
        try:
            children = os.listdir(root or ".")
        except NotADirectoryError:
            return None  # a zip file on the path
        except OSError:
            continue  # a folder that does not exist: nothing to find there
        if root.lower().endswith(".egg"):
            return None
        for child in children:
            low = child.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            key = re.sub(r"[-_.]+", "_", low.rpartition(".")[0].partition("-")[0])
            if key in seen:
                continue
            seen.add(key)
            folder = os.path.join(root or ".", child)
            try:
                with open(os.path.join(folder, "entry_points.txt"), encoding="utf-8") as f:
                    text = f.read()
            except OSError:  # no entry points, or an egg-info that is a single file
                continue
            pairs = _entry_point_pairs(text, wanted)
            if not pairs:
                continue
            dist, version = _name_version(folder, low.endswith(".dist-info"))
            found.extend(EntryPoint(n, v, g, dist, version) for g, n, v in pairs)
    return found


def _entry_point_pairs(text: str, groups: set[str]) -> list[tuple[str, str, str]]:
    """``(group, name, value)`` for the lines of an ``entry_points.txt`` in ``groups``
    (importlib.metadata's reading: ``[group]`` headers, ``#`` comments, ``name = value``)."""
    pairs = []
    group = None
    for line in map(str.strip, text.splitlines()):
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            group = line.strip("[]")
        elif group in groups and "=" in line:
            name, value = line.split("=", 1)
            pairs.append((group, name.strip(), value.strip()))
    return pairs


def _name_version(folder: str, dist_info: bool) -> tuple[str, str]:
    """The ``Name`` and ``Version`` headers of a distribution's metadata file ("?" where missing)."""
    found = {"name": "?", "version": "?"}
    try:
        with open(os.path.join(folder, "METADATA" if dist_info else "PKG-INFO"), encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break  # the headers end at the first blank line
                header, sep, value = line.partition(":")
                if sep and header.lower() in found and found[header.lower()] == "?":
                    found[header.lower()] = value.strip() or "?"
    except OSError:
        pass
    return found["name"], found["version"]


def _scan_metadata(groups: tuple[str, ...]) -> list[EntryPoint]:
    """:func:`find_entry_points` through importlib.metadata."""
    from importlib import metadata

    found = []
    for group in groups:
        for ep in metadata.entry_points(group=group):
            dist = getattr(ep, "dist", None)
            name = (dist.metadata["Name"] or "?") if dist is not None else "?"
            version = (dist.version or "?") if dist is not None else "?"
            found.append(EntryPoint(ep.name, ep.value, group, name, version))
    return found


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
    #: the module its entry point names (``ember_cpu.plugin``; "" for one registered in-process)
    module: str = ""


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
        #: every plugin loaded (discover) / the backend plugins loaded (discover_backends)
        self._discovered = False
        self._backends_discovered = False
        self._found: list[EntryPoint] | None = None
        #: keys of the plugins pluggy holds (a failed registration is not one)
        self._modules: set[str] = set()
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
        """Load every entry-point plugin once (respecting ``EMBER_PLUGINS``): the backends'
        (:meth:`discover_backends`), then every ``ember_register_extensions`` hook and the
        ``ember.extensions`` plugins."""
        with self._lock:
            if self._discovered:
                return
            self._discovered = True
            self.discover_backends()
            for info in list(self.plugins.values()):
                if info.group == BACKENDS_GROUP and info.key in self._modules:
                    self._run_hooks(info, ("ember_register_extensions",))
            self._load_group(EXTENSIONS_GROUP, _HOOKS)

    def discover_backends(self) -> None:
        """Import the ``ember.backends`` plugins and run their ``ember_register_backends``, once:
        what opening a device needs. Their modules must be cheap (the heavy library loads with a
        BackendSpec's ``loader``); extensions wait for :meth:`discover`."""
        with self._lock:
            if self._backends_discovered:
                return
            self._backends_discovered = True
            self._load_group(BACKENDS_GROUP, ("ember_register_backends",))

    def _entry_points(self) -> list[EntryPoint]:
        """Every ember entry point installed, read once."""
        if self._found is None:
            self._found = sorted(find_entry_points(ENTRY_POINT_GROUPS), key=lambda ep: (ep.name, ep.distribution))
        return self._found

    def _load_group(self, group: str, hooks: tuple[str, ...]) -> None:
        """Import the plugins of one entry-point group (by name, then distribution) and run ``hooks``."""
        allow = config.plugin_allow_list()
        for ep in self._entry_points():
            if ep.group != group:
                continue
            info = PluginInfo(name=ep.name, group=group, distribution=ep.distribution, version=ep.version)
            match = _EP_VALUE.match(ep.value)
            info.module = match.group("module") if match else ""
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
            self._register_module(module, info, hooks)

    def register(self, plugin: ModuleType | object, name: str | None = None) -> PluginInfo:
        """Register a plugin object directly (tests, notebooks, in-process backends): every hook runs now."""
        with self._lock:
            pname = name or getattr(plugin, "__name__", None) or type(plugin).__name__
            info = PluginInfo(name=pname, group="direct", distribution="-", version="-", key=pname)
            self.plugins[pname] = info
            self._register_module(plugin, info, _HOOKS)
            return info

    def _register_module(self, module: Any, info: PluginInfo, hooks: tuple[str, ...]) -> None:
        key = info.key or info.name
        try:
            self.manager.register(module, name=key)
        except Exception as exc:
            self._fail(info, exc)
            return
        self._modules.add(key)
        self._run_hooks(info, hooks)

    def _run_hooks(self, info: PluginInfo, hooks: tuple[str, ...]) -> None:
        """Run the plugin's implementations of ``hooks``, each contained."""
        key = info.key or info.name
        for hook_name in hooks:
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
        import traceback  # only for a failure: kept out of ``import ember``

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
        """The Backend class serving ``kind``, loading it on first use (the backend plugins are
        discovered first; the rest only when none of them serves ``kind``)."""
        self.discover_backends()
        with self._lock:
            found = self._backend_classes.get(kind)
            if found is not None:
                return found
            specs = self.specs.get(kind)
            if not specs and not self._discovered:
                self.discover()  # an extension plugin may register a backend too
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

"""The ``ember`` command: ``plugins``, ``devices``, ``doctor``, ``ops``, ``train``, ``onnx``, ``memory-report``,
``--version``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import platform
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy

from . import __version__, config
from .device import Device
from .errors import DataError, DataFileNotFoundError, MissingDependencyError
from .kernel_cache import cache_stats
from .ops import table as op_table
from .plugins import contained, get_registry

__all__ = ["main"]


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def cmd_plugins(args: argparse.Namespace) -> int:
    """List every plugin: name, distribution, version, status, device kinds."""
    reg = get_registry()
    reg.discover()
    if not reg.plugins:
        print('no ember plugins are installed; install a backend, e.g. pip install "ember[cpu]"')
        return 1
    rows = []
    for info in reg.plugins.values():
        kinds = ", ".join(_served(reg, info, kind) for kind in info.backends)
        if info.extensions:
            kinds = (kinds + "; " if kinds else "") + f"ops: {', '.join(info.extensions)}"
        kinds = kinds or "-"
        status = info.status if info.status == "ok" else f"{info.status}: {info.error}"
        rows.append([info.name, info.group.split(".")[-1], info.distribution, info.version, kinds, status])
    print(_table(rows, ["plugin", "kind", "distribution", "version", "devices / ops", "status"]))
    failed = [p for p in reg.plugins.values() if p.status == "failed"]
    if failed and args.verbose:
        for p in failed:
            print(f"\n--- {p.name} ---\n{p.detail}")
    elif failed:
        print("\n(run `ember plugins -v` for the tracebacks of failed plugins)")
    return 0


def _served(reg: Any, info: Any, kind: str) -> str:
    """``kind``, marked when another plugin's backend is the one serving it."""
    provider = reg.provider(kind)
    return kind if provider in (info.key, info.name) else f"{kind} (served by {provider})"


def cmd_devices(args: argparse.Namespace) -> int:
    """List every device that a working backend finds."""
    reg = get_registry()
    rows = []
    problems = []
    for kind in reg.kinds():
        try:
            cls = reg.backend_class(kind)
            count = contained(cls.device_count, f"{kind} backend: device_count()")
        except Exception as exc:
            problems.append(f"{kind}: {exc}")
            continue
        for i in range(count):
            try:
                info = cls.describe(i)
            except Exception as exc:  # describing must never hide the device
                info = {"name": f"<describe failed: {exc}>"}
            mem = info.get("memory_bytes")
            mem_s = f"{mem / 2**30:.1f} GiB" if isinstance(mem, (int, float)) and mem else "-"
            extra = ", ".join(f"{k}={v}" for k, v in info.items() if k not in ("name", "vendor", "memory_bytes"))
            rows.append([f"{kind}:{i}", str(info.get("name", "?")), str(info.get("vendor", "-")), mem_s, extra])
    if rows:
        print(_table(rows, ["device", "name", "vendor", "memory", "details"]))
    else:
        print("no devices found")
    for p in problems:
        print(f"unavailable: {p}")
    return 0 if rows else 1


_DOCTOR_HINTS = {
    "opencl": "OpenCL needs a platform driver: on a machine without a GPU install PoCL "
    "(apt-get install pocl-opencl-icd ocl-icd-libopencl1).",
    "wgpu": "WGPU needs a Vulkan/Metal/D3D12 driver: on a machine without a GPU install Mesa's "
    "lavapipe (apt-get install mesa-vulkan-drivers libvulkan1).",
    "cuda": 'CUDA needs ember-cuda with CuPy and an NVIDIA driver: pip install "ember[cuda13]" (CUDA 13) '
    'or "ember[cuda12]" (CUDA 12); `nvidia-smi` shows the driver.',
}


def cmd_doctor(args: argparse.Namespace) -> int:
    """Explain what works, what is missing, and how to fix it."""
    print(f"ember {__version__} on Python {platform.python_version()} ({platform.platform()})")
    print(f"numpy {numpy.__version__}")
    print(f"EMBER_DEVICE={config.default_device()}  cache dir={config.cache_dir()}")
    allow = config.plugin_allow_list()
    if allow is not None:
        print(f"EMBER_PLUGINS limits plugins to: {', '.join(sorted(allow))}")
    known = {name for _, module in _settings_modules() for name, _, _ in config.settings_table(module.__doc__)}
    for line in _unknown_settings_lines(known):
        print(f"[warn] {line}; `ember settings` lists the ones that are read")
    refused = _refused_settings()
    for line in refused:
        print(f"[fail] {line}")
    reg = get_registry()
    reg.discover()
    ok = not refused
    for info in reg.plugins.values():
        if info.status == "failed":
            ok = False
            print(f"[fail] plugin {info.name} ({info.distribution} {info.version}) failed to load: {info.error}")
            print("       reinstall it, or set EMBER_PLUGINS to leave it out")
        elif info.status == "disabled":
            print(f"[skip] plugin {info.name}: {info.error}")
    for kind in reg.kinds():
        try:
            cls = reg.backend_class(kind)
            n = contained(cls.device_count, f"{kind} backend: device_count()")
        except Exception as exc:
            ok = False
            print(f"[fail] {kind}: {exc}")
            if kind in _DOCTOR_HINTS:
                print(f"       {_DOCTOR_HINTS[kind]}")
            continue
        if n == 0:
            why = contained(cls.why_unavailable, f"{kind} backend: why_unavailable()") or _DOCTOR_HINTS.get(kind, "")
            print(f"[none] {kind}: the backend loaded but found no device: {why}")
            continue
        owners = {reg.owners.get(id(spec), "?") for spec in reg.specs[kind]}
        provider = reg.provider(kind)
        also = sorted(owners - {provider})
        served = f", served by plugin {provider!r}" + (f" (also offered by {', '.join(also)})" if also else "")
        print(f"[ ok ] {kind}: {n} device(s){served}")
        missing = _device(kind).backend.missing_primitives()
        if missing:
            ok = False
            print(f"       incomplete backend, missing primitives: {', '.join(missing)}")
    for kind, hint in _DOCTOR_HINTS.items():
        if kind not in reg.kinds():
            print(f"[ -- ] {kind}: no plugin installed ({hint.split(':')[0]})")
    try:
        _ = Device.default().backend
        print(f"default device {Device.default()} is usable")
    except Exception as exc:
        ok = False
        print(f"[fail] the default device does not work: {exc}")
    for cache in cache_stats():  # the kernel caches the backends opened above
        state = "on" if cache["enabled"] else "off (EMBER_KERNEL_CACHE=0 or not writable)"
        print(
            f"kernel cache {cache['backend']} {cache['device']}: {state}, {cache['hits']} hits, "
            f"{cache['misses']} misses, {cache['corrupt']} corrupt entries removed, in {cache['directory']}"
        )
    return 0 if ok else 1


def _settings_modules() -> list[tuple[str, Any]]:
    """(package, module) of every settings table: ember.config's, then each installed plugin's
    ``settings`` module beside its entry point's (ember_cpu.settings, ...), where it has one."""
    found: list[tuple[str, Any]] = [("ember", config)]
    reg = get_registry()
    reg.discover()
    seen = {"ember"}
    for info in reg.plugins.values():
        package = info.module.split(".")[0]
        if not package or package in seen:
            continue
        seen.add(package)
        try:
            if importlib.util.find_spec(f"{package}.settings") is None:
                continue
            found.append((package, importlib.import_module(f"{package}.settings")))
        except Exception:  # noqa: BLE001 - a plugin that fails to import: `ember plugins` says why
            continue
    return found


def _unknown_settings_lines(known: set[str]) -> list[str]:
    lines = []
    for name, close in config.unknown_settings(known):
        hint = f" (did you mean {' or '.join(close)}?)" if close else ""
        lines.append(f"{name} is set but no installed package reads it{hint}")
    return lines


def cmd_settings(args: argparse.Namespace) -> int:
    """Every EMBER_* setting of ember and its installed plugins: meaning, default, the value set now."""
    rows, known = [], set()
    for package, module in _settings_modules():
        for name, meaning, default in config.settings_table(module.__doc__):
            known.add(name)
            value = os.environ.get(name)
            if args.set and value is None:
                continue
            rows.append([name, "-" if value is None else value, default, meaning, package])
    header = ["variable", "set to", "default", "meaning", "package"]
    print(_table(rows, header) if rows else "no setting that an installed package reads is set")
    unknown = _unknown_settings_lines(known)
    for line in unknown:
        print(f"[warn] {line}")
    refused = _refused_settings()
    for line in refused:
        print(f"[fail] {line}")
    return 1 if unknown or refused else 0


def _refused_settings() -> list[str]:
    """The values set now that a package's readers refuse (each settings module's ``check()``)."""
    lines = []
    for _, module in _settings_modules():
        check = getattr(module, "check", None)
        if callable(check):
            lines += check()
    return lines


def _device(kind: str) -> Any:
    return Device(kind, 0)


def cmd_ops(args: argparse.Namespace) -> int:
    """Print the op table (kind, role, autocast policy, native signature), as text or Markdown;
    with ``--device``, which of the ops that device computes natively."""
    native = Device(args.device).capabilities.native_ops if args.device else None
    if args.markdown:
        title = f"The op table, native on {args.device}" if args.device else "The op table"
        print(op_table.markdown(native, title=title), end="")
        return 0
    header = ["op", "kind", "role", "autocast", "signature"] + (["native"] if native is not None else [])
    rows = []
    for r in op_table.rows(native):
        row = [r["op"], r["kind"], r["role"], r["autocast"] or "-", r["signature"]]
        if native is not None:
            row.append("yes" if r["native"] else "-")
        rows.append(row)
    print(_table(rows, header))
    if native is not None:
        print(f"\n{sum(r['native'] for r in op_table.rows(native))} of {len(rows)} ops native on {args.device}")
    return 0


def cmd_memory_report(args: argparse.Namespace) -> int:
    """Plot reserved vs in-use memory of a run (its ``memory.csv``, written by the MemoryReport
    callback) as a PNG, and print the peaks."""
    # imported here so that the other commands neither load nor depend on ember.train
    from .train.memory_report import plot_memory, read_memory_csv

    try:
        rows = read_memory_csv(args.path)
    except (DataError, DataFileNotFoundError) as exc:
        print(f"ember memory-report: {exc}")
        return 1
    source = args.path / "memory.csv" if args.path.is_dir() else args.path
    out = args.output or source.with_name("memory.png")
    measured = [r for r in rows if r.get("in_use_bytes") is not None]
    if measured:
        peak_r = max(r.get("peak_reserved_bytes") or r["reserved_bytes"] for r in measured)
        peak_u = max(r.get("peak_in_use_bytes") or r["in_use_bytes"] for r in measured)
        ratio = f" ({peak_r / peak_u:.3f}x)" if peak_u else ""
        print(
            f"{len(rows)} steps: peak reserved {peak_r / 2**20:.1f} MiB, peak in use {peak_u / 2**20:.1f} MiB{ratio}; "
            f"at the last step {measured[-1]['reserved_bytes'] / 2**20:.1f} MiB reserved, "
            f"{measured[-1]['in_use_bytes'] / 2**20:.1f} MiB in use"
        )
    else:
        print(f"{len(rows)} steps, no byte counts: the device does not count its memory")
    try:
        path = plot_memory(rows, out, title=args.title or f"memory ({source})")
    except MissingDependencyError as exc:
        print(f"ember memory-report: {exc}")
        return 1
    print(f"wrote {path}")
    return 0


def cmd_train(args: argparse.Namespace, rest: Sequence[str]) -> int:
    """Train one of the bundled example models (see ``ember train --help``)."""
    # imported here so that `ember plugins/devices/doctor` neither load nor depend on ember.train
    from .train.cli import main as train_main

    return train_main(list(rest))


def cmd_onnx(rest: Sequence[str]) -> int:
    """Inspect ONNX models and list the ONNX ops ember imports (see ``ember onnx --help``)."""
    # imported here: ember.onnx needs the optional onnx package, which the other commands do not
    try:
        from .onnx.cli import main as onnx_main
    except ImportError as exc:
        print(f"ember onnx: {exc}")
        return 1
    return onnx_main(list(rest))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="ember", description="Ember: one model, any device.")
    parser.add_argument("--version", action="version", version=f"ember {__version__}")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("plugins", help="list installed plugins and their status")
    p.add_argument("-v", "--verbose", action="store_true", help="show tracebacks of failed plugins")
    sub.add_parser("devices", help="list the devices found")
    sub.add_parser("doctor", help="explain what is missing and how to fix it")
    p = sub.add_parser("settings", help="every EMBER_* environment setting: meaning, default, value now")
    p.add_argument("--set", action="store_true", help="only the settings set in this environment")
    p = sub.add_parser("ops", help="the op table: kinds, native signatures, autocast policies")
    p.add_argument("--device", help="also show which ops this device computes natively, e.g. opencl:0")
    p.add_argument("--markdown", action="store_true", help="print Markdown (docs/ops.md is this without --device)")
    p = sub.add_parser("memory-report", help="plot reserved vs in-use memory of a run (memory.csv) as a PNG")
    p.add_argument("path", type=Path, help="a run directory holding memory.csv, or the CSV itself")
    p.add_argument("-o", "--output", type=Path, help="the PNG to write (default: memory.png beside the CSV)")
    p.add_argument("--title", help="the plot's title")
    sub.add_parser("train", help="train an example model (ember train --help)", add_help=False)
    sub.add_parser(
        "onnx", help="inspect ONNX models, list the ONNX ops ember imports (ember onnx --help)", add_help=False
    )
    if argv and argv[0] == "train":
        return cmd_train(argparse.Namespace(), argv[1:])
    if argv and argv[0] == "onnx":
        return cmd_onnx(argv[1:])
    args = parser.parse_args(argv)
    commands: dict[str, Callable[[argparse.Namespace], int]] = {
        "plugins": cmd_plugins,
        "devices": cmd_devices,
        "doctor": cmd_doctor,
        "settings": cmd_settings,
        "ops": cmd_ops,
        "memory-report": cmd_memory_report,
    }
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return commands[args.command](args)
    except BrokenPipeError:  # `ember ops | head`: the reader left; say nothing more
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - the interpreter flushes it at exit
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

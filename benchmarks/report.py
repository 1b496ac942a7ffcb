"""The record of a run: machine, OS, versions, the ember device's ``describe()`` and the date
(:func:`environment`), and the results table as text or Markdown."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .clocks import low_text

__all__ = ["environment", "torch_info", "format_table", "format_text", "format_markdown"]

_REPO = Path(__file__).resolve().parent.parent
_LIBRARIES = ("numpy", "scipy", "torch", "cupy")
#: environment variables that change the figures (thread pools, ember settings), recorded when set
_ENV_PREFIXES = ("OMP_", "OPENBLAS_", "MKL_", "GOTO_", "EMBER_", "CUDA_VISIBLE_DEVICES", "OCL_ICD_VENDORS")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _usable_cores() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


def _version(module: str) -> str:
    if importlib.util.find_spec(module) is None:
        return "not installed"
    loaded = sys.modules.get(module)
    if loaded is not None and hasattr(loaded, "__version__"):
        return str(loaded.__version__)
    for dist in importlib.metadata.packages_distributions().get(module, []):
        return importlib.metadata.version(dist)
    return "unknown"


def _ember_versions() -> dict[str, str]:
    """Every installed ember distribution (core and plugins) with its version."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().replace("_", "-").startswith("ember"):
            found[name] = dist.version
    return dict(sorted(found.items()))


def _git() -> dict[str, Any]:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=_REPO, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def torch_info(torch_device: str) -> dict[str, Any]:
    """The torch peer's device, threads and TF32 settings (empty if torch was not imported)."""
    if "torch" not in sys.modules:
        return {}
    import torch

    info: dict[str, Any] = {
        "device": torch_device,
        "threads": torch.get_num_threads(),
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
    }
    if torch_device.startswith("cuda") and torch.cuda.is_available():
        info["cuda_device"] = torch.cuda.get_device_name(torch.device(torch_device))
        info["cuda_version"] = torch.version.cuda
    return info


def environment(device: Any, torch_device: str) -> dict[str, Any]:
    """Machine, OS, Python, library versions, the ember device and the date of this run."""
    try:
        describe: dict[str, Any] = dict(device.describe())
    except Exception as exc:  # the device may not exist here; the run still reports the peers
        describe = {"error": f"{type(exc).__name__}: {exc}"}
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "cpu": _cpu_model(),
            "cores": os.cpu_count(),
            "usable_cores": _usable_cores(),
            "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        },
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "versions": {**_ember_versions(), **{m: _version(m) for m in _LIBRARIES}},
        "ember_device": str(device),
        "ember_describe": describe,
        "torch": torch_info(torch_device),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)},
        "git": _git(),
    }


# -- formatting ------------------------------------------------------------------------------
def _derived_text(derived: dict[str, Any] | None) -> str:
    if not derived:
        return ""
    value, unit = derived["value"], derived["unit"]
    if unit == "FLOP/s":
        return f"{value / 1e12:.2f} TFLOP/s" if value >= 1e12 else f"{value / 1e9:.1f} GFLOP/s"
    if unit == "B/s":
        return f"{value / 1e9:.1f} GB/s"
    return f"{value:.3g} {unit}"


def _check_text(check: dict[str, Any] | None) -> str:
    if not check:
        return ""
    if check["status"] == "ok":
        return f"ok ({check['max_rel_err']:.1e})"
    if check["status"] == "mismatch":
        return f"MISMATCH {check['worst']} ({check['max_rel_err']:.1e} > {check['tolerance']:.0e})"
    return f"{check['status']}: {check.get('reason', '')}"


def _time_text(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return row["status"]
    ms = row["median_ms"]
    return f"{ms:.4g}" if ms < 1000 else f"{ms:.0f}"


def format_table(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per workload and implementation. A row that did not run says
    why in its last column; a peer row that ran shows its cross-check with ember there."""
    header = ["workload", "size", "impl", "N", "median ms", "throughput", "ember/impl", "check / note"]
    rows = []
    for entry in report["workloads"]:
        for i, row in enumerate(entry["impls"]):
            ok = row["status"] == "ok"
            ratio = row.get("ember_ratio")
            note = _check_text(row.get("check")) if ok else row.get("reason", "")
            low = low_text(row.get("sm_clock_mhz"))  # timed at a lowered clock
            if low:
                note = f"{note}; {low}" if note else low
            pool = row.get("pool")
            if pool and (pool["allocations"] or pool["frees"]):  # the pool had not settled: driver calls timed
                note = f"{note}; " if note else ""
                note += f"pool {pool['allocations']} allocs / {pool['frees']} frees"
            rows.append(
                [
                    f"{entry['id']} {entry['title']}" if i == 0 else "",
                    entry["size"] if i == 0 else "",
                    row["label"],
                    str(entry["iters"]) if ok else "",
                    _time_text(row),
                    _derived_text(row.get("derived")),
                    f"{ratio:.2f}" if ratio is not None else "",
                    note,
                ]
            )
    return header, rows


def _summary_lines(report: dict[str, Any]) -> list[str]:
    meta, settings = report["meta"], report["settings"]
    mach = meta["machine"]
    load = mach.get("load_average")
    load_text = f", load average {' / '.join(f'{v:.2f}' for v in load)} at start" if load else ""
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    torch_info = meta.get("torch") or {}
    torch_text = ""
    if torch_info:
        torch_text = f"; torch on {torch_info['device']}, threads: {torch_info['threads']}"
        if "cuda_device" in torch_info:
            torch_text += f" ({torch_info['cuda_device']}, CUDA {torch_info['cuda_version']})"
    describe = ", ".join(f"{k}={v}" for k, v in meta["ember_describe"].items())
    git = meta["git"]
    git_text = f"git {git['commit'][:10]}{' + local changes' if git['dirty'] else ''}" if git.get("commit") else ""
    mode = f"{settings['sizes']} sizes"
    if settings["sizes"] == "quick":
        mode += " (QUICK: smoke-test sizes, not figures)"
    heat_ms = 1e3 * (settings.get("heat_s") or 0.0)
    heat_text = f" + {heat_ms:.0f} ms of untimed steps" if heat_ms else ""
    env = meta.get("env") or {}
    env_text = "; environment: " + " ".join(f"{k}={v}" for k, v in env.items()) if env else ""
    return [
        f"date: {meta['date']}",
        f"machine: {mach['cpu']}, {mach['cores']} cores ({mach['usable_cores']} usable){load_text}",
        f"OS: {meta['os']}; Python {meta['python']}",
        f"versions: {versions}{torch_text}{env_text}",
        f"ember device: {meta['ember_device']} ({describe})",
        f"protocol: float32, seed 0, warm-up {settings['warmup']}{heat_text}, median of N timed iterations, {mode}"
        + (f"; {git_text}" if git_text else ""),
    ]


def format_text(report: dict[str, Any]) -> str:
    """The report as aligned plain text (what the runner prints)."""
    header, rows = format_table(report)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    right = {3, 4, 5, 6}  # numbers

    def line(cells: list[str]) -> str:
        padded = (c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        return "  ".join(padded).rstrip()

    out = [f"Ember benchmarks on {report['meta']['ember_device']}", *_summary_lines(report), ""]
    out.append(line(header))
    out.append("  ".join("-" * w for w in widths))
    out.extend(line(r) for r in rows)
    return "\n".join(out) + "\n"


def format_markdown(report: dict[str, Any]) -> str:
    """A dated Markdown section (a ``###`` heading, machine and versions, the table), to be
    placed under the device's ``## Results`` heading of BENCHMARKS.md."""
    header, rows = format_table(report)
    date = report["meta"]["date"].replace("T", " ").replace("+00:00", " UTC")
    out = [f"### {report['meta']['ember_device']} — {date}", ""]
    out.extend(f"- {s}" for s in _summary_lines(report)[1:])  # the date is in the heading
    out.append("")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    out.extend("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)
    return "\n".join(out) + "\n"

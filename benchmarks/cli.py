"""Command line: ``python -m benchmarks [W1 W5 ...] --device cpu ...``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .harness import HEAT_S
from .peers import PEERS
from .report import environment, format_markdown, format_text, torch_info
from .runner import WORKLOADS, Settings, exit_status, run

__all__ = ["main", "parser"]

_GPU_KINDS_HINT = "cpu | opencl:0 | wgpu:0 | cuda:0 | any ember device spec"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run the standard workloads (shared/WORKLOADS.md) for ember and its peers side by side.",
    )
    p.add_argument("workloads", nargs="*", metavar="W", help=f"workloads to run (default all: {' '.join(WORKLOADS)})")
    p.add_argument("--device", default="cpu", help=f"ember device ({_GPU_KINDS_HINT}); default cpu")
    p.add_argument(
        "--peers",
        help=f"comma-separated peers ({','.join(PEERS)}) or 'none'. Default: all, with numpy skipped on GPU "
        "runs and cupy on CPU runs; peers named here always run",
    )
    sizes = p.add_mutually_exclusive_group()
    sizes.add_argument("--gpu-sizes", action="store_true", help="GPU sizes (the default for a non-cpu device)")
    sizes.add_argument("--cpu-sizes", action="store_true", help="CPU sizes (the default for the cpu device)")
    sizes.add_argument("--quick", action="store_true", help="tiny sizes and 2 iterations: tests the runner, not speed")
    p.add_argument("--iters", type=int, help="timed iterations per workload (default: per workload)")
    p.add_argument("--warmup", type=int, help="warm-up iterations (default 3; 1 with --quick)")
    p.add_argument(
        "--heat-ms",
        type=float,
        help="then untimed steps for this long, so a GPU has raised its clocks again after the compiles "
        "(default 500; 0 with --quick)",
    )
    p.add_argument("--no-check", action="store_true", help="skip the ember-vs-peer correctness cross-check")
    p.add_argument("--torch-device", help="device for the torch peer (default: cuda on GPU runs, cpu on CPU runs)")
    p.add_argument("--json", type=Path, metavar="FILE", help="write the whole report as JSON")
    p.add_argument("--markdown", type=Path, metavar="FILE", help="append a dated Markdown section to FILE")
    p.add_argument("--list", action="store_true", help="list the workloads and their sizes, then exit")
    return p


def _workloads(names: list[str], p: argparse.ArgumentParser) -> list[str]:
    chosen = []
    for name in names or list(WORKLOADS):
        wid = name.upper()
        if wid not in WORKLOADS:
            p.error(f"unknown workload {name!r}; choose from {' '.join(WORKLOADS)}")
        if wid not in chosen:
            chosen.append(wid)
    return chosen


def _peers(spec: str | None, p: argparse.ArgumentParser) -> tuple[list[str], bool]:
    if spec is None:
        return list(PEERS), False
    if spec.strip().lower() == "none":
        return [], True
    names = [s.strip().lower() for s in spec.split(",") if s.strip()]
    for name in names:
        if name not in PEERS:
            p.error(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    return list(dict.fromkeys(names)), True


def _list() -> str:
    lines = []
    for wid, m in WORKLOADS.items():
        sizes = "; ".join(f"{k}: {m.describe(m.SIZES[k])}" for k in ("cpu", "gpu", "quick"))
        builders = ", ".join(b for b in ("ember", *PEERS) if hasattr(m, b))
        lines.append(f"{wid}  {m.TITLE}\n    {sizes}\n    implementations: {builders}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.list:
        sys.stdout.write(_list())
        return 0
    import ember as em

    try:
        device = em.Device(args.device)
    except (ValueError, TypeError) as exc:
        p.error(str(exc))
    gpu_device = device.kind != "cpu"
    if args.quick:
        sizes = "quick"
    elif args.gpu_sizes or (gpu_device and not args.cpu_sizes):
        sizes = "gpu"
    else:
        sizes = "cpu"
    peers, explicit = _peers(args.peers, p)
    settings = Settings(
        workloads=_workloads(args.workloads, p),
        device=str(device),
        peers=peers,
        explicit_peers=explicit,
        sizes=sizes,
        iters=args.iters,
        warmup=args.warmup if args.warmup is not None else (1 if args.quick else 3),
        heat_s=(args.heat_ms if args.heat_ms is not None else 0.0 if args.quick else HEAT_S * 1e3) / 1e3,
        check=not args.no_check,
        torch_device=args.torch_device or ("cuda" if gpu_device or sizes == "gpu" else "cpu"),
    )
    if settings.iters is not None and settings.iters < 1:
        p.error("--iters must be at least 1")
    if settings.warmup < 0:
        p.error("--warmup must be >= 0")
    if settings.heat_s < 0:
        p.error("--heat-ms must be >= 0")
    meta = environment(device, settings.torch_device)  # before the run: the load average at start
    entries = run(settings, device)
    meta["torch"] = torch_info(settings.torch_device)  # torch is imported by the run, if at all
    report: dict[str, Any] = {
        "meta": meta,
        "settings": vars(settings),
        "workloads": entries,
        "exit_status": exit_status(entries),
    }
    sys.stdout.write(format_text(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    if args.markdown:
        with args.markdown.open("a", encoding="utf-8") as fh:
            fh.write("\n" + format_markdown(report))
    return report["exit_status"]

"""Peak device memory of W3 and W4 under each pool strategy, beside PyTorch's, in one run.

For each workload and each strategy of ``ember.memory`` (adaptive, static, exclusive) the
device's pools switch strategy (their cache released), their peaks restart, the workload's
ember step is built and run ``--steps`` times. One untimed warm-up compiles the kernels first,
and ``--rounds`` rounds over the strategies keep each one's best median step time (the machine
may be shared). The table shows peak reserved, peak in use, their ratio, the ratio to static
and the median step time. On a CUDA device torch runs the same step and
``torch.cuda.max_memory_reserved`` / ``max_memory_allocated`` stand beside ember's.

    python -m benchmarks.memory --device opencl:0              # CPU sizes on a non-GPU device
    python -m benchmarks.memory --device cuda:0 --gpu-sizes --json mem.json --markdown BENCHMARKS.md
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from . import w3_cnn, w4_transformer

WORKLOADS: dict[str, ModuleType] = {"W3": w3_cnn, "W4": w4_transformer}
MIB = 2**20


def _pools(device: Any) -> list[Any]:
    return device.memory.pools()


def _settle(device: Any) -> None:
    gc.collect()
    device.synchronize()
    device.memory.empty_cache()
    for pool in _pools(device):
        pool.reset_peaks()


def run_ember(module: ModuleType, device: Any, size: dict[str, int], strategy: str, steps: int) -> dict[str, Any]:
    """One workload under one strategy: peaks over building the step and running it ``steps`` times."""
    import ember as em

    dev = em.Device(device, memory=strategy)
    _settle(dev)
    base = dev.memory_stats()
    case = module.ember(dev, size)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        out = case.step()
        case.sync()
        times.append(time.perf_counter() - start)
        del out
    stats = dev.memory_stats()
    del case
    gc.collect()
    dev.synchronize()
    return {
        "strategy": strategy,
        "peak_reserved_bytes": stats["peak_reserved_bytes"],
        "peak_in_use_bytes": stats["peak_in_use_bytes"],
        "base_in_use_bytes": base["in_use_bytes"],
        "allocations": stats["allocations"] - (base["allocations"] or 0),
        "frees": stats["frees"] - (base["frees"] or 0),
        "median_step_s": statistics.median(times[1:] or times),
        "first_step_s": times[0],
    }


def run_torch(module: ModuleType, size: dict[str, int], steps: int) -> dict[str, Any] | None:
    """The torch step on CUDA with its caching allocator's peaks; None without torch or CUDA."""
    try:
        import torch as th
    except ImportError:
        return None
    if not th.cuda.is_available():
        return None
    th.backends.cuda.matmul.allow_tf32 = False
    th.backends.cudnn.allow_tf32 = False
    gc.collect()
    th.cuda.empty_cache()
    th.cuda.reset_peak_memory_stats()
    case = module.torch(th.device("cuda"), size)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        out = case.step()
        case.sync()
        times.append(time.perf_counter() - start)
        del out
    result = {
        "strategy": f"torch {th.__version__}",
        "peak_reserved_bytes": int(th.cuda.max_memory_reserved()),
        "peak_in_use_bytes": int(th.cuda.max_memory_allocated()),
        "median_step_s": statistics.median(times[1:] or times),
        "first_step_s": times[0],
    }
    del case
    gc.collect()
    th.cuda.empty_cache()
    return result


def table(results: dict[str, list[dict[str, Any]]], device: str, sizes: str, steps: int) -> str:
    """The Markdown table of every workload x strategy."""
    lines = [
        f"Peak device memory, {device}, {sizes} sizes, {steps} training steps (`python -m benchmarks.memory`)",
        "",
        "| workload | strategy | peak reserved MiB | peak in use MiB | reserved / in use | "
        "vs static reserved | median step ms | allocations | frees |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for wid, rows in results.items():
        static = next((r["peak_reserved_bytes"] for r in rows if r["strategy"] == "static"), None)
        for r in rows:
            ratio = r["peak_reserved_bytes"] / r["peak_in_use_bytes"] if r["peak_in_use_bytes"] else float("nan")
            vs = f"{r['peak_reserved_bytes'] / static:.2f}x" if static else ""
            lines.append(
                f"| {wid} | {r['strategy']} | {r['peak_reserved_bytes'] / MIB:.1f} | "
                f"{r['peak_in_use_bytes'] / MIB:.1f} | {ratio:.3f} | {vs} | {r['median_step_s'] * 1e3:.1f} | "
                f"{r.get('allocations', '')} | {r.get('frees', '')} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import ember as em
    from ember.memory import STRATEGIES

    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", default=list(WORKLOADS), help="W3 and/or W4 (default both)")
    parser.add_argument("--device", default="opencl:0", help="ember device spec (default opencl:0)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--gpu-sizes", action="store_true", help="GPU sizes (default on cuda)")
    group.add_argument("--cpu-sizes", action="store_true", help="CPU sizes (default elsewhere)")
    group.add_argument("--quick", action="store_true", help="tiny sizes: tests the script, not memory")
    parser.add_argument("--steps", type=int, default=20, help="training steps per strategy (default 20)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds over the strategies; the step time is the best round's median"
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated (default all)")
    parser.add_argument("--json", type=Path, help="write every number to this file")
    parser.add_argument("--markdown", type=Path, help="append the table to this file (e.g. BENCHMARKS.md)")
    args = parser.parse_args(argv)
    unknown = [w for w in args.workloads if w.upper() not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}: expected W3 or W4")
    device = em.Device(args.device)
    if not device.memory.pools():
        parser.error(
            f"{device} has no ember buffer pool to measure (memory_stats note: {device.memory_stats()['note']})"
        )
    sizes = (
        "quick" if args.quick else "gpu" if args.gpu_sizes or (device.kind == "cuda" and not args.cpu_sizes) else "cpu"
    )
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    results: dict[str, list[dict[str, Any]]] = {}
    for wid in args.workloads:
        module = WORKLOADS[wid.upper()]
        size = module.SIZES[sizes]
        run_ember(module, device, size, "static", 2)  # compiles the kernels: no strategy pays for that
        rows = [run_ember(module, device, size, s, args.steps) for s in strategies]
        for _ in range(args.rounds - 1):  # the shared machine's noise: keep each strategy's best median
            for row, s in zip(rows, strategies):
                again = run_ember(module, device, size, s, args.steps)
                row["median_step_s"] = min(row["median_step_s"], again["median_step_s"])
        peer = run_torch(module, size, args.steps) if device.kind == "cuda" else None
        if peer is not None:
            rows.append(peer)
        results[wid.upper()] = rows
        print(f"{wid.upper()} ({module.describe(size)}) done", file=sys.stderr)
    text = table(results, str(device), sizes, args.steps)
    print(text)
    if args.json:
        args.json.write_text(
            json.dumps({"device": str(device), "sizes": sizes, "steps": args.steps, "results": results}, indent=1)
        )
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as f:
            f.write(f"\n## Memory ({time.strftime('%Y-%m-%d')})\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

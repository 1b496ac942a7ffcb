"""Peak device memory of W3 and W4 under each pool strategy, beside PyTorch's, in one run.

For each workload and each strategy of ``ember.memory`` (adaptive, static, exclusive) the
device's pools switch strategy (their cache released), their peaks restart, the workload's
ember step is built, run untimed for ``--heat-ms`` (a GPU raises its clocks again; the peaks count
these steps too) and then ``--steps`` timed times. One untimed warm-up compiles the kernels first,
and ``--rounds`` rounds over the strategies keep each one's best median step time (the machine
may be shared). The table shows peak reserved, peak in use, their ratio, the ratio to static
and the median step time. On a CUDA device torch runs the same step and
``torch.cuda.max_memory_reserved`` / ``max_memory_allocated`` stand beside ember's.

On the CPU backend (numpy owns the memory: no pool, no strategies) the one row is numpy's peak
in use, from ``tracemalloc`` (numpy reports its allocations to it): what autodiff keeps alive.

    python -m benchmarks.memory --device opencl:0              # CPU sizes on a non-GPU device
    python -m benchmarks.memory --device cpu                   # autodiff's peak in use, numpy's bytes
    python -m benchmarks.memory --device cuda:0 --gpu-sizes --json mem.json --markdown BENCHMARKS.md
    python -m benchmarks.memory --h200 --out "$OUT"            # cuda, opencl and wgpu of the GPU, one run

``--h200`` measures every GPU backend of the machine in turn (cuda:0 and the NVIDIA devices of
opencl and wgpu, each in a subprocess with its own time limit, ``--device-limit``), at GPU sizes,
and writes ``memory-<backend>.json``, ``memory-log.txt`` and ``memory.md`` (every table, torch's rows from the
cuda run beside each) under ``--out``. ``STEPS=memory bash .ci/h200.sh`` runs it there.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from types import ModuleType
from typing import Any

from . import w3_cnn, w4_transformer
from .clocks import low_text, sm_clock, span
from .harness import HEAT_S, heat

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


def run_ember(
    module: ModuleType, device: Any, size: dict[str, int], strategy: str, steps: int, heat_s: float = 0.0
) -> dict[str, Any]:
    """One workload under one strategy: peaks over building the step, ``heat_s`` of untimed steps
    (:func:`.harness.heat`) and ``steps`` timed ones."""
    import ember as em

    dev = em.Device(device, memory=strategy)
    _settle(dev)
    base = dev.memory_stats()
    # adaptive's step plan: blocks served from its arena, plans dropped, plans refused
    plan_keys = ("planned", "plan_drops", "plan_refusals")
    plan0 = {k: sum(getattr(p, k, 0) for p in _pools(dev)) for k in plan_keys}
    case = module.ember(dev, size)
    heated = heat(case, heat_s) if heat_s > 0 else 0
    clock_before = sm_clock()  # the SM clock before the timed steps (after them: span below)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        out = case.step()
        case.sync()
        times.append(time.perf_counter() - start)
        del out
    clock = span(clock_before, sm_clock())
    stats = dev.memory_stats()
    plan = {k: sum(getattr(p, k, 0) for p in _pools(dev)) - plan0[k] for k in plan_keys}
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
        "median_step_s": statistics.median(times if heated else times[1:] or times),
        "first_step_s": times[0],
        "heat_steps": heated,
        **({"sm_clock_mhz": clock} if clock else {}),
        **plan,
    }


def run_numpy(module: ModuleType, device: Any, size: dict[str, int], steps: int) -> dict[str, Any]:
    """The CPU backend: the peak of numpy's allocations (tracemalloc) over ``steps`` steps, above what
    was allocated before them (inputs and parameters), after one untraced step."""
    import ember as em

    dev = em.Device(device)
    case = module.ember(dev, size)
    case.step()
    case.sync()
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    times = []
    try:
        for _ in range(steps):
            start = time.perf_counter()
            out = case.step()
            case.sync()
            times.append(time.perf_counter() - start)
            del out
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del case
    gc.collect()
    return {
        "strategy": "host (tracemalloc)",
        "peak_reserved_bytes": None,
        "peak_in_use_bytes": peak - base,
        "median_step_s": statistics.median(times[1:] or times),
        "first_step_s": times[0],
        "note": "step times are slowed by tracemalloc",
    }


def run_torch(module: ModuleType, size: dict[str, int], steps: int, heat_s: float = 0.0) -> dict[str, Any] | None:
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
    heated = heat(case, heat_s) if heat_s > 0 else 0
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
        "median_step_s": statistics.median(times if heated else times[1:] or times),
        "first_step_s": times[0],
    }
    del case
    gc.collect()
    th.cuda.empty_cache()
    return result


def table(results: dict[str, list[dict[str, Any]]], device: str, sizes: str, steps: int) -> str:
    """The Markdown table of every workload x strategy."""
    lines = [
        f"Peak device memory, {device}, {sizes} sizes, {steps} timed training steps after the untimed ones "
        "(`python -m benchmarks.memory`)",
        "",
        "| workload | strategy | peak reserved MiB | peak in use MiB | reserved / in use | "
        "vs static reserved | median step ms | vs static step | allocations | frees | planned / drops / refusals |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    low: list[str] = []  # rows timed at a lowered GPU clock
    for wid, rows in results.items():
        static = next((r for r in rows if r["strategy"] == "static"), None)
        for r in rows:
            reserved, in_use = r["peak_reserved_bytes"], r["peak_in_use_bytes"]
            ratio = f"{reserved / in_use:.3f}" if reserved is not None and in_use else ""
            vs = f"{reserved / static['peak_reserved_bytes']:.2f}x" if static and reserved is not None else ""
            step = f"{r['median_step_s'] / static['median_step_s']:.2f}x" if static else ""
            shown = f"{reserved / MIB:.1f}" if reserved is not None else "-"
            # adaptive's step plan: blocks served from its arena, plans dropped, plans refused
            plan = f"{r['planned']} / {r['plan_drops']} / {r['plan_refusals']}" if r.get("planned") is not None else ""
            slow = low_text(r.get("sm_clock_mhz"))  # timed at a lowered clock
            if slow:
                low.append(f"{wid} {r['strategy']}: {slow}")
            lines.append(
                f"| {wid} | {r['strategy']} | {shown} | {in_use / MIB:.1f} | {ratio} | {vs} | "
                f"{r['median_step_s'] * 1e3:.1f} | {step} | {r.get('allocations', '')} | {r.get('frees', '')} | "
                f"{plan} |"
            )
    if low:
        lines += ["", "Timed at a lowered GPU clock: " + "; ".join(low)]
    return "\n".join(lines)


def _hits(pool: Any, sizes: tuple[int, ...], n: int) -> None:
    for _ in range(n):
        for s in sizes:
            pool.acquire(s)  # the block dies at once: back to the free list


def pool_micro(repeats: int = 7, n: int = 20000) -> dict[str, float]:
    """The pool's own cost, over a fake driver (no device): ns per acquire + release of a size in the
    free lists (the hot path of every op), and per miss (every size new: carved from a page, or a
    driver buffer); medians of ``repeats``."""
    from ember.memory import BufferPool

    counter = iter(range(1 << 62))

    def make(paged: bool) -> Any:
        sub = (lambda page, offset, nbytes: (page, offset, nbytes)) if paged else None
        return BufferPool(lambda nbytes: next(counter), lambda raw: None, strategy="adaptive", sub_allocate=sub)

    sizes = (256, 4096, 40000, 3 << 20)
    small = [512 * (k + 1) for k in range(64)]
    out: dict[str, float] = {}
    for paged in (False, True):
        tag = "_paged" if paged else ""
        pool = make(paged)
        _hits(pool, sizes, 1)  # each size once: cached from now on
        hit, miss = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            _hits(pool, sizes, n)
            hit.append((time.perf_counter() - start) / (n * len(sizes)))
            fresh = make(paged)
            start = time.perf_counter()
            held = [fresh.acquire(s) for s in small]
            miss.append((time.perf_counter() - start) / len(small))
            del held
        out[f"hit_ns{tag}"] = statistics.median(hit) * 1e9
        out[f"miss_ns{tag}"] = statistics.median(miss) * 1e9
    return out


def measure(args: argparse.Namespace, device: Any, sizes: str) -> dict[str, list[dict[str, Any]]]:
    """Every workload x strategy on one device (and torch beside on cuda); the JSON is rewritten after each."""
    from ember.memory import STRATEGIES

    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise SystemExit(f"--strategies: unknown {', '.join(unknown)}; expected some of {', '.join(STRATEGIES)}")
    results: dict[str, list[dict[str, Any]]] = {}
    for wid in args.workloads:
        module = WORKLOADS[wid.upper()]
        size = dict(module.SIZES[sizes])
        if args.batch:
            size["batch"] = args.batch
        if device.kind == "cpu":
            rows = [run_numpy(module, device, size, args.steps)]
        else:
            run_ember(module, device, size, "static", 2)  # compiles the kernels: no strategy pays for that
            heat_s = args.heat_ms / 1e3
            rows = [run_ember(module, device, size, s, args.steps, heat_s) for s in strategies]
            for _ in range(args.rounds - 1):  # the shared machine's noise: keep each strategy's best median
                for row, s in zip(rows, strategies):
                    again = run_ember(module, device, size, s, args.steps, heat_s)
                    row["median_step_s"] = min(row["median_step_s"], again["median_step_s"])
        peer = run_torch(module, size, args.steps, args.heat_ms / 1e3) if device.kind == "cuda" else None
        if peer is not None:
            rows.append(peer)
        results[wid.upper()] = rows
        print(f"{device} {wid.upper()} ({module.describe(size)}) done", file=sys.stderr)
        if args.json:
            args.json.write_text(
                json.dumps({"device": str(device), "sizes": sizes, "steps": args.steps, "results": results}, indent=1)
            )
    return results


def _gpu_devices(py: str) -> list[str]:
    """cuda:0 and the NVIDIA devices of opencl and wgpu that this machine has (asked in a subprocess each,
    so a backend that cannot load costs only its own line)."""
    probe = {
        "cuda": "import ember as em; d = em.Device('cuda:0'); d.memory.pools(); print('cuda:0')",
        "opencl": (
            "from ember_opencl.runtime import device_list\n"
            "for i, (p, d) in enumerate(device_list()):\n"
            "    if 'NVIDIA' in f'{p.name} {d.name}'.upper():\n"
            "        print(f'opencl:{i}'); break"
        ),
        "wgpu": (
            "from ember_wgpu.adapters import adapters\n"
            "for i, a in enumerate(adapters()):\n"
            "    n = f\"{a.info.get('device', '')} {a.info.get('backend_type', '')}\"\n"
            "    if 'NVIDIA' in n.upper() and 'Vulkan' in n:\n"
            "        print(f'wgpu:{i}'); break"
        ),
    }
    found = []
    for kind, code in probe.items():
        try:
            done = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            print(f"{kind}: probing the devices timed out", file=sys.stderr)
            continue
        spec = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
        if spec:
            found.append(spec[0])
        else:
            print(
                f"{kind}: no NVIDIA device ({done.stderr.strip().splitlines()[-1:] or 'none listed'})", file=sys.stderr
            )
    return found


def run_h200(args: argparse.Namespace) -> int:
    """Every GPU backend in turn, each in a subprocess with its own time limit; memory.md gathers the tables."""
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    devices = [d.strip() for d in args.devices.split(",") if d.strip()] if args.devices else _gpu_devices(py)
    summary = [f"# Memory strategies, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", ""]
    torch_rows: dict[str, dict[str, Any]] = {}
    status = 0
    for spec in devices:
        kind = spec.split(":")[0]
        cmd = [
            py,
            "-m",
            "benchmarks.memory",
            *args.workloads,
            "--device",
            spec,
            "--quick" if args.quick else "--gpu-sizes",
        ]
        cmd += ["--steps", str(args.steps), "--rounds", str(args.rounds), "--strategies", args.strategies]
        cmd += ["--heat-ms", str(args.heat_ms)]
        cmd += ["--batch", str(args.batch)] if args.batch else []
        cmd += ["--json", str(out / f"memory-{kind}.json")]
        start = time.perf_counter()
        with open(out / "memory-log.txt", "a", encoding="utf-8") as log:
            log.write(f"===== {spec}: {' '.join(cmd[1:])}\n")
            log.flush()
            try:
                code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.device_limit).returncode
            except subprocess.TimeoutExpired:
                code = 124
        print(f"{spec}: exit {code} after {time.perf_counter() - start:.0f} s", file=sys.stderr)
        status = status or code
        path = out / f"memory-{kind}.json"
        if not path.exists():
            summary += [f"{spec}: no results (exit {code}; memory-log.txt)", ""]
            continue
        data = json.loads(path.read_text())
        results = data["results"]
        if kind == "cuda":
            torch_rows = {w: r for w, rows in results.items() for r in rows if r["strategy"].startswith("torch")}
        else:
            for w, rows in results.items():
                if w in torch_rows:
                    rows.append({**torch_rows[w], "strategy": torch_rows[w]["strategy"] + " (cuda)"})
        note = "" if code == 0 else f" (exit {code}: stopped early, the workloads done so far)"
        summary += [table(results, spec, data["sizes"], data["steps"]) + note, ""]
    (out / "memory.md").write_text("\n".join(summary), encoding="utf-8")
    print("\n".join(summary))
    return status


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
    parser.add_argument("--steps", type=int, default=20, help="timed training steps per strategy (default 20)")
    parser.add_argument(
        "--heat-ms",
        type=float,
        help=f"untimed steps for this long before the timed ones (default {HEAT_S * 1e3:.0f}; 0 with --quick)",
    )
    parser.add_argument("--batch", type=int, help="the workloads' batch size instead of the sizes' (e.g. W3 at 8)")
    parser.add_argument(
        "--rounds", type=int, default=2, help="rounds over the strategies; the step time is the best round's median"
    )
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma-separated (default all)")
    parser.add_argument("--json", type=Path, help="write every number to this file")
    parser.add_argument("--markdown", type=Path, help="append the table to this file (e.g. BENCHMARKS.md)")
    parser.add_argument("--h200", action="store_true", help="cuda, opencl and wgpu of the GPU in turn (--out)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "memory-out")), help="--h200's folder")
    parser.add_argument("--devices", help="--h200: comma-separated device specs instead of the GPU's")
    parser.add_argument("--device-limit", type=int, default=150, help="--h200: seconds per device (default 150)")
    parser.add_argument("--pool-micro", action="store_true", help="time the pool itself (fake driver) and exit")
    args = parser.parse_args(argv)
    if args.pool_micro:
        micro = pool_micro()
        print(" ".join(f"{k}={v:.0f}" for k, v in micro.items()), "(median ns per acquire + release)")
        return 0
    unknown = [w for w in args.workloads if w.upper() not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}: expected W3 or W4")
    if args.heat_ms is None:
        args.heat_ms = 0.0 if args.quick else HEAT_S * 1e3
    if args.heat_ms < 0:
        parser.error("--heat-ms must be >= 0")
    if args.h200:
        return run_h200(args)
    device = em.Device(args.device)
    if device.kind != "cpu" and not device.memory.pools():
        parser.error(
            f"{device} has no ember buffer pool to measure (memory_stats note: {device.memory_stats()['note']})"
        )
    sizes = (
        "quick" if args.quick else "gpu" if args.gpu_sizes or (device.kind == "cuda" and not args.cpu_sizes) else "cpu"
    )
    results = measure(args, device, sizes)
    text = table(results, str(device), f"{sizes} (batch {args.batch})" if args.batch else sizes, args.steps)
    print(text)
    if args.markdown:
        with open(args.markdown, "a", encoding="utf-8") as f:
            f.write(f"\n## Memory ({time.strftime('%Y-%m-%d')})\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

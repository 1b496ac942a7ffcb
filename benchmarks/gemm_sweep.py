"""GEMM sweep (issue 11): time every large-GEMM candidate of a backend next to cuBLAS, keep the winner.

``python -m benchmarks.gemm_sweep --backend opencl --device 0 --json /tmp/sweep-opencl.json`` times
each tiling of ``ember_<backend>.tune.LARGE`` (checked against numpy float64 first, as the tuner
does) on float32 squares (default 4096, 8192, 2048), plus cuBLAS through ``cupy.matmul`` and
``torch.matmul`` with TF32 off, and records the candidate with the best geometric-mean TFLOP/s
over the two largest sizes as the tuner's choice for their shape class (so the next matmul of
that class runs it). ``--report A.json B.json`` prints one table of several runs: TFLOP/s and the
ratio to cuBLAS per size. Each size stops starting candidates after ``--budget`` seconds.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

os.environ["CUPY_TF32"] = "0"  # read when cupy is imported: cuBLAS in full fp32, like ember

__all__ = ["main", "sweep", "peers", "report"]


def _best(run: Any, sync: Any, reps: int) -> float:
    run()
    sync()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        run()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def peers(sizes: list[int], reps: int) -> list[dict[str, Any]]:
    """cuBLAS (cupy) and torch.matmul rows, float32 with TF32 off; a missing peer gives an error row."""
    rows: list[dict[str, Any]] = []
    try:
        import cupy as cp  # noqa: PLC0415  (optional peer)

        for n in sizes:
            a = cp.random.standard_normal((n, n), dtype=cp.float32)
            b = cp.random.standard_normal((n, n), dtype=cp.float32)
            sec = _best(lambda a=a, b=b: cp.matmul(a, b), cp.cuda.Device().synchronize, reps)
            rows.append({"impl": "cuBLAS (cupy)", "n": n, "seconds": sec, "tflops": 2 * n**3 / sec / 1e12})
            del a, b
        cp.get_default_memory_pool().free_all_blocks()
    except Exception as exc:  # no cupy or no CUDA device: reported, not fatal
        rows.append({"impl": "cuBLAS (cupy)", "error": f"{type(exc).__name__}: {exc}"[:200]})
    try:
        import torch  # noqa: PLC0415  (optional peer)

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
        for n in sizes:
            a = torch.randn(n, n, device="cuda")
            b = torch.randn(n, n, device="cuda")
            sec = _best(lambda a=a, b=b: torch.matmul(a, b), torch.cuda.synchronize, reps)
            rows.append({"impl": "torch.matmul", "n": n, "seconds": sec, "tflops": 2 * n**3 / sec / 1e12})
            del a, b
        torch.cuda.empty_cache()
    except Exception as exc:
        rows.append({"impl": "torch.matmul", "error": f"{type(exc).__name__}: {exc}"[:200]})
    return rows


def sweep(
    backend: str, device: int, sizes: list[int], reps: int, budget: float, save: bool, limit: int | None = None
) -> dict[str, Any]:
    """Time ``LARGE`` of ``ember_<backend>.tune`` (its first ``limit``) at each size; record the winner
    over the two largest sizes for the shape class of the largest."""
    tune = importlib.import_module(f"ember_{backend}.tune")
    tuner = tune._TUNER
    rt = tuner.runtime(argparse.Namespace(device=device))
    choices = [tuner.config_type(*spec) for spec in tune.LARGE[:limit]]
    kept = [c for c in choices if tuner.fits(rt, c, "float32")]
    out: dict[str, Any] = {"backend": backend, "device": list(tuner.identity(rt)), "rows": []}
    out["skipped"] = [c.as_dict() for c in choices if c not in kept]
    speed: dict[Any, dict[int, float]] = {}
    for n in sizes:
        _, rows = tuner.tune(rt, "float32", n, n, n, choices=kept, budget_s=budget, reps=reps, save=False)
        for row in rows:
            cfg = tuner.config_type(**row[tuner.entry])
            item = {"impl": f"ember {backend}:{device}", "n": n, "config": row[tuner.entry]}
            if "gflops" in row:
                item.update(seconds=row["seconds"], tflops=row["gflops"] / 1e3)
                speed.setdefault(cfg, {})[n] = row["gflops"] / 1e3
            else:
                item["error"] = row["error"]
            out["rows"].append(item)
    top = sorted(sizes)[-2:]
    scored = {
        c: math.exp(sum(math.log(v[n]) for n in top) / len(top)) for c, v in speed.items() if all(n in v for n in top)
    }
    if scored:
        win = max(scored, key=scored.__getitem__)
        cls = tune.shape_class(top[-1], top[-1], top[-1])
        out["winner"] = {"config": win.as_dict(), "tflops_geomean": scored[win], "class": cls}
        if save:
            out["winner"]["recorded"] = tuner.record(rt, "float32", cls, win, scored[win] * 1e3)
            out["winner"]["store"] = str(tuner.store_for(rt).directory)
    return out


def _cfg_text(cfg: dict[str, Any]) -> str:
    return " ".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in cfg.items())


def report(paths: list[str]) -> str:
    """One table from sweep JSON files: per implementation and config, TFLOP/s and x cuBLAS per size."""
    runs = [json.load(open(p, encoding="utf-8")) for p in paths if os.path.exists(p)]
    blas: dict[int, float] = {}
    for run in runs:
        for r in run.get("peers", []):
            if r.get("impl", "").startswith("cuBLAS") and "tflops" in r:
                blas[r["n"]] = max(blas.get(r["n"], 0.0), r["tflops"])
    sizes = sorted({r["n"] for run in runs for r in run.get("rows", []) + run.get("peers", []) if "n" in r})
    table: dict[tuple[str, str], dict[int, str]] = {}
    for run in runs:
        for r in run.get("peers", []) + run.get("rows", []):
            key = (r["impl"], _cfg_text(r.get("config", {})))
            cell = table.setdefault(key, {})
            if "n" not in r:
                cell[0] = r.get("error", "?")
                continue
            if "tflops" in r:
                ratio = f" {r['tflops'] / blas[r['n']]:.2f}x" if r["n"] in blas else ""
                cell[r["n"]] = f"{r['tflops']:6.1f}{ratio}"
            else:
                cell[r["n"]] = r.get("error", "?")[:40]
    head = f"{'impl':<18} {'config':<52} " + " ".join(f"{str(n) + '^3 TFLOP/s, x cuBLAS':>26}" for n in sizes)
    lines = ["float32 GEMM, TF32 off; best of reps; x cuBLAS = ember / cupy.matmul at that size", head]
    for (impl, cfg), cell in table.items():
        if 0 in cell:
            lines.append(f"{impl:<18} {cfg:<52} {cell[0]}")
            continue
        lines.append(f"{impl:<18} {cfg:<52} " + " ".join(f"{cell.get(n, '-'):>26}" for n in sizes))
    for run in runs:
        if "backend" in run:
            win = run.get("winner")
            text = f"{_cfg_text(win['config'])} ({win['tflops_geomean']:.1f} TFLOP/s geomean)" if win else "none"
            rec = f"; recorded for class {win['class']}: {win.get('recorded')}" if win else ""
            lines.append(f"winner {run['backend']}: {text}{rec}")
            if run.get("skipped"):
                lines.append(f"  {run['backend']}: {len(run['skipped'])} candidates beyond the device's limits")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: sweep one backend (with the peers unless ``--no-peers``) or ``--report`` saved sweeps."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gemm_sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("opencl", "wgpu"))
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192, 2048])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--budget", type=float, default=30.0, help="seconds per size before no new candidate starts")
    ap.add_argument("--limit", type=int, help="time only the first LIMIT candidates (a quick check of the sweep)")
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-save", action="store_true", help="do not record the winner in the tuning cache")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--report", nargs="+", help="print one table of these sweep JSON files and exit")
    args = ap.parse_args(argv)
    if args.report:
        print(report(args.report))
        return 0
    if args.backend is None:
        ap.error("--backend is required unless --report is given")
    out: dict[str, Any] = {}
    if not args.no_peers:
        out["peers"] = peers(sorted(args.sizes), args.reps)
    out.update(sweep(args.backend, args.device, args.sizes, args.reps, args.budget, not args.no_save, args.limit))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    for r in out["rows"]:
        what = f"{r['tflops']:7.2f} TFLOP/s" if "tflops" in r else r["error"]
        print(f"{r['n']:>5}  {what}  {_cfg_text(r['config'])}", flush=True)
    print("winner:", out.get("winner"))
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())

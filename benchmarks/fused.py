"""ember-fused's ops against the unfused sequences they replace, and against PyTorch, per device.

    python -m benchmarks.fused [--devices cpu,opencl:0,wgpu:0] [--sizes cpu|gpu] [--iters 20] [--json FILE]

Per device: ``fused_linear(x, w, b, "gelu")`` (the backend's matmul + one epilogue kernel) against
``F.gelu(F.linear(x, w, b))``; ``fused_layer_norm_residual`` against ``h = x + r; F.layer_norm(h)``;
``fused_attention`` (flash-style, causal) against ember's ``scaled_dot_product_attention`` and
torch's. torch runs on ``cuda`` when the device is a cuda one and torch sees a GPU, else on the
CPU; TF32 is off. float32, inputs from numpy's generator on seed 0; each timed call ends with the
device's synchronize; the median of ``--iters`` after 3 warm-ups, the implementations timed in
turn within each iteration (so that on a shared machine all see one load). Each fused result is
checked against the unfused one first (``max|a - b| / max|b|``), and the path (native kernel or the
Tensor-op reference) is printed. ``EMBER_FUSION`` (ember.lazy's elementwise fusion, on by default)
applies to the unfused sequences: with it on, the bias + gelu of the unfused linear is already one
generated kernel, so the comparison is the fused epilogue against ember's generic fusion.
Exit status 1 if a check fails or a device errors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any

import numpy as np

import ember as em

from .report import environment

#: (tokens, in, out) of fused_linear; (rows, width) of the layer norm; (batch, heads, length, head) of attention
SIZES = {
    "cpu": {"linear": (512, 512, 1024), "lnr": (2048, 768), "attention": (1, 4, 256, 64)},
    "gpu": {"linear": (8192, 1024, 4096), "lnr": (16384, 1024), "attention": (8, 16, 1024, 64)},
    "quick": {"linear": (8, 16, 24), "lnr": (8, 32), "attention": (1, 2, 16, 16)},
}
TOLERANCE = 1e-4


def _torch(device: em.Device) -> tuple[Any, str] | tuple[None, str]:
    try:
        import torch
    except ImportError:
        return None, "not installed"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    where = "cuda" if device.kind == "cuda" and torch.cuda.is_available() else "cpu"
    return torch, where


def _err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


def _cases(device: em.Device, sizes: dict[str, tuple[int, ...]]) -> list[dict[str, Any]]:
    """One entry per op: the fused and unfused ember steps and the torch step, from one set of inputs."""
    import ember_fused as fz

    F = em.nn.functional
    gen = np.random.default_rng(0)
    m, k, n = sizes["linear"]
    x, w, b = gen.standard_normal((m, k)), gen.standard_normal((n, k)) / np.sqrt(k), gen.standard_normal(n)
    rows, width = sizes["lnr"]
    xr, rr = gen.standard_normal((rows, width)), gen.standard_normal((rows, width))
    lw, lb = gen.uniform(0.5, 1.5, width), gen.standard_normal(width)
    bsz, heads, length, head = sizes["attention"]
    q, kk, v = (gen.standard_normal((bsz, heads, length, head)) for _ in range(3))

    def put(*arrays: np.ndarray) -> list[Any]:
        return [em.tensor(a.astype(np.float32), device=device) for a in arrays]

    tx, tw, tb = put(x, w, b)
    txr, trr, tlw, tlb = put(xr, rr, lw, lb)
    tq, tk, tv = put(q, kk, v)
    scale = 1.0 / np.sqrt(head)
    return [
        {
            "op": "fused_linear",
            "shape": f"x {m}x{k}, w {n}x{k}, gelu",
            "ext": fz.ops.FUSED_LINEAR,
            "fused": lambda: fz.fused_linear(tx, tw, tb, "gelu"),
            "unfused": lambda: F.gelu(F.linear(tx, tw, tb)),
            "torch": lambda t, d: _torch_linear(t, d, x, w, b),
        },
        {
            "op": "fused_layer_norm_residual",
            "shape": f"{rows}x{width}",
            "ext": fz.ops.FUSED_LAYER_NORM_RESIDUAL,
            "fused": lambda: fz.fused_layer_norm_residual(txr, trr, tlw, tlb)[0],
            "unfused": lambda: F.layer_norm(txr + trr, (width,), tlw, tlb),
            "torch": lambda t, d: _torch_lnr(t, d, xr, rr, lw, lb),
        },
        {
            "op": "fused_attention",
            "shape": f"{bsz}x{heads}x{length}x{head}, causal",
            "ext": fz.ops.FUSED_ATTENTION,
            "fused": lambda: fz.fused_attention(tq, tk, tv, is_causal=True, scale=scale),
            "unfused": lambda: em.scaled_dot_product_attention(tq, tk, tv, is_causal=True, scale=scale),
            "torch": lambda t, d: _torch_attention(t, d, q, kk, v, scale),
        },
    ]


def _torch_linear(torch: Any, where: str, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> Any:
    tx, tw, tb = (torch.tensor(a, dtype=torch.float32, device=where) for a in (x, w, b))
    return lambda: torch.nn.functional.gelu(torch.nn.functional.linear(tx, tw, tb))


def _torch_lnr(torch: Any, where: str, *arrays: np.ndarray) -> Any:
    tx, tr, tw, tb = (torch.tensor(a, dtype=torch.float32, device=where) for a in arrays)
    return lambda: torch.nn.functional.layer_norm(tx + tr, (tx.shape[-1],), tw, tb)


def _torch_attention(torch: Any, where: str, q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> Any:
    tq, tk, tv = (torch.tensor(a, dtype=torch.float32, device=where) for a in (q, k, v))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    return lambda: sdpa(tq, tk, tv, is_causal=True, scale=scale)


def _interleaved(steps: dict[str, tuple[Any, Any]], warmup: int, iters: int) -> dict[str, float]:
    """Median ms of each ``(step, sync)``, timed in turn within every iteration, so that on a
    shared machine each sees the same load."""
    for step, sync in steps.values():
        for _ in range(warmup):
            out = step()
            sync()
            del out
    times: dict[str, list[float]] = {name: [] for name in steps}
    clock = time.perf_counter
    for _ in range(iters):
        for name, (step, sync) in steps.items():
            start = clock()
            out = step()
            sync()
            times[name].append(clock() - start)
            del out
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def run_device(spec: str, size: str, iters: int) -> dict[str, Any]:
    """Every op on one device: times (ms, median), the fused/unfused check, the path taken."""
    device = em.Device(spec)
    torch, where = _torch(device)
    sync_torch = (lambda: torch.cuda.synchronize()) if torch is not None and where == "cuda" else (lambda: None)
    rows = []
    for case in _cases(device, SIZES[size]):
        row: dict[str, Any] = {"device": spec, "op": case["op"], "shape": case["shape"]}
        row["path"] = "native kernel" if device.kind in case["ext"].kernels else "reference (Tensor ops)"
        try:
            fused, unfused = case["fused"]().numpy(), case["unfused"]().numpy()
            row["error"] = _err(fused.astype(np.float64), unfused.astype(np.float64))
            row["ok"] = row["error"] <= TOLERANCE
            steps = {"fused": (case["fused"], device.synchronize), "unfused": (case["unfused"], device.synchronize)}
            if torch is not None:
                steps["torch"] = (case["torch"](torch, where), sync_torch)
                row["torch_device"] = where
            row.update({f"{name}_ms": ms for name, ms in _interleaved(steps, 3, iters).items()})
        except Exception as exc:  # reported, never dropped
            row.update(ok=False, failure=f"{type(exc).__name__}: {exc}")
        rows.append(row)
    return {"device": spec, "environment": environment(device, where), "rows": rows}


def markdown(results: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (ms are medians)."""
    lines = [
        "| device | op | shape | path | fused ms | unfused ms | unfused / fused | torch ms | fused / torch | check |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for r in result["rows"]:
            if "failure" in r:
                lines.append(f"| {r['device']} | {r['op']} | {r['shape']} | {r['path']} | FAILED: {r['failure']} |")
                continue
            speedup = r["unfused_ms"] / r["fused_ms"]
            torch_ms = f"{r['torch_ms']:.3f} ({r['torch_device']})" if "torch_ms" in r else "n/a"
            vs_torch = f"{r['fused_ms'] / r['torch_ms']:.2f}" if "torch_ms" in r else "n/a"
            check = f"{r['error']:.1e}" + ("" if r["ok"] else " MISMATCH")
            lines.append(f"| {r['device']} | {r['op']} | {r['shape']} | {r['path']} | {r['fused_ms']:.3f} | "
                         f"{r['unfused_ms']:.3f} | {speedup:.2f} | {torch_ms} | {vs_torch} | {check} |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="cpu", help="comma-separated ember devices")
    parser.add_argument("--sizes", choices=sorted(SIZES), default=None, help="default: cpu for cpu, gpu otherwise")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", default=None, help="write every row and the environment here")
    args = parser.parse_args(argv)
    results = []
    for spec in args.devices.split(","):
        size = args.sizes or ("cpu" if spec.startswith("cpu") else "gpu")
        try:
            results.append(run_device(spec, size, args.iters))
        except Exception as exc:
            results.append({"device": spec, "rows": [{"device": spec, "op": "-", "shape": "-", "path": "-", "ok": False,
                                                      "failure": f"{type(exc).__name__}: {exc}"}]})  # fmt: skip
    print(f"EMBER_FUSION={os.environ.get('EMBER_FUSION', '1')}, float32, median of {args.iters} (ms)")
    print(markdown(results))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1, default=str)
    return 0 if all(r.get("ok") for res in results for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())

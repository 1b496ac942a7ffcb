"""GEMM tuning: time candidate :class:`~.kernels.matmul.Config` s on the adapter, cache the fastest.

A choice is kept per (adapter, driver, dtype, shape class) in a :class:`ember.kernel_cache.KernelCache`
named ``wgpu-tuning`` (``ember.config.cache_dir() / "wgpu-tuning" / <device folder>``), so writes are
atomic and a torn or corrupt entry reads as "not tuned". Candidates that break the adapter's limits
(workgroup storage, invocations, workgroup size) are never tried. The shape class buckets each of M,
N and K as small (< 128), medium (< 2048) or large. ``python -m ember_wgpu.tune`` tunes from the
command line; a large GEMM (M N K >= 2**30) on a GPU adapter with no cached choice is tuned on
first use within ``EMBER_AUTOTUNE_BUDGET`` seconds (default 20) unless ``EMBER_AUTOTUNE=0``.
Every candidate is checked against numpy on an odd shape before it is timed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import weakref
from typing import Any

import numpy as np

from ember import dtypes as D
from ember.kernel_cache import KernelCache

from . import adapters
from .kernels.matmul import Config, fits, matmul
from .runtime import Runtime

__all__ = ["shape_class", "candidates", "lookup", "record", "tune", "forget", "store_for", "main"]

_FORMAT = "ember-wgpu gemm tuning v1"
AUTOTUNE_FLOPS = 2**30

#: the family searched: (bm, bn, bk, tm, tn, vec); `fits` drops what an adapter cannot run
_FAMILY = [
    (128, 128, 16, 8, 8, True),
    (128, 128, 8, 8, 8, True),
    (128, 128, 32, 8, 8, True),
    (128, 128, 16, 8, 8, False),
    (128, 64, 16, 8, 8, True),
    (64, 128, 16, 8, 8, True),
    (128, 256, 8, 8, 16, True),
    (256, 128, 8, 16, 8, True),
    (128, 128, 16, 8, 4, True),
    (128, 128, 16, 4, 8, True),
    (64, 64, 16, 4, 4, True),
    (64, 64, 32, 8, 8, True),
    (64, 64, 16, 4, 4, False),
    (32, 32, 16, 4, 4, True),
]

_STORES: weakref.WeakKeyDictionary[Runtime, KernelCache] = weakref.WeakKeyDictionary()
_MEMO: weakref.WeakKeyDictionary[Runtime, dict[str, Config | None]] = weakref.WeakKeyDictionary()
_BUSY: set[int] = set()


def _bucket(x: int) -> str:
    return "s" if x < 128 else "m" if x < 2048 else "l"


def shape_class(M: int, N: int, K: int) -> str:
    """``"lll"`` for 4096^3, ``"sll"`` for a 64-row GEMM...: small / medium / large per M, N, K."""
    return _bucket(M) + _bucket(N) + _bucket(K)


def candidates(rt: Runtime) -> list[Config]:
    """The configs worth timing on ``rt`` (those within its limits)."""
    return [c for c in (Config(*spec) for spec in _FAMILY) if fits(rt, c)]


def store_for(rt: Runtime) -> KernelCache:
    """The tuning store of ``rt``'s adapter (one per runtime)."""
    found = _STORES.get(rt)
    if found is None:
        found = _STORES[rt] = KernelCache("wgpu-tuning", *adapters.cache_identity(rt.adapter))
    return found


def _key(store: KernelCache, dt: str, cls: str) -> Any:
    return store.key(f"{_FORMAT}\n{dt}\n{cls}")


def forget(rt: Runtime) -> None:
    """Drop what this process remembers of the disk store (the next lookup reads it again)."""
    _MEMO.pop(rt, None)


def _read(rt: Runtime, dt: str, cls: str) -> Config | None:
    memo = _MEMO.setdefault(rt, {})
    name = f"{dt}:{cls}"
    if name in memo:
        return memo[name]
    store = store_for(rt)
    payload = store.load(_key(store, dt, cls))
    found = None
    if payload is not None:
        try:
            found = Config(**json.loads(payload)["config"])
        except (ValueError, TypeError, KeyError):
            found = None
        if found is not None and not found.valid():
            found = None
    memo[name] = found
    return found


def _autotune_enabled() -> bool:
    return os.environ.get("EMBER_AUTOTUNE", "1").strip() not in ("0", "off", "false", "no")


def _is_cpu(rt: Runtime) -> bool:
    return str(rt.adapter.info.get("adapter_type", "")).lower() == "cpu"


def lookup(rt: Runtime, dt: str, M: int, N: int, K: int) -> Config | None:
    """The cached config for this shape's class, tuning a large GEMM on a GPU on first use (bounded)."""
    cls = shape_class(M, N, K)
    found = _read(rt, dt, cls)
    if found is not None or id(rt) in _BUSY or _is_cpu(rt):
        return found
    if M * N * K >= AUTOTUNE_FLOPS and _autotune_enabled():
        budget = float(os.environ.get("EMBER_AUTOTUNE_BUDGET", "20") or 20)
        found, _ = tune(rt, dt, M, N, K, budget_s=budget)
    return found


def record(rt: Runtime, dt: str, cls: str, c: Config, gflops: float | None = None) -> bool:
    """Store ``c`` as the choice for (``dt``, ``cls``) on this adapter; False when the store is off."""
    store = store_for(rt)
    payload = {"config": c.as_dict(), "gflops": gflops, "dtype": dt, "class": cls, "when": time.time()}
    _MEMO.setdefault(rt, {})[f"{dt}:{cls}"] = c
    return store.store(_key(store, dt, cls), json.dumps(payload).encode())


def _np(dt: str) -> np.dtype:
    return np.dtype(dt)


def _check(rt: Runtime, dt: str, c: Config) -> bool:
    """Whether ``c`` computes an odd-shaped, edge-heavy product right (against numpy float64)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((c.bm + 3, 36)).astype(_np(dt))
    b = rng.standard_normal((36, c.bn + 4)).astype(_np(dt))
    got = rt.read([matmul(rt, rt.upload(a, D.as_dtype(dt)), rt.upload(b, D.as_dtype(dt)), c)])[0]
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-2 if _np(dt).itemsize <= 2 else 1e-4
    return bool(np.allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 10))


def _time(rt: Runtime, c: Config, a: Any, b: Any, reps: int) -> float:
    matmul(rt, a, b, c)  # compile and warm
    rt.synchronize()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        matmul(rt, a, b, c)
        rt.synchronize()
        best = min(best, time.perf_counter() - start)
    return best


def tune(
    rt: Runtime,
    dt: str,
    M: int,
    N: int,
    K: int,
    *,
    choices: list[Config] | None = None,
    budget_s: float = 60.0,
    reps: int = 3,
    save: bool = True,
) -> tuple[Config | None, list[dict[str, Any]]]:
    """Time ``choices`` (default :func:`candidates`) on an M x N x K GEMM; store and return the fastest.

    Stops starting candidates once ``budget_s`` has passed (the best so far wins). Returns the
    winner (None if no candidate ran) and one row per candidate: tiling, seconds, GFLOP/s or error."""
    choices = candidates(rt) if choices is None else [c for c in choices if fits(rt, c)]
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    _BUSY.add(id(rt))
    try:
        rng = np.random.default_rng(1)
        a = rt.upload(rng.standard_normal((M, K)).astype(_np(dt)), D.as_dtype(dt))
        b = rt.upload(rng.standard_normal((K, N)).astype(_np(dt)), D.as_dtype(dt))
        best: tuple[float, Config] | None = None
        for t in choices:
            if rows and time.perf_counter() - start > budget_s:
                break
            row: dict[str, Any] = {"config": t.as_dict()}
            try:
                if not _check(rt, dt, t):
                    row["error"] = "wrong result"
                else:
                    sec = _time(rt, t, a, b, reps)
                    row["seconds"] = sec
                    row["gflops"] = 2.0 * M * N * K / sec / 1e9
                    if best is None or sec < best[0]:
                        best = (sec, t)
            except Exception as exc:  # a candidate the driver cannot build or run is skipped
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            rows.append(row)
    finally:
        _BUSY.discard(id(rt))
    if best is None:
        return None, rows
    if save:
        record(rt, dt, shape_class(M, N, K), best[1], 2.0 * M * N * K / best[0] / 1e9)
    return best[1], rows


def _shape(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.lower().replace("x", " ").split()]
    if len(parts) == 1:
        parts *= 3
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"shape must be N or MxNxK, got {text!r}")
    return parts[0], parts[1], parts[2]


def main(argv: list[str] | None = None) -> int:
    """``python -m ember_wgpu.tune``: tune GEMM on one wgpu adapter and cache the choices."""
    ap = argparse.ArgumentParser(prog="python -m ember_wgpu.tune", description=main.__doc__)
    ap.add_argument("--device", type=int, default=0, help="adapter index (as in wgpu:N)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--shape", type=_shape, action="append", help="N or MxNxK (repeatable); default 4096, 1024, 256")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per shape")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json", help="write every timing here")
    args = ap.parse_args(argv)
    rt = Runtime(args.device)
    device, driver = adapters.cache_identity(rt.adapter)
    report: dict[str, Any] = {"device": device, "driver": driver, "runs": []}
    label = f"wgpu:{args.device} ({rt.name})"
    for M, N, K in args.shape or [(4096, 4096, 4096), (1024, 1024, 1024), (256, 256, 256)]:
        best, rows = tune(rt, args.dtype, M, N, K, budget_s=args.budget, reps=args.reps)
        print(f"{label} {args.dtype} {M}x{N}x{K} (class {shape_class(M, N, K)}):")
        for row in sorted(rows, key=lambda r: -r.get("gflops", 0)):
            what = f"{row['gflops']:9.1f} GFLOP/s" if "gflops" in row else row["error"]
            print(f"  {what}  {row['config']}")
        print(f"  -> {best.as_dict() if best else 'nothing ran'}")
        report["runs"].append({"shape": [M, N, K], "class": shape_class(M, N, K), "rows": rows,
                               "best": best.as_dict() if best else None})  # fmt: skip
    print(f"cached in {store_for(rt).directory}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""GEMM tuning: time candidate :class:`~.matmul.Tiling` s on the device, cache the fastest.

A choice is kept per (device, driver, dtype, shape class) in a :class:`ember.kernel_cache.KernelCache`
named ``opencl-tuning`` (``ember.config.cache_dir() / "opencl-tuning" / <device folder>``), so writes
are atomic and a torn or corrupt entry reads as "not tuned". The shape class buckets each of M, N
and K as small (< 128), medium (< 2048) or large. ``python -m ember_opencl.tune`` tunes from the
command line; a large GEMM (M N K >= 2**30) on a GPU with no cached choice is tuned on first use
within ``EMBER_AUTOTUNE_BUDGET`` seconds (default 20) unless ``EMBER_AUTOTUNE=0``. Every candidate
is checked against numpy on an odd shape before it is timed, so a miscompiled one is never chosen.
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

from ember.kernel_cache import KernelCache

from .cache import device_name
from .matmul import Tiling, fits, matmul
from .runtime import Runtime

__all__ = ["shape_class", "candidates", "lookup", "record", "tune", "forget", "store_for", "main"]

_FORMAT = "ember-opencl gemm tuning v1"
AUTOTUNE_FLOPS = 2**30

#: the family searched on GPUs: (tm, tn, tk, wm, wn, vw, chunk, db); `fits` drops what a device cannot run
_GPU_FAMILY = [
    (128, 128, 16, 8, 8, 4, 1, False),
    (128, 128, 8, 8, 8, 4, 1, False),
    (128, 128, 16, 8, 8, 4, 4, False),
    (128, 128, 16, 8, 8, 4, 4, True),
    (128, 128, 8, 8, 8, 4, 4, True),
    (128, 128, 32, 8, 8, 4, 4, False),
    (128, 128, 16, 8, 4, 4, 4, True),
    (128, 64, 16, 8, 8, 4, 4, True),
    (64, 128, 16, 8, 8, 4, 4, True),
    (128, 256, 8, 8, 8, 4, 4, True),
    (256, 128, 8, 8, 8, 4, 4, True),
    (64, 64, 16, 4, 4, 4, 1, False),
    (64, 64, 16, 4, 4, 4, 4, True),
    (64, 64, 32, 8, 8, 4, 4, True),
    (32, 32, 16, 2, 2, 2, 1, False),
    (16, 16, 16, 1, 1, 1, 1, False),
]

_STORES: weakref.WeakKeyDictionary[Runtime, KernelCache] = weakref.WeakKeyDictionary()
_MEMO: weakref.WeakKeyDictionary[Runtime, dict[str, Tiling | None]] = weakref.WeakKeyDictionary()
_BUSY: set[int] = set()


def _bucket(x: int) -> str:
    return "s" if x < 128 else "m" if x < 2048 else "l"


def shape_class(M: int, N: int, K: int) -> str:
    """``"lll"`` for 4096^3, ``"sll"`` for a 64-row GEMM...: small / medium / large per M, N, K."""
    return _bucket(M) + _bucket(N) + _bucket(K)


def candidates(rt: Runtime, dt: str) -> list[Tiling]:
    """The tilings worth timing on ``rt`` for ``dt`` (those the device can run)."""
    family = [Tiling(*spec) for spec in _GPU_FAMILY]
    return [t for t in family if fits(rt, t, dt)]


def store_for(rt: Runtime) -> KernelCache:
    """The tuning store of ``rt``'s device (one per runtime)."""
    found = _STORES.get(rt)
    if found is None:
        found = _STORES[rt] = KernelCache("opencl-tuning", device_name(rt.device), rt.device.driver_version)
    return found


def _key(store: KernelCache, dt: str, cls: str) -> Any:
    return store.key(f"{_FORMAT}\n{dt}\n{cls}")


def forget(rt: Runtime) -> None:
    """Drop what this process remembers of the disk store (the next lookup reads it again)."""
    _MEMO.pop(rt, None)


def _read(rt: Runtime, dt: str, cls: str) -> Tiling | None:
    memo = _MEMO.setdefault(rt, {})
    name = f"{dt}:{cls}"
    if name in memo:
        return memo[name]
    store = store_for(rt)
    payload = store.load(_key(store, dt, cls))
    found = None
    if payload is not None:
        try:
            found = Tiling(**json.loads(payload)["tiling"])
        except (ValueError, TypeError, KeyError):
            found = None
        if found is not None and not found.valid():
            found = None
    memo[name] = found
    return found


def _autotune_enabled() -> bool:
    return os.environ.get("EMBER_AUTOTUNE", "1").strip() not in ("0", "off", "false", "no")


def lookup(rt: Runtime, dt: str, M: int, N: int, K: int) -> Tiling | None:
    """The cached tiling for this shape's class, tuning a large GPU GEMM on first use (bounded)."""
    cls = shape_class(M, N, K)
    found = _read(rt, dt, cls)
    if found is not None or rt.is_cpu or id(rt) in _BUSY:
        return found
    if M * N * K >= AUTOTUNE_FLOPS and _autotune_enabled():
        budget = float(os.environ.get("EMBER_AUTOTUNE_BUDGET", "20") or 20)
        found, _ = tune(rt, dt, M, N, K, budget_s=budget)
    return found


def record(rt: Runtime, dt: str, cls: str, t: Tiling, gflops: float | None = None) -> bool:
    """Store ``t`` as the choice for (``dt``, ``cls``) on this device; False when the store is off."""
    store = store_for(rt)
    payload = {"tiling": t.as_dict(), "gflops": gflops, "dtype": dt, "class": cls, "when": time.time()}
    _MEMO.setdefault(rt, {})[f"{dt}:{cls}"] = t
    return store.store(_key(store, dt, cls), json.dumps(payload).encode())


def _check(rt: Runtime, dt: str, t: Tiling) -> bool:
    """Whether ``t`` computes an odd-shaped, edge-heavy product right (against numpy float64)."""
    from .elementwise import contiguous  # noqa: PLC0415

    rng = np.random.default_rng(0)
    npdt = np.dtype(dt) if dt != "bfloat16" else np.dtype(np.float32)
    a = rng.standard_normal((t.tm + 3, 37)).astype(npdt)
    b = rng.standard_normal((37, t.tn + 5)).astype(npdt)
    from ember.dtypes import as_dtype  # noqa: PLC0415

    da, db_ = rt.upload(a, as_dtype(dt)), rt.upload(b, as_dtype(dt))
    got = rt.download(contiguous(rt, matmul(rt, da, db_, t)))
    want = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-2 if npdt.itemsize <= 2 else 1e-4
    return bool(np.allclose(got.astype(np.float64), want, rtol=tol, atol=tol * 10))


def _time(rt: Runtime, t: Tiling, a: Any, b: Any, reps: int) -> float:
    matmul(rt, a, b, t)  # compile and warm
    rt.finish()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        matmul(rt, a, b, t)
        rt.finish()
        best = min(best, time.perf_counter() - start)
    return best


def tune(
    rt: Runtime,
    dt: str,
    M: int,
    N: int,
    K: int,
    *,
    choices: list[Tiling] | None = None,
    budget_s: float = 60.0,
    reps: int = 3,
    save: bool = True,
) -> tuple[Tiling | None, list[dict[str, Any]]]:
    """Time ``choices`` (default :func:`candidates`) on an M x N x K GEMM; store and return the fastest.

    Stops starting candidates once ``budget_s`` has passed (the best so far wins). Returns the
    winner (None if no candidate ran) and one row per candidate: tiling, seconds, GFLOP/s or error."""
    from ember.dtypes import as_dtype  # noqa: PLC0415

    choices = candidates(rt, dt) if choices is None else [t for t in choices if fits(rt, t, dt)]
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    _BUSY.add(id(rt))
    try:
        rng = np.random.default_rng(1)
        npdt = np.dtype(dt) if dt != "bfloat16" else np.dtype(np.float32)
        a = rt.upload(rng.standard_normal((M, K)).astype(npdt), as_dtype(dt))
        b = rt.upload(rng.standard_normal((K, N)).astype(npdt), as_dtype(dt))
        best: tuple[float, Tiling] | None = None
        for t in choices:
            if rows and time.perf_counter() - start > budget_s:
                break
            row: dict[str, Any] = {"tiling": t.as_dict()}
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
    """``python -m ember_opencl.tune``: tune GEMM on one OpenCL device and cache the choices."""
    ap = argparse.ArgumentParser(prog="python -m ember_opencl.tune", description=main.__doc__)
    ap.add_argument("--device", type=int, default=0, help="OpenCL device index (as in opencl:N)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--shape", type=_shape, action="append", help="N or MxNxK (repeatable); default 4096, 1024, 256")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per shape")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--include-cpu", action="store_true", help="tune the tiled kernels on a CPU device too")
    ap.add_argument("--json", help="write every timing here")
    args = ap.parse_args(argv)
    rt = Runtime(args.device)
    if rt.is_cpu and not args.include_cpu:
        print(f"{rt.label} is a CPU device: matmul uses the vector kernel there (--include-cpu to tune anyway)")
        return 0
    report: dict[str, Any] = {"device": device_name(rt.device), "driver": rt.device.driver_version, "runs": []}
    for M, N, K in args.shape or [(4096, 4096, 4096), (1024, 1024, 1024), (256, 256, 256)]:
        best, rows = tune(rt, args.dtype, M, N, K, budget_s=args.budget, reps=args.reps)
        print(f"{rt.label} {args.dtype} {M}x{N}x{K} (class {shape_class(M, N, K)}):")
        for row in sorted(rows, key=lambda r: -r.get("gflops", 0)):
            what = f"{row['gflops']:9.1f} GFLOP/s" if "gflops" in row else row["error"]
            print(f"  {what}  {row['tiling']}")
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

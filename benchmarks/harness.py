"""The contract every workload builder returns (:class:`Case`), the timing protocol of
shared/WORKLOADS.md and the ember-vs-peer cross-check.

Timing protocol: fixed seed, float32, inputs never zero; warm up 3 iterations, then keep stepping
untimed until the steps have run for ``HEAT_S`` (a GPU left idle while the first steps compiled has
lowered its clocks and takes a while under load to raise them), then time N iterations one by one,
synchronizing the device before each clock read; report the median.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "SEED",
    "HEAT_S",
    "Case",
    "Unavailable",
    "rng",
    "randn",
    "labels",
    "heat",
    "time_case",
    "queued_ms",
    "compare",
    "no_sync",
]

#: every workload draws its inputs from this seed, so all implementations see the same numbers
SEED = 0
#: seconds of untimed steps after the warm-up iterations, for every implementation alike. An H100
#: idle for ~1 s (the host compiling a new process's kernels) fell to 345-495 MHz and ran the next
#: ~170 ms of W3 steps at that clock, 2.5x slower, before it went back to 1,980 MHz
#: (plugins/wgpu/logs/h100-2026-12-07-ninth/call1: nvidia-smi's clocks beside each step)
HEAT_S = 0.5
#: most untimed steps the heat may take (a step of microseconds would otherwise run ~10^5 times)
HEAT_MAX_STEPS = 1000


@dataclass
class Case:
    """One workload built for one implementation.

    ``step`` runs one iteration and returns what it computed (kept alive until ``sync``
    returns, so a lazy or asynchronous device cannot drop the work); ``sync`` waits for the
    device; ``result`` returns the outputs of the last step as float numpy arrays, by name,
    for the cross-check (e.g. the loss and every gradient of a training step).
    """

    step: Callable[[], Any]
    sync: Callable[[], None]
    result: Callable[[], dict[str, np.ndarray]]


class Unavailable(Exception):
    """A builder cannot run here (an op ember lacks, no CUDA device); the message says why."""


def no_sync() -> None:
    """The sync of a host implementation whose ops finish before they return (numpy)."""


def rng() -> np.random.Generator:
    """A fresh generator on the fixed seed: each workload's inputs come from one of these."""
    return np.random.default_rng(SEED)


def randn(gen: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    """Standard-normal float32 values times ``scale`` (never all zeros)."""
    return (gen.standard_normal(shape) * scale).astype(np.float32)


def labels(gen: np.random.Generator, n: int, classes: int) -> np.ndarray:
    """``n`` int64 class labels in ``[0, classes)``."""
    return gen.integers(0, classes, size=n, dtype=np.int64)


def median_seconds(fn: Callable[[], Any], warmup: int, iters: int) -> float:
    """The median of :func:`time_case` for a bare callable whose return already waited for the
    device (e.g. it reads the result back to the host)."""
    return statistics.median(time_case(Case(fn, no_sync, dict), warmup, iters))


def heat(case: Case, seconds: float, max_steps: int = HEAT_MAX_STEPS) -> int:
    """Untimed steps until they have run for ``seconds`` (at most ``max_steps``): the device at the
    clocks a steady run gets. Returns how many ran."""
    clock = time.perf_counter
    start, steps = clock(), 0
    while steps < max_steps and clock() - start < seconds:
        out = case.step()
        case.sync()
        del out
        steps += 1
    return steps


def time_case(
    case: Case, warmup: int, iters: int, probe: Callable[[], None] | None = None, heat_s: float = 0.0
) -> list[float]:
    """Seconds per iteration: ``warmup`` untimed steps, more untimed steps for ``heat_s`` seconds
    (:func:`heat`), then ``iters`` timed ones, each timed from before ``step`` to after ``sync``.
    ``probe`` (e.g. a read of the device pool's counters) runs once after the warm-up and once
    after the timed steps."""
    for _ in range(warmup):
        out = case.step()
        case.sync()
        del out
    if heat_s > 0:
        heat(case, heat_s)
    gc.collect()
    if probe is not None:
        probe()
    times = []
    clock = time.perf_counter
    for _ in range(iters):
        start = clock()
        out = case.step()
        case.sync()
        times.append(clock() - start)
        del out
    if probe is not None:
        probe()
    return times


def queued_ms(call: Callable[[], Any], sync: Callable[[], None], iters: int, rounds: int = 3) -> float:
    """Milliseconds per call of ``call``: one warm-up, then ``iters`` calls queued back to back and
    one ``sync``, best of ``rounds`` (the device's time per call while the host keeps ahead of it;
    the host's time otherwise). For kernel probes, where a sync per call would hide the kernel."""
    call()
    sync()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(iters):
            call()
        sync()
        best = min(best, (time.perf_counter() - t) / iters)
    return best * 1e3


def compare(ours: dict[str, np.ndarray], theirs: dict[str, np.ndarray], tolerance: float) -> dict[str, Any]:
    """Cross-check two results key by key: the error of each is ``max|a - b| / max|b|``.

    Returns ``{"status": "ok" | "mismatch", "max_rel_err", "worst", "tolerance"}``.
    """
    if ours.keys() != theirs.keys():
        raise ValueError(f"the two results name different outputs: {sorted(ours)} vs {sorted(theirs)}")
    worst, worst_err = "", 0.0
    for key in ours:
        a = np.asarray(ours[key], dtype=np.float64)
        b = np.asarray(theirs[key], dtype=np.float64)
        if a.shape != b.shape:
            return {
                "status": "mismatch",
                "max_rel_err": float("inf"),
                "worst": f"{key}: shape {a.shape} vs {b.shape}",
                "tolerance": tolerance,
            }
        scale = float(np.max(np.abs(b))) if b.size else 0.0
        diff = float(np.max(np.abs(a - b))) if a.size else 0.0
        err = diff / scale if scale > 0 else diff
        if not np.isfinite(err) or err >= worst_err:
            worst, worst_err = key, err if np.isfinite(err) else float("inf")
    status = "ok" if worst_err <= tolerance else "mismatch"
    return {"status": status, "max_rel_err": worst_err, "worst": worst, "tolerance": tolerance}

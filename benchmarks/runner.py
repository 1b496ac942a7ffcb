"""Runs the chosen workloads for ember and each peer, cross-checks them, and returns the
report as plain data (what ``--json`` writes)."""

from __future__ import annotations

import gc
import statistics
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from . import w1_dispatch, w2_mlp, w3_cnn, w4_transformer, w5_gemm, w6_elementwise
from .clocks import sm_clock, span
from .harness import HEAT_S, Case, Unavailable, compare, time_case
from .peers import PEERS, Impl, ember_impl, ember_jit_impl, ember_unfused_impl, import_peer, peer_impl

__all__ = ["WORKLOADS", "Settings", "run", "exit_status"]

#: workload id -> module; each module has ID, TITLE, SIZES, ITERS, TOLERANCE, describe,
#: derived, and the builders ember(device, size), numpy(size), torch(device, size), cupy(size)
WORKLOADS: dict[str, ModuleType] = {
    m.ID: m for m in (w1_dispatch, w2_mlp, w3_cnn, w4_transformer, w5_gemm, w6_elementwise)
}


@dataclass
class Settings:
    """What to run: workloads, ember device, peers, size set and iteration counts."""

    workloads: list[str] = field(default_factory=lambda: list(WORKLOADS))
    device: str = "cpu"
    peers: list[str] = field(default_factory=lambda: list(PEERS))
    #: peers named on the command line run even where they would be skipped by default
    explicit_peers: bool = False
    #: "cpu", "gpu" or "quick"
    sizes: str = "cpu"
    iters: int | None = None
    warmup: int = 3
    #: seconds of untimed steps after the warm-up (harness.HEAT_S; 0 with --quick)
    heat_s: float = HEAT_S
    check: bool = True
    torch_device: str = "cpu"


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _failure(exc: BaseException) -> dict[str, Any]:
    from ember.errors import DeviceUnavailableError

    if isinstance(exc, Unavailable):
        return {"status": "unavailable", "reason": str(exc)}
    if isinstance(exc, DeviceUnavailableError):  # no plugin or no such device: not a failure of the run
        return {"status": "unavailable", "reason": f"{type(exc).__name__}: {exc}"}
    return {
        "status": "error",
        "reason": f"{type(exc).__name__}: {exc}",
        "traceback": traceback.format_exc(),
    }


def _pool_counts(device: Any) -> tuple[int, int] | None:
    """The device pools' driver allocations and frees so far, or None where it keeps no count."""
    try:
        stats = device.memory_stats()
    except Exception:  # a backend without pools: nothing to count
        return None
    allocations, frees = stats.get("allocations"), stats.get("frees")
    return None if allocations is None or frees is None else (allocations, frees)


def _release_torch_cache() -> None:
    """Give torch's cached GPU memory back after a torch row: on an H100, ember's host-bound W3 step
    ran 3.6 ms before torch's W3 ran in the same process and 5.1-5.6 ms after it, 4.1 once
    ``torch.cuda.empty_cache()`` had run (plugins/cuda/logs/h100-2026-12-06-late/call8). The rows
    after a torch row are then measured closer to a process of their own library alone."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def _measure(
    impl: Impl,
    module: ModuleType,
    size: dict[str, int],
    warmup: int,
    iters: int,
    device: Any = None,
    heat_s: float = 0.0,
    gpu: bool = False,
) -> dict[str, Any]:
    """Build one case and time it; a failure becomes a status with its reason. With ``device``,
    the row also says how many driver allocations and frees its pool made in the timed steps
    (a pool that has not settled by then costs the step its driver calls). With ``gpu``, the NVIDIA
    GPU's SM clock right before and after the timed steps (:mod:`.clocks`), where nvidia-smi answers."""
    case: Case | None = None
    marks: list[tuple[int, int] | None] = []
    clocks: list[tuple[int, int] | None] = []

    def probe() -> None:
        if device is not None:
            marks.append(_pool_counts(device))
        if gpu:
            clocks.append(sm_clock())

    try:
        case = impl.build(module, size)
        times = time_case(case, warmup, iters, probe, heat_s)
    except Exception as exc:  # every failure is reported; none stops the run
        return _failure(exc)
    finally:
        del case
        gc.collect()
        if impl.name == "torch":
            _release_torch_cache()
    median = statistics.median(times)
    row: dict[str, Any] = {
        "status": "ok",
        "median_ms": median * 1e3,
        "min_ms": min(times) * 1e3,
        "times_ms": [t * 1e3 for t in times],
    }
    clock = span(clocks[0], clocks[-1]) if clocks else None
    if clock is not None:
        row["sm_clock_mhz"] = clock
    if len(marks) == 2 and marks[0] is not None and marks[1] is not None:
        row["pool"] = {"allocations": marks[1][0] - marks[0][0], "frees": marks[1][1] - marks[0][1]}
    value = module.derived(size, median)
    if value is not None:
        row["derived"] = {"value": value[0], "unit": value[1]}
    return row


def _check_result(impl: Impl, module: ModuleType) -> dict[str, Any]:
    """One step at the workload's check size; the outputs by name, or the failure."""
    try:
        case = impl.build(module, module.SIZES["check"])
        case.step()
        case.sync()
        return {"status": "ok", "result": case.result()}
    except Exception as exc:
        return _failure(exc)


def _cross_check(ember_run: dict[str, Any], peer_run: dict[str, Any], module: ModuleType) -> dict[str, Any]:
    for who, run_ in (("ember", ember_run), ("peer", peer_run)):
        if run_["status"] != "ok":
            return {"status": "not run", "reason": f"{who} failed at the check size: {run_['reason']}"}
    out = compare(ember_run["result"], peer_run["result"], module.TOLERANCE)
    out["size"] = module.describe(module.SIZES["check"])
    return out


def _peer_gate(name: str, settings: Settings, gpu_run: bool) -> dict[str, Any] | None:
    """Why a peer does not run here (skipped, not installed), or None if it does."""
    if not settings.explicit_peers:
        if name == "numpy" and gpu_run:
            return {"status": "skipped", "reason": "host peer on a GPU run (name it in --peers to run it)"}
        if name == "cupy" and not gpu_run:
            return {"status": "skipped", "reason": "GPU peer on a CPU run (name it in --peers to run it)"}
    try:
        import_peer(name)
    except ImportError as exc:
        if str(exc) == "not installed":
            return {"status": "not installed", "reason": f"{name} is not importable here"}
        return {"status": "unavailable", "reason": f"import {name} failed: {exc}"}
    except Exception as exc:  # e.g. a CUDA library that fails to load
        return {"status": "unavailable", "reason": f"import {name} failed: {type(exc).__name__}: {exc}"}
    return None


def run(settings: Settings, device: Any, log: Callable[[str], None] = _log) -> list[dict[str, Any]]:
    """Every chosen workload for ember on ``device`` and each peer: one entry per workload."""
    gpu_run = device.kind != "cpu"
    impls = [ember_impl(device), ember_jit_impl(device)]
    if device.capabilities.fusion:  # fused and unfused side by side
        impls.append(ember_unfused_impl(device))
    impls += [peer_impl(p, settings.torch_device) for p in settings.peers]
    gates = {impl.name: _peer_gate(impl.name, settings, gpu_run) for impl in impls if impl.name in PEERS}
    entries = []
    for wid in settings.workloads:
        module = WORKLOADS[wid]
        size = module.SIZES[settings.sizes]
        iters = settings.iters or module.ITERS[settings.sizes]
        entry: dict[str, Any] = {
            "id": wid,
            "title": module.TITLE,
            "size": module.describe(size),
            "params": size,
            "warmup": settings.warmup,
            "heat_s": settings.heat_s,
            "iters": iters,
            "impls": [],
        }
        ember_check = _check_result(impls[0], module) if settings.check else None
        for impl in impls:
            if impl.name == "ember_jit" and not hasattr(module, "ember_jit"):
                continue  # the em.jit row only where the workload has a jitted step
            row: dict[str, Any] = {"impl": impl.name, "label": impl.label}
            gate = gates.get(impl.name)
            if gate is None and not hasattr(module, impl.builds):
                gate = {"status": "n/a", "reason": f"{wid} has no {impl.builds} version"}
            if gate is not None:
                row.update(gate)
                entry["impls"].append(row)
                log(f"{wid} {impl.label}: {gate['status']}")
                continue
            if impl.name != "ember" and ember_check is not None:
                row["check"] = _cross_check(ember_check, _check_result(impl, module), module)
            mine = device if impl.name.startswith("ember") and device.kind != "cpu" else None
            row.update(_measure(impl, module, size, settings.warmup, iters, mine, settings.heat_s, gpu_run))
            entry["impls"].append(row)
            shown = f"{row['median_ms']:.3f} ms" if row["status"] == "ok" else f"{row['status']}: {row['reason']}"
            if row.get("pool"):
                pool = row["pool"]
                shown += f" (pool: {pool['allocations']} driver allocations, {pool['frees']} frees in {iters} steps)"
            log(f"{wid} {impl.label}: {shown}")
        _add_ratios(entry)
        entries.append(entry)
    return entries


def _add_ratios(entry: dict[str, Any]) -> None:
    """ember median / peer median on every peer row where both ran (>1: ember is slower)."""
    rows = entry["impls"]
    ember = rows[0]
    for row in rows[1:]:
        if ember["status"] == "ok" and row["status"] == "ok":
            row["ember_ratio"] = ember["median_ms"] / row["median_ms"]  # on the em.jit row: eager / jit


def exit_status(entries: list[dict[str, Any]]) -> int:
    """1 if any implementation raised an error or any cross-check mismatched, else 0."""
    for entry in entries:
        for row in entry["impls"]:
            if row["status"] == "error" or row.get("check", {}).get("status") == "mismatch":
                return 1
    return 0

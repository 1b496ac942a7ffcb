"""W3/W4 training steps on wgpu with every dispatch recorded nowhere (no kernel runs): the device
pool's driver traffic per step at any size, GPU sizes included, on any adapter (lavapipe too).

    python plugins/wgpu/scripts/pool_dry.py W4 [--unfused] [--size gpu] [--steps 6] [--device wgpu:0]

Allocation, freeing and the adaptive pool's step plan depend on the sizes asked for and when
tensors die, not on values, so a step whose kernels never run shows what the pool does on the
GPU. Per step, fused (the lazy layer on) or ``--unfused`` (one mode a process: the pool's
plan is per process): driver buffers created and their MiB, pool allocations and frees, the peak in
use, and the plan's counters (blocks served from its arena, plans dropped, plans refused). A
fused step that keeps allocating while the unfused one does not is the churn W4 showed on the
H100 (38 buffers, 3480 MiB a step, before the lazy layer realized the step's output at sync).
The adapter's binding-size limit is lifted for the run (nothing is bound).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import ember as em

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repo root: the benchmarks package

from benchmarks import w3_cnn, w4_transformer  # noqa: E402

WORKLOADS = {"W3": w3_cnn, "W4": w4_transformer}
PLAN = ("planned", "plan_drops", "plan_refusals")


class _CountingDevice:
    """The wgpu device with ``create_buffer`` counted (every other attribute passed through)."""

    def __init__(self, device: Any, counts: list[int]) -> None:
        self._device = device
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._device, name)

    def create_buffer(self, *args: Any, **kwargs: Any) -> Any:
        self._counts[0] += 1
        self._counts[1] += int(kwargs.get("size", args[0] if args else 0))
        return self._device.create_buffer(*args, **kwargs)


def _steps(dev: em.Device, module: Any, size: dict[str, int], steps: int, fused: bool) -> list[str]:
    rt = dev.backend.rt
    counts = [0, 0]
    real = rt.device
    rt.device = _CountingDevice(real, counts)
    rows = []
    try:
        with em.lazy.fusion(fused, dev):
            case = module.ember(dev, size)
            for i in range(steps):
                before, made = dev.memory_stats(), list(counts)
                start = time.perf_counter()
                out = case.step()
                case.sync()
                host = time.perf_counter() - start
                del out
                after = dev.memory_stats()
                plan = " / ".join(str(getattr(rt.pool, k, "-")) for k in PLAN)
                rows.append(
                    f"{'fused' if fused else 'unfused':8s} {i:4d} {counts[0] - made[0]:8d} "
                    f"{(counts[1] - made[1]) / 2**20:9.0f} {after['allocations'] - before['allocations']:6d} "
                    f"{after['frees'] - before['frees']:6d} {after['peak_in_use_bytes'] / 2**20:9.0f}  "
                    f"{plan:>16s} {host * 1e3:8.1f}"
                )
            del case
    finally:
        rt.device = real
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--size", default="gpu", help="a size of the workload (gpu, cpu, quick); default gpu")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--device", default="wgpu:0")
    p.add_argument("--unfused", action="store_true", help="the lazy layer off (as EMBER_FUSION=0)")
    args = p.parse_args(argv)
    module = WORKLOADS[args.workload]
    size = dict(module.SIZES[args.size])
    dev = em.Device(args.device)
    rt = dev.backend.rt
    rt.max_binding = 1 << 62  # nothing is bound: the adapter's limit does not apply
    rt.dispatch = lambda *a, **k: None  # type: ignore[method-assign]  # recorded nowhere
    print(f"{args.workload} {module.describe(size)} on {args.device} ({rt.name}), dispatches not run")
    print("mode     step  buffers  new MiB  alloc  frees  peak MiB  plan (arena/drop/refused) host ms")
    for row in _steps(dev, module, size, args.steps, not args.unfused):
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

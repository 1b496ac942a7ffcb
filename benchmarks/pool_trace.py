"""A device pool's requests over training steps, recorded where they happen and replayed anywhere.

    python -m benchmarks.pool_trace record W3 --device cuda:0 --gpu-sizes --steps 12 --out w3.json
    python -m benchmarks.pool_trace replay w3.json [--strategy adaptive] [--whole]

``record`` runs the workload's ember step on the device with its pool under ``adaptive`` and
writes every request (its size), every block's death and the step boundaries, with the pool's
settings (alignment, sub-allocation or whole buffers, size cap), to a JSON file. ``replay`` feeds
the same requests to a fresh :class:`ember.memory.BufferPool` whose driver is a counter (no
device), so the pool's behaviour on a GPU run (its step plan made, refused or dropped, its driver
allocations per step, reserved against in use) can be studied and changed on any machine.
``--whole`` replays without sub-allocation (NVIDIA's OpenCL), ``--sub`` with it. A probe, not a test.
"""

from __future__ import annotations

import argparse
import gc
import json
import time
import weakref
from typing import Any

from . import w3_cnn, w4_transformer

WORKLOADS = {"W3": w3_cnn, "W4": w4_transformer}
MIB = 2**20


def record(workload: str, device: str, gpu_sizes: bool, steps: int, out: str) -> None:
    import ember as em

    dev = em.Device(device, memory="adaptive")
    module = WORKLOADS[workload]
    case = module.ember(dev, module.SIZES["gpu" if gpu_sizes else "cpu"])
    pool = dev.memory.pools()[0]
    events: list[list[Any]] = []
    acquire = pool.acquire

    def died(token: int) -> None:
        events.append(["f", token])

    def recorded(nbytes: int, avoid: Any = None) -> Any:
        block = acquire(nbytes, avoid)
        events.append(["a", block._token, nbytes])
        weakref.finalize(block, died, block._token)
        return block

    pool.acquire = recorded  # type: ignore[method-assign]
    for _ in range(steps):
        out_t = case.step()
        case.sync()
        del out_t
        gc.collect()
        events.append(["s", pool.misses, pool.reserved, pool.in_use])
    pool.acquire = acquire  # type: ignore[method-assign]
    header = {
        "workload": workload,
        "device": device,
        "gpu_sizes": gpu_sizes,
        "alignment": pool.alignment,
        "sub": pool._sub is not None,
        "max_class": pool.max_class,
        "cache_limit": pool.cache_limit,
    }
    with open(out, "w") as f:
        json.dump({"header": header, "events": events}, f)
    print(f"{len(events)} events over {steps} steps written to {out} ({header})")


def replay(path: str, strategy: str, sub: bool | None) -> None:
    from ember.memory import BufferPool

    data = json.load(open(path))
    header, events = data["header"], data["events"]
    counter = iter(range(1, 1 << 62))
    use_sub = header["sub"] if sub is None else sub
    pool: Any = BufferPool(
        lambda n: next(counter),
        lambda raw: None,
        cache_limit=header["cache_limit"],
        max_class=header["max_class"],
        strategy=strategy,
        sub_allocate=(lambda page, offset, nbytes: next(counter)) if use_sub else None,
        alignment=header["alignment"],
    )
    print(f"{path}: {header}; replayed {strategy}, {'sub-allocation' if use_sub else 'whole buffers'}")
    live: dict[int, Any] = {}
    step = 0
    misses = planned = drops = refusals = 0
    took: list[float] = []
    start = time.perf_counter()
    for ev in events:
        kind = ev[0]
        if kind == "a":
            live[ev[1]] = pool.acquire(ev[2])
        elif kind == "f":
            live.pop(ev[1], None)
        else:
            took.append(time.perf_counter() - start)
            print(
                f"step {step:3d}: driver allocations {pool.misses - misses:4d} (device run: {ev[1]} in all), "
                f"reserved {pool.reserved / MIB:8.2f} MiB (device {ev[2] / MIB:8.2f}), "
                f"in use {pool.in_use / MIB:8.2f}, "
                f"peak {pool.peak_reserved / MIB:8.2f} / {pool.peak_in_use / MIB:8.2f}; "
                f"planned {pool.planned - planned}, drops {pool.plan_drops - drops}, "
                f"refusals {pool.plan_refusals - refusals}"
            )
            misses, planned = pool.misses, pool.planned
            drops, refusals = pool.plan_drops, pool.plan_refusals
            step += 1
            start = time.perf_counter()
    later = sorted(took[len(took) // 2 :])
    if later:
        print(f"host time of the pool's calls a step (median of the later half): {later[len(later) // 2] * 1e6:.0f} us")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("workload", choices=sorted(WORKLOADS))
    rec.add_argument("--device", required=True)
    rec.add_argument("--gpu-sizes", action="store_true")
    rec.add_argument("--steps", type=int, default=12)
    rec.add_argument("--out", required=True)
    rep = sub.add_parser("replay")
    rep.add_argument("path")
    rep.add_argument("--strategy", default="adaptive")
    mode = rep.add_mutually_exclusive_group()
    mode.add_argument("--whole", action="store_true", help="no sub-allocation")
    mode.add_argument("--sub", action="store_true", help="sub-allocation")
    args = ap.parse_args(argv)
    if args.cmd == "record":
        record(args.workload, args.device, args.gpu_sizes, args.steps, args.out)
    else:
        replay(args.path, args.strategy, False if args.whole else True if args.sub else None)


if __name__ == "__main__":
    main()

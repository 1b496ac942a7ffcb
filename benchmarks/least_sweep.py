"""W2-W4 steps on one device under several ``EMBER_FUSION_MIN_ELEMENTS`` values, alternated in one
process (a host-bound step's time moves by milliseconds between processes, so settings are compared
round by round, not run by run), with the unfused path and torch beside them:

    python -m benchmarks.least_sweep --device cuda:0 --values 0,4096,65536,1048576 --rounds 3 W3

Each cell is the median of ``--iters`` synchronized steps; the last column is the best round's.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

import ember as em
from ember.device import set_defer
from ember.lazy.graph import Lazy

from .harness import time_case
from .peers import import_peer
from .runner import WORKLOADS


def _ember_ms(device: Any, module: Any, size: dict[str, int], iters: int) -> float:
    case = module.ember(device, size)
    return statistics.median(time_case(case, 3, iters)) * 1e3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workloads", nargs="*", default=["W3"])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--values", default="0,4096,65536,1048576", help="EMBER_FUSION_MIN_ELEMENTS values")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--sizes", default="gpu")
    parser.add_argument("--torch-device", default="cuda")
    args = parser.parse_args(argv)
    device = em.Device(args.device)
    values = [int(v) for v in args.values.split(",")]
    torch = None
    try:
        torch = import_peer("torch")
    except ImportError:
        pass
    for wid in args.workloads:
        module = WORKLOADS[wid.upper()]
        size = module.SIZES[args.sizes]
        rows: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for value in values:
                os.environ["EMBER_FUSION_MIN_ELEMENTS"] = str(value)
                with em.lazy.fusion(True, device):
                    installed = device._state.defer
                    set_defer(device, Lazy(device))
                    try:
                        rows.setdefault(f"least={value}", []).append(_ember_ms(device, module, size, args.iters))
                    finally:
                        set_defer(device, installed)
            os.environ.pop("EMBER_FUSION_MIN_ELEMENTS", None)
            with em.lazy.fusion(False, device):
                rows.setdefault("unfused", []).append(_ember_ms(device, module, size, args.iters))
            if torch is not None:
                case = module.torch(torch.device(args.torch_device), size)
                rows.setdefault("torch", []).append(statistics.median(time_case(case, 3, args.iters)) * 1e3)
        print(f"{wid} on {device} ({args.sizes} sizes), ms per step, median of {args.iters}; rounds, then best")
        for name, times in rows.items():
            print(f"  {name:>16} " + " ".join(f"{t:8.3f}" for t in times) + f"   best {min(times):8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

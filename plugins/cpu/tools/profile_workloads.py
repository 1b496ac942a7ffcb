"""cProfile of ember's W2/W3/W4/W6 steps on cpu: where the time of a training step goes.

    python plugins/cpu/tools/profile_workloads.py W2 W3 W4 W6 [--steps 10] [--top 18]

Runs the benchmark's own ember builders (``benchmarks.w*``, CPU sizes) after 3 warm-up steps
and prints, per workload, the functions with the most time spent in themselves (tottime).
Run from the repository root.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import pstats
import time

import ember as em

MODULES = {"W2": "w2_mlp", "W3": "w3_cnn", "W4": "w4_transformer", "W6": "w6_elementwise"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("workloads", nargs="*", default=list(MODULES))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--top", type=int, default=18)
    args = ap.parse_args()
    dev = em.Device("cpu")
    for w in args.workloads:
        mod = importlib.import_module(f"benchmarks.{MODULES[w]}")
        case = mod.ember(dev, mod.SIZES["cpu"])
        for _ in range(3):
            case.step()
            case.sync()
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        for _ in range(args.steps):
            case.step()
            case.sync()
        prof.disable()
        ms = (time.perf_counter() - t0) / args.steps * 1e3
        print(f"\n===== {w}: {ms:.1f} ms/step under cProfile ({args.steps} steps) =====")
        pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()

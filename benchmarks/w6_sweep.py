"""W6 under launch-shape settings: one row per value of a backend's grid constant, each in a
fresh process, to pick the default from measurements (the fused kernel's grid-stride cap).

    python -m benchmarks.w6_sweep --device cuda:0 --attr ember_cuda.fusion:WAVES --values 1,2,4,8
    python -m benchmarks.w6_sweep --device opencl:0 --attr ember_opencl.runtime:GROUPS_PER_CU --values 8,32,128
    python -m benchmarks.w6_sweep --device wgpu:0 --attr ember_wgpu.kernels.elementwise:MAX_GROUPS --values 1024,4096

Each row: the runner's protocol (median of per-iteration synchronized steps, as in
``python -m benchmarks``) and a pipelined figure (``--chain`` steps queued, one synchronize,
divided by ``--chain``; each result realized, then dropped at the next step) that separates the kernel's
throughput from the per-step host cost.
Bandwidth is W6's 16 bytes per element over the time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import subprocess
import sys
import time

from . import w6_elementwise as w6
from .harness import time_case


def _one(device: str, attr: str, value: int, n: int, iters: int, chain: int) -> dict:
    import ember as em

    dev = em.Device(device)  # loads the backend, so its module can be patched before the first launch
    if attr:
        module, name = attr.split(":")
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            raise SystemExit(f"--attr {attr}: {module} has no {name}")
        setattr(mod, name, value)
    case = w6.ember(dev, {"n": n})
    step = statistics.median(time_case(case, 3, iters))
    case.sync()
    t0 = time.perf_counter()
    for _ in range(chain):  # each result computed now (the lazy layer skips what nobody holds), dropped next step
        out = case.step()
        out.realize()
    case.sync()
    del out
    piped = (time.perf_counter() - t0) / chain
    return {"value": value, "step_s": step, "pipelined_s": piped}


def _profile(device: str, n: int, iters: int) -> None:
    """The top of a cProfile of ``iters`` synchronized W6 steps: where the host's time per step goes."""
    import cProfile
    import pstats

    import ember as em

    case = w6.ember(em.Device(device), {"n": n})
    time_case(case, 3, 10)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(iters):
        out = case.step()
        case.sync()
    profile.disable()
    del out
    print(f"cProfile of {iters} synchronized W6 steps on {device}, n={n} (per-call times include the profiler's own)")
    pstats.Stats(profile).sort_stats("tottime").print_stats(22)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", required=True)
    parser.add_argument("--attr", default="", help="module:CONSTANT to set in each process (none: defaults only)")
    parser.add_argument("--values", default="0", help="comma-separated integers")
    parser.add_argument("--n", type=int, default=2**26)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--chain", type=int, default=20)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--profile", action="store_true", help="print a cProfile of the synchronized steps (the host's share of each)"
    )
    args = parser.parse_args()
    if args.profile:
        _profile(args.device, args.n, args.iters)
        return
    if args.one:
        print(json.dumps(_one(args.device, args.attr, int(args.values), args.n, args.iters, args.chain)))
        return
    print(f"W6 at n={args.n} on {args.device}, {args.attr or 'defaults'}; median of {args.iters}, chain {args.chain}")
    print("| value | step ms | step TB/s | pipelined ms | pipelined TB/s |")
    print("|---|---|---|---|---|")
    for value in args.values.split(","):
        cmd = [sys.executable, "-m", "benchmarks.w6_sweep", "--one", "--device", args.device, "--attr", args.attr]
        cmd += ["--values", value, "--n", str(args.n), "--iters", str(args.iters), "--chain", str(args.chain)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            print(f"| {value} | failed: {done.stderr.strip().splitlines()[-1:]} | | | |")
            continue
        r = json.loads(done.stdout.strip().splitlines()[-1])
        tb = w6.BYTES_PER_ELEMENT * args.n / 1e12
        step, piped = r["step_s"], r["pipelined_s"]
        print(f"| {value} | {step * 1e3:.3f} | {tb / step:.2f} | {piped * 1e3:.3f} | {tb / piped:.2f} |")


if __name__ == "__main__":
    main()

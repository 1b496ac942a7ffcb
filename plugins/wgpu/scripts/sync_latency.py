"""How long ``synchronize()`` takes to notice the GPU finished: the same queued work waited for by a
blocking ``wgpuDevicePoll`` at once, and by spinning on a non-blocking poll for up to 2 ms (the
default, then blocking) and up to 50 ms, rounds alternated in one process.

    python plugins/wgpu/scripts/sync_latency.py --device wgpu:0 [--n 2048] [--chain 1,2,4,8] [--rounds 15]

The work is ``chain`` products of two n x n matrices, queued back to back, then one synchronize;
each setting's median wall time is printed per chain length. The GPU's time is the same for every
setting, so a setting slower than the others by about the same for every length says what its wait
costs (a blocking poll that wakes late), and one slower only past 2 ms of work says the spin's
fallback does. A probe for the device machine (the wgpu W3 eager step's lost time), not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time

#: (name, spin seconds): 0 blocks in wgpuDevicePoll(wait=True) at once
SETTINGS = (("block", 0.0), ("spin 2 ms", 0.002), ("spin 50 ms", 0.05))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="wgpu:0")
    p.add_argument("--n", type=int, default=2048)
    p.add_argument("--chain", default="1,2,4,8", help="products queued before each synchronize")
    p.add_argument("--rounds", type=int, default=15)
    args = p.parse_args()

    import numpy as np

    import ember as em

    dev = em.Device(args.device)
    rt = dev.backend.rt
    rng = np.random.default_rng(0)
    a = em.tensor(rng.standard_normal((args.n, args.n)).astype(np.float32), device=dev)
    chains = [int(c) for c in args.chain.split(",")]
    saved = rt.sync_mode, rt.spin_s
    times: dict[tuple[str, int], list[float]] = {(name, c): [] for name, _ in SETTINGS for c in chains}
    try:
        rt.sync_mode = "spin"
        for _ in range(2):  # compile and tune the product, warm the clocks
            for c in chains:
                out = [a @ a for _ in range(c)]
                dev.synchronize()
                del out
        for _ in range(args.rounds):
            for c in chains:
                for name, spin in SETTINGS:
                    rt.spin_s = spin
                    t = time.perf_counter()
                    out = [a @ a for _ in range(c)]
                    dev.synchronize()
                    times[(name, c)].append(time.perf_counter() - t)
                    del out
    finally:
        rt.sync_mode, rt.spin_s = saved
    flops = 2 * args.n**3
    print(f"{args.device} ({rt.name}): {args.n}^3 products, median of {args.rounds} rounds, settings alternated")
    print(f"{'chain':>5}  " + "  ".join(f"{name:>12}" for name, _ in SETTINGS) + "   (ms, enqueue + synchronize)")
    for c in chains:
        row = [statistics.median(times[(name, c)]) * 1e3 for name, _ in SETTINGS]
        best = min(row)
        print(
            f"{c:>5}  "
            + "  ".join(f"{ms:12.3f}" for ms in row)
            + f"   best {c * flops / (best / 1e3) / 1e9:,.0f} GFLOP/s"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

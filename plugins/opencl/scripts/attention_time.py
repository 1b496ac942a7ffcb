"""Attention forward and forward+backward on an OpenCL device: the flash kernels (attention.py;
``EMBER_OPENCL_FLASH=1``, so on CPU devices too) against the composite paths
(``EMBER_OPENCL_FLASH=0``), each mode in a child process of its own, alternated (A B A B ...)
so that a change in the machine's load shows as a spread, not a ratio.

    python plugins/opencl/scripts/attention_time.py [--device opencl:0] [--shape 32,16,512,64]
        [--small] [--causal] [--dtype float32] [--layout w4|contiguous] [--reps 10] [--rounds 2]

``--shape B,h,L,E``: batch, heads, sequence length, head size (default W4's GPU size; ``--small``
is 2,4,128,64 for PoCL). ``--layout w4`` (default) reads q, k, v as W4 does: head views
(B, h, L, E) of one (B, L, 3 h E) projection; ``contiguous``: three (B, h, L, E) tensors. Prints the
median wall time per call (ms, device synchronised) and what ``attention.CALLS`` counted. A probe for
the device machine, not a test; the first call of each mode (program builds) is not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def measure(args: argparse.Namespace) -> dict[str, object]:
    """One mode in this process: median ms of the forward alone and of forward + backward."""
    import numpy as np

    import ember as em
    from ember.dtypes import as_dtype
    from ember_opencl import attention

    B, h, L, E = args.shape
    dev = em.Device(args.device).autodiff()
    dt = as_dtype(args.dtype)
    rng = np.random.default_rng(0)
    if args.layout == "w4":
        x = em.tensor(rng.standard_normal((B, L, 3 * h * E)).astype(dt.numpy), device=dev, requires_grad=True)

        def operands() -> tuple:
            q, k, v = em.split(x, 3, axis=-1)
            return tuple(em.permute_dims(t.reshape((B, L, h, E)), (0, 2, 1, 3)) for t in (q, k, v))

        leaves = [x]
    else:
        leaves = [
            em.tensor(rng.standard_normal((B, h, L, E)).astype(dt.numpy), device=dev, requires_grad=True)
            for _ in range(3)
        ]

        def operands() -> tuple:
            return tuple(leaves)

    g = em.tensor(rng.standard_normal((B, h, L, E)).astype(dt.numpy), device=dev)

    def forward() -> None:
        with em.no_grad():
            em.scaled_dot_product_attention(*operands(), is_causal=args.causal)

    def both() -> None:
        for t in leaves:
            t.grad = None
        out = em.scaled_dot_product_attention(*operands(), is_causal=args.causal)
        out.backward(g)

    result: dict[str, object] = {}
    for name, fn in (("forward", forward), ("fwd+bwd", both)):
        fn()  # builds
        dev.synchronize()
        times = []
        for _ in range(args.reps):
            start = time.perf_counter()
            fn()
            dev.synchronize()
            times.append((time.perf_counter() - start) * 1e3)
        result[name] = statistics.median(times)
    result["calls"] = dict(attention.CALLS)
    result["device"] = str(dev.backend.rt.label)
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="opencl:0")
    p.add_argument("--shape", default="32,16,512,64")
    p.add_argument("--small", action="store_true", help="2,4,128,64 (PoCL)")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--layout", choices=("w4", "contiguous"), default="w4")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2, help="child processes per mode, alternated")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    args.shape = tuple(int(n) for n in ("2,4,128,64" if args.small else args.shape).split(","))
    if args.child:
        print(json.dumps(measure(args)))
        return 0
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--device", args.device, "--dtype", args.dtype]
    argv += ["--shape", ",".join(map(str, args.shape)), "--layout", args.layout, "--reps", str(args.reps)]
    argv += ["--causal"] if args.causal else []
    print(f"attention {args.shape} (B, h, L, E) {args.dtype} causal={args.causal} layout={args.layout}")
    results: dict[str, list[dict]] = {"flash": [], "composite": []}
    for _ in range(args.rounds):
        for mode, flag in (("flash", "1"), ("composite", "0")):
            env = {**os.environ, "EMBER_OPENCL_FLASH": flag}
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                sys.stderr.write(done.stderr)
                return done.returncode
            r = json.loads(done.stdout.strip().splitlines()[-1])
            results[mode].append(r)
            print(f"  {mode:9s} forward {r['forward']:9.3f} ms   fwd+bwd {r['fwd+bwd']:9.3f} ms   calls {r['calls']}")
    print(f"device: {results['flash'][0]['device']}")
    for key in ("forward", "fwd+bwd"):
        f = [r[key] for r in results["flash"]]
        c = [r[key] for r in results["composite"]]
        print(f"{key:8s} flash {min(f):.3f}-{max(f):.3f} ms, composite {min(c):.3f}-{max(c):.3f} ms: "
              f"composite / flash {statistics.median(c) / statistics.median(f):.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

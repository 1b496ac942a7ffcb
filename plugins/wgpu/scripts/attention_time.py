"""Attention forward and forward+backward on a WGPU adapter: the flash kernels (kernels/attention.py)
against the composite (``EMBER_WGPU_FLASH=0``: batched matmul, row softmax, matmul; autodiff's rule).

    python plugins/wgpu/scripts/attention_time.py [--shape 32,16,512,64] [--small] [--causal]
        [--layout bshd] [--dtype float32] [--reps 10] [--rounds 2] [--device wgpu:0]

``--shape B,H,L,D`` (or ``B,H,L,S,D``); ``--small`` is 2,4,128,64 (for lavapipe). ``--layout bshd``
makes q, k, v (B, L, H, D) tensors viewed as (B, H, L, D), as a transformer's projections give them
(W4). Each mode runs in a child process of its own (the switch is read when the backend starts),
the modes alternating for ``--rounds``; a child prints ms per forward and per forward+backward
(``y.backward(g)`` through q, k, v), each the median of ``--reps`` synchronized runs after two
warm-ups, and how many flash launches it saw (``attention.CALLS``). The flash mode's backward is
autodiff's composite unless ``EMBER_WGPU_FLASH_BACKWARD=1`` is set (the children inherit it). A probe,
not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def child(args: argparse.Namespace) -> dict[str, object]:
    import numpy as np

    import ember as em
    from ember_wgpu.kernels import attention

    dims = [int(x) for x in args.shape.split(",")]
    b, h, L, S, d = dims if len(dims) == 5 else (dims[0], dims[1], dims[2], dims[2], dims[3])
    dev = em.Device(args.device)
    ad = dev.autodiff()
    rng = np.random.default_rng(0)

    bshd = args.layout == "bshd"

    def make(n: int) -> em.Tensor:
        shape = (b, n, h, d) if bshd else (b, h, n, d)
        return em.tensor(rng.standard_normal(shape).astype(np.float32), device=ad).astype(args.dtype).detach()

    # with bshd the leaves are (B, L, H, D) tensors, attention sees their (B, H, L, D) views
    leaves = [make(n).requires_grad_() for n in (L, S, S)]
    g = make(L).permute((0, 2, 1, 3)) if bshd else make(L)

    def operands() -> list[em.Tensor]:
        return [x.permute((0, 2, 1, 3)) for x in leaves] if bshd else leaves

    def forward() -> None:
        q, k, v = (x.detach() for x in operands())
        em.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=args.causal)

    def step() -> None:
        for x in leaves:
            x.grad = None
        y = em.nn.functional.scaled_dot_product_attention(*operands(), is_causal=args.causal)
        y.backward(g)

    out: dict[str, object] = {"flash": attention.enabled(), "device": dev.backend.rt.name}
    for name, fn in (("forward_ms", forward), ("fwd_bwd_ms", step)):
        for _ in range(2):
            fn()
        dev.synchronize()
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn()
            dev.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
        out[name] = round(statistics.median(times), 3)
    out["calls"] = dict(attention.CALLS)
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="32,16,512,64")
    p.add_argument("--small", action="store_true", help="2,4,128,64 (lavapipe)")
    p.add_argument("--causal", action="store_true")
    p.add_argument("--layout", choices=("bhld", "bshd"), default="bhld")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--device", default="wgpu:0")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.small:
        args.shape = "2,4,128,64"
    if args.child:
        print(json.dumps(child(args)))
        return 0
    argv = [sys.executable, os.path.abspath(__file__), "--child", "--shape", args.shape, "--layout", args.layout]
    argv += ["--dtype", args.dtype, "--reps", str(args.reps), "--device", args.device]
    argv += ["--causal"] if args.causal else []
    print(f"shape {args.shape} causal={args.causal} layout={args.layout} dtype={args.dtype}")
    results: dict[str, list[dict[str, object]]] = {"flash": [], "composite": []}
    for _ in range(args.rounds):
        for mode, flag in (("flash", "1"), ("composite", "0")):
            env = {**os.environ, "EMBER_WGPU_FLASH": flag}
            done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                print(done.stderr[-3000:])
                return done.returncode
            r = json.loads(done.stdout.strip().splitlines()[-1])
            results[mode].append(r)
            print(f"  {mode:9s} forward {r['forward_ms']:9.3f} ms   fwd+bwd {r['fwd_bwd_ms']:9.3f} ms   "
                  f"calls {r['calls']}   ({r['device']})")  # fmt: skip
    best = {m: min(float(r["fwd_bwd_ms"]) for r in rs) for m, rs in results.items()}  # type: ignore[arg-type]
    fwd = {m: min(float(r["forward_ms"]) for r in rs) for m, rs in results.items()}  # type: ignore[arg-type]
    print(f"best of {args.rounds}: forward {fwd['flash']:.3f} vs {fwd['composite']:.3f} ms "
          f"({fwd['composite'] / fwd['flash']:.2f}x); fwd+bwd {best['flash']:.3f} vs {best['composite']:.3f} ms "
          f"({best['composite'] / best['flash']:.2f}x)")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""W2's narrow products on one WGPU device: the skinny kernels (kernels/skinny.py) against the tiled
path (split-K) they replace, and torch's on CUDA if present.

Each figure: ``--iters`` products recorded back to back, one synchronize, divided by the products
(the device's time per product while the host keeps ahead), best of 3.

    PYTHONPATH=. python plugins/wgpu/scripts/skinny_time.py --device wgpu:0   # (4096, 4096) @ (4096, 10), both layouts
    PYTHONPATH=. python plugins/wgpu/scripts/skinny_time.py --m 512 --k 512 --iters 5  # lavapipe
"""

from __future__ import annotations

import argparse

import numpy as np

import ember as em
from benchmarks.harness import queued_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="wgpu:0")
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--k", type=int, default=4096)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    from ember_wgpu.kernels import matmul, skinny  # noqa: PLC0415

    dev = em.Device(args.device)
    rt = dev.backend.rt
    rng = np.random.default_rng(0)
    m, k, n = args.m, args.k, args.n
    h = em.tensor(rng.standard_normal((m, k)).astype(np.float32), device=dev)
    w = em.tensor(rng.standard_normal((k, n)).astype(np.float32), device=dev)
    hT = em.tensor(rng.standard_normal((k, m)).astype(np.float32), device=dev).permute((1, 0))
    cases = {f"({m}, {k}) @ ({k}, {n}), A K-contiguous": (h, w), f"({k}, {m})ᵀ @ ({k}, {n}), A M-contiguous": (hT, w)}
    try:
        import torch  # noqa: PLC0415

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    gb = (m * k + k * n + m * n) * 4 / 1e9
    for label, (a, b) in cases.items():
        row = []
        for on in (True, False):
            matmul.SKINNY = on
            rt.plans.clear()
            before = sum(skinny.CALLS.values())
            ms = queued_ms(lambda a=a, b=b: a @ b, dev.synchronize, args.iters)
            ran = sum(skinny.CALLS.values()) > before
            note = ", skinny ran" if ran else ""
            row.append(f"{'skinny' if on else 'tiled'} {ms:.4f} ms ({gb / ms * 1e3:.1f} GB/s{note})")
            if on:
                want = a.numpy().astype(np.float64) @ b.numpy().astype(np.float64)
                err = float(np.abs((a @ b).numpy() - want).max())
                row.append(f"max abs err {err:.2e}")
        if cuda:
            ta = torch.from_numpy(a.numpy()).cuda()
            tb = torch.from_numpy(b.numpy()).cuda()
            if "M-contiguous" in label:
                ta = ta.T.contiguous().T
            ms = queued_ms(lambda ta=ta, tb=tb: ta @ tb, torch.cuda.synchronize, args.iters)
            row.append(f"torch {ms:.4f} ms")
        print(f"{label} on {args.device}: " + "; ".join(row), flush=True)
    matmul.SKINNY = True


if __name__ == "__main__":
    main()

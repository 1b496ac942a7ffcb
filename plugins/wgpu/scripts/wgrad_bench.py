"""conv's weight gradient per shape on one WGPU device: the native kernel (kernels/wgrad.py) at its
chosen and at given slice counts, core's unfold + matmul composite, and torch's on CUDA if present.

Each figure: ``--iters`` calls recorded back to back then one synchronize, divided by the calls
(the device's time per call where the host keeps ahead; the host's time otherwise), best of 3.

(from the repository root, with ``PYTHONPATH=.`` for ``benchmarks.harness``)

    python plugins/wgpu/scripts/wgrad_bench.py --device wgpu:0                  # W3's two convs, batch 512
    python plugins/wgpu/scripts/wgrad_bench.py --device wgpu:0 --slices 256 512 1004 2048
    python plugins/wgpu/scripts/wgrad_bench.py --device wgpu:0 --tiles 32x16x32x4x4s 64x32x16x4x4s 64x64x32x8x8s
    python plugins/wgpu/scripts/wgrad_bench.py --batch 8 --iters 3   # lavapipe
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import ember as em
from benchmarks.harness import queued_ms
from ember.ops import conv as conv_ops

#: name -> (C_in, C_out, spatial size, kernel, padding): W3's two convs (3x3, pad 1, stride 1)
SHAPES = {"w3_conv1": (1, 32, (28, 28), (3, 3), 1), "w3_conv2": (32, 64, (14, 14), (3, 3), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="wgpu:0")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--slices", type=int, nargs="*", default=[], help="slice counts to time besides the chosen one")
    ap.add_argument(
        "--tiles", nargs="*", default=[], help="GEMM tilings to time too: BMxBNxBKxTMxTN, 's' suffix: split layout"
    )
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    args = ap.parse_args()
    dev = em.Device(args.device)
    for name in args.shapes:
        _bench_shape(dev, name, args)


def _bench_shape(dev: em.Device, name: str, args: argparse.Namespace) -> None:
    from ember_wgpu.kernels import wgrad  # noqa: PLC0415
    from ember_wgpu.kernels.matmul import Config, fits  # noqa: PLC0415

    rt = dev.backend.rt
    rng = np.random.default_rng(0)
    cin, cout, size, kernel, pad = SHAPES[name]
    x = rng.standard_normal((args.batch, cin) + size).astype(np.float32)
    g = rng.standard_normal((args.batch, cout) + size).astype(np.float32)
    xt, gt = em.tensor(x, device=dev), em.tensor(g, device=dev)
    nd = len(kernel)
    ones, pads = (1,) * nd, ((pad, pad),) * nd

    def native(slices: int | None = None, config: Config | None = None) -> Any:
        return wgrad.conv_weight_grad(rt, gt._data, xt._data, kernel, ones, pads, ones, 1, config, slices)

    def composite() -> Any:
        return conv_ops._conv_weight_grad_composite(
            gt, xt, kernel=kernel, stride=ones, padding=pads, dilation=ones, groups=1
        )

    native()
    plan = [p for k, p in rt.plans.items() if k[0] == "conv_wgrad" and k[-1] is None][-1]
    cfg = [k for k in rt.kernels if k[0] == "conv_wgrad"][-1][-1]
    rows = [(f"native ({plan.slices} slices, tile {cfg.bm}x{cfg.bn}, grid {plan.gemm.groups})", native)]
    rows += [(f"native, {s} slices", lambda s=s: native(s)) for s in args.slices]
    for tile in args.tiles:
        bm, bn, bk, tm, tn = (int(v) for v in tile.rstrip("s").split("x"))
        c = Config(bm, bn, bk, tm, tn, False, tile.endswith("s"))
        if fits(rt, c):
            rows.append((f"native, tile {tile}", lambda c=c: native(config=c)))
    rows.append(("core composite", composite))
    print(f"{name}: g {g.shape}, x {x.shape} -> dW {(cout, cin) + kernel} on {args.device}")
    for label, call in rows:
        print(f"  {label:60s} {queued_ms(call, dev.synchronize, args.iters):8.3f} ms")
    _torch(x, g, kernel, pad, args.iters)


def _torch(x: np.ndarray, g: np.ndarray, kernel: tuple[int, ...], pad: int, iters: int) -> None:
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        return
    if not torch.cuda.is_available():
        return
    xt, gt = torch.tensor(x, device="cuda"), torch.tensor(g, device="cuda")
    w = torch.zeros((g.shape[1], x.shape[1]) + kernel, device="cuda")
    nd = len(kernel)

    def call() -> Any:
        return torch.ops.aten.convolution_backward(
            gt, xt, w, None, [1] * nd, [pad] * nd, [1] * nd, False, [0] * nd, 1, [False, True, False]
        )[1]

    ms = queued_ms(call, torch.cuda.synchronize, iters)
    print(f"  {'torch (CUDA) convolution_backward, weight only':60s} {ms:8.3f} ms")


if __name__ == "__main__":
    main()

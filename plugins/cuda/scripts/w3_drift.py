"""W3's training step, a few dozen SGD steps, with ember-cuda's conv kernels run on the CPU (their
CUDA source through g++, ``tests/conv_on_cpu.py``) inside ember's cpu backend, beside the cpu
backend's own float32 kernels and a float64 run: how far each float32 trajectory's gradients are
from float64's after the first step and after the last. A kernel error shows at step 1;
trajectories that all drift alike later are rounding differences grown by training (ReLU and
max-pool switch on them), not a kernel's. Seen (26 steps, batch 128): both float32 runs within
5e-7 of float64 after step 1 and 2e-4 (loss) to 9e-2 (f1w) off it after step 26, c1b 2.2e-2 (cpu
kernels) and 4.1e-2 (cuda kernels); the previous cuda kernels (since removed) drifted alike, which
was their 1.8e-1 from the current ones after 26 jit steps on the H100 (batch 512). No GPU needed:

    python3 plugins/cuda/scripts/w3_drift.py [steps] [batch]
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

import ember as em

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests"), ROOT]

import conv_on_cpu  # noqa: E402
from ember_cuda import conv  # noqa: E402

from benchmarks import w3_cnn  # noqa: E402
from ember.backend import EXTENSION_KERNELS  # noqa: E402
from ember.device import invalidate  # noqa: E402

OPS = ("conv", "conv_weight_grad", "conv_transpose", "max_pool", "max_pool_backward")


def install(table: dict[str, Callable[..., Any]] | None) -> None:
    """``table``'s ops as the cpu device's kernels (None: the cpu backend's own again)."""
    for op in OPS:
        if table is None:
            EXTENSION_KERNELS.pop((op, "cpu"), None)
        else:
            EXTENSION_KERNELS[(op, "cpu")] = lambda backend, *h, _f=table[op], **p: np.asarray(_f(*h, **p))
        invalidate("cpu", op)


def trajectory(steps: int, batch: int, dtype: str) -> list[dict[str, np.ndarray]]:
    """The gradients (and loss) of every step of W3's SGD loop from its seeded start."""
    x_np, y_np, p_np = w3_cnn.inputs({"batch": batch})
    dev = em.Device("cpu").autodiff()
    x = em.tensor(x_np.astype(dtype), device=dev)
    y = em.tensor(y_np, device=dev)
    p = {k: em.tensor(v.astype(dtype), device=dev).requires_grad_() for k, v in p_np.items()}
    out = []
    for _ in range(steps):
        for t in p.values():
            t.grad = None
        h = em.max_pool(em.relu(em.conv(x, p["c1w"], p["c1b"], padding=1)), 2)
        h = em.max_pool(em.relu(em.conv(h, p["c2w"], p["c2b"], padding=1)), 2)
        h = em.relu(h.reshape((batch, w3_cnn.FLAT)) @ p["f1w"] + p["f1b"])
        loss = em.cross_entropy(h @ p["f2w"] + p["f2b"], y)
        loss.backward()
        row = {"loss": loss.numpy().astype(np.float64)}
        row.update({f"grad_{k}": t.grad.numpy().astype(np.float64) for k, t in p.items()})
        out.append(row)
        with em.no_grad():
            for t in p.values():
                t.copy_(t - w3_cnn.LR * t.grad)
    return out


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 26
    batch = int(sys.argv[2]) if len(sys.argv) > 2 else 16
    fake = conv_on_cpu.FakeCupy(sms=2, check_order=False)  # (the kernel tests check the order)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a shared kernel was called")

    fallback = {"matmul": fake.matmul, **{op: refuse for op in OPS}}
    runs = {"float64 (cpu)": (None, "float64"), "float32 cpu kernels": (None, "float32")}
    runs["float32 cuda conv.py"] = (conv.conv_kernels(fake, fallback), "float32")
    result = {}
    try:
        for label, (table, dtype) in runs.items():
            install(table)
            result[label] = trajectory(steps, batch, dtype)
    finally:
        install(None)
    ref = result.pop("float64 (cpu)")
    print(f"W3 at batch {batch}, {steps} SGD steps: max|g - g64| / max|g64| per gradient (float64 run as reference)")
    keys = list(ref[0])
    for step in (0, steps - 1):
        print(f" step {step + 1}:" + "".join(f" {k.removeprefix('grad_'):>8s}" for k in keys))
        for label, rows in result.items():
            errs = [np.abs(rows[step][k] - ref[step][k]).max() / max(np.abs(ref[step][k]).max(), 1e-300) for k in keys]
            print(f"  {label:22s}" + "".join(f" {e:8.1e}" for e in errs))
    b = ref[-1]["grad_c1b"]
    print(f" grad_c1b at step {steps} (float64): max |.| {np.abs(b).max():.2e}, largest |grad_c1w| "
          f"{np.abs(ref[-1]['grad_c1w']).max():.2e}")  # fmt: skip
    print(f" kernel launches on the CPU: {sum(fake.launches.values())}")


if __name__ == "__main__":
    main()

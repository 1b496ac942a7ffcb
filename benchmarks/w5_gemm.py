"""W5 GEMM: C = A @ B, square float32 matrices. Reported in FLOP/s (2 n^3 per product)."""

from __future__ import annotations

from typing import Any

import numpy as np

from .harness import Case, no_sync, randn, rng

ID = "W5"
TITLE = "GEMM C = A @ B"
SIZES = {"cpu": {"n": 2048}, "gpu": {"n": 8192}, "quick": {"n": 128}, "check": {"n": 256}}
ITERS = {"cpu": 20, "gpu": 20, "quick": 2}
TOLERANCE = 1e-5


def describe(size: dict[str, int]) -> str:
    n = size["n"]
    return f"{n}x{n}x{n}"


def derived(size: dict[str, int], seconds: float) -> tuple[float, str]:
    return 2.0 * size["n"] ** 3 / seconds, "FLOP/s"


def inputs(size: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    gen = rng()
    n = size["n"]
    return randn(gen, (n, n)), randn(gen, (n, n))


def _case(a: Any, b: Any, to_numpy: Any, sync: Any) -> Case:
    last: dict[str, Any] = {}

    def step() -> Any:
        last["c"] = c = a @ b
        return c

    return Case(step, sync, lambda: {"c": to_numpy(last["c"])})


def ember(device: Any, size: dict[str, int]) -> Case:
    import ember as em

    a, b = (em.tensor(m, device=device) for m in inputs(size))
    return _case(a, b, lambda t: t.numpy(), device.synchronize)


def numpy(size: dict[str, int]) -> Case:
    a, b = inputs(size)
    return _case(a, b, np.asarray, no_sync)


def torch(device: Any, size: dict[str, int]) -> Case:
    import torch as th

    from .peers import torch_sync

    a, b = (th.from_numpy(m).to(device) for m in inputs(size))
    return _case(a, b, lambda t: t.cpu().numpy(), torch_sync(device))


def cupy(size: dict[str, int]) -> Case:
    import cupy as cp

    from .peers import cupy_sync

    a, b = (cp.asarray(m) for m in inputs(size))
    return _case(a, b, cp.asnumpy, cupy_sync())

"""W1 eager dispatch overhead: y = x; 1000 times y = y + x; then materialize y on the host.

Reported per op (µs/op): the time of one iteration divided by the 1000 dependent adds. The
``ember_jit`` row runs the same chain captured by ``em.jit`` and replayed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .harness import Case, no_sync, randn, rng

ID = "W1"
TITLE = "eager dispatch: 1000 dependent adds"
SIZES = {
    "cpu": {"n": 64, "ops": 1000},
    "gpu": {"n": 64, "ops": 1000},
    "quick": {"n": 64, "ops": 1000},
    "check": {"n": 64, "ops": 1000},
}
ITERS = {"cpu": 100, "gpu": 100, "quick": 3}
TOLERANCE = 1e-6


def describe(size: dict[str, int]) -> str:
    return f"x: {size['n']} el, {size['ops']} adds"


def derived(size: dict[str, int], seconds: float) -> tuple[float, str]:
    return seconds / size["ops"] * 1e6, "µs/op"


def inputs(size: dict[str, int]) -> np.ndarray:
    return randn(rng(), (size["n"],))


def _case(x: Any, ops: int, materialize: Any, sync: Any) -> Case:
    last: dict[str, np.ndarray] = {}

    def step() -> np.ndarray:
        y = x
        for _ in range(ops):
            y = y + x
        last["y"] = out = materialize(y)
        return out

    return Case(step, sync, lambda: dict(last))


def ember(device: Any, size: dict[str, int]) -> Case:
    import ember as em

    x = em.tensor(inputs(size), device=device)
    return _case(x, size["ops"], lambda y: y.numpy(), device.synchronize)


def ember_jit(device: Any, size: dict[str, int]) -> Case:
    """The 1000 adds captured once by ``em.jit`` and replayed: kernel calls without dispatch."""
    import ember as em

    x = em.tensor(inputs(size), device=device)
    ops = size["ops"]

    @em.jit
    def chain(x: Any) -> Any:
        y = x
        for _ in range(ops):
            y = y + x
        return y

    last: dict[str, np.ndarray] = {}

    def step() -> np.ndarray:
        last["y"] = out = chain(x).numpy()
        return out

    return Case(step, device.synchronize, lambda: dict(last))


def numpy(size: dict[str, int]) -> Case:
    return _case(inputs(size), size["ops"], lambda y: y, no_sync)


def torch(device: Any, size: dict[str, int]) -> Case:
    import torch as th

    from .peers import torch_sync

    x = th.from_numpy(inputs(size)).to(device)
    return _case(x, size["ops"], lambda y: y.cpu().numpy(), torch_sync(device))


def cupy(size: dict[str, int]) -> Case:
    import cupy as cp

    from .peers import cupy_sync

    x = cp.asarray(inputs(size))
    return _case(x, size["ops"], cp.asnumpy, cupy_sync())

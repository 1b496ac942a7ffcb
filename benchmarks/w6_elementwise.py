"""W6 elementwise chain (fusion probe): y = gelu(x * a + b) * sigmoid(x), exact (erf) GELU,
a and b full random tensors of x's shape, forward only. Reported as effective bandwidth:
16 bytes per element (x, a, b read, y written) over the time of one iteration."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .harness import Case, Unavailable, no_sync, randn, rng

ID = "W6"
TITLE = "elementwise chain gelu(x*a+b)*sigmoid(x)"
SIZES = {"cpu": {"n": 2**22}, "gpu": {"n": 2**26}, "quick": {"n": 2**14}, "check": {"n": 2**12}}
ITERS = {"cpu": 30, "gpu": 50, "quick": 2}
TOLERANCE = 1e-5
BYTES_PER_ELEMENT = 16
_SQRT_HALF = 1.0 / math.sqrt(2.0)


def describe(size: dict[str, int]) -> str:
    n = size["n"]
    exp = n.bit_length() - 1
    return f"2^{exp} el" if n == 1 << exp else f"{n} el"


def derived(size: dict[str, int], seconds: float) -> tuple[float, str]:
    return BYTES_PER_ELEMENT * size["n"] / seconds, "B/s"


def inputs(size: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gen = rng()
    n = size["n"]
    return randn(gen, (n,)), randn(gen, (n,)), randn(gen, (n,))


def _case(chain: Any, to_numpy: Any, sync: Any) -> Case:
    last: dict[str, Any] = {}

    def step() -> Any:
        last["y"] = y = chain()
        return y

    return Case(step, sync, lambda: {"y": to_numpy(last["y"])})


def ember(device: Any, size: dict[str, int]) -> Case:
    import ember as em

    x, a, b = (em.tensor(v, device=device) for v in inputs(size))
    return _case(lambda: em.gelu(x * a + b) * em.sigmoid(x), lambda t: t.numpy(), device.synchronize)


def _by_hand(xp: Any, erf: Any, x: Any, a: Any, b: Any) -> Any:
    t = x * a + b
    return 0.5 * t * (1.0 + erf(t * _SQRT_HALF)) * (1.0 / (1.0 + xp.exp(-x)))


def numpy(size: dict[str, int]) -> Case:
    try:
        from scipy.special import erf
    except ImportError:
        raise Unavailable("numpy has no erf and scipy is not installed") from None
    x, a, b = inputs(size)
    return _case(lambda: _by_hand(np, erf, x, a, b), np.asarray, no_sync)


def torch(device: Any, size: dict[str, int]) -> Case:
    import torch as th
    import torch.nn.functional as F

    from .peers import torch_sync

    x, a, b = (th.from_numpy(v).to(device) for v in inputs(size))
    return _case(lambda: F.gelu(x * a + b) * th.sigmoid(x), lambda t: t.cpu().numpy(), torch_sync(device))


def cupy(size: dict[str, int]) -> Case:
    import cupy as cp
    from cupyx.scipy.special import erf

    from .peers import cupy_sync

    x, a, b = (cp.asarray(v) for v in inputs(size))
    return _case(lambda: _by_hand(cp, erf, x, a, b), cp.asnumpy, cupy_sync())

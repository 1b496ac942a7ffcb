"""W3 CNN training step: Conv2d(1,32,3,pad1)-ReLU-MaxPool2-Conv2d(32,64,3,pad1)-ReLU-MaxPool2-
Flatten-Linear(64*7*7,128)-ReLU-Linear(128,10), softmax cross-entropy (mean), backward,
SGD(lr=0.01). Input N x 1 x 28 x 28 (PyTorch layout, N, C, H, W).

The cross-check compares the loss and every gradient after one step from identical weights.
There is no numpy version (convolution by hand is a project of its own).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .harness import Case, Unavailable, labels, randn, rng

ID = "W3"
TITLE = "CNN training step"
SIZES = {"cpu": {"batch": 64}, "gpu": {"batch": 512}, "quick": {"batch": 2}, "check": {"batch": 4}}
ITERS = {"cpu": 20, "gpu": 50, "quick": 2}
TOLERANCE = 1e-4
CLASSES = 10
LR = 0.01
FLAT = 64 * 7 * 7
#: conv weights (out, in, kh, kw); linear weights stored (in, out) so a layer is x @ w + b
SHAPES = {
    "c1w": (32, 1, 3, 3),
    "c1b": (32,),
    "c2w": (64, 32, 3, 3),
    "c2b": (64,),
    "f1w": (FLAT, 128),
    "f1b": (128,),
    "f2w": (128, CLASSES),
    "f2b": (CLASSES,),
}
FAN_IN = {"c1w": 9, "c2w": 32 * 9, "f1w": FLAT, "f2w": 128}


def describe(size: dict[str, int]) -> str:
    return f"batch {size['batch']}, 1x28x28"


def derived(size: dict[str, int], seconds: float) -> None:
    return None


def inputs(size: dict[str, int]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    gen = rng()
    n = size["batch"]
    x = randn(gen, (n, 1, 28, 28))
    y = labels(gen, n, CLASSES)
    params = {k: randn(gen, s, FAN_IN[k] ** -0.5 if k in FAN_IN else 0.1) for k, s in SHAPES.items()}
    return x, y, params


def ember(device: Any, size: dict[str, int]) -> Case:
    return _ember(device, size, jit=False)


def ember_jit(device: Any, size: dict[str, int]) -> Case:
    """The same step (forward, backward, SGD update) captured by ``em.jit`` and replayed."""
    return _ember(device, size, jit=True)


def _ember(device: Any, size: dict[str, int], jit: bool) -> Case:
    import ember as em

    missing = [name for name in ("conv", "max_pool") if not hasattr(em, name)]
    if missing:
        raise Unavailable(f"ember has no {' / '.join('em.' + m for m in missing)} yet")
    dev = device.autodiff()
    x_np, y_np, p_np = inputs(size)
    n = size["batch"]
    x = em.tensor(x_np, device=dev)
    y = em.tensor(y_np, device=dev)
    params = {k: em.tensor(v, device=dev).requires_grad_() for k, v in p_np.items()}
    last: dict[str, Any] = {}

    def train(x: Any, y: Any) -> Any:
        p = params
        for t in p.values():
            t.grad = None
        h = em.max_pool(em.relu(em.conv(x, p["c1w"], p["c1b"], padding=1)), 2)
        h = em.max_pool(em.relu(em.conv(h, p["c2w"], p["c2b"], padding=1)), 2)
        h = em.relu(h.reshape((n, FLAT)) @ p["f1w"] + p["f1b"])
        loss = em.cross_entropy(h @ p["f2w"] + p["f2b"], y)
        loss.backward()
        with em.no_grad():
            for t in p.values():
                t.copy_(t - LR * t.grad)
        return loss

    run = em.jit(train) if jit else train

    def step() -> Any:
        last["loss"] = loss = run(x, y)
        return loss

    def result() -> dict[str, np.ndarray]:
        out = {"loss": last["loss"].numpy()}
        out.update({f"grad_{k}": t.grad.numpy() for k, t in params.items()})
        return out

    return Case(step, device.synchronize, result)


def torch(device: Any, size: dict[str, int]) -> Case:
    """The idiomatic PyTorch step: F.conv2d / F.max_pool2d / F.linear, torch.optim.SGD."""
    import torch as th
    import torch.nn.functional as F

    from .peers import torch_sync

    x_np, y_np, p_np = inputs(size)
    x, y = th.from_numpy(x_np).to(device), th.from_numpy(y_np).to(device)
    linear = {"f1w", "f2w"}  # torch keeps (out, in)
    params = {
        k: th.from_numpy(np.ascontiguousarray(v.T if k in linear else v)).to(device).requires_grad_()
        for k, v in p_np.items()
    }
    opt = th.optim.SGD(params.values(), lr=LR)
    last: dict[str, Any] = {}

    def step() -> Any:
        p = params
        opt.zero_grad(set_to_none=True)
        h = F.max_pool2d(F.relu(F.conv2d(x, p["c1w"], p["c1b"], padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["c2w"], p["c2b"], padding=1)), 2)
        h = F.relu(F.linear(h.flatten(1), p["f1w"], p["f1b"]))
        loss = F.cross_entropy(F.linear(h, p["f2w"], p["f2b"]), y)
        loss.backward()
        opt.step()
        last["loss"] = loss
        return loss

    def result() -> dict[str, np.ndarray]:
        out = {"loss": last["loss"].detach().cpu().numpy()}
        for k, t in params.items():
            g = t.grad.cpu().numpy()
            out[f"grad_{k}"] = g.T if k in linear else g
        return out

    return Case(step, torch_sync(device), result)

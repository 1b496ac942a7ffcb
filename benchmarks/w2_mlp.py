"""W2 MLP training step: Linear(784,h)-ReLU-Linear(h,h)-ReLU-Linear(h,10), softmax
cross-entropy (mean), backward, SGD(lr=0.01) update of every parameter.

The cross-check compares the loss and every gradient after one step from identical weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .harness import Case, labels, no_sync, randn, rng

ID = "W2"
TITLE = "MLP training step"
SIZES = {
    "cpu": {"batch": 128, "hidden": 1024},
    "gpu": {"batch": 4096, "hidden": 4096},
    "quick": {"batch": 16, "hidden": 64},
    "check": {"batch": 32, "hidden": 128},
}
ITERS = {"cpu": 50, "gpu": 50, "quick": 2}
TOLERANCE = 1e-4
IN_FEATURES = 784
CLASSES = 10
LR = 0.01
#: parameter names in order; weights are stored (in, out) so a layer is x @ w + b
NAMES = ("w1", "b1", "w2", "b2", "w3", "b3")


def describe(size: dict[str, int]) -> str:
    return f"batch {size['batch']}, hidden {size['hidden']}"


def derived(size: dict[str, int], seconds: float) -> None:
    return None


def inputs(size: dict[str, int]) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Input batch, labels and parameters (weights scaled by 1/sqrt(fan_in), biases nonzero)."""
    gen = rng()
    n, h = size["batch"], size["hidden"]
    dims = ((IN_FEATURES, h), (h, h), (h, CLASSES))
    x = randn(gen, (n, IN_FEATURES))
    y = labels(gen, n, CLASSES)
    params: dict[str, np.ndarray] = {}
    for i, (fan_in, fan_out) in enumerate(dims, start=1):
        params[f"w{i}"] = randn(gen, (fan_in, fan_out), fan_in**-0.5)
        params[f"b{i}"] = randn(gen, (fan_out,), 0.1)
    return x, y, params


def ember_step(x: Any, y: Any, params: dict[str, Any], last: dict[str, Any] | None = None) -> Any:
    """W2's training step over ember tensors already on a device (``params`` require grad): the
    step of :func:`ember` and of ``benchmarks.cold_start``'s ember-made inputs; ``last`` keeps the loss."""
    import ember as em

    def step() -> Any:
        p = params
        for t in p.values():
            t.grad = None
        h = em.relu(x @ p["w1"] + p["b1"])
        h = em.relu(h @ p["w2"] + p["b2"])
        loss = em.cross_entropy(h @ p["w3"] + p["b3"], y)
        loss.backward()
        with em.no_grad():
            for t in p.values():
                t.copy_(t - LR * t.grad)
        if last is not None:
            last["loss"] = loss
        return loss

    return step


def ember(device: Any, size: dict[str, int]) -> Case:
    import ember as em

    dev = device.autodiff()
    x_np, y_np, p_np = inputs(size)
    x = em.tensor(x_np, device=dev)
    y = em.tensor(y_np, device=dev)
    params = {k: em.tensor(v, device=dev).requires_grad_() for k, v in p_np.items()}
    last: dict[str, Any] = {}
    step = ember_step(x, y, params, last)

    def result() -> dict[str, np.ndarray]:
        out = {"loss": last["loss"].numpy()}
        out.update({f"grad_{k}": t.grad.numpy() for k, t in params.items()})
        return out

    return Case(step, device.synchronize, result)


def _numpy_step(xp: Any, x: Any, y: Any, p: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """One training step by hand (forward, backward, in-place SGD); returns loss and grads."""
    n = x.shape[0]
    rows = xp.arange(n)
    z1 = x @ p["w1"] + p["b1"]
    h1 = xp.maximum(z1, 0)
    z2 = h1 @ p["w2"] + p["b2"]
    h2 = xp.maximum(z2, 0)
    logits = h2 @ p["w3"] + p["b3"]
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = xp.exp(shifted)
    s = e.sum(axis=1, keepdims=True)
    loss = -(shifted[rows, y] - xp.log(s[:, 0])).mean()
    g = e / s
    g[rows, y] -= 1.0
    g /= n
    grads = {"w3": h2.T @ g, "b3": g.sum(axis=0)}
    g = (g @ p["w3"].T) * (z2 > 0)
    grads.update(w2=h1.T @ g, b2=g.sum(axis=0))
    g = (g @ p["w2"].T) * (z1 > 0)
    grads.update(w1=x.T @ g, b1=g.sum(axis=0))
    for k, v in p.items():
        v -= LR * grads[k]
    return loss, grads


def _by_hand(xp: Any, to_numpy: Any, sync: Any, size: dict[str, int]) -> Case:
    x_np, y_np, p_np = inputs(size)
    x, y = xp.asarray(x_np), xp.asarray(y_np)
    params = {k: xp.asarray(v) for k, v in p_np.items()}
    last: dict[str, Any] = {}

    def step() -> Any:
        last["loss"], last["grads"] = _numpy_step(xp, x, y, params)
        return last["loss"]

    def result() -> dict[str, np.ndarray]:
        out = {"loss": to_numpy(last["loss"])}
        out.update({f"grad_{k}": to_numpy(last["grads"][k]) for k in NAMES})
        return out

    return Case(step, sync, result)


def numpy(size: dict[str, int]) -> Case:
    return _by_hand(np, np.asarray, no_sync, size)


def cupy(size: dict[str, int]) -> Case:
    import cupy as cp

    from .peers import cupy_sync

    return _by_hand(cp, cp.asnumpy, cupy_sync(), size)


def torch(device: Any, size: dict[str, int]) -> Case:
    """The idiomatic PyTorch step: F.linear with (out, in) weights, torch.optim.SGD."""
    import torch as th
    import torch.nn.functional as F

    from .peers import torch_sync

    x_np, y_np, p_np = inputs(size)
    x, y = th.from_numpy(x_np).to(device), th.from_numpy(y_np).to(device)
    params = {k: th.from_numpy(np.ascontiguousarray(v.T)).to(device).requires_grad_() for k, v in p_np.items()}
    opt = th.optim.SGD(params.values(), lr=LR)
    last: dict[str, Any] = {}

    def step() -> Any:
        p = params
        opt.zero_grad(set_to_none=True)
        h = F.relu(F.linear(x, p["w1"], p["b1"]))
        h = F.relu(F.linear(h, p["w2"], p["b2"]))
        loss = F.cross_entropy(F.linear(h, p["w3"], p["b3"]), y)
        loss.backward()
        opt.step()
        last["loss"] = loss
        return loss

    def result() -> dict[str, np.ndarray]:
        out = {"loss": last["loss"].detach().cpu().numpy()}
        out.update({f"grad_{k}": t.grad.cpu().numpy().T for k, t in params.items()})
        return out

    return Case(step, torch_sync(device), result)

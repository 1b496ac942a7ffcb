"""``em.jit`` checks a backend's own tests call to prove its native replay.

Each check runs a jitted function on the device, compares every result with a numpy float64
reference, and returns the :class:`ember.jit.Jitted` it ran, so that the caller adds what only
its backend can tell (its replay ran, no kernel went through the op path, its counters moved)::

    from ember_conformance.jit_checks import assert_native_replay, check_training

    def test_training_step_replays_natively(dev):
        step = check_training(dev.autodiff(), optimizer="adamw")
        assert_native_replay(step, "foo")

The conformance suite's ``test_jit`` runs the same checks on every device.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ember as em
from ember import nn, optim

from .checks import assert_close, check, check_equal

__all__ = [
    "OPTIMIZERS",
    "assert_native_replay",
    "check_training",
    "check_new_inputs_and_shapes",
    "check_result_views",
    "check_replay_pool_in_memory_stats",
]

_IN, _HIDDEN, _OUT, _BATCH = 5, 8, 3, 7


class _Sgd:
    """float64 SGD as ember's ``optim.SGD`` defines it (first buffer = the gradient)."""

    def __init__(self, lr: float, momentum: float = 0.0) -> None:
        self.lr, self.momentum, self.buf = lr, momentum, {}

    def update(self, p: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        for k, g in grads.items():
            if self.momentum:
                g = self.buf[k] = g.copy() if k not in self.buf else self.momentum * self.buf[k] + g
            p[k] -= self.lr * g


class _AdamW:
    """float64 AdamW as ember's ``optim.AdamW`` defines it (decay, then the bias-corrected step)."""

    def __init__(self, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        self.lr, self.wd, self.betas, self.eps = lr, weight_decay, betas, 1e-8
        self.m: dict[str, np.ndarray] = {}
        self.v: dict[str, np.ndarray] = {}
        self.t = 0

    def update(self, p: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        b1, b2 = self.betas
        self.t += 1
        for k, g in grads.items():
            m = self.m[k] = b1 * self.m.get(k, 0.0) + (1 - b1) * g
            v = self.v[k] = b2 * self.v.get(k, 0.0) + (1 - b2) * g * g
            p[k] *= 1 - self.lr * self.wd
            p[k] -= self.lr / (1 - b1**self.t) * m / (np.sqrt(v) / np.sqrt(1 - b2**self.t) + self.eps)


#: name -> (ember optimizer over params, its float64 twin, calls before the capture: a first
#: step that creates optimizer state runs eagerly and the next call captures)
OPTIMIZERS: dict[str, tuple[Callable[[list[Any]], Any], Callable[[], Any], int]] = {
    "sgd": (lambda ps: optim.SGD(ps, lr=0.05), lambda: _Sgd(0.05), 0),
    "sgd-momentum": (lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9), lambda: _Sgd(0.05, 0.9), 1),
    "adamw": (lambda ps: optim.AdamW(ps, lr=1e-2, weight_decay=0.1), lambda: _AdamW(1e-2, 0.1), 1),
}


def _reference_grads(p: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    """The MLP's MSE loss and its gradients in float64, backward written out by hand."""
    h = np.tanh(x @ p["0.weight"].T + p["0.bias"])
    out = h @ p["2.weight"].T + p["2.bias"]
    dout = 2.0 * (out - y) / out.size
    dz = (dout @ p["2.weight"]) * (1.0 - h**2)
    grads = {"0.weight": dz.T @ x, "0.bias": dz.sum(0), "2.weight": dout.T @ h, "2.bias": dout.sum(0)}
    return float(np.mean((out - y) ** 2)), grads


def check_training(
    ad_device: em.Device,
    *,
    optimizer: str = "sgd",
    steps: int = 100,
    jit: bool = True,
    before_replays: Callable[[], None] | None = None,
) -> Any:
    """Train a tanh MLP (``nn.Linear``, MSE loss, ``optimizer`` from :data:`OPTIMIZERS`) with a
    step function called ``steps`` times: after every call the loss and each parameter must match
    a float64 numpy twin (rtol 2e-4). With ``jit`` the step is ``em.jit``-wrapped and must be
    captured once and replayed after; without, it runs eagerly.

    ``before_replays()`` runs once, after the call that captured and before the first replay:
    where a backend's test resets the counters its replay must leave untouched. Returns the step
    function it called.
    """
    if optimizer not in OPTIMIZERS:
        raise em.errors.InvalidArgumentError(
            f"check_training: optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}"
        )
    make_opt, make_ref, warm = OPTIMIZERS[optimizer]
    em.seed(0)
    model = nn.Sequential(
        nn.Linear(_IN, _HIDDEN, device=ad_device), nn.Tanh(), nn.Linear(_HIDDEN, _OUT, device=ad_device)
    )
    params = dict(model.named_parameters())
    ref = {k: p.numpy().astype(np.float64) for k, p in params.items()}
    ref_opt = make_ref()
    opt = make_opt(list(params.values()))

    def step(x: Any, y: Any) -> Any:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    if jit:
        step = em.jit(step)

    rng = np.random.default_rng(0)
    losses, want = [], []
    for i in range(steps):
        x = rng.standard_normal((_BATCH, _IN)).astype(np.float32)
        y = rng.standard_normal((_BATCH, _OUT)).astype(np.float32)
        loss = step(em.tensor(x, device=ad_device), em.tensor(y, device=ad_device))
        losses.append(loss)  # kept: a later replay must not overwrite it
        ref_loss, grads = _reference_grads(ref, x.astype(np.float64), y.astype(np.float64))
        ref_opt.update(ref, grads)
        want.append(ref_loss)
        for k, p in params.items():
            np.testing.assert_allclose(p.numpy(), ref[k], rtol=2e-4, atol=2e-5, err_msg=f"{k}, step {i}")
        if jit and i == warm and before_replays is not None:
            before_replays()
    np.testing.assert_allclose([float(v.item()) for v in losses], want, rtol=2e-4, atol=1e-6, err_msg="losses")
    if not jit:
        return step
    captures = step.captures
    check(
        len(captures) == 1,
        lambda: f"check_training ({optimizer}): one capture expected, got {len(captures)}:\n{step.describe()}",
    )
    check(
        captures[0].replays == steps - warm - 1,
        lambda: (
            f"check_training ({optimizer}): {captures[0].replays} replays, expected {steps - warm - 1} "
            f"({steps} calls: {warm} eager, 1 capturing):\n{step.describe()}"
        ),
    )
    return step


def check_new_inputs_and_shapes(device: em.Device) -> Any:
    """Replays read each call's arguments, strided (transposed) ones included; a new shape
    captures again; the Python function runs at capture only. Returns the jitted function
    (two captures, replayed 2 and 1 times)."""
    seen = []

    @em.jit
    def f(x: Any, w: Any) -> Any:
        seen.append(x.shape)
        return (x @ w).tanh() * 2.0 + x.sum(axis=1, keepdims=True)

    rng = np.random.default_rng(1)
    for rows, transposed in ((3, False), (3, False), (3, True), (6, False), (6, True)):
        a = rng.standard_normal((rows, 4)).astype(np.float32)
        b = rng.standard_normal((4, 2)).astype(np.float32)
        x = (
            em.tensor(np.ascontiguousarray(a.T), device=device).permute((1, 0))
            if transposed
            else em.tensor(a, device=device)
        )
        out = f(x, em.tensor(b, device=device))
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        assert_close(out, np.tanh(a64 @ b64) * 2.0 + a64.sum(axis=1, keepdims=True), em.float32, scale=4.0)
    check_equal([tuple(s) for s in seen], [(3, 4), (6, 4)], "shapes the Python function ran for (at capture only)")
    check_equal([c.replays for c in f.captures], [2, 1], "replays of each capture (3 then 6 rows)")
    return f


def check_result_views(device: em.Device) -> Any:
    """Results that view an argument, a constant, a slice of a computed value, and a fresh
    tensor: each replay's results stay intact after later replays run (a native replay over
    fixed buffers must copy them out). Returns the jitted function (replayed 3 times)."""
    c = em.tensor(np.arange(6, dtype=np.float32), device=device)

    @em.jit
    def f(x: Any) -> Any:
        return x.reshape((2, 3)), c.reshape((3, 2)), (x * 2.0)[1:4], em.zeros((2,), device=device) + 1.0

    kept = [(v, f(em.tensor(np.arange(6, dtype=np.float32) * v, device=device))) for v in (1.0, 2.0, 3.0, 4.0)]
    base = np.arange(6, dtype=np.float64)
    for v, (a, b, s, z) in kept:  # read after every replay ran
        np.testing.assert_array_equal(a.numpy(), (base * v).reshape(2, 3))
        np.testing.assert_array_equal(b.numpy(), base.reshape(3, 2))
        np.testing.assert_array_equal(s.numpy(), (base * v * 2.0)[1:4])
        np.testing.assert_array_equal(z.numpy(), [1.0, 1.0])
    check_equal(f.captures[0].replays, 3, "replays of check_result_views' capture")
    return f


def check_replay_pool_in_memory_stats(device: em.Device) -> None:
    """For backends whose native replay keeps a private pool (``ember.lazy.replay``): the pool
    shows in ``memory_stats()["pools"]`` as ``jitN`` while the jitted function lives, is counted
    in ``reserved_bytes``, and goes, with its buffers, when the function is dropped."""
    gc.collect()
    x = em.tensor(np.ones((64, 64), np.float32), device=device)
    before = device.memory_stats()

    @em.jit
    def f(x: Any) -> Any:
        y = x
        for _ in range(3):
            y = (y @ x).tanh() + 1.0
        return y

    for _ in range(3):
        out = f(x)
    out.numpy()
    stats = device.memory_stats()
    jit = {name: p for name, p in stats["pools"].items() if name.startswith("jit")}
    check(f.captures[0].program.native is not None, f"no native replay to keep a pool:\n{f.describe()}")
    check(len(jit) == 1, f"one jitN pool expected in memory_stats()['pools'], got {sorted(stats['pools'])}")
    (name, pool), step_bytes = next(iter(jit.items())), 64 * 64 * 4
    # a step result at least (the pool reuses between steps)
    check(
        pool["reserved_bytes"] >= step_bytes,
        f"pool {name} reserves {pool['reserved_bytes']} bytes, under one step result ({step_bytes})",
    )
    per_pool = {k: p["reserved_bytes"] for k, p in stats["pools"].items()}
    check_equal(
        stats["reserved_bytes"], sum(per_pool.values()), f"memory_stats()['reserved_bytes'] (pools: {per_pool})"
    )
    del f, out
    gc.collect()
    after = device.memory_stats()
    left = [name for name in after["pools"] if name.startswith("jit")]
    check(not left, f"jit pools left in memory_stats()['pools'] after the jitted function was dropped: {left}")
    check_equal(
        after["in_use_bytes"],
        before["in_use_bytes"],
        "in_use_bytes after the jitted function and its result were dropped, against before it ran",
    )


def assert_native_replay(jitted: Any, backend: str) -> list[Any]:
    """Every capture of ``jitted`` replays through ``backend``'s native replay, not ember's step
    list, and ``describe()`` says so; a replay with counters (``ember.lazy.replay.FixedReplay``:
    ``replays``, ``kernels``, ``launched``) ran once per replay, launching its kernels each time.
    Returns the native replays, one per capture."""
    natives = []
    for capture in jitted.captures:
        program = capture.program
        text = capture.describe()
        check(
            program.native is not None and program.native_backend == backend,
            f"expected a native {backend} replay, got {program.native_backend!r}:\n{text}",
        )
        check(f"native ({backend})" in text, f"describe() does not say 'native ({backend})':\n{text}")
        native = program.native
        if hasattr(native, "replays"):
            check_equal(native.replays, capture.replays, f"native {backend} replays, against the capture's replays")
        if hasattr(native, "launched"):
            check(
                native.kernels > 0 and native.launched == native.kernels * native.replays,
                f"native {backend} replay: {native.launched} kernels launched over {native.replays} replays of "
                f"{native.kernels} kernels each (expected {native.kernels * native.replays}, and kernels > 0)",
            )
        natives.append(native)
    if not natives:
        pytest.fail(f"no capture to check:\n{jitted.describe()}")
    return natives

"""ember finds ember-example-ops through its entry point, as it would any installed extension."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import numpy as np

import ember as em
from ember.extension import EXTENSIONS
from ember.plugins import get_registry


def test_registered_through_the_ember_extensions_entry_point():
    found = {ep.name: ep.value for ep in metadata.entry_points(group="ember.extensions")}
    assert found.get("example_ops") == "ember_example_ops.plugin"


def test_discovery_registers_the_ops_and_their_kernels():
    get_registry().discover()
    for name in ("example_swiglu", "example_squared_relu"):
        assert name in EXTENSIONS
        assert "cpu" in EXTENSIONS[name].kernels
    assert EXTENSIONS["example_swiglu"].has_vjp and not EXTENSIONS["example_squared_relu"].has_vjp


def test_conformance_module_is_offered_through_the_hook():
    modules = [m for batch in get_registry().manager.hook.ember_conformance_modules() for m in batch]
    assert "ember_example_ops.conformance" in modules


def test_ember_plugins_lists_the_ops():
    done = subprocess.run([sys.executable, "-m", "ember.cli", "plugins"], capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    line = next(line for line in out.splitlines() if line.startswith("example_ops"))
    assert "ember-example-ops" in line and line.rstrip().endswith("ok"), out
    assert "example_swiglu" in out and "example_squared_relu" in out, out


def test_swiglu_in_a_small_mlp_trains():
    """The op composes with the rest of ember: a gated MLP's loss falls under SGD."""
    import ember_example_ops as ops

    dev = em.Device("cpu").autodiff()
    rng = np.random.default_rng(0)
    x = em.tensor(rng.standard_normal((64, 4)), dtype=em.float32, device=dev)
    y = em.tensor(np.sin(x.numpy()[:, :1] * 2.0), dtype=em.float32, device=dev)
    em.seed(0)
    gate, up, down = (em.nn.Linear(4, 8, device=dev), em.nn.Linear(4, 8, device=dev), em.nn.Linear(8, 1, device=dev))
    opt = em.optim.SGD([*gate.parameters(), *up.parameters(), *down.parameters()], lr=0.5)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        loss = ((down(ops.swiglu(gate(x), up(x))) - y) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.numpy()))
    assert losses[-1] < 0.5 * losses[0], losses

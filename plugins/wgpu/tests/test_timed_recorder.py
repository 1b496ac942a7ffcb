"""The timed recorder (``EMBER_WGPU_RECORDER=timed``): every dispatch of a step comes back with its
pipeline's name, its grid and the GPU's own time for it, and the results are the usual ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from ember.errors import InvalidArgumentError
from ember_wgpu.recorder import TimedRecorder

# run in a process of its own: the device must be opened with timestamp-query, which the session's is not
_STEP = textwrap.dedent(
    """
    import json, numpy as np, ember as em
    dev = em.Device("wgpu:0")
    rt = dev.backend.rt
    if "timestamp-query" not in rt.device.features:
        print(json.dumps({"skip": rt.name}))
        raise SystemExit
    rng = np.random.default_rng(0)
    a = rng.standard_normal((768, 768)).astype(np.float32)
    s = rng.standard_normal(4).astype(np.float32)
    dev.synchronize()
    before = rt.dispatches
    y = em.tensor(a, device=dev) @ em.tensor(a, device=dev)
    z = em.tensor(s, device=dev) + 1.0
    dev.synchronize()
    taken = rt.recorder.take()
    print(json.dumps({
        "kind": rt.recorder.kind,
        "dispatches": rt.dispatches - before,
        "taken": [[label, list(grid), ns] for label, grid, ns in taken],
        "y_err": float(np.abs(y.numpy() - a.astype(np.float64) @ a).max()),
        "z_err": float(np.abs(z.numpy() - (s.astype(np.float64) + 1.0)).max()),
        "again": rt.recorder.take(),
    }))
    """
)


@pytest.fixture(scope="module")
def timed_run(dev):  # noqa: ANN001, ANN201 (dev: skips where no adapter is found)
    env = {**os.environ, "EMBER_WGPU_RECORDER": "timed", "EMBER_FUSION": "0"}
    done = subprocess.run([sys.executable, "-c", _STEP], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in found:
        pytest.skip(f"{found['skip']} has no timestamp-query feature")
    return found


def test_every_dispatch_is_timed_with_its_name_and_grid(timed_run):
    """One (name, grid, ns) per dispatch recorded, in order; a second take() has nothing left."""
    assert timed_run["kind"] == "timed"
    taken = timed_run["taken"]
    assert len(taken) == timed_run["dispatches"] >= 2
    assert "matmul" in taken[0][0] and taken[-1][0].startswith("add")  # (add_rw: its read-write twin)
    assert all(len(grid) == 3 and min(grid) >= 1 for _, grid, _ in taken)
    assert timed_run["again"] == []


def test_the_times_are_the_devices(timed_run):
    """A 768^3 product (0.9 GFLOP) takes the device longer than adding 1 to four numbers, and both
    took some time: the stamps measure the kernels, not zeros or the host's clock."""
    (_, _, matmul), (_, _, add) = timed_run["taken"][0], timed_run["taken"][-1]
    assert 0 < add < matmul


def test_results_are_the_usual_ones(timed_run):
    """A pass per dispatch changes nothing computed (float64 numpy as the reference)."""
    assert timed_run["y_err"] < 1e-2
    assert timed_run["z_err"] < 1e-6


def test_an_adapter_without_timestamps_is_refused_with_the_reason():
    device = SimpleNamespace(features=frozenset({"shader-f16"}))
    with pytest.raises(InvalidArgumentError, match="timestamp-query"):
        TimedRecorder(device, None)

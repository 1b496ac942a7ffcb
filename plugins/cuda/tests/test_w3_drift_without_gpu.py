"""W3's training step with ember-cuda's conv kernels (run on the CPU by ``conv_on_cpu``) inside the
cpu backend, through ember's autodiff: the first two SGD steps' loss and gradients match a float64
run to float32 rounding, so the kernels are wired right end to end (``scripts/w3_drift.py`` runs
the long trajectories)."""

from __future__ import annotations

import os
import sys

import conv_on_cpu
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(not conv_on_cpu.available(), reason="g++ is not installed")


def test_two_w3_steps_with_the_kernels_match_float64(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.syspath_prepend(os.path.join(os.path.dirname(__file__), "..", "scripts"))
    import w3_drift
    from ember_cuda import conv

    fake = conv_on_cpu.FakeCupy(sms=1)

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a shared kernel was called")

    table = conv.conv_kernels(fake, {"matmul": fake.matmul, **{op: refuse for op in w3_drift.OPS}})
    try:
        w3_drift.install(table)
        got = w3_drift.trajectory(2, 3, "float32")
    finally:
        w3_drift.install(None)
    want = w3_drift.trajectory(2, 3, "float64")
    assert fake.launches, "the kernels did not run"
    for step, (g, w) in enumerate(zip(got, want)):
        for k, v in w.items():
            err = np.abs(g[k] - v).max() / np.abs(v).max()
            assert err < 1e-5, (step, k, err)
    sys.modules.pop("w3_drift", None)

"""scikit-learn's array-API mode on ember tensors (issue 14): examples/sklearn_array_api.py fits
StandardScaler and MinMaxScaler and scores accuracy_score and r2_score on ember tensors and
compares each with numpy's result. It runs in a fresh interpreter because SciPy reads
SCIPY_ARRAY_API once, at import. The `array-api-sklearn` tox env runs this with scikit-learn
installed; without it (the `core` env) the test skips and says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import ember as em

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "sklearn_array_api.py"


@pytest.mark.parametrize("spec", ["cpu", "wgpu:0"])
def test_sklearn_on_ember_tensors(spec):
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the array-api-sklearn tox env has it)")
    if spec != "cpu" and em.Device(spec) not in em.Device.available():
        pytest.skip(f"{spec} is not available here (install ember-wgpu and a Vulkan driver such as lavapipe)")
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", spec], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("StandardScaler", "MinMaxScaler", "accuracy_score", "r2_score"):
        assert name in done.stdout, done.stdout

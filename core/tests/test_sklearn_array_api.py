"""scikit-learn's array-API mode on ember tensors (issue 14): examples/sklearn_array_api.py fits
StandardScaler and MinMaxScaler and scores accuracy_score and r2_score on ember tensors and
compares each with numpy's result. It runs in a fresh interpreter because SciPy reads
SCIPY_ARRAY_API once, at import. The `array-api-sklearn` tox env runs this with scikit-learn
installed; without it (the `core` env) the test skips and says so.

The estimators that call ``xp.linalg`` (issue 15: PCA with the full SVD, LinearDiscriminantAnalysis,
Ridge with the SVD solver) run the same way through sklearn_linalg_estimators.py, with ember-linalg
installed, on cpu in float64: every fitted attribute and output against numpy's to 1e-12."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ember as em

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "sklearn_array_api.py"
LINALG_SCRIPT = Path(__file__).resolve().parent / "sklearn_linalg_estimators.py"

#: float64 on cpu: ember-linalg's cpu kernels are LAPACK through numpy, as numpy's own results are,
#: so only the order of ember's and numpy's elementwise and reduction steps can differ
TIGHT = 1e-12
#: LinearDiscriminantAnalysis.score is accuracy_score, which averages booleans in the namespace's
#: default float dtype (scikit-learn's _average): float32 for ember, float64 for numpy. k/150 in
#: float32 is within 2**-24 of the float64 value.
SCORE = 2.0**-24


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


@pytest.fixture(scope="module")
def linalg_estimators() -> dict:
    pytest.importorskip("sklearn", reason="scikit-learn is not installed (the array-api-sklearn tox env has it)")
    pytest.importorskip("ember_linalg", reason="ember-linalg is not installed (the array-api-sklearn tox env has it)")
    env = dict(os.environ, SCIPY_ARRAY_API="1")
    done = subprocess.run(
        [sys.executable, str(LINALG_SCRIPT), "--device", "cpu"], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "estimator",
    [
        "PCA(n_components=3)",
        "PCA(n_components=None)",
        "PCA(n_components=0.9)",
        "PCA(n_components=2, whiten=True)",
        "LinearDiscriminantAnalysis()",
        "LinearDiscriminantAnalysis(n_components=1, priors)",
        "Ridge(alpha=0.7)",
        "Ridge(two targets, per-target alpha)",
        "Ridge(fit_intercept=False, sample_weight)",
    ],
)
def test_sklearn_linalg_estimators_match_numpy(linalg_estimators, estimator):
    found = linalg_estimators[estimator]
    # the estimator's xp.linalg calls reached em.linalg's cpu kernels (the SVD), not numpy
    assert found["linalg_kernel_calls"].get("linalg_svd", 0) >= 1, found["linalg_kernel_calls"]
    outputs = found["outputs"]
    assert {"predict", "transform", "transform~sign"} & set(outputs), sorted(outputs)
    for name, out in outputs.items():
        assert out["on_device"], f"{estimator}.{name} did not come back as an ember tensor on cpu"
        bound = SCORE if name == "score" else TIGHT
        assert out["error"] <= bound, f"{estimator}.{name}: differs from numpy by {out['error']:.3g} (> {bound:g})"

"""scikit-learn on ember tensors: with ``array_api_dispatch`` on, scikit-learn finds ember's
namespace through ``Tensor.__array_namespace__`` and computes with ember ops on the tensor's
device. The results are compared with the same estimators run on numpy arrays.

Runs on any device: `python examples/sklearn_array_api.py --device wgpu` (default: EMBER_DEVICE or cpu).
Needs scikit-learn (its bundled copy of array-api-compat is enough) and SciPy, whose own array
API mode scikit-learn requires: this script sets SCIPY_ARRAY_API=1 before importing either.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("SCIPY_ARRAY_API", "1")  # read by SciPy at import; scikit-learn checks it is set

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.metrics import accuracy_score, r2_score  # noqa: E402
from sklearn.preprocessing import MinMaxScaler, StandardScaler  # noqa: E402

import ember as em  # noqa: E402


def compare(device: em.Device) -> dict[str, float]:
    """The largest difference between ember's and numpy's result, per estimator or metric."""
    dt = em.float64 if device.capabilities.supports(em.float64) else em.float32
    rng = np.random.default_rng(0)
    x = rng.normal(loc=3.0, scale=2.0, size=(200, 5)).astype(dt.numpy)
    labels = rng.integers(0, 3, size=200)
    guesses = np.where(rng.random(200) < 0.8, labels, rng.integers(0, 3, size=200))
    target = x @ np.arange(1.0, 6.0, dtype=dt.numpy)
    fit = target + rng.normal(scale=0.5, size=200).astype(dt.numpy)

    xe = em.tensor(x, device=device)
    out = {}
    for est in (StandardScaler, MinMaxScaler):
        want = est().fit_transform(x)
        with sklearn.config_context(array_api_dispatch=True):
            got = est().fit_transform(xe)
        if not isinstance(got, em.Tensor) or got.device != device:
            raise SystemExit(f"{est.__name__} did not compute on {device}: it returned {type(got).__name__}")
        out[est.__name__] = float(np.max(np.abs(got.numpy() - want)))
    with sklearn.config_context(array_api_dispatch=True):
        acc = accuracy_score(em.tensor(labels, device=device), em.tensor(guesses, device=device))
        r2 = r2_score(em.tensor(target, device=device), em.tensor(fit, device=device))
    out["accuracy_score"] = abs(float(acc) - accuracy_score(labels, guesses))
    out["r2_score"] = abs(float(r2) - r2_score(target, fit))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    args = parser.parse_args()
    device = em.Device(args.device) if args.device else em.Device.default()
    tol = 1e-6 if device.capabilities.supports(em.float64) else 1e-4  # metrics average in float32
    worst = 0.0
    for name, err in compare(device).items():
        print(f"{name:16s} on {device}: largest difference from numpy {err:.2e}")
        worst = max(worst, err)
    if worst > tol:
        raise SystemExit(f"ember and numpy differ by {worst:.2e}, more than {tol:g}")


if __name__ == "__main__":
    main()

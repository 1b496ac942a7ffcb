"""Run by test_sklearn_array_api.py in a fresh interpreter (SciPy reads SCIPY_ARRAY_API once, at
import): scikit-learn estimators that call ``xp.linalg`` (PCA with the full SVD,
LinearDiscriminantAnalysis, Ridge with the SVD solver), fitted with ``array_api_dispatch`` on
ember tensors and on numpy arrays. Prints one JSON object: for each fitted quantity or output,
the largest difference from numpy's relative to numpy's largest magnitude (at least 1), and
whether ember returned an ember Tensor on the device. Needs ember-linalg (``em.linalg``).

LDA's ``transform`` projects on singular vectors, which are unique only up to sign, and
scikit-learn does not fix LDA's signs (it does for PCA, with ``svd_flip``): ember-linalg's SVD
makes the largest entry of each U column positive, LAPACK through numpy makes no promise. That
output is compared after matching each column's sign; everything else is compared as it is.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

os.environ.setdefault("SCIPY_ARRAY_API", "1")

import numpy as np  # noqa: E402
import sklearn  # noqa: E402
from sklearn.decomposition import PCA  # noqa: E402
from sklearn.discriminant_analysis import LinearDiscriminantAnalysis  # noqa: E402
from sklearn.linear_model import Ridge  # noqa: E402

import ember as em  # noqa: E402
import ember_linalg  # noqa: E402, F401  (registers the linalg kernels counted below)
from ember.backend import EXTENSION_KERNELS  # noqa: E402
from ember.device import invalidate  # noqa: E402


def _data(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n, p = 150, 7
    mix = rng.normal(size=(p, p)) / np.sqrt(p)
    x = rng.normal(size=(n, p)) @ mix * np.linspace(3.0, 0.5, p) + np.arange(p)  # correlated, offset
    labels = rng.integers(0, 3, size=n)
    x[labels == 1, :3] += 1.5
    x[labels == 2, 2:5] -= 1.0
    coef = rng.normal(size=(p, 2))
    y2 = x @ coef + 0.3 * rng.normal(size=(n, 2)) + np.array([1.0, -2.0])
    return {"x": x, "labels": labels, "y": y2[:, 0], "y2": y2, "weights": rng.uniform(0.5, 2.0, size=n)}


def _cases() -> list[tuple[str, Callable[[dict[str, Any]], dict[str, Any]]]]:
    """(name, fn(data) -> {output: array}) for each estimator setting; data as _data returns it."""

    def pca(**kw):
        def run(d):
            m = PCA(svd_solver="full", **kw).fit(d["x"])
            t = m.transform(d["x"])
            return {
                "fit_transform": PCA(svd_solver="full", **kw).fit_transform(d["x"]),
                "transform": t,
                "inverse_transform": m.inverse_transform(t),
                "components_": m.components_,
                "explained_variance_": m.explained_variance_,
                "explained_variance_ratio_": m.explained_variance_ratio_,
                "singular_values_": m.singular_values_,
                "mean_": m.mean_,
                "noise_variance_": m.noise_variance_,
                "n_components_": m.n_components_,
            }

        return run

    def lda(**kw):
        def run(d):
            m = LinearDiscriminantAnalysis(**kw).fit(d["x"], d["labels"])
            return {
                "transform~sign": m.transform(d["x"]),
                "predict": m.predict(d["x"]),
                "predict_proba": m.predict_proba(d["x"]),
                "predict_log_proba": m.predict_log_proba(d["x"]),
                "decision_function": m.decision_function(d["x"]),
                "coef_": m.coef_,
                "intercept_": m.intercept_,
                "means_": m.means_,
                "priors_": m.priors_,
                "explained_variance_ratio_": m.explained_variance_ratio_,
                "score": m.score(d["x"], d["labels"]),
            }

        return run

    def ridge(target: str, weighted: bool = False, **kw):
        def run(d):
            sw = d["weights"] if weighted else None
            m = Ridge(solver="svd", **kw).fit(d["x"], d[target], sample_weight=sw)
            return {"predict": m.predict(d["x"]), "coef_": m.coef_, "intercept_": m.intercept_}

        return run

    return [
        ("PCA(n_components=3)", pca(n_components=3)),
        ("PCA(n_components=None)", pca()),
        ("PCA(n_components=0.9)", pca(n_components=0.9)),
        ("PCA(n_components=2, whiten=True)", pca(n_components=2, whiten=True)),
        ("LinearDiscriminantAnalysis()", lda()),
        ("LinearDiscriminantAnalysis(n_components=1, priors)", lda(n_components=1, priors=[0.2, 0.3, 0.5])),
        ("Ridge(alpha=0.7)", ridge("y", alpha=0.7)),
        ("Ridge(two targets, per-target alpha)", ridge("y2", alpha=np.array([0.1, 3.0]))),
        ("Ridge(fit_intercept=False, sample_weight)", ridge("y", weighted=True, fit_intercept=False, alpha=2.0)),
    ]


def _host(value: object) -> np.ndarray:
    if isinstance(value, em.Tensor):
        return np.asarray(value.numpy())
    return np.asarray(value)


@contextmanager
def counting_linalg(kind: str) -> Iterator[dict[str, int]]:
    """Count the calls of ember-linalg's native kernels for ``kind``: proof that scikit-learn's
    ``xp.linalg`` calls reached em.linalg (and not numpy behind ember's back)."""
    calls: dict[str, int] = {}
    originals = {key: fn for key, fn in EXTENSION_KERNELS.items() if key[0].startswith("linalg_") and key[1] == kind}

    def wrap(op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **params: Any) -> Any:
            calls[op] = calls.get(op, 0) + 1
            return fn(*args, **params)

        return counted

    for (op, _), fn in originals.items():
        EXTENSION_KERNELS[(op, kind)] = wrap(op, fn)
        invalidate(kind, op)
    try:
        yield calls
    finally:
        for (op, _), fn in originals.items():
            EXTENSION_KERNELS[(op, kind)] = fn
            invalidate(kind, op)


def _difference(got: Any, want: Any, key: str) -> float:
    """The largest difference relative to numpy's largest magnitude (at least 1); inf for a wrong shape."""
    g, w = _host(got).astype(np.float64), np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return float("inf")
    if not w.size:
        return 0.0
    if key.endswith("~sign"):
        g = g * np.where(np.sum(g * w, axis=0) < 0, -1.0, 1.0)
    return float(np.max(np.abs(g - w)) / max(1.0, float(np.max(np.abs(w)))))


def compare(device: em.Device) -> dict[str, dict[str, Any]]:
    """{estimator: {"linalg_kernel_calls": {op: n}, "outputs": {name: {"error", "on_device"}}}}."""
    data = _data(np.random.default_rng(0))
    ember_data = {k: em.tensor(v, device=device) for k, v in data.items()}
    report: dict[str, dict[str, Any]] = {}
    for name, run in _cases():
        want = run(data)
        with sklearn.config_context(array_api_dispatch=True), counting_linalg(device.kind) as calls:
            got = run(ember_data)
        outputs = {}
        for key, w in want.items():
            # arrays must come back as ember tensors on the device; numpy's Python scalars may be anything
            on_device = not isinstance(w, np.ndarray) or (isinstance(got[key], em.Tensor) and got[key].device == device)
            outputs[key] = {"error": _difference(got[key], w, key), "on_device": on_device}
        report[name] = {"linalg_kernel_calls": calls, "outputs": outputs}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(json.dumps(compare(em.Device(args.device))))


if __name__ == "__main__":
    main()

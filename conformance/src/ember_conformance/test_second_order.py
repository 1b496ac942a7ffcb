"""Second derivatives: elementwise functions through nested ``em.grad`` and through
``backward(create_graph=True)``, and a small MLP loss's Hessian-vector product, against second
differences of the numpy reference in float64 (float32 on the device at float32 tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

from .checks import require_dtype
from .inputs import rng_for

TOL = {"float64": (1e-5, 1e-6), "float32": (2e-3, 1e-3)}

ELEMENTWISE = {
    "tanh": (lambda t: em.tanh(t), np.tanh),
    "sigmoid": (lambda t: em.sigmoid(t), lambda a: 1.0 / (1.0 + np.exp(-a))),
    "exp_sin": (lambda t: t.exp() * t.sin(), lambda a: np.exp(a) * np.sin(a)),
    "softplus_sq": (lambda t: em.softplus(t) * t, lambda a: np.logaddexp(0.0, a) * a),
}


def _close(got: em.Tensor, want: np.ndarray, dtype: em.DType, what: str) -> None:
    rtol, atol = TOL[dtype.name]
    assert got.dtype is dtype, f"{what}: dtype {got.dtype}, expected {dtype}"
    have = got.numpy().astype(np.float64)
    scale = max(1.0, float(np.max(np.abs(want))))
    np.testing.assert_allclose(have, want, rtol=rtol, atol=atol * scale, err_msg=what)


def _second_difference(f, a: np.ndarray, h: float = 1e-4) -> np.ndarray:
    return (f(a + h) - 2.0 * f(a) + f(a - h)) / (h * h)


@pytest.mark.parametrize("dtype", (em.float64, em.float32), ids=str)
@pytest.mark.parametrize("name", sorted(ELEMENTWISE))
@pytest.mark.parametrize("via", ["nested_grad", "create_graph"])
def test_second_derivative(via, name, dtype, ad_device):
    require_dtype(ad_device, dtype)
    fn, ref = ELEMENTWISE[name]
    rng = rng_for("second", name, dtype)
    host = rng.uniform(-2.0, 2.0, size=(3, 4)).astype(dtype.numpy).astype(np.float64)
    v = rng.uniform(-1.0, 1.0, size=(3, 4)).astype(dtype.numpy)
    vt = em.tensor(v, device=ad_device)
    x = em.tensor(host, dtype=dtype, device=ad_device)
    if via == "nested_grad":
        first = em.grad(lambda t: fn(t).sum())
        got = em.grad(lambda t: (first(t) * vt).sum())(x)
    else:
        x.requires_grad_()
        fn(x).sum().backward(create_graph=True)
        g = x.grad
        x.grad = None
        (g * vt).sum().backward()
        got = x.grad
    want = _second_difference(ref, host) * v.astype(np.float64)
    _close(got, want, dtype, f"d2/dx2 {name}")


def _mlp_np(w1: np.ndarray, data: dict[str, np.ndarray]) -> float:
    h = np.tanh(data["x"] @ w1.reshape(3, 4) + data["b1"])
    return float(np.mean((h @ data["w2"] - data["y"]) ** 2))


def _shifted(f, w: np.ndarray, i: int, j: int, di: float, dj: float) -> float:
    p = w.copy()
    p[i] += di
    p[j] += dj
    return f(p)


def _hessian(f, w: np.ndarray, h: float = 1e-4) -> np.ndarray:
    """The Hessian of ``f`` at ``w`` from four-point second differences."""
    n = w.size
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i, n):
            corners = [_shifted(f, w, i, j, a, b) for a, b in ((h, h), (h, -h), (-h, h), (-h, -h))]
            out[i, j] = out[j, i] = (corners[0] - corners[1] - corners[2] + corners[3]) / (4 * h * h)
    return out


@pytest.mark.parametrize("dtype", (em.float64, em.float32), ids=str)
@pytest.mark.parametrize("via", ["nested_grad", "create_graph"])
def test_mlp_hessian_vector(via, dtype, ad_device):
    """H v of a tanh MLP's mean-squared loss with respect to its first weight matrix."""
    require_dtype(ad_device, dtype)
    rng = rng_for("mlp", dtype)
    data = {
        "x": rng.uniform(-1, 1, (5, 3)),
        "b1": rng.uniform(-0.5, 0.5, (4,)),
        "w2": rng.uniform(-1, 1, (4, 2)),
        "y": rng.uniform(-1, 1, (5, 2)),
    }
    data = {k: a.astype(dtype.numpy).astype(np.float64) for k, a in data.items()}
    w1 = rng.uniform(-1, 1, (12,)).astype(dtype.numpy).astype(np.float64)
    v = rng.uniform(-1, 1, (12,)).astype(dtype.numpy)
    t = {k: em.tensor(a, dtype=dtype, device=ad_device) for k, a in data.items()}
    vt = em.tensor(v.reshape(3, 4), device=ad_device)

    def loss(w: em.Tensor) -> em.Tensor:
        h = em.tanh(t["x"] @ w + t["b1"])
        return ((h @ t["w2"] - t["y"]) ** 2).mean()

    w = em.tensor(w1.reshape(3, 4), dtype=dtype, device=ad_device)
    if via == "nested_grad":
        got = em.grad(lambda u: (em.grad(loss)(u) * vt).sum())(w)
    else:
        w.requires_grad_()
        loss(w).backward(create_graph=True)
        g = w.grad
        w.grad = None
        (g * vt).sum().backward()
        got = w.grad
    want = (_hessian(lambda p: _mlp_np(p, data), w1) @ v.astype(np.float64)).reshape(3, 4)
    _close(got, want, dtype, "MLP Hessian-vector product")

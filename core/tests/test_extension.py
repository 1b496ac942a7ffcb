"""@backend_extension: reference on every backend, native kernels, custom vjp."""

from __future__ import annotations

import numpy as np

import ember as em

CALLS = []


@em.backend_extension("test_scaled_softsign")
def scaled_softsign(x, scale=1.0):
    return x / (1.0 + x.abs()) * scale


@em.backend_extension("test_twice_kernel")
def twice(x):
    return x * 2.0


@twice.kernel("cpu")
def _(backend, x):
    CALLS.append("kernel")
    return np.asarray(x * 2.0)


@twice.vjp
def _(ctx, g):
    CALLS.append("vjp")
    return (g * 2.0,)


def test_reference_runs_and_differentiates_through_itself():
    x = em.tensor([-2.0, 0.5, 3.0], dtype=em.float64)
    got = scaled_softsign(x, scale=2.0).numpy()
    xs = np.array([-2.0, 0.5, 3.0])
    np.testing.assert_allclose(got, 2 * xs / (1 + np.abs(xs)))
    g = em.grad(lambda t: scaled_softsign(t).sum())(x).numpy()
    np.testing.assert_allclose(g, 1 / (1 + np.abs(xs)) ** 2)


def test_native_kernel_and_vjp_are_used():
    CALLS.clear()
    x = em.tensor([1.0, 2.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    y = twice(x)
    assert y.tolist() == [2.0, 4.0]
    y.sum().backward()
    assert x.grad.tolist() == [2.0, 2.0]
    assert CALLS == ["kernel", "vjp"]


def test_extensions_appear_as_ops():
    assert "test_twice_kernel" in em.dispatch.OPS
    cpu = em.Device.cpu()
    assert cpu._impls["test_twice_kernel"] is not None  # the registered CPU kernel is what dispatch finds
    assert cpu._impls["test_scaled_softsign"] is None  # no kernel: the reference runs

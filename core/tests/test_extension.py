"""@backend_extension: reference on every backend, native kernels, custom vjp."""

from __future__ import annotations

import numpy as np
import pytest

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


@em.backend_extension(
    "test_checked_square",
    dtypes=("float32", "float64"),
    check=lambda x, **p: _require_square(x),
    sample=lambda rng, dtype: [((rng.standard_normal((2, 2)),), {})],
    tolerance=3.0,
)
def checked_square(x):
    return x @ x


def _require_square(x):
    if x.ndim != 2 or x.shape[0] != x.shape[1]:
        raise em.errors.ShapeError(f"test_checked_square: x must be square, got {tuple(x.shape)}")


def test_declared_dtypes_and_checks_run_before_dispatch():
    with pytest.raises(em.errors.DTypeError, match="test_checked_square: argument 0 has dtype int64"):
        checked_square(em.tensor([[1, 2], [3, 4]]))
    with pytest.raises(em.errors.ShapeError, match="must be square"):
        checked_square(em.ones((2, 3)))
    np.testing.assert_allclose(checked_square(em.eye(2) * 3.0).numpy(), np.eye(2) * 9.0)


def test_declarations_are_kept_for_the_conformance_suite():
    assert checked_square.tolerance == 3.0 and checked_square.sample is not None
    assert checked_square.kernels == () and not checked_square.has_vjp
    assert twice.kernels == ("cpu",) and twice.has_vjp
    with pytest.raises(em.errors.ArgumentTypeError, match="check must be callable"):
        em.backend_extension("test_bad_check", check=3)


def test_registry_records_a_plugins_extensions():
    from ember.plugins import PluginRegistry, hookimpl

    class Plugin:
        @hookimpl
        def ember_register_extensions(self, registry):
            registry.add_extensions(twice, checked_square)

    info = PluginRegistry().register(Plugin(), name="demo-extension")
    assert info.status == "ok", info.error
    assert info.extensions == ["test_twice_kernel", "test_checked_square"]

"""The autodiff API on the device: accumulation, no_grad, detach, retain_graph, functional
grad, gradients for every float dtype, and gradients through casts."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

from .checks import assert_close, require_dtype, widest_float
from .specs.base import FLOAT


def _leaf(values, dtype, ad_device):
    return em.tensor(np.asarray(values), dtype=dtype, device=ad_device, requires_grad=True)


@pytest.mark.parametrize("dtype", FLOAT, ids=str)
def test_grad_dtype(dtype, ad_device):
    """A leaf's gradient has its dtype, for 16-bit floats too."""
    require_dtype(ad_device, dtype)
    host = np.linspace(-1.0, 1.0, 6).reshape(2, 3).astype(dtype.numpy)
    x = _leaf(host, dtype, ad_device)
    (x * x + x.sin()).sum().backward()
    a = host.astype(np.float64)
    assert_close(x.grad, 2 * a + np.cos(a), dtype, scale=4.0, what="grad")


def test_grad_accumulates(ad_device):
    F = widest_float(ad_device)
    x = _leaf([1.0, 2.0], F, ad_device)
    (x * x).sum().backward()
    (x * 3.0).sum().backward()
    assert_close(x.grad, np.array([5.0, 7.0]), F)


def test_no_grad_detach(ad_device):
    x = _leaf([1.0, 2.0], "float32", ad_device)
    with em.no_grad():
        y = x * 2
        assert not em.is_grad_enabled()
    assert em.is_grad_enabled()
    assert not y.requires_grad
    z = (x * 2).detach()
    assert not z.requires_grad and z.is_leaf
    w = x * 2
    assert w.requires_grad and w.grad_fn == "mul"
    with em.set_grad_enabled(False):
        with em.enable_grad():
            assert (x * 2).requires_grad


def test_retain_graph(ad_device):
    F = widest_float(ad_device)
    x = _leaf([3.0], F, ad_device)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert_close(x.grad, np.array([12.0]), F)


def test_backward_with_grad(ad_device):
    F = widest_float(ad_device)
    x = _leaf([1.0, 2.0, 3.0], F, ad_device)
    y = x * x
    y.backward(em.tensor([1.0, 0.5, -1.0], dtype=F, device=ad_device))
    assert_close(x.grad, np.array([2.0, 2.0, -6.0]), F)


def test_value_and_grad(ad_device):
    F = widest_float(ad_device)

    def f(a, b):
        return (a * b + a.exp()).sum()

    a = em.tensor([0.5, -1.0], dtype=F, device=ad_device)
    b = em.tensor([2.0, 3.0], dtype=F, device=ad_device)
    value, (ga, gb) = em.value_and_grad(f, argnums=(0, 1))(a, b)
    assert_close(value, np.sum(np.array([0.5, -1.0]) * [2.0, 3.0] + np.exp([0.5, -1.0])), F)
    assert_close(ga, np.array([2.0, 3.0]) + np.exp([0.5, -1.0]), F)
    assert_close(gb, np.array([0.5, -1.0]), F)
    assert not ga.requires_grad


def test_grad_through_cast(ad_device):
    """astype between float dtypes passes the gradient through, in the input's dtype."""
    F = widest_float(ad_device)
    require_dtype(ad_device, em.float16)
    x = _leaf([0.5, -2.0], F, ad_device)
    y = x.astype("float32") * 3.0
    (y.astype("float16").astype(F) * x).sum().backward()
    assert x.grad.dtype is F
    assert_close(x.grad, np.array([3.0, -12.0]), F)


def test_requires_grad_needs_an_autodiff_device(device):
    """Autodiff is a property of the device (DESIGN section 3): a plain device refuses and names
    the fix; the same tensor moved to the autodiff variant records and differentiates."""
    x = em.ones((2,), device=device)
    assert not x.device.autodiff_enabled
    with pytest.raises(em.AutodiffError, match=r"autodiff off.*\.autodiff\(\)"):
        x.requires_grad_()
    x = x.to(device.autodiff()).requires_grad_()
    assert x.device.autodiff_enabled and x.device.same_hardware(device)
    (x * 2).sum().backward()
    assert_close(x.grad, np.array([2.0, 2.0]), em.float32)


def test_unused_input_gets_zero_grad(ad_device):
    """em.grad of a function that ignores its argument returns zeros."""
    x = em.tensor([1.0, 2.0], device=ad_device)
    g = em.grad(lambda t: (t * 0.0).sum() + 1.0)(x)
    assert_close(g, np.zeros(2), em.float32)

"""Autodiff: backward, accumulation, graph lifetime, higher order, the functional API."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

AD = em.Device.cpu().autodiff()


def leaf(values, dtype=em.float64):
    return em.tensor(values, dtype=dtype, device=AD, requires_grad=True)


def test_backward_accumulates_into_leaves():
    x = leaf([1.0, 2.0])
    (x * x).sum().backward()
    (x * 3.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0 + 3.0, 4.0 + 3.0])


def test_graph_is_freed_unless_retained():
    x = leaf([1.0])
    y = (x.exp() * 2).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4 * np.e])
    with pytest.raises(em.AutodiffError, match="retain_graph"):
        y.backward()


def _probe_exp_vjp(monkeypatch, watched: list) -> list:
    """Wrap exp's vjp to record, each time it runs, which watched tensors are still alive."""
    from ember.dispatch import OPS

    op, seen = OPS["exp"], []
    rule = op.vjp

    def probe(*args, **params):
        seen.append([ref() is not None for ref in watched])
        return rule(*args, **params)

    monkeypatch.setattr(op, "vjp", probe)
    return seen


def _chain(x):
    """exp first (its vjp runs last in backward), then intermediates nobody but the graph holds."""
    import weakref

    a = x.exp()
    b = a * 3.0
    c = em.sin(b)
    refs = [weakref.ref(a), weakref.ref(b), weakref.ref(c)]
    return (c * c).sum(), refs


@pytest.mark.parametrize("retain", [False, True])
def test_saved_tensors_are_released_during_backward(monkeypatch, retain):
    """b and c are saved by sin and mul; backward reaches exp (nearest the leaf) after both nodes: by
    then, unless the graph is retained, neither intermediate is alive any more (not only at the end)."""
    xs = np.array([0.1, -0.4, 0.7])
    x = leaf(xs)
    watched: list = []
    loss, refs = _chain(x)
    watched.extend(refs[1:])  # b and c; a is exp's own output, which its vjp receives
    seen = _probe_exp_vjp(monkeypatch, watched)
    loss.backward(retain_graph=retain)
    assert seen == [[retain, retain]]
    # the gradient is unchanged: d/dx sum(sin(3 e^x)^2) = 2 sin(3e^x) cos(3e^x) 3 e^x, in float64
    ref = 2 * np.sin(3 * np.exp(xs)) * np.cos(3 * np.exp(xs)) * 3 * np.exp(xs)
    np.testing.assert_allclose(x.grad.numpy(), ref, rtol=1e-12)


def test_a_product_only_a_bias_add_reads_is_not_kept_until_backward():
    """add's vjp reads no input value and matmul's none of its output: the node of ``m + b`` keeps a
    data-less stand-in for ``m``, so the product dies after the forward pass; gradients unchanged."""
    import weakref

    rng = np.random.default_rng(0)
    xs, ws, bs = rng.standard_normal((2, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    x, w, b = leaf(xs), leaf(ws), leaf(bs)
    m = x @ w
    gone = weakref.ref(m)
    y = m + b
    z = m + 1.0  # a second consumer shares the one stand-in
    loss = (y * y).sum() + (z * z).sum()
    assert y._node.inputs[0] is z._node.inputs[0] is not m
    del m
    assert gone() is None
    loss.backward()
    mr = xs @ ws
    gy, gz = 2 * (mr + bs), 2 * (mr + 1.0)
    np.testing.assert_allclose(w.grad.numpy(), xs.T @ (gy + gz), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), (gy + gz) @ ws.T, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), gy.sum(axis=0), rtol=1e-12)


def test_an_output_its_own_vjp_reads_is_kept():
    """exp's vjp reads its output: a consumer that reads only metadata (add) still keeps the tensor."""
    import weakref

    x = leaf([0.5, 1.5])
    e = x.exp()
    kept = weakref.ref(e)
    loss = (e + 1.0).sum()
    del e
    assert kept() is not None
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.5, 1.5]), rtol=1e-12)


def test_non_scalar_backward_needs_a_seed():
    x = leaf([1.0, 2.0])
    y = x * 2
    with pytest.raises(em.AutodiffError, match="single-element"):
        y.backward()
    y.backward(em.ones_like(y))
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_no_grad_and_detach_stop_recording():
    x = leaf([1.0])
    with em.no_grad():
        y = x * 2
    assert not y.requires_grad
    z = x.detach() * 2
    assert not z.requires_grad and z.is_leaf


def test_plain_device_has_no_graph_and_says_so():
    w = em.ones((2, 2))
    with pytest.raises(em.AutodiffError, match="autodiff"):
        (w @ w).sum().backward()


def test_requires_grad_needs_an_autodiff_device():
    """Autodiff is a property of the device (DESIGN section 3): a plain device refuses, naming the fix."""
    x = em.ones(2)
    with pytest.raises(em.AutodiffError, match=r"autodiff off.*Device\('cpu:0'\)\.autodiff\(\)"):
        x.requires_grad_()
    assert not x.requires_grad and not x.device.autodiff_enabled
    y = em.ones(2, device=em.Device.cpu().autodiff()).requires_grad_()
    assert y.requires_grad
    z = x.to(x.device.autodiff()).requires_grad_()
    assert z.requires_grad and z.device.autodiff_enabled
    with pytest.raises(em.AutodiffError, match="floating-point"):
        em.tensor([1, 2], device=em.Device.cpu().autodiff()).requires_grad_()


def test_in_place_change_after_recording_is_detected():
    x = leaf([1.0, 2.0])
    c = em.tensor([3.0, 4.0], dtype=em.float64)
    y = (x * c).sum()
    c[0] = 10.0
    with pytest.raises(em.AutodiffError, match="modified in place"):
        y.backward()


def test_setitem_on_tracked_tensor_is_refused():
    x = leaf([1.0, 2.0])
    with pytest.raises(em.AutodiffError):
        x[0] = 5.0
    with em.no_grad():
        x[0] = 5.0
    assert x.tolist() == [5.0, 2.0]


def test_second_derivative_of_tanh():
    xs = np.linspace(-2, 2, 9)
    x = em.tensor(xs, dtype=em.float64)
    d2 = em.grad(lambda u: em.grad(lambda t: t.tanh().sum())(u).sum())(x)
    t = np.tanh(xs)
    np.testing.assert_allclose(d2.numpy(), -2 * t * (1 - t**2), rtol=1e-12)


def test_create_graph_gives_hessian_vector_products_of_an_mlp_loss(rng):
    x = rng.standard_normal((5, 3))
    w0 = rng.standard_normal((3, 4))
    v = rng.standard_normal((3, 4))

    def loss_np(w):
        return np.sum(np.tanh(x @ w) ** 2)

    w = leaf(w0)
    loss = (em.tensor(x, dtype=em.float64) @ w).tanh().square().sum()
    loss.backward(create_graph=True)
    g = w.grad
    w.grad = None
    (g * em.tensor(v, dtype=em.float64)).sum().backward()
    hv = w.grad.numpy()

    # reference: finite differences of the analytic numpy gradient along v
    def grad_np(w):
        t = np.tanh(x @ w)
        return x.T @ (2 * t * (1 - t**2))

    eps = 1e-6
    ref = (grad_np(w0 + eps * v) - grad_np(w0 - eps * v)) / (2 * eps)
    np.testing.assert_allclose(hv, ref, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(g.detach().numpy(), grad_np(w0), rtol=1e-12)
    assert loss_np(w0) == pytest.approx(loss.item())


def test_value_and_grad_with_argnums_and_aux():
    f = lambda a, b: ((a * b).sum(), a + b)  # noqa: E731
    (value, aux), (ga, gb) = em.value_and_grad(f, argnums=(0, 1), has_aux=True)(
        em.tensor([1.0, 2.0]), em.tensor([3.0, 4.0])
    )
    assert value.item() == 11.0
    assert aux.tolist() == [4.0, 6.0]
    assert ga.tolist() == [3.0, 4.0] and gb.tolist() == [1.0, 2.0]
    assert not value.requires_grad


def test_grad_of_unused_input_is_zero():
    g = em.grad(lambda a, b: (a * 2).sum(), argnums=1)(em.tensor([1.0]), em.tensor([5.0]))
    assert g.tolist() == [0.0]


def test_broadcast_gradients_sum_back():
    a = leaf(np.ones((3, 1)))
    b = leaf(np.ones((1, 4)))
    (a * b).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.full((3, 1), 4.0))
    np.testing.assert_allclose(b.grad.numpy(), np.full((1, 4), 3.0))


def test_gradients_flow_through_integer_indexing_and_casts():
    x = leaf([1.0, 2.0, 3.0])
    y = x[em.tensor([0, 0, 2])].astype(em.float32).sum()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 0.0, 1.0])

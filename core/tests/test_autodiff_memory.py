"""What autodiff keeps alive: the saved set of a step against the tensors its rules must read, nothing
left after backward, and the gradients of the rules that work on slices (attention, convolution's
weight, split) against float64 numpy references."""

from __future__ import annotations

import itertools
import math
import weakref

import numpy as np
import pytest

import ember as em
from ember.autodiff.graph import saved_tensors
from ember.dispatch import OPS

AD = em.Device.cpu().autodiff()


def leaf(values):
    return em.tensor(np.asarray(values, dtype=np.float64), device=AD, requires_grad=True)


def _saved(root) -> dict[int, em.Tensor]:
    """The computed tensors (not leaves) the graph behind ``root`` keeps, each buffer once."""
    return {id(t._data): t for _, _, t in saved_tensors(root) if t._node is not None}


def test_an_mlp_keeps_what_its_rules_read_and_nothing_after_backward():
    """Linear-ReLU-Linear-ReLU-Linear, cross-entropy: the rules read the two ReLU outputs (ReLU's own
    rule and the next matmul share each) and the logits; biases' adds and the pre-activations are not
    kept. After backward the graph holds nothing and the intermediates are gone."""
    rng = np.random.default_rng(0)
    n, d, h, c = 6, 5, 7, 3
    x = em.tensor(rng.standard_normal((n, d)), device=AD)
    ws = [leaf(rng.standard_normal(s)) for s in ((d, h), (h,), (h, h), (h,), (h, c), (c,))]
    y = em.tensor(rng.integers(0, c, n), device=AD)
    h1 = em.relu(x @ ws[0] + ws[1])
    h2 = em.relu(h1 @ ws[2] + ws[3])
    logits = h2 @ ws[4] + ws[5]
    loss = em.cross_entropy(logits, y)
    refs = [weakref.ref(t) for t in (h1, h2, logits)]
    must = [tuple(t.shape) for t in (h1, h2, logits)]
    kept = _saved(loss)
    assert sorted(tuple(t.shape) for t in kept.values()) == sorted(must)
    assert sum(math.prod(t.shape) for t in kept.values()) == n * (2 * h + c)
    del h1, h2, logits, kept
    loss.backward()
    assert saved_tensors(loss) == [] and loss._node.inputs is None
    assert [r() for r in refs] == [None, None, None]


@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid", "sqrt", "softmax", "log_softmax"])
def test_ops_whose_rule_reads_the_output_do_not_keep_the_input(op):
    """PyTorch saves these ops' results, not their inputs: the input (a matmul's product, which no
    other rule reads) dies after forward, and the gradient matches float64 finite differences."""
    rng = np.random.default_rng(1)
    xs, ws = rng.uniform(0.5, 1.0, (3, 4)), rng.uniform(0.5, 1.0, (4, 4))
    fn = {
        "softmax": lambda t: em.softmax(t, axis=-1),
        "log_softmax": lambda t: em.log_softmax(t, axis=-1),
        "sigmoid": em.sigmoid,
    }.get(op, lambda t: getattr(t, op)())
    w = leaf(ws)
    m = em.tensor(xs, device=AD) @ w
    gone = weakref.ref(m)
    out = fn(m)
    loss = (out * out).sum()
    del m
    assert gone() is None
    loss.backward()

    def f(wv):
        return float((fn(em.tensor(xs @ wv, device=em.Device.cpu())).numpy() ** 2).sum())

    eps, num = 1e-6, np.zeros_like(ws)
    for i in np.ndindex(ws.shape):
        d = np.zeros_like(ws)
        d[i] = eps
        num[i] = (f(ws + d) - f(ws - d)) / (2 * eps)
    np.testing.assert_allclose(w.grad.numpy(), num, rtol=1e-6, atol=1e-8)


def test_an_operand_read_only_for_a_gradient_nobody_wants_is_not_kept():
    """mul's rule reads ``a`` only for ``b``'s gradient: ``m * c`` with a constant ``c`` keeps a
    stand-in for the product ``m``; ``m * 0.5`` keeps nothing of it either."""
    rng = np.random.default_rng(2)
    xs, ws, cs = rng.standard_normal((3, 4)), rng.standard_normal((4, 4)), rng.standard_normal((3, 4))
    w = leaf(ws)
    m = em.tensor(xs, device=AD) @ w
    gone = weakref.ref(m)
    loss = (m * em.tensor(cs, device=AD)).sum() + (m * 0.5).sum()
    del m
    assert gone() is None
    loss.backward()
    np.testing.assert_allclose(w.grad.numpy(), xs.T @ (cs + 0.5), rtol=1e-12)


def _watch_rule(monkeypatch, name: str, ref: weakref.ref) -> list[bool]:
    """Each time op ``name``'s vjp rule runs, whether the tensor behind ``ref`` is gone by then."""
    seen: list[bool] = []
    op = OPS[name]
    rule = op.vjp

    def probe(*args, **params):
        seen.append(ref() is None)
        return rule(*args, **params)

    monkeypatch.setattr(op, "vjp", probe)
    return seen


def test_the_walk_drops_a_forward_output_once_its_last_reader_has_run(monkeypatch):
    """gelu's output is read only by the matmul after it: by the time gelu's own rule runs (after the
    matmul's), the walk no longer holds it (it did until its own turn before)."""
    rng = np.random.default_rng(3)
    xs, w1s, w2s = rng.standard_normal((4, 3)), rng.standard_normal((3, 5)), rng.standard_normal((5, 2))
    w1, w2 = leaf(w1s), leaf(w2s)
    a = em.gelu(em.tensor(xs, device=AD) @ w1)
    ref = weakref.ref(a)
    loss = (a @ w2).sum()
    del a
    seen = _watch_rule(monkeypatch, "gelu", ref)
    loss.backward()
    assert seen == [True]


def test_a_max_pool_output_dies_with_its_last_other_reader(monkeypatch):
    """max_pool's rule finds each window's maximum again from its input: the pool's output, read
    by the convolution after it, is gone by the time the pool's rule runs (a CNN's backward pass
    held it until then), and the input gradient matches a float64 loop over the windows."""
    rng = np.random.default_rng(4)
    xs, ws = rng.standard_normal((2, 3, 6, 6)), rng.standard_normal((4, 3, 3, 3))
    x, w = leaf(xs), leaf(ws)
    h = em.max_pool(x, 2)
    ref = weakref.ref(h)
    loss = em.conv(h, w, padding=1).sum()
    del h
    seen = _watch_rule(monkeypatch, "max_pool", ref)
    loss.backward()
    assert seen == [True]
    # d loss / d h: every output pixel of the convolution sums its taps, so h's gradient is the
    # sum of the weights over the taps that land inside the output
    gh = np.zeros((2, 3, 3, 3))
    for i, j, u, v in itertools.product(range(3), range(3), range(3), range(3)):
        if 0 <= i + 1 - u < 3 and 0 <= j + 1 - v < 3:
            gh[:, :, i, j] += ws[:, :, u, v].sum(axis=0)
    want = np.zeros_like(xs)
    for b, c, i, j in itertools.product(range(2), range(3), range(3), range(3)):
        win = xs[b, c, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2]
        u, v = np.unravel_index(np.argmax(win), win.shape)  # argmax: the first maximum
        want[b, c, 2 * i + u, 2 * j + v] = gh[b, c, i, j]
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-12)


def _attention_ref(q, k, v, g, scale, mask=None, causal=False):
    s = q @ np.swapaxes(k, -1, -2) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if mask is not None:
        s = s + mask
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    gp = g @ np.swapaxes(v, -1, -2)
    gs = p * (gp - (gp * p).sum(-1, keepdims=True))
    return p @ v, (gs @ k * scale, np.swapaxes(gs, -1, -2) @ q * scale, np.swapaxes(p, -1, -2) @ g)


@pytest.mark.parametrize("masked", ["none", "causal", "additive"])
def test_attention_runs_over_batch_slices_with_unchanged_values(monkeypatch, masked):
    """(B, H, L, S) scores larger than q, k and v: the composite and the rule take them a batch slice
    at a time; outputs and gradients equal the whole computation's (float64 numpy reference)."""
    from ember.ops import attention as nn_ops

    rng = np.random.default_rng(4)
    b, h, n, e = 3, 2, 12, 4
    qs, ks, vs, gs = (rng.standard_normal((b, h, n, e)) for _ in range(4))
    ms = rng.standard_normal((n, n)) if masked == "additive" else None
    calls = []
    whole = nn_ops._attention_grads
    monkeypatch.setattr(nn_ops, "_attention_grads", lambda *a, **k: calls.append(1) or whole(*a, **k))
    monkeypatch.setattr(nn_ops, "_has_native", lambda t, name: False)  # the rule, not the cpu backend's kernel
    q, k, v = leaf(qs), leaf(ks), leaf(vs)
    mask = None if ms is None else em.tensor(ms, device=AD)
    out = em.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=masked == "causal")
    (out * em.tensor(gs, device=AD)).sum().backward()
    ref, grads = _attention_ref(qs, ks, vs, gs, e**-0.5, ms, masked == "causal")
    np.testing.assert_allclose(out.detach().numpy(), ref, rtol=1e-10, atol=1e-12)
    for got, want in zip((q.grad, k.grad, v.grad), grads):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-10, atol=1e-12)
    assert len(calls) > 1  # (b*h*n*n = 864) > (b*h*n*e = 288): taken in slices


def test_a_convolution_weight_gradient_over_batch_slices_matches_the_whole_sum(monkeypatch):
    """The weight gradient sums per-sample products over the batch; taken over slices (the unfolded
    columns are 9x the input here) it equals the float64 direct sum."""
    from ember.ops import conv as conv_ops

    rng = np.random.default_rng(5)
    n, cin, cout, hw = 5, 3, 4, 6
    xs, ws, gs = rng.standard_normal((n, cin, hw, hw)), rng.standard_normal((cout, cin, 3, 3)), None
    unfolds = []
    whole = conv_ops._unfold_op
    monkeypatch.setattr(conv_ops, "_unfold_op", lambda *a, **k: unfolds.append(a[0].shape[0]) or whole(*a, **k))
    w = leaf(ws)
    out = em.conv(em.tensor(xs, device=AD), w, padding=1)
    gs = rng.standard_normal(out.shape)
    (out * em.tensor(gs, device=AD)).sum().backward()
    padded = np.pad(xs, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros_like(ws)
    for i in range(3):
        for j in range(3):
            want[:, :, i, j] = np.einsum("nohw,nchw->oc", gs, padded[:, :, i : i + hw, j : j + hw])
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-10, atol=1e-12)
    # the composite (every backend without a conv_weight_grad kernel) slices the batch too
    unfolds.clear()
    direct = conv_ops._conv_weight_grad_composite(
        em.tensor(gs, device=AD),
        em.tensor(xs, device=AD),
        kernel=(3, 3),
        stride=(1, 1),
        padding=((1, 1), (1, 1)),
        dilation=(1, 1),
        groups=1,
    )
    np.testing.assert_allclose(direct.numpy(), want, rtol=1e-10, atol=1e-12)
    assert len(unfolds) > 1 and sum(unfolds) == n


def test_split_gradients_are_joined_where_they_tile_and_summed_where_they_do_not():
    """The three parts of a split reach the split tensor as one concat; a missing part, an
    overlapping slice and a use of the whole tensor beside them add up as before (float64 reference)."""
    rng = np.random.default_rng(6)
    xs, ws = rng.standard_normal((4, 6)), rng.standard_normal((6, 9))
    x, w = leaf(xs), leaf(ws)
    hm = xs @ ws
    h = x @ w
    a, b, c = em.split(h, 3, axis=-1)
    loss = (a * 2).sum() + (b * b).sum() + c.exp().sum() + (h * h).sum() + (h[:, 1:4] * 3).sum()
    loss.backward()
    gh = np.concatenate([2 * np.ones((4, 3)), 2 * hm[:, 3:6], np.exp(hm[:, 6:])], -1) + 2 * hm
    gh[:, 1:4] += 3
    np.testing.assert_allclose(w.grad.numpy(), xs.T @ gh, rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), gh @ ws.T, rtol=1e-12)
    x.grad = w.grad = None
    a, _, c = em.split(x @ w, 3, axis=-1)
    (a.sum() + (c * c).sum()).backward()
    gh = np.zeros((4, 9))
    gh[:, :3] = 1
    gh[:, 6:] = 2 * hm[:, 6:]
    np.testing.assert_allclose(w.grad.numpy(), xs.T @ gh, rtol=1e-12)


@pytest.mark.parametrize("groups,stride,dilation", [(1, 1, 1), (2, 2, 1), (2, 1, 2)])
def test_array_module_convolutions_over_batch_slices_match_a_direct_sum(groups, stride, dilation):
    """The cpu and cuda kernels (``ember.array_module``) take the batch in slices when its im2col
    columns outgrow the input and output: conv equals the float64 direct sum over its windows, and
    conv_transpose is its adjoint (<conv(x), g> = <x, conv_transpose(g)>)."""
    from ember.array_module import conv as kernels

    _ = em.Device.cpu().backend  # registers numpy as an array module
    rng = np.random.default_rng(7)
    n, cin, cout, hw, k = 5, 4, 6, 9, 3
    x = rng.standard_normal((n, cin, hw, hw))
    w = rng.standard_normal((cout, cin // groups, k, k))
    pads = ((1, 1), (1, 1))
    params = {"stride": (stride,) * 2, "padding": pads, "dilation": (dilation,) * 2, "groups": groups}
    y = kernels.conv(x, w, **params)
    span = dilation * (k - 1) + 1
    out = (hw + 2 - span) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((n, cout, out, out))
    cg, og = cin // groups, cout // groups
    for gi in range(groups):
        for i in range(k):
            for j in range(k):
                win = xp[:, gi * cg : (gi + 1) * cg, i * dilation :, j * dilation :]
                win = win[:, :, : (out - 1) * stride + 1 : stride, : (out - 1) * stride + 1 : stride]
                want[:, gi * og : (gi + 1) * og] += np.einsum("oc,nchw->nohw", w[gi * og : (gi + 1) * og, :, i, j], win)
    np.testing.assert_allclose(y, want, rtol=1e-10, atol=1e-10)
    per_sample = cin * k * k * out * out
    assert kernels._batch_step(n, per_sample, max(x.size, y.size)) < n  # the batch was taken in slices
    g = rng.standard_normal(y.shape)
    gx = kernels.conv_transpose(g, w, size=(hw, hw), **params)  # conv's weight, as its vjp passes it
    np.testing.assert_allclose(np.vdot(y, g), np.vdot(x, gx), rtol=1e-10)


def test_a_complex_product_kept_only_for_a_wanted_gradient_is_not_conjugated_when_unread():
    """``(a @ b) @ w`` with only ``a`` wanting a gradient: the second product keeps a stand-in for
    ``a @ b`` (read only for ``w``'s gradient), and the complex rule conjugates only what it reads."""
    rng = np.random.default_rng(8)
    av, bv, wv = (rng.standard_normal(s) + 1j * rng.standard_normal(s) for s in ((3, 4), (4, 2), (2, 2)))
    a = em.tensor(av, device=AD, requires_grad=True)
    em.real((a @ em.tensor(bv, device=AD)) @ em.tensor(wv, device=AD)).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), np.ones((3, 2)) @ (bv @ wv).conj().T, rtol=1e-12)

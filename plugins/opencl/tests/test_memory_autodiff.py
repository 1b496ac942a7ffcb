"""Autodiff's peak memory on a pooled device: what a training step keeps between forward and backward,
and what its backward adds at its peak, against bounds computed from the tensors that must be kept."""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

import ember as em
from ember.autodiff.graph import saved_tensors

F32 = 4


def _in_use(d: em.Device) -> int:
    return sum(p.in_use for p in d.memory.pools())


def _peak(d: em.Device) -> int:
    return sum(p.peak_in_use for p in d.memory.pools())


def _reset(d: em.Device) -> None:
    for p in d.memory.pools():
        p.reset_peaks()


def _saved_bytes(root: em.Tensor) -> int:
    """Bytes of the computed tensors the graph behind ``root`` keeps (each buffer once; leaves apart)."""
    saved = {id(t._data): t for _, _, t in saved_tensors(root) if t._node is not None}
    return sum(math.prod(t.shape) * F32 for t in saved.values())


@pytest.fixture
def ad(dev):
    """The device under test with autodiff, its pool handing each block back the moment it dies."""
    d = em.Device(dev, memory="exclusive").autodiff()
    if not d.memory.pools():
        pytest.skip(f"{d} has no ember buffer pool to measure")
    return d


def _encoder(d: em.Device, b: int, s: int, dm: int, nh: int, ff: int):
    """A pre-norm encoder layer (W4's step) with its parameters: (x, params, forward)."""
    rng = np.random.default_rng(0)

    def t(*shape, scale=1.0, grad=True):
        v = em.tensor((rng.standard_normal(shape) * scale).astype(np.float32), device=d)
        return v.requires_grad_() if grad else v

    x = t(b, s, dm, grad=False)
    p = {
        "ln1_w": t(dm), "ln1_b": t(dm), "w_in": t(dm, 3 * dm, scale=dm**-0.5), "b_in": t(3 * dm),
        "w_out": t(dm, dm, scale=dm**-0.5), "b_out": t(dm), "ln2_w": t(dm), "ln2_b": t(dm),
        "w_ff1": t(dm, ff, scale=dm**-0.5), "b_ff1": t(ff), "w_ff2": t(ff, dm, scale=ff**-0.5), "b_ff2": t(dm),
    }  # fmt: skip

    def heads(v):
        return em.permute_dims(v.reshape((b, s, nh, dm // nh)), (0, 2, 1, 3))

    def forward():
        h = em.layer_norm(x, dm, p["ln1_w"], p["ln1_b"])
        q, k, v = em.split(h @ p["w_in"] + p["b_in"], 3, axis=-1)
        a = em.scaled_dot_product_attention(heads(q), heads(k), heads(v))
        a = em.permute_dims(a, (0, 2, 1, 3)).reshape((b, s, dm))
        x1 = x + (a @ p["w_out"] + p["b_out"])
        h = em.layer_norm(x1, dm, p["ln2_w"], p["ln2_b"])
        return x1 + (em.gelu(h @ p["w_ff1"] + p["b_ff1"]) @ p["w_ff2"] + p["b_ff2"])

    return x, p, forward


def test_encoder_step_memory_stays_within_what_must_be_kept(ad):
    """A sequence longer than a head (S > E, so attention's (S, S) scores are its largest values): at
    backward() the graph keeps no more than the activations the rules read (PyTorch keeps the same set);
    backward adds at most the parameters' gradients and four buffers of the largest activation's size
    (a rule's incoming gradient, its outgoing ones and a temporary); afterwards the graph holds nothing."""
    b, s, dm, nh, ff = 4, 64, 32, 2, 64
    x, p, forward = _encoder(ad, b, s, dm, nh, ff)
    act, wide = b * s * dm * F32, b * s * ff * F32
    # read by the rules: LN1 out, q|k|v (one buffer), the attention output (for attention's backward given
    # its output, as PyTorch's SDPA keeps it) and its (B, S, E) copy, x1, LN2 out, FFN pre- and post-GELU
    must_keep = 8 * act + 2 * wide
    params = sum(math.prod(t.shape) * F32 for t in p.values())
    assert b * nh * s * s * F32 > wide  # the whole score tensor would not fit the bound below

    forward().sum().backward()  # compiles the kernels; the measured step runs on a settled pool
    for t in p.values():
        t.grad = None
    gc.collect()
    ad.synchronize()
    start = _in_use(ad)
    _reset(ad)
    out = forward()
    loss = out.sum()
    ad.synchronize()
    kept = _in_use(ad) - start
    assert _saved_bytes(loss) <= must_keep
    assert kept <= must_keep + act + 4096  # + the output the caller holds, and the scalar loss
    at_backward = _in_use(ad)
    _reset(ad)
    loss.backward()
    ad.synchronize()
    assert _peak(ad) - at_backward <= params + 4 * wide
    assert saved_tensors(loss) == [] and loss._node.inputs is None
    del out, loss
    gc.collect()
    ad.synchronize()
    assert _in_use(ad) - start <= params + 4096  # only the gradients are left


def test_cnn_step_backward_adds_no_full_batch_columns(ad):
    """W3's step at a small size: a convolution's backward unfolds its input into prod(kernel) times
    as many values; taken over slices of the batch, backward adds at most the parameters' gradients
    and four buffers of the largest activation's size, whatever the batch."""
    rng = np.random.default_rng(1)
    n, c1, c2, hw, classes = 8, 8, 16, 16, 10

    def t(*shape, grad=True):
        v = em.tensor((rng.standard_normal(shape) * 0.3).astype(np.float32), device=ad)
        return v.requires_grad_() if grad else v

    x = t(n, 1, hw, hw, grad=False)
    y = em.tensor(rng.integers(0, classes, n), device=ad)
    flat = c2 * (hw // 4) ** 2
    p = [t(c1, 1, 3, 3), t(c1), t(c2, c1, 3, 3), t(c2), t(flat, classes), t(classes)]

    def loss():
        h = em.max_pool(em.relu(em.conv(x, p[0], p[1], padding=1)), 2)
        h = em.max_pool(em.relu(em.conv(h, p[2], p[3], padding=1)), 2)
        return em.cross_entropy(h.reshape((n, flat)) @ p[4] + p[5], y)

    largest = n * c1 * hw * hw * F32  # the first convolution's output
    columns = n * c1 * 9 * (hw // 2) ** 2 * F32  # the second one's unfolded input, whole batch
    assert 3 * columns > 4 * largest  # the old backward (columns, their transpose, col2im's) exceeds the bound
    params = sum(math.prod(v.shape) * F32 for v in p)
    loss().backward()
    for v in p:
        v.grad = None
    gc.collect()
    ad.synchronize()
    start = _in_use(ad)
    value = loss()
    ad.synchronize()
    at_backward = _in_use(ad)
    _reset(ad)
    value.backward()
    ad.synchronize()
    assert _peak(ad) - at_backward <= params + 4 * largest
    assert saved_tensors(value) == []
    del value
    gc.collect()
    ad.synchronize()
    assert _in_use(ad) - start <= params + 4096

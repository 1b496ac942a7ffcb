"""The cpu backend's hand-written numba kernels against numpy float64 references, with a check
that the numba kernel (not the shared numpy kernel) ran."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ember as em

pytest.importorskip("numba", reason="the numba kernels need numba (pip install 'ember-cpu[numba]')")

from ember_cpu.backend import NATIVE_CALLS  # noqa: E402 - after the skip


def _max_pool_grad_reference(x, g, kernel, stride, padding, dilation):
    """Loop over windows in float64: each window's gradient goes to its first maximum."""
    n, c, h, w = x.shape
    (ph, _), (pw, _) = padding
    oh, ow = g.shape[2:]
    grad = np.zeros(x.shape, dtype=np.float64)
    for b, ch, i, j in itertools.product(range(n), range(c), range(oh), range(ow)):
        best, where = None, None
        for u, v in itertools.product(range(kernel[0]), range(kernel[1])):
            y, xx = i * stride[0] - ph + u * dilation[0], j * stride[1] - pw + v * dilation[1]
            inside = 0 <= y < h and 0 <= xx < w
            value = x[b, ch, y, xx] if inside else -np.inf  # padding is -inf
            if best is None or value > best:  # strictly greater: the first maximum wins ties
                best, where = value, ((y, xx) if inside else None)
        if where is not None:
            grad[b, ch, where[0], where[1]] += g[b, ch, i, j]
    return grad


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation"),
    [(2, 2, 0, 1), (3, 2, 1, 1), (3, 1, 1, 2)],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_backward_matches_a_float64_reference(kernel, stride, padding, dilation, dtype):
    gen = np.random.default_rng(0)
    xv = gen.standard_normal((2, 3, 9, 8)).astype(dtype)
    xv[0, 0, :2, :2] = 1.5  # a tie: the first maximum takes the gradient
    dev = em.Device("cpu").autodiff()
    x = em.tensor(xv, device=dev, requires_grad=True)
    y = em.max_pool(x, kernel, stride=stride, padding=padding, dilation=dilation)
    gv = gen.standard_normal(y.shape).astype(dtype)
    before = NATIVE_CALLS["max_pool_backward"]
    (y * em.tensor(gv, device=dev)).sum().backward()
    assert NATIVE_CALLS["max_pool_backward"] == before + 1, "the numba max-pool backward did not run"
    k, s, d = (kernel,) * 2, (stride,) * 2, (dilation,) * 2
    want = _max_pool_grad_reference(xv.astype(np.float64), gv.astype(np.float64), k, s, ((padding,) * 2,) * 2, d)
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=1e-6)

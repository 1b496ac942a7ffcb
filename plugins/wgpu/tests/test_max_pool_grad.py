"""Max pooling's gradient on wgpu: the per-window kernel where windows tile the input and the
per-input gather elsewhere, both against a float64 reference of PyTorch's rule (a window's
gradient goes to its first maximum in scan order; padding never wins)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ember.dtypes import float32
from ember_wgpu.kernels import pool

RNG = np.random.default_rng(21)


def _reference(g, x, kernel, stride, padding, dilation):  # type: ignore[no-untyped-def]
    x64, g64 = x.astype(np.float64), g.astype(np.float64)
    out = np.zeros_like(x64)
    nd = len(kernel)
    for nc in itertools.product(*(range(s) for s in x.shape[:2])):
        for bl in itertools.product(*(range(s) for s in g.shape[2:])):
            taps = []
            for o in itertools.product(*(range(k) for k in kernel)):
                p = tuple(bl[i] * stride[i] + o[i] * dilation[i] - padding[i][0] for i in range(nd))
                if all(0 <= p[i] < x.shape[2 + i] for i in range(nd)):
                    taps.append(p)
            values = [x64[nc + p] for p in taps]
            if not values or np.isnan(values).any():  # a NaN maximum passes nothing back
                continue
            out[nc + taps[int(np.argmax(values))]] += g64[nc + bl]  # argmax: the first maximum
    return out


def _pool(rt, x, kernel, stride, padding, dilation):  # type: ignore[no-untyped-def]
    return pool.max_pool(rt, rt.upload(x, float32), kernel, stride, padding, dilation)


CASES = {
    # name: (x shape, kernel, stride, padding, dilation, tiled)
    "w3_2x2": ((2, 3, 8, 8), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), True),
    "odd_sizes_tail": ((1, 2, 7, 9), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), True),
    "padded_3x3": ((1, 2, 8, 7), (3, 3), (3, 3), ((1, 2), (2, 1)), (1, 1), True),
    "1d": ((2, 2, 11), (3,), (3,), ((1, 0),), (1,), True),
    "3d": ((1, 2, 4, 5, 6), (2, 2, 3), (2, 2, 3), ((0, 0), (1, 0), (0, 0)), (1, 1, 1), True),
    "overlapping": ((1, 2, 7, 7), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), False),
    "dilated": ((1, 1, 9, 9), (2, 2), (2, 2), ((0, 0), (0, 0)), (2, 2), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_max_pool_gradient_matches_float64(rt, case):
    shape, kernel, stride, padding, dilation, tiled = CASES[case]
    x = RNG.standard_normal(shape).astype(np.float32)
    x.reshape(-1)[::5] = 0.5  # ties inside windows: the first maximum takes the gradient
    x.reshape(-1)[3] = np.nan  # a NaN maximum: its window passes nothing back
    assert pool.tiles(kernel, stride, padding, dilation) == tiled
    y = _pool(rt, x, kernel, stride, padding, dilation)
    g = RNG.standard_normal(y.shape).astype(np.float32)
    before = dict(pool.CALLS)
    gx = pool.max_pool_backward(rt, rt.upload(g, float32), rt.upload(x, float32), kernel, stride, padding, dilation)
    kind = "tiled" if tiled else "gather"
    assert pool.CALLS[kind] == before.get(kind, 0) + 1
    got = rt.read([gx])[0].reshape(shape)
    np.testing.assert_allclose(got, _reference(g, x, kernel, stride, padding, dilation), rtol=1e-6, atol=1e-6)

"""Shared assertions for the ember-opencl tests."""

from __future__ import annotations

import numpy as np

import ember as em


def assert_same(got: em.Tensor, want: em.Tensor, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Values, shape and dtype of ``got`` (any device) equal ``want``'s (NaN == NaN)."""
    g, w = got.numpy(), want.numpy()
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert g.shape == w.shape, (g.shape, w.shape)
    if w.dtype.kind in "fV" or str(w.dtype) == "bfloat16":
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=rtol, atol=atol, equal_nan=True)
    else:
        np.testing.assert_array_equal(g, w)

"""Shared assertions and stand-ins for the ember-opencl tests."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

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


class Gate(ThreadPoolExecutor):
    """A build pool whose builds wait until ``release()``: the kernels stay pending till then."""

    def __init__(self) -> None:
        super().__init__(4, "test-gate")
        self._open = threading.Event()
        self.submitted = 0

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        self.submitted += 1

        def held():
            self._open.wait(60)
            return fn(*args, **kwargs)

        return super().submit(held)

    def release(self) -> None:
        self._open.set()

"""Conformance cases of ember-example-ops, added to the ember conformance suite through the
``ember_conformance_modules`` hook: each op against a numpy float64 formula on the device under
test (forward in float32 and float64, including non-contiguous inputs), its gradient against
central differences of that formula, and its argument checks.

The suite's automatic extension tests (ember_conformance.test_extensions) separately compare
each native kernel with the op's reference and check that the kernel ran.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
import ember_example_ops as ops
from ember_conformance.checks import assert_close, check_gradients, require_dtype

EMBER_CONFORMANCE = True

DTYPES = [em.float32, em.float64]


def _swiglu(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a / (1.0 + np.exp(-a)) * b


def _squared_relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0) ** 2


def _host(dtype: em.DType, *arrays: np.ndarray) -> list[np.ndarray]:
    """The inputs rounded to ``dtype`` and back, so the reference sees what ember sees."""
    return [a.astype(dtype.numpy).astype(np.float64) for a in arrays]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_swiglu(dtype: em.DType, device: em.Device) -> None:
    require_dtype(device, dtype)
    rng = np.random.default_rng(0)
    a, b = _host(dtype, rng.uniform(-8.0, 8.0, size=(6, 7)), rng.uniform(-2.0, 2.0, size=(6, 7)))
    ta, tb = em.tensor(a, dtype=dtype, device=device), em.tensor(b, dtype=dtype, device=device)
    assert_close(ops.swiglu(ta, tb), _swiglu(a, b), dtype, what="swiglu")
    # transposed (strided) inputs: the kernels must read through the layout, not assume it
    assert_close(ops.swiglu(ta.mT, tb.mT), _swiglu(a.T, b.T), dtype, what="swiglu of transposed inputs")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_squared_relu(dtype: em.DType, device: em.Device) -> None:
    require_dtype(device, dtype)
    x = _host(dtype, np.random.default_rng(1).uniform(-3.0, 3.0, size=(5, 9)))[0]
    tx = em.tensor(x, dtype=dtype, device=device)
    assert_close(ops.squared_relu(tx), _squared_relu(x), dtype, what="squared_relu")
    assert_close(ops.squared_relu(tx[1:, ::2]), _squared_relu(x[1:, ::2]), dtype, what="squared_relu of a slice")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gradients(dtype: em.DType, ad_device: em.Device) -> None:
    require_dtype(ad_device, dtype)
    rng = np.random.default_rng(2)
    a, b = _host(dtype, rng.uniform(-4.0, 4.0, size=(3, 4)), rng.uniform(-2.0, 2.0, size=(3, 4)))
    args = [em.tensor(v, dtype=dtype, device=ad_device, requires_grad=True) for v in (a, b)]
    check_gradients(ops.swiglu, _swiglu, args, [a, b], (0, 1), {}, rng)
    x = _host(dtype, rng.uniform(0.05, 3.0, size=(3, 4)) * rng.choice([-1.0, 1.0], size=(3, 4)))[0]
    tx = em.tensor(x, dtype=dtype, device=ad_device, requires_grad=True)
    check_gradients(ops.squared_relu, _squared_relu, [tx], [x], (0,), {}, rng)


def test_argument_checks(device: em.Device) -> None:
    with pytest.raises(em.errors.ShapeError, match="example_swiglu: a and b must have the same shape"):
        ops.swiglu(em.ones((2, 3), device=device), em.ones((3,), device=device))
    with pytest.raises(em.errors.DTypeError, match="example_squared_relu"):
        ops.squared_relu(em.ones((2,), dtype="int32", device=device))

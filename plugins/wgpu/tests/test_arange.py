"""Integer arange by a kernel (no upload, so no submit inside a step) against numpy's int64 arange
cast to the dtype; values past int32 or the dtype's range, and float dtypes, stay on the host."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.dtypes import as_dtype
from ember_wgpu.kernels import arange as iota

CASES = [
    ((0, 10, 1), "int64"),
    ((5, -3, -2), "int32"),
    ((-7, 7, 1), "int8"),
    ((0, 255, 3), "uint8"),
    ((-30000, 30000, 977), "int16"),
    ((3, 70000, 7), "uint32"),
    ((-5, 5, 1), "int64"),
    ((2**31 - 10, 2**31 - 1, 1), "int64"),
    ((-(2**31), -(2**31) + 300, 3), "int32"),
    ((0, 1000, 1), "uint64"),
]


@pytest.mark.parametrize("args, dtype", CASES)
def test_integer_arange_runs_a_kernel_and_matches_numpy(dev, rt, args, dtype):
    submits, dispatches = rt.submits, rt.dispatches
    x = em.arange(*args, dtype=dtype, device=dev)
    assert rt.dispatches == dispatches + 1 and rt.submits == submits  # the kernel, recorded in the batch
    np.testing.assert_array_equal(x.numpy(), np.arange(*args, dtype=np.int64).astype(dtype))


@pytest.mark.parametrize(
    "args, dtype",
    [((0, 300, 1), "uint8"), ((0, 2**31 + 5, 2**30), "int64"), ((0, 5, 1), "float32"), ((-3, 3, 1), "uint32")],
)
def test_arange_outside_the_kernels_reach_is_computed_on_the_host(dev, rt, args, dtype):
    assert not iota.fits(args[0], args[2], len(range(*args)), as_dtype(dtype))
    dispatches = rt.dispatches
    x = em.arange(*args, dtype=dtype, device=dev)
    assert rt.dispatches == dispatches  # uploaded, no kernel
    want = np.arange(*args, dtype=np.float64 if dtype == "float32" else np.int64).astype(dtype)
    np.testing.assert_array_equal(x.numpy(), want)

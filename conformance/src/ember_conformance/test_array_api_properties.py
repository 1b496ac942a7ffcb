"""Property tests of the Array API namespace, with inputs drawn by ``hypothesis.extra.array_api``
(Hypothesis builds arrays for any namespace that follows the standard, ember's included).

Arrays are drawn on the host (cpu) and moved to the device under test with ``to_device``;
every property compares the device's result with numpy's on the same values (float64 for
floating inputs). Dtypes the device does not hold are not drawn. The example counts are small
so the module stays cheap in CI; ``--hypothesis-profile`` or ``HYPOTHESIS_PROFILE`` can raise
them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.array_api import make_strategies_namespace

import ember as em

xps = make_strategies_namespace(em, api_version=em.__array_api_version__)

_SETTINGS = settings(
    max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
_SHAPES = xps.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5)


def _real_dtypes(device: em.Device) -> st.SearchStrategy:
    held = device.capabilities.dtypes
    return xps.real_dtypes().filter(lambda dt: dt in held)


def _host(x: em.Tensor) -> np.ndarray:
    return np.asarray(x.numpy())


def _same(got: em.Tensor, want: np.ndarray, dtype: em.DType) -> None:
    want = np.asarray(want)
    have = _host(got)
    assert have.shape == want.shape, f"shape {have.shape}, expected {want.shape}"
    if dtype.kind == "f":
        rtol = 1e-5 if dtype.bits <= 32 else 1e-12
        with np.errstate(all="ignore"):  # the float64 reference rounded to the dtype (overflow included)
            want = want.astype(dtype.numpy).astype(np.float64)
        np.testing.assert_allclose(have.astype(np.float64), want, rtol=rtol, atol=rtol, equal_nan=True)
    else:
        np.testing.assert_array_equal(have, want.astype(have.dtype))


def _ref_dtype(dtype: em.DType) -> np.dtype:
    return np.dtype(np.float64) if dtype.kind == "f" else dtype.numpy


@given(data=st.data())
@_SETTINGS
def test_add_and_multiply_match_numpy(device, data):
    """x + y and x * y, broadcast, on the device equal numpy (integers wrap as numpy's do)."""
    dt = data.draw(_real_dtypes(device).filter(lambda d: d.kind != "b"), label="dtype")
    shape = data.draw(_SHAPES, label="shape")
    x = data.draw(xps.arrays(dt, shape, elements={"allow_subnormal": False}), label="x")
    y = data.draw(xps.arrays(dt, shape[-1:], elements={"allow_subnormal": False}), label="y")
    xd, yd = x.to_device(device), y.to_device(device)
    xn, yn = _host(x).astype(_ref_dtype(dt)), _host(y).astype(_ref_dtype(dt))
    with np.errstate(all="ignore"):
        _same(xd + yd, xn + yn, dt)
        _same(xd * yd, xn * yn, dt)


@given(data=st.data())
@_SETTINGS
def test_sort_and_unique_match_numpy(device, data):
    """sort along the last axis, and unique_values (every NaN distinct), equal numpy's."""
    dt = data.draw(_real_dtypes(device), label="dtype")
    x = data.draw(xps.arrays(dt, _SHAPES, elements={"allow_subnormal": False}), label="x")
    xd, xn = x.to_device(device), _host(x)
    _same(em.sort(xd, axis=-1), np.sort(xn, axis=-1, kind="stable"), dt)
    _same(em.unique_values(xd), np.unique(xn.reshape(-1), equal_nan=False), dt)


@given(data=st.data())
@_SETTINGS
def test_searchsorted_matches_numpy(device, data):
    """searchsorted on a sorted 1-D tensor gives numpy's insertion points, both sides."""
    dt = data.draw(_real_dtypes(device).filter(lambda d: d.kind != "b"), label="dtype")
    pool = data.draw(xps.arrays(dt, xps.array_shapes(min_dims=1, max_dims=1, max_side=8)), label="x1")
    values = data.draw(xps.arrays(dt, _SHAPES), label="x2")
    ordered = em.sort(pool.to_device(device))
    vd = values.to_device(device)
    for side in ("left", "right"):
        want = np.searchsorted(_host(ordered), _host(values), side=side)
        np.testing.assert_array_equal(_host(em.searchsorted(ordered, vd, side=side)), want)


@given(data=st.data())
@_SETTINGS
def test_cumulative_sum_matches_numpy(device, data):
    """cumulative_sum along a drawn axis, with and without include_initial."""
    dt = data.draw(_real_dtypes(device).filter(lambda d: d.kind in "iu"), label="dtype")
    x = data.draw(xps.arrays(dt, _SHAPES), label="x")
    axis = data.draw(st.integers(0, x.ndim - 1), label="axis")
    acc = em.int64 if dt.kind == "i" else em.uint64
    if acc not in device.capabilities.dtypes:
        pytest.skip(f"{device} has no {acc}, the accumulator of {dt}")
    xd, xn = x.to_device(device), _host(x)
    want = np.cumsum(xn, axis=axis, dtype=acc.numpy)
    _same(em.cumulative_sum(xd, axis=axis), want, acc)
    pads = [(1, 0) if i == axis else (0, 0) for i in range(x.ndim)]
    _same(em.cumulative_sum(xd, axis=axis, include_initial=True), np.pad(want, pads), acc)

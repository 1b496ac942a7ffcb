"""The three things a spec row is checked for: forward values, gradients, rejected dtypes."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import ember as em
from ember.dtypes import DType

from .checks import assert_same, check, check_gradients, require_dtype
from .inputs import Case, make_inputs, rng_for
from .specs.base import OpSpec

__all__ = ["run_forward", "run_grad", "run_reject", "needed_dtypes"]


def _flat(value: Any) -> list[DType]:
    if isinstance(value, (tuple, list)):
        return [d for v in value for d in _flat(v)]
    return [value]


def needed_dtypes(spec: OpSpec, dtype: DType, case: Case) -> list[DType]:
    """Every dtype the test puts on the device: the tested one, results, indices, fixed inputs."""
    need = [dtype, *_flat(spec.out_dtype(dtype))]
    for arg in case.args:
        if arg.kind in ("index", "unique"):
            need.append(em.dtypes.as_dtype(arg.dtype or "int64"))
        elif arg.kind == "mask":
            need.append(em.bool_)
        elif arg.kind == "fixed":
            need.append(em.dtypes.as_dtype(arg.dtype))
    need += [em.dtypes.as_dtype(n) for n in spec.needs]
    return need


def _skip_unavailable(spec: OpSpec) -> None:
    if spec.available is not None:
        reason = spec.available()
        if reason:
            pytest.skip(reason)


def run_forward(spec: OpSpec, dtype: DType, case: Case, device: em.Device) -> None:
    """``spec.fn`` on the device equals ``spec.ref`` on the host for this case."""
    _skip_unavailable(spec)
    require_dtype(device, *needed_dtypes(spec, dtype, case))
    rng = rng_for(spec.name, dtype, case.name)
    inputs = make_inputs(case, dtype, device, spec.domain, rng)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy on NaN, inf and empty inputs
        expected = spec.ref(*inputs.numpy, **case.kwargs)
    actual = spec.fn(*inputs.ember, **case.kwargs)
    assert_same(actual, expected, spec.out_dtype(dtype), scale=spec.tol * case.tol, what=spec.name)


def run_grad(spec: OpSpec, dtype: DType, case: Case, ad_device: em.Device) -> None:
    """First derivatives of ``spec.fn`` equal central differences of ``spec.ref``."""
    _skip_unavailable(spec)
    require_dtype(ad_device, *needed_dtypes(spec, dtype, case))
    rng = rng_for("grad", spec.name, dtype, case.name)
    inputs = make_inputs(case, dtype, ad_device, spec.domain, rng, requires_grad=True)
    positions = [p for p in inputs.x_positions if isinstance(inputs.ember[p], em.Tensor)]
    if not positions:
        pytest.fail(f"{spec.name}: case {case.name!r} has no tensor argument to differentiate")
    check_gradients(
        spec.fn,
        spec.ref,
        inputs.ember,
        inputs.numpy,
        positions,
        dict(case.kwargs),
        rng,
        output=spec.grad_output,
        scale=spec.tol * case.tol,
    )


def run_reject(spec: OpSpec, dtype: DType, case: Case, device: em.Device) -> None:
    """An input dtype the op does not accept raises DTypeError naming the dtype."""
    _skip_unavailable(spec)
    require_dtype(device, dtype)
    rng = rng_for("reject", spec.name, dtype)
    inputs = make_inputs(case, dtype, device, spec.domain, rng)
    with pytest.raises(em.DTypeError) as info:
        spec.fn(*inputs.ember, **case.kwargs)
    message = str(info.value)
    check(str(dtype) in message, f"{spec.name}: the DTypeError for a {dtype} input does not name {dtype}: {message}")

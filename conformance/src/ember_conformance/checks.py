"""Comparison helpers: tolerances by dtype, result checks, capability skips and the
finite-difference gradient check.

These are public: extension and nn-module conformance tests use them too. Modules that are not
``test_*.py`` files check with :func:`check` / :func:`check_equal`, never a bare ``assert``:
pytest rewrites asserts only in test modules and marked plugin packages (not in an extension's
``conformance.py``, nor in ember_conformance when plugin autoload is off), and ``python -O``
drops unrewritten asserts, so a broken backend would pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import ember as em
from ember.dtypes import DType

__all__ = [
    "TOLERANCES",
    "GRAD_TOLERANCES",
    "tolerance",
    "require_dtype",
    "grad_dtypes",
    "check",
    "check_equal",
    "assert_close",
    "assert_same",
    "numeric_gradient",
    "check_gradients",
    "pick",
]

#: (rtol, atol) for forward results, by dtype: a few ulps of the dtype
TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (4e-3, 1e-3),
    "bfloat16": (3e-2, 1e-2),
    "float32": (1e-5, 1e-6),
    "float64": (1e-10, 1e-12),
}

#: (rtol, atol) for gradients against float64 central differences, by the dtype computed in
GRAD_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (2e-3, 1e-3),
    "float64": (1e-6, 1e-7),
}


def tolerance(dtype: DType, scale: float = 1.0) -> tuple[float, float]:
    """(rtol, atol) for results of ``dtype``, times ``scale``; exact for non-float dtypes."""
    rtol, atol = TOLERANCES.get(dtype.name, (0.0, 0.0))
    return rtol * scale, atol * scale


def require_dtype(device: em.Device, *dtypes: DType) -> None:
    """Skip the test, with the backend's reason, when ``device`` cannot hold one of ``dtypes``."""
    caps = device.capabilities
    for dt in dtypes:
        if not caps.supports(dt):
            pytest.skip(f"{device.kind}:{device.index} has no {dt}: {caps.why_not(dt)}")


def widest_float(device: em.Device) -> DType:
    """float64 where the device has it, else float32 (tests that need "a precise float")."""
    return em.float64 if device.capabilities.supports(em.float64) else em.float32


def grad_dtypes() -> tuple[DType, ...]:
    """The dtypes gradients are checked in: float64, and float32 (the fallback for devices without float64)."""
    return (em.float64, em.float32)


def pick(value: Any, index: int | None) -> Any:
    """``value[index]`` for ops returning several results; ``value`` itself when index is None."""
    return value if index is None else value[index]


def check(ok: Any, message: str | Callable[[], str]) -> None:
    """Fail the test with ``message`` unless ``ok``: an ``assert`` that names what it compared
    and runs under ``python -O`` and outside pytest's rewritten modules. ``message`` may be a
    callable, called only on failure (for costly descriptions such as ``Jitted.describe()``)."""
    __tracebackhide__ = True
    if not ok:
        pytest.fail(message() if callable(message) else message)


def check_equal(actual: Any, expected: Any, what: str) -> None:
    """:func:`check` that ``actual == expected`` (scalars, tuples, lists), naming ``what`` and both values."""
    __tracebackhide__ = True
    if actual != expected:
        pytest.fail(f"{what}: got {actual!r}, expected {expected!r}")


def _describe(arr: np.ndarray, idx: tuple[int, ...]) -> str:
    return f"{arr[idx]!r}" if arr.ndim else f"{arr.item()!r}"


def assert_close(actual: Any, expected: Any, dtype: DType, *, scale: float = 1.0, what: str = "result") -> None:
    """Check an ember result against a numpy reference.

    dtype and shape must match exactly; NaN positions and infinities exactly; other values
    within the dtype's tolerance (times ``scale``) of the reference rounded to ``dtype``.
    Non-float results must be equal.
    """
    if not isinstance(actual, em.Tensor):
        pytest.fail(f"{what}: expected an ember Tensor, got {type(actual).__name__}")
    exp = np.asarray(expected)
    if actual.dtype is not dtype:
        pytest.fail(f"{what}: dtype is {actual.dtype}, expected {dtype}")
    if tuple(actual.shape) != exp.shape:
        pytest.fail(f"{what}: shape is {tuple(actual.shape)}, expected {exp.shape}")
    got = np.asarray(actual.numpy())
    if got.shape != exp.shape:
        pytest.fail(f"{what}: the backend's to_numpy gave shape {got.shape} for a tensor of shape {actual.shape}")
    if got.dtype != dtype.numpy:
        pytest.fail(f"{what}: the backend's to_numpy gave numpy dtype {got.dtype} for a {dtype} tensor")
    if dtype.kind != "f":
        want = exp.astype(dtype.numpy) if exp.dtype != dtype.numpy else exp
        if not np.array_equal(got, want):
            bad = np.argwhere(got != want)
            first = tuple(bad[0]) if bad.size else ()
            pytest.fail(
                f"{what}: {len(bad)} of {got.size} {dtype} values differ; first at {first}: "
                f"got {_describe(got, first)}, expected {_describe(want, first)}"
            )
        return
    with np.errstate(all="ignore"):
        want = exp.astype(np.float64).astype(dtype.numpy).astype(np.float64)
        have = got.astype(np.float64)
        rtol, atol = tolerance(dtype, scale)
        nan_w, nan_h = np.isnan(want), np.isnan(have)
        if not np.array_equal(nan_w, nan_h):
            where = tuple(np.argwhere(nan_w != nan_h)[0])
            pytest.fail(
                f"{what}: NaN positions differ ({int(nan_h.sum())} NaN in the result, {int(nan_w.sum())} expected); "
                f"first at {where}: got {_describe(have, where)}, expected {_describe(want, where)}"
            )
        ok = nan_w | (have == want) | (np.abs(have - want) <= atol + rtol * np.abs(want))
    if not ok.all():
        bad = np.argwhere(~ok)
        err = np.where(ok, 0.0, np.abs(have - want))
        worst = tuple(np.unravel_index(int(np.nanargmax(err)), err.shape)) if err.ndim else ()
        pytest.fail(
            f"{what}: {len(bad)} of {have.size} {dtype} values outside rtol={rtol:g}, atol={atol:g}; worst at "
            f"{worst}: got {_describe(have, worst)}, expected {_describe(want, worst)}"
        )


def assert_same(actual: Any, expected: Any, dtype: DType, *, scale: float = 1.0, what: str = "result") -> None:
    """:func:`assert_close` for one result or a sequence of results (compared in order)."""
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)):
            pytest.fail(f"{what}: expected {len(expected)} results, got a {type(actual).__name__}")
        if len(actual) != len(expected):
            pytest.fail(f"{what}: {len(actual)} results, expected {len(expected)}")
        dts = dtype if isinstance(dtype, (tuple, list)) else [dtype] * len(expected)
        for i, (a, e, dt) in enumerate(zip(actual, expected, dts)):
            assert_close(a, e, dt, scale=scale, what=f"{what}[{i}]")
        return
    assert_close(actual, expected, dtype, scale=scale, what=what)


def numeric_gradient(
    loss: Callable[[list[Any]], float], args: Sequence[Any], position: int, rel_step: float = 1e-6
) -> np.ndarray:
    """Central differences of the float64 scalar ``loss(args)`` w.r.t. ``args[position]``."""
    base = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    x = np.array(base[position], dtype=np.float64, copy=True)
    grad = np.zeros_like(x)
    for j in np.ndindex(x.shape):
        h = rel_step * max(1.0, abs(float(x[j])))
        saved = x[j]
        x[j] = saved + h
        base[position] = x.copy()
        up = loss(base)
        x[j] = saved - h
        base[position] = x.copy()
        down = loss(base)
        x[j] = saved
        grad[j] = (up - down) / (2 * h)
    return grad


def check_gradients(
    fn: Callable[..., Any],
    ref: Callable[..., Any],
    ember_args: Sequence[Any],
    numpy_args: Sequence[Any],
    positions: Sequence[int],
    kwargs: dict[str, Any],
    rng: np.random.Generator,
    *,
    output: int | None = None,
    scale: float = 1.0,
) -> None:
    """Compare ember's reverse-mode gradient of ``sum(fn(...) * w)`` (``w`` a random cotangent;
    summed over the results when ``fn`` returns several)
    with central differences of the same expression over the numpy reference ``ref``.

    The finite differences are always taken on ``ref`` in float64, never on ember.
    """
    result = pick(fn(*ember_args, **kwargs), output)
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    for out in outs:
        if not isinstance(out, em.Tensor):
            pytest.fail(f"expected Tensor results, got {type(out).__name__}")
    dt = outs[0].dtype
    ws = [rng.uniform(-1.0, 1.0, size=out.shape).astype(dt.numpy) for out in outs]
    total = None
    for out, w in zip(outs, ws):
        term = (out * em.tensor(w, dtype=dt, device=out.device)).sum()
        total = term if total is None else total + term
    total.backward()

    def loss(args: list[Any]) -> float:
        with np.errstate(all="ignore"):
            value = pick(ref(*args, **kwargs), output)
            values = list(value) if isinstance(value, (tuple, list)) else [value]
            return float(
                sum(np.sum(np.asarray(v, dtype=np.float64) * w.astype(np.float64)) for v, w in zip(values, ws))
            )

    rtol, atol = GRAD_TOLERANCES.get(dt.name, GRAD_TOLERANCES["float32"])
    for p in positions:
        leaf = ember_args[p]
        want = numeric_gradient(loss, numpy_args, p)
        g = leaf.grad
        if g is None:
            # ember leaves .grad unset where every vjp on the way returned "no gradient" (floor,
            # sign...): fine exactly when the true gradient is zero
            if np.any(want != 0):
                pytest.fail(f"argument {p}: no gradient reached this input (.grad is None after backward)")
            continue
        if g.dtype is not leaf.dtype or tuple(g.shape) != tuple(leaf.shape):
            pytest.fail(
                f"argument {p}: gradient has dtype {g.dtype} and shape {g.shape}; the input has {leaf.dtype} "
                f"and {leaf.shape}"
            )
        have = np.asarray(g.numpy()).astype(np.float64)
        size = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        bound = atol * scale * size + rtol * scale * np.abs(want)
        bad = ~(np.abs(have - want) <= bound)
        if bad.any():
            idx = tuple(np.argwhere(bad)[0])
            pytest.fail(
                f"argument {p}: {int(bad.sum())} of {want.size} gradient values differ from central differences "
                f"(rtol={rtol * scale:g}); first at {idx}: ember {have[idx]!r}, finite differences {want[idx]!r}"
            )

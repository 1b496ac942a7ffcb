"""The fused-reduction program, its float64 reference and the checks that backends' own
fused-reduce tests share (``Backend.run_fused`` with a trailing :class:`~ember.lazy.program.Reduce`).

Each check runs on the device, compares every result with numpy float64 and returns or takes
the backend's launch counters, so the caller asserts what only its backend can tell (which of
its kernels ran)::

    from ember_conformance.fused_reduce_checks import check_chain

    def test_rows(dev):
        ran = check_chain(dev, fused_reduce.COUNTS, "sum", (64, 48), (1,), False, rtol=2e-5)
        assert ran["row"] == 1
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

import ember as em
from ember.lazy import materialize
from ember.lazy.program import Const, FusedProgram, Reduce

from .checks import check, check_equal

__all__ = [
    "chain",
    "chain_values",
    "operands",
    "check_chain",
    "check_nan_and_integers",
    "check_float16_sum",
    "check_lazy_reductions",
]


def chain(
    dtype: str, op: str, axes: tuple[int, ...], keepdims: bool = False, full: bool = False, plus_one: bool = False
) -> FusedProgram:
    """``y = x * a + s`` (``x`` a tensor, ``a`` one broadcast along the leading axes, ``s`` a
    scalar), then for floats ``tanh(y) * s + s`` (``+ 1`` with ``plus_one``: near 1 for a small
    ``s``, so long products stay finite), reduced by ``op`` over ``axes``; integers reduce ``y``.
    ``full``: ``y`` is also written out at full size."""
    inputs = ((dtype, "tensor"), (dtype, "tensor"), (dtype, "scalar"))
    body: tuple[Any, ...] = (("mul", dtype, (0, 1)), ("add", dtype, (3, 2)))
    if dtype.startswith("float") or dtype == "bfloat16":
        last = Const(1.0, dtype) if plus_one else 2
        body += (("tanh", dtype, (4,)), ("mul", dtype, (5, 2)), ("add", dtype, (6, last)))
    return FusedProgram(inputs, body, (4,) if full else (), Reduce(op, len(inputs) + len(body) - 1, axes, keepdims))


def chain_values(x: np.ndarray, a: np.ndarray, s: float, plus_one: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``(y, value reduced)`` of :func:`chain` over float ``x``, ``a`` and ``s``."""
    y = x.astype(np.float64) * a.astype(np.float64) + s
    return y, np.tanh(y) * s + (1.0 if plus_one else s)


def operands(shape: tuple[int, ...], seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``x`` of ``shape`` and ``a`` of its last axis, standard normal."""
    gen = np.random.default_rng(seed)
    x = gen.standard_normal(shape).astype(np.float32)
    return x, gen.standard_normal(shape[-1:]).astype(np.float32)


def _handle(dev: em.Device) -> Callable[[np.ndarray], Any]:
    return lambda v: materialize(em.tensor(v, device=dev)._data)


def check_chain(
    dev: em.Device,
    counts: Mapping[str, int],
    op: str,
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    keepdims: bool,
    *,
    rtol: float,
    atol: float = 0.0,
    plus_one: bool = False,
    seed: int = 2,
    upload: Callable[[np.ndarray], Any] | None = None,
) -> dict[str, int]:
    """Run float32 :func:`chain` (``full``) over :func:`operands` and ``s`` (1e-3 for ``prod``,
    else 0.5) on ``dev``; check the reduced result (shape, dtype, values within ``rtol``/``atol``)
    and the full-size ``y`` against float64. Returns how far each of ``counts`` (the backend's
    launch counters) moved. ``upload``: numpy -> the backend's handle (default: through a tensor)."""
    x, a = operands(shape, seed)
    up = upload or _handle(dev)
    s = 1e-3 if op == "prod" else 0.5
    before = dict(counts)
    prog = chain("float32", op, axes, keepdims, full=True, plus_one=plus_one)
    full, red = dev.backend.run_fused(prog, [up(x), up(a), s], shape=shape)
    ran = {k: counts[k] - before[k] for k in before}
    y, v = chain_values(x, a, s, plus_one)
    want = getattr(np, op)(v, axis=axes, keepdims=keepdims)
    got = dev.backend.to_numpy(red)
    check(
        got.shape == want.shape and got.dtype == np.float32,
        f"check_chain {op} over axes {axes} of {shape} (keepdims={keepdims}): the reduced result has shape "
        f"{got.shape} and dtype {got.dtype}, expected {want.shape} float32",
    )
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(dev.backend.to_numpy(full), y, rtol=1e-6, atol=1e-6)
    return ran


def check_nan_and_integers(dev: em.Device, upload: Callable[[np.ndarray], Any] | None = None) -> None:
    """One-instruction programs reduced over rows: max and min propagate NaN (as numpy's), and
    int64 ``k * k`` sums, maxes and mins exactly."""
    up = upload or _handle(dev)
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf], [2.0, 5.0, -1.0]], dtype=np.float32)
    for op in ("max", "min"):
        prog = FusedProgram((("float32", "tensor"),), (("copy", "float32", (0,)),), (), Reduce(op, 1, (1,)))
        (got,) = dev.backend.run_fused(prog, [up(x)], shape=x.shape)
        np.testing.assert_array_equal(dev.backend.to_numpy(got), getattr(np, op)(x, axis=1))
    k = np.random.default_rng(4).integers(-1000, 1000, (33, 70)).astype(np.int64)
    for op in ("sum", "max", "min"):
        prog = FusedProgram((("int64", "tensor"),), (("mul", "int64", (0, 0)),), (), Reduce(op, 1, (1,)))
        (got,) = dev.backend.run_fused(prog, [up(k)], shape=k.shape)
        np.testing.assert_array_equal(dev.backend.to_numpy(got), getattr(np, op)(k * k, axis=1))


def check_float16_sum(
    dev: em.Device, shape: tuple[int, int], upload: Callable[[np.ndarray], Any] | None = None
) -> None:
    """float16 ``exp`` summed over the rows of ``shape`` (values from -2 to 2) is float16 and
    within 2e-3 of float64: it accumulates in float32."""
    up = upload or _handle(dev)
    h = np.linspace(-2, 2, shape[0] * shape[1]).astype(np.float16).reshape(shape)
    prog = FusedProgram((("float16", "tensor"),), (("exp", "float16", (0,)),), (), Reduce("sum", 1, (1,)))
    (got,) = dev.backend.run_fused(prog, [up(h)], shape=h.shape)
    got = dev.backend.to_numpy(got)
    check(
        got.dtype == np.float16,
        f"check_float16_sum over rows of {shape}: the sum came back as {got.dtype}, not float16",
    )
    np.testing.assert_allclose(got, np.exp(h.astype(np.float64)).sum(axis=1), rtol=2e-3)


def check_lazy_reductions(
    dev: em.Device, counts: Mapping[str, int], shape: tuple[int, int], kernel: str = "row"
) -> None:
    """``(x * a * 0.1 + 0.5).exp()`` summed, averaged and maxed over its last axis through the lazy
    layer on a fusing ``dev``: each is one region and one kernel (``em.lazy.stats``), launched as
    ``counts[kernel]``, and matches float64."""
    fusing = dev.capabilities.fusion_reductions
    missing = sorted({"sum", "prod", "max", "min", "mean"} - set(fusing))
    check(not missing, f"{dev}: capabilities.fusion_reductions lacks {missing} (has {sorted(fusing)})")
    gen = np.random.default_rng(8)
    x, a = gen.standard_normal(shape).astype(np.float32), gen.standard_normal(shape[-1:]).astype(np.float32)
    tx, ta = em.tensor(x, device=dev), em.tensor(a, device=dev)
    x64 = x.astype(np.float64)
    for op in ("sum", "mean", "max"):
        stats, before = em.lazy.stats(dev), counts[kernel]
        got = getattr((tx * ta * 0.1 + 0.5).exp(), op)(axis=-1).numpy()
        after = em.lazy.stats(dev)
        check_equal(
            (after["reductions"] - stats["reductions"], after["kernels"] - stats["kernels"]),
            (1, 1),
            f"{op} over the last axis of {shape}: (reductions, kernels) added to em.lazy.stats",
        )
        check_equal(counts[kernel] - before, 1, f"{op}: launches of the fused reduce kernel {kernel!r}")
        np.testing.assert_allclose(got, getattr(np, op)(np.exp(x64 * a * 0.1 + 0.5), axis=-1), rtol=1e-5)

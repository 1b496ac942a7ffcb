"""Fused programs with a trailing reduction on wgpu (kernels/fused_reduce.py): each launch shape
(a workgroup per row, chunked rows plus a combining pass, the split fallback) against numpy
float64, with the launch counters showing which kernel ran; and through the lazy layer."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.lazy.program import FusedProgram, Reduce
from ember_wgpu.kernels import fused_reduce


def _chain(op: str, axes: tuple[int, ...], keepdims: bool, full: bool) -> FusedProgram:
    """``tanh(x * a + s) * s + s`` reduced; ``full``: ``x * a + s`` written out at full size too."""
    f = "float32"
    inputs = ((f, "tensor"), (f, "tensor"), (f, "scalar"))
    body = (("mul", f, (0, 1)), ("add", f, (3, 2)), ("tanh", f, (4,)), ("mul", f, (5, 2)), ("add", f, (6, 2)))
    return FusedProgram(inputs, body, (4,) if full else (), Reduce(op, 7, axes, keepdims))


CASES = [
    # (shape, axes, keepdims, the launch: a workgroup per row, or chunks of rows then a second pass)
    ((64, 48), (1,), False, "row"),
    ((40, 3, 30), (0, 2), True, "row"),  # the middle axis kept, strided rows
    ((5, 7, 6), (0,), False, "row"),  # a leading axis reduced: rows read with a stride
    ((4, 6, 3000), (0, 1, 2), False, "chunked"),  # one value: chunks, then the combining pass
]


@pytest.mark.parametrize(("shape", "axes", "keepdims", "launch"), CASES)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
def test_launch_shapes_match_numpy(dev, shape, axes, keepdims, launch, op):
    gen = np.random.default_rng(2)
    x = gen.standard_normal(shape).astype(np.float32)
    a = gen.standard_normal(shape[-1:]).astype(np.float32)
    xt = np.ascontiguousarray(x.transpose(2, 1, 0)).transpose(2, 1, 0) if x.ndim == 3 else x
    hx, ha = dev.backend.from_numpy(xt), dev.backend.from_numpy(a)
    s = 1e-3 if op == "prod" else 0.5
    before = dict(fused_reduce.COUNTS)
    full, red = dev.backend.run_fused(_chain(op, axes, keepdims, full=True), [hx, ha, s], shape=shape)
    ran = {k: fused_reduce.COUNTS[k] - before[k] for k in before}
    assert ran == {**dict.fromkeys(before, 0), launch: 1}, f"launches {ran}: not the {launch} kernel"
    x64 = x.astype(np.float64)
    v = np.tanh(x64 * a + s) * s + s
    want = getattr(np, op)(v, axis=axes, keepdims=keepdims)
    got = dev.backend.to_numpy(red)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(dev.backend.to_numpy(full), x64 * a + s, rtol=1e-6, atol=1e-6)


def test_max_min_propagate_nan_and_integers_reduce_exactly(dev):
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf], [2.0, 5.0, -1.0]], dtype=np.float32)
    for op in ("max", "min"):
        prog = FusedProgram((("float32", "tensor"),), (("copy", "float32", (0,)),), (), Reduce(op, 1, (1,)))
        (got,) = dev.backend.run_fused(prog, [dev.backend.from_numpy(x)], shape=x.shape)
        np.testing.assert_array_equal(dev.backend.to_numpy(got), getattr(np, op)(x, axis=1))
    k = np.random.default_rng(4).integers(-1000, 1000, (33, 70)).astype(np.int64)
    for op in ("sum", "max", "min"):
        prog = FusedProgram((("int64", "tensor"),), (("mul", "int64", (0, 0)),), (), Reduce(op, 1, (1,)))
        (got,) = dev.backend.run_fused(prog, [dev.backend.from_numpy(k)], shape=k.shape)
        np.testing.assert_array_equal(dev.backend.to_numpy(got), getattr(np, op)(k * k, axis=1))


def test_float16_accumulates_in_float32(dev):
    h = np.linspace(-2, 2, 64 * 513).astype(np.float16).reshape(64, 513)
    prog = FusedProgram((("float16", "tensor"),), (("exp", "float16", (0,)),), (), Reduce("sum", 1, (1,)))
    (got,) = dev.backend.run_fused(prog, [dev.backend.from_numpy(h)], shape=h.shape)
    got = dev.backend.to_numpy(got)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, np.exp(h.astype(np.float64)).sum(axis=1), rtol=2e-3)


def test_too_many_buffers_runs_the_region_then_the_reduction(dev, monkeypatch):
    rt = dev.backend.rt
    monkeypatch.setattr(rt, "max_storage_buffers", 3)  # x, a, the full-size output: no room for the result
    gen = np.random.default_rng(5)
    x, a = gen.standard_normal((16, 40)).astype(np.float32), gen.standard_normal(40).astype(np.float32)
    before = fused_reduce.COUNTS["split"]
    full, red = dev.backend.run_fused(
        _chain("sum", (1,), False, full=True),
        [dev.backend.from_numpy(x), dev.backend.from_numpy(a), 0.5],
        shape=x.shape,
    )
    assert fused_reduce.COUNTS["split"] == before + 1
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(dev.backend.to_numpy(red), (np.tanh(x64 * a + 0.5) * 0.5 + 0.5).sum(1), rtol=2e-5)


def test_a_reduction_through_the_lazy_layer_is_one_kernel(dev):
    if not em.lazy.fusion_enabled():
        pytest.skip("fusion is off for this run (EMBER_FUSION=0)")
    assert {"sum", "prod", "max", "min", "mean"} <= dev.capabilities.fusion_reductions
    gen = np.random.default_rng(8)
    x, a = gen.standard_normal((256, 128)).astype(np.float32), gen.standard_normal(128).astype(np.float32)
    tx, ta = em.tensor(x, device=dev), em.tensor(a, device=dev)
    x64 = x.astype(np.float64)
    for op in ("sum", "mean", "max"):
        stats, counts = em.lazy.stats(dev), dict(fused_reduce.COUNTS)
        got = getattr((tx * ta + 0.5).exp(), op)(axis=-1).numpy()
        after = em.lazy.stats(dev)
        assert after["reductions"] == stats["reductions"] + 1 and after["kernels"] == stats["kernels"] + 1
        assert fused_reduce.COUNTS["row"] == counts["row"] + 1, "the fused reduce kernel did not run"
        np.testing.assert_allclose(got, getattr(np, op)(np.exp(x64 * a + 0.5), axis=-1), rtol=1e-5)

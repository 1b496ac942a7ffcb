"""Fused programs with a trailing reduction on wgpu (kernels/fused_reduce.py): each launch shape
(a workgroup per row, chunked rows plus a combining pass, the split fallback) against numpy
float64, with the launch counters showing which kernel ran; and through the lazy layer."""

from __future__ import annotations

import functools

import numpy as np
import pytest

import ember as em
from ember_conformance.fused_reduce_checks import (
    chain,
    chain_values,
    check_chain,
    check_float16_sum,
    check_lazy_reductions,
    check_nan_and_integers,
)
from ember_wgpu.kernels import fused_reduce


def _column_major(dev, v: np.ndarray):
    """``v`` on ``dev``; a 3-d ``v`` with its axes stored in reverse order (rows read with a stride)."""
    return dev.backend.from_numpy(np.ascontiguousarray(v.transpose(2, 1, 0)).transpose(2, 1, 0) if v.ndim == 3 else v)


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
    upload = functools.partial(_column_major, dev)
    ran = check_chain(dev, fused_reduce.COUNTS, op, shape, axes, keepdims, rtol=2e-5, atol=1e-6, upload=upload)
    assert ran == {**dict.fromkeys(ran, 0), launch: 1}, f"launches {ran}: not the {launch} kernel"


def test_max_min_propagate_nan_and_integers_reduce_exactly(dev):
    check_nan_and_integers(dev, dev.backend.from_numpy)


def test_float16_accumulates_in_float32(dev):
    check_float16_sum(dev, (64, 513), dev.backend.from_numpy)


def test_too_many_buffers_runs_the_region_then_the_reduction(dev, monkeypatch):
    rt = dev.backend.rt
    monkeypatch.setattr(rt, "max_storage_buffers", 3)  # x, a, the full-size output: no room for the result
    gen = np.random.default_rng(5)
    x, a = gen.standard_normal((16, 40)).astype(np.float32), gen.standard_normal(40).astype(np.float32)
    before = fused_reduce.COUNTS["split"]
    full, red = dev.backend.run_fused(
        chain("float32", "sum", (1,), False, full=True),
        [dev.backend.from_numpy(x), dev.backend.from_numpy(a), 0.5],
        shape=x.shape,
    )
    assert fused_reduce.COUNTS["split"] == before + 1
    np.testing.assert_allclose(dev.backend.to_numpy(red), chain_values(x, a, 0.5)[1].sum(1), rtol=2e-5)


def test_a_reduction_through_the_lazy_layer_is_one_kernel(dev):
    if not em.lazy.fusion_enabled():
        pytest.skip("fusion is off for this run (EMBER_FUSION=0)")
    check_lazy_reductions(dev, fused_reduce.COUNTS, (256, 128))

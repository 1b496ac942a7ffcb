"""Fused programs with a trailing reduction (ember_opencl.fused_reduce): the generated source,
and each launch shape (a work item per row, a work-group per row, chunked rows) against numpy
float64, with the launch counters showing which kernel ran."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.lazy import materialize
from ember.lazy.program import FusedProgram, Reduce
from ember_conformance.fused_reduce_checks import chain, check_chain
from ember_opencl import fused_reduce
from ember_opencl.fused_reduce import reduce_source


def _chain(dtype: str, op: str, axes: tuple[int, ...], keepdims: bool = False, full: bool = False) -> FusedProgram:
    """The shared chain ending in ``+ 1`` (floats near 1 for a small ``s``: products stay finite)."""
    return chain(dtype, op, axes, keepdims, full, plus_one=True)


def test_source_folds_in_registers_and_combines_in_local_memory():
    prog = _chain("float32", "max", (1,))
    src, argtypes = reduce_source(prog, ("s", "z"), 1, 1, "int", 64, False)
    assert "__kernel void ember_fused_reduce(" in src
    assert "__local float s_acc[64];" in src and "barrier(CLK_LOCAL_MEM_FENCE)" in src
    assert "isnan(x)" in src  # NaN wins, as numpy's max
    assert "in1[in1_off]" in src  # the broadcast input is read once per row
    assert "out0" not in src  # no full-size output: the value never reaches memory
    per_row, _ = reduce_source(prog, ("s", "s"), 2, 1, "long", 0, False)
    assert "__local" not in per_row and "const long osh1" in per_row
    half, _ = reduce_source(_chain("float16", "sum", (0,)), ("s", "s"), 1, 1, "int", 0, False)
    assert "ember_round_half(" in half  # rounded to float16 first, then summed in float
    assert argtypes.count(None) == 3  # red, in0, in1


CASES = [
    # (shape, axes, keepdims, the launch shape of a CPU device's plan, of a GPU's)
    ((256, 48), (1,), False, "per_item", "group"),  # many short rows
    ((3, 400), (1,), True, "per_item", "group"),  # few long rows: a work-group each on a GPU
    ((4, 6, 5000), (0, 1, 2), False, "chunked", "chunked"),  # one value: chunks, then a second pass
    ((40, 3, 30), (0, 2), True, None, None),  # the middle axis kept, strided rows
    ((700, 64), (0,), False, "per_item", "columns"),  # a leading axis: rows fastest, in chunks on a GPU
    ((50, 6, 40), (0,), True, "per_item", "columns"),  # a leading axis, two kept axes
]


@pytest.mark.parametrize(("shape", "axes", "keepdims", "cpu_launch", "gpu_launch"), CASES)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
@pytest.mark.parametrize("plan", ["device", "gpu"])
def test_launch_shapes_match_numpy(dev, monkeypatch, shape, axes, keepdims, cpu_launch, gpu_launch, op, plan):
    rt = dev.backend.rt
    monkeypatch.setattr(fused_reduce, "_PLANS", {})
    if plan == "gpu":  # a GPU's plan (work-groups striding a row) run on this device too
        monkeypatch.setattr(rt, "is_cpu", False)
    launch = cpu_launch if rt.is_cpu else gpu_launch
    rtol = {"sum": 1e-4, "prod": 1e-3}.get(op, 2e-6)
    ran = check_chain(dev, fused_reduce.COUNTS, op, shape, axes, keepdims, rtol=rtol, plus_one=True)
    assert sum(ran.values()) == 1, f"launches {ran}: not one fused kernel"
    if launch is not None:
        assert ran[launch] == 1, f"expected the {launch} kernel, got {ran}"


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_integer_reductions_are_exact(dev, dtype, op):
    gen = np.random.default_rng(3)
    x = gen.integers(-1000, 1000, (7, 300)).astype(dtype)
    a = gen.integers(-3, 4, (300,)).astype(dtype)
    h = [materialize(em.tensor(v, device=dev)._data) for v in (x, a)]
    (red,) = dev.backend.run_fused(_chain(dtype, op, (1,)), [*h, 5], shape=x.shape)
    want = getattr(np, op)(x * a + 5, axis=1)
    got = dev.backend.to_numpy(red)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)


def test_float16_sums_accumulate_in_float32(dev):
    if not dev.capabilities.supports(em.float16):
        pytest.skip("no float16 on this device")
    x = np.full((2, 4096), 1.0, dtype=np.float16)
    h = materialize(em.tensor(x, device=dev)._data)
    prog = FusedProgram((("float16", "tensor"),), (("copy", "float16", (0,)),), (), Reduce("sum", 1, (1,)))
    (red,) = dev.backend.run_fused(prog, [h], shape=x.shape)
    # a float16 accumulator stops at 2048 (2048 + 1 rounds back to 2048)
    np.testing.assert_array_equal(dev.backend.to_numpy(red), np.array([4096, 4096], dtype=np.float16))


def test_few_long_rows_of_a_libm_op_are_declined_on_a_cpu(dev, monkeypatch):
    rt = dev.backend.rt
    monkeypatch.setattr(fused_reduce, "_PLANS", {})
    shape = (2, fused_reduce.CPU_DECLINE_ELEMENTS // 2)
    for is_cpu in (True, False):  # a CPU's plan declines (the region's kernel, then the reduction's); a GPU's fuses
        monkeypatch.setattr(rt, "is_cpu", is_cpu)
        ran = check_chain(dev, fused_reduce.COUNTS, "sum", shape, (1,), False, rtol=2e-5, plus_one=True, seed=6)
        assert ran["declined"] == (1 if is_cpu else 0) and sum(ran.values()) == 1, ran

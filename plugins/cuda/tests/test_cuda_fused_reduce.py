"""Fused programs with a trailing reduction on CUDA (fused_reduce.py): the generated source
compiles under NVRTC (no GPU needed, the nvidia-cuda-nvrtc wheel), and on a GPU each launch
shape (a block per row, chunked rows plus the combining kernel) against numpy float64, with
the launch counters showing which kernel ran, and the lazy layer's one-kernel road."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cuda import runtime
from ember_cuda.fused_reduce import COUNTS, finish_source, reduce_source
from ember_cuda.fusion import COMPILE_OPTIONS

import ember as em
from ember.lazy import materialize
from ember.lazy.program import FusedProgram, Reduce

GPU = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)


def _chain(dtype: str, op: str, axes: tuple[int, ...], keepdims: bool, full: bool) -> FusedProgram:
    """``tanh(x * a + s) * s + s`` reduced; ``full``: ``x * a + s`` written out at full size too."""
    inputs = ((dtype, "tensor"), (dtype, "tensor"), (dtype, "scalar"))
    body = (("mul", dtype, (0, 1)), ("add", dtype, (3, 2)), ("tanh", dtype, (4,)), ("mul", dtype, (5, 2)))
    body += (("add", dtype, (6, 2)),)
    return FusedProgram(inputs, body, (4,) if full else (), Reduce(op, 7, axes, keepdims))


def test_every_form_compiles_under_nvrtc() -> None:
    from nvrtc import compile_log, library

    lib = library()
    if lib is None:
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed (pip install 'nvidia-cuda-nvrtc==13.*')")
    sources = []
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        for op in ("sum", "prod", "max", "min", "mean"):
            prog = _chain(dtype, op, (1,), False, full=True)
            sources += [
                reduce_source(prog, ("s", "z"), 1, 1, partial, cols)
                for partial in (False, True)
                for cols in (False, True)
            ]
            sources.append(finish_source(op, dtype))
    ints = FusedProgram((("int64", "tensor"),), (("mul", "int64", (0, 0)),), (), Reduce("min", 1, (0, 1)))
    sources.append(reduce_source(ints, ("s",), 0, 2, False))
    failed = [
        log for src in sources if not (done := compile_log(lib, src, options=COMPILE_OPTIONS))[0] for log in [done[1]]
    ]
    assert not failed, failed[0]


@pytest.fixture
def dev() -> em.Device:
    device = em.Device.cuda(0)
    with em.lazy.fusion(True, device):
        yield device


CASES = [
    # (shape, axes, keepdims, the launch on an H200: a block per row, or chunks then the combining kernel)
    ((4096, 300), (1,), False, "row"),
    ((40, 3, 30), (0, 2), True, None),  # the middle axis kept, strided rows
    ((4, 6, 50000), (0, 1, 2), False, "chunked"),  # one value: chunks, then the combining kernel
    ((4096, 300), (0,), False, "cols"),  # a bias gradient's sum: neighbouring rows a block, coalesced
    ((64, 7, 130), (0,), True, "cols"),  # kept axes collapse to 910 contiguous rows (not a multiple of 32)
    ((3, 70), (0,), False, "cols"),  # fewer reduced elements than a block's warps
]


@GPU
@pytest.mark.parametrize(("shape", "axes", "keepdims", "launch"), CASES)
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
def test_launch_shapes_match_numpy(dev, shape, axes, keepdims, launch, op):
    gen = np.random.default_rng(2)
    x = gen.standard_normal(shape).astype(np.float32)
    a = gen.standard_normal(shape[-1:]).astype(np.float32)
    h = [materialize(em.tensor(v, device=dev)._data) for v in (x, a)]
    s = 1e-3 if op == "prod" else 0.5
    before = dict(COUNTS)
    full, red = dev.backend.run_fused(_chain("float32", op, axes, keepdims, full=True), [*h, s], shape=shape)
    ran = {k: COUNTS[k] - before[k] for k in before}
    assert ran["row"] + ran["chunked"] == 1, f"launches {ran}: not one fused kernel"
    if launch is not None:
        assert ran[launch] == 1, f"expected the {launch} kernel, got {ran}"
    assert ran["cols"] == (launch == "cols"), f"the column layout ran {ran['cols']} times for {shape} over {axes}"
    x64 = x.astype(np.float64)
    want = getattr(np, op)(np.tanh(x64 * a + s) * s + s, axis=axes, keepdims=keepdims)
    got = dev.backend.to_numpy(red)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4 if op == "prod" else 2e-5, atol=1e-6)
    np.testing.assert_allclose(dev.backend.to_numpy(full), x64 * a + s, rtol=1e-6, atol=1e-6)


@GPU
def test_nan_propagates_integers_are_exact_and_float16_accumulates_in_float32(dev):
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf], [2.0, 5.0, -1.0]], dtype=np.float32)
    for op in ("max", "min"):
        prog = FusedProgram((("float32", "tensor"),), (("copy", "float32", (0,)),), (), Reduce(op, 1, (1,)))
        (got,) = dev.backend.run_fused(prog, [materialize(em.tensor(x, device=dev)._data)], shape=x.shape)
        np.testing.assert_array_equal(dev.backend.to_numpy(got), getattr(np, op)(x, axis=1))
    k = np.random.default_rng(4).integers(-1000, 1000, (33, 70)).astype(np.int64)
    for op in ("sum", "max", "min"):
        prog = FusedProgram((("int64", "tensor"),), (("mul", "int64", (0, 0)),), (), Reduce(op, 1, (1,)))
        (got,) = dev.backend.run_fused(prog, [materialize(em.tensor(k, device=dev)._data)], shape=k.shape)
        np.testing.assert_array_equal(dev.backend.to_numpy(got), getattr(np, op)(k * k, axis=1))
    h = np.linspace(-2, 2, 64 * 5000).astype(np.float16).reshape(64, 5000)
    prog = FusedProgram((("float16", "tensor"),), (("exp", "float16", (0,)),), (), Reduce("sum", 1, (1,)))
    (got,) = dev.backend.run_fused(prog, [materialize(em.tensor(h, device=dev)._data)], shape=h.shape)
    got = dev.backend.to_numpy(got)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, np.exp(h.astype(np.float64)).sum(axis=1), rtol=2e-3)


@GPU
def test_a_reduction_through_the_lazy_layer_is_one_kernel(dev):
    assert {"sum", "prod", "max", "min", "mean"} <= dev.capabilities.fusion_reductions
    gen = np.random.default_rng(8)
    x, a = gen.standard_normal((4096, 1024)).astype(np.float32), gen.standard_normal(1024).astype(np.float32)
    tx, ta = em.tensor(x, device=dev), em.tensor(a, device=dev)
    x64 = x.astype(np.float64)
    for op in ("sum", "mean", "max"):
        stats, counts = em.lazy.stats(dev), dict(COUNTS)
        got = getattr((tx * ta * 0.1 + 0.5).exp(), op)(axis=-1).numpy()
        after = em.lazy.stats(dev)
        assert after["reductions"] == stats["reductions"] + 1 and after["kernels"] == stats["kernels"] + 1
        assert COUNTS["row"] == counts["row"] + 1, "the fused reduce kernel did not run"
        np.testing.assert_allclose(got, getattr(np, op)(np.exp(x64 * a * 0.1 + 0.5), axis=-1), rtol=1e-5)


@GPU
def test_a_sum_over_leading_axes_of_a_realized_tensor_runs_the_fused_reduction(dev):
    """A convolution's bias gradient: NCHW summed over N, H, W (CuPy gives each channel one block)."""
    x = np.random.default_rng(9).standard_normal((64, 8, 16, 16)).astype(np.float32)
    t = em.tensor(x, device=dev)
    before = dict(COUNTS)
    for axes, keepdims in (((0, 2, 3), False), ((0,), True), ((0, 1, 2), False)):
        got = t.sum(axis=axes, keepdims=keepdims).numpy()
        np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=axes, keepdims=keepdims), rtol=1e-5, atol=1e-4)
    ran = COUNTS["row"] + COUNTS["chunked"] - before["row"] - before["chunked"]
    assert ran == 3, f"{ran} fused-reduction launches for three sums"

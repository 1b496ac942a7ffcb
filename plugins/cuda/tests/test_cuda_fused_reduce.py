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
from ember.lazy.program import FusedProgram, Reduce
from ember_conformance.fused_reduce_checks import (
    chain,
    check_chain,
    check_float16_sum,
    check_lazy_reductions,
    check_nan_and_integers,
)

GPU = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)


def test_every_form_compiles_under_nvrtc() -> None:
    from nvrtc import compile_log, library

    lib = library()
    if lib is None:
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed (pip install 'nvidia-cuda-nvrtc==13.*')")
    sources = []
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        for op in ("sum", "prod", "max", "min", "mean"):
            prog = chain(dtype, op, (1,), False, full=True)
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
    ran = check_chain(dev, COUNTS, op, shape, axes, keepdims, rtol=1e-4 if op == "prod" else 2e-5, atol=1e-6)
    assert ran["row"] + ran["chunked"] == 1, f"launches {ran}: not one fused kernel"
    if launch is not None:
        assert ran[launch] == 1, f"expected the {launch} kernel, got {ran}"
    assert ran["cols"] == (launch == "cols"), f"the column layout ran {ran['cols']} times for {shape} over {axes}"


@GPU
def test_nan_propagates_integers_are_exact_and_float16_accumulates_in_float32(dev):
    check_nan_and_integers(dev)
    check_float16_sum(dev, (64, 5000))


@GPU
def test_a_reduction_through_the_lazy_layer_is_one_kernel(dev):
    check_lazy_reductions(dev, COUNTS, (4096, 1024))


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


@GPU
def test_a_small_sum_of_a_realized_tensor_runs_the_fused_reduction(dev):
    """A mean loss (512,) and a small bias's gradient (512, 10): the fused reduction with its
    launch plan, not CuPy's reduction (host time per call); a large trailing sum stays CuPy's."""
    rng = np.random.default_rng(10)
    cases = [((512,), (0,), False), ((512, 10), (0,), False), ((512, 10), (1,), True), ((3, 5, 7), (1, 2), False)]
    before = dict(COUNTS)
    for shape, axes, keepdims in cases:
        x = rng.standard_normal(shape).astype(np.float32)
        got = em.tensor(x, device=dev).sum(axis=axes, keepdims=keepdims).numpy()
        np.testing.assert_allclose(got, x.astype(np.float64).sum(axis=axes, keepdims=keepdims), rtol=1e-5, atol=1e-4)
    fused = sum(COUNTS[k] - before.get(k, 0) for k in ("row", "chunked"))
    assert fused == len(cases), f"{fused} fused-reduction launches for {len(cases)} small sums"
    big = rng.standard_normal((256, 1024)).astype(np.float32)
    before = dict(COUNTS)
    got = em.tensor(big, device=dev).sum(axis=(1,)).numpy()
    np.testing.assert_allclose(got, big.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-3)
    ran = sum(COUNTS[k] - before.get(k, 0) for k in ("row", "chunked"))
    assert ran == 0, "a large trailing sum ran the fused reduction"

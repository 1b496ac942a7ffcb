"""Fusion on wgpu: core's FusedProgram run by the one WGSL generator (run_fused), checked
against numpy float64; regions really fused by the lazy layer; no compile for a new shape."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
import ember.lazy as lazy
from ember.lazy.program import Const, FusedProgram

F = "float32"
RNG = np.random.default_rng(7)


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


def _up(dev, a: np.ndarray):  # noqa: ANN001, ANN202 - a backend handle
    return dev.backend.from_numpy(a)


def _read(dev, h) -> np.ndarray:  # noqa: ANN001
    return dev.backend.to_numpy(h)


@pytest.fixture
def lazy_dev(dev):  # noqa: ANN001, ANN201
    """``dev`` with the lazy layer on (whatever EMBER_FUSION says), pending values realized after."""
    with lazy.fusion(True, dev):
        yield dev


# -- run_fused with hand-written programs ------------------------------------------------------
def test_multi_instruction_chain_with_broadcast_and_scalar(dev):
    """(x * s + b) where b broadcasts over rows, then tanh and a literal: one kernel."""
    x = RNG.standard_normal((6, 40)).astype(np.float32)
    b = RNG.standard_normal((40,)).astype(np.float32)
    prog = FusedProgram(
        ((F, "tensor"), (F, "scalar"), (F, "tensor")),
        (("mul", F, (0, 1)), ("add", F, (3, 2)), ("tanh", F, (4,)), ("sub", F, (5, Const(0.25, F)))),
        (6,),
    )
    (out,) = dev.backend.run_fused(prog, [_up(dev, x), 1.5, _up(dev, b)], shape=(6, 40))
    expected = np.tanh(x.astype(np.float64) * 1.5 + b) - 0.25
    np.testing.assert_allclose(_read(dev, out), expected, rtol=2e-6, atol=2e-7)


def test_strided_view_inputs(dev):
    """A transposed view and a sliced view as inputs (general layout) give numpy's values."""
    a = RNG.standard_normal((8, 5)).astype(np.float32)
    c = RNG.standard_normal((5, 16)).astype(np.float32)
    ha = _up(dev, a).permute((1, 0))  # (5, 8), strides (1, 5)
    hc = _up(dev, c).slice((0, 1), (5, 16), (1, 2))  # (5, 8): every second column from 1
    prog = FusedProgram(((F, "tensor"), (F, "tensor")), (("maximum", F, (0, 1)), ("exp", F, (2,))), (3,))
    (out,) = dev.backend.run_fused(prog, [ha, hc], shape=(5, 8))
    expected = np.exp(np.maximum(a.T.astype(np.float64), c[:, 1::2]))
    np.testing.assert_allclose(_read(dev, out), expected, rtol=2e-6)


def test_casts_and_bool_results(dev):
    """int32 -> float32 cast, a comparison giving bool, where on it, a cast back to int8 (wraps)."""
    i = RNG.integers(-300, 300, size=64).astype(np.int32)
    x = RNG.standard_normal(64).astype(np.float32) * 100
    prog = FusedProgram(
        (("int32", "tensor"), (F, "tensor")),
        (
            ("cast", F, (0,)),  # 2
            ("gt", "bool", (2, 1)),  # 3
            ("where", F, (3, 2, 1)),  # 4
            ("cast", "int8", (4,)),  # 5
        ),
        (3, 5),
    )
    gt, small = dev.backend.run_fused(prog, [_up(dev, i), _up(dev, x)], shape=(64,))
    ref_gt = i.astype(np.float64) > x
    got_gt = _read(dev, gt)
    assert got_gt.dtype == np.bool_
    np.testing.assert_array_equal(got_gt, ref_gt)
    picked = np.where(ref_gt, i.astype(np.float32), x)
    np.testing.assert_array_equal(_read(dev, small), picked.astype(np.int64).astype(np.int8))


def test_multi_output_program(dev):
    """Two outputs of different dtypes written by one kernel: y = x*x and isfinite(1/x)."""
    x = np.array([0.0, -0.0, 1.0, -2.0, 3.5, np.inf, np.nan, 1e-30], np.float32)
    prog = FusedProgram(
        ((F, "tensor"),), (("square", F, (0,)), ("reciprocal", F, (0,)), ("isfinite", "bool", (2,))), (1, 3)
    )
    before = dev.backend.rt.dispatches
    sq, fin = dev.backend.run_fused(prog, [_up(dev, x)], shape=(8,))
    assert dev.backend.rt.dispatches == before + 1
    with np.errstate(divide="ignore", over="ignore"):
        np.testing.assert_array_equal(_read(dev, sq), (x.astype(np.float64) ** 2).astype(np.float32))
        np.testing.assert_array_equal(_read(dev, fin), np.isfinite(1.0 / x.astype(np.float64)).astype(np.float32) != 0)


def test_int64_and_scalar_only_broadcast(dev):
    """Emulated int64 with a scalar input and a broadcast (one element) tensor."""
    a = np.array([2**40, -(2**35), 7, -1], np.int64)
    one = np.array([3], np.int64)
    prog = FusedProgram(
        (("int64", "tensor"), ("int64", "scalar"), ("int64", "tensor")),
        (("mul", "int64", (0, 2)), ("add", "int64", (3, 1)), ("floordiv", "int64", (4, Const(5, "int64")))),
        (5,),
    )
    (out,) = dev.backend.run_fused(prog, [_up(dev, a), -(2**33), _up(dev, one)], shape=(4,))
    np.testing.assert_array_equal(_read(dev, out), (a * 3 + -(2**33)) // 5)


def test_too_many_buffers_for_the_adapter_still_runs(dev):
    """A region binding more tensors than max-storage-buffers-per-shader-stage runs split."""
    rt = dev.backend.rt
    n = rt.max_storage_buffers + 2
    if n > 64:
        pytest.skip(f"this adapter binds {rt.max_storage_buffers} storage buffers: no small limit to exceed")
    xs = [RNG.standard_normal(12).astype(np.float32) for _ in range(n)]
    instrs = [("add", F, (0, 1))]
    for k in range(2, n):
        instrs.append(("add", F, (n + len(instrs) - 1, k)))
    prog = FusedProgram(tuple((F, "tensor") for _ in range(n)), tuple(instrs), (n + len(instrs) - 1,))
    (out,) = dev.backend.run_fused(prog, [_up(dev, x) for x in xs], shape=(12,))
    np.testing.assert_allclose(_read(dev, out), np.sum(np.array(xs, np.float64), axis=0), rtol=1e-5, atol=1e-6)


def test_fusion_ops_cover_cast_where_and_the_pow_rewrites(dev):
    ops = dev.backend.fusion_ops()
    assert {"cast", "where", "square", "sqrt", "reciprocal", "gelu", "add"} <= ops
    assert dev.backend.fusion is True


# -- through the lazy layer -------------------------------------------------------------------
def test_five_op_chain_is_one_kernel(lazy_dev):
    dev = lazy_dev
    x, a, b = (RNG.standard_normal(1000).astype(np.float32) for _ in range(3))
    tx, ta, tb = (em.tensor(v, device=dev) for v in (x, a, b))
    before = lazy.stats(dev)
    dispatches = dev.backend.rt.dispatches
    y = em.gelu(tx * ta + tb) * em.sigmoid(tx)
    got = y.numpy()
    after = lazy.stats(dev)
    assert after["kernels"] - before["kernels"] == 1
    assert after["fused_values"] - before["fused_values"] == 5
    assert dev.backend.rt.dispatches - dispatches == 1
    z = x.astype(np.float64) * a + b
    expected = 0.5 * z * (1 + _erf(z / math.sqrt(2))) / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-6)


def test_new_shape_compiles_nothing(lazy_dev):
    """The same chain over new shapes of the same rank reuses the kernel and pipeline."""
    dev = lazy_dev
    rt = dev.backend.rt

    def chain(n: int) -> np.ndarray:
        x = em.tensor(np.linspace(-2, 2, n * 3, dtype=np.float32).reshape(n, 3), device=dev)
        return (em.exp(x * 0.5) - x).numpy()

    chain(8)
    kernels, pipelines = len(rt.kernels), rt.stats()["pipelines"]
    for n in (12, 100, 1000):
        got = chain(n)
        xs = np.linspace(-2, 2, n * 3, dtype=np.float32).reshape(n, 3).astype(np.float64)
        np.testing.assert_allclose(got, np.exp(xs * 0.5) - xs, rtol=2e-6, atol=1e-7)
    assert (len(rt.kernels), rt.stats()["pipelines"]) == (kernels, pipelines)


def test_lazy_pow_two_becomes_square_and_broadcast_scalar(lazy_dev):
    dev = lazy_dev
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    row = RNG.standard_normal((6,)).astype(np.float32)
    tx, tr = em.tensor(x, device=dev), em.tensor(row, device=dev)
    before = lazy.stats(dev)["kernels"]
    y = ((tx - tr) ** 2.0 + 1) ** 0.5
    got = y.numpy()
    assert lazy.stats(dev)["kernels"] - before == 1
    np.testing.assert_allclose(got, np.sqrt((x.astype(np.float64) - row) ** 2 + 1), rtol=2e-6)


def test_kept_intermediate_is_an_extra_output(lazy_dev):
    """An intermediate the user still holds is written by the same kernel (no recompute)."""
    dev = lazy_dev
    x = RNG.standard_normal(256).astype(np.float32)
    tx = em.tensor(x, device=dev)
    mid = em.exp(tx) + 1.0
    out = em.log(mid) * 2.0
    before = lazy.stats(dev)["kernels"]
    got_out = out.numpy()
    got_mid = mid.numpy()
    assert lazy.stats(dev)["kernels"] - before == 1
    ref_mid = np.exp(x.astype(np.float64)) + 1.0
    np.testing.assert_allclose(got_mid, ref_mid, rtol=2e-6)
    np.testing.assert_allclose(got_out, np.log(ref_mid) * 2.0, rtol=2e-6)


def test_lazy_bool_and_cast_chain(lazy_dev):
    dev = lazy_dev
    x = RNG.standard_normal(100).astype(np.float32)
    tx = em.tensor(x, device=dev)
    mask = (tx > 0.0) & (tx < 1.0)
    counted = em.where(mask, tx, -tx).astype(em.float16)
    np.testing.assert_array_equal(mask.numpy(), (x > 0) & (x < 1))
    np.testing.assert_array_equal(counted.numpy(), np.where((x > 0) & (x < 1), x, -x).astype(np.float16))


def test_sync_frees_the_operands_of_a_step_output_whose_loss_sum_was_dropped(dev):
    """W4's shape of step: ``out = x1 + (h @ w + b)``, then ``out.sum().backward()``. The deferred
    sum dies unread; synchronize() still computes ``out`` (a tensor holds it) and so drops the
    matmul result and ``x1`` it reads, instead of holding them into the next step (at W4's GPU
    size that broke the device pool's step plan: 38 driver allocations a step). With the in-place
    offer taken, ``out`` is written into the matmul result's buffer: that handle is ``out``'s."""
    import gc
    import weakref

    adev = dev.autodiff()
    with lazy.fusion(True, adev):
        h = RNG.standard_normal((4, 8, 16)).astype(np.float32)
        w = RNG.standard_normal((16, 16)).astype(np.float32)
        b = RNG.standard_normal(16).astype(np.float32)
        th = em.tensor(h, device=adev)
        tw = em.tensor(w, device=adev).requires_grad_()
        tb = em.tensor(b, device=adev).requires_grad_()
        x1 = th * 2.0 + 1.0
        prod = th @ tw
        product = weakref.ref(prod._data if not isinstance(prod._data, lazy.LazyBuffer) else prod._data.realize())
        out = x1 + (prod + tb)
        del prod, x1
        out.sum().backward()
        adev.synchronize()
        gc.collect()
        assert out._data.real is not None, "a step output a tensor holds stayed pending through synchronize()"
        # the matmul result dies, or (the in-place offer, EMBER_WGPU_IN_PLACE) became out's own buffer
        left = product()
        assert left is None or left is out._data.real, "the matmul result the output reads outlived synchronize()"
        del left
        h64 = h.astype(np.float64)
        expected = h64 * 2.0 + 1.0 + (h64 @ w + b)
        np.testing.assert_allclose(out.numpy(), expected, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(tb.grad.numpy(), np.full(16, 32.0), rtol=1e-6)

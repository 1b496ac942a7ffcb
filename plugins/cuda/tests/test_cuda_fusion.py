"""Fusion on the GPU: elementwise chains the lazy layer defers run as one generated kernel, and
give numpy's float64 values (rounded to the dtype). Needs an NVIDIA GPU and CuPy; elsewhere
these skip with the backend's reason (the generator's text, layouts and semantics are checked
without a GPU in test_cuda_codegen.py and test_without_gpu.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from ember_cuda import runtime

import ember as em
from ember.lazy import materialize, stats
from ember.lazy.program import Const, FusedProgram

pytestmark = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)

RNG = np.random.default_rng(20261202)


@pytest.fixture
def dev() -> em.Device:
    """cuda:0 with fusion on (whatever EMBER_FUSION says), back as it was afterwards."""
    device = em.Device.cuda(0)
    with em.lazy.fusion(True, device):
        yield device


def _kernels(dev: em.Device) -> int:
    return stats(dev)["kernels"]


def _tensor(a: np.ndarray, dev: em.Device, dtype: str | None = None) -> em.Tensor:
    t = em.tensor(a, dtype=dtype or a.dtype.name, device=dev)
    return t.realize()


def _compiled(dev: em.Device) -> list:
    fused = dev.backend._fused
    return [] if fused is None else list(fused._cache)


def test_a_chain_is_one_kernel_and_numpys_values(dev: em.Device) -> None:
    x = RNG.standard_normal((37, 129)).astype(np.float32)
    z = RNG.standard_normal((37, 129)).astype(np.float32)
    tx, tz = _tensor(x, dev), _tensor(z, dev)
    before = _kernels(dev)
    y = ((tx * 2.0 + 1.0).exp() * tz - tz.sigmoid()).tanh()
    assert _kernels(dev) == before  # nothing ran yet
    got = y.numpy()
    assert _kernels(dev) == before + 1
    x64, z64 = x.astype(np.float64), z.astype(np.float64)
    want = np.tanh(np.exp(x64 * 2 + 1) * z64 - 1 / (1 + np.exp(-z64)))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_the_w6_chain_takes_the_float4_path(dev: em.Device) -> None:
    n = 1 << 20
    x, a, b = (RNG.standard_normal(n).astype(np.float32) for _ in range(3))
    tx, ta, tb = (_tensor(v, dev) for v in (x, a, b))
    before = _kernels(dev)
    got = ((tx * ta + tb).gelu() * tx.sigmoid()).numpy()
    assert _kernels(dev) == before + 1
    x64, a64, b64 = (v.astype(np.float64) for v in (x, a, b))
    u = x64 * a64 + b64
    gelu = 0.5 * u * np.array([math.erfc(-v / math.sqrt(2)) for v in u])
    np.testing.assert_allclose(got, gelu / (1 + np.exp(-x64)), rtol=2e-5, atol=1e-6)
    assert any(layout.vec4 for _, layout, _ in _compiled(dev))


def test_broadcasting_operands_and_scalars(dev: em.Device) -> None:
    x = RNG.standard_normal((6, 5, 33)).astype(np.float32)
    row = RNG.standard_normal((33,)).astype(np.float32)
    col = RNG.standard_normal((6, 1, 1)).astype(np.float32)
    one = RNG.standard_normal((1, 1, 1)).astype(np.float32)
    t = [_tensor(v, dev) for v in (x, row, col, one)]
    before = _kernels(dev)
    got = ((t[0] - t[1]) * t[2] + t[3] * 0.25 - 3).numpy()
    assert _kernels(dev) == before + 1
    want = (x.astype(np.float64) - row) * col + one * 0.25 - 3
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    modes = {m for _, layout, _ in _compiled(dev) for m in layout.modes}
    assert {"c", "s", "z"} <= modes


def test_a_constant_tensor_joins_as_a_scalar(dev: em.Device) -> None:
    x = RNG.standard_normal((300,)).astype(np.float32)
    tx = _tensor(x, dev)
    before = _kernels(dev)
    got = (em.full((300,), 1.5, device=dev) * tx + em.ones((300,), device=dev)).numpy()
    assert _kernels(dev) == before + 1
    np.testing.assert_allclose(got, 1.5 * x.astype(np.float64) + 1, rtol=1e-6, atol=2e-7)  # float32 rounding near 0


def test_casts_comparisons_and_where(dev: em.Device) -> None:
    i = RNG.integers(-50, 50, (1000,)).astype(np.int32)
    f = RNG.standard_normal((1000,)).astype(np.float32) * 10
    ti, tf = _tensor(i, dev), _tensor(f, dev)
    before = _kernels(dev)
    mask = (ti.astype("float32") > tf) & (tf < 5.0)
    out = em.where(mask, ti.astype("float32") * 0.5, tf.floor())
    got, got_mask = out.numpy(), mask.numpy()
    assert _kernels(dev) <= before + 2  # one region (the mask may be written by the same kernel)
    want_mask = (i.astype(np.float32) > f) & (f < 5)
    np.testing.assert_array_equal(got_mask, want_mask)
    np.testing.assert_array_equal(got, np.where(want_mask, i.astype(np.float64) * 0.5, np.floor(f.astype(np.float64))))
    back = ((tf * 3.0).astype("int32") + ti).numpy()  # float -> int truncates, as numpy's astype
    np.testing.assert_array_equal(back, (f * np.float32(3)).astype(np.int32) + i)


def test_integer_division_and_remainder_signs(dev: em.Device) -> None:
    a = np.array([7, -7, 7, -7, 5, 0, -(2**31), 9], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 0, 3, -1, -4], dtype=np.int32)
    ta, tb = _tensor(a, dev), _tensor(b, dev)
    got_q = ((ta + 0) // tb).numpy()  # + 0: two ops, so the generated kernel runs, not CuPy's
    got_r = em.remainder(ta * 1, tb).numpy()
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got_q, np.floor_divide(a, b))
        np.testing.assert_array_equal(got_r, np.remainder(a, b))


def test_float_floordiv_remainder_and_nan_maximum(dev: em.Device) -> None:
    v = np.array([0.0, -0.0, 1, -1, 5, -5, 3.5, -3.5, np.inf, -np.inf, np.nan, 7])
    a, b = np.meshgrid(v, np.array([1, -1, 2, -2, 0, -0.0, np.inf, -np.inf, np.nan, 0.3, -0.3, 3]))
    a, b = a.astype(np.float32).ravel(), b.astype(np.float32).ravel()
    ta, tb = _tensor(a, dev), _tensor(b, dev)
    with np.errstate(all="ignore"):
        for got, want in (
            (((ta * 1.0) // tb).numpy(), np.floor_divide(a, b)),
            (em.remainder(ta * 1.0, tb).numpy(), np.remainder(a, b)),
            (em.maximum(ta * 1.0, tb).numpy(), np.maximum(a, b)),
            (em.minimum(ta * 1.0, tb).numpy(), np.minimum(a, b)),
        ):
            np.testing.assert_array_equal(got, want)
            ok = ~np.isnan(want) & (want == 0)
            np.testing.assert_array_equal(np.signbit(got)[ok], np.signbit(want)[ok])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sixteen_bit_floats_compute_in_float_and_store_16_bits(dev: em.Device, dtype: str) -> None:
    x = RNG.standard_normal((4099,)).astype(np.float32)
    y = RNG.standard_normal((4099,)).astype(np.float32)
    tx, ty = _tensor(x, dev, dtype), _tensor(y, dev, dtype)
    before = _kernels(dev)
    out = (tx * ty + 0.5).silu() - ty.exp()
    got = out.astype("float32").numpy().astype(np.float64)
    assert _kernels(dev) == before + 1
    assert out.dtype.name == dtype
    x16 = tx.astype("float32").numpy().astype(np.float64)  # the values the tensors hold
    y16 = ty.astype("float32").numpy().astype(np.float64)
    u = x16 * y16 + 0.5
    silu, ex = u / (1 + np.exp(-u)), np.exp(y16)
    want = silu - ex
    # a few roundings to 8 (bfloat16) or 11 (float16) bits of the terms, which may cancel
    scale = (2e-2 if dtype == "bfloat16" else 4e-3) * (np.abs(silu) + np.abs(ex) + 1)
    assert (np.abs(got - want) <= scale).all(), np.max(np.abs(got - want) / scale)
    with em.lazy.fusion(False, dev):  # the same ops one at a time: the same 16-bit roundings
        eager = ((tx * ty + 0.5).silu() - ty.exp()).astype("float32").numpy().astype(np.float64)
    assert (np.abs(got - eager) <= scale).all(), np.max(np.abs(got - eager) / scale)


def test_held_values_are_written_by_the_same_kernel(dev: em.Device) -> None:
    x = RNG.standard_normal((513,)).astype(np.float32)
    tx = _tensor(x, dev)
    before = _kernels(dev)
    h = tx * 3.0
    y = (h + 1.0).exp()
    got_y = y.numpy()
    assert _kernels(dev) == before + 1
    got_h = h.numpy()  # h was an output of that kernel: nothing runs again
    assert _kernels(dev) == before + 1
    np.testing.assert_allclose(got_h, x.astype(np.float64) * 3, rtol=1e-7)
    np.testing.assert_allclose(got_y, np.exp(x.astype(np.float64) * 3 + 1), rtol=2e-6)


def test_strided_views_are_read_through_their_strides(dev: em.Device) -> None:
    x = RNG.standard_normal((40, 66)).astype(np.float32)
    tx = _tensor(x, dev)
    got = ((tx.T + 1.0) * 2.0).numpy()
    np.testing.assert_allclose(got, (x.T.astype(np.float64) + 1) * 2, rtol=1e-6)
    got = ((tx[::3, 1::2] - 1.0).abs() * tx[::3, :33]).numpy()
    want = np.abs(x[::3, 1::2].astype(np.float64) - 1) * x[::3, :33]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_bool_results_and_logical_ops(dev: em.Device) -> None:
    a = RNG.standard_normal((777,)).astype(np.float64)
    ta = _tensor(a, dev)
    got = em.logical_xor(ta > 0.1, (ta * 2).isnan() | (ta < -0.5)).numpy()
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, np.logical_xor(a > 0.1, np.isnan(a * 2) | (a < -0.5)))


def test_empty_and_zero_dimensional_regions(dev: em.Device) -> None:
    e = _tensor(np.zeros((0, 4), np.float32), dev)
    assert ((e + 1.0) * 2.0).numpy().shape == (0, 4)
    s = _tensor(np.array(2.0, np.float32), dev)
    assert float(((s + 1.0) * s).numpy()) == 6.0


def test_one_op_runs_the_ops_own_kernel(dev: em.Device) -> None:
    x = RNG.standard_normal((1000,)).astype(np.float32)
    tx = _tensor(x, dev)
    compiled = len(_compiled(dev))
    np.testing.assert_array_equal((tx + tx).numpy(), x + x)
    np.testing.assert_array_equal((tx * 2.0).numpy(), x * np.float32(2))
    assert len(_compiled(dev)) == compiled  # no generated kernel for a single op


def test_large_sizes_index_with_64_bits(dev: em.Device) -> None:
    cp = runtime.cupy()
    if cp.cuda.runtime.memGetInfo()[0] < 12 * 2**30:
        pytest.skip("needs 12 GiB of free GPU memory")
    n = 2**31 + 8
    x = em.from_dlpack(cp.tile(cp.arange(256, dtype=cp.uint8), n // 256 + 1)[:n], device=dev)  # 0..255 repeating
    y = (x + 1) * 2
    got = materialize(y._data)
    assert any(layout.index == "long long" for _, layout, _ in _compiled(dev))
    tail = cp.asnumpy(got[-300:]).astype(np.int64)
    want = ((np.arange(n - 300, n) % 256 + 1) * 2) % 256
    np.testing.assert_array_equal(tail, want)
    del x, y, got


def test_a_program_that_does_not_compile_names_itself(dev: em.Device) -> None:
    from ember_cuda.errors import KernelLaunchError

    cp = runtime.cupy()
    prog = FusedProgram(
        (("int32", "tensor"),), (("add", "int32", (0, Const(1, "int32"))), ("exp", "int32", (1,))), (2,)
    )
    with pytest.raises(KernelLaunchError, match=r"(?s)exp needs floating-point.*%2 = exp\(%1\) : int32"):
        dev.backend.run_fused(prog, [cp.zeros(4, cp.int32)], shape=(4,))


def test_run_fused_directly_with_a_scalar_and_two_outputs(dev: em.Device) -> None:
    cp = runtime.cupy()
    x = RNG.standard_normal((3, 1, 8)).astype(np.float32)
    w = RNG.standard_normal((5, 8)).astype(np.float64)
    prog = FusedProgram(
        (("float32", "tensor"), ("float64", "tensor"), ("float32", "scalar")),
        (
            ("mul", "float32", (0, 2)),  # 3
            ("cast", "float64", (3,)),  # 4
            ("hypot", "float64", (4, 1)),  # 5
            ("ge", "bool", (5, Const(1.0, "float64"))),  # 6
        ),
        (5, 6),
    )
    out, flag = dev.backend.run_fused(prog, [cp.asarray(x), cp.asarray(w), 1.5], shape=(3, 5, 8))
    assert out.shape == (3, 5, 8) and out.flags.c_contiguous and flag.dtype == np.bool_
    want = np.hypot((x * np.float32(1.5)).astype(np.float64), w)
    np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-14)
    np.testing.assert_array_equal(cp.asnumpy(flag), want >= 1)

"""conv's native weight gradient (kernels/wgrad.py), forced on any adapter, against a numpy float64
reference summing each tap's strided window of the padded input against the output's gradient."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ember import dtypes as D

RNG = np.random.default_rng(11)


def reference(g, x, kernel, stride, pads, dil, groups):
    """dW[co, ci, *tap] = sum over images and positions of g[n, co, pos] * x_padded[n, ci, pos * stride + tap * dil]."""
    g, x = g.astype(np.float64), x.astype(np.float64)
    n, cout = g.shape[:2]
    blocks = g.shape[2:]
    cg, m = x.shape[1] // groups, cout // groups
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple((lo, max(hi, 0)) for lo, hi in pads))
    dw = np.zeros((cout, cg) + tuple(kernel))
    for tap in itertools.product(*[range(k) for k in kernel]):
        win = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (b - 1) * s + 1, s) for o, d, b, s in zip(tap, dil, blocks, stride)
        )
        cols = xp[win]  # (N, C_in, *blocks)
        for grp in range(groups):
            gg = g[:, grp * m : (grp + 1) * m].reshape(n, m, -1)
            xx = cols[:, grp * cg : (grp + 1) * cg].reshape(n, cg, -1)
            dw[(slice(grp * m, (grp + 1) * m), slice(None)) + tap] = np.einsum("nml,ncl->mc", gg, xx)
    return dw


def _blocks(size, kernel, stride, pads, dil):
    return tuple(
        (s + lo + hi - (k - 1) * d - 1) // st + 1 for s, k, (lo, hi), d, st in zip(size, kernel, pads, dil, stride)
    )


CASES = [
    # (x shape, C_out, kernel, stride, pads, dilation, groups)
    ((3, 1, 9, 8), 5, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),  # W3's first conv, small
    ((2, 6, 7, 7), 8, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),  # W3's second conv, small
    ((2, 4, 9, 8), 6, (3, 2), (2, 1), ((1, 1), (2, 0)), (1, 2), 2),  # stride, dilation, asymmetric pads, groups
    ((3, 3, 11), 5, (4,), (3,), ((2, 1),), (1,), 1),  # 1-D
    ((2, 2, 5, 4, 6), 4, (2, 3, 2), (1, 2, 1), ((0, 0), (1, 1), (1, 0)), (2, 1, 1), 2),  # 3-D
    ((2, 3, 6, 5), 3, (2, 2), (1, 1), ((0, 0), (0, 0)), (1, 1), 3),  # depthwise
]


def _run(rt, case, dtype=D.float32, host=np.float32, **kw):
    from ember_wgpu.kernels import wgrad

    xs, cout, kernel, stride, pads, dil, groups = case
    blocks = _blocks(xs[2:], kernel, stride, pads, dil)
    x = RNG.standard_normal(xs).astype(host)
    g = RNG.standard_normal((xs[0], cout) + blocks).astype(host)
    got = wgrad.conv_weight_grad(rt, rt.upload(g, dtype), rt.upload(x, dtype), kernel, stride, pads, dil, groups, **kw)
    return rt.read([got])[0], reference(g, x, kernel, stride, pads, dil, groups)


@pytest.mark.parametrize("case", CASES)
def test_weight_gradient_against_numpy(rt, case):
    from ember_wgpu.kernels import wgrad

    before = dict(wgrad.CALLS)
    got, want = _run(rt, case)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert wgrad.CALLS["gemm"] == before["gemm"] + 1  # the native GEMM ran


@pytest.mark.parametrize("slices", [1, 2, 7])
@pytest.mark.parametrize("cfg", ["scalar", "odd_split_pf", (32, 16, 32, 4, 4, False, True), None])
def test_slices_and_tilings(rt, slices, cfg):
    """Slices cut mid-image (7 over 3 images of 72 positions) and are summed by the second kernel."""
    from ember_wgpu.kernels import matmul, wgrad

    before = dict(wgrad.CALLS)
    config = matmul.CONFIGS[cfg] if isinstance(cfg, str) else matmul.Config(*cfg) if cfg else None
    got, want = _run(rt, CASES[0], config=config, slices=slices)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert wgrad.CALLS["sum"] == before["sum"] + (slices > 1)


def test_many_outputs_sum(rt):
    """4608 outputs: the partials' sum in its wide layout (32 outputs per workgroup)."""
    case = ((2, 32, 4, 4), 16, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    got, want = _run(rt, case, slices=3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_float16_and_int32(rt):
    got, want = _run(rt, CASES[2], D.float16, np.float16, slices=3)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-2, atol=2e-2)
    from ember_wgpu.kernels import wgrad

    xs, cout, kernel, stride, pads, dil, groups = CASES[2]
    x = RNG.integers(-5, 6, xs).astype(np.int32)
    g = RNG.integers(-5, 6, (xs[0], cout) + _blocks(xs[2:], kernel, stride, pads, dil)).astype(np.int32)
    up = lambda a: rt.upload(a, D.int32)  # noqa: E731
    got = rt.read([wgrad.conv_weight_grad(rt, up(g), up(x), kernel, stride, pads, dil, groups, slices=2)])[0]
    np.testing.assert_array_equal(got, reference(g, x, kernel, stride, pads, dil, groups).astype(np.int64))


def test_empty_batch_gives_zeros(rt):
    from ember_wgpu.kernels import wgrad

    x, g = np.zeros((0, 3, 5, 5), np.float32), np.zeros((0, 4, 5, 5), np.float32)
    pads = ((1, 1), (1, 1))
    out = wgrad.conv_weight_grad(rt, rt.upload(g, D.float32), rt.upload(x, D.float32), (3, 3), (1, 1), pads, (1, 1), 1)
    np.testing.assert_array_equal(rt.read([out])[0], np.zeros((4, 3, 3, 3), np.float32))


@pytest.mark.parametrize("dtype", ["int64", "complex64"])
def test_dtypes_beyond_the_tiled_gemm(dev, rt, dtype):
    """complex64 and int64 take unfold + matmul + a sum over the images (the tiled GEMM lacks them)."""
    from ember_wgpu.kernels import wgrad

    xs, cout, kernel, stride, pads, dil, groups = CASES[2]
    shape_g = (xs[0], cout) + _blocks(xs[2:], kernel, stride, pads, dil)
    parts = [RNG.integers(-3, 4, s) for s in (xs, shape_g, xs, shape_g)]
    x, g = parts[:2] if dtype == "int64" else (parts[0] + 1j * parts[2], parts[1] + 1j * parts[3])
    before = wgrad.CALLS["unfold"]
    out = dev.backend.conv_weight_grad(
        rt.upload(g.astype(dtype), getattr(D, dtype)), rt.upload(x.astype(dtype), getattr(D, dtype)),
        kernel=kernel, stride=stride, padding=pads, dilation=dil, groups=groups,
    )  # fmt: skip
    ref = lambda a, b: reference(a, b, kernel, stride, pads, dil, groups)  # noqa: E731
    want = ref(g.real, x.real) - ref(g.imag, x.imag) + 1j * (ref(g.real, x.imag) + ref(g.imag, x.real))
    np.testing.assert_array_equal(rt.read([out])[0], want if dtype == "complex64" else want.real.astype(np.int64))
    assert wgrad.CALLS["unfold"] == before + 1


def test_strided_gradient_view_and_determinism(rt):
    """A gradient whose positions are not one run (a transposed view) is copied first, a channels-last
    input is read through its strides; reruns are bitwise equal."""
    from ember_wgpu.kernels import wgrad

    xs, cout, kernel, stride, pads, dil, groups = CASES[1]
    blocks = _blocks(xs[2:], kernel, stride, pads, dil)
    x = RNG.standard_normal(xs).astype(np.float32)
    g = RNG.standard_normal((xs[0], cout) + blocks).astype(np.float32)
    gt = rt.upload(np.ascontiguousarray(g.transpose(0, 1, 3, 2)), D.float32)
    gv = gt.with_layout(g.shape, (gt.strides[0], gt.strides[1], 1, blocks[0]), 0)
    xl = rt.upload(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), D.float32)  # (N, H, W, C) in memory
    xu = xl.with_layout(x.shape, (xl.strides[0], 1, xl.strides[1], xl.strides[2]), 0)
    runs = [rt.read([wgrad.conv_weight_grad(rt, gv, xu, kernel, stride, pads, dil, groups, slices=5)])[0] for _ in "ab"]
    np.testing.assert_allclose(runs[0], reference(g, x, kernel, stride, pads, dil, groups), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(runs[0], runs[1])


def test_backend_method_and_gating(dev, rt, monkeypatch):
    """The registered method runs the native GEMM; EMBER_WGPU_NATIVE_WGRAD=0 or
    EMBER_WGPU_IMPLICIT_CONV=0 leaves the op to core's composite."""
    from ember_wgpu.kernels import wgrad

    xs, cout, kernel, stride, pads, dil, groups = CASES[2]
    blocks = _blocks(xs[2:], kernel, stride, pads, dil)
    x = RNG.standard_normal(xs).astype(np.float32)
    g = RNG.standard_normal((xs[0], cout) + blocks).astype(np.float32)
    before = wgrad.CALLS["gemm"]
    got = dev.backend.conv_weight_grad(
        rt.upload(g, D.float32), rt.upload(x, D.float32),
        kernel=kernel, stride=stride, padding=pads, dilation=dil, groups=groups,
    )  # fmt: skip
    np.testing.assert_allclose(
        rt.read([got])[0], reference(g, x, kernel, stride, pads, dil, groups), rtol=1e-4, atol=1e-4
    )
    assert wgrad.CALLS["gemm"] == before + 1
    assert wgrad.native_wins(rt) and "conv_weight_grad" in dev.backend.native_kernels()
    monkeypatch.setenv("EMBER_WGPU_IMPLICIT_CONV", "0")
    assert not wgrad.native_wins(rt) and "conv_weight_grad" not in dev.backend.native_kernels()
    monkeypatch.setenv("EMBER_WGPU_IMPLICIT_CONV", "1")
    monkeypatch.setenv("EMBER_WGPU_NATIVE_WGRAD", "0")
    assert not wgrad.native_wins(rt) and "conv_weight_grad" not in dev.backend.native_kernels()


_AUTODIFF = """
import numpy as np, ember as em
from ember_wgpu.kernels import wgrad
dev = em.Device("wgpu:0").autodiff()
rng = np.random.default_rng(3)
x, w = rng.standard_normal((3, 2, 6, 5)).astype(np.float32), rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
wt = em.tensor(w, device=dev, requires_grad=True)
y = em.conv(em.tensor(x, device=dev), wt, padding=1)
g = rng.standard_normal(y.shape).astype(np.float32)
(y * em.tensor(g, device=dev)).sum().backward()
np.save({path!r}, np.stack([wt.grad.numpy().ravel(), np.asarray([wgrad.CALLS["gemm"]] * w.size, np.float32)]))
np.save({path!r}.replace(".npy", "_in.npy"), np.concatenate([x.ravel(), g.ravel()]))
"""


@pytest.mark.parametrize("native", ["1", "0"])
def test_autodiff_through_a_device_opened_with_the_kernels_forced(tmp_path, native):
    """conv's weight gradient through ember's autodiff, in a fresh process (the device's op table is
    made when it opens): native, or core's composite under EMBER_WGPU_NATIVE_WGRAD=0."""
    import os
    import subprocess
    import sys

    path = str(tmp_path / "out.npy")
    env = dict(os.environ, EMBER_WGPU_NATIVE_WGRAD=native)
    subprocess.run([sys.executable, "-c", _AUTODIFF.format(path=path)], env=env, check=True, timeout=300)
    got, calls = np.load(path)
    both = np.load(path.replace(".npy", "_in.npy"))
    x, g = both[: 3 * 2 * 6 * 5].reshape(3, 2, 6, 5), both[3 * 2 * 6 * 5 :].reshape(3, 4, 6, 5)
    want = reference(g, x, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
    assert calls[0] == (1 if native == "1" else 0)


def test_a_cpu_adapter_cuts_k_into_fewer_slices(rt, monkeypatch):
    # W3's second conv at batch 64: 1,024 workgroups would be 49 slices (3.4 MiB of partials, that step's
    # peak in use on lavapipe); a CPU adapter's few threads are kept busy by 64 workgroups
    from ember_wgpu.kernels import matmul, wgrad

    xs, cout, kernel, stride, pads, dil, groups = (64, 32, 14, 14), 64, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1
    x = RNG.standard_normal(xs).astype(np.float32)
    g = RNG.standard_normal((xs[0], cout) + _blocks(xs[2:], kernel, stride, pads, dil)).astype(np.float32)
    want = reference(g, x, kernel, stride, pads, dil, groups)
    gd, xd = rt.upload(g, D.float32), rt.upload(x, D.float32)
    extra = {}
    for on_gpu in (True, False):
        monkeypatch.setattr(matmul, "_on_gpu", lambda rt, on_gpu=on_gpu: on_gpu)
        rt.plans.clear()
        rt.pool.reset_peaks()
        base = rt.pool.in_use
        got = wgrad.conv_weight_grad(rt, gd, xd, kernel, stride, pads, dil, groups)
        extra[on_gpu] = rt.pool.peak_in_use - base  # the weight gradient and the partials
        np.testing.assert_allclose(rt.read([got])[0], want, rtol=1e-3, atol=1e-3)
        del got
    rt.plans.clear()
    weights = cout * xs[1] * 9 * 4
    assert extra[True] > 32 * weights  # a GPU's slices: partials dozens of times the weights' size
    assert extra[False] < 24 * weights

"""Launch plans kept per geometry (matmul, conv): a repeat of a geometry reuses its plan, any change
of shape, strides, offset or tuned choice makes a new one, and results match numpy float64."""

from __future__ import annotations

import numpy as np
import pytest

from ember import dtypes as D
from ember_wgpu import tune
from ember_wgpu.kernels import matmul

RNG = np.random.default_rng(11)


@pytest.fixture(autouse=True)
def _no_autotune(monkeypatch):
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")


@pytest.fixture
def dispatched(rt, monkeypatch):
    """(kernel name, workgroup grid) of every dispatch the runtime records from here on."""
    seen = []
    real = rt.dispatch

    def dispatch(pipe, params, buffers, groups, name=""):
        seen.append((name, tuple(groups)))
        return real(pipe, params, buffers, groups, name)

    monkeypatch.setattr(rt, "dispatch", dispatch)
    return seen


def _plans(rt, kind):
    return {k for k in rt.plans if k[0] == kind}


def test_matmul_plans_follow_the_operands_geometry(rt):
    a = RNG.standard_normal((2, 20, 12)).astype(np.float32)
    b = RNG.standard_normal((12, 16)).astype(np.float32)
    big = RNG.standard_normal((24, 16)).astype(np.float32)
    A, B = rt.upload(a, D.float32), rt.upload(b, D.float32)
    before = _plans(rt, "matmul")
    first = matmul.matmul(rt, A, B)
    again = matmul.matmul(rt, A, B)  # the same geometry: the same plan
    made = _plans(rt, "matmul") - before
    assert len(made) == 1
    Bt = rt.upload(np.ascontiguousarray(b.T), D.float32).permute((1, 0))  # other strides
    Bs = rt.upload(big, D.float32).slice((12, 0), (24, 16), (1, 1))  # an offset view of the same shape
    cases = [(first, b), (again, b), (matmul.matmul(rt, A, Bt), b), (matmul.matmul(rt, A, Bs), big[12:])]
    assert len(_plans(rt, "matmul") - before) == 3
    got = rt.read([c for c, _ in cases])
    for g, (_, rhs) in zip(got, cases):
        np.testing.assert_allclose(g, a.astype(np.float64) @ rhs.astype(np.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "shape, axes, folds",
    [
        ((3, 4, 9, 12), (0, 1, 2, 3), True),  # contiguous batches of rows: one (108, 12) product
        ((3, 12, 9), (0, 2, 1), False),  # each matrix transposed: its rows do not step to the next batch
        ((9, 3, 12), (1, 0, 2), False),  # batches interleaved with the rows
    ],
)
def test_shared_b_batch_folds_into_rows(rt, dispatched, shape, axes, folds):
    """(..., M, K) @ (K, N) with A's batches continuing its rows runs as one (batch * M, K) GEMM
    (one dispatch, no batch in its grid); other layouts keep the batch. Against numpy float64."""
    base = RNG.standard_normal(shape).astype(np.float32)
    b = RNG.standard_normal((12, 10)).astype(np.float32)
    A = rt.upload(base, D.float32).permute(axes)
    got = rt.read([matmul.matmul(rt, A, rt.upload(b, D.float32))])[0]
    want = np.transpose(base, axes).astype(np.float64) @ b
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    (name, groups), *rest = [g for g in dispatched if g[0] == "matmul"]
    assert not rest
    batch = int(np.prod(want.shape[:-2]))
    assert groups[2] == (1 if folds else batch), f"grid {groups} for a batch of {batch}"


@pytest.mark.parametrize("gpu", [False, True])
@pytest.mark.parametrize("layout", ["cc", "tc", "ct"])
def test_a_deep_gemm_of_few_tiles_is_split_along_k(rt, dispatched, monkeypatch, gpu, layout):
    """On a GPU adapter, a 2-D GEMM of few output tiles and a deep K (W3's (512, 3136) @ (3136, 128))
    runs as a batch of products over K's slices and their sum; on a CPU adapter it does not.
    Operands plain or transposed, against numpy float64, twice (the second from the plan)."""
    monkeypatch.setattr(matmul, "_on_gpu", lambda rt: gpu)
    monkeypatch.setattr(rt, "plans", {})  # (this test's plans are its own: the geometry splits or not)
    m, k, n = 40, 1024, 30
    for _ in range(2):
        a32, b32 = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
        A = (
            rt.upload(np.ascontiguousarray(a32.T), D.float32).permute((1, 0))
            if layout[0] == "t"
            else rt.upload(a32, D.float32)
        )
        B = (
            rt.upload(np.ascontiguousarray(b32.T), D.float32).permute((1, 0))
            if layout[1] == "t"
            else rt.upload(b32, D.float32)
        )
        dispatched.clear()
        got = rt.read([matmul.matmul(rt, A, B)])[0]
        grids = list(dispatched)
        np.testing.assert_allclose(got, a32.astype(np.float64) @ b32.astype(np.float64), rtol=1e-4, atol=1e-3)
        products = [g for name, g in grids if name == "matmul"]
        assert len(products) == 1
        slices = matmul._slices(rt, A, B, None)
        if gpu:
            assert slices == 8, "1 tile of 64 x 64: 1024 deep makes 8 slices of 128"
            assert products[0][2] == slices and len(grids) >= 2, f"dispatches {grids}: a batch of slices, then the sum"
        else:
            assert slices == 0 and products[0][2] == 1


def test_split_k_partials_take_no_more_than_the_larger_operand(rt, dispatched, monkeypatch):
    """(256, 512) @ (512, 256) makes 16 tiles of 64 x 64, which alone would run as 4 slices of 128: four
    partials of 256 x 256 are twice either operand, a peak in use of the product's own that kept a step
    plan from fitting its headroom (an MLP on the H100 made four driver buffers a step). Two slices; the
    result against numpy float64."""
    monkeypatch.setattr(matmul, "_on_gpu", lambda rt: True)
    monkeypatch.setattr(rt, "plans", {})
    m, k, n = 256, 512, 256
    a32, b32 = RNG.standard_normal((m, k)).astype(np.float32), RNG.standard_normal((k, n)).astype(np.float32)
    A, B = rt.upload(a32, D.float32), rt.upload(b32, D.float32)
    if matmul._pick(rt, m, n).bm != 64 or matmul._pick(rt, m, n).bn != 64:
        pytest.skip("this adapter's tuned tiling for the product is not 64 x 64 (the slice counts assume it)")
    slices = matmul._slices(rt, A, B, None)
    assert slices == 2 and slices * m * n <= max(m * k, k * n)
    got = rt.read([matmul.matmul(rt, A, B)])[0]
    np.testing.assert_allclose(got, a32.astype(np.float64) @ b32.astype(np.float64), rtol=1e-4, atol=1e-3)
    products = [g for name, g in dispatched if name == "matmul"]
    assert len(products) == 1 and products[0][2] == 2, f"dispatches {dispatched}: a batch of two slices"


@pytest.mark.parametrize("gpu", [False, True])
def test_an_operand_repeating_one_element_is_copied_dense(rt, dispatched, monkeypatch, gpu):
    """A matrix axis of stride 0 (``sum()``'s gradient: ones expanded) is made dense before a GPU
    adapter's GEMM (a copy dispatch first); the product against numpy float64 either way."""
    monkeypatch.setattr(matmul, "_on_gpu", lambda rt: gpu)
    ones = rt.upload(np.ones(4, np.float32), D.float32).with_layout((3, 40, 50), (0, 0, 0), 0)
    w32 = RNG.standard_normal((50, 30)).astype(np.float32)
    got = rt.read([matmul.matmul(rt, ones, rt.upload(w32, D.float32))])[0]
    np.testing.assert_allclose(got, np.broadcast_to(w32.astype(np.float64).sum(0), (3, 40, 30)), rtol=1e-4, atol=1e-4)
    names = [n for n, _ in dispatched]
    assert names.index("matmul") == (1 if gpu else 0), f"dispatches {names}"


def test_a_new_tuned_choice_drops_the_plans(rt, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    tune.forget(rt)
    a = RNG.standard_normal((40, 48)).astype(np.float32)
    b = RNG.standard_normal((48, 72)).astype(np.float32)
    A, B = rt.upload(a, D.float32), rt.upload(b, D.float32)
    matmul.matmul(rt, A, B)
    assert _plans(rt, "matmul")
    choice = matmul.Config(32, 32, 16, 4, 4, True)
    tune.record(rt, "float32", tune.shape_class(40, 72, 48), choice)
    assert not _plans(rt, "matmul")
    rt.kernels = {k: v for k, v in rt.kernels.items() if not (k[0] == "matmul" and choice in k)}
    got = rt.read([matmul.matmul(rt, A, B)])[0]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert any(k[0] == "matmul" and choice in k for k in rt.kernels), "the new choice did not run"
    tune.forget(rt)
    assert not _plans(rt, "matmul")


def _conv_ref(x, w, b, stride, pad):
    """Direct 2-D convolution in float64 (groups 1)."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, wd = x.shape
    co, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w.astype(np.float64))
    return out + b.astype(np.float64)[None, :, None, None]


def test_conv_plans_follow_the_operands_geometry(rt):
    from ember_wgpu.kernels import conv

    x = RNG.standard_normal((2, 3, 9, 9)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    X, W, B = rt.upload(x, D.float32), rt.upload(w, D.float32), rt.upload(b, D.float32)
    wide = rt.upload(np.concatenate([x, x[:, :1]], axis=1), D.float32)
    Xs = wide.slice((0, 1, 0, 0), (2, 4, 9, 9), (1, 1, 1, 1))  # channels 1..3: an offset, other strides
    xs = np.concatenate([x, x[:, :1]], axis=1)[:, 1:]
    args = ((2, 2), ((1, 1), (1, 1)), (1, 1), 1)
    before = _plans(rt, "conv")
    outs = [conv.conv(rt, X, W, B, *args), conv.conv(rt, X, W, B, *args)]
    assert len(_plans(rt, "conv") - before) == 1  # the repeat took the first call's plan
    outs.append(conv.conv(rt, Xs, W, B, *args))
    assert len(_plans(rt, "conv") - before) == 2
    got = rt.read(outs)
    for g, xin in zip(got, (x, x, xs)):
        np.testing.assert_allclose(g, _conv_ref(xin, w, b, 2, 1), rtol=1e-4, atol=1e-4)


def test_reduction_plans_follow_the_input_geometry(rt):
    from ember_wgpu.kernels import reduce

    x = RNG.standard_normal((6, 5, 8)).astype(np.float32)
    X = rt.upload(x, D.float32)
    Xt = X.permute((2, 1, 0))  # strided: copied contiguous first, then the same kernel
    before = _plans(rt, "reduce")
    cases = [
        (reduce.reduce(rt, X, "sum", (0,), False), x.astype(np.float64).sum(0)),
        (reduce.reduce(rt, X, "sum", (0,), False), x.astype(np.float64).sum(0)),
        (reduce.reduce(rt, X, "max", (2,), True), x.astype(np.float64).max(2, keepdims=True)),
        (reduce.reduce(rt, Xt, "mean", (0,), False), x.transpose(2, 1, 0).astype(np.float64).mean(0)),
        (reduce.reduce(rt, Xt, "mean", (0,), False), x.transpose(2, 1, 0).astype(np.float64).mean(0)),
    ]
    assert len(_plans(rt, "reduce") - before) == 3  # the repeats took their first call's plan
    reduce.reduce(rt, X, "sum", (0, 2), False)  # float32 axes apart: block by block, each block planned
    assert len(_plans(rt, "reduce") - before) == 5
    Xi = rt.upload(x.astype(np.int32), D.int32)
    reduce.reduce(rt, Xi, "sum", (0, 2), False)  # other dtypes: permuted into a copy, not planned
    assert len(_plans(rt, "reduce") - before) == 5
    got = rt.read([c for c, _ in cases])
    for g, (_, want) in zip(got, cases):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_fused_reduction_plans_take_new_scalars_each_launch(rt):
    """One plan per geometry; the scalar input is packed per launch (two values, one plan)."""
    from ember_conformance.fused_reduce_checks import chain, chain_values, operands
    from ember_wgpu.kernels import fused_reduce

    prog = chain("float32", "sum", (1,), full=True)
    x, a = operands((12, 40))
    X, A = rt.upload(x, D.float32), rt.upload(a, D.float32)
    before, rows = _plans(rt, "fused_reduce"), fused_reduce.COUNTS["row"]
    runs = [(s, fused_reduce.run_reduce(rt, prog, [X, A, s], (12, 40))) for s in (0.5, -1.5, 0.5)]
    assert len(_plans(rt, "fused_reduce") - before) == 1
    assert fused_reduce.COUNTS["row"] == rows + 3  # the row kernel ran each time
    got = rt.read([t for _, (y, v) in runs for t in (y, v)])
    for k, (s, _) in enumerate(runs):
        y, v = chain_values(x, a, s)
        np.testing.assert_allclose(got[2 * k], y, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[2 * k + 1], v.sum(1), rtol=1e-4, atol=1e-4)

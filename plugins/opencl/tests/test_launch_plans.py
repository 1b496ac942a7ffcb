"""Launch plans: a matmul, reduction, norm, conv or pooling of a geometry seen before reuses its
first call's kernel, sizes and arguments (no layout analysis, tuning or kernel lookup), with the new
buffers in place; a recorded tuning choice retires the plans made before it. Results against numpy
float64 on fresh data at every call."""

from __future__ import annotations

import conv_reference as ref
import numpy as np
import pytest

import ember as em
from ember.tuning import shape_class
from ember_opencl import conv, matmul, nn, reduce, tune, window
from ember_opencl.gemm_source import Tiling
from ember_opencl.matmul import TILINGS

RNG = np.random.default_rng(5)


def _up(rt, arr):
    return rt.upload(np.ascontiguousarray(arr), em.dtypes.as_dtype(arr.dtype))


@pytest.fixture(params=["cpu", "gpu"])
def rt(dev, request, monkeypatch):
    """The device's runtime as it is, and told it is a GPU (tiled GEMMs, work-group reductions) with
    the small test tiling for every untuned GEMM (PoCL builds it in seconds, not the GPU tilings' 10-30 s)."""
    rt = dev.backend.rt
    rt.download(_up(rt, np.zeros(1, np.float32)))  # (past the process's first read-back: see matmul's generic GEMM)
    if request.param == "gpu":
        monkeypatch.setattr(rt, "is_cpu", False)
        monkeypatch.setattr(rt, "compute_units", 4)
        monkeypatch.setattr(matmul, "_pick", lambda rt, M, N: TILINGS["odd"])
    for module in (matmul, reduce, window):  # (this test's plans are its own)
        monkeypatch.setattr(module, "_PLANS", {})
    monkeypatch.setattr(nn, "_NORMS", {})
    return rt


@pytest.fixture
def counted(rt, monkeypatch):
    """How many kernel lookups the runtime served (a planned launch makes none)."""
    calls = [0]
    real = rt.kernel

    def kernel(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(rt, "kernel", kernel)
    return calls


@pytest.fixture
def launched(rt, monkeypatch):
    """(kernel name, global size) of every kernel the runtime launches from here on."""
    seen = []
    real = rt.launch

    def launch(knl, gsize, lsize, args):
        seen.append((knl.function_name, tuple(gsize)))
        return real(knl, gsize, lsize, args)

    monkeypatch.setattr(rt, "launch", launch)
    return seen


def _view(rt, base, shape, strides, offset=0):
    return _up(rt, np.ascontiguousarray(base).reshape(-1)).with_layout(tuple(shape), tuple(strides), offset)


MATMULS = [  # (a shape, a strides, a offset), (b shape, b strides, b offset) over flat uploads of enough elements
    (((37, 21), (21, 1), 0), ((21, 30), (30, 1), 0)),  # plain
    (((37, 21), (21, 1), 0), ((21, 30), (1, 21), 0)),  # B transposed (the CPU kernel copies it first)
    (((2, 1, 9, 13), (117, 117, 13, 1), 5), ((3, 13, 17), (221, 17, 1), 3)),  # broadcast batch, offsets
]


@pytest.mark.parametrize("ga, gb", MATMULS)
def test_matmul_plan_is_reused(rt, counted, ga, gb):
    for step in range(3):
        fa, fb = (RNG.standard_normal(2000).astype(np.float32) for _ in range(2))
        (sa, ta, oa), (sb, tb, ob) = ga, gb
        a, b = _view(rt, fa, sa, ta, oa), _view(rt, fb, sb, tb, ob)
        want = np.lib.stride_tricks.as_strided(fa[oa:], sa, [4 * s for s in ta]).astype(np.float64)
        want = want @ np.lib.stride_tricks.as_strided(fb[ob:], sb, [4 * s for s in tb]).astype(np.float64)
        before = counted[0]
        got = rt.download(matmul.matmul(rt, a, b))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        if step:  # the first call planned it (and the CPU's copy of a transposed B): later ones look nothing up
            assert counted[0] == before, "a planned matmul looked its kernel up again"


@pytest.mark.parametrize(
    "sa, ta, folds",
    [
        ((3, 4, 9, 13), (468, 117, 13, 1), True),  # contiguous batches of rows: one (108, 13) product
        ((3, 9, 13), (117, 1, 9), False),  # each matrix column-major: its rows do not step to the next batch
        ((3, 9, 13), (13, 39, 1), False),  # batches interleaved with the rows (a permuted view)
    ],
)
def test_shared_b_batch_folds_into_rows(rt, launched, sa, ta, folds):
    """(..., M, K) @ (K, N) with A's batches continuing its rows runs as one (batch * M, K) product:
    one launch whose grid has no batch axis; other layouts keep the batch. Against numpy float64."""
    fa, fb = RNG.standard_normal(2000).astype(np.float32), RNG.standard_normal((13, 11)).astype(np.float32)
    a, b = _view(rt, fa, sa, ta), _up(rt, fb)
    want = np.lib.stride_tricks.as_strided(fa, sa, [4 * s for s in ta]).astype(np.float64) @ fb
    got = rt.download(matmul.matmul(rt, a, b))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert len(launched) == 1
    batch = int(np.prod(sa[:-2]))
    assert launched[0][1][2] == (1 if folds else batch), f"launch {launched[0]} for a batch of {batch}"


@pytest.mark.parametrize("layout", ["cc", "tc", "ct"])
def test_a_deep_gemm_of_few_tiles_is_split_along_k(rt, launched, monkeypatch, layout):
    """On a GPU, a 2-D GEMM whose output is few tiles for the compute units (W3's (512, 3136) @
    (3136, 128)) runs as a batch of products over K's slices and their sum; a CPU device does not.
    Operands plain or transposed, against numpy float64, twice (the second from the plan)."""
    monkeypatch.setattr(rt, "compute_units", 64)
    M, K, N = 40, 1024, 30
    for _ in range(2):
        a64, b64 = RNG.standard_normal((M, K)), RNG.standard_normal((K, N))
        a = _up(rt, a64.T.astype(np.float32)).permute((1, 0)) if layout[0] == "t" else _up(rt, a64.astype(np.float32))
        b = _up(rt, b64.T.astype(np.float32)).permute((1, 0)) if layout[1] == "t" else _up(rt, b64.astype(np.float32))
        launched.clear()
        got = rt.download(matmul.matmul(rt, a, b))
        grids = [g for _, g in launched]
        want = a64.astype(np.float32).astype(np.float64) @ b64.astype(np.float32).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
        slices = matmul._slices(rt, "float32", M, N, K)
        if rt.is_cpu:
            assert slices == 0 and all(len(g) < 3 or g[2] == 1 for g in grids), f"launches {grids}"
        else:
            assert slices == 8, "2 tiles of 32 x 64 for 64 compute units: 8 slices of 128"
            assert grids[0][2] == slices and len(grids) >= 2, f"launches {grids}: a batch of slices, then the sum"


def test_an_operand_repeating_one_element_is_copied_dense(rt, launched):
    """A matrix axis of stride 0 (``sum()``'s gradient: ones expanded) is made dense before a GPU's
    tiled GEMM (a copy launch first); the product against numpy float64 either way."""
    ones = _up(rt, np.ones(1, np.float32)).with_layout((3, 40, 50), (0, 0, 0), 0)
    w32 = RNG.standard_normal((50, 30)).astype(np.float32)
    w = _up(rt, w32)
    assert matmul._repeats(ones) and not matmul._repeats(w)
    got = rt.download(matmul.matmul(rt, ones, w))
    names = [n for n, _ in launched]
    gemm = [i for i, n in enumerate(names) if "matmul" in n]
    assert len(gemm) == 1 and gemm[0] == (0 if rt.is_cpu else 1), f"launches {names}"
    np.testing.assert_allclose(got, np.broadcast_to(w32.astype(np.float64).sum(0), (3, 40, 30)), rtol=1e-4, atol=1e-4)


def test_recorded_tiling_retires_plans(dev, rt, tmp_path, monkeypatch):
    if rt.is_cpu:
        pytest.skip("a CPU device runs the vector kernel, not a tuned tiling")
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    tune.forget(rt)
    a32 = RNG.standard_normal((40, 50)).astype(np.float32)
    b32 = RNG.standard_normal((50, 70)).astype(np.float32)
    a, b = _up(rt, a32), _up(rt, b32)
    want = a32.astype(np.float64) @ b32
    np.testing.assert_allclose(rt.download(matmul.matmul(rt, a, b)), want, rtol=1e-4, atol=1e-4)
    choice = Tiling(32, 32, 8, 2, 4, vw=2, chunk=1, db=True)
    tune.record(rt, "float32", shape_class(40, 70, 50), choice)
    try:
        np.testing.assert_allclose(rt.download(matmul.matmul(rt, a, b)), want, rtol=1e-4, atol=1e-4)
        epoch = matmul._TUNING[0]
        (plan,) = [p for k, p in matmul._PLANS.items() if k[0] is rt and k[2] == (40, 50) and k[-1] == epoch]
        chosen = [knl for k, (knl, _) in rt._kernels.items() if k[:3] == ("matmul", "float32", choice)]
        assert plan.knl in chosen, "the product after the choice was recorded did not run it"
    finally:
        tune.forget(rt)


@pytest.mark.parametrize(
    "op, shape, axes, keepdims",
    [
        ("sum", (3, 700), (1,), False),  # a work-group per row (or per chunk and a second pass)
        ("argmax", (2, 5000), (1,), True),  # two passes with value and index temporaries on a GPU
        ("max", (64, 33), (0,), False),  # a leading axis: one item per row
        ("sum", (4, 6, 50), (0, 2), True),
    ],
)
def test_reduction_plan_is_reused(rt, counted, op, shape, axes, keepdims):
    for step in range(3):
        x = RNG.standard_normal(shape).astype(np.float32)
        before = counted[0]
        got = rt.download(reduce.reduce(rt, op, _up(rt, x), axes, keepdims))
        if op == "argmax":
            want = np.argmax(x, axis=axes[0], keepdims=keepdims)
            np.testing.assert_array_equal(got, want)
        else:
            want = getattr(np, op)(x.astype(np.float64), axis=axes, keepdims=keepdims)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert got.shape == want.shape
        if step:
            assert counted[0] == before, "a planned reduction looked its kernel up again"


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_norm_plan_is_reused(dev, rt, counted, layout):
    """layer_norm and its input gradient through dispatch, on a pool that gives a dead block back to
    the driver at once: rows read at a stride are copied first, and the copies must outlive the launch."""
    ad = em.Device(dev, memory="exclusive").autodiff()
    rows, n, eps = 3, 40, 1e-5
    for step in range(3):
        xs, ws, bs, gs = (RNG.standard_normal(s) for s in ((rows, n), (n,), (n,), (rows, n)))
        stored = xs.T if layout == "transposed" else xs
        leaf = em.tensor(stored.astype(np.float32), device=ad, requires_grad=True)
        x = leaf.permute((1, 0)) if layout == "transposed" else leaf
        w, b, g = (em.tensor(a.astype(np.float32), device=ad) for a in (ws, bs, gs))
        before = counted[0]
        y = em.layer_norm(x, (n,), w, b, eps)
        (y * g).sum().backward()
        mu = xs.mean(axis=1, keepdims=True)
        r = 1 / np.sqrt(xs.var(axis=1, keepdims=True) + eps)
        xhat = (xs - mu) * r
        np.testing.assert_allclose(y.numpy(), xhat * ws + bs, rtol=1e-4, atol=1e-4)
        gw = gs * ws
        gx = r * (gw - gw.mean(axis=1, keepdims=True) - xhat * (gw * xhat).mean(axis=1, keepdims=True))
        got = leaf.grad.numpy()
        np.testing.assert_allclose(got.T if layout == "transposed" else got, gx, rtol=1e-4, atol=1e-4)
        if step:
            assert counted[0] == before, "a planned norm looked its kernel up again"


def _wgrad_ref(g, x, kernel, stride, pads, dil, groups):
    """numpy float64: dw[o, c, tap] = sum over n, q of g[n, o, q] * padded x[n, group's c, q * stride + tap * dil]."""
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + list(pads))
    n, cout = g.shape[:2]
    cg, og = x.shape[1] // groups, cout // groups
    out = np.zeros((cout, cg, *kernel))
    for tap in np.ndindex(*kernel):
        patch = xp[(slice(None), slice(None)) + ref._slices(tap, dil, stride, g.shape[2:])]
        for q in range(groups):
            gq = g[:, q * og : (q + 1) * og].astype(np.float64).reshape(n, og, -1)
            pq = patch[:, q * cg : (q + 1) * cg].reshape(n, cg, -1)
            out[(slice(q * og, (q + 1) * og), slice(None)) + tap] = np.einsum("noq,ncq->oc", gq, pq)
    return out


def test_conv_plans_are_reused(rt, counted, monkeypatch):
    """conv (bias, groups, stride, dilation, uneven padding; x through a transposed view; 8 channels per
    group: tap-major rows, so the weight is copied at each call), its input gradient (the weight's
    transposed view copied at each call), its weight gradient (g through a transposed view, copied;
    two rounds of partials, 2 images and 1), max pooling and its gradient, unfold and fold: from the second call on,
    no kernel lookup, and every result matches numpy float64 on that call's fresh data."""
    monkeypatch.setattr(conv, "_conv_tiling", lambda rt, dt, M, N, K: TILINGS["odd"])  # (PoCL builds it fast)
    monkeypatch.setattr(conv, "PARTIALS_FLOOR", 0)
    stride, pads, dil, groups = (2, 1), ((1, 2), (0, 1)), (1, 2), 2
    pool = ((2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1))
    ran = dict(window.CALLS)
    for step in range(3):
        x = RNG.standard_normal((3, 16, 9, 8)).astype(np.float32)
        w = RNG.standard_normal((44, 8, 3, 2)).astype(np.float32)
        bias = RNG.standard_normal(44).astype(np.float32)
        xt = _up(rt, np.swapaxes(x, 0, 1).copy()).permute((1, 0, 2, 3))
        before = counted[0]
        y = conv.conv(rt, xt, _up(rt, w), _up(rt, bias), stride, pads, dil, groups)
        want = ref.conv(x, w, bias, stride, pads, dil, groups)
        np.testing.assert_allclose(rt.download(y), want, rtol=1e-4, atol=1e-4)
        g = RNG.standard_normal(want.shape).astype(np.float32)
        gt = _up(rt, np.swapaxes(g, 0, 1).copy()).permute((1, 0, 2, 3))
        gx = conv.conv_transpose(rt, gt, _up(rt, w), None, x.shape[2:], stride, pads, dil, groups)
        np.testing.assert_allclose(rt.download(gx), ref.conv_transpose(g, w, x.shape[2:], stride, pads, dil, groups),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
        gw = conv.conv_weight_grad(rt, gt, xt, (3, 2), stride, pads, dil, groups)
        np.testing.assert_allclose(rt.download(gw), _wgrad_ref(g, x, (3, 2), stride, pads, dil, groups),
                                   rtol=1e-4, atol=1e-4)  # fmt: skip
        p = window.max_pool(rt, xt, *pool)
        want_p = x[:, :, :8].reshape(3, 16, 4, 2, 4, 2).max(axis=(3, 5))
        np.testing.assert_array_equal(rt.download(p), want_p)
        gp = RNG.standard_normal(want_p.shape).astype(np.float32)
        got = rt.download(window.max_pool_backward(rt, _up(rt, gp), xt, *pool))
        win = x[:, :, :8].reshape(3, 16, 4, 2, 4, 2).transpose(0, 1, 2, 4, 3, 5).reshape(3, 16, 4, 4, 4)
        first = np.eye(4)[win.argmax(axis=-1)] * gp[..., None]  # (no ties in normal draws)
        want_g = np.zeros(x.shape)
        want_g[:, :, :8] = first.reshape(3, 16, 4, 4, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(3, 16, 8, 8)
        np.testing.assert_allclose(got, want_g, rtol=0, atol=0)
        cols = window.unfold(rt, xt, (3, 2), stride, pads, dil, 0.0)
        xp = np.pad(x, [(0, 0), (0, 0), *pads])
        taps = [(slice(None), slice(None)) + ref._slices(t, dil, stride, want.shape[2:]) for t in np.ndindex(3, 2)]
        want_c = np.stack([xp[at] for at in taps], axis=2)
        np.testing.assert_array_equal(rt.download(cols), want_c.reshape(3, 16 * 6, -1))
        back = window.fold(rt, cols, x.shape[2:], (3, 2), stride, pads, dil)
        want_f = np.zeros(xp.shape)
        for i, at in enumerate(taps):
            want_f[at] += want_c[:, :, i]
        np.testing.assert_allclose(rt.download(back), want_f[:, :, 1:10, 0:8], rtol=1e-5, atol=1e-5)
        if step:
            assert counted[0] == before, "a planned conv or pooling looked its kernel up again"
    kinds = ("conv_igemm", "transpose_igemm", "wgrad_igemm", "max_pool", "max_pool_backward_tiled", "unfold", "fold")
    assert {k: window.CALLS[k] - ran.get(k, 0) for k in kinds} == {k: 6 if k == "wgrad_igemm" else 3 for k in kinds}

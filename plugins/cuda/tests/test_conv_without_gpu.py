"""ember-cuda's convolution and max-pool kernels (``conv.py``) checked without a GPU: the Python side
and the CUDA source itself, compiled by g++ and run on the CPU behind a stand-in CuPy
(``conv_on_cpu.py``: NaN-filled outputs, guarded buffers, cuBLAS's layouts checked), against direct
numpy float64 loops over the windows, for every layout ``conv.OPTIONS`` selects: odd sizes,
asymmetric padding, strides, dilation, 1x1 / 3x3 / 5x5 kernels, tiled and overlapping pools, ties,
NaN and -inf. ``test_cuda_conv.py`` runs the same kernels on a GPU."""

from __future__ import annotations

import conv_on_cpu
import numpy as np
import pytest
from ember_cuda import conv, igemm

pytestmark = pytest.mark.skipif(not conv_on_cpu.available(), reason="g++ is not installed")


def _fallback(name: str):  # noqa: ANN202
    def refuse(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError(f"{name} went to the shared kernels")

    return refuse


@pytest.fixture
def fake() -> conv_on_cpu.FakeCupy:
    return conv_on_cpu.FakeCupy(sms=1)  # 32 blocks of 256: the larger cases loop over the grid


NAMES = ("conv", "conv_weight_grad", "conv_transpose", "max_pool", "max_pool_backward")


def _kernels(fake: conv_on_cpu.FakeCupy, **fallback) -> dict:  # noqa: ANN003
    return conv.conv_kernels(fake, {"matmul": fake.matmul, **{n: _fallback(n) for n in NAMES}, **fallback})


def _g(geo: dict) -> dict:
    return {k: geo[k] for k in ("stride", "padding", "dilation")}


# -- numpy float64 references: a loop over the kernel's taps, each tap a strided slice -------------


def _tap(k: int, d: int, s: int, n: int) -> slice:
    return slice(k * d, k * d + s * (n - 1) + 1, s)


def _out_size(size: int, k: int, s: int, pad: tuple[int, int], d: int) -> int:
    return (size + pad[0] + pad[1] - d * (k - 1) - 1) // s + 1


def ref_conv(x, w, b, stride, padding, dilation):  # noqa: ANN001, ANN201
    x, w = x.astype(np.float64), w.astype(np.float64)
    xp = np.pad(x, ((0, 0), (0, 0), *padding))
    oh, ow = (_out_size(x.shape[2 + i], w.shape[2 + i], stride[i], padding[i], dilation[i]) for i in (0, 1))
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for kh in range(w.shape[2]):
        for kw in range(w.shape[3]):
            patch = xp[:, :, _tap(kh, dilation[0], stride[0], oh), _tap(kw, dilation[1], stride[1], ow)]
            y += np.einsum("nchw,oc->nohw", patch, w[:, :, kh, kw])
    return y if b is None else y + b.astype(np.float64)[None, :, None, None]


def ref_weight_grad(g, x, kernel, stride, padding, dilation):  # noqa: ANN001, ANN201
    g, xp = g.astype(np.float64), np.pad(x.astype(np.float64), ((0, 0), (0, 0), *padding))
    oh, ow = g.shape[2:]
    dw = np.zeros((g.shape[1], x.shape[1], *kernel))
    for kh in range(kernel[0]):
        for kw in range(kernel[1]):
            patch = xp[:, :, _tap(kh, dilation[0], stride[0], oh), _tap(kw, dilation[1], stride[1], ow)]
            dw[:, :, kh, kw] = np.einsum("nohw,nchw->oc", g, patch)
    return dw


def ref_transpose(x, w, b, size, stride, padding, dilation):  # noqa: ANN001, ANN201
    """The adjoint of ref_conv with weight ``w`` (Cin_t, Cout_t, KH, KW) at cotangent ``x``."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    (p0, p1), (q0, q1) = padding
    y = np.zeros((x.shape[0], w.shape[1], size[0] + p0 + p1, size[1] + q0 + q1))
    oh, ow = x.shape[2:]
    for kh in range(w.shape[2]):
        for kw in range(w.shape[3]):
            sl = (slice(None), slice(None), _tap(kh, dilation[0], stride[0], oh), _tap(kw, dilation[1], stride[1], ow))
            y[sl] += np.einsum("nohw,oc->nchw", x, w[:, :, kh, kw])
    y = y[:, :, p0 : p0 + size[0], q0 : q0 + size[1]]
    return y if b is None else y + b.astype(np.float64)[None, :, None, None]


def _windows(x, kernel, stride, padding, dilation):  # noqa: ANN001, ANN202
    """(-inf padded x, its taps as (N, C, OH, OW, KH*KW), the tap slices)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), *padding), constant_values=-np.inf)
    oh, ow = (_out_size(x.shape[2 + i], kernel[i], stride[i], padding[i], dilation[i]) for i in (0, 1))
    slices = [
        (_tap(kh, dilation[0], stride[0], oh), _tap(kw, dilation[1], stride[1], ow))
        for kh in range(kernel[0])
        for kw in range(kernel[1])
    ]
    return xp, np.stack([xp[:, :, a, b] for a, b in slices], axis=-1), slices


def ref_max_pool(x, kernel, stride, padding, dilation):  # noqa: ANN001, ANN201
    return _windows(x, kernel, stride, padding, dilation)[1].max(axis=-1)  # a NaN propagates


def ref_max_pool_backward(g, x, kernel, stride, padding, dilation):  # noqa: ANN001, ANN201
    """g of each window to its first tap equal to the window's maximum; none when that is NaN."""
    xp, taps, slices = _windows(x, kernel, stride, padding, dilation)
    eq = taps == taps.max(axis=-1, keepdims=True)
    first = np.where(eq.any(axis=-1), eq.argmax(axis=-1), -1)
    dxp = np.zeros_like(xp)
    for k, (a, b) in enumerate(slices):
        dxp[:, :, a, b] += np.where(first == k, g.astype(np.float64), 0.0)
    (p0, _), (q0, _) = padding
    return dxp[:, :, p0 : p0 + x.shape[2], q0 : q0 + x.shape[3]]


# -- cases -----------------------------------------------------------------------------------------

CONV_CASES = [
    # (x shape, w shape, stride, padding pairs, dilation, bias)
    ((2, 3, 7, 9), (4, 3, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), True),  # C*K = 27: the ones row makes 28
    ((3, 2, 11, 10), (5, 2, 5, 5), (2, 2), ((2, 2), (1, 3)), (1, 1), True),  # 5x5, stride 2, asymmetric padding
    ((2, 2, 12, 9), (3, 2, 3, 2), (2, 1), ((1, 0), (0, 1)), (1, 2), False),  # dilation, no bias
    ((2, 1, 28, 28), (4, 1, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), True),  # W3's first layer: C*K << L
    ((3, 4, 6, 5), (2, 4, 1, 1), (1, 1), ((0, 0), (0, 0)), (1, 1), True),  # 1x1
    ((2, 3, 9, 8), (4, 3, 3, 3), (3, 2), ((0, 2), (1, 0)), (2, 1), True),  # stride 3 with dilation 2
]
_COLUMNS = {**conv.OPTIONS, "implicit": False}  # the im2col + cuBLAS layouts below
LAYOUTS = {
    "columns": _COLUMNS,
    "by-sample": {**_COLUMNS, "forward_by_sample": 0, "transpose_by_sample": 0, "wgrad_partials": 0.25},
    "partials": {**_COLUMNS, "forward_by_sample": 0, "transpose_by_sample": 0, "wgrad_partials": 1e9},
    "one-gemm": {**_COLUMNS, "forward_by_sample": conv.NEVER, "transpose_by_sample": conv.NEVER, "wgrad_partials": 0},
    # columns of at most a sample: the batch in chunks of one (W3's conv2 at batch 512 in four)
    "chunked": {**_COLUMNS, "columns_bytes": 1},
    "chunked-by-sample": {**_COLUMNS, "forward_by_sample": 0, "transpose_by_sample": 0, "columns_bytes": 1},
    "chunked-partials": {
        **_COLUMNS,
        "forward_by_sample": 0,
        "transpose_by_sample": 0,
        "wgrad_partials": 1e9,
        "columns_bytes": 1,
    },  # fmt: skip
    # implicit GEMM (the default): every weight gradient too, not only those of 64 columns or more
    "implicit": {**conv.OPTIONS, "implicit": True, "implicit_wgrad_columns": 1},
}


@pytest.fixture(params=list(LAYOUTS))
def layout(request, monkeypatch):  # noqa: ANN001, ANN201
    for k, v in LAYOUTS[request.param].items():
        monkeypatch.setitem(conv.OPTIONS, k, v)
    return request.param


def _tol(dtype: str) -> float:
    return 2e-5 if dtype == "float32" else 1e-12


def _close(got: np.ndarray, want: np.ndarray, dtype: str, what: str) -> None:
    assert got.dtype == np.dtype(dtype), what
    assert not np.isnan(got).any(), f"{what}: an element no kernel wrote"
    tol = _tol(dtype)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())), err_msg=what)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation", "bias"), CONV_CASES)
def test_conv_and_its_gradients_match_float64(fake, layout, dtype, xs, ws, stride, padding, dilation, bias) -> None:
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in (xs, ws, ws[:1]))
    k = _kernels(fake)
    geo = {"stride": stride, "padding": padding, "dilation": dilation, "groups": 1}
    args = (fake.asarray(x), fake.asarray(w)) + ((fake.asarray(b),) if bias else ())
    y = k["conv"](*args, **geo)
    want = ref_conv(x, w, b if bias else None, stride, padding, dilation)
    _close(np.asarray(y), want, dtype, "conv")

    g = rng.standard_normal(want.shape).astype(dtype)
    dw = k["conv_weight_grad"](fake.asarray(g), fake.asarray(x), kernel=ws[2:], **geo)
    _close(np.asarray(dw), ref_weight_grad(g, x, ws[2:], stride, padding, dilation), dtype, "conv_weight_grad")

    # the input gradient is conv_transpose with the same weight; its bias is the transposed output's
    tb = rng.standard_normal(xs[1]).astype(dtype)
    targs = (fake.asarray(g), fake.asarray(w)) + ((fake.asarray(tb),) if bias else ())
    dx = k["conv_transpose"](*targs, size=xs[2:], **geo)
    want_dx = ref_transpose(g, w, tb if bias else None, xs[2:], stride, padding, dilation)
    _close(np.asarray(dx), want_dx, dtype, "conv_transpose")

    ct = {"float32": "float", "float64": "double"}[dtype]
    ran = {name.removeprefix("ember_").removesuffix(f"_{ct}"): n for name, n in fake.launches.items()}
    if layout == "implicit":  # one kernel a convolution, no columns, no cuBLAS
        rows = 32 if ws[0] <= 32 else 64
        tr = 32 if xs[1] <= 32 else 64
        splits, _ = igemm.splits(ws[0], xs[1] * ws[2] * ws[3], want[:, 0].size, 1)  # (K: the batch's positions)
        want_ran = {f"igemm_conv{rows}": 1, "igemm_wgrad64": 1, f"igemm_transpose{tr}": 1}
        assert ran == {**want_ran, **({"igemm_sum": 1} if splits > 1 else {})}, ran
        assert fake.gemms == 0
        return
    fixed = "3x3" if ws[2:] == (3, 3) else ""  # W3's window: the kernels compiled for it
    chunks = 1 if conv.OPTIONS["columns_bytes"] > 2**20 else xs[0]  # "chunked": a sample a chunk
    assert ran[f"im2col{fixed}"] == 2 * chunks and ran[f"col2im{fixed}"] == chunks, ran
    length = want[0, 0].size
    forward, transpose = (length >= conv.OPTIONS[k] for k in ("forward_by_sample", "transpose_by_sample"))
    partials = w.shape[1] * ws[2] * ws[3] <= conv.OPTIONS["wgrad_partials"] * length
    assert ran.get("pack_weight", 0) == (1 if bias and forward else 0), ran
    swaps = sum(v for n, v in ran.items() if n.startswith("swap01"))
    assert swaps == chunks * ((not forward) + (not transpose) + (not partials)), ran
    assert fake.accumulated == chunks - 1, "the weight gradient's chunks summed in cuBLAS's store"


@pytest.mark.parametrize("sample_bytes", [1, 100, 2**20, 2**40])
@pytest.mark.parametrize("n", [1, 2, 7, 512])
def test_spans_cover_the_batch_in_even_chunks_within_the_cap(monkeypatch, n, sample_bytes) -> None:
    monkeypatch.setitem(conv.OPTIONS, "columns_bytes", 32 * 2**20)
    got = conv.spans(n, sample_bytes)
    assert got[0][0] == 0 and got[-1][1] == n and all(a[1] == b[0] for a, b in zip(got, got[1:]))
    sizes = [e - s for s, e in got]
    assert max(sizes) - min(sizes) <= 1 or len(got) == 1
    assert max(sizes) * sample_bytes <= 32 * 2**20 or max(sizes) == 1  # a sample over the cap runs alone
    assert len(got) == -(-n // max(1, 32 * 2**20 // sample_bytes))  # no more chunks than the cap asks for


def test_w3_conv2_runs_whole_under_the_default_cap_and_in_chunks_under_a_small_one(monkeypatch) -> None:
    """W3's second convolution at batch 512 (32 -> 64 channels, 3x3 over 14x14): 110 MiB of columns,
    whole under the default cap (chunks cost the host-bound step more than the memory is worth);
    under a 32 MiB cap, four chunks of 128 samples (28 MiB each)."""
    sample = 32 * 9 * 14 * 14 * 4
    assert conv.spans(512, sample) == [(0, 512)]
    monkeypatch.setitem(conv.OPTIONS, "columns_bytes", 32 * 2**20)
    assert [e - s for s, e in conv.spans(512, sample)] == [128] * 4


@pytest.mark.parametrize("layout", ["chunked", "chunked-by-sample", "chunked-partials"], indirect=True)
def test_chunked_columns_are_freed_before_the_next_chunks_are_made(fake, layout, monkeypatch) -> None:
    """Under a cap the point is memory: one chunk's columns live at a time, in the forward and both
    gradients (W3's conv2 on cuda, 32 MiB cap: a chunk kept by a launch's argument tuple until the
    next one existed put two at the peak, 161 instead of 134 MiB in use)."""
    n, cin, cout, hw = 8, 4, 2, (10, 10)
    sample = cin * 9 * hw[0] * hw[1] * 4  # a sample's columns (3x3, "same" padding), float32
    monkeypatch.setitem(conv.OPTIONS, "columns_bytes", 2 * sample)  # four chunks of two samples
    rng = np.random.default_rng(11)
    x, w, g = (rng.standard_normal(s).astype(np.float32) for s in ((n, cin, *hw), (cout, cin, 3, 3), (n, cout, *hw)))
    k = _kernels(fake)
    geo = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    args = [fake.asarray(a) for a in (x, w, g)]
    chunk_cols = 2 * sample + 2 * 4 * 2 * hw[0] * hw[1]  # (rows padded to a multiple of 4 with a bias row)
    calls = {
        "conv": lambda: k["conv"](args[0], args[1], **geo),
        "conv_weight_grad": lambda: k["conv_weight_grad"](args[2], args[0], kernel=(3, 3), **geo),
        "conv_transpose": lambda: k["conv_transpose"](args[2], args[1], size=hw, **geo),
    }
    for name, call in calls.items():
        before = fake.live_bytes()
        fake.peak = 0
        out = call()
        extra = fake.peak - before
        # the output, one chunk's columns, and a chunk of a transposed operand (a fifth of the columns
        # here); two chunks' columns would be more
        assert extra <= out.nbytes + chunk_cols + chunk_cols // 4, (name, extra, out.nbytes, chunk_cols)
        assert np.isfinite(np.asarray(out)).all(), name


def test_chunks_without_an_out_taking_matmul_match(fake, monkeypatch) -> None:
    """A matmul without ``out=`` (no cuBLAS: the shared kernel) still serves the chunked layouts."""
    monkeypatch.setitem(conv.OPTIONS, "implicit", False)
    monkeypatch.setitem(conv.OPTIONS, "columns_bytes", 1)
    rng = np.random.default_rng(3)
    x, w, g = (rng.standard_normal(s).astype(np.float32) for s in ((3, 2, 6, 5), (4, 2, 3, 3), (3, 4, 6, 5)))
    k = conv.conv_kernels(fake, {"matmul": lambda a, b: fake.matmul(a, b), **{n: _fallback(n) for n in NAMES}})
    geo = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    y = k["conv"](fake.asarray(x), fake.asarray(w), **geo)
    _close(np.asarray(y), ref_conv(x, w, None, **_g(geo)), "float32", "conv")
    dw = k["conv_weight_grad"](fake.asarray(g), fake.asarray(x), kernel=(3, 3), **geo)
    _close(np.asarray(dw), ref_weight_grad(g, x, (3, 3), **_g(geo)), "float32", "conv_weight_grad")
    assert fake.accumulated == 0 and fake.launches


def test_the_vectorised_transpose_runs_where_rows_allow_it(fake, monkeypatch) -> None:
    """The output transpose of the one-GEMM layout: float4 per thread when L % 4 == 0, else scalar."""
    monkeypatch.setitem(conv.OPTIONS, "implicit", False)
    monkeypatch.setitem(conv.OPTIONS, "forward_by_sample", conv.NEVER)
    k = _kernels(fake)
    rng = np.random.default_rng(5)
    for xs, kinds in (((2, 3, 8, 6), "swap01v"), ((2, 3, 7, 5), "swap01")):
        x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (xs, (5, 3, 3, 3), (5,)))
        geo = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
        before = fake.launches[f"ember_{kinds}_float"]
        y = k["conv"](fake.asarray(x), fake.asarray(w), fake.asarray(b), **geo)
        assert fake.launches[f"ember_{kinds}_float"] == before + 1
        _close(np.asarray(y), ref_conv(x, w, b, (1, 1), ((1, 1), (1, 1)), (1, 1)), "float32", str(xs))


IMPLICIT_CASES = [
    # (x shape, w shape, stride, padding pairs, dilation): channels past one tile's rows (72 > 64), several
    # column tiles, channel counts that are multiples of 8 (a k-step's rows share a tap: the "fast" loads)
    ((3, 16, 9, 10), (72, 16, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ((2, 24, 11, 9), (40, 24, 3, 3), (2, 2), ((1, 0), (2, 1)), (1, 1)),  # stride 2: transpose's exact division
    ((2, 8, 10, 12), (16, 8, 3, 2), (1, 2), ((2, 2), (0, 1)), (2, 1)),  # dilation, a 3x2 window
    ((4, 5, 7, 7), (33, 5, 3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1)),  # C not a multiple of 8, M past 32
]


@pytest.mark.parametrize("sms", [1, 64])  # 64: the weight gradient's K split over many blocks
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("xs", "ws", "stride", "padding", "dilation"), IMPLICIT_CASES)
def test_implicit_gemm_tiles_splits_and_gathers_match_float64(
    monkeypatch, sms, dtype, xs, ws, stride, padding, dilation
) -> None:
    """The implicit GEMMs at sizes that cross their tiles (rows, columns, K splits) and take both
    gathers (a tap per k-step, a tap per row), with a bias in the forward and the transpose; every
    weight gradient through its implicit GEMM (the default keeps those of few columns elsewhere)."""
    monkeypatch.setitem(conv.OPTIONS, "implicit", True)
    monkeypatch.setitem(conv.OPTIONS, "implicit_wgrad_columns", 1)
    fake = conv_on_cpu.FakeCupy(sms=sms)
    rng = np.random.default_rng(sum(xs) + sum(ws) + sms)
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in (xs, ws, ws[:1]))
    k = _kernels(fake)
    geo = {"stride": stride, "padding": padding, "dilation": dilation, "groups": 1}
    y = k["conv"](fake.asarray(x), fake.asarray(w), fake.asarray(b), **geo)
    want = ref_conv(x, w, b, stride, padding, dilation)
    _close(np.asarray(y), want, dtype, "conv")
    g = rng.standard_normal(want.shape).astype(dtype)
    dw = k["conv_weight_grad"](fake.asarray(g), fake.asarray(x), kernel=ws[2:], **geo)
    _close(np.asarray(dw), ref_weight_grad(g, x, ws[2:], stride, padding, dilation), dtype, "conv_weight_grad")
    tb = rng.standard_normal(xs[1]).astype(dtype)
    dx = k["conv_transpose"](fake.asarray(g), fake.asarray(w), fake.asarray(tb), size=xs[2:], **geo)
    _close(np.asarray(dx), ref_transpose(g, w, tb, xs[2:], stride, padding, dilation), dtype, "conv_transpose")
    ncol = xs[1] * ws[2] * ws[3]
    splits, _ = igemm.splits(ws[0], ncol, want[:, 0].size, sms)
    ct = {"float32": "float", "float64": "double"}[dtype]
    assert fake.launches[f"ember_igemm_sum_{ct}"] == (splits > 1)
    assert sms == 1 or want[:, 0].size < 32 * igemm.BK or splits > 1, "K of 32 steps or more splits over 64 SMs"
    assert fake.gemms == 0


def test_implicit_weight_gradients_of_few_columns_keep_the_partials(fake) -> None:
    """W3's first layer (1 x 3 x 3 = 9 columns) would idle most of a 128-column tile: its weight
    gradient keeps the per-sample products; the forward is the implicit GEMM."""
    rng = np.random.default_rng(9)
    x, w, g = (rng.standard_normal(s).astype(np.float32) for s in ((2, 1, 12, 12), (8, 1, 3, 3), (2, 8, 12, 12)))
    k = _kernels(fake)
    geo = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    k["conv"](fake.asarray(x), fake.asarray(w), **geo)
    dw = k["conv_weight_grad"](fake.asarray(g), fake.asarray(x), kernel=(3, 3), **geo)
    _close(np.asarray(dw), ref_weight_grad(g, x, (3, 3), **_g(geo)), "float32", "conv_weight_grad")
    assert fake.launches["ember_igemm_conv32_float"] == 1 and fake.launches["ember_im2col3x3_float"] == 1
    assert "ember_igemm_wgrad64_float" not in fake.launches


POOL_CASES = [
    # (x shape, kernel, stride, padding pairs, dilation, the tiled kernel)
    ((2, 3, 8, 8), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), True),  # W3's pools
    ((2, 2, 9, 7), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), True),  # a row and a column past the windows
    ((2, 2, 7, 8), (3, 3), (3, 3), ((1, 1), (1, 1)), (1, 1), True),  # tiled with padding
    ((1, 3, 10, 9), (3, 2), (3, 2), ((1, 1), (0, 0)), (1, 1), True),
    ((1, 2, 7, 5), (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), False),  # overlapping windows, padding
    ((2, 2, 9, 10), (2, 3), (2, 1), ((0, 0), (0, 0)), (2, 1), False),  # dilation
    ((2, 2, 8, 8), (2, 2), (2, 2), ((0, 0), (0, 0)), (2, 2), False),  # stride == kernel, dilated: not tiled
    ((2, 16, 28, 28), (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), True),  # larger than one grid's threads
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("shape", "kernel", "stride", "padding", "dilation", "tiled"), POOL_CASES)
def test_max_pool_and_its_gradient_route_to_the_first_maximum(
    fake, dtype, shape, kernel, stride, padding, dilation, tiled
) -> None:
    rng = np.random.default_rng(sum(shape))
    x = rng.integers(-3, 4, shape).astype(dtype)  # many ties: the first maximum takes the gradient
    x.reshape(-1)[::37] = np.nan  # a NaN wins its window and takes no gradient
    x.reshape(-1)[5::41] = -np.inf
    x[0, 0] = -np.inf  # whole windows of -inf (with padding: the first tap is a padded one)
    k = _kernels(fake)
    geo = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation}
    out = k["max_pool"](fake.asarray(x), **geo)
    want = ref_max_pool(x, kernel, stride, padding, dilation)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(np.asarray(out), want)
    g = rng.standard_normal(want.shape).astype(dtype)
    dx = k["max_pool_backward"](fake.asarray(g), fake.asarray(x), **geo)
    _close(np.asarray(dx), ref_max_pool_backward(g, x, kernel, stride, padding, dilation), dtype, "dx")
    ct = {"float32": "float", "float64": "double"}[dtype]
    assert fake.launches[f"ember_max_pool_{ct}"] == 1
    name = (
        ("max_pool_backward_tiled2x2" if kernel == (2, 2) else "max_pool_backward_tiled")
        if tiled
        else "max_pool_backward"
    )
    assert fake.launches[f"ember_{name}_{ct}"] == 1, fake.launches
    assert conv.CALLS["max_pool_backward"] > 0


def test_other_ranks_groups_and_dtypes_take_the_shared_kernels(fake) -> None:
    taken = []
    k = _kernels(fake, conv=lambda *a, **kw: taken.append("conv"), max_pool=lambda *a, **kw: taken.append("pool"))
    rng = np.random.default_rng(3)
    geo = {"stride": (1,), "padding": ((0, 0),), "dilation": (1,), "groups": 1}
    k["conv"](fake.asarray(rng.standard_normal((2, 4, 9))), fake.asarray(rng.standard_normal((4, 4, 3))), **geo)
    geo2 = {"stride": (1, 1), "padding": ((0, 0), (0, 0)), "dilation": (1, 1)}
    x, w = fake.asarray(rng.standard_normal((2, 4, 5, 5))), fake.asarray(rng.standard_normal((4, 2, 3, 3)))
    k["conv"](x, w, **geo2, groups=2)
    k["max_pool"](fake.asarray(np.ones((2, 2, 4, 4), np.float16)), kernel=(2, 2), **geo2)
    assert taken == ["conv", "conv", "pool"] and not fake.launches


def test_a_new_batch_or_image_size_compiles_nothing(fake, monkeypatch) -> None:
    """The implicit GEMMs take every size as an argument: one module per dtype serves any batch, image
    size, channel count and window (issue 10's "a new batch size compiles nothing")."""
    monkeypatch.setitem(conv.OPTIONS, "implicit", True)
    built = []
    raw = fake.RawModule
    monkeypatch.setattr(fake, "RawModule", lambda code: built.append(code) or raw(code))
    k = _kernels(fake)
    geo = {"stride": (1, 1), "padding": ((1, 1), (1, 1)), "dilation": (1, 1), "groups": 1}
    rng = np.random.default_rng(2)
    for n, c, hw, cout in ((2, 8, 6, 16), (3, 8, 6, 16), (5, 16, 9, 72)):
        x, w = rng.standard_normal((n, c, hw, hw)).astype(np.float32), rng.standard_normal((cout, c, 3, 3))
        g = rng.standard_normal((n, cout, hw, hw)).astype(np.float32)
        xs, ws, gs = fake.asarray(x), fake.asarray(w.astype(np.float32)), fake.asarray(g)
        k["conv"](xs, ws, **geo)
        k["conv_weight_grad"](gs, xs, kernel=(3, 3), **geo)
        k["conv_transpose"](gs, ws, size=(hw, hw), **geo)
    assert len(built) == 1 and "ember_igemm_conv64_float" in built[0]  # one NVRTC module for all of them

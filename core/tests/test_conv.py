"""conv, conv_transpose, pooling, interpolate, unfold and fold: forward against float64 numpy
references written here (shift-and-add loops, not im2col), on the CPU backend's native kernels
and on the core composites; gradients against central differences; errors; optional PyTorch
golden values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import ember as em
from ember.errors import DTypeError, ShapeError

try:
    import torch
    import torch.nn.functional as TF
except ImportError:  # the golden tests skip with the reason below
    torch = None

NO_TORCH = "PyTorch is not installed; the golden tests compare with torch.nn.functional"
OPS = (
    "conv", "conv_transpose", "unfold", "fold", "max_pool", "avg_pool", "adaptive_avg_pool",
    "adaptive_max_pool", "interpolate", "max_pool_backward",
)  # fmt: skip
CPU = em.Device.cpu()
AD = CPU.autodiff()


@pytest.fixture(params=["native", "composite"])
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test on the CPU backend's kernels, or with them hidden so the composites run."""
    if request.param == "composite":
        for name in OPS:
            monkeypatch.setitem(CPU._impls, name, None)
    return request.param


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + 7 * len(shape) + sum(shape)).standard_normal(shape)


def close(actual: em.Tensor, expected: np.ndarray, tol: float = 1e-10) -> None:
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual.numpy(), expected, rtol=tol, atol=tol)


def pairs(padding: object, nd: int) -> list[tuple[int, int]]:
    p = (padding,) * nd if isinstance(padding, int) else padding
    return [(v, v) for v in p]


def tup(v: object, nd: int) -> tuple[int, ...]:
    return (v,) * nd if isinstance(v, int) else tuple(v)


# -- references (float64 numpy) ----------------------------------------------------------
def ref_conv(x, w, b, stride, padding, dilation, groups):
    nd = x.ndim - 2
    k = w.shape[2:]
    st, dl = tup(stride, nd), tup(dilation, nd)
    if padding == "same":
        pads = [(d * (kk - 1) // 2, d * (kk - 1) - d * (kk - 1) // 2) for kk, d in zip(k, dl)]
    elif padding == "valid":
        pads = [(0, 0)] * nd
    else:
        pads = pairs(padding, nd)
    xp = np.pad(x, [(0, 0), (0, 0)] + pads)
    out = [(xp.shape[2 + i] - dl[i] * (k[i] - 1) - 1) // st[i] + 1 for i in range(nd)]
    n, cin = x.shape[:2]
    cout = w.shape[0]
    cg, og = cin // groups, cout // groups
    y = np.zeros((n, cout, *out))
    for g in range(groups):
        xs = xp[:, g * cg : (g + 1) * cg]
        for off in itertools.product(*(range(kk) for kk in k)):
            sl = tuple(slice(o * d, o * d + (m - 1) * s + 1, s) for o, d, m, s in zip(off, dl, out, st))
            patch = xs[(slice(None), slice(None)) + sl]
            wk = w[(slice(g * og, (g + 1) * og), slice(None)) + off]
            y[:, g * og : (g + 1) * og] += np.einsum("nc...,oc->no...", patch, wk)
    if b is not None:
        y += b.reshape((1, -1) + (1,) * nd)
    return y


def ref_conv_transpose(x, w, b, stride, padding, output_padding, dilation, groups):
    nd = x.ndim - 2
    st, p, op, dl = (tup(v, nd) for v in (stride, padding, output_padding, dilation))
    k = w.shape[2:]
    n, cin = x.shape[:2]
    og = w.shape[1]
    cg = cin // groups
    inp = x.shape[2:]
    full = [(m - 1) * s + d * (kk - 1) + 1 + o for m, s, d, kk, o in zip(inp, st, dl, k, op)]
    y = np.zeros((n, og * groups, *full))
    for g in range(groups):
        for off in itertools.product(*(range(kk) for kk in k)):
            sl = tuple(slice(o * d, o * d + (m - 1) * s + 1, s) for o, d, m, s in zip(off, dl, inp, st))
            contrib = np.einsum(
                "nc...,co->no...", x[:, g * cg : (g + 1) * cg], w[(slice(g * cg, (g + 1) * cg), slice(None)) + off]
            )
            y[(slice(None), slice(g * og, (g + 1) * og)) + sl] += contrib
    out = [(m - 1) * s - 2 * pp + d * (kk - 1) + 1 + o for m, s, pp, d, kk, o in zip(inp, st, p, dl, k, op)]
    y = y[(slice(None), slice(None)) + tuple(slice(pp, pp + o) for pp, o in zip(p, out))]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * nd)
    return y


def pool_out(n, k, s, p, d, ceil):
    span = d * (k - 1) + 1
    o = (math.ceil if ceil else math.floor)((n + 2 * p - span) / s) + 1
    if ceil and (o - 1) * s >= n + p:
        o -= 1
    return o


def ref_max_pool(x, kernel, stride, padding, dilation, ceil_mode):
    nd = x.ndim - 2
    k, p, d = tup(kernel, nd), tup(padding, nd), tup(dilation, nd)
    s = k if stride is None else tup(stride, nd)
    out = [pool_out(x.shape[2 + i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(nd)]
    y = np.full(x.shape[:2] + tuple(out), -np.inf)
    for pos in itertools.product(*(range(o) for o in out)):
        for off in itertools.product(*(range(kk) for kk in k)):
            src = [pi * si - pp + oi * di for pi, si, pp, oi, di in zip(pos, s, p, off, d)]
            if all(0 <= c < x.shape[2 + i] for i, c in enumerate(src)):
                y[(slice(None), slice(None)) + pos] = np.maximum(
                    y[(slice(None), slice(None)) + pos], x[(slice(None), slice(None)) + tuple(src)]
                )
    return y


def ref_avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad):
    nd = x.ndim - 2
    k, p = tup(kernel, nd), tup(padding, nd)
    s = k if stride is None else tup(stride, nd)
    sizes = x.shape[2:]
    out = [pool_out(sizes[i], k[i], s[i], p[i], 1, ceil_mode) for i in range(nd)]
    y = np.zeros(x.shape[:2] + tuple(out))
    for pos in itertools.product(*(range(o) for o in out)):
        lo = [pi * si - pp for pi, si, pp in zip(pos, s, p)]
        hi = [min(a + kk, n + pp) for a, kk, n, pp in zip(lo, k, sizes, p)]
        count = math.prod(h - a for a, h in zip(lo, hi))
        lo_c = [max(a, 0) for a in lo]
        hi_c = [min(h, n) for h, n in zip(hi, sizes)]
        if not count_include_pad:
            count = math.prod(h - a for a, h in zip(lo_c, hi_c))
        box = x[(slice(None), slice(None)) + tuple(slice(a, h) for a, h in zip(lo_c, hi_c))]
        y[(slice(None), slice(None)) + pos] = box.sum(axis=tuple(range(2, 2 + nd))) / count
    return y


def ref_adaptive(x, size, reduce):
    nd = x.ndim - 2
    size = tup(size, nd)
    y = np.zeros(x.shape[:2] + size)
    for pos in itertools.product(*(range(o) for o in size)):
        box = tuple(slice(math.floor(i * n / o), math.ceil((i + 1) * n / o)) for i, n, o in zip(pos, x.shape[2:], size))
        y[(slice(None), slice(None)) + pos] = reduce(x[(slice(None), slice(None)) + box], axis=tuple(range(2, 2 + nd)))
    return y


def _src_linear(i, n_in, n_out, align_corners, scale):
    if align_corners:
        return i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    ratio = 1.0 / scale if scale else n_in / n_out
    return max((i + 0.5) * ratio - 0.5, 0.0)


def ref_interpolate(x, size, scale_factor, mode, align_corners):
    nd = x.ndim - 2
    if size is not None:
        out, scales = tup(size, nd), (None,) * nd
    else:
        scales = (scale_factor,) * nd if isinstance(scale_factor, (int, float)) else tuple(scale_factor)
        out = tuple(math.floor(n * f) for n, f in zip(x.shape[2:], scales))
    y = np.zeros(x.shape[:2] + out)
    # PyTorch's kernels copy an axis whose size is unchanged (linear modes, 2-D nearest) and
    # halve indices on an axis whose size doubles (2-D nearest), whatever the scale factor
    keep = (1,) if mode != "nearest" else (1, 2) if nd == 2 else ()
    scales = tuple(None if o in [k * n for k in keep] else sc for n, o, sc in zip(x.shape[2:], out, scales))
    for pos in itertools.product(*(range(o) for o in out)):
        if mode == "nearest":
            src = tuple(
                min(math.floor(i * (1.0 / sc if sc else n / o)), n - 1)
                for i, n, o, sc in zip(pos, x.shape[2:], out, scales)
            )
            y[(slice(None), slice(None)) + pos] = x[(slice(None), slice(None)) + src]
            continue
        corners = []
        for i, n, o, sc in zip(pos, x.shape[2:], out, scales):
            c = _src_linear(i, n, o, align_corners, sc)
            i0 = min(int(math.floor(c)), n - 1)
            i1 = min(i0 + 1, n - 1)
            corners.append(((i0, 1.0 - (c - i0)), (i1, c - i0)))
        acc = 0.0
        for combo in itertools.product(*corners):
            weight = math.prod(wt for _, wt in combo)
            acc = acc + weight * x[(slice(None), slice(None)) + tuple(ix for ix, _ in combo)]
        y[(slice(None), slice(None)) + pos] = acc
    return y


def ref_unfold(x, kernel, stride, padding, dilation):
    nd = x.ndim - 2
    k, s, d = tup(kernel, nd), tup(stride, nd), tup(dilation, nd)
    xp = np.pad(x, [(0, 0), (0, 0)] + pairs(padding, nd))
    blocks = [(xp.shape[2 + i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    n, c = x.shape[:2]
    cols = np.zeros((n, c, math.prod(k), math.prod(blocks)))
    for ki, off in enumerate(itertools.product(*(range(kk) for kk in k))):
        for li, pos in enumerate(itertools.product(*(range(b) for b in blocks))):
            src = tuple(pi * si + oi * di for pi, si, oi, di in zip(pos, s, off, d))
            cols[:, :, ki, li] = xp[(slice(None), slice(None)) + src]
    return cols.reshape(n, c * math.prod(k), -1)


def ref_fold(cols, output_size, kernel, stride, padding, dilation):
    nd = len(output_size)
    k, s, p, d = tup(kernel, nd), tup(stride, nd), tup(padding, nd), tup(dilation, nd)
    padded = [o + 2 * pp for o, pp in zip(output_size, p)]
    blocks = [(padded[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    n = cols.shape[0]
    c = cols.shape[1] // math.prod(k)
    grid = cols.reshape(n, c, math.prod(k), -1)
    y = np.zeros((n, c, *padded))
    for ki, off in enumerate(itertools.product(*(range(kk) for kk in k))):
        for li, pos in enumerate(itertools.product(*(range(b) for b in blocks))):
            dst = tuple(pi * si + oi * di for pi, si, oi, di in zip(pos, s, off, d))
            y[(slice(None), slice(None)) + dst] += grid[:, :, ki, li]
    return y[(slice(None), slice(None)) + tuple(slice(pp, pp + o) for pp, o in zip(p, output_size))]


# -- case tables ---------------------------------------------------------------------------
# (x shape, weight shape, bias, stride, padding, dilation, groups)
CONV_CASES = [
    ((2, 3, 9), (4, 3, 3), True, 1, 0, 1, 1),
    ((1, 4, 10), (6, 2, 2), False, 2, 1, 2, 2),
    ((2, 2, 8), (3, 2, 4), True, 1, "same", 2, 1),
    ((1, 2, 7), (2, 2, 4), False, 1, "same", 1, 1),
    ((2, 3, 7, 6), (4, 3, 3, 2), True, (2, 1), (1, 0), 1, 1),
    ((2, 4, 8, 8), (6, 2, 3, 3), False, 1, "same", (2, 1), 2),
    ((1, 4, 5, 6), (8, 1, 2, 3), True, 1, "valid", 1, 4),
    ((1, 2, 6, 5), (3, 2, 2, 4), True, 1, "same", 1, 1),
    ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), True, (1, 2, 1), (1, 1, 0), 1, 1),
    ((1, 4, 6, 5, 5), (4, 2, 2, 2, 2), False, 2, 1, (2, 1, 1), 2),
]

# (x shape, weight shape, bias, stride, padding, output_padding, dilation, groups)
CONV_T_CASES = [
    ((2, 3, 5), (3, 4, 3), True, 1, 0, 0, 1, 1),
    ((1, 4, 4), (4, 3, 3), False, 2, 1, 1, 1, 2),
    ((1, 2, 4), (2, 2, 2), False, 3, 0, 2, 2, 1),
    ((2, 3, 4, 3), (3, 2, 3, 2), True, (2, 1), (1, 0), (1, 0), 1, 1),
    ((1, 4, 3, 4), (4, 1, 2, 3), True, 2, 1, 0, (1, 2), 4),
    ((1, 2, 3, 2, 3), (2, 3, 2, 2, 3), True, (2, 1, 2), (0, 0, 1), (1, 0, 1), 1, 1),
]

# (x shape, kernel, stride, padding, dilation, ceil_mode)
MAX_CASES = [
    ((2, 3, 9), 2, None, 0, 1, False),
    ((1, 2, 10), 3, 2, 1, 2, True),
    ((2, 2, 7, 6), 2, None, 0, 1, False),
    ((1, 3, 8, 7), (3, 2), (2, 1), (1, 1), 1, True),
    ((1, 2, 9, 9), 3, 2, 1, (2, 1), False),
    ((1, 2, 5, 6, 7), (2, 3, 2), (2, 2, 3), (1, 1, 0), 1, True),
]

# (x shape, kernel, stride, padding, ceil_mode, count_include_pad)
AVG_CASES = [
    ((2, 3, 9), 3, 2, 1, False, True),
    ((1, 2, 10), 4, 3, 2, True, False),
    ((2, 2, 7, 6), 2, None, 0, False, True),
    ((1, 3, 8, 7), (3, 2), (2, 1), (1, 1), True, True),
    ((1, 3, 8, 7), (3, 2), (2, 1), (1, 1), True, False),
    ((1, 2, 5, 6, 7), (2, 3, 2), 2, (1, 1, 0), True, False),
]

# (x shape, output size)
ADAPTIVE_CASES = [
    ((2, 3, 10), 4),
    ((1, 2, 9), 3),
    ((2, 2, 7, 6), (3, 4)),
    ((1, 2, 8, 5), (1, 5)),
    ((1, 2, 5, 6, 7), (2, 3, 3)),
]

# (x shape, size, scale_factor, mode, align_corners)
INTERP_CASES = [
    ((2, 3, 5), 8, None, "nearest", None),
    ((1, 2, 7), 4, None, "nearest", None),
    ((1, 2, 5), None, 1.7, "nearest", None),
    ((2, 3, 5), 9, None, "linear", False),
    ((2, 3, 5), 9, None, "linear", True),
    ((1, 2, 9), 4, None, "linear", False),
    ((1, 2, 5), None, 2.5, "linear", False),
    ((2, 2, 4, 5), (7, 3), None, "bilinear", False),
    ((2, 2, 4, 5), (7, 3), None, "bilinear", True),
    ((1, 2, 4, 5), None, (2.0, 1.5), "bilinear", False),
    ((1, 1, 6, 4), (3, 8), None, "nearest", None),
    ((1, 1, 4, 5), None, (1.17, 2.1), "nearest", None),
    ((1, 2, 4, 5), None, (1.1, 1.5), "bilinear", False),
    ((1, 2, 3, 4, 3), (5, 2, 4), None, "trilinear", False),
    ((1, 2, 3, 4, 3), (5, 2, 4), None, "trilinear", True),
    ((1, 1, 3, 2, 4), (4, 4, 2), None, "nearest", None),
]

# (x spatial, channels, kernel, stride, padding, dilation)
UNFOLD_CASES = [
    ((9,), 3, 3, 2, 1, 1),
    ((6, 7), 2, (2, 3), 1, (1, 0), 1),
    ((7, 6), 3, 3, (2, 1), 1, (1, 2)),
    ((4, 5, 4), 2, (2, 2, 3), (1, 2, 1), (0, 1, 1), 1),
]


# -- forward -------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_forward(case, path):
    xs, ws, has_bias, stride, padding, dilation, groups = case
    x, w = rand(*xs), rand(*ws, seed=1)
    b = rand(ws[0], seed=2) if has_bias else None
    y = em.conv(em.tensor(x), em.tensor(w), None if b is None else em.tensor(b), stride, padding, dilation, groups)
    close(y, ref_conv(x, w, b, stride, padding, dilation, groups))


@pytest.mark.parametrize("case", CONV_T_CASES)
def test_conv_transpose_forward(case, path):
    xs, ws, has_bias, stride, padding, output_padding, dilation, groups = case
    x, w = rand(*xs), rand(*ws, seed=1)
    b = rand(ws[1] * groups, seed=2) if has_bias else None
    y = em.conv_transpose(
        em.tensor(x),
        em.tensor(w),
        None if b is None else em.tensor(b),
        stride,
        padding,
        output_padding,
        dilation,
        groups,
    )
    close(y, ref_conv_transpose(x, w, b, stride, padding, output_padding, dilation, groups))


@pytest.mark.parametrize("case", MAX_CASES)
def test_max_pool_forward(case, path):
    xs, kernel, stride, padding, dilation, ceil_mode = case
    x = rand(*xs)
    close(
        em.max_pool(em.tensor(x), kernel, stride, padding, dilation, ceil_mode),
        ref_max_pool(x, kernel, stride, padding, dilation, ceil_mode),
    )


@pytest.mark.parametrize("case", AVG_CASES)
def test_avg_pool_forward(case, path):
    xs, kernel, stride, padding, ceil_mode, count_include_pad = case
    x = rand(*xs)
    y = em.avg_pool(em.tensor(x), kernel, stride, padding, ceil_mode, count_include_pad)
    close(y, ref_avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad))


@pytest.mark.parametrize("case", ADAPTIVE_CASES)
def test_adaptive_pools_forward(case, path):
    xs, size = case
    x = rand(*xs)
    close(em.adaptive_avg_pool(em.tensor(x), size), ref_adaptive(x, size, np.mean))
    close(em.adaptive_max_pool(em.tensor(x), size), ref_adaptive(x, size, np.max))


@pytest.mark.parametrize("case", INTERP_CASES)
def test_interpolate_forward(case, path):
    xs, size, scale_factor, mode, align_corners = case
    x = rand(*xs)
    y = em.interpolate(em.tensor(x), size, scale_factor, mode, align_corners)
    close(y, ref_interpolate(x, size, scale_factor, mode, align_corners))


@pytest.mark.parametrize("case", UNFOLD_CASES)
def test_unfold_fold_forward(case, path):
    spatial, c, kernel, stride, padding, dilation = case
    x = rand(2, c, *spatial)
    cols = em.unfold(em.tensor(x), kernel, stride, padding, dilation)
    close(cols, ref_unfold(x, kernel, stride, padding, dilation))
    r = rand(*cols.shape, seed=3)
    y = em.fold(em.tensor(r), spatial, kernel, stride, padding, dilation)
    close(y, ref_fold(r, spatial, kernel, stride, padding, dilation))


def test_unbatched_inputs_and_defaults():
    x = rand(3, 6, 5)
    w = rand(4, 3, 3, 3, seed=1)
    close(em.conv(em.tensor(x), em.tensor(w), padding=1), ref_conv(x[None], w, None, 1, 1, 1, 1)[0])
    close(em.max_pool(em.tensor(x), (2, 2)), ref_max_pool(x[None], 2, None, 0, 1, False)[0])
    close(em.adaptive_avg_pool(em.tensor(x), (2, None)), ref_adaptive(x[None], (2, 5), np.mean)[0])


def test_half_precision(path):
    x, w = rand(2, 3, 8, 8), rand(4, 3, 3, 3, seed=1)
    for dt in (em.float16, em.bfloat16):
        xt, wt = em.tensor(x, dtype=dt), em.tensor(w, dtype=dt)
        results = [
            (em.conv(xt, wt, padding=1), ref_conv(x, w, None, 1, 1, 1, 1)),
            (em.conv_transpose(xt, em.tensor(w.transpose(1, 0, 2, 3), dtype=dt), stride=2),
             ref_conv_transpose(x, w.transpose(1, 0, 2, 3), None, 2, 0, 0, 1, 1)),
            (em.max_pool(xt, 3, 2, 1), ref_max_pool(x, 3, 2, 1, 1, False)),
            (em.avg_pool(xt, 2), ref_avg_pool(x, 2, None, 0, False, True)),
            (em.interpolate(xt, (5, 11), mode="bilinear", align_corners=False),
             ref_interpolate(x, (5, 11), None, "bilinear", False)),
        ]  # fmt: skip
        for y, ref in results:
            assert y.dtype == dt
            np.testing.assert_allclose(y.astype(em.float64).numpy(), ref, rtol=0.05, atol=0.15)


# -- gradients -----------------------------------------------------------------------------
def numeric_grads(fn, arrays, eps=1e-6):
    """Central differences of sum(fn(*arrays) * seed) with respect to each array."""
    out = fn(*arrays)
    seed = rand(*out.shape, seed=5)
    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        for idx in np.ndindex(a.shape):
            old = a[idx]
            a[idx] = old + eps
            hi = (fn(*arrays) * seed).sum()
            a[idx] = old - eps
            lo = (fn(*arrays) * seed).sum()
            a[idx] = old
            g[idx] = (hi - lo) / (2 * eps)
        grads.append(g)
    return seed, grads


def check_grads(em_fn, arrays, tol=1e-6):
    def forward(*arrs):
        with em.no_grad():
            return em_fn(*(em.tensor(a) for a in arrs)).numpy()

    seed, expected = numeric_grads(forward, [np.array(a, dtype=np.float64) for a in arrays])
    leaves = [em.tensor(a, device=AD, requires_grad=True) for a in arrays]
    (em_fn(*leaves) * em.tensor(seed, device=AD)).sum().backward()
    for leaf, g in zip(leaves, expected):
        np.testing.assert_allclose(leaf.grad.numpy(), g, rtol=tol, atol=tol)


@pytest.mark.parametrize("case", [CONV_CASES[1], CONV_CASES[3], CONV_CASES[5], CONV_CASES[9]])
def test_conv_grad(case, path):
    xs, ws, has_bias, stride, padding, dilation, groups = case
    arrays = [rand(*xs), rand(*ws, seed=1)] + ([rand(ws[0], seed=2)] if has_bias else [])
    check_grads(lambda x, w, *b: em.conv(x, w, b[0] if b else None, stride, padding, dilation, groups), arrays)


@pytest.mark.parametrize("case", [CONV_T_CASES[1], CONV_T_CASES[2], CONV_T_CASES[4]])
def test_conv_transpose_grad(case, path):
    xs, ws, has_bias, stride, padding, output_padding, dilation, groups = case
    arrays = [rand(*xs), rand(*ws, seed=1)] + ([rand(ws[1] * groups, seed=2)] if has_bias else [])

    def fn(x, w, *b):
        return em.conv_transpose(x, w, b[0] if b else None, stride, padding, output_padding, dilation, groups)

    check_grads(fn, arrays)


@pytest.mark.parametrize("case", [MAX_CASES[1], MAX_CASES[3], MAX_CASES[4]])
def test_max_pool_grad(case, path):
    xs, kernel, stride, padding, dilation, ceil_mode = case
    check_grads(lambda x: em.max_pool(x, kernel, stride, padding, dilation, ceil_mode), [rand(*xs)])


@pytest.mark.parametrize("case", [AVG_CASES[1], AVG_CASES[4]])
def test_avg_pool_grad(case, path):
    xs, kernel, stride, padding, ceil_mode, count_include_pad = case
    check_grads(lambda x: em.avg_pool(x, kernel, stride, padding, ceil_mode, count_include_pad), [rand(*xs)])


@pytest.mark.parametrize("case", [ADAPTIVE_CASES[1], ADAPTIVE_CASES[2]])
def test_adaptive_pools_grad(case, path):
    xs, size = case
    check_grads(lambda x: em.adaptive_avg_pool(x, size), [rand(*xs)])
    check_grads(lambda x: em.adaptive_max_pool(x, size), [rand(*xs)])


@pytest.mark.parametrize("case", [INTERP_CASES[2], INTERP_CASES[6], INTERP_CASES[8], INTERP_CASES[9]])
def test_interpolate_grad(case, path):
    xs, size, scale_factor, mode, align_corners = case
    check_grads(lambda x: em.interpolate(x, size, scale_factor, mode, align_corners), [rand(*xs)])


@pytest.mark.parametrize("case", [UNFOLD_CASES[0], UNFOLD_CASES[2]])
def test_unfold_fold_grad(case, path):
    spatial, c, kernel, stride, padding, dilation = case
    x = rand(1, c, *spatial)
    check_grads(lambda t: em.unfold(t, kernel, stride, padding, dilation), [x])
    cols = ref_unfold(x, kernel, stride, padding, dilation)
    check_grads(lambda t: em.fold(t, spatial, kernel, stride, padding, dilation), [rand(*cols.shape)])


def test_training_uses_the_native_kernel(monkeypatch):
    calls = []
    native = CPU.backend.implementation("conv")

    def counting(*args, **kwargs):
        calls.append(1)
        return native(*args, **kwargs)

    monkeypatch.setitem(CPU._impls, "conv", counting)
    x = em.tensor(rand(2, 3, 6, 6), device=AD, requires_grad=True)
    w = em.tensor(rand(4, 3, 3, 3, seed=1), device=AD, requires_grad=True)
    em.conv(x, w, padding=1).sum().backward()
    assert calls and x.grad is not None and w.grad.shape == (4, 3, 3, 3)
    assert set(OPS) <= CPU.backend.capabilities.native_ops


def test_second_derivative_through_conv():
    x = em.tensor(rand(1, 2, 5), device=AD, requires_grad=True)
    w = em.tensor(rand(3, 2, 2, seed=1), device=AD, requires_grad=True)
    y = (em.conv(x, w) ** 2).sum()
    y.backward(create_graph=True)
    gx = x.grad
    x.grad = None
    w.grad = None
    gx.sum().backward()
    # the gradient of sum(dy/dx) with respect to x, against central differences
    xa, wa = x.numpy().copy(), w.numpy()

    def dydx_sum(xv):
        xt = em.tensor(xv, device=AD, requires_grad=True)
        (em.conv(xt, em.tensor(wa)) ** 2).sum().backward()
        return xt.grad.numpy().sum()

    eps = 1e-6
    num = np.zeros_like(xa)
    for idx in np.ndindex(xa.shape):
        hi, lo = xa.copy(), xa.copy()
        hi[idx] += eps
        lo[idx] -= eps
        num[idx] = (dydx_sum(hi) - dydx_sum(lo)) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-5, atol=1e-6)


def test_max_pool_ties_route_to_the_first_maximum(path):
    x = em.tensor([[[1.0, 1.0, 0.0, 2.0, 3.0, 3.0]]], device=AD, requires_grad=True)
    (em.max_pool(x, 2) * em.tensor([[[1.0, 2.0, 4.0]]], device=AD)).sum().backward()
    assert x.grad.tolist() == [[[1.0, 0.0, 0.0, 2.0, 4.0, 0.0]]]
    x.grad = None
    (em.adaptive_max_pool(x, 2) * em.tensor([[[1.0, 2.0]]], device=AD)).sum().backward()
    assert x.grad.tolist() == [[[1.0, 0.0, 0.0, 0.0, 2.0, 0.0]]]


def test_second_derivative_through_max_pool(path):
    # x.grad is linear in the output seed s; its derivative with respect to s is checked numerically
    xa, r = rand(1, 2, 5, 6), rand(1, 2, 5, 6, seed=4)

    def grad_x(sv, create_graph=False):
        x = em.tensor(xa, device=AD, requires_grad=True)
        s = em.tensor(sv, device=AD, requires_grad=True)
        (em.max_pool(x, 2, 1, 1, ceil_mode=True) * s).sum().backward(create_graph=create_graph)
        return x.grad, s

    sa = rand(*em.max_pool(em.tensor(xa), 2, 1, 1, ceil_mode=True).shape, seed=5)
    gx, s = grad_x(sa, create_graph=True)
    s.grad = None  # the first backward filled it with d(sum)/ds
    (gx * em.tensor(r, device=AD)).sum().backward()
    num = np.zeros_like(sa)
    for idx in np.ndindex(sa.shape):
        e = np.zeros_like(sa)
        e[idx] = 1.0
        num[idx] = (grad_x(e)[0].numpy() * r).sum()
    np.testing.assert_allclose(s.grad.numpy(), num, rtol=1e-10, atol=1e-10)


# -- errors --------------------------------------------------------------------------------
def test_errors_name_the_argument():
    x = em.tensor(rand(1, 4, 6, 6))
    with pytest.raises(ShapeError, match="input channels"):
        em.conv(x, em.tensor(rand(2, 3, 3, 3)))
    with pytest.raises(ShapeError, match="groups=3 does not divide"):
        em.conv(x, em.tensor(rand(3, 2, 3, 3)), groups=3)
    with pytest.raises(ShapeError, match="larger than the padded input"):
        em.conv(x, em.tensor(rand(2, 4, 7, 3)))
    with pytest.raises(ShapeError, match="same' needs stride 1"):
        em.conv(x, em.tensor(rand(2, 4, 3, 3)), stride=2, padding="same")
    with pytest.raises(ShapeError, match="bias must have shape"):
        em.conv(x, em.tensor(rand(2, 4, 3, 3)), em.tensor(rand(3)))
    with pytest.raises(DTypeError, match="weight has dtype"):
        em.conv(x, em.tensor(rand(2, 4, 3, 3), dtype=em.float32))
    with pytest.raises(DTypeError, match="floating-point"):
        em.conv(em.tensor(np.ones((1, 1, 4), dtype=np.int64)), em.tensor(np.ones((1, 1, 2), dtype=np.int64)))
    with pytest.raises(ShapeError, match="stride"):
        em.conv(x, em.tensor(rand(2, 4, 3, 3)), stride=(1, 0))
    with pytest.raises(ShapeError, match="expects 4 input channels"):
        em.conv_transpose(em.tensor(rand(1, 3, 4, 4)), em.tensor(rand(4, 2, 3, 3)))
    with pytest.raises(ShapeError, match="output_padding"):
        em.conv_transpose(x, em.tensor(rand(4, 2, 3, 3)), stride=2, output_padding=2)
    with pytest.raises(ShapeError, match="at most half"):
        em.max_pool(x, 2, padding=2)
    with pytest.raises(ShapeError, match="larger than the padded input"):
        em.avg_pool(x, 7)
    with pytest.raises(ShapeError, match="has 9 blocks"):
        em.fold(em.tensor(rand(1, 8, 10)), (4, 4), 2, padding=1, stride=2)
    with pytest.raises(ShapeError, match="'bilinear' needs 2 spatial"):
        em.interpolate(em.tensor(rand(1, 2, 5)), size=4, mode="bilinear")
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        em.interpolate(x, size=4, scale_factor=2.0)
    with pytest.raises(ShapeError, match="spatial dim"):
        em.max_pool(em.tensor(rand(4, 4)), 2)


# -- golden values from PyTorch ----------------------------------------------------------
def tt(a):
    return torch.from_numpy(np.array(a))


@pytest.mark.skipif(torch is None, reason=NO_TORCH)
@pytest.mark.filterwarnings("ignore:Using padding='same'")
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_matches_torch(case):
    xs, ws, has_bias, stride, padding, dilation, groups = case
    x, w = rand(*xs), rand(*ws, seed=1)
    b = rand(ws[0], seed=2) if has_bias else None
    fn = {1: TF.conv1d, 2: TF.conv2d, 3: TF.conv3d}[len(xs) - 2]
    ref = fn(tt(x), tt(w), None if b is None else tt(b), stride, padding, dilation, groups).numpy()
    y = em.conv(em.tensor(x), em.tensor(w), None if b is None else em.tensor(b), stride, padding, dilation, groups)
    close(y, ref)


@pytest.mark.skipif(torch is None, reason=NO_TORCH)
@pytest.mark.parametrize("case", CONV_T_CASES)
def test_conv_transpose_matches_torch(case):
    xs, ws, has_bias, stride, padding, output_padding, dilation, groups = case
    x, w = rand(*xs), rand(*ws, seed=1)
    b = rand(ws[1] * groups, seed=2) if has_bias else None
    fn = {1: TF.conv_transpose1d, 2: TF.conv_transpose2d, 3: TF.conv_transpose3d}[len(xs) - 2]
    ref = fn(tt(x), tt(w), None if b is None else tt(b), stride, padding, output_padding, groups, dilation).numpy()
    y = em.conv_transpose(
        em.tensor(x),
        em.tensor(w),
        None if b is None else em.tensor(b),
        stride,
        padding,
        output_padding,
        dilation,
        groups,
    )
    close(y, ref)


@pytest.mark.skipif(torch is None, reason=NO_TORCH)
def test_pools_match_torch():
    for xs, kernel, stride, padding, dilation, ceil_mode in MAX_CASES:
        x = rand(*xs)
        fn = {1: TF.max_pool1d, 2: TF.max_pool2d, 3: TF.max_pool3d}[len(xs) - 2]
        ref = fn(tt(x), kernel, stride, padding, dilation, ceil_mode).numpy()
        close(em.max_pool(em.tensor(x), kernel, stride, padding, dilation, ceil_mode), ref)
    for xs, kernel, stride, padding, ceil_mode, count_include_pad in AVG_CASES:
        x = rand(*xs)
        fn = {1: TF.avg_pool1d, 2: TF.avg_pool2d, 3: TF.avg_pool3d}[len(xs) - 2]
        ref = fn(tt(x), kernel, stride, padding, ceil_mode, count_include_pad).numpy()
        close(em.avg_pool(em.tensor(x), kernel, stride, padding, ceil_mode, count_include_pad), ref)
    for xs, size in ADAPTIVE_CASES:
        x = rand(*xs)
        nd = len(xs) - 2
        avg = {1: TF.adaptive_avg_pool1d, 2: TF.adaptive_avg_pool2d, 3: TF.adaptive_avg_pool3d}[nd]
        mx = {1: TF.adaptive_max_pool1d, 2: TF.adaptive_max_pool2d, 3: TF.adaptive_max_pool3d}[nd]
        close(em.adaptive_avg_pool(em.tensor(x), size), avg(tt(x), size).numpy())
        close(em.adaptive_max_pool(em.tensor(x), size), mx(tt(x), size).numpy())


@pytest.mark.skipif(torch is None, reason=NO_TORCH)
@pytest.mark.parametrize("case", INTERP_CASES)
def test_interpolate_matches_torch(case):
    xs, size, scale_factor, mode, align_corners = case
    x = rand(*xs)
    ref = TF.interpolate(tt(x), size, scale_factor, mode, align_corners).numpy()
    close(em.interpolate(em.tensor(x), size, scale_factor, mode, align_corners), ref)


@pytest.mark.skipif(torch is None, reason=NO_TORCH)
def test_unfold_fold_match_torch():
    for spatial, c, kernel, stride, padding, dilation in UNFOLD_CASES:
        if len(spatial) != 2:
            continue  # torch's unfold / fold are 2-D only
        x = rand(2, c, *spatial)
        ref = TF.unfold(tt(x), kernel, dilation, padding, stride).numpy()
        close(em.unfold(em.tensor(x), kernel, stride, padding, dilation), ref)
        r = rand(*ref.shape, seed=3)
        close(
            em.fold(em.tensor(r), spatial, kernel, stride, padding, dilation),
            TF.fold(tt(r), spatial, kernel, dilation, padding, stride).numpy(),
        )


@pytest.mark.skipif(torch is None, reason=NO_TORCH)
def test_gradients_match_torch():
    x, w, b = rand(2, 4, 7, 6), rand(6, 2, 3, 3, seed=1), rand(6, seed=2)
    tx, tw, tb = (tt(a).requires_grad_() for a in (x, w, b))
    ty = TF.max_pool2d(TF.conv2d(tx, tw, tb, (2, 1), 1, 1, 2), 2, 1, 1, ceil_mode=True)
    seed = rand(*ty.shape, seed=3)
    (ty * tt(seed)).sum().backward()
    ex, ew, eb = (em.tensor(a, device=AD, requires_grad=True) for a in (x, w, b))
    y = em.max_pool(em.conv(ex, ew, eb, (2, 1), 1, 1, 2), 2, 1, 1, ceil_mode=True)
    (y * em.tensor(seed, device=AD)).sum().backward()
    for e, t in ((ex, tx), (ew, tw), (eb, tb)):
        close(e.grad, t.grad.numpy(), 1e-9)

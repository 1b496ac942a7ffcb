"""Convolution, pooling, interpolation and im2col over (N, C, *spatial), PyTorch semantics.

The references are direct numpy loops over kernel offsets, written from the PyTorch
definitions (not from ember's code). Rows skip, with the reason, on an ember without the
function.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

import ember as em

from ..inputs import Case, Domain
from .base import FLOAT, OpSpec, x

__all__ = ["CONV", "CONV_FUNCTIONS"]

CONV_FUNCTIONS = (
    "conv",
    "conv_transpose",
    "max_pool",
    "avg_pool",
    "adaptive_avg_pool",
    "adaptive_max_pool",
    "interpolate",
    "unfold",
    "fold",
)


def _available(name: str):
    def check() -> str | None:
        if hasattr(em, name):
            return None
        return f"ember.{name} does not exist in this ember ({em.__version__}); its conformance rows wait for it"

    return check


def _fn(name: str):
    """``ember.<name>`` looked up at call time (the function may arrive after import)."""
    return lambda *args, **kwargs: getattr(em, name)(*args, **kwargs)


def _tup(v, nd):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * nd


def _window_slices(offset, stride, count):
    return tuple(slice(o, o + s * (n - 1) + 1, s) for o, s, n in zip(offset, stride, count))


def np_conv(a, w, b=None, stride=1, padding=0, dilation=1, groups=1):
    nd = w.ndim - 2
    st, dil, k = _tup(stride, nd), _tup(dilation, nd), w.shape[2:]
    if padding == "valid":
        pads = [(0, 0)] * nd
    elif padding == "same":
        pads = [(d * (kk - 1) // 2, d * (kk - 1) - d * (kk - 1) // 2) for d, kk in zip(dil, k)]
    else:
        pads = [(p, p) for p in _tup(padding, nd)]
    unbatched = a.ndim == nd + 1
    if unbatched:
        a = a[None]
    ap = np.pad(a, [(0, 0), (0, 0)] + pads)
    out_sp = [(ap.shape[2 + i] - dil[i] * (k[i] - 1) - 1) // st[i] + 1 for i in range(nd)]
    n, c = a.shape[:2]
    o = w.shape[0]
    cg, og = c // groups, o // groups
    out = np.zeros((n, o, *out_sp))
    for kidx in itertools.product(*(range(kk) for kk in k)):
        sl = _window_slices([ki * d for ki, d in zip(kidx, dil)], st, out_sp)
        patch = ap[(slice(None), slice(None)) + sl]
        for g in range(groups):
            wk = w[(slice(g * og, (g + 1) * og), slice(None)) + kidx]
            out[:, g * og : (g + 1) * og] += np.einsum("nc...,oc->no...", patch[:, g * cg : (g + 1) * cg], wk)
    if b is not None:
        out += b.reshape((1, -1) + (1,) * nd)
    return out[0] if unbatched else out


def np_conv_transpose(a, w, b=None, stride=1, padding=0, output_padding=0, dilation=1, groups=1):
    nd = w.ndim - 2
    st, dil, pad, opad, k = (
        _tup(stride, nd),
        _tup(dilation, nd),
        _tup(padding, nd),
        _tup(output_padding, nd),
        w.shape[2:],
    )
    n, c = a.shape[:2]
    sp = a.shape[2:]
    cg, og = c // groups, w.shape[1]
    full = np.zeros(
        (n, og * groups) + tuple((s - 1) * t + d * (kk - 1) + 1 + op for s, t, d, kk, op in zip(sp, st, dil, k, opad))
    )
    for kidx in itertools.product(*(range(kk) for kk in k)):
        sl = _window_slices([ki * d for ki, d in zip(kidx, dil)], st, sp)
        for g in range(groups):
            wk = w[(slice(g * cg, (g + 1) * cg), slice(None)) + kidx]
            contrib = np.einsum("nc...,co->no...", a[:, g * cg : (g + 1) * cg], wk)
            full[(slice(None), slice(g * og, (g + 1) * og)) + sl] += contrib
    size = [(s - 1) * t - 2 * p + d * (kk - 1) + op + 1 for s, t, p, d, kk, op in zip(sp, st, pad, dil, k, opad)]
    out = full[(slice(None), slice(None)) + tuple(slice(p, p + m) for p, m in zip(pad, size))]
    if b is not None:
        out = out + b.reshape((1, -1) + (1,) * nd)
    return out


def _blocks(sp, k, st, pad, dil):
    return [(s + 2 * p - d * (kk - 1) - 1) // t + 1 for s, kk, t, p, d in zip(sp, k, st, pad, dil)]


def np_unfold(a, kernel_size, stride=1, padding=0, dilation=1):
    nd = a.ndim - 2
    k, st, pad, dil = _tup(kernel_size, nd), _tup(stride, nd), _tup(padding, nd), _tup(dilation, nd)
    ap = np.pad(a, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    blocks = _blocks(a.shape[2:], k, st, pad, dil)
    n, c = a.shape[:2]
    cols = np.zeros((n, c, math.prod(k), math.prod(blocks)))
    for j, kidx in enumerate(itertools.product(*(range(kk) for kk in k))):
        sl = _window_slices([ki * d for ki, d in zip(kidx, dil)], st, blocks)
        cols[:, :, j] = ap[(slice(None), slice(None)) + sl].reshape(n, c, -1)
    return cols.reshape(n, c * math.prod(k), -1)


def np_fold(a, output_size, kernel_size, stride=1, padding=0, dilation=1):
    nd = len(_tup(kernel_size, 2)) if not isinstance(kernel_size, int) else len(_tup(output_size, 2))
    size, k = _tup(output_size, nd), _tup(kernel_size, nd)
    st, pad, dil = _tup(stride, nd), _tup(padding, nd), _tup(dilation, nd)
    n = a.shape[0]
    c = a.shape[1] // math.prod(k)
    blocks = _blocks(size, k, st, pad, dil)
    out = np.zeros((n, c) + tuple(s + 2 * p for s, p in zip(size, pad)))
    cols = a.reshape(n, c, math.prod(k), *blocks)
    for j, kidx in enumerate(itertools.product(*(range(kk) for kk in k))):
        sl = _window_slices([ki * d for ki, d in zip(kidx, dil)], st, blocks)
        out[(slice(None), slice(None)) + sl] += cols[:, :, j]
    return out[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(pad, size))]


def _pool_sizes(sp, k, st, pad, dil, ceil_mode):
    out = []
    for s, kk, t, p, d in zip(sp, k, st, pad, dil):
        span = s + 2 * p - d * (kk - 1) - 1
        o = (-(-span // t) if ceil_mode else span // t) + 1
        if ceil_mode and (o - 1) * t >= s + p:
            o -= 1
        out.append(o)
    return out


def np_max_pool(a, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
    nd = a.ndim - 2
    k = _tup(kernel_size, nd)
    st = k if stride is None else _tup(stride, nd)
    pad, dil = _tup(padding, nd), _tup(dilation, nd)
    out_sp = _pool_sizes(a.shape[2:], k, st, pad, dil, ceil_mode)
    hi = [
        max(p, (o - 1) * t + d * (kk - 1) + 1 - s - p)
        for o, t, d, kk, s, p in zip(out_sp, st, dil, k, a.shape[2:], pad)
    ]
    ap = np.pad(a, [(0, 0), (0, 0)] + list(zip(pad, hi)), constant_values=-np.inf)
    out = np.full(a.shape[:2] + tuple(out_sp), -np.inf)
    for kidx in itertools.product(*(range(kk) for kk in k)):
        sl = _window_slices([ki * d for ki, d in zip(kidx, dil)], st, out_sp)
        out = np.maximum(out, ap[(slice(None), slice(None)) + sl])  # NaN propagates
    return out


def np_avg_pool(a, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    nd = a.ndim - 2
    k = _tup(kernel_size, nd)
    st = k if stride is None else _tup(stride, nd)
    pad = _tup(padding, nd)
    sp = a.shape[2:]
    out_sp = _pool_sizes(sp, k, st, pad, (1,) * nd, ceil_mode)
    out = np.zeros(a.shape[:2] + tuple(out_sp))
    for o in itertools.product(*(range(m) for m in out_sp)):
        box, divisor = [], 1
        for i, oi in enumerate(o):
            start = oi * st[i] - pad[i]
            end = min(start + k[i], sp[i] + pad[i])
            lo, hi_ = max(start, 0), min(end, sp[i])
            box.append(slice(lo, hi_))
            divisor *= (end - start) if count_include_pad else (hi_ - lo)
        out[(slice(None), slice(None)) + o] = (
            a[(slice(None), slice(None)) + tuple(box)].sum(axis=tuple(range(2, 2 + nd))) / divisor
        )
    return out


def _adaptive(reduce):
    def ref(a, output_size):
        nd = a.ndim - 2
        size = _tup(output_size, nd)
        sp = a.shape[2:]
        out = np.zeros(a.shape[:2] + tuple(size))
        for o in itertools.product(*(range(m) for m in size)):
            box = tuple(slice((oi * n) // m, -(-((oi + 1) * n) // m)) for oi, n, m in zip(o, sp, size))
            out[(slice(None), slice(None)) + o] = reduce(
                a[(slice(None), slice(None)) + box], axis=tuple(range(2, 2 + nd))
            )
        return out

    return ref


def np_interpolate(a, size=None, scale_factor=None, mode="nearest", align_corners=None):
    nd = a.ndim - 2
    sp = a.shape[2:]
    if size is not None:
        out_sp, ratios = _tup(size, nd), [n / m for n, m in zip(sp, _tup(size, nd))]
    else:
        f = _tup(scale_factor, nd)
        out_sp, ratios = [math.floor(n * s) for n, s in zip(sp, f)], [1.0 / s for s in f]
    out = a
    for i, (n, m, r) in enumerate(zip(sp, out_sp, ratios)):
        axis = 2 + i
        dst = np.arange(m, dtype=np.float64)
        if mode == "nearest":
            out = np.take(out, np.minimum(np.floor(dst * r).astype(np.int64), n - 1), axis=axis)
            continue
        if align_corners:
            src = dst * ((n - 1) / (m - 1) if m > 1 else 0.0)
        else:
            src = np.maximum((dst + 0.5) * r - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
        i1 = np.minimum(i0 + 1, n - 1)
        w1 = (src - i0).reshape((-1,) + (1,) * (a.ndim - axis - 1))
        out = np.take(out, i0, axis=axis) * (1.0 - w1) + np.take(out, i1, axis=axis) * w1
    return out


def _spec(name, ref, cases, **kw):
    return OpSpec(name, _fn(name), ref, FLOAT, cases, available=_available(name), grad=True, tol=4.0, **kw)


_POOL_INPUT = Domain(-3.0, 3.0)

CONV: tuple[OpSpec, ...] = (
    _spec(
        "conv",
        np_conv,
        (
            Case("1d", (x((2, 3, 7)), x((4, 3, 3)), x((4,))), grad=True),
            Case("2d_stride_pad", (x((1, 2, 6, 5)), x((3, 2, 3, 2)), x((3,))), {"stride": 2, "padding": 1}, grad=True),
            Case(
                "2d_dilation_groups", (x((2, 4, 7, 6)), x((6, 2, 3, 2))), {"dilation": (2, 1), "groups": 2}, grad=True
            ),
            Case("2d_same", (x((1, 2, 5, 6)), x((2, 2, 3, 4))), {"padding": "same"}, grad=True),
            Case(
                "2d_dilation",
                (x((2, 3, 9, 8)), x((4, 3, 3, 2)), x((4,))),
                {"dilation": (2, 3), "stride": (1, 2)},
                grad=True,
            ),
            Case("2d_valid", (x((1, 2, 5, 6)), x((2, 2, 3, 3))), {"padding": "valid"}),
            Case("3d", (x((1, 2, 4, 4, 4)), x((2, 2, 2, 3, 2)), x((2,))), {"stride": (1, 2, 1)}, grad=True),
            Case("unbatched", (x((3, 8)), x((2, 3, 3))), {"padding": 2}),
            Case("noncontig", (x((2, 3, 6, 5), "noncontig"), x((4, 3, 2, 2), "flipped"))),
        ),
        ops=("conv", "conv_weight_grad"),
    ),  # the second: conv's weight-gradient op
    _spec(
        "conv_transpose",
        np_conv_transpose,
        (
            Case("1d", (x((2, 3, 5)), x((3, 4, 3)), x((4,))), grad=True),
            Case(
                "2d_stride_pad",
                (x((1, 2, 4, 3)), x((2, 3, 3, 3)), x((3,))),
                {"stride": 2, "padding": 1, "output_padding": 1},
                grad=True,
            ),
            Case("2d_dilation_groups", (x((1, 4, 3, 4)), x((4, 2, 2, 3))), {"dilation": 2, "groups": 2}, grad=True),
            Case("3d", (x((1, 2, 3, 2, 3)), x((2, 2, 2, 2, 2))), {"stride": 2}),
        ),
    ),
    _spec(
        "unfold",
        np_unfold,
        (
            Case("2d", (x((2, 3, 5, 6)),), {"kernel_size": (2, 3)}, grad=True),
            Case(
                "2d_all",
                (x((1, 2, 7, 6)),),
                {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": (2, 1)},
                grad=True,
            ),
            Case("1d", (x((2, 2, 9)),), {"kernel_size": (3,), "stride": 2}),
        ),
    ),
    _spec(
        "fold",
        np_fold,
        (
            Case("2d", (x((2, 12, 9)),), {"output_size": (4, 5), "kernel_size": (2, 3)}, grad=True),
            Case(
                "2d_all",
                (x((1, 18, 9)),),
                {"output_size": (7, 6), "kernel_size": 3, "stride": 2, "padding": 1, "dilation": (2, 1)},
                grad=True,
            ),
        ),
    ),
    _spec(
        "max_pool",
        np_max_pool,
        (
            Case("2d", (x((2, 3, 6, 6)),), {"kernel_size": 2}, grad=True),
            Case("2d_overlap_pad", (x((1, 2, 7, 5)),), {"kernel_size": 3, "stride": 2, "padding": 1}, grad=True),
            Case(
                "1d_dilation_ceil", (x((2, 2, 10)),), {"kernel_size": 3, "stride": 2, "dilation": 2, "ceil_mode": True}
            ),
            Case("3d", (x((1, 2, 4, 4, 4)),), {"kernel_size": 2}),
            Case("noncontig", (x((2, 3, 6, 4), "noncontig"),), {"kernel_size": (2, 2)}),
            Case("special", (x((1, 2, 4, 8)),), {"kernel_size": 2}, special=True),
        ),
        domain=_POOL_INPUT,
        ops=("max_pool", "max_pool_backward"),
    ),  # the second: max_pool's gradient op
    _spec(
        "avg_pool",
        np_avg_pool,
        (
            Case("2d", (x((2, 3, 6, 6)),), {"kernel_size": 2}, grad=True),
            Case("2d_pad_include", (x((1, 2, 7, 5)),), {"kernel_size": 3, "stride": 2, "padding": 1}, grad=True),
            Case(
                "2d_pad_exclude",
                (x((1, 2, 7, 5)),),
                {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False},
                grad=True,
            ),
            Case("1d_ceil", (x((2, 2, 10)),), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
            Case("3d", (x((1, 2, 4, 4, 4)),), {"kernel_size": 2}),
        ),
        domain=_POOL_INPUT,
    ),
    _spec(
        "adaptive_avg_pool",
        _adaptive(np.mean),
        (
            Case("2d", (x((2, 3, 7, 5)),), {"output_size": (3, 2)}, grad=True),
            Case("1d_grow", (x((2, 2, 3)),), {"output_size": 5}),
            Case("3d", (x((1, 2, 4, 5, 3)),), {"output_size": 2}),
        ),
    ),
    _spec(
        "adaptive_max_pool",
        _adaptive(np.max),
        (
            Case("2d", (x((2, 3, 7, 5)),), {"output_size": (3, 2)}, grad=True),
            Case("1d_grow", (x((2, 2, 3)),), {"output_size": 5}),
            Case("3d", (x((1, 2, 4, 5, 3)),), {"output_size": 2}),
        ),
    ),
    _spec(
        "interpolate",
        np_interpolate,
        (
            Case("nearest_size", (x((2, 3, 4, 5)),), {"size": (7, 3)}, grad=True),
            Case("nearest_scale", (x((1, 2, 5)),), {"scale_factor": 2.5}),
            Case("linear", (x((2, 2, 5)),), {"size": 9, "mode": "linear"}, grad=True),
            Case("linear_align", (x((2, 2, 5)),), {"size": 8, "mode": "linear", "align_corners": True}, grad=True),
            Case("bilinear", (x((1, 2, 4, 3)),), {"size": (6, 5), "mode": "bilinear"}, grad=True),
            Case("bilinear_down", (x((1, 2, 8, 7)),), {"scale_factor": 0.5, "mode": "bilinear"}),
            Case("trilinear", (x((1, 1, 3, 4, 2)),), {"size": (5, 3, 4), "mode": "trilinear", "align_corners": True}),
        ),
    ),
)

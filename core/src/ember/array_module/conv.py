"""Kernels for ember's convolution, pooling and interpolation ops (signatures of the composites
in ``ember.ops.conv``: handles positionally, parameters by keyword), over any registered array
module: each finds its library from its first input.

im2col is a strided window view (``sliding_window_view``) copied once into (N, C * K, L)
columns for a batched BLAS matmul; col2im adds strided slices, one per kernel offset. 16-bit floats
compute in float32 and round back.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from ember.ops.pooling import adaptive_windows, interpolation_weights

from .registry import module_of

__all__ = ["KERNELS"]
Pads = tuple[tuple[int, int], ...]


def _wide(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compute 16-bit float inputs in float32 and round the result back."""

    def wrapped(*arrays: Any, **kw: Any) -> Any:
        xp = module_of(arrays[0]).xp
        dt = arrays[0].dtype
        if dt.itemsize == 2:
            return xp.asarray(fn(*(a.astype(xp.float32) for a in arrays), **kw)).astype(dt)
        return xp.asarray(fn(*arrays, **kw))

    wrapped.__name__ = fn.__name__
    return wrapped


def _pad(x: Any, padding: Pads, value: float) -> Any:
    xp = module_of(x).xp
    if not any(lo or hi for lo, hi in padding):
        return x
    return xp.pad(x, ((0, 0), (0, 0)) + tuple(padding), mode="constant", constant_values=value)


def _windows(
    x: Any,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    value: float,
) -> Any:
    """A (N, C, *blocks, *kernel) strided view of the windows of padded ``x`` (no copy)."""
    xp = module_of(x).xp
    nd = len(kernel)
    spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    view = xp.lib.stride_tricks.sliding_window_view(_pad(x, padding, value), spans, axis=tuple(range(2, 2 + nd)))
    pick = (
        (slice(None),) * 2 + tuple(slice(None, None, s) for s in stride) + tuple(slice(None, None, d) for d in dilation)
    )
    return view[pick]


def _col2im(
    cols: Any,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
) -> Any:
    """Sum (N, C, *kernel, *blocks) columns into (N, C, *size): one strided add per kernel offset."""
    xp = module_of(cols).xp
    nd = len(size)
    n, c = cols.shape[:2]
    kernel = cols.shape[2 : 2 + nd]
    blocks = cols.shape[2 + nd :]
    padded = tuple(s + lo + hi for s, (lo, hi) in zip(size, padding))
    crop = (slice(None), slice(None)) + tuple(slice(lo, lo + s) for (lo, _), s in zip(padding, size))
    if all(s == k for s, k in zip(stride, kernel)) and all(d == 1 for d in dilation):
        # non-overlapping blocks tile the input: interleave (kernel, blocks) axes, no additions
        order = (0, 1) + tuple(v for i in range(nd) for v in (2 + nd + i, 2 + i))
        tiled = cols.transpose(order).reshape((n, c) + tuple(b * k for b, k in zip(blocks, kernel)))
        rest = tuple((0, p - b * k) for p, b, k in zip(padded, blocks, kernel))
        return xp.pad(tiled, ((0, 0), (0, 0)) + rest)[crop]
    out = xp.zeros((n, c) + padded, dtype=cols.dtype)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        where = tuple(slice(o * d, o * d + (b - 1) * s + 1, s) for o, d, b, s in zip(offsets, dilation, blocks, stride))
        out[(slice(None), slice(None)) + where] += cols[(slice(None), slice(None)) + offsets]
    return out[crop]


def _add_bias(y: Any, bias: tuple[Any, ...]) -> Any:
    if bias:
        y += bias[0].reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


@_wide
def unfold(
    x: Any,
    *,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    value: float,
) -> Any:
    nd = len(kernel)
    win = _windows(x, kernel, stride, padding, dilation, value)
    n, c = x.shape[:2]
    order = (0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd))
    return win.transpose(order).reshape(n, c * math.prod(kernel), -1)


@_wide
def fold(
    cols: Any,
    *,
    size: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
) -> Any:
    xp = module_of(cols).xp
    n = cols.shape[0]
    c = cols.shape[1] // math.prod(kernel)
    blocks = tuple(
        (sz + lo + hi - d * (k - 1) - 1) // s + 1
        for sz, (lo, hi), k, s, d in zip(size, padding, kernel, stride, dilation)
    )
    return xp.ascontiguousarray(_col2im(cols.reshape((n, c) + kernel + blocks), size, stride, padding, dilation))


def _batch_step(n: int, per_sample: int, limit: int) -> int:
    """Samples per slice of the batch whose im2col columns hold at most ``limit`` elements (at least one):
    the columns are prod(kernel) times the input, the largest buffer of a convolution otherwise."""
    if per_sample <= 0:
        return max(n, 1)
    return min(max(n, 1), max(limit // per_sample, 1))


@_wide
def conv(
    x: Any,
    w: Any,
    *bias: Any,
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    groups: int,
) -> Any:
    xp = module_of(x).xp
    n, cin = x.shape[:2]
    cout = w.shape[0]
    kernel = w.shape[2:]
    nd = len(kernel)
    win = _windows(x, kernel, stride, padding, dilation, 0.0)  # (N, Cin, *blocks, *kernel)
    blocks = win.shape[2 : 2 + nd]
    length = math.prod(blocks)
    cg = cin // groups
    wm = w.reshape(groups, cout // groups, -1)
    # (N, G, Cg, *kernel, *blocks) -> (N, G, Cg * K, L): the one im2col copy, in the order that
    # keeps each sample's rows contiguous, so the matmul writes the output layout directly
    order = (0, 1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(3, 3 + nd))
    step = _batch_step(n, cin * math.prod(kernel) * length, max(x.size, n * cout * length))
    y = None
    for start in range(0, max(n, 1), step):  # one pass over an empty batch
        part = win[start : start + step]
        m = part.shape[0]
        cols = (
            part.reshape((m, groups, cg) + blocks + kernel)
            .transpose(order)
            .reshape(m, groups, cg * math.prod(kernel), length)
        )
        piece = xp.matmul(wm, cols).reshape((m, cout) + blocks)  # (m, G, Cout / G, L)
        if step >= n:
            y = piece
            break
        if y is None:
            y = xp.empty((n, cout) + blocks, dtype=piece.dtype)
        y[start : start + m] = piece
        del cols, piece
    return _add_bias(y, bias)


@_wide
def conv_weight_grad(
    g: Any,
    x: Any,
    *,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    groups: int,
) -> Any:
    """A convolution's weight gradient: sum over the batch of g[n, g] @ cols[n, g]^T, over slices of
    the batch whose im2col columns hold no more elements than the larger of ``g`` and ``x``."""
    xp = module_of(g).xp
    n, cout = g.shape[:2]
    nd = len(kernel)
    length = math.prod(g.shape[2:])
    win = _windows(x, kernel, stride, padding, dilation, 0.0)
    order = (0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd))
    gm = g.reshape(n, groups, cout // groups, length)
    step = _batch_step(n, x.shape[1] * math.prod(kernel) * length, max(x.size, g.size))
    gw = None
    for start in range(0, max(n, 1), step):  # one pass over an empty batch
        cols = (
            win[start : start + step]
            .transpose(order)
            .reshape(-1, groups, x.shape[1] // groups * math.prod(kernel), length)
        )
        part = xp.matmul(gm[start : start + step], xp.swapaxes(cols, -1, -2)).sum(axis=0)
        gw = part if gw is None else gw + part
        del cols
    return gw.reshape((cout, x.shape[1] // groups) + tuple(kernel))


@_wide
def conv_transpose(
    x: Any,
    w: Any,
    *bias: Any,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    groups: int,
) -> Any:
    xp = module_of(x).xp
    n, cin = x.shape[:2]
    spatial = x.shape[2:]
    kernel = w.shape[2:]
    cog = w.shape[1]
    wm = w.reshape(groups, cin // groups, -1).transpose(0, 2, 1)  # (G, Cout/G * K, Cin/G)
    length = math.prod(spatial)
    step = _batch_step(n, groups * cog * math.prod(kernel) * length, max(x.size, n * groups * cog * math.prod(size)))
    y = None
    for start in range(0, max(n, 1), step):  # one pass over an empty batch
        part = x[start : start + step]
        m = part.shape[0]
        cols = xp.matmul(wm, part.reshape(m, groups, cin // groups, length))  # (m, G, Cout/G * K, L)
        cols = cols.reshape((m, groups * cog) + kernel + spatial)
        piece = xp.ascontiguousarray(_col2im(cols, size, stride, padding, dilation))
        if step >= n:
            y = piece
            break
        if y is None:
            y = xp.empty((n, groups * cog) + tuple(size), dtype=piece.dtype)
        y[start : start + m] = piece
        del cols, piece
    return _add_bias(y, bias)


def _reduce_windows(
    x: Any,
    ufunc: str,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    value: float,
) -> Any:
    """Combine the windows of padded ``x`` with ``ufunc``, one strided slice per kernel offset
    (much faster than reducing a window view over its trailing axes)."""
    return _combine_windows(_pad(x, padding, value), ufunc, kernel, stride, dilation)


def _combine_windows(
    padded: Any, ufunc: str, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]
) -> Any:
    """:func:`_reduce_windows` of an input padded already."""
    xp = module_of(padded).xp
    blocks = tuple((p - d * (k - 1) - 1) // s + 1 for p, k, s, d in zip(padded.shape[2:], kernel, stride, dilation))
    out = None
    for offsets in itertools.product(*(range(k) for k in kernel)):
        sl = tuple(slice(o * d, o * d + (b - 1) * s + 1, s) for o, d, b, s in zip(offsets, dilation, blocks, stride))
        piece = padded[(slice(None), slice(None)) + sl]
        if out is None:
            out = piece.copy()
        else:
            getattr(xp, ufunc)(out, piece, out=out)
    return out


@_wide
def max_pool(
    x: Any, *, kernel: tuple[int, ...], stride: tuple[int, ...], padding: Pads, dilation: tuple[int, ...]
) -> Any:
    xp = module_of(x).xp
    return _reduce_windows(x, "maximum", kernel, stride, padding, dilation, -xp.inf)


@_wide
def max_pool_backward(
    g: Any,
    x: Any,
    *,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
) -> Any:
    """Route each window's gradient to its first maximum, one strided slice per kernel offset
    (the maxima found again from ``x``, as the forward found them)."""
    xp = module_of(g).xp
    padded = _pad(x, padding, -xp.inf)
    out = _combine_windows(padded, "maximum", kernel, stride, dilation)
    grad = xp.zeros(padded.shape, dtype=g.dtype)
    found = xp.zeros(out.shape, dtype=bool)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        sl = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (b - 1) * s + 1, s) for o, d, b, s in zip(offsets, dilation, out.shape[2:], stride)
        )
        hit = padded[sl] == out
        hit &= ~found
        found |= hit
        grad[sl] += xp.where(hit, g, 0)  # (an add with where= into a strided view is slower)
    crop = tuple(slice(lo, lo + n) for (lo, _), n in zip(padding, x.shape[2:]))
    return xp.ascontiguousarray(grad[(slice(None), slice(None)) + crop])


@_wide
def avg_pool(
    x: Any,
    *,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    divisor: tuple[tuple[int, ...], ...],
) -> Any:
    xp = module_of(x).xp
    total = _reduce_windows(x, "add", kernel, stride, padding, (1,) * len(kernel), 0.0)
    div = xp.ones((), dtype=x.dtype)
    for d in divisor:
        div = xp.multiply.outer(div, xp.asarray(d, dtype=x.dtype))
    total /= div
    return total


@_wide
def adaptive_avg_pool(x: Any, *, size: tuple[int, ...]) -> Any:
    xp = module_of(x).xp
    y = x
    for i, o in enumerate(size):
        axis = 2 + i
        n = y.shape[axis]
        if n == o:
            continue
        if n % o == 0:
            y = y.reshape(y.shape[:axis] + (o, n // o) + y.shape[axis + 1 :]).mean(axis=axis + 1)
            continue
        start, end = (xp.asarray(v) for v in adaptive_windows(n, o))
        pos = xp.arange(n)
        mat = ((pos >= start[:, None]) & (pos < end[:, None])) / (end - start)[:, None]
        y = xp.moveaxis(xp.matmul(xp.moveaxis(y, axis, -1), mat.T.astype(x.dtype)), -1, axis)
    return xp.ascontiguousarray(y)


@_wide
def adaptive_max_pool(x: Any, *, size: tuple[int, ...]) -> Any:
    xp = module_of(x).xp
    y = x
    for i, o in enumerate(size):
        axis = 2 + i
        n = y.shape[axis]
        start, end = adaptive_windows(n, o)
        k = int((end - start).max())
        start, end = xp.asarray(start), xp.asarray(end)
        idx = xp.minimum(start[:, None] + xp.arange(k), end[:, None] - 1)
        y = xp.take(y, idx, axis=axis).max(axis=axis + 1)  # max is separable over a box
    return y


@_wide
def interpolate(
    x: Any, *, size: tuple[int, ...], mode: str, align_corners: bool, scales: tuple[float | None, ...]
) -> Any:
    xp = module_of(x).xp
    y = x
    for i, (o, scale) in enumerate(zip(size, scales)):
        axis = 2 + i
        i0, i1, w1 = interpolation_weights(y.shape[axis], o, mode, align_corners, scale)
        y0 = xp.take(y, xp.asarray(i0), axis=axis)
        if mode == "nearest" or not w1.any():
            y = y0
            continue
        shape = (-1,) + (1,) * (y.ndim - axis - 1)
        w1 = xp.asarray(w1.astype(x.dtype).reshape(shape))
        y = y0 * (1 - w1) + xp.take(y, xp.asarray(i1), axis=axis) * w1
    return y


KERNELS: dict[str, Callable[..., Any]] = {
    "conv": conv,
    "conv_transpose": conv_transpose,
    "conv_weight_grad": conv_weight_grad,
    "unfold": unfold,
    "fold": fold,
    "max_pool": max_pool,
    "max_pool_backward": max_pool_backward,
    "avg_pool": avg_pool,
    "adaptive_avg_pool": adaptive_avg_pool,
    "adaptive_max_pool": adaptive_max_pool,
    "interpolate": interpolate,
}

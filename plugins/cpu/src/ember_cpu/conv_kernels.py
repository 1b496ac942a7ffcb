"""numpy kernels for ember's convolution, pooling and interpolation ops (signatures of the
composites in ``ember.ops.conv``: handles positionally, parameters by keyword).

im2col is a strided window view (``sliding_window_view``) copied once into (N, C * K, L)
columns for a batched BLAS matmul; col2im adds strided slices, one per kernel offset. 16-bit floats
compute in float32 and round back.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ember.ops.pooling import adaptive_windows, interpolation_weights

_F32 = np.dtype(np.float32)
Pads = tuple[tuple[int, int], ...]


def _wide(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Compute 16-bit float inputs in float32 and round the result back."""

    def wrapped(*arrays: np.ndarray, **kw: Any) -> np.ndarray:
        dt = arrays[0].dtype
        if dt.itemsize == 2:
            return np.asarray(fn(*(a.astype(_F32) for a in arrays), **kw)).astype(dt)
        return np.asarray(fn(*arrays, **kw))

    wrapped.__name__ = fn.__name__
    return wrapped


def _pad(x: np.ndarray, padding: Pads, value: float) -> np.ndarray:
    if not any(lo or hi for lo, hi in padding):
        return x
    return np.pad(x, ((0, 0), (0, 0)) + tuple(padding), mode="constant", constant_values=value)


def _windows(
    x: np.ndarray,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    value: float,
) -> np.ndarray:
    """A (N, C, *blocks, *kernel) strided view of the windows of padded ``x`` (no copy)."""
    nd = len(kernel)
    spans = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    view = sliding_window_view(_pad(x, padding, value), spans, axis=tuple(range(2, 2 + nd)))
    pick = (
        (slice(None),) * 2 + tuple(slice(None, None, s) for s in stride) + tuple(slice(None, None, d) for d in dilation)
    )
    return view[pick]


def _col2im(
    cols: np.ndarray,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
) -> np.ndarray:
    """Sum (N, C, *kernel, *blocks) columns into (N, C, *size): one strided add per kernel offset."""
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
        return np.pad(tiled, ((0, 0), (0, 0)) + rest)[crop]
    out = np.zeros((n, c) + padded, dtype=cols.dtype)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        where = tuple(slice(o * d, o * d + (b - 1) * s + 1, s) for o, d, b, s in zip(offsets, dilation, blocks, stride))
        out[(slice(None), slice(None)) + where] += cols[(slice(None), slice(None)) + offsets]
    return out[crop]


def _add_bias(y: np.ndarray, bias: tuple[np.ndarray, ...]) -> np.ndarray:
    if bias:
        y += bias[0].reshape((1, -1) + (1,) * (y.ndim - 2))
    return y


@_wide
def unfold(
    x: np.ndarray,
    *,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    value: float,
) -> np.ndarray:
    nd = len(kernel)
    win = _windows(x, kernel, stride, padding, dilation, value)
    n, c = x.shape[:2]
    order = (0, 1) + tuple(range(2 + nd, 2 + 2 * nd)) + tuple(range(2, 2 + nd))
    return win.transpose(order).reshape(n, c * math.prod(kernel), -1)


@_wide
def fold(
    cols: np.ndarray,
    *,
    size: tuple[int, ...],
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
) -> np.ndarray:
    n = cols.shape[0]
    c = cols.shape[1] // math.prod(kernel)
    blocks = tuple(
        (sz + lo + hi - d * (k - 1) - 1) // s + 1
        for sz, (lo, hi), k, s, d in zip(size, padding, kernel, stride, dilation)
    )
    return np.ascontiguousarray(_col2im(cols.reshape((n, c) + kernel + blocks), size, stride, padding, dilation))


@_wide
def conv(
    x: np.ndarray,
    w: np.ndarray,
    *bias: np.ndarray,
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    groups: int,
) -> np.ndarray:
    n, cin = x.shape[:2]
    cout = w.shape[0]
    kernel = w.shape[2:]
    nd = len(kernel)
    win = _windows(x, kernel, stride, padding, dilation, 0.0)  # (N, Cin, *blocks, *kernel)
    blocks = win.shape[2 : 2 + nd]
    length = math.prod(blocks)
    cg = cin // groups
    # (N, G, Cg, *kernel, *blocks) -> (N, G, Cg * K, L): the one im2col copy, in the order that
    # keeps each sample's rows contiguous, so the matmul writes the output layout directly
    win = win.reshape((n, groups, cg) + blocks + kernel)
    order = (0, 1, 2) + tuple(range(3 + nd, 3 + 2 * nd)) + tuple(range(3, 3 + nd))
    cols = win.transpose(order).reshape(n, groups, cg * math.prod(kernel), length)
    y = np.matmul(w.reshape(groups, cout // groups, -1), cols)  # (N, G, Cout / G, L)
    y = y.reshape((n, cout) + blocks)
    return _add_bias(y, bias)


@_wide
def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    *bias: np.ndarray,
    size: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    groups: int,
) -> np.ndarray:
    n, cin = x.shape[:2]
    spatial = x.shape[2:]
    kernel = w.shape[2:]
    cog = w.shape[1]
    wm = w.reshape(groups, cin // groups, -1).transpose(0, 2, 1)  # (G, Cout/G * K, Cin/G)
    cols = np.matmul(wm, x.reshape(n, groups, cin // groups, -1))  # (N, G, Cout/G * K, L)
    cols = cols.reshape((n, groups * cog) + kernel + spatial)
    y = np.ascontiguousarray(_col2im(cols, size, stride, padding, dilation))
    return _add_bias(y, bias)


def _reduce_windows(
    x: np.ndarray,
    ufunc: np.ufunc,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
    value: float,
) -> np.ndarray:
    """Combine the windows of padded ``x`` with ``ufunc``, one strided slice per kernel offset
    (much faster than reducing a window view over its trailing axes)."""
    xp = _pad(x, padding, value)
    blocks = tuple((p - d * (k - 1) - 1) // s + 1 for p, k, s, d in zip(xp.shape[2:], kernel, stride, dilation))
    out = None
    for offsets in itertools.product(*(range(k) for k in kernel)):
        sl = tuple(slice(o * d, o * d + (b - 1) * s + 1, s) for o, d, b, s in zip(offsets, dilation, blocks, stride))
        piece = xp[(slice(None), slice(None)) + sl]
        if out is None:
            out = piece.copy()
        else:
            ufunc(out, piece, out=out)
    return out


@_wide
def max_pool(
    x: np.ndarray, *, kernel: tuple[int, ...], stride: tuple[int, ...], padding: Pads, dilation: tuple[int, ...]
) -> np.ndarray:
    return _reduce_windows(x, np.maximum, kernel, stride, padding, dilation, -np.inf)


@_wide
def max_pool_backward(
    g: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
    *,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    dilation: tuple[int, ...],
) -> np.ndarray:
    """Route each window's gradient to its first maximum, one strided slice per kernel offset."""
    xp = _pad(x, padding, -np.inf)
    grad = np.zeros(xp.shape, dtype=g.dtype)
    found = np.zeros(out.shape, dtype=bool)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        sl = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (b - 1) * s + 1, s) for o, d, b, s in zip(offsets, dilation, out.shape[2:], stride)
        )
        hit = xp[sl] == out
        hit &= ~found
        found |= hit
        grad[sl] += np.where(hit, g, 0)  # (an add with where= into a strided view is slower)
    crop = tuple(slice(lo, lo + n) for (lo, _), n in zip(padding, x.shape[2:]))
    return np.ascontiguousarray(grad[(slice(None), slice(None)) + crop])


@_wide
def avg_pool(
    x: np.ndarray,
    *,
    kernel: tuple[int, ...],
    stride: tuple[int, ...],
    padding: Pads,
    divisor: tuple[tuple[int, ...], ...],
) -> np.ndarray:
    total = _reduce_windows(x, np.add, kernel, stride, padding, (1,) * len(kernel), 0.0)
    div = np.ones((), dtype=x.dtype)
    for d in divisor:
        div = np.multiply.outer(div, np.asarray(d, dtype=x.dtype))
    total /= div
    return total


@_wide
def adaptive_avg_pool(x: np.ndarray, *, size: tuple[int, ...]) -> np.ndarray:
    y = x
    for i, o in enumerate(size):
        axis = 2 + i
        n = y.shape[axis]
        if n == o:
            continue
        if n % o == 0:
            y = y.reshape(y.shape[:axis] + (o, n // o) + y.shape[axis + 1 :]).mean(axis=axis + 1)
            continue
        start, end = adaptive_windows(n, o)
        pos = np.arange(n)
        mat = ((pos >= start[:, None]) & (pos < end[:, None])) / (end - start)[:, None]
        y = np.moveaxis(np.matmul(np.moveaxis(y, axis, -1), mat.T.astype(x.dtype)), -1, axis)
    return np.ascontiguousarray(y)


@_wide
def adaptive_max_pool(x: np.ndarray, *, size: tuple[int, ...]) -> np.ndarray:
    y = x
    for i, o in enumerate(size):
        axis = 2 + i
        n = y.shape[axis]
        start, end = adaptive_windows(n, o)
        k = int((end - start).max())
        idx = np.minimum(start[:, None] + np.arange(k), end[:, None] - 1)
        y = np.take(y, idx, axis=axis).max(axis=axis + 1)  # max is separable over a box
    return y


@_wide
def interpolate(
    x: np.ndarray, *, size: tuple[int, ...], mode: str, align_corners: bool, scales: tuple[float | None, ...]
) -> np.ndarray:
    y = x
    for i, (o, scale) in enumerate(zip(size, scales)):
        axis = 2 + i
        i0, i1, w1 = interpolation_weights(y.shape[axis], o, mode, align_corners, scale)
        y0 = np.take(y, i0, axis=axis)
        if mode == "nearest" or not w1.any():
            y = y0
            continue
        shape = (-1,) + (1,) * (y.ndim - axis - 1)
        w1 = w1.astype(x.dtype).reshape(shape)
        y = y0 * (1 - w1) + np.take(y, i1, axis=axis) * w1
    return y

"""ONNX handlers: signals and sampling: DFT and STFT (products with cosine and sine matrices),
the window functions, AffineGrid and GridSample (sampling positions from the grid on the host,
the gathers and weighted sums on the device)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember as em

from ..tensor import Tensor
from .ops_nn import _cubic_weights
from .registry import Context, OnnxNode, handler
from .util import bad, dtype_of, host, ints, norm_axis, on


# -- windows -------------------------------------------------------------------------------------
def _window(coeffs: list[float]) -> Any:
    def run(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
        n = ints(xs[0])[0]
        periodic = bool(node.attr("periodic", 1))
        denom = n if periodic else n - 1
        k = np.arange(n, dtype=np.float64)
        w = np.zeros(n)
        for i, c in enumerate(coeffs):
            w += (-1) ** i * c * np.cos(2 * math.pi * i * k / denom) if denom else 0
        dt = dtype_of(node.attr("output_datatype", 1), node)
        return on(w.astype(dt.numpy), ctx.device)

    return run


handler("HannWindow")(_window([0.5, 0.5]))
handler("HammingWindow")(_window([25 / 46, 21 / 46]))
handler("BlackmanWindow")(_window([0.42, 0.5, 0.08]))


# -- DFT and STFT (as products with cosine and sine matrices) -------------------------------------
def _dft_last(re: Tensor, im: Tensor | None, n: int, inverse: bool, onesided: bool) -> tuple[Tensor, Tensor]:
    """The DFT over the last axis (padded or cut to ``n``) of ``re + i*im``."""
    size = re.shape[-1]
    if size != n:
        widths = ((0, 0),) * (re.ndim - 1) + ((0, max(n - size, 0)),)
        re = em.pad(re[..., :n], widths) if n > size else re[..., :n]
        if im is not None:
            im = em.pad(im[..., :n], widths) if n > size else im[..., :n]
    rows = n // 2 + 1 if onesided else n
    k = np.arange(rows).reshape(-1, 1)
    theta = 2 * math.pi * k * np.arange(n).reshape(1, -1) / n
    s = 1.0 if inverse else -1.0
    cos = on(np.cos(theta).T.astype(re.dtype.numpy), re.device)
    sin = on((s * np.sin(theta)).T.astype(re.dtype.numpy), re.device)
    out_re = em.matmul(re, cos)
    out_im = em.matmul(re, sin)
    if im is not None:
        out_re = out_re - em.matmul(im, sin)
        out_im = out_im + em.matmul(im, cos)
    if inverse:
        out_re, out_im = out_re / float(n), out_im / float(n)
    return out_re, out_im


@handler("DFT", since=17)
def _dft(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    length = xs[1] if len(xs) > 1 else None
    if ctx.opset >= 20:
        axis = ints(xs[2])[0] if len(xs) > 2 and xs[2] is not None else -2
    else:
        axis = node.attr("axis", 1)
    axis = norm_axis(axis, x.ndim, node)
    if axis == x.ndim - 1:
        raise bad(node, "the DFT axis may not be the last (complex) axis")
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    if x.shape[-1] not in (1, 2):
        raise bad(node, f"the last axis must hold 1 (real) or 2 (complex) values, got {x.shape[-1]}")
    dt = x.dtype
    wide = dt.name == "float32" and em.float64 in x.device.backend.supported_dtypes
    if wide:  # sums of many products: accumulate in float64 where the device has it
        x = x.astype("float64")
    re = em.moveaxis(x[..., 0], axis, -1)
    im = em.moveaxis(x[..., 1], axis, -1) if x.shape[-1] == 2 else None
    given = ints(length)[0] if length is not None and length.size else None
    if inverse and onesided:  # irfft: rebuild the full spectrum from its Hermitian half
        m = re.shape[-1]
        n = given or 2 * (m - 1)
        mirror = on(np.asarray([k if k < m else n - k for k in range(n)], dtype=np.int64), x.device)
        sign = on(np.asarray([1.0 if k < m else -1.0 for k in range(n)], dtype=x.dtype.numpy), x.device)
        re = em.take(re, mirror, axis=-1)
        im = em.take(im, mirror, axis=-1) * sign if im is not None else None
        out_re, _ = _dft_last(re, im, n, True, False)
        return em.expand_dims(em.moveaxis(out_re, -1, axis), axis=-1).astype(dt)
    n = given or re.shape[-1]
    out_re, out_im = _dft_last(re, im, n, inverse, onesided)
    return em.stack([em.moveaxis(out_re, -1, axis), em.moveaxis(out_im, -1, axis)], axis=-1).astype(dt)


@handler("STFT", since=17)
def _stft(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    xs = xs + [None] * (4 - len(xs))
    signal, step_t, window, length_t = xs[:4]
    step = ints(step_t)[0]
    if length_t is not None:
        frame = ints(length_t)[0]
    elif window is not None:
        frame = window.shape[0]
    else:
        raise bad(node, "give a window or a frame_length")
    total = signal.shape[1]
    frames = 1 + (total - frame) // step
    index = (np.arange(frames).reshape(-1, 1) * step + np.arange(frame).reshape(1, -1)).reshape(-1)
    cut = em.take(signal, on(index.astype(np.int64), ctx.device), axis=1)
    cut = cut.reshape((signal.shape[0], frames, frame, signal.shape[2]))
    re = cut[..., 0]
    im = cut[..., 1] if signal.shape[2] == 2 else None
    if window is not None:
        re = re * window
        im = im * window if im is not None else None
    onesided = bool(node.attr("onesided", 1)) and im is None
    out_re, out_im = _dft_last(re, im, frame, False, onesided)
    return em.stack([out_re, out_im], axis=-1)


# -- AffineGrid -----------------------------------------------------------------------------------
@handler("AffineGrid", since=20)
def _affine_grid(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    theta, size_t = xs
    size = ints(size_t)
    align = bool(node.attr("align_corners", 0))
    spatial = size[2:]
    axes = []
    for n in spatial:
        if align:
            ramp = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        else:
            ramp = (np.arange(n) * 2.0 + 1.0) / n - 1.0
        axes.append(ramp)
    mesh = np.meshgrid(*axes, indexing="ij")  # per spatial axis, in (D,) H, W order
    coords = [m.reshape(-1) for m in mesh[::-1]]  # x (width) first
    base = np.stack(coords + [np.ones_like(coords[0])], axis=-1)  # (prod, nd + 1)
    base_t = on(base.astype(theta.dtype.numpy), ctx.device)
    grid = em.matmul(base_t, theta.mT)  # (N, prod, nd)
    return grid.reshape((size[0],) + tuple(spatial) + (len(spatial),))


# -- GridSample ----------------------------------------------------------------------------------
def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect ``x`` by the near border until it lies in [lo, hi] (ONNX's rule)."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    below, above = x < lo, x > hi
    dx = np.where(below, lo - x, x - hi)
    n = np.floor(dx / span)
    r = dx - n * span
    even = n % 2 == 0
    out = np.where(below, np.where(even, lo + r, hi - r), x)
    return np.where(above, np.where(even, hi - r, lo + r), out)


def _fetch(i: np.ndarray, d: int, padding: str, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The index each integer position ``i`` reads along a dim of size ``d``, and whether it counts."""
    if padding == "zeros":
        return np.clip(i, 0, d - 1), (i >= 0) & (i < d)
    if padding == "border":
        return np.clip(i, 0, d - 1), np.ones(i.shape, dtype=bool)
    j = np.trunc(_reflect(i.astype(np.float64), lo, hi)).astype(np.int64)
    return np.clip(j, 0, d - 1), np.ones(i.shape, dtype=bool)


@handler("GridSample", since=16)
def _grid_sample(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:

    x, grid = xs
    mode = node.attr("mode", "linear" if ctx.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = node.attr("padding_mode", "zeros")
    align = bool(node.attr("align_corners", 0))
    n, c = x.shape[:2]
    dims = list(x.shape[2:])
    nd = len(dims)
    g = host(grid).astype(np.float64).reshape(n, -1, nd)[..., ::-1]  # (N, P, nd), dims in x's order
    out_spatial = grid.shape[1:-1]
    taps_per_dim = []
    for k, d in enumerate(dims):
        lo, hi = (0.0, d - 1.0) if align else (-0.5, d - 0.5)
        v = (g[..., k] + 1) / 2 * (d - 1) if align else ((g[..., k] + 1) * d - 1) / 2
        if mode == "nearest":
            v = np.rint(v)
        outside = (v < lo) | (v > hi)
        if padding == "border":
            v = np.where(outside, np.clip(v, 0, d - 1), v)
        elif padding == "reflection":
            v = np.where(outside, _reflect(v, lo, hi), v)
        if mode == "nearest":
            offsets, weights = [0], [np.ones_like(v)]
            base = v
        elif mode == "linear":
            base = np.floor(v)
            t = v - base
            offsets, weights = [0, 1], [1 - t, t]
        elif mode == "cubic":
            base = np.floor(v)
            w = _cubic_weights(v - base, -0.75)
            offsets, weights = [-1, 0, 1, 2], [w[..., i] for i in range(4)]
        else:
            raise bad(node, f"mode must be nearest, linear or cubic, got {mode!r}")
        taps = []
        for off, w in zip(offsets, weights):
            idx, ok = _fetch(base.astype(np.int64) + off, d, padding, lo, hi)
            taps.append((idx, w * ok))
        taps_per_dim.append(taps)
    strides = [int(np.prod(dims[k + 1 :])) for k in range(nd)]
    flat = x.reshape((n, c, -1))
    out = None
    for combo in np.ndindex(*[len(t) for t in taps_per_dim]):
        index = np.zeros(g.shape[:2], dtype=np.int64)
        weight = np.ones(g.shape[:2])
        for k, j in enumerate(combo):
            idx, w = taps_per_dim[k][j]
            index += idx * strides[k]
            weight = weight * w
        idx_t = on(np.ascontiguousarray(np.broadcast_to(index[:, None, :], (n, c, index.shape[1]))), ctx.device)
        w_t = on(weight[:, None, :].astype(x.dtype.numpy), ctx.device)
        part = em.take_along_axis(flat, idx_t, axis=2) * w_t
        out = part if out is None else out + part
    return out.reshape((n, c) + tuple(out_spatial))

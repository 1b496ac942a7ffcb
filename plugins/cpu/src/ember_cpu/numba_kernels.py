"""Hand-written numba kernels of the cpu backend's training hot paths (imported only with numba).

``max_pool2d_backward`` routes each window's gradient to the window's first maximum (the
kernel offsets in row-major order, padding as -inf), exactly as the shared numpy kernel
(``ember.array_module.conv.max_pool_backward``) does, in one pass over the output instead of
one strided pass per kernel offset; planes (sample, channel) run in parallel only with
``EMBER_CPU_NUMBA_PARALLEL=1`` (as the fused loops: serial by default; over windows that do not
overlap, W3's pools, on the convolution kernels' threads: ``ember_cpu.conv_kernels.split``).

The 2-D fold, convolution and pooling forward kernels are in ``ember_cpu.conv_kernels``.

``layer_norm_rows`` normalises each row of a (rows, n) array: a pass for the mean, one for the
variance, one for the result, accumulating in float64; ``layer_norm_backward_rows`` is its
input gradient in four passes per row (mean, variance, the two means of the rule, the result).

The layer norm kernels always run on one thread: BLAS holds both cores around them, and a parallel region paid
more in waiting for descheduled threads than it saved on the shared 2-core machine measured.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .conv_kernels import split  # the conv kernels' threads
from .numba_codegen import PARALLEL

__all__ = ["layer_norm_backward_rows", "layer_norm_rows", "max_pool2d_backward"]


@njit(parallel=PARALLEL, fastmath=False, cache=True, nogil=True)
def _max_pool2d_backward(g, x, out, grad, kh, kw, sh, sw, ph, pw, dh, dw):  # pragma: no cover - numba
    n, c, h, w = x.shape
    oh, ow = out.shape[2], out.shape[3]
    for plane in prange(n * c):
        b = plane // c
        ch = plane % c
        for i in range(oh):
            for j in range(ow):
                m = out[b, ch, i, j]
                done = False
                for u in range(kh):
                    y = i * sh - ph + u * dh
                    for v in range(kw):
                        xx = j * sw - pw + v * dw
                        inside = 0 <= y < h and 0 <= xx < w
                        value = x[b, ch, y, xx] if inside else -np.inf
                        if value == m:
                            if inside:
                                grad[b, ch, y, xx] += g[b, ch, i, j]
                            done = True
                            break
                    if done:
                        break


@njit(fastmath=False, cache=True, nogil=True)
def _max_pool2d_backward_disjoint(g, x, out, grad, kh, kw, sh, sw, lo, hi):  # pragma: no cover - numba
    """Windows that do not overlap (stride >= kernel, no padding or dilation), planes flattened:
    every element of a window is stored (the gradient at its first maximum, else 0), without
    branches, so ``grad`` need not be zeroed where windows cover it. Planes in parallel, on the
    threads ``conv_kernels.kernel_threads`` gives (numpy's BLAS's count)."""
    planes, oh, ow = out.shape
    if kh == 2 and kw == 2:  # unrolled: the loops over runtime window sizes ran ~6x slower
        for p in range(lo, hi):
            for i in range(oh):
                r0 = i * sh
                r1 = r0 + 1
                for j in range(ow):
                    c0 = j * sw
                    c1 = c0 + 1
                    m = out[p, i, j]
                    gv = g[p, i, j]
                    a = x[p, r0, c0] == m
                    b = (x[p, r0, c1] == m) and not a  # loads first: no branch around them
                    c = (x[p, r1, c0] == m) and not (a or b)
                    d = (x[p, r1, c1] == m) and not (a or b or c)
                    grad[p, r0, c0] = gv if a else 0
                    grad[p, r0, c1] = gv if b else 0
                    grad[p, r1, c0] = gv if c else 0
                    grad[p, r1, c1] = gv if d else 0
        return
    for p in range(lo, hi):
        for i in range(oh):
            for j in range(ow):
                m = out[p, i, j]
                gv = g[p, i, j]
                done = False
                for u in range(kh):
                    for v in range(kw):
                        hit = (x[p, i * sh + u, j * sw + v] == m) and not done
                        grad[p, i * sh + u, j * sw + v] = gv if hit else 0
                        done = done or hit


def max_pool2d_backward(
    g: np.ndarray,
    x: np.ndarray,
    out: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[tuple[int, int], tuple[int, int]],
    dilation: tuple[int, int],
) -> np.ndarray:
    """The gradient of a 2-D max pool with respect to ``x`` (float32 or float64, NCHW)."""
    disjoint = stride[0] >= kernel[0] and stride[1] >= kernel[1] and tuple(dilation) == (1, 1)
    if disjoint and not any(lo or hi for lo, hi in padding):
        n, c, h, w = x.shape
        oh, ow = out.shape[2:]
        planes = n * c
        covered = stride[0] == kernel[0] and stride[1] == kernel[1] and oh * stride[0] == h and ow * stride[1] == w
        grad = np.empty(x.shape, dtype=x.dtype) if covered else np.zeros(x.shape, dtype=x.dtype)
        # no zeroed buffer to fault in, no branches around the stores: W3's first pool
        # (64x32x28x28, 2x2) ~10x faster than the generic loop (see the 2026-12-05 log)
        split(
            _max_pool2d_backward_disjoint, planes,
            g.reshape(planes, *g.shape[2:]), x.reshape(planes, h, w), out.reshape(planes, *out.shape[2:]),
            grad.reshape(planes, h, w), kernel[0], kernel[1], stride[0], stride[1],
        )  # fmt: skip
        return grad
    grad = np.zeros(x.shape, dtype=x.dtype)
    _max_pool2d_backward(
        g, x, out, grad, kernel[0], kernel[1], stride[0], stride[1], padding[0][0], padding[1][0],
        dilation[0], dilation[1],
    )  # fmt: skip
    return grad


@njit(fastmath=False, cache=True, nogil=True)
def _row_stats(x, r, n, eps):  # pragma: no cover - numba
    """Mean and 1/sqrt(variance + eps) of row ``r``, accumulated in float64 (two passes)."""
    s = 0.0
    for k in range(n):
        s += x[r, k]
    mu = s / n
    q = 0.0
    for k in range(n):
        d = x[r, k] - mu
        q += d * d
    return mu, 1.0 / np.sqrt(q / n + eps)


@njit(fastmath=False, cache=True, nogil=True)
def _layer_norm_rows(x, w, b, out, eps):  # pragma: no cover - numba
    rows, n = x.shape
    for r in range(rows):
        mu, rstd = _row_stats(x, r, n, eps)
        for k in range(n):
            out[r, k] = (x[r, k] - mu) * rstd * w[k] + b[k]


def layer_norm_rows(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    """Layer norm of each row of ``x`` (rows, n) with weight and bias (n,), statistics in float64."""
    out = np.empty_like(x)
    _layer_norm_rows(x, w, b, out, eps)
    return out


@njit(fastmath=False, cache=True, nogil=True)
def _layer_norm_backward_rows(g, x, w, out, eps):  # pragma: no cover - numba
    rows, n = x.shape
    for r in range(rows):
        mu, rstd = _row_stats(x, r, n, eps)
        m1 = 0.0
        m2 = 0.0
        for k in range(n):
            gh = g[r, k] * w[k]
            m1 += gh
            m2 += gh * (x[r, k] - mu) * rstd
        m1 /= n
        m2 /= n
        for k in range(n):
            out[r, k] = rstd * (g[r, k] * w[k] - m1 - (x[r, k] - mu) * rstd * m2)


def layer_norm_backward_rows(g: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """The gradient of :func:`layer_norm_rows` with respect to ``x`` at cotangent ``g`` (rows, n)."""
    out = np.empty_like(x)
    _layer_norm_backward_rows(g, x, w, out, eps)
    return out

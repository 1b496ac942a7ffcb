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
input gradient in four passes per row (mean, variance, the two means of the rule, the result);
``layer_norm_grads_rows`` adds the weight's and bias's gradients (column sums in float64) to
the same passes, so the rule needs no second layer norm for ``xhat``.

``cross_entropy_rows`` is softmax cross-entropy per row of (N, C) logits with int64 class
targets in one pass per row (the max, the sum of exponentials in float64, the picked and the
smoothing terms), as the shared kernel (``ember.array_module.nn.cross_entropy``) computes it in
about ten numpy calls: W2's (128, 10) took 0.13 ms a step that way.

The layer norm and cross-entropy kernels always run on one thread: BLAS holds both cores around
them, and a parallel region paid more in waiting for descheduled threads than it saved on the
shared 2-core machine measured.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .conv_kernels import split  # the conv kernels' threads
from .numba_codegen import PARALLEL

__all__ = [
    "cross_entropy_rows", "layer_norm_backward_rows", "layer_norm_grads_rows", "layer_norm_rows", "max_pool2d_backward",
]  # fmt: skip


@njit(parallel=PARALLEL, fastmath=False, cache=True, nogil=True)
def _max_pool2d_backward(g, x, grad, kh, kw, sh, sw, ph, pw, dh, dw):  # pragma: no cover - numba
    n, c, h, w = x.shape
    oh, ow = g.shape[2], g.shape[3]
    for plane in prange(n * c):
        b = plane // c
        ch = plane % c
        for i in range(oh):
            for j in range(ow):
                # the first tap holding the window's maximum (padding -inf); none when that is NaN
                m = -np.inf
                at_y, at_x = -1, -1
                for u in range(kh):
                    y = i * sh - ph + u * dh
                    for v in range(kw):
                        xx = j * sw - pw + v * dw
                        inside = 0 <= y < h and 0 <= xx < w
                        value = x[b, ch, y, xx] if inside else -np.inf
                        if (u == 0 and v == 0) or not (m >= value or m != m):  # the forward's fold
                            m = value
                            at_y, at_x = (y, xx) if inside else (-1, -1)
                if at_y >= 0 and m == m:
                    grad[b, ch, at_y, at_x] += g[b, ch, i, j]


@njit(fastmath=False, cache=True, nogil=True)
def _max_pool2d_backward_2x2(g, x, grad, lo, hi):  # pragma: no cover - numba
    """2x2 windows at stride 2, planes flattened, unrolled (the loops over runtime window sizes ran
    ~6x slower; a runtime stride ~1.3x): every element of a window is stored, the gradient at its
    first maximum."""
    planes, oh, ow = g.shape
    for p in range(lo, hi):
        for i in range(oh):
            r0 = i * 2
            r1 = r0 + 1
            for j in range(ow):
                c0 = j * 2
                c1 = c0 + 1
                x0, x1, x2, x3 = x[p, r0, c0], x[p, r0, c1], x[p, r1, c0], x[p, r1, c1]
                m = max(max(x0, x1), max(x2, x3))
                # a NaN makes the forward's maximum NaN, which no tap equals: no gradient (written so,
                # the loop has no branch: 1.56 ms against 2.24 with the flag in every test below)
                nan = (x0 != x0) | (x1 != x1) | (x2 != x2) | (x3 != x3)
                gv = 0 if nan else g[p, i, j]
                a = x0 == m
                b = (x1 == m) and not a
                c = (x2 == m) and not (a or b)
                d = (x3 == m) and not (a or b or c)
                grad[p, r0, c0] = gv if a else 0
                grad[p, r0, c1] = gv if b else 0
                grad[p, r1, c0] = gv if c else 0
                grad[p, r1, c1] = gv if d else 0


@njit(fastmath=False, cache=True, nogil=True)
def _max_pool2d_backward_disjoint(g, x, grad, kh, kw, sh, sw, lo, hi):  # pragma: no cover - numba
    """Windows that do not overlap (stride >= kernel, no padding or dilation), planes flattened:
    every element of a window is stored (the gradient at its first maximum, else 0), without
    branches, so ``grad`` need not be zeroed where windows cover it. Planes in parallel, on the
    threads ``conv_kernels.kernel_threads`` gives (numpy's BLAS's count)."""
    planes, oh, ow = g.shape
    for p in range(lo, hi):
        for i in range(oh):
            for j in range(ow):
                m = x[p, i * sh, j * sw]
                for u in range(kh):
                    for v in range(kw):
                        value = x[p, i * sh + u, j * sw + v]
                        m = m if (m >= value or m != m) else value
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
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[tuple[int, int], tuple[int, int]],
    dilation: tuple[int, int],
) -> np.ndarray:
    """The gradient of a 2-D max pool with respect to ``x`` (float32 or float64, NCHW); each
    window's maximum is found again from ``x``, as the forward found it."""
    disjoint = stride[0] >= kernel[0] and stride[1] >= kernel[1] and tuple(dilation) == (1, 1)
    if disjoint and not any(lo or hi for lo, hi in padding):
        n, c, h, w = x.shape
        oh, ow = g.shape[2:]
        planes = n * c
        covered = stride[0] == kernel[0] and stride[1] == kernel[1] and oh * stride[0] == h and ow * stride[1] == w
        grad = np.empty(x.shape, dtype=x.dtype) if covered else np.zeros(x.shape, dtype=x.dtype)
        # no zeroed buffer to fault in, no branches around the stores: W3's first pool
        # (64x32x28x28, 2x2) ~10x faster than the generic loop (see the 2026-12-05 log)
        gp, xp, dp = g.reshape(planes, *g.shape[2:]), x.reshape(planes, h, w), grad.reshape(planes, h, w)
        if tuple(kernel) == (2, 2) and tuple(stride) == (2, 2):
            split(_max_pool2d_backward_2x2, planes, gp, xp, dp)
        else:
            split(_max_pool2d_backward_disjoint, planes, gp, xp, dp, kernel[0], kernel[1], stride[0], stride[1])
        return grad
    grad = np.zeros(x.shape, dtype=x.dtype)
    _max_pool2d_backward(
        g, x, grad, kernel[0], kernel[1], stride[0], stride[1], padding[0][0], padding[1][0],
        dilation[0], dilation[1],
    )  # fmt: skip
    return grad


@njit(fastmath=False, cache=True, nogil=True)
def _row_stats(x, r, n, eps):  # pragma: no cover - numba
    """Mean and 1/sqrt(variance + eps) of row ``r``, accumulated in float64 (two passes), each
    sum over eight accumulators: no addition waits on the one before it, in a fixed order
    (one float64 chain cost ~4 cycles an element: W4's (1024, 256) rows 0.65 -> 0.2 ms)."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    k = 0
    while k + 8 <= n:
        s0 += x[r, k]
        s1 += x[r, k + 1]
        s2 += x[r, k + 2]
        s3 += x[r, k + 3]
        s4 += x[r, k + 4]
        s5 += x[r, k + 5]
        s6 += x[r, k + 6]
        s7 += x[r, k + 7]
        k += 8
    while k < n:
        s0 += x[r, k]
        k += 1
    mu = (((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))) / n
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    k = 0
    while k + 8 <= n:
        d0 = x[r, k] - mu
        d1 = x[r, k + 1] - mu
        d2 = x[r, k + 2] - mu
        d3 = x[r, k + 3] - mu
        d4 = x[r, k + 4] - mu
        d5 = x[r, k + 5] - mu
        d6 = x[r, k + 6] - mu
        d7 = x[r, k + 7] - mu
        s0 += d0 * d0
        s1 += d1 * d1
        s2 += d2 * d2
        s3 += d3 * d3
        s4 += d4 * d4
        s5 += d5 * d5
        s6 += d6 * d6
        s7 += d7 * d7
        k += 8
    while k < n:
        d0 = x[r, k] - mu
        s0 += d0 * d0
        k += 1
    q = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    return mu, 1.0 / np.sqrt(q / n + eps)


@njit(fastmath=False, cache=True, nogil=True)
def _row_grad_means(g, x, w, r, n, mu):  # pragma: no cover - numba
    """sum(g w) and sum(g w (x - mu)) over row ``r`` in float64, four accumulators each."""
    a0 = a1 = a2 = a3 = 0.0
    b0 = b1 = b2 = b3 = 0.0
    k = 0
    while k + 4 <= n:
        h0 = np.float64(g[r, k]) * w[k]
        h1 = np.float64(g[r, k + 1]) * w[k + 1]
        h2 = np.float64(g[r, k + 2]) * w[k + 2]
        h3 = np.float64(g[r, k + 3]) * w[k + 3]
        a0 += h0
        a1 += h1
        a2 += h2
        a3 += h3
        b0 += h0 * (x[r, k] - mu)
        b1 += h1 * (x[r, k + 1] - mu)
        b2 += h2 * (x[r, k + 2] - mu)
        b3 += h3 * (x[r, k + 3] - mu)
        k += 4
    while k < n:
        h0 = np.float64(g[r, k]) * w[k]
        a0 += h0
        b0 += h0 * (x[r, k] - mu)
        k += 1
    return (a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3)


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
        m1, m2 = _row_grad_means(g, x, w, r, n, mu)
        m1 /= n
        m2 = m2 * rstd / n
        for k in range(n):
            out[r, k] = rstd * (g[r, k] * w[k] - m1 - (x[r, k] - mu) * rstd * m2)


def layer_norm_backward_rows(g: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """The gradient of :func:`layer_norm_rows` with respect to ``x`` at cotangent ``g`` (rows, n)."""
    out = np.empty_like(x)
    _layer_norm_backward_rows(g, x, w, out, eps)
    return out


@njit(fastmath=False, cache=True, nogil=True)
def _layer_norm_grads_rows(g, x, w, gx, gw, gb, eps, need_x):  # pragma: no cover - numba
    rows, n = x.shape
    for r in range(rows):
        mu, rstd = _row_stats(x, r, n, eps)
        if need_x:
            m1, m2 = _row_grad_means(g, x, w, r, n, mu)
            m1 /= n
            m2 = m2 * rstd / n
            for k in range(n):
                gx[r, k] = rstd * (g[r, k] * w[k] - m1 - (x[r, k] - mu) * rstd * m2)
        for k in range(n):
            gk = np.float64(g[r, k])
            gw[k] += gk * ((x[r, k] - mu) * rstd)
            gb[k] += gk


def layer_norm_grads_rows(g: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float, need_x: bool) -> np.ndarray:
    """``[gx,] gw, gb`` of :func:`layer_norm_rows` at cotangent ``g`` (rows, n), flattened and
    concatenated: one pass per row for the statistics, gx, and the columns' float64 sums."""
    rows, n = x.shape
    packed = np.empty((rows * n if need_x else 0) + 2 * n, dtype=x.dtype)
    gx = packed[: rows * n].reshape(rows, n) if need_x else np.empty((0, n), dtype=x.dtype)
    sums = np.zeros((2, n), dtype=np.float64)
    _layer_norm_grads_rows(g, x, w, gx, sums[0], sums[1], eps, need_x)
    packed[packed.size - 2 * n :] = sums.reshape(-1)
    return packed


@njit(fastmath=False, cache=True, nogil=True)
def _cross_entropy_rows(x, t, out, smoothing, ignore):  # pragma: no cover - numba
    rows, c = x.shape
    for r in range(rows):
        k = t[r]
        if k == ignore:
            out[r] = 0.0
            continue
        m = np.float64(x[r, 0])
        for j in range(1, c):  # the max, NaN propagating (np.max)
            v = np.float64(x[r, j])
            if v > m or v != v:
                m = v
        if np.isinf(m):  # an infinite max shifts by 0, as the shared kernel's _max_keep
            m = 0.0
        total = 0.0
        for j in range(c):
            total += np.exp(np.float64(x[r, j]) - m)
        lse = m + np.log(total)
        if k < 0 or k >= c:  # the op checked the range; nothing outside the row is read
            out[r] = np.nan
            continue
        loss = lse - x[r, k]
        if smoothing != 0.0:
            logp = 0.0
            for j in range(c):
                logp += np.float64(x[r, j]) - lse
            loss = (1.0 - smoothing) * loss - (smoothing / c) * logp
        out[r] = loss


def cross_entropy_rows(x: np.ndarray, t: np.ndarray, smoothing: float, ignore: int) -> np.ndarray:
    """Per-row softmax cross-entropy of ``x`` (N, C) at int64 targets ``t`` (N,), in x's dtype
    (computed in float64); a target equal to ``ignore`` gives 0, label smoothing as PyTorch's."""
    out = np.empty(x.shape[0], dtype=x.dtype)
    _cross_entropy_rows(x, t, out, smoothing, ignore)
    return out

"""Hand-written numba kernels of the cpu backend's training hot paths (imported only with numba).

``max_pool2d_backward`` routes each window's gradient to the window's first maximum (the
kernel offsets in row-major order, padding as -inf), exactly as the shared numpy kernel
(``ember.array_module.conv.max_pool_backward``) does, in one pass over the output instead of
one strided pass per kernel offset; planes (sample, channel) run in parallel.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

__all__ = ["max_pool2d_backward"]


@njit(parallel=True, fastmath=False, cache=True, nogil=True)
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
    grad = np.zeros(x.shape, dtype=x.dtype)
    _max_pool2d_backward(
        g, x, out, grad, kernel[0], kernel[1], stride[0], stride[1], padding[0][0], padding[1][0],
        dilation[0], dilation[1],
    )  # fmt: skip
    return grad

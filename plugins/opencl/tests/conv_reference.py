"""numpy float64 references for convolution and its input gradient (direct sums over taps)."""

from __future__ import annotations

import numpy as np


def _slices(tap, dil, stride, blocks):
    return tuple(slice(t * d, t * d + (b - 1) * s + 1, s) for t, d, s, b in zip(tap, dil, stride, blocks))


def conv(x, w, b, stride, pads, dil, groups):
    """y[n, o, q] = sum over c, tap of w[o, c, tap] * padded x[n, c, q * stride + tap * dil] (+ b[o])."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, cin = x.shape[:2]
    cout, k = w.shape[0], w.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(pads))
    blocks = [(xp.shape[2 + d] - dil[d] * (k[d] - 1) - 1) // stride[d] + 1 for d in range(len(k))]
    out = np.zeros((n, cout, *blocks))
    cg, og = cin // groups, cout // groups
    for tap in np.ndindex(*k):
        patch = xp[(slice(None), slice(None)) + _slices(tap, dil, stride, blocks)]
        for g in range(groups):
            wt = w[(slice(g * og, (g + 1) * og), slice(None)) + tap]
            out[:, g * og : (g + 1) * og] += np.einsum("oc,nc...->no...", wt, patch[:, g * cg : (g + 1) * cg])
    if b is not None:
        out += b.astype(np.float64).reshape((1, cout) + (1,) * len(k))
    return out


def conv_transpose(g, w, size, stride, pads, dil, groups):
    """The adjoint of :func:`conv` in x: scatter each tap of g back onto the padded input, crop."""
    g, w = g.astype(np.float64), w.astype(np.float64)
    n, cin = g.shape[:2]
    og, k = w.shape[1], w.shape[2:]
    blocks = g.shape[2:]
    full = [max(s + lo + hi, (b - 1) * st + d * (kk - 1) + 1) for s, (lo, hi), b, st, d, kk in
            zip(size, pads, blocks, stride, dil, k)]  # fmt: skip
    out = np.zeros((n, og * groups, *full))
    cg = cin // groups
    for tap in np.ndindex(*k):
        sl = (slice(None), slice(None)) + _slices(tap, dil, stride, blocks)
        for q in range(groups):
            wt = w[(slice(q * cg, (q + 1) * cg), slice(None)) + tap]
            part = np.einsum("co,nc...->no...", wt, g[:, q * cg : (q + 1) * cg])
            view = out[:, q * og : (q + 1) * og]
            view[sl[:1] + (slice(None),) + sl[2:]] += part
    crop = (slice(None), slice(None)) + tuple(slice(lo, lo + s) for s, (lo, _) in zip(size, pads))
    return out[crop]

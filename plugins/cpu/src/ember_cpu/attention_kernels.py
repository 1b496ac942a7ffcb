"""numba row passes of the cpu backend's attention kernels (imported only with numba).

``softmax_rows`` turns a (batch, L, S) block of raw scores into probabilities in place: the
scale and the causal mask (columns past ``i + offset`` get 0) applied on the way, the row's
maximum, exp, the sum in float64 and the division, where numpy takes five passes and four
temporaries. ``softmax_grad_rows`` is the score gradient ``p * (gp - <gp, p>) * scale``, in
place in ``gp``. Both run one row at a time so that a row stays in L1 between its passes.

exp is :func:`exp_f64` (``numba_math.ember_exp64``, kept for these kernels), arithmetic on float64
and a bit cast (relative error below 1e-14), so
LLVM vectorises the exp pass; numba's own ``np.exp`` is a scalar libm call per element (no
SVML here). fastmath stays off: row sums run on eight independent float64 accumulators, so the
additions do not wait on each other, in a fixed order.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .numba_math import float64_math

#: a float64 exp from arithmetic and a bit cast (``numba_math.ember_exp64``)
exp_f64 = float64_math()["ember_exp64"]

__all__ = ["exp_f32", "exp_f64", "softmax_rows", "softmax_grad_rows"]


@intrinsic
def _bits_to_f32(typingctx, bits):  # pragma: no cover - numba
    """The float32 whose IEEE bits are the int32 ``bits``."""

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return types.float32(types.int32), codegen


_F32 = np.float32


@njit(inline="always", fastmath=False)
def exp_f32(x):  # pragma: no cover - numba
    """exp of a float32 <= 0 in float32 arithmetic (16 lanes a vector): 2^k * p(r), r = x - k ln 2
    in [-ln2/2, ln2/2], p of degree 7 (truncation below 6e-9); about 2 ulp; below -87.3 it
    gives 0 (softmax's arguments are x - max, never positive); NaN in, NaN out."""
    c = max(x, _F32(-87.0))
    k = np.floor(c * _F32(1.442695) + _F32(0.5))
    r = (c - k * _F32(0.693359375)) - k * _F32(-2.12194440e-4)
    p = _F32(1.9841270e-4)
    p = _F32(1.3888889e-3) + r * p
    p = _F32(8.3333333e-3) + r * p
    p = _F32(4.1666667e-2) + r * p
    p = _F32(1.6666667e-1) + r * p
    p = _F32(0.5) + r * p
    p = _F32(1.0) + r * p
    p = _F32(1.0) + r * p
    v = p * _bits_to_f32(np.int32(k + _F32(127.0)) << 23)
    if x < _F32(-87.0):
        v = _F32(0.0)
    if x != x:
        v = x
    return v


@njit(fastmath=False, cache=True, nogil=True)
def _row_sum(a, n):  # pragma: no cover - numba
    """Sum of a[:n] in float64 over eight accumulators (a fixed order, no dependency chain)."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    j = 0
    while j + 8 <= n:
        s0 += a[j]
        s1 += a[j + 1]
        s2 += a[j + 2]
        s3 += a[j + 3]
        s4 += a[j + 4]
        s5 += a[j + 5]
        s6 += a[j + 6]
        s7 += a[j + 7]
        j += 8
    while j < n:
        s0 += a[j]
        j += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@njit(fastmath=False, cache=True, nogil=True)
def _row_max(a, n):  # pragma: no cover - numba
    """max of a[:n] (-inf when empty) over eight accumulators, and whether a NaN was seen."""
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = a.dtype.type(-np.inf)
    nans = 0
    j = 0
    while j + 8 <= n:
        m0 = a[j] if a[j] > m0 else m0
        m1 = a[j + 1] if a[j + 1] > m1 else m1
        m2 = a[j + 2] if a[j + 2] > m2 else m2
        m3 = a[j + 3] if a[j + 3] > m3 else m3
        m4 = a[j + 4] if a[j + 4] > m4 else m4
        m5 = a[j + 5] if a[j + 5] > m5 else m5
        m6 = a[j + 6] if a[j + 6] > m6 else m6
        m7 = a[j + 7] if a[j + 7] > m7 else m7
        j += 8
    while j < n:
        m0 = a[j] if a[j] > m0 else m0
        j += 1
    for i in range(n):
        nans += 1 if a[i] != a[i] else 0
    m0 = m1 if m1 > m0 else m0
    m2 = m3 if m3 > m2 else m2
    m4 = m5 if m5 > m4 else m4
    m6 = m7 if m7 > m6 else m6
    m0 = m2 if m2 > m0 else m0
    m4 = m6 if m6 > m4 else m4
    return (m4 if m4 > m0 else m0), nans > 0


@njit(fastmath=False, cache=True, nogil=True)
def _row_dot(a, b, n):  # pragma: no cover - numba
    """<a[:n], b[:n]> in float64 over eight accumulators."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    j = 0
    while j + 8 <= n:
        s0 += np.float64(a[j]) * b[j]
        s1 += np.float64(a[j + 1]) * b[j + 1]
        s2 += np.float64(a[j + 2]) * b[j + 2]
        s3 += np.float64(a[j + 3]) * b[j + 3]
        s4 += np.float64(a[j + 4]) * b[j + 4]
        s5 += np.float64(a[j + 5]) * b[j + 5]
        s6 += np.float64(a[j + 6]) * b[j + 6]
        s7 += np.float64(a[j + 7]) * b[j + 7]
        j += 8
    while j < n:
        s0 += np.float64(a[j]) * b[j]
        j += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@njit(fastmath=False, cache=True, nogil=True)
def softmax_rows(s, scale, causal, offset, empty_zero, f32):  # pragma: no cover - numba
    """softmax(s * scale) along the last axis of the C-contiguous (batch, L, S) ``s``, in place.

    With ``causal`` row i sees columns j <= i + offset (the rest become 0). A row that sees no
    finite score is NaN, as the composite gives (0/0), or 0 with ``empty_zero`` (the backward's
    rule). The maximum is taken as the composite's: an infinite one counts as 0. ``f32``: s is
    float32, its exp in float32 arithmetic (:func:`exp_f32`).
    """
    nb, nl, ns = s.shape
    dt = s.dtype.type
    sc = dt(scale)  # the composite multiplies in s's dtype
    for b in range(nb):
        for i in range(nl):
            row = s[b, i]
            lim = ns
            if causal:
                lim = min(ns, max(0, i + offset + 1))
            for j in range(lim):
                row[j] = row[j] * sc
            for j in range(lim, ns):
                row[j] = 0.0
            mx, nan = _row_max(row, lim)
            if nan:  # a NaN score: the row is NaN
                for j in range(lim):
                    row[j] = np.nan
                continue
            if mx == np.inf or mx == -np.inf:  # as the composite: NaN or 0/1 (-inf: no key to see)
                _softmax_special(row, lim, mx, empty_zero)
                continue
            if f32:
                m32 = np.float32(mx)
                for j in range(lim):
                    row[j] = exp_f32(row[j] - m32)
            else:
                for j in range(lim):
                    row[j] = exp_f64(row[j] - mx)
            inv = 1.0 / _row_sum(row, lim)
            for j in range(lim):
                row[j] = dt(row[j] * inv)


@njit(fastmath=False, cache=True, nogil=True)
def _softmax_special(row, lim, mx, empty_zero):  # pragma: no cover - numba
    """A row holding an infinity (a -inf mask entry, or an overflowing score), as the composite:
    an infinite maximum counts as 0, exp in float64, 0/0 is NaN (0 for the backward)."""
    if mx == -np.inf:  # no key to see: 0/0
        for j in range(row.size):
            row[j] = 0.0 if empty_zero else np.nan
        return
    if mx == np.inf:
        mx = 0.0
    t = 0.0
    for j in range(lim):
        e = np.exp(np.float64(row[j]) - mx)
        row[j] = e
        t += row[j]
    for j in range(lim):
        v = row[j] / t
        row[j] = 0.0 if (empty_zero and v != v) else v


@njit(fastmath=False, cache=True, nogil=True)
def softmax_grad_rows(p, gp, scale):  # pragma: no cover - numba
    """gp <- p * (gp - <gp, p>) * scale along the last axis of (batch, L, S) arrays, in place;
    ``p`` may be any layout, ``gp`` C-contiguous."""
    nb, nl, ns = p.shape
    dt = gp.dtype.type
    for b in range(nb):
        for i in range(nl):
            prow = p[b, i]
            grow = gp[b, i]
            d = _row_dot(grow, prow, ns)
            for j in range(ns):
                grow[j] = dt((np.float64(grow[j]) - d) * prow[j] * scale)

"""The cpu backend's 2-D convolution and pooling kernels (numba; imported only with numba).

A convolution runs as BLAS products over im2col columns laid out ``(C * kh * kw, N * L)``
(row ``(c * kh + u) * kw + v``, column ``b * L + i * ow + j``), so that the forward pass and the
weight gradient are each *one* GEMM over the whole batch (K = N * L for the weight gradient)
instead of one small product per sample plus a sum.

The loops copy or add whole rows through slices taken once per row (``dst = cols[d : d + ow]``)
indexed by the loop variable alone, or through unsigned indices: numba then knows the index is
not negative and LLVM vectorises the row, where ``cols[d + j]`` with a signed ``d`` keeps a
wraparound test per element and runs scalar (a row add of W3's sizes: 3.4 ms against 0.64 ms).

The input gradient (a transposed convolution) is one product per sample, then a fold that zeroes
each output plane and adds every window row's in-bounds run (:func:`col2im`: W3's (64, 288, 196)
columns 3.9 -> 1.4 ms against ``numba_kernels.col2im2d``'s per-element 4-D indexing).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

import numpy as np
from numba import njit, uint64

from .gemm import product
from .numba_codegen import PARALLEL

__all__ = [
    "COLUMNS",
    "SCRATCH",
    "COLUMN_BUDGET",
    "kernel_threads",
    "split",
    "col2im",
    "conv2d",
    "conv2d_transpose",
    "conv2d_weight_grad",
    "im2col",
    "max_pool2d",
    "rows_to_nchw",
]

Pads2 = tuple[tuple[int, int], tuple[int, int]]


def kernel_threads() -> int:
    """Threads for the loops here: one, unless ``EMBER_CPU_NUMBA_PARALLEL=1`` (the fused loops'
    switch, numba_codegen.PARALLEL); then as many as numpy's BLAS runs (its own default, or what
    ``EMBER_CPU_BLAS_THREADS`` / ``OMP_NUM_THREADS`` set), so a convolution's copies and folds use
    the cores its products use. Serial by default: on the quiet 2-core machine two parts gave W3
    28.9 ms against 28.1 on one (the loops are memory-bound, the hand-off costs ~50 us), and under
    load a part waits for its descheduled thread (col2im's median 1.2 -> 3.5 ms at load 5)."""
    global _BLAS
    if not PARALLEL:
        return 1
    if _BLAS is None:
        from .threads import _controller  # noqa: PLC0415 - scans the loaded libraries once

        _BLAS = _controller() or []
    if not _BLAS:
        return 1
    return max(1, min(_CORES, int(_BLAS[0].num_threads)))


_BLAS: list[Any] | None = None
_CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_POOL: Any = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> Any:
    """A process-wide pool of ``workers`` threads (grown on demand) that wait on a queue: no spinning
    between kernels, so the BLAS's own threads keep the cores to themselves in between."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < workers:
            from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ember-cpu-conv")
        return _POOL


#: below this many outer iterations a loop runs on the calling thread alone
MIN_SPLIT = 2


def split(kernel: Any, count: int, *args: Any) -> None:
    """``kernel(*args, lo, hi)`` over ``[0, count)``, cut into :func:`kernel_threads` contiguous
    parts that run at once (the kernels are numba ``nogil`` loops over independent outputs):
    the caller runs the last part, pool threads the others."""
    parts = min(kernel_threads(), count // MIN_SPLIT) if count >= 2 * MIN_SPLIT else 1
    if parts <= 1:
        kernel(*args, 0, count)
        return
    cuts = [count * i // parts for i in range(parts + 1)]
    pool = _pool(parts - 1)
    futures = [pool.submit(kernel, *args, cuts[i], cuts[i + 1]) for i in range(parts - 1)]
    kernel(*args, cuts[-2], cuts[-1])
    for f in futures:
        f.result()


@njit(cache=True, nogil=True)
def _im2col(xp, cols, n, c, hp, wp, kh, kw, sh, sw, dh, dw, oh, ow, lo, hi):  # pragma: no cover - numba
    """``xp`` flat padded (N, C, hp, wp), ``cols`` flat (C*kh*kw, N*oh*ow); rows in parallel."""
    plane = hp * wp
    length = oh * ow
    total = n * length
    for row in range(lo, hi):
        ch = row // (kh * kw)
        u = (row // kw) % kh
        v = row % kw
        for b in range(n):
            base = (b * c + ch) * plane + u * dh * wp + v * dw
            for i in range(oh):
                s = base + i * sh * wp
                d = row * total + b * length + i * ow
                if sw == 1:  # unsigned indices: no wraparound test, no slice to build (1.56 -> 1.31 ms)
                    su, du = uint64(s), uint64(d)
                    for j in range(uint64(ow)):
                        cols[du + j] = xp[su + j]
                else:
                    dst = cols[d : d + ow]
                    src = xp[s : s + (ow - 1) * sw + 1]
                    for j in range(ow):
                        dst[j] = src[j * sw]


def _padded(x: np.ndarray, padding: Pads2) -> np.ndarray:
    """``x`` (N, C, H, W) zero-padded by ``padding``, contiguous."""
    if not any(lo or hi for lo, hi in padding):
        return np.ascontiguousarray(x)
    n, c, h, w = x.shape
    (pt, pb), (pl, pr) = padding
    out = np.zeros((n, c, h + pt + pb, w + pl + pr), dtype=x.dtype)
    out[:, :, pt : pt + h, pl : pl + w] = x
    return out


def im2col(
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: Pads2,
    dilation: tuple[int, int],
    blocks: tuple[int, int],
) -> np.ndarray:
    """Columns ``(C * kh * kw, N * oh * ow)`` of ``x`` (N, C, H, W) for ``blocks`` = (oh, ow) windows."""
    n, c = x.shape[:2]
    kh, kw = kernel
    oh, ow = blocks
    xp = _padded(x, padding)
    hp, wp = xp.shape[2:]
    cols = np.empty((c * kh * kw, n * oh * ow), dtype=x.dtype)
    split(_im2col, c * kh * kw, xp.reshape(-1), cols.reshape(-1), n, c, hp, wp, kh, kw, *stride, *dilation, oh, ow)
    return cols


@njit(cache=True, nogil=True)
def _rows_to_nchw(y, out, bias, has_bias, n, cout, length, lo, hi):  # pragma: no cover - numba
    """``y`` flat (cout, n * length) -> ``out`` flat (n, cout, length), plus ``bias[co]`` if given."""
    for b in range(lo, hi):
        for co in range(cout):
            s = co * n * length + b * length
            d = (b * cout + co) * length
            src = y[s : s + length]
            dst = out[d : d + length]
            if has_bias:
                add = bias[co]
                for j in range(length):
                    dst[j] = src[j] + add
            else:
                for j in range(length):
                    dst[j] = src[j]


def rows_to_nchw(y: np.ndarray, n: int, bias: np.ndarray | None, out: np.ndarray | None = None) -> np.ndarray:
    """A product's ``(Cout, N * L)`` rows as ``(N, Cout, L)`` (into ``out``, contiguous, if given)
    with ``bias`` (Cout,) added, in one pass."""
    cout, total = y.shape
    length = total // n if n else 0
    if out is None:
        out = np.empty((n, cout, length), dtype=y.dtype)
    b = np.ascontiguousarray(bias) if bias is not None else np.zeros(1, dtype=y.dtype)
    split(_rows_to_nchw, n, np.ascontiguousarray(y).reshape(-1), out.reshape(-1), b, bias is not None, n, cout, length)
    return out


@njit(cache=True, nogil=True)
def _small_k_conv(wm, cols, out, bias, has_bias, n, cout, per_group, k, length, lo, hi):  # pragma: no cover
    """``out`` flat (n, cout, length) = wm (cout, k) @ columns (rows of group co // per_group), plus
    bias: k passes over each output row (in L1) instead of a BLAS product with a tiny K."""
    total = n * length
    for b in range(lo, hi):
        for co in range(cout):
            dst = out[(b * cout + co) * length : (b * cout + co + 1) * length]
            first = (co // per_group) * k
            add = bias[co] if has_bias else bias[0]  # a zero when there is no bias
            for j in range(length):
                dst[j] = add
            for r in range(k):
                wv = wm[co * k + r]
                src = cols[(first + r) * total + b * length : (first + r) * total + (b + 1) * length]
                for j in range(length):
                    dst[j] += wv * src[j]


@njit(cache=True, nogil=True)
def _k9_conv(wm, cols, out, bias, has_bias, n, cout, per_group, length, lo, hi):  # pragma: no cover - numba
    """:func:`_small_k_conv` for K = 9 (one input channel a group, 3x3): the nine products summed
    in registers, one store per output element (W3's first layer: 1.3 -> 0.85 ms)."""
    total = n * length
    for b in range(lo, hi):
        for co in range(cout):
            dst = out[(b * cout + co) * length : (b * cout + co + 1) * length]
            o = (co // per_group) * 9 * total + b * length
            s0 = cols[o : o + length]
            s1 = cols[o + total : o + total + length]
            s2 = cols[o + 2 * total : o + 2 * total + length]
            s3 = cols[o + 3 * total : o + 3 * total + length]
            s4 = cols[o + 4 * total : o + 4 * total + length]
            s5 = cols[o + 5 * total : o + 5 * total + length]
            s6 = cols[o + 6 * total : o + 6 * total + length]
            s7 = cols[o + 7 * total : o + 7 * total + length]
            s8 = cols[o + 8 * total : o + 8 * total + length]
            w0, w1, w2, w3, w4 = wm[co * 9], wm[co * 9 + 1], wm[co * 9 + 2], wm[co * 9 + 3], wm[co * 9 + 4]
            w5, w6, w7, w8 = wm[co * 9 + 5], wm[co * 9 + 6], wm[co * 9 + 7], wm[co * 9 + 8]
            add = bias[co] if has_bias else bias[0]  # a zero when there is no bias
            for j in range(length):
                dst[j] = (
                    add + w0 * s0[j] + w1 * s1[j] + w2 * s2[j] + w3 * s3[j] + w4 * s4[j] + w5 * s5[j]
                    + w6 * s6[j] + w7 * s7[j] + w8 * s8[j]
                )  # fmt: skip


@njit(cache=True, nogil=True)
def _col2im(cols, out, n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow, bstep, rstep, lo, hi):  # pragma: no cover
    """``cols`` flat, row ``r`` of sample ``b`` at ``b * bstep + r * rstep`` (oh*ow long) -> ``out``
    flat (N, C, h, w): each plane zeroed, then every window row's in-bounds run added. Planes go
    channel-major (plane ``pl``: channel ``pl // n``, sample ``pl % n``), so that with (C*K, N*L)
    columns successive planes read successive runs of the same rows."""
    for pl in range(lo, hi):
        ch = pl // n
        b = pl % n
        o = (b * c + ch) * h * w
        plane = out[o : o + h * w]
        for e in range(h * w):
            plane[e] = 0
        for u in range(kh):
            for v in range(kw):
                cbase = b * bstep + (ch * kh * kw + u * kw + v) * rstep
                off = v * dw - pw  # input column of window j: j * sw + off
                j0 = min(ow, max(0, (-off + sw - 1) // sw))
                j1 = max(j0, min(ow, (w - 1 - off) // sw + 1))
                if j1 <= j0:
                    continue
                for i in range(oh):
                    y = i * sh - ph + u * dh
                    if y < 0 or y >= h:
                        continue
                    cu = uint64(cbase + i * ow + j0)
                    du = uint64(o + y * w + j0 * sw + off)
                    if sw == 1:  # unsigned indices, as in _im2col (1.52 -> 1.04 ms)
                        for j in range(uint64(j1 - j0)):
                            out[du + j] += cols[cu + j]
                    else:
                        for j in range(uint64(j1 - j0)):
                            out[du + j * uint64(sw)] += cols[cu + j]


def col2im(cols: np.ndarray, size: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
           padding: Pads2, dilation: tuple[int, int], blocks: tuple[int, int],
           n: int | None = None) -> np.ndarray:  # fmt: skip
    """Fold ``cols`` (N, C * kh * kw, oh * ow), or (C * kh * kw, N * oh * ow) when ``n`` is given, into
    (N, C, *size), overlapping windows summed."""
    length = blocks[0] * blocks[1]
    if n is None:
        n, ck = cols.shape[:2]
        bstep, rstep = ck * length, length
    else:
        ck = cols.shape[0]
        bstep, rstep = length, n * length
    kh, kw = kernel
    c = ck // (kh * kw)
    out = np.empty((n, c) + tuple(size), dtype=cols.dtype)
    flat = np.ascontiguousarray(cols).reshape(-1)
    pads = (padding[0][0], padding[1][0])
    split(_col2im, n * c, flat, out.reshape(-1), n, c, *size, kh, kw, *stride, *pads, *dilation, *blocks, bstep, rstep)
    return out


@njit(cache=True, nogil=True)
def _max_pool2d(x, out, planes, h, w, kh, kw, sh, sw, oh, ow, lo, hi):  # pragma: no cover - numba
    """Unpadded, undilated windows; planes flattened. The maximum as numpy's ``maximum`` folds
    it over the offsets in row-major order (the first of equal values; NaN propagates)."""
    for p in range(lo, hi):
        xs = x[p * h * w : (p + 1) * h * w]
        for i in range(oh):
            row = out[(p * oh + i) * ow : (p * oh + i + 1) * ow]
            for j in range(ow):
                s = i * sh * w + j * sw
                m = xs[s]
                for u in range(kh):
                    for v in range(kw):
                        e = xs[s + u * w + v]
                        m = m if (m >= e or m != m) else e
                row[j] = m


@njit(cache=True, nogil=True)
def _max_pool2d_2x2(x, out, planes, h, w, oh, ow, lo, hi):  # pragma: no cover - numba
    """2x2 windows at stride 2 (unrolled), as :func:`_max_pool2d`."""
    for p in range(lo, hi):
        for i in range(oh):
            r0 = x[p * h * w + 2 * i * w : p * h * w + 2 * i * w + 2 * ow]
            r1 = x[p * h * w + (2 * i + 1) * w : p * h * w + (2 * i + 1) * w + 2 * ow]
            row = out[(p * oh + i) * ow : (p * oh + i + 1) * ow]
            for j in range(ow):
                a = r0[2 * j]
                b = r0[2 * j + 1]
                c = r1[2 * j]
                e = r1[2 * j + 1]
                m = a if (a >= b or a != a) else b
                m = m if (m >= c or m != m) else c
                row[j] = m if (m >= e or m != m) else e


def max_pool2d(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int]) -> np.ndarray:
    """Max pool of ``x`` (N, C, H, W) over unpadded, undilated windows."""
    n, c, h, w = x.shape
    kh, kw = kernel
    sh, sw = stride
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    out = np.empty((n, c, oh, ow), dtype=x.dtype)
    flat = np.ascontiguousarray(x).reshape(-1)
    if tuple(kernel) == (2, 2) and tuple(stride) == (2, 2):
        split(_max_pool2d_2x2, n * c, flat, out.reshape(-1), n * c, h, w, oh, ow)
    else:
        split(_max_pool2d, n * c, flat, out.reshape(-1), n * c, h, w, kh, kw, sh, sw, oh, ow)
    return out


# -- the backend's entry points: 2-D float convolutions over slices of the batch --------------
class _Scratch(threading.local):
    """Free temporaries of the kernels here (columns, products, transposed rows), two per size, per
    thread: a fresh 14 MB buffer each call cost page faults inside a training step (W3's input
    gradient: 4.5 ms alone, 8.7 ms within the step's other allocations, two threads)."""

    def __init__(self) -> None:
        self.free: dict[tuple[int, str], list[np.ndarray]] = {}

    def take(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dt = np.dtype(dtype)
        size = int(np.prod(shape)) * dt.itemsize
        bufs = self.free.get((size, dt.str))
        if not bufs:
            return np.empty(shape, dtype=dt)
        return bufs.pop().reshape(shape)

    def give(self, buf: np.ndarray) -> None:
        """Return ``buf`` (no view of it may outlive this call) for the next call of its size."""
        root = buf if buf.base is None else buf.base
        if isinstance(root, np.ndarray) and root.flags.c_contiguous and root.nbytes == buf.nbytes >= 1 << 20:
            bufs = self.free.setdefault((root.nbytes, root.dtype.str), [])
            if len(bufs) < 2 and not any(b is root for b in bufs):  # two: the forward's columns wait in COLUMNS
                bufs.append(root)


SCRATCH = _Scratch()


class _ColumnCache:
    """The im2col columns of recent forward passes by input array, for the weight gradient of the
    same convolution (it needs the same columns; W3's second layer: 14 MB, ~1.6 ms a step on one
    thread). An entry goes when it is taken, when its input is freed (a weak reference: inference
    keeps nothing past its activations), or when newer ones need the budget. A handle is written
    after its creation only by a fused kernel given it as ``outs`` (ember_cpu.backend.run_fused),
    which discards its entry, so an input's columns stay valid."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.entries: dict[int, tuple[Any, tuple[Any, ...], np.ndarray]] = {}  # insertion order: oldest first
        self.bytes = 0
        self.hits = 0
        self.lock = threading.Lock()

    def put(self, x: np.ndarray, key: tuple[Any, ...], cols: np.ndarray) -> None:
        if cols.nbytes > self.budget:
            return
        ident = id(x)
        try:
            ref = weakref.ref(x, lambda r, i=ident: self._drop(i, r))
        except TypeError:
            return
        with self.lock:
            self._pop(ident)
            while self.entries and self.bytes + cols.nbytes > self.budget:
                self._pop(next(iter(self.entries)))
            self.entries[ident] = (ref, key, cols)
            self.bytes += cols.nbytes

    def take(self, x: np.ndarray, key: tuple[Any, ...]) -> np.ndarray | None:
        with self.lock:
            entry = self._pop(id(x))
        if entry is None or entry[0]() is not x or entry[1] != key:
            return None
        self.hits += 1
        return entry[2]

    def discard(self, x: np.ndarray) -> None:
        """Forget ``x``'s columns: a fused kernel wrote a new value into ``x`` (the lazy layer's
        in-place results, ``Backend.fusion_outs``)."""
        with self.lock:
            entry = self.entries.get(id(x))
            if entry is not None and entry[0]() is x:
                self._pop(id(x))

    def _pop(self, ident: int) -> Any:
        entry = self.entries.pop(ident, None)
        if entry is not None:
            self.bytes -= entry[2].nbytes
        return entry

    def _drop(self, ident: int, ref: Any) -> None:
        with self.lock:
            entry = self.entries.get(ident)
            if entry is not None and entry[0] is ref:
                self._pop(ident)


#: columns kept between a forward pass and its weight gradient (64 MiB at most)
COLUMNS = _ColumnCache(64 << 20)


#: a convolution with at most this many columns per output channel (Cin/G * kh * kw) runs its
#: forward product as numba loops and its weight gradient as one product per sample
SMALL_K = 16
#: im2col columns of up to this many elements (or the input's or output's size, if larger) are
#: built at once; a larger batch runs in slices (128 MiB of float32)
COLUMN_BUDGET = 1 << 25


def blocks2d(size: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...], padding: Pads2,
             dilation: tuple[int, ...]) -> tuple[int, int]:  # fmt: skip
    """Windows that fit along each spatial axis of ``size`` (padded)."""
    oh, ow = (
        (s + lo + hi - d * (k - 1) - 1) // st + 1
        for s, (lo, hi), k, st, d in zip(size, padding, kernel, stride, dilation)
    )
    return oh, ow


def _batch_step(n: int, per_sample: int, *sizes: int) -> int:
    """Samples a slice whose columns (``per_sample`` elements each) fit the budget (at least one)."""
    limit = max(COLUMN_BUDGET, *sizes)
    return max(1, min(n, limit // max(per_sample, 1)))


def conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: tuple[int, int], padding: Pads2,
           dilation: tuple[int, int], groups: int) -> np.ndarray:  # fmt: skip
    """A 2-D convolution (N, Cin, H, W) * (Cout, Cin/G, kh, kw): per slice of the batch, the columns
    (Cin*K, m*L), one product per group, its rows laid out (m, Cout, L) with the bias added."""
    n = x.shape[0]
    cout, cg, kh, kw = w.shape
    oh, ow = blocks2d(x.shape[2:], (kh, kw), stride, padding, dilation)
    length = oh * ow
    k = cg * kh * kw
    wm = w.reshape(groups, cout // groups, k)
    out = np.empty((n, cout, length), dtype=x.dtype)
    small = k <= SMALL_K
    if small:
        flat_w = np.ascontiguousarray(w).reshape(-1)
        b = np.ascontiguousarray(bias) if bias is not None else np.zeros(1, dtype=x.dtype)
    step = _batch_step(n, x.shape[1] * kh * kw * length, x.size, out.size)
    for s in range(0, n, step):
        m = min(step, n - s)
        cols = im2col(x[s : s + m], (kh, kw), stride, padding, dilation, (oh, ow))
        if step >= n:
            COLUMNS.put(x, ((kh, kw), stride, padding, dilation, groups), cols)
        if small:
            piece, c = out[s : s + m].reshape(-1), cols.reshape(-1)
            if k == 9:
                split(_k9_conv, m, flat_w, c, piece, b, bias is not None, m, cout, cout // groups, length)
            else:
                split(_small_k_conv, m, flat_w, c, piece, b, bias is not None, m, cout, cout // groups, k, length)
            continue
        y = SCRATCH.take((groups, cout // groups, m * length), x.dtype)
        product(wm, cols.reshape(groups, cg * kh * kw, m * length), out=y)
        rows_to_nchw(y.reshape(cout, m * length), m, bias, out[s : s + m])
        SCRATCH.give(y)
        if step < n:
            SCRATCH.give(cols)
        del cols, y
    return out.reshape(n, cout, oh, ow)


def conv2d_weight_grad(g: np.ndarray, x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int],
                       padding: Pads2, dilation: tuple[int, int], groups: int) -> np.ndarray:  # fmt: skip
    """A 2-D convolution's weight gradient: per slice of the batch, ``g`` as rows (Cout, m*L) times
    the columns (Cin*K, m*L) transposed, one product per group with K = m * L, summed over slices.
    With few columns per channel (K <= SMALL_K) one product per sample (m, Cout, L) @ (m, L, K) and a
    sum: a product m*L deep with K outputs is BLAS's worst shape (W3's first layer: 1.5 -> 0.45 ms)."""
    n, cout, oh, ow = g.shape
    cin = x.shape[1]
    kh, kw = kernel
    cg = cin // groups
    length = oh * ow
    k = cg * kh * kw
    step = _batch_step(n, cin * kh * kw * length, x.size, g.size)
    gw = None
    for s in range(0, n, step):
        m = min(step, n - s)
        cols = COLUMNS.take(x, (tuple(kernel), stride, padding, dilation, groups)) if step >= n else None
        if cols is None:
            cols = im2col(x[s : s + m], kernel, stride, padding, dilation, (oh, ow))
        if k <= SMALL_K:
            per_sample = cols.reshape(groups, k, m, length).transpose(2, 0, 3, 1)  # (m, G, L, K)
            part = product(g[s : s + m].reshape(m, groups, cout // groups, length), per_sample).sum(axis=0)
        else:
            rows = SCRATCH.take((cout, m, length), g.dtype)
            np.copyto(rows, g[s : s + m].reshape(m, cout, length).transpose(1, 0, 2))
            # as (cols @ rows^T)^T: OpenBLAS runs (288, 12544) @ (12544, 64) in 6.5 ms against
            # 7.5 for (64, 12544) @ (12544, 288) (W3's second layer, one thread)
            if groups == 1:
                part = product(cols, rows.reshape(cout, m * length).T).T
            else:
                part = product(
                    cols.reshape(groups, k, m * length),
                    rows.reshape(groups, cout // groups, m * length).transpose(0, 2, 1),
                ).transpose(0, 2, 1)
            SCRATCH.give(rows)
            del rows
        gw = part if gw is None else gw + part
        SCRATCH.give(cols)
        del cols
    return np.ascontiguousarray(gw).reshape(cout, cg, kh, kw)


def conv2d_transpose(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, size: tuple[int, int],
                     stride: tuple[int, int], padding: Pads2, dilation: tuple[int, int], groups: int,
                     ) -> np.ndarray:  # fmt: skip
    """A 2-D transposed convolution (a convolution's input gradient): per slice of the batch, ``x`` as
    rows (Cin, m*L), one product per group (Cout/G * K, Cin/G) @ (Cin/G, m*L), then :func:`col2im`.
    One GEMM over the batch rather than one per sample: a 2-thread BLAS splits it, where it split
    each of W3's 64 small products (288x64x196) in two (quiet machine, profiled: 8.2 ms a step)."""
    n, cin, hx, wx = x.shape
    cog, kh, kw = w.shape[1:]
    wm = w.reshape(groups, cin // groups, cog * kh * kw).transpose(0, 2, 1)  # (G, Cout/G * K, Cin/G)
    length = hx * wx
    out = np.empty((n, groups * cog) + tuple(size), dtype=x.dtype)
    step = _batch_step(n, groups * cog * kh * kw * length, x.size, out.size)
    for s in range(0, n, step):
        m = min(step, n - s)
        rows = SCRATCH.take((cin, m, length), x.dtype)
        np.copyto(rows, x[s : s + m].reshape(m, cin, length).transpose(1, 0, 2))
        cols = SCRATCH.take((groups, cog * kh * kw, m * length), x.dtype)
        product(wm, rows.reshape(groups, cin // groups, m * length), out=cols)
        out[s : s + m] = col2im(cols.reshape(-1, m * length), size, (kh, kw), stride, padding, dilation, (hx, wx), n=m)
        SCRATCH.give(cols)
        SCRATCH.give(rows)
        del cols, rows
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out

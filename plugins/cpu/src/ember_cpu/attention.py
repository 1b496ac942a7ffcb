"""Scaled dot-product attention on the host, forward and backward, in blocks of heads.

Each block of the batch (the leading axes one index at a time, the last in slices whose score
block stays near :data:`BLOCK_SCORES` elements, so that the block's scores stay in L2 between
its passes) runs one batched BLAS product for ``q k^T``, the softmax in place, then ``p v``
into the output, which is laid out in memory as q is (heads cut out of one projection give an
output whose heads merge back without a copy). The forward's softmax is numpy's passes, in
place, so the result is bit for bit the shared kernel's (and an exported graph's MatMul /
Softmax pieces'). The backward recomputes the probabilities with one numba row pass
(:func:`ember_cpu.attention_kernels.softmax_rows`), then ``gv = p^T g``, ``gp = g v^T``, the
score gradient in one row pass with the scale folded in, and ``gq = gs k``, ``gk = gs^T q``:
five products written into the packed result, where the composite rule ran ten smaller ones,
a five-pass numpy softmax, softmax_backward, three scalings and three concatenations.

Without numba the backward's row passes are numpy too. 16-bit floats are computed in float32
and rounded back, as the backend's other heavy ops.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["BLOCK_SCORES", "attention_forward", "attention_backward"]

#: score elements per block (512 KiB of float32): W4's 4 heads x 128 x 128 in one block
BLOCK_SCORES = 1 << 17


def _rows() -> Any:
    """The numba row passes, or None without numba (the numpy ones then)."""
    from .fusion import numba_missing  # noqa: PLC0415

    if numba_missing() is not None:
        return None
    from . import attention_kernels  # noqa: PLC0415 - imports numba

    return attention_kernels


def _softmax_numpy(s: np.ndarray, scale: float, causal: bool, offset: int, empty_zero: bool) -> None:
    s *= s.dtype.type(scale)
    if causal:
        n, m = s.shape[-2:]
        s[..., np.arange(m)[None, :] > np.arange(n)[:, None] + offset] = -np.inf
    mx = s.max(axis=-1, keepdims=True, initial=-np.inf)  # no keys (S = 0): an empty row, a zero output
    s -= np.where(np.isinf(mx), 0, mx)
    np.exp(s, out=s)
    with np.errstate(invalid="ignore", divide="ignore"):  # 0/0: a row that sees no key
        s /= s.sum(axis=-1, keepdims=True)
    if empty_zero:
        s[np.isnan(s)] = 0


def _softmax_grad_numpy(p: np.ndarray, gp: np.ndarray, scale: float) -> None:
    gp -= (gp * p).sum(axis=-1, keepdims=True)
    gp *= p
    gp *= gp.dtype.type(scale)


def _swap(a: np.ndarray) -> np.ndarray:
    return a.swapaxes(-1, -2)


def _like(q: np.ndarray, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An empty array of ``shape`` whose axes lie in memory as q's do (the last one innermost):
    heads cut out of one projection, (B, L, H, E) in memory, give an output that the usual
    ``permute(0, 2, 1, 3).reshape(B, L, H * E)`` takes as a view, not a copy (W4: 0.9 ms)."""
    if q.ndim != len(shape) or q.ndim < 3 or 0 in q.strides[:-1] or q.flags.c_contiguous:
        return np.empty(shape, dtype=dtype)
    order = sorted(range(q.ndim - 1), key=lambda a: -abs(q.strides[a])) + [q.ndim - 1]
    return np.empty(tuple(shape[a] for a in order), dtype=dtype).transpose(np.argsort(order))


class _Workers:
    """The blocks of one call spread over the threads numpy's BLAS is given, each block's
    products then on one BLAS thread: a block's products are small (W4: 4 x 128 x 128 x 64),
    and a 2-thread GEMM of that size ran no faster than a 1-thread one (the 2-thread W4 step's
    attention took as long as the 1-thread one), while the blocks are independent. numpy's
    products and the numba passes release the GIL. Without threadpoolctl (nothing to pin the
    BLAS with) or with one BLAS thread, the blocks run in the caller, in order."""

    def __init__(self) -> None:
        self._libs: Any = None
        self._pool: Any = None
        self._ready = False

    def _start(self) -> None:
        from .threads import _controller  # noqa: PLC0415 - threadpoolctl's scan, once

        self._ready = True
        self._libs = _controller()

    def threads(self) -> int:
        """numpy's BLAS thread count now (1 when it cannot be read or pinned)."""
        if not self._ready:
            self._start()
        if not self._libs:
            return 1
        return max(1, min(lib.num_threads for lib in self._libs))

    def run(self, fn: Any, blocks: list[tuple[Any, ...]]) -> None:
        n = min(self.threads(), len(blocks), os.cpu_count() or 1) if len(blocks) > 1 else 1
        if n < 2 or not self._libs:
            for idx in blocks:
                fn(idx)
            return
        if self._pool is None or self._pool._max_workers < n - 1:
            from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

            self._pool = ThreadPoolExecutor(max_workers=n - 1, thread_name_prefix="ember-cpu-attention")
        saved = [lib.num_threads for lib in self._libs]
        for lib in self._libs:
            lib.set_num_threads(1)
        try:

            def many(part: list[tuple[Any, ...]]) -> None:
                for idx in part:
                    fn(idx)

            futures = [self._pool.submit(many, blocks[i::n]) for i in range(1, n)]
            many(blocks[0::n])
            for f in futures:
                f.result()
        finally:
            for lib, t in zip(self._libs, saved):
                lib.set_num_threads(t)


_WORKERS = _Workers()


def _run_blocks(fn: Any, blocks: list[tuple[Any, ...]]) -> None:
    """The blocks over ember's threads with the BLAS on one thread (:mod:`ember_cpu.gemm`), or
    else over as many threads as the BLAS has (:class:`_Workers`)."""
    from . import gemm  # noqa: PLC0415

    if not gemm.active():
        _WORKERS.run(fn, blocks)
        return

    def part(lo: int, hi: int) -> None:
        for idx in blocks[lo:hi]:
            fn(idx)

    gemm.blas_pin.enter()
    try:
        gemm.splitter.run(part, len(blocks), 1)
    finally:
        gemm.blas_pin.leave()


def _blocks(batch: tuple[int, ...], per_item: int) -> Iterator[tuple[Any, ...]]:
    """Index tuples covering ``batch``: the leading axes one at a time, the last in slices."""
    step = max(1, BLOCK_SCORES // max(per_item, 1))
    last = batch[-1]
    for lead in itertools.product(*(range(n) for n in batch[:-1])):
        for start in range(0, last, step):
            yield lead + (slice(start, min(start + step, last)),)


class _Operands:
    """q, k, v (and g, mask) broadcast over one batch shape, at least one batch axis, in the
    dtype the kernels compute in."""

    def __init__(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: np.ndarray | None, mask: np.ndarray | None):
        self.dtype = q.dtype
        work = q.dtype if q.dtype in (np.float32, np.float64) else np.dtype(np.float32)
        arrays = [a if a.dtype == work else a.astype(work) for a in (q, k, v) + ((g,) if g is not None else ())]
        lead = max(a.ndim for a in arrays)
        if lead == 2:
            arrays = [a[None] for a in arrays]
        self.batch = np.broadcast_shapes(*(a.shape[:-2] for a in arrays))
        arrays = [np.broadcast_to(a, self.batch + a.shape[-2:]) for a in arrays]
        self.q, self.k, self.v = arrays[:3]
        self.g = arrays[3] if g is not None else None
        self.work = work
        self.L, self.S = self.q.shape[-2], self.k.shape[-2]
        self.mask = None
        if mask is not None:
            if mask.dtype != np.bool_ and mask.dtype != work:
                mask = mask.astype(work)
            self.mask = np.broadcast_to(mask, self.batch + (self.L, self.S))

    def probabilities(
        self, idx: tuple[Any, ...], rows: Any, causal: bool, scale: float, empty_zero: bool
    ) -> np.ndarray:
        """softmax(q k^T * scale + mask) of one block, as a fresh C-contiguous array."""
        s = np.matmul(self.q[idx], _swap(self.k[idx]))
        offset = self.S - self.L
        if self.mask is not None:
            s *= s.dtype.type(scale)
            m = self.mask[idx]
            if m.dtype == np.bool_:
                np.copyto(s, -np.inf, where=~m)
            else:
                s += m
            scale = 1.0
        if rows is None:
            _softmax_numpy(s, scale, causal, offset, empty_zero)
        else:
            rows.softmax_rows(s, scale, causal, offset, empty_zero, s.dtype == np.float32)
        return s


def attention_forward(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None, *, is_causal: bool, scale: float
) -> np.ndarray:
    """softmax(q k^T * scale + mask) v over (..., L, E) queries, (..., S, E) keys, (..., S, Ev) values."""
    ops = _Operands(q, k, v, None, mask)
    rows = None  # numpy's passes, in place: bit for bit the shared kernel's (and an exported graph's) result
    out = _like(q, ops.batch + (ops.L, ops.v.shape[-1]), ops.work)

    def block(idx: tuple[Any, ...]) -> None:
        p = ops.probabilities(idx, rows, is_causal, scale, False)
        np.matmul(p, ops.v[idx], out=out[idx])

    _run_blocks(block, list(_blocks(ops.batch, ops.L * ops.S)))
    out = out.astype(ops.dtype, copy=False)
    lead = max(q.ndim, k.ndim, v.ndim)
    return out[0] if lead == 2 else out


def attention_backward(
    g: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None,
    *,
    is_causal: bool,
    scale: float,
) -> np.ndarray:
    """(gq, gk, gv) of attention at cotangent ``g``, each over the broadcast batch shape,
    flattened and concatenated into one array; rows that see no key give zero gradients."""
    ops = _Operands(q, k, v, g, mask)
    rows = _rows()
    shapes = [ops.batch + a.shape[-2:] for a in (ops.q, ops.k, ops.v)]
    sizes = [int(np.prod(s)) for s in shapes]
    packed = np.empty(sum(sizes), dtype=ops.work)
    gq = packed[: sizes[0]].reshape(shapes[0])
    gk = packed[sizes[0] : sizes[0] + sizes[1]].reshape(shapes[1])
    gv = packed[sizes[0] + sizes[1] :].reshape(shapes[2])

    def block(idx: tuple[Any, ...]) -> None:
        p = ops.probabilities(idx, rows, is_causal, scale, True)
        gc = ops.g[idx]
        np.matmul(_swap(p), gc, out=gv[idx])
        gs = np.matmul(gc, _swap(ops.v[idx]))
        if rows is None:
            _softmax_grad_numpy(p, gs, scale)
        else:
            rows.softmax_grad_rows(p, gs, scale)
        np.matmul(gs, ops.k[idx], out=gq[idx])
        np.matmul(_swap(gs), ops.q[idx], out=gk[idx])

    _run_blocks(block, list(_blocks(ops.batch, ops.L * ops.S)))
    return packed.astype(ops.dtype, copy=False)

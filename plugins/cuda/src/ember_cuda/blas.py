"""float32/float64 matmul straight into cuBLAS (``cublas<t>gemmStridedBatched`` through ctypes),
bypassing CuPy.

Two reasons. CuPy refuses every cuBLAS call while a stream is being captured (its low-level
binding included), so a step with a matmul could not become a CUDA graph (``em.jit`` then
replayed it op by op from Python); cuBLAS itself supports capture with the host pointer mode. And
``cupy.matmul`` of broadcast batches builds a device pointer array per call. Here one GEMM call
takes any (..., M, K) @ (..., K, N) whose operands are each C-contiguous or a transposed
C-contiguous matrix per batch, with a batch stride of 0 for a broadcast operand. Anything else
(other dtypes, other layouts, TF32 switched on) goes to the shared kernel.
"""

from __future__ import annotations

import ctypes
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import CudaError

__all__ = ["blas_kernels", "store_product", "CALLS"]

#: GEMM calls made here (tests read it to see the direct path ran; ``folded``: batches run as one GEMM)
CALLS: Counter[str] = Counter()

_N, _T = 0, 1  # cublasOperation_t

#: (..., M, K) @ (K, N) with A row-major and its batches following its rows (a linear layer over
#: (batch, sequence, features)) is one (batch * M, K) @ (K, N) GEMM, not a strided batch sharing B:
#: cuBLAS then picks its kernel for the real size; the probe scripts switch it off to compare
FOLD_BATCH = True


def _layout(a: Any) -> tuple[int, int, int] | None:
    """(operation, leading dimension, batch stride) of the last two axes of ``a`` seen by
    column-major cuBLAS, or None when they are neither row-major nor transposed row-major."""
    r, c = a.shape[-2:]
    item = a.itemsize
    s_r, s_c = a.strides[-2] // item, a.strides[-1] // item
    if (s_c == 1 or c == 1) and (s_r == c or r == 1):
        op, ld = _N, c
    elif (s_r == 1 or r == 1) and (s_c == r or c == 1):
        op, ld = _T, r
    else:
        return None
    batch = a.shape[:-2]
    if not batch:
        return op, max(ld, 1), 0
    # the batch axes must collapse to one stride (C order over the matrices), or be broadcast (0)
    strides = [s // item for s in a.strides[:-2]]
    if all(s == 0 or n == 1 for s, n in zip(strides, batch)):
        return op, max(ld, 1), 0
    expect = r * c
    for n, s in zip(reversed(batch), reversed(strides)):
        if n != 1 and s != expect:
            return None
        expect *= n
    return op, max(ld, 1), r * c


def _batch(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast batch axes of ``a @ b`` when each operand's are all of them (batch stride r*c)
    or hold one matrix (stride 0), else None (a partial broadcast: not one batch stride). Plain
    tuples: numpy's broadcast helpers cost microseconds a call on this host path."""
    if a == b:
        return a
    one_a, one_b = math.prod(a) == 1, math.prod(b) == 1
    if one_a and one_b:
        return (1,) * max(len(a), len(b))
    if one_a and len(a) <= len(b):
        return b
    if one_b and len(b) <= len(a):
        return a
    return None


def store_product(r: Any, out: Any, accumulate: bool) -> Any:
    """A product ``r`` computed elsewhere, into ``out`` (added to it with ``accumulate``); ``r`` when
    there is no ``out``: what a matmul without cuBLAS's store does for ``out=`` / ``accumulate=``."""
    if out is None:
        return r
    if accumulate:
        out += r
    else:
        out[...] = r
    return out


def _library() -> ctypes.CDLL:
    """The libcublas CuPy has loaded (a second dlopen of the same soname returns it)."""
    for name in ("libcublas.so.13", "libcublas.so.12", "libcublas.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("libcublas is not loadable")


def _entry_points(lib: ctypes.CDLL) -> tuple[Any, dict[Any, Any]]:
    i, ll, p = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
    set_stream = lib.cublasSetStream_v2
    set_stream.argtypes, set_stream.restype = [p, p], i
    gemms = {}
    for dt, name in (
        (np.dtype(np.float32), "cublasSgemmStridedBatched"),
        (np.dtype(np.float64), "cublasDgemmStridedBatched"),
    ):
        fn = getattr(lib, name)
        fn.argtypes = [p, i, i, i, i, i, p, p, i, ll, p, i, ll, p, p, i, ll, i]
        fn.restype = i
        gemms[dt] = fn
    return set_stream, gemms


def blas_kernels(cp: Any, fallback: dict[str, Callable[..., Any]], tf32: Callable[[], bool]) -> dict[str, Any]:
    """``matmul`` through cuBLAS directly, ``fallback["matmul"]`` for what it does not cover."""
    other = fallback["matmul"]
    try:
        set_stream, gemm = _entry_points(_library())
    except (OSError, AttributeError):
        return {}  # no loadable cuBLAS of these names: CuPy's matmul serves
    # alpha and beta: host scalars that live as long as the kernels; their addresses are taken
    # once (numpy's ``.ctypes`` builds an object per read: microseconds a GEMM on W3's host path)
    scalars = [np.ones((), dtype=dt) for dt in gemm] + [np.zeros((), dtype=dt) for dt in gemm]
    one = {dt: scalars[i].ctypes.data for i, dt in enumerate(gemm)}
    zero = {dt: scalars[len(gemm) + i].ctypes.data for i, dt in enumerate(gemm)}
    handle_of = cp.cuda.device.get_cublas_handle
    last: dict[int, int] = {}  # per cuBLAS handle, the stream it was last set to
    stream_of = cp.cuda.get_current_stream

    def shared(a: Any, b: Any, out: Any, accumulate: bool) -> Any:
        return store_product(other(a, b), out, accumulate)

    def matmul(a: Any, b: Any, *, out: Any = None, accumulate: bool = False) -> Any:
        """``a @ b``; into ``out`` (C-contiguous, the product's shape and dtype) when given, added to
        what it holds with ``accumulate`` (cuBLAS's beta = 1: a sum of products without a temporary)."""
        dt = a.dtype
        call = gemm.get(dt)
        if call is None or b.dtype != dt or a.ndim < 2 or b.ndim < 2 or tf32():
            return shared(a, b, out, accumulate)
        m, k = a.shape[-2:]
        k2, n = b.shape[-2:]
        if k != k2 or 0 in (m, n, k):
            return shared(a, b, out, accumulate)
        la, lb = _layout(a), _layout(b)
        if la is None or lb is None:
            return shared(a, b, out, accumulate)
        if a.ndim == 2 and b.ndim == 2:  # the common case, without numpy's shape helpers
            batch: tuple[int, ...] = ()
            count = 1
        else:
            batch = _batch(a.shape[:-2], b.shape[:-2])
            if batch is None:  # partly broadcast (e.g. (B, 1) against (B, H)): not one stride
                return shared(a, b, out, accumulate)
            count = math.prod(batch)
        if out is not None and (out.shape != (*batch, m, n) or out.dtype != dt or not out.flags.c_contiguous):
            return shared(a, b, out, accumulate)
        rows = m
        if FOLD_BATCH and count > 1 and lb[2] == 0 and la[0] == _N and la[2] == m * la[1]:
            rows, count = m * count, 1  # A's batches continue its rows and C's do too (C order)
            CALLS["folded"] += 1
        if out is None:
            out = cp.empty((*batch, m, n), dtype=dt)
        handle = handle_of()
        stream = stream_of().ptr
        if last.get(handle) != stream:  # cublasSetStream also resets the handle's workspace: only on a change
            set_stream(handle, stream)
            last[handle] = stream
        # row-major C = A @ B is column-major C^T = B^T @ A^T: cuBLAS's first operand is B
        status = call(
            handle, lb[0], la[0], n, rows, k,
            one[dt], b.data.ptr, lb[1], lb[2],
            a.data.ptr, la[1], la[2],
            (one if accumulate else zero)[dt], out.data.ptr, n, m * n, count,
        )  # fmt: skip
        if status:
            raise CudaError(f"matmul: cuBLAS gemmStridedBatched returned status {status} for {a.shape} @ {b.shape}")
        CALLS["gemm"] += 1
        return out

    matmul.scalars = scalars  # type: ignore[attr-defined]  # the addresses above stay valid while matmul lives
    matmul.takes_out = True  # type: ignore[attr-defined]  # conv's chunks write and sum in place
    return {"matmul": matmul}

"""Large matrix products over the cores with ember's own threads, numpy's BLAS on one thread.

OpenBLAS's idle workers busy-wait ~0.1 s after each multithreaded product, so the core a
product's second thread ran on stays taken while the next kernels (a fused kernel split over
the cores, :mod:`ember_cpu.parallel`) want it. So while ember's threads have kernels of their
own to split (:func:`wanted`), the backend's BLAS-bound ops run with the BLAS pinned to one
thread (:class:`BlasPin`: set on entry, the previous count put back when the last of ember's
calls leaves), and a large product is cut into blocks of rows (of columns when it has few rows,
of batches when batched) that the caller and :data:`ember_cpu.parallel.splitter`'s helpers
compute at once, each block one ``np.matmul(..., out=...)`` that releases the GIL. A helper
sleeps on a queue when its block is done: nothing spins after a product. Otherwise OpenBLAS's
own threads, faster at a product on their own (they share packed operands and start at once),
keep the products.

OpenBLAS does not cut the inner (K) dimension across threads nor vary its kernel with the
number of rows, so every output element is summed in the same order as by the whole product:
the blocks give the unsplit product's bits (the tests check it against the whole product and
float64). Blocks also follow the machine's load as the fused kernels' chunks do: a helper that
is descheduled leaves its blocks to the caller instead of holding up a static split.

``EMBER_CPU_SPLIT_GEMM=0`` turns this off (numpy's BLAS runs its own threads as it is set);
unset or ``1``, it is on where numpy's BLAS is OpenBLAS on pthreads and ``threadpoolctl`` can find
it, and ``EMBER_CPU_BLAS_THREADS`` is unset or 0 (that setting hands the BLAS its threads). The
threads are :data:`ember_cpu.parallel.splitter`'s (``EMBER_CPU_FUSED_THREADS``).
"""

from __future__ import annotations

import ctypes
import math
import threading
import time
from typing import Any

import numpy as np

from . import settings
from .parallel import splitter

__all__ = [
    "MIN_SPLIT_FLOPS", "MIN_BLOCK_FLOPS", "SPLIT_GEMM", "BlasPin", "blas_pin", "active", "wanted", "matmul", "product",
]  # fmt: skip

#: products of fewer floating-point operations (2 M N K per matrix) run on the calling thread
#: alone (two blocks of at least :data:`MIN_BLOCK_FLOPS`): (1024, 256) @ (256, 256), 134 MFLOP,
#: ran 1.27 ms on one thread, 0.71 split in two
MIN_SPLIT_FLOPS = 1 << 25

#: the fewest floating-point operations a block gets: OpenBLAS's packing of the other operand,
#: repeated by every block, stays small beside the block's arithmetic, and M N K stays above
#: 28 * 512^2, where OpenBLAS (AVX-512) runs a one-thread row-major product through its "direct"
#: kernel (another summation order) instead of the packed one a whole product of this size takes
MIN_BLOCK_FLOPS = 1 << 24

_FLOATS = tuple(np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128))


class BlasPin:
    """numpy's BLAS on one thread while any of ember's calls runs, its previous count put back
    after the last one leaves. Through the BLAS's own ``openblas_set_num_threads`` (ctypes,
    ~0.2 us a call), not threadpoolctl's setter: that one acts only from the first thread that
    used it, and ember's callers may be any thread. threadpoolctl only finds the library."""

    def __init__(self) -> None:
        self._ready = False
        self._lock = threading.Lock()
        self._depth = 0
        self._saved: list[int] = []
        #: (get, set) of each BLAS pinned; empty when none can be
        self.funcs: list[tuple[Any, Any]] = []
        #: why nothing is pinned (None: it is)
        self.why_not: str | None = None

    def _start(self) -> None:
        from .threads import _controller  # noqa: PLC0415 - threadpoolctl's scan of the loaded libraries, once

        self._ready = True
        libs = _controller()
        if not libs:
            self.why_not = "threadpoolctl is not installed or found no BLAS"
            return
        funcs = []
        for lib in libs:
            if lib.internal_api != "openblas" or getattr(lib, "threading_layer", "") != "pthreads":
                self.why_not = f"numpy's BLAS is {lib.internal_api} ({getattr(lib, 'threading_layer', '?')})"
                return
            dll = ctypes.CDLL(lib.filepath)
            pair = None
            for prefix in ("", "scipy_"):
                for suffix in ("", "64_", "_64"):
                    get = getattr(dll, f"{prefix}openblas_get_num_threads{suffix}", None)
                    set_ = getattr(dll, f"{prefix}openblas_set_num_threads{suffix}", None)
                    if get is not None and set_ is not None and pair is None:
                        pair = (get, set_)
            if pair is None:
                self.why_not = f"{lib.filepath} has no openblas_set_num_threads"
                return
            pair[0].restype, pair[0].argtypes = ctypes.c_int, []
            pair[1].restype, pair[1].argtypes = None, [ctypes.c_int]
            funcs.append(pair)
        self.funcs = funcs

    @property
    def available(self) -> bool:
        if not self._ready:
            self._start()
        return bool(self.funcs)

    def held(self) -> bool:
        """Whether one of ember's calls holds the BLAS on one thread now."""
        return self._depth > 0

    def enter(self) -> None:
        """Pin the BLAS to one thread (the first of nested or concurrent callers saves its count)."""
        if not self._ready:
            self._start()
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                self._saved = [get() for get, _ in self.funcs]
                for (_, set_), n in zip(self.funcs, self._saved):
                    if n != 1:
                        set_(1)

    def leave(self) -> None:
        """Put the saved count back when the last caller leaves."""
        with self._lock:
            self._depth -= 1
            if self._depth == 0:
                for (_, set_), n in zip(self.funcs, self._saved):
                    if n != 1:
                        set_(n)


#: the process's pin (the BLAS's thread count is process-wide)
blas_pin = BlasPin()


#: ``EMBER_CPU_SPLIT_GEMM``, read when the backend is imported (a bad value raises then)
SPLIT_GEMM = settings.split_gemm()


class _Policy:
    #: whether the BLAS-bound ops pin the BLAS and split their products (None: not decided yet;
    #: decided on first use, as finding the BLAS scans the loaded libraries)
    on: bool | None = None


policy = _Policy()


#: seconds after ember's threads last had a kernel of their own to split (a fused region,
#: attention's blocks) during which the BLAS-bound ops pin the BLAS and split their products
RECENT = 0.25


def wanted() -> bool:
    """Whether this BLAS-bound op pins the BLAS and splits its products: :func:`active`, and
    ember's threads split a kernel of their own within :data:`RECENT` seconds. Without such
    kernels (W2: products and small elementwise ops) nothing contends with OpenBLAS's spinning
    workers, whose shared packing and instant start make its own threads faster at products
    (W2's (128, 1024) @ (1024, 1024): 1.52 ms against 1.66-1.70 split), so they keep them."""
    return time.monotonic() - splitter.last_own < RECENT and active()


def active() -> bool:
    """Whether the backend's BLAS-bound ops may pin the BLAS and split large products themselves."""
    on = policy.on
    if on is None:
        fixed = settings.blas_threads() != 0
        on = policy.on = SPLIT_GEMM and not fixed and blas_pin.available
    return on


#: blocks a product is cut into per thread: one repacks the other operand least (two gave W4
#: 1.13-1.41x torch against 0.88-1.17x for one, interleaved at load ~2: no clear difference)
BLOCKS_PER_THREAD = 1


def _grain(count: int, unit_flops: int, threads: int) -> int:
    """Units (rows, columns or matrices) a block gets out of ``count``: :data:`BLOCKS_PER_THREAD`
    blocks a thread, none under :data:`MIN_BLOCK_FLOPS`."""
    return max(-(-count // (BLOCKS_PER_THREAD * threads)), -(-MIN_BLOCK_FLOPS // max(unit_flops, 1)))


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """``a @ b`` (both at least 2-D, one float dtype) split over ember's threads, into ``out``
    when given, or None when it is too small, of another kind, or there is one thread: the
    caller then runs the whole product. float16 / bfloat16 are computed in float32."""
    threads = splitter.threads
    if threads < 2 or a.ndim < 2 or b.ndim < 2 or a.dtype != b.dtype:
        return None
    half = a.dtype == np.float16 or a.dtype.name == "bfloat16"
    if not half and a.dtype not in _FLOATS:
        return None
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if b.shape[-2] != k or m < 2 or n < 2:  # a vector side: GEMV, memory-bound
        return None
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if 2 * m * n * k * math.prod(batch) < MIN_SPLIT_FLOPS:
        return None
    if half:
        return _half(a, b, out)
    if out is None:
        out = np.empty(batch + (m, n), dtype=a.dtype)
    blas_pin.enter()  # already pinned under the backend's ops; callers from elsewhere too
    try:
        _split(a, b, out, batch, threads)
    finally:
        blas_pin.leave()
    return out


def _half(a: np.ndarray, b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    f32 = np.float32
    r = matmul(a.astype(f32), b.astype(f32))
    assert r is not None  # the same shapes, float32
    if out is None:
        return r.astype(a.dtype)
    np.copyto(out, r, casting="unsafe")
    return out


def product(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``np.matmul(a, b, out=out)``, split over ember's threads when the calling op pinned the
    BLAS (:func:`wanted`) and :func:`matmul` takes it."""
    if blas_pin.held():
        r = matmul(a, b, out)
        if r is not None:
            return r
    return np.matmul(a, b, out=out)


def _split(a: np.ndarray, b: np.ndarray, out: np.ndarray, batch: tuple[int, ...], threads: int) -> None:
    m, k = a.shape[-2:]
    n = b.shape[-1]
    if batch and batch[0] > 1:  # blocks of the first batch axis
        a = np.broadcast_to(a, batch + (m, k))
        b = np.broadcast_to(b, batch + (k, n))

        def call(lo: int, hi: int) -> None:
            np.matmul(a[lo:hi], b[lo:hi], out=out[lo:hi])

        count, unit = batch[0], 2 * m * n * k * math.prod(batch[1:])
    elif m >= n:  # blocks of rows

        def call(lo: int, hi: int) -> None:
            np.matmul(a[..., lo:hi, :], b, out=out[..., lo:hi, :])

        count, unit = m, 2 * n * k * math.prod(batch)
    else:  # blocks of columns

        def call(lo: int, hi: int) -> None:
            np.matmul(a, b[..., lo:hi], out=out[..., lo:hi])

        count, unit = n, 2 * m * k * math.prod(batch)
    splitter.run(call, count, _grain(count, unit, threads), own=False)

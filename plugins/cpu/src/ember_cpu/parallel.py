"""Large fused elementwise kernels over several cores with plain threads: the range is cut into
chunks that the calling thread and helper threads take one at a time, each chunk a call of the
same serial ``nogil`` numba kernel (:mod:`ember_cpu.fusion`).

No OpenMP and no spinning: a helper sleeps on a queue between kernels, so numpy's BLAS threads
keep the cores between two products (numba's ``parallel=True`` loops, ``EMBER_CPU_NUMBA_PARALLEL=1``,
took W6 to 1.11x torch but W2/W3/W4 to 3-5x, their OpenMP workers and OpenBLAS's spinning for the
same 2 cores). The caller never waits for a chunk nobody took: a helper that is descheduled (the
machine loaded by other processes) or busy with another kernel leaves its chunks to the caller,
which then runs the whole range as the serial kernel would, plus a little bookkeeping. The caller
waits only for chunks a helper is running.

Each element is computed by the same code whichever thread runs its chunk, so the results are
bit-identical to the serial kernel's. ``EMBER_CPU_FUSED_THREADS=n`` sets the threads (helpers and
the caller; ``1``: serial); unset, every core the process may run on, less those other processes
kept busy over the last 0.25 s (:class:`Load`). With ``EMBER_CPU_NUMBA_PARALLEL=1`` the kernels
are numba's parallel loops and nothing is split here.

Right after a multithreaded product a split gains little: OpenBLAS's idle workers busy-wait
~0.1 s after each one (no ``sched_yield``), and the helper shares a core with one (W4's
(1024, 1024) bias-add GELU: 4.0 ms serial, 2.2 split, but 4.1-4.6 split right after a GEMM;
giving the other threads nice 19 or SCHED_IDLE meanwhile did not help reliably, so nothing of
the kind is done). ``OPENBLAS_THREAD_TIMEOUT=4`` in the environment before numpy is imported
makes the workers sleep right after each product: 2.3-2.4 ms split after a GEMM, the GEMM itself
unchanged (3.1-3.4 ms).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from . import settings
from .numba_codegen import PARALLEL
from .threads import WINDOW, _busy_seconds

__all__ = ["MIN_SPLIT_ELEMENTS", "MIN_SPLIT_ARITHMETIC", "CHUNK_ELEMENTS", "Splitter", "splitter"]

#: fused kernels with a transcendental op (exp, erf, GELU, sigmoid...: compute-bound) over fewer
#: elements run on the calling thread alone (a split costs ~15 us); W4's GELU regions are 2^20
MIN_SPLIT_ELEMENTS = 1 << 20

#: the same for kernels of arithmetic alone (memory-bound): W2's 1024x1024 and 784x1024 updates
#: ran no faster split, often slower right after their products (interleaved rounds: W2 1.01-1.20x
#: torch serial, 1.08-1.18x split), so only much larger ones split
MIN_SPLIT_ARITHMETIC = 1 << 22

#: elements of one chunk: small enough that a descheduled helper holds back little, large
#: enough that a numba call's ~5 us of dispatch stays small
CHUNK_ELEMENTS = 1 << 17


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _threads() -> int:
    """Threads of a split kernel (``EMBER_CPU_FUSED_THREADS``): unset, every core; 1 under numba's own
    parallel loops."""
    return 1 if PARALLEL else settings.fused_threads(_cores())


class _Job:
    """One split kernel: ``call(lo, hi)`` over ``[0, count)`` in chunks of ``grain``."""

    __slots__ = ("call", "count", "grain", "next", "busy", "lock", "done", "error", "helped")

    def __init__(self, call: Callable[[int, int], Any], count: int, grain: int) -> None:
        self.call, self.count, self.grain = call, count, grain
        self.next = 0
        self.busy = 0  # chunks taken and not finished
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.helped = 0  # chunks the helpers ran

    def work(self, helper: bool) -> None:
        """Take chunks until none is left; sets ``done`` when the last running chunk finishes."""
        lock = self.lock
        while True:
            with lock:
                lo = self.next
                if lo >= self.count or self.error is not None:
                    return
                self.next = hi = min(self.count, lo + self.grain)
                self.busy += 1
                if helper:
                    self.helped += 1
            try:
                self.call(lo, hi)
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                with lock:
                    self.error = self.error or e
            finally:
                with lock:
                    self.busy -= 1
                    if self.busy == 0 and (self.next >= self.count or self.error is not None):
                        self.done.set()


class Load:
    """Cores the other processes keep busy, measured as :class:`ember_cpu.threads.BlasThreads`
    does (``/proc/stat``'s busy time less this process's CPU time, every ``WINDOW`` seconds):
    a helper thread on a core another process holds waits for the scheduler's next slice,
    and the caller waits for the chunk that helper holds (a GELU region after a product on
    the 2-core machine at load ~7: 4.2 ms serial, 8.2 split)."""

    def __init__(self) -> None:
        self.cores = _cores()
        #: other processes' busy cores over the last window (0 until measured)
        self.others = 0.0
        self._next = 0.0
        self._sample: tuple[float, float, float] | None = None

    def idle(self) -> int:
        """Cores the other processes left idle over the last window (all of them without /proc)."""
        now = time.monotonic()
        if now >= self._next:
            busy = _busy_seconds()
            if busy is not None:
                own = time.process_time()
                if self._sample is not None:
                    wall, busy0, own0 = self._sample
                    self.others = max(0.0, (busy - busy0) - (own - own0)) / max(now - wall, 1e-9)
                self._sample = (now, busy, own)
            self._next = now + WINDOW
        return max(1, min(self.cores, int(self.cores - self.others + 0.25)))


class Splitter:
    """The helper threads (started on first use, daemons) and the policy of when to split."""

    def __init__(self, threads: int | None = None) -> None:
        #: threads a split kernel runs on, the caller's included (1: never split)
        self.threads = _threads() if threads is None else threads
        #: kernels split, kernels left whole because other processes held the cores, and chunks
        #: the helper threads ran (the rest ran on the callers)
        self.counts = {"split": 0, "busy": 0, "helper_chunks": 0}
        #: ``time.monotonic()`` when a kernel of ember's own (not a product, ``own=False``) last
        #: asked to be split, whether or not the cores were idle: while this is recent the
        #: backend's products run on these threads too (:func:`ember_cpu.gemm.wanted`)
        self.last_own = float("-inf")
        #: the other processes' load (None: not measured, every core counts as idle)
        self.load: Load | None = Load() if threads is None else None
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._helpers: list[threading.Thread] = []
        self._lock = threading.Lock()

    def wanted(self, elements: int, heavy: bool = True) -> bool:
        """Whether a kernel over ``elements`` elements is split (``heavy``: it has a
        transcendental op, see :data:`MIN_SPLIT_ELEMENTS`)."""
        return self.threads > 1 and elements >= (MIN_SPLIT_ELEMENTS if heavy else MIN_SPLIT_ARITHMETIC)

    def _start(self) -> None:
        with self._lock:
            while len(self._helpers) < self.threads - 1:
                t = threading.Thread(target=self._serve, name=f"ember-cpu-fused-{len(self._helpers)}", daemon=True)
                t.start()
                self._helpers.append(t)

    def _serve(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            job.work(helper=True)

    def run(self, call: Callable[[int, int], Any], count: int, grain: int, own: bool = True) -> None:
        """``call(lo, hi)`` over ``[0, count)`` in chunks of ``grain``, on this thread and the
        helpers; returns when every chunk has run (re-raising a chunk's error). ``own``: a
        kernel of ember's own (recorded in :attr:`last_own`), not a BLAS product."""
        grain = max(1, grain)
        if own and count > grain and self.threads > 1:
            self.last_own = time.monotonic()
        threads = self.threads if self.load is None else min(self.threads, self.load.idle())
        if threads <= 1 or count <= grain:
            self.counts["busy"] += self.threads > 1 and count > grain
            call(0, count)
            return
        if len(self._helpers) < self.threads - 1:
            self._start()
        job = _Job(call, count, grain)
        for _ in range(min(threads - 1, (count - 1) // grain)):
            self._queue.put(job)
        job.work(helper=False)
        job.done.wait()
        self.counts["split"] += 1
        self.counts["helper_chunks"] += job.helped
        if job.error is not None:
            raise job.error


#: the process's helper threads for fused kernels
splitter = Splitter()

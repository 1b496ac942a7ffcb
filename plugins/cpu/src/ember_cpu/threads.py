"""How many threads numpy's BLAS gets for the backend's matmuls: every core while other processes
leave the machine idle, fewer while they keep its cores busy.

A multithreaded GEMM splits its work statically and waits for every part: when another process
holds a core, the part on that core waits for the scheduler's next slice. On the 2-core dev
machine under a load of ~5, a (128, 784) @ (784, 1024) float32 product took 2.1-2.4 ms on one
OpenBLAS thread and 6.5-28 ms on two, and W2's training step 22 ms against 152 ms. So before a
BLAS-bound kernel the backend asks :meth:`BlasThreads.update`, which every :data:`WINDOW` seconds
measures the CPU time other processes took (``/proc/stat``'s busy time less this process's own)
and gives the BLAS the cores they left: ``floor(cores - others + 0.25)``, at least one.

Opt-in: ``EMBER_CPU_BLAS_THREADS=auto`` turns the load-following policy on, ``n`` fixes the count,
unset or ``0`` leaves the BLAS alone (the default: the thread count is process-wide, numpy's own
calls included, and a library should not change it behind its user's back). Needs
``threadpoolctl`` (to set the BLAS's thread count) and, for ``auto``, Linux's ``/proc/stat``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from . import settings

__all__ = ["WINDOW", "BlasThreads", "blas_threads"]

#: seconds between two measurements of the other processes' load (``/proc/stat`` counts in ticks
#: of 10 ms on most kernels, so a shorter window reads mostly rounding)
WINDOW = 0.25


def _busy_seconds() -> float | None:
    """Seconds of CPU time every core spent busy since boot (``/proc/stat``'s first line), or None."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu" or len(fields) < 8:
        return None
    ticks = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    busy = sum(ticks) - ticks[3] - ticks[4]
    return busy / _TICK


_TICK = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _controller() -> Any:
    """threadpoolctl's controllers of numpy's BLAS (the one the backend's kernels call), or None.
    A wheel's BLAS lives beside numpy (``numpy.libs``, ``numpy/.dylibs``): only that one is
    changed, not scipy's or another library's; a BLAS installed elsewhere (conda's) is taken
    when no such file is loaded."""
    try:
        from threadpoolctl import ThreadpoolController  # noqa: PLC0415 - optional, scans loaded libraries
    except ImportError:
        return None
    libs = ThreadpoolController().select(user_api="blas").lib_controllers
    root = os.path.dirname(os.path.dirname(os.path.abspath(np.__file__)))
    mine = [c for c in libs if os.path.abspath(c.filepath).startswith(os.path.join(root, "numpy"))]
    return mine or libs or None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class BlasThreads:
    """The BLAS's thread count, set from the other processes' load of the last window."""

    def __init__(self) -> None:
        self.cores = _cores()
        #: the count last set (None: not set yet); what tests and the log read
        self.threads: int | None = None
        #: other processes' busy cores measured over the last window
        self.others = 0.0
        #: None: follow the load (``auto``); 0: leave the BLAS alone (unset, the default); n: fixed
        self._fixed = settings.blas_threads()
        self._libs: Any = None
        self._ready = False
        self._next = 0.0
        self._wall = 0.0
        self._busy = 0.0
        self._own = 0.0

    def _start(self) -> bool:
        """Find the BLAS and take the first sample; False if nothing is to be done."""
        self._ready = True
        if self._fixed == 0 or (self._fixed is None and self.cores < 2):
            return False
        self._libs = _controller()
        if self._libs is None:
            return False
        if self._fixed is not None:
            self._set(self._fixed)
            self._libs = None  # fixed: never measure
            return False
        busy = _busy_seconds()
        if busy is None:
            self._libs = None
            return False
        self._wall, self._busy, self._own = time.monotonic(), busy, time.process_time()
        self._next = self._wall + WINDOW
        return True

    def _set(self, n: int) -> None:
        if n != self.threads:
            for lib in self._libs:
                lib.set_num_threads(n)
            self.threads = n

    def update(self) -> None:
        """Re-measure if a window has passed since the last measurement (a clock read otherwise)."""
        if not self._ready:
            if not self._start():
                return
        if self._libs is None:
            return
        now = time.monotonic()
        if now < self._next:
            return
        busy, own = _busy_seconds(), time.process_time()
        if busy is None:
            return
        wall = now - self._wall
        self.others = max(0.0, (busy - self._busy) - (own - self._own)) / wall
        self._wall, self._busy, self._own, self._next = now, busy, own, now + WINDOW
        self._set(max(1, min(self.cores, int(self.cores - self.others + 0.25))))


#: the process's one policy (the BLAS's thread count is a process-wide setting)
blas_threads = BlasThreads()

"""Every setting ember-cpu reads from the environment, in one place (core's are in ``ember.config``).

| variable                 | meaning                                                              | default     |
|--------------------------|----------------------------------------------------------------------|-------------|
| EMBER_CPU_NUMBA          | 0: no numba (no fused kernels, numpy's paths only)                   | 1           |
| EMBER_CPU_NUMBA_PARALLEL | 1: numba's own parallel loops instead of ember's threads             | 0           |
| EMBER_CPU_FUSED_THREADS  | threads a split fused kernel runs on (1: serially)                   | every core  |
| EMBER_CPU_SPLIT_GEMM     | 0: numpy's BLAS runs its own threads instead of ember splitting      | 1           |
| EMBER_CPU_BLAS_THREADS   | the BLAS's threads: a count, auto (follow the load), 0 (leave alone) | 0           |
| EMBER_CPU_MALLOC         | 0: leave glibc's malloc thresholds alone                             | 1           |

Those read at import (numba's, the split) take effect in a new process.
"""

from __future__ import annotations

import os

from ember.config import env_flag, env_int, read_errors

__all__ = ["check", "numba", "numba_parallel", "fused_threads", "split_gemm", "blas_threads", "malloc"]


def numba() -> bool:
    """Whether numba compiles the fused kernels and the numba kernels run (``EMBER_CPU_NUMBA=0``: no)."""
    return env_flag("EMBER_CPU_NUMBA", True)


def numba_parallel() -> bool:
    """Whether generated kernels use numba's ``parallel=True`` loops (``EMBER_CPU_NUMBA_PARALLEL=1``)."""
    return env_flag("EMBER_CPU_NUMBA_PARALLEL", False)


def fused_threads(cores: int) -> int:
    """Threads a split fused kernel runs on, the caller's included (``EMBER_CPU_FUSED_THREADS``; unset:
    ``cores``)."""
    return env_int("EMBER_CPU_FUSED_THREADS", cores, what="threads", example="2", minimum=1)


def split_gemm() -> bool:
    """Whether large products split over ember's threads with numpy's BLAS on one thread
    (``EMBER_CPU_SPLIT_GEMM=0``: the BLAS runs its own threads)."""
    return env_flag("EMBER_CPU_SPLIT_GEMM", True)


def blas_threads() -> int | None:
    """The BLAS's thread count (``EMBER_CPU_BLAS_THREADS``): a count; None for ``auto`` (follow the
    machine's load); 0, the default, leaves numpy's BLAS alone."""
    if os.environ.get("EMBER_CPU_BLAS_THREADS", "").strip().lower() == "auto":
        return None
    return env_int(
        "EMBER_CPU_BLAS_THREADS",
        0,
        what="a thread count or auto (follow the machine's load)",
        example="2",
        zero="leave numpy's BLAS alone",
    )


def malloc() -> bool:
    """Whether ember sets glibc's malloc thresholds for large tensors (``EMBER_CPU_MALLOC=0``: no)."""
    return env_flag("EMBER_CPU_MALLOC", True)


def check() -> list[str]:
    """What ``ember settings`` reports: the values set now that these readers refuse."""
    return read_errors(
        [numba, numba_parallel, lambda: fused_threads(1), split_gemm, blas_threads, malloc]
    )  # fmt: skip

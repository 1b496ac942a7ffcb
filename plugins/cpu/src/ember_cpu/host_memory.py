"""glibc malloc settings that keep freed array memory in the process for the next array.

numpy takes every array's buffer from malloc. glibc serves blocks above its mmap threshold
(128 KiB at start, raised to the largest block freed so far, at most 32 MiB) with fresh
``mmap``s, and gives the top of its heap back to the kernel once more than the trim threshold
(twice the mmap threshold) lies free there. A training step allocates and frees the same
megabyte-sized temporaries every step, so each step faulted its pages in again: W4 (B8 S128
d256) took 3,500 page faults a step, 8-12 ms of system time in 72-83 ms on one thread, where
torch's step took 0-500. With the mmap threshold at 32 MiB and the trim threshold at 256 MiB,
the blocks stay in the heap and are reused: 0 faults and 71-74 ms.

The settings are process-wide (the user's own numpy arrays are served the same way) and keep up
to the trim threshold of freed memory in the process, as a framework's caching allocator does.
``EMBER_CPU_MALLOC=0`` leaves malloc alone; without glibc nothing is changed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

from . import settings

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "applied", "keep_freed_memory"]

#: blocks up to this size come from the heap (glibc's largest allowed value on 64-bit hosts)
MMAP_THRESHOLD = 32 << 20
#: free memory at the heap's top kept before glibc returns it to the kernel
TRIM_THRESHOLD = 256 << 20

_M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
_M_MMAP_THRESHOLD = -3

#: whether :func:`keep_freed_memory` changed malloc's settings in this process
applied = False


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds (once per process); False where nothing was changed:
    ``EMBER_CPU_MALLOC=0``, another C library, or a mallopt that refused a value."""
    global applied
    if applied:
        return True
    if not settings.malloc() or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # the mmap threshold first: setting either turns glibc's own adjustment of both off
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
    applied = ok
    return ok

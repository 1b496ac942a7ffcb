"""The OpenCL driver's start-up (the ICD loader's platforms and their devices) on a thread of its
own while ember-opencl's modules import, so a device's opening does not wait for both in turn.

The first ``clGetPlatformIDs`` of a process loads every vendor's library and starts it: 0.02-0.04
s for PoCL on the 2-core VM, ~0.15 s for NVIDIA's with PoCL beside it on an H100 (``platforms_s`` of
``benchmarks.cold_start``). pyopencl holds the GIL through that call, so this module calls the same
loader through ctypes, which releases it. Only the loader pyopencl itself loaded is called (found in
``/proc/self/maps`` once pyopencl is imported: a wheel's bundled loader needs pyopencl's own set-up
first), never another one; on a system without ``/proc`` nothing starts early.
:func:`wait` runs before ember's first OpenCL call (``runtime.device_list``), so the loader is
never started from two threads at once. ``EMBER_OPENCL_EARLY_DRIVER=0`` turns it off.
"""

from __future__ import annotations

import ctypes
import os
import threading

from . import settings

__all__ = ["start", "wait", "loader_path"]

_CL_DEVICE_TYPE_ALL = 0xFFFFFFFF
_thread: threading.Thread | None = None
_lock = threading.Lock()


def loader_path() -> str | None:
    """The file of the OpenCL ICD loader mapped into this process (pyopencl's), or None."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libOpenCL"):
                    return fields[5].strip()
    except OSError:
        pass
    return None


def _enumerate(path: str) -> None:
    """Ask the loader for its platforms and each one's devices (what ``device_list`` asks next)."""
    try:
        lib = ctypes.CDLL(path)
        count = ctypes.c_uint(0)
        if lib.clGetPlatformIDs(0, None, ctypes.byref(count)) != 0 or not count.value:
            return
        platforms = (ctypes.c_void_p * count.value)()
        if lib.clGetPlatformIDs(count.value, platforms, None) != 0:
            return
        for platform in platforms:
            devices = ctypes.c_uint(0)
            lib.clGetDeviceIDs(
                ctypes.c_void_p(platform), ctypes.c_uint64(_CL_DEVICE_TYPE_ALL), 0, None, ctypes.byref(devices)
            )
    except Exception:  # only a head start: device_list asks again and reports what fails
        pass


def start() -> bool:
    """Start the driver on a thread (once, after pyopencl's import); False when it does not start."""
    global _thread
    if not settings.early_driver():
        return False
    with _lock:
        if _thread is not None:
            return False
        path = loader_path()
        if path is None:
            return False
        # (not a daemon: an exit during the backend's import waits for it rather than cutting the driver off)
        _thread = threading.Thread(target=_enumerate, args=(path,), name="ember-opencl-driver-start")
        _thread.start()
        return True


def wait() -> None:
    """Return once the start-up is over (at once where none was started)."""
    thread = _thread
    if thread is not None:
        thread.join()

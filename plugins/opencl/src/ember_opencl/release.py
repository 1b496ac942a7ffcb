"""Giving buffers back to the driver off the host's path: NVIDIA's clReleaseMemObject waits for the queue.

On NVIDIA's OpenCL (driver 580, an H100) releasing a buffer blocks until the work queued so far has
run, even a buffer no kernel touches: 3.1 ms behind a 3.1 ms kernel, ~1 ms a release in W4's step, so
the adaptive pool's ~30 releases a step made the host wait on the GPU 30 times
(plugins/cuda/logs/h100-2026-12-06-eve/probe-release). Here a release takes an extra reference with
``clRetainMemObject`` (through ctypes, which lets go of the GIL), drops pyopencl's (not the last:
it returns at once) and hands the handle to one daemon thread that makes the last release, which
waits there while the host goes on queueing. The device memory comes back once the GPU has passed
the buffer's last use, as it would have anyway.

``EMBER_OPENCL_RELEASE=thread|now``; unset: ``thread`` on NVIDIA's platform, ``now`` elsewhere (PoCL
and Mesa return at once).

The buffers waiting on the thread still hold device memory, and the thread gives back one per
queue wait: a step that frees more than the GPU lets go of (W4 on an H100: ~38 buffers a step)
grew the backlog to the whole card (MEM_OBJECT_ALLOCATION_FAILURE at 1.5 GiB in tensors). So
``release`` waits while the backlog holds more than ``limit`` bytes (1/16 of the device's memory).
"""

from __future__ import annotations

import ctypes
import queue
import threading
from typing import Any

from . import settings

__all__ = ["Releaser", "release_mode"]


def release_mode(platform: Any) -> str:
    """``thread`` or ``now`` for ``platform`` (:func:`.settings.release_mode`)."""
    return settings.release_mode(platform.name)


def _library() -> Any:
    for name in ("libOpenCL.so.1", "libOpenCL.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        for fn in (lib.clRetainMemObject, lib.clReleaseMemObject):
            fn.argtypes, fn.restype = [ctypes.c_void_p], ctypes.c_int
        return lib
    return None


class Releaser:
    """Releases pyopencl buffers on a daemon thread (see the module's docstring); where the OpenCL
    library cannot be loaded through ctypes, or a retain fails, a buffer is released at once."""

    def __init__(self, limit: int = 1 << 30) -> None:
        self._lib = _library()
        self._queue: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._pending = 0
        self._pending_bytes = 0
        self._idle = threading.Condition(self._lock)
        #: most bytes of buffers waiting on the thread before ``release`` waits for it
        self.limit = limit
        #: buffers handed to the thread, those released at once, and releases that waited for the backlog
        self.threaded = 0
        self.direct = 0
        self.waited = 0

    def release(self, buf: Any) -> None:
        """Give ``buf`` back: its last reference goes on the thread."""
        lib = self._lib
        handle = getattr(buf, "int_ptr", None)
        if lib is None or not handle or lib.clRetainMemObject(ctypes.c_void_p(handle)) != 0:
            self.direct += 1
            buf.release()
            return
        nbytes = int(getattr(buf, "size", 0) or 0)
        buf.release()  # pyopencl's reference, not the last one: returns without waiting
        with self._idle:
            if self._pending_bytes > self.limit:  # the thread is behind: wait for it, as a release would
                self.waited += 1
                self._idle.wait_for(lambda: self._pending_bytes <= self.limit)
            self._pending += 1
            self._pending_bytes += nbytes
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ember-opencl-release", daemon=True)
                self._thread.start()
        self.threaded += 1
        self._queue.put((handle, nbytes))

    def wait(self) -> None:
        """Until every buffer handed over so far has been released (tests; a finish does not need it)."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)

    def _run(self) -> None:
        release = self._lib.clReleaseMemObject
        while True:
            handle, nbytes = self._queue.get()
            release(ctypes.c_void_p(handle))
            with self._idle:
                self._pending -= 1
                before = self._pending_bytes
                self._pending_bytes -= nbytes
                if not self._pending or (before > self.limit >= self._pending_bytes):
                    self._idle.notify_all()

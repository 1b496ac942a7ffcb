"""Pinned host memory for uploads, so that a host -> device copy does not wait for the queue.

A non-blocking write from ordinary (pageable) host memory still waits on NVIDIA's OpenCL: the driver
stages it synchronously behind the work queued before it, as CUDA does for pageable copies. With
W4's five small constants uploaded instead of filled (``EMBER_OPENCL_FILL=0``) the H200 sat idle
3.18 ms a step waiting for the host, against 0.57 ms with fills (plugins/cuda/logs/h200-2026-12-07);
a training loop's per-step batch upload waits the same way. The pinned pattern of NVIDIA's OpenCL
guide avoids it: a buffer made with CL_MEM_ALLOC_HOST_PTR, mapped once for good, is host memory the
GPU reads directly, and a write from it is queued without waiting.

:class:`Staging` keeps a ring of such buffers (:data:`SLOTS` of :data:`SLOT_BYTES`): an upload that
fits one copies the caller's array into the next slot (so the caller may change its array at once)
and queues the write from there, keeping the write's event in the slot; a slot whose last write has
not run yet is waited for before reuse (the ring is the most host memory uploads hold). GPU devices
use it (``EMBER_OPENCL_PINNED=0`` to compare); a CPU device's memory is host memory already.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

from . import settings

__all__ = ["Staging", "SLOT_BYTES", "SLOTS", "enabled"]

#: bytes of one pinned slot: an upload up to this size goes through the ring
SLOT_BYTES = 4 * 2**20
#: slots in the ring (writes that may be in flight at once)
SLOTS = 8


def enabled(is_cpu: bool) -> bool:
    """Whether a device's uploads go through pinned slots: ``EMBER_OPENCL_PINNED=1/0``; unset, on GPUs."""
    return settings.pinned(is_cpu)


class Staging:
    """A ring of mapped CL_MEM_ALLOC_HOST_PTR buffers that uploads are written from."""

    def __init__(self, context: Any, queue: Any, slot_bytes: int = SLOT_BYTES, slots: int = SLOTS) -> None:
        self.slot_bytes = slot_bytes
        flags = cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR
        self._buffers = [cl.Buffer(context, flags, slot_bytes) for _ in range(slots)]
        # each slot's host view, mapped once and kept mapped (the pinned memory the writes read from)
        self._hosts = [
            cl.enqueue_map_buffer(queue, b, cl.map_flags.WRITE | cl.map_flags.READ, 0, (slot_bytes,), np.uint8)[0]
            for b in self._buffers
        ]
        queue.finish()
        self._events: list[Any] = [None] * slots
        self._next = 0
        #: uploads written from a slot, and those that waited for a slot's previous write
        self.writes = 0
        self.waits = 0

    def write(self, queue: Any, buf: Any, raw: np.ndarray) -> bool:
        """Queue ``buf`` <- ``raw`` (contiguous) from the next slot; False where it does not fit one."""
        n = raw.nbytes
        if n > self.slot_bytes:
            return False
        k = self._next
        self._next = (k + 1) % len(self._hosts)
        event = self._events[k]
        if event is not None and event.command_execution_status != cl.command_execution_status.COMPLETE:
            self.waits += 1
            event.wait()
        host = self._hosts[k][:n]
        host[...] = raw.reshape(-1).view(np.uint8)
        self._events[k] = cl.enqueue_copy(queue, buf, host, is_blocking=False)
        self.writes += 1
        return True

    def forget(self) -> None:
        """Every write has run (a read-back or finish on the in-order queue): the events go."""
        self._events = [None] * len(self._events)

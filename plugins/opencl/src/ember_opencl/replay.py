"""``em.jit``'s native replay on OpenCL: a capture as one list of pre-bound launches.

The steps run once in the runtime's recording mode (:meth:`.runtime.Runtime.recording`): each
kernel launch becomes a kernel object of its own with its arguments already set, over buffers
fixed for the life of the replay (:mod:`ember.lazy.replay` holds the shared bookkeeping). A
replay then enqueues, in one loop with no Python per op: the copies of the current arguments
and state into the fixed input buffers, every launch, and the copies of the results and updated
state into new buffers. A step that reads back to the host refuses it: the step list replays.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pyopencl as cl

from ember.lazy.replay import FixedPlan, Recording, Replayer

from .array import CLArray
from .cltypes import ctype
from .elementwise import copy_into
from .errors import driver_errors
from .runtime import Runtime

__all__ = ["OpenCLReplayer"]


class OpenCLReplayer(Replayer):
    """The OpenCL part of a fixed replay: the runtime's recording mode, buffer copies, the enqueue loop."""

    what = "OpenCL enqueue list"

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def recording(self, rec: Recording) -> AbstractContextManager[None]:
        return self.rt.recording(rec)

    def fixed_copy(self, handle: CLArray) -> CLArray:
        out = self.rt.empty(handle.shape, handle.dtype)
        if out.size:
            copy_into(self.rt, out, handle)
        return out

    @staticmethod
    def block_of(handle: CLArray) -> Any:
        return handle.block

    def new_block(self, block: Any) -> Any:
        return self.rt.pool.acquire(block.nbytes)

    @staticmethod
    def rebase(handle: CLArray, block: Any) -> CLArray:
        return CLArray(block, handle.shape, handle.strides, handle.offset, handle.dtype)

    def build(self, plan: FixedPlan) -> Callable[[list[tuple[Any, Any]], list[Any]], None]:
        rt = self.rt
        queue = rt.queue
        enqueue = cl.enqueue_nd_range_kernel
        copy = cl.enqueue_copy
        launches = list(plan.launches)
        sizes = [block.nbytes for block, _ in plan.outputs]
        fixed_out = [block.raw for block, _ in plan.outputs]
        label = rt.label

        def run(ins: list[tuple[CLArray, CLArray]], news: list[Any]) -> None:
            with driver_errors("replaying an em.jit capture", label, rt.pool.stats):
                for src, dst in ins:
                    if not dst.size:
                        continue
                    if src.is_contiguous():
                        item = ctype(src.dtype).itemsize
                        copy(queue, dst.buf, src.buf, byte_count=dst.size * item, src_offset=src.offset * item)
                    else:  # a strided or broadcast argument: the copy kernel, through the usual launch path
                        copy_into(rt, dst, src)
                for knl, gsize, lsize in launches:
                    enqueue(queue, knl, gsize, lsize)
                for src, new, nbytes in zip(fixed_out, news, sizes):
                    copy(queue, new.raw, src, byte_count=nbytes)

        return run

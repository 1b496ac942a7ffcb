"""``em.jit``'s native replay on WebGPU: a capture as one command buffer per replay.

The steps run once in the runtime's recording mode (:meth:`.runtime.Runtime.recording`): each
dispatch is noted with its pipeline, parameter bytes and buffers, over buffers fixed for the
life of the replay (:mod:`ember.lazy.replay` holds the shared bookkeeping). Compiling then
writes every dispatch's parameters into one uniform buffer of the replay's own (once) and
makes each dispatch's bind group (once). A replay encodes, into one command encoder: the
copies of the current arguments and state into the fixed input buffers, one compute pass
holding every dispatch, the copies of the results and updated state into new buffers; and
submits it once. A command buffer is single-use in WebGPU, so the encoding is redone each
replay, from the ready-made pipelines and bind groups. A step that reads back to the host
refuses it: the step list replays.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ember.lazy.replay import FixedPlan, Recording, Replayer

from .errors import WgpuValidationError
from .handle import WgpuArray
from .kernels.elementwise import copy_into
from .runtime import Runtime
from .subbuffer import binding

__all__ = ["WgpuReplayer"]


def _up4(n: int) -> int:
    return -(-n // 4) * 4


class WgpuReplayer(Replayer):
    """The WebGPU part of a fixed replay: the runtime's recording mode, bind groups, one encoder per replay."""

    what = "WebGPU command buffer"

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def recording(self, rec: Recording) -> AbstractContextManager[None]:
        return self.rt.recording(rec)

    def fixed_copy(self, handle: WgpuArray) -> WgpuArray:
        out = self.rt.empty(handle.shape, handle.dtype)
        if out.size:
            copy_into(self.rt, handle, out)
        return out

    @staticmethod
    def block_of(handle: WgpuArray) -> Any:
        return handle.storage

    def new_block(self, block: Any) -> Any:
        return self.rt.alloc(block.nbytes)

    @staticmethod
    def rebase(handle: WgpuArray, block: Any) -> WgpuArray:
        return WgpuArray(block, handle.shape, handle.dtype, handle.strides, handle.offset)

    def build(self, plan: FixedPlan) -> Callable[[list[tuple[Any, Any]], list[Any]], None]:
        rt = self.rt
        device, queue, wgpu = rt.device, rt.queue, rt.wgpu
        offsets = []
        total = 0
        for _, params, _, _ in plan.launches:
            offsets.append(total)
            total += -(-len(params) // rt.align) * rt.align
        uniforms = device.create_buffer(size=max(total, 16), usage=wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST)
        host = bytearray(max(total, 16))
        groups_made: dict[tuple[Any, ...], Any] = {}
        items = []
        for (pipe, params, buffers, groups), off in zip(plan.launches, offsets):
            n = len(params)
            host[off : off + n] = params
            pipe = rt.bound_as(pipe, buffers)  # its read-write twin where one buffer is read and written
            key = (pipe.layout_key, n, tuple(b.uid for b in buffers))
            bg = groups_made.get(key)
            if bg is None:
                entries = [{"binding": 0, "resource": {"buffer": uniforms, "offset": 0, "size": n}}]
                for i, b in enumerate(buffers):  # an upload's constant may be a carved block of the device pool
                    entries.append({"binding": i + 1, "resource": binding(b)})
                bg = groups_made[key] = device.create_bind_group(layout=pipe.bind_group_layout, entries=entries)
            items.append((pipe.pipeline, bg, off, groups))
        if total:
            queue.write_buffer(uniforms, 0, host, 0, total)
        outs = [(block.raw, _up4(block.nbytes)) for block, _ in plan.outputs]
        count = len(items)
        keep = (uniforms, groups_made)  # alive as long as the replay

        def run(ins: list[tuple[WgpuArray, WgpuArray]], news: list[Any]) -> None:
            copies = []
            for src, dst in ins:
                if not dst.size:
                    continue
                item = rt.types[src.dtype].itemsize
                start = src.offset * item
                size = _up4(src.size * item)  # src.buffer.size: a carved block's own size (recorder adds its offset)
                if src.is_contiguous() and not start % 4 and start + size <= src.buffer.size:
                    copies.append((src.buffer, start, dst.buffer, size))
                else:  # strided, broadcast or unaligned: the copy kernel, in the batch submitted first
                    copy_into(rt, src, dst)
            rt.flush()  # work queued before the replay (what its inputs come from) is submitted first
            rec = rt.recorder  # free after the flush: the replay's batch goes through the same C calls
            if copies:
                rec.submit(rec.copies([(s, at, d, 0, n) for s, at, d, n in copies]))
            rec.begin()
            last = None
            for pipeline, bg, off, groups in items:
                if pipeline is not last:
                    rec.set_pipeline(pipeline)
                    last = pipeline
                rec.set_bind_group(bg, off)
                rec.dispatch(*groups)
            try:
                command_buffer = rec.finish([(fixed, 0, new.raw, 0, size) for (fixed, size), new in zip(outs, news)])
            except wgpu.GPUError as exc:
                raise WgpuValidationError(
                    f"wgpu:{rt.index} ({rt.name}) rejected the command buffer of an em.jit replay ({count} "
                    f"dispatches): {exc}\nThis is a bug in ember-wgpu; please report it with the message above. "
                    f"EMBER_JIT_NATIVE=0 replays the step list instead."
                ) from None
            rec.submit(command_buffer)
            rt.submits += 1
            rt.dispatches += count

        run.keep = keep  # type: ignore[attr-defined]
        return run

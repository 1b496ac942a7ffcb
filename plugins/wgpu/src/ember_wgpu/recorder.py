"""Recording one batch of compute dispatches: a command encoder, one compute pass, one submit.

Two recorders with the same methods. :class:`NativeRecorder` (the default with wgpu-py's
wgpu-native backend) calls wgpu-native's C functions through wgpu-py's cffi ``lib`` for the
per-dispatch commands (encoder, pass, pipeline, bind group, dispatch, end, releases): wgpu-py's
Python objects and its per-call error capture cost more host time than the calls themselves
(a W6 step: ~45 us of ~120 us on a loaded 2-core host). Errors are not lost: wgpu reports a
pass's invalid commands when the encoder is finished, and ``finish`` and ``submit`` still go
through wgpu-py's error-capturing wrappers, so they raise ``GPUError`` as before.
:class:`PublicRecorder` uses wgpu-py's public objects only (``EMBER_WGPU_RECORDER=public``, or
when the native pieces are missing). :class:`TimedRecorder` (``EMBER_WGPU_RECORDER=timed``, adapters
with ``timestamp-query``) puts every dispatch in a pass of its own with the GPU's timestamps at its
start and end: each kernel's device time, for profiling (a pass per dispatch costs host time).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ember.errors import InvalidArgumentError

from . import settings
from .subbuffer import SubBuffer

__all__ = ["recorder", "NativeRecorder", "PublicRecorder", "TimedRecorder", "Copy", "KINDS"]

#: the recorders ``EMBER_WGPU_RECORDER`` may name
KINDS = settings.RECORDERS

#: a buffer-to-buffer copy: (source, source offset, destination, destination offset, bytes); a source
#: or destination may be a :class:`~.subbuffer.SubBuffer` (its offset is added here)
Copy = tuple[Any, int, Any, int, int]


class _Placing:
    """Turning copies over pooled raws into copies over driver buffers (both recorders)."""

    device: Any
    _bounce: Any = None  # a buffer a copy within one driver buffer goes through, kept for the next

    def _placed(self, copies: Sequence[Copy]) -> Sequence[Copy]:
        """``copies`` over driver buffers: a carved block becomes its driver buffer, its offset added;
        a copy between two ranges of one buffer (which WebGPU refuses) goes through a bounce buffer
        (the copies of one command buffer run in order, so every such copy reuses its start)."""
        if not any(type(c[0]) is SubBuffer or type(c[2]) is SubBuffer for c in copies):
            return copies
        out: list[Copy] = []
        for src, src_at, dst, dst_at, size in copies:
            if type(src) is SubBuffer:
                src, src_at = src.buffer, src.offset + src_at
            if type(dst) is SubBuffer:
                dst, dst_at = dst.buffer, dst.offset + dst_at
            if src is dst:
                bounce = self._bounce_of(max(c[4] for c in copies))
                out.append((src, src_at, bounce, 0, size))
                out.append((bounce, 0, dst, dst_at, size))
            else:
                out.append((src, src_at, dst, dst_at, size))
        return out

    def _bounce_of(self, nbytes: int) -> Any:
        """The bounce buffer, of ``nbytes`` at least (a smaller one is destroyed: work already
        submitted keeps it alive, and no open encoder uses it, as it is sized before the first copy)."""
        bounce = self._bounce
        if bounce is None or bounce.size < nbytes:
            if bounce is not None:
                bounce.destroy()
            from wgpu import BufferUsage

            size = max(256, 1 << (nbytes - 1).bit_length())
            bounce = self._bounce = self.device.create_buffer(
                size=size, usage=BufferUsage.COPY_SRC | BufferUsage.COPY_DST
            )
        return bounce


class PublicRecorder(_Placing):
    """A batch through wgpu-py's GPUCommandEncoder and GPUComputePassEncoder."""

    kind = "public"

    def __init__(self, device: Any, queue: Any) -> None:
        self.device = device
        self.queue = queue
        self._encoder: Any = None
        self._pass: Any = None

    def begin(self) -> None:
        """Open a command encoder and a compute pass in it."""
        self._encoder = self.device.create_command_encoder()
        self._pass = self._encoder.begin_compute_pass()

    def set_pipeline(self, pipeline: Any) -> None:
        self._pass.set_pipeline(pipeline)

    def set_bind_group(self, bind_group: Any, offset: int) -> None:
        """Bind group 0 with one dynamic offset (the parameter block's place in the arena)."""
        self._pass.set_bind_group(0, bind_group, [offset])

    def dispatch(self, x: int, y: int, z: int) -> None:
        self._pass.dispatch_workgroups(x, y, z)

    def record(self, pipeline: Any, bind_group: Any, offset: int, x: int, y: int, z: int) -> None:
        """One dispatch: the pipeline (None: the one set last), bind group 0 at ``offset``, the grid."""
        if pipeline is not None:
            self._pass.set_pipeline(pipeline)
        self._pass.set_bind_group(0, bind_group, [offset])
        self._pass.dispatch_workgroups(x, y, z)

    def finish(self, copies: Sequence[Copy] = ()) -> Any:
        """End the pass, append ``copies`` and finish the encoder (raises wgpu's ``GPUError`` for
        an invalid batch); the encoder is closed either way."""
        encoder, self._encoder = self._encoder, None
        self._pass.end()
        self._pass = None
        for src, src_at, dst, dst_at, size in self._placed(copies):
            encoder.copy_buffer_to_buffer(src, src_at, dst, dst_at, size)
        return encoder.finish()

    def copies(self, copies: Sequence[Copy]) -> Any:
        """A command buffer of ``copies`` alone (no pass open)."""
        encoder = self.device.create_command_encoder()
        for src, src_at, dst, dst_at, size in self._placed(copies):
            encoder.copy_buffer_to_buffer(src, src_at, dst, dst_at, size)
        return encoder.finish()

    def submit(self, command_buffer: Any) -> None:
        self.queue.submit([command_buffer])

    def writer(self, buffer: Any, host: bytearray) -> Callable[[int, int], None]:
        """A call writing ``host[offset : offset + size]`` into ``buffer`` at ``offset`` (multiples of 4)."""
        return lambda offset, size: self.queue.write_buffer(buffer, offset, host, offset, size)


class NativeRecorder(_Placing):
    """A batch through wgpu-native's C calls on raw handles (see the module docstring)."""

    kind = "native"

    def __init__(self, device: Any, queue: Any) -> None:
        from wgpu.backends.wgpu_native import ffi, lib
        from wgpu.backends.wgpu_native._api import libf  # wgpu-py's error-capturing wrappers

        self.lib = lib
        self.null = ffi.NULL
        self.libf = libf
        self.device = device
        self.device_id = device._internal
        self.queue_id = queue._internal
        self._offsets = ffi.new("uint32_t[1]")
        self._buffers = ffi.new("WGPUCommandBuffer[1]")
        self._encoder: Any = None
        self._pass: Any = None

    def begin(self) -> None:
        lib = self.lib
        self._encoder = lib.wgpuDeviceCreateCommandEncoder(self.device_id, self.null)
        self._pass = lib.wgpuCommandEncoderBeginComputePass(self._encoder, self.null)

    def set_pipeline(self, pipeline: Any) -> None:
        self.lib.wgpuComputePassEncoderSetPipeline(self._pass, pipeline._internal)

    def set_bind_group(self, bind_group: Any, offset: int) -> None:
        self._offsets[0] = offset
        self.lib.wgpuComputePassEncoderSetBindGroup(self._pass, 0, bind_group._internal, 1, self._offsets)

    def dispatch(self, x: int, y: int, z: int) -> None:
        self.lib.wgpuComputePassEncoderDispatchWorkgroups(self._pass, x, y, z)

    def record(self, pipeline: Any, bind_group: Any, offset: int, x: int, y: int, z: int) -> None:
        """One dispatch (three C calls, one Python frame): the pipeline (None: the one set last),
        bind group 0 at ``offset``, the grid."""
        lib, compute_pass = self.lib, self._pass
        if pipeline is not None:
            lib.wgpuComputePassEncoderSetPipeline(compute_pass, pipeline._internal)
        self._offsets[0] = offset
        lib.wgpuComputePassEncoderSetBindGroup(compute_pass, 0, bind_group._internal, 1, self._offsets)
        lib.wgpuComputePassEncoderDispatchWorkgroups(compute_pass, x, y, z)

    def finish(self, copies: Sequence[Copy] = ()) -> Any:
        lib = self.lib
        encoder, compute_pass = self._encoder, self._pass
        self._encoder = self._pass = None
        try:
            lib.wgpuComputePassEncoderEnd(compute_pass)
            return self._copies_and_finish(encoder, copies)
        finally:
            lib.wgpuComputePassEncoderRelease(compute_pass)
            lib.wgpuCommandEncoderRelease(encoder)

    def copies(self, copies: Sequence[Copy]) -> Any:
        encoder = self.lib.wgpuDeviceCreateCommandEncoder(self.device_id, self.null)
        try:
            return self._copies_and_finish(encoder, copies)
        finally:
            self.lib.wgpuCommandEncoderRelease(encoder)

    def _copies_and_finish(self, encoder: Any, copies: Sequence[Copy]) -> Any:
        for src, src_at, dst, dst_at, size in self._placed(copies):
            self.lib.wgpuCommandEncoderCopyBufferToBuffer(encoder, src._internal, src_at, dst._internal, dst_at, size)
        return self.libf.wgpuCommandEncoderFinish(encoder, self.null)

    def submit(self, command_buffer: Any) -> None:
        self._buffers[0] = command_buffer
        try:
            self.libf.wgpuQueueSubmit(self.queue_id, 1, self._buffers)
        finally:
            self.lib.wgpuCommandBufferRelease(command_buffer)

    def writer(self, buffer: Any, host: bytearray) -> Callable[[int, int], None]:
        """A call writing ``host[offset : offset + size]`` into ``buffer`` at ``offset`` (multiples of
        4): one C call (wgpu-py's ``write_buffer`` takes ~15 Python frames, checking what holds here
        by construction: the arena's bounds and alignment)."""
        from wgpu.backends.wgpu_native import ffi

        self._host_ref = ffi.from_buffer(host)  # the host bytes' address, kept alive with the recorder
        write, queue, target, base = self.lib.wgpuQueueWriteBuffer, self.queue_id, buffer._internal, self._host_ref

        def write_range(offset: int, size: int) -> None:
            write(queue, target, offset, base + offset, size)

        return write_range


class TimedRecorder(PublicRecorder):
    """Each dispatch in a compute pass of its own whose start and end write GPU timestamps; after
    the batches have run (a sync), :meth:`take` answers each dispatch's (pipeline label, grid,
    nanoseconds) in recording order. Needs a device opened with ``timestamp-query``."""

    kind = "timed"
    #: dispatches one batch times (two queries each; WebGPU allows 4096 queries a set); later ones
    #: of a longer batch run in untimed passes and are counted in :attr:`untimed`
    CAPACITY = 2048

    def __init__(self, device: Any, queue: Any) -> None:
        super().__init__(device, queue)
        if "timestamp-query" not in device.features:
            raise InvalidArgumentError(
                "EMBER_WGPU_RECORDER=timed needs an adapter with the 'timestamp-query' feature; this one has "
                "none (see `ember devices`): use native or public"
            )
        self.period = _timestamp_period(queue)  # nanoseconds a tick
        self.untimed = 0
        self._queries: Any = None
        self._pipeline: Any = None
        self._batch: list[tuple[str, tuple[int, int, int]]] = []
        self._pending: list[tuple[Any, list[tuple[str, tuple[int, int, int]]]]] = []

    def begin(self) -> None:
        self._encoder = self.device.create_command_encoder()
        self._pass = None
        self._batch = []
        if self._queries is None:
            self._queries = self.device.create_query_set(type="timestamp", count=2 * self.CAPACITY)

    def set_pipeline(self, pipeline: Any) -> None:
        self._pipeline = pipeline

    def set_bind_group(self, bind_group: Any, offset: int) -> None:
        self._bind = (bind_group, offset)

    def dispatch(self, x: int, y: int, z: int) -> None:
        self.record(None, *self._bind, x, y, z)

    def record(self, pipeline: Any, bind_group: Any, offset: int, x: int, y: int, z: int) -> None:
        if pipeline is not None:
            self._pipeline = pipeline
        i = len(self._batch)
        if i < self.CAPACITY:
            writes = {
                "query_set": self._queries,
                "beginning_of_pass_write_index": 2 * i,
                "end_of_pass_write_index": 2 * i + 1,
            }
            self._batch.append((self._pipeline.label, (x, y, z)))
            compute_pass = self._encoder.begin_compute_pass(timestamp_writes=writes)
        else:
            self.untimed += 1
            compute_pass = self._encoder.begin_compute_pass()
        compute_pass.set_pipeline(self._pipeline)
        compute_pass.set_bind_group(0, bind_group, [offset])
        compute_pass.dispatch_workgroups(x, y, z)
        compute_pass.end()

    def finish(self, copies: Sequence[Copy] = ()) -> Any:
        from wgpu import BufferUsage

        encoder, self._encoder = self._encoder, None
        batch, self._batch = self._batch, []
        if batch:
            # the timestamps go through a resolve buffer into a mappable one, read by take()
            size = 16 * len(batch)
            resolved = self.device.create_buffer(size=size, usage=BufferUsage.QUERY_RESOLVE | BufferUsage.COPY_SRC)
            readable = self.device.create_buffer(size=size, usage=BufferUsage.MAP_READ | BufferUsage.COPY_DST)
            encoder.resolve_query_set(self._queries, 0, 2 * len(batch), resolved, 0)
            encoder.copy_buffer_to_buffer(resolved, 0, readable, 0, size)
            self._pending.append((readable, batch))
        for src, src_at, dst, dst_at, size in self._placed(copies):
            encoder.copy_buffer_to_buffer(src, src_at, dst, dst_at, size)
        return encoder.finish()

    def take(self) -> list[tuple[str, tuple[int, int, int], float]]:
        """(label, grid, ns) of every timed dispatch submitted since the last call, in order; call it
        after a sync (each batch's timestamps are mapped here, which waits for that batch)."""
        import numpy as np
        from wgpu import MapMode

        out: list[tuple[str, tuple[int, int, int], float]] = []
        pending, self._pending = self._pending, []
        for readable, batch in pending:
            readable.map_sync(MapMode.READ)
            ticks = np.frombuffer(readable.read_mapped(), dtype=np.uint64).reshape(-1, 2)
            readable.unmap()
            readable.destroy()
            spans = (ticks[:, 1].astype(np.int64) - ticks[:, 0].astype(np.int64)) * self.period
            out += [(label, grid, float(ns)) for (label, grid), ns in zip(batch, spans, strict=True)]
        return out


def _timestamp_period(queue: Any) -> float:
    """Nanoseconds a timestamp tick of ``queue`` lasts (wgpu-native's query; 1.0, WebGPU's unit, elsewhere)."""
    try:
        from wgpu.backends.wgpu_native import lib
    except ImportError:
        return 1.0
    period = float(lib.wgpuQueueGetTimestampPeriod(queue._internal))
    return period if period > 0 else 1.0


def recorder(device: Any, queue: Any) -> NativeRecorder | PublicRecorder:
    """The recorder ``EMBER_WGPU_RECORDER`` names (``native``, the default, ``public`` or ``timed``)."""
    kind = wanted()
    if kind == "timed":
        return TimedRecorder(device, queue)
    if kind == "native":
        try:
            return NativeRecorder(device, queue)
        except (ImportError, AttributeError):  # another wgpu-py backend or layout: the public objects
            pass
    return PublicRecorder(device, queue)


def wanted() -> str:
    """The recorder ``EMBER_WGPU_RECORDER`` asks for (unset: ``native``)."""
    return settings.recorder_kind()

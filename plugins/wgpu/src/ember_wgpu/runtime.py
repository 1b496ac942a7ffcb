"""The per-device runtime: pipelines, buffers, batched command recording, readbacks, errors.

Costs that shape this module (GPU-NOTES.md): a submit costs ~65 us, a dispatch recorded into
an open compute pass ~4 us, a bind group ~30 us, a readback ~0.2 ms. So:

* **pipelines** are compiled once per WGSL source (the source encodes kernel, dtypes and
  workgroup size) and kept for the life of the device;
* **dispatches** are recorded into one open compute pass and submitted at sync points (a
  readback, ``synchronize()``, a full parameter arena) and, on GPU adapters, once the pass holds
  a chunk of dispatches (:func:`.settings.submit_every`: 4, then 8, ... up to 32 after each sync point)
  with work enough to be worth a submit (``settings.SUBMIT_GROUPS`` workgroups), so the device runs the
  start of a step while the host records the rest: a batch held to the sync point leaves the
  device idle for the whole of the host's recording. Chains of tiny launches (W1) stay in one
  batch: a submit costs ~65 us;
* **parameters** (shapes, strides, offsets, scalars) of every dispatch are appended to one
  host-side arena, from its start after each sync point; a submit writes the range its batch
  appended with one ``wgpuQueueWriteBuffer``, unless a copy of what the device's arena holds
  says those bytes are there already (a step repeating its launches writes nothing); they are
  bound through a dynamic uniform offset, so a kernel's bind group does not change with them;
* **bind groups** are cached by (layout, buffers), which a training loop hits every step
  because the pool hands the same buffers back;
* **sub-allocation**: under ``adaptive`` small blocks are ranges of pages and a step plan's
  blocks ranges of its arena (docs/memory.md); such a block's raw is a
  :class:`~.subbuffer.SubBuffer`, bound at its offset (a multiple of
  ``min-storage-buffer-offset-alignment``), one per (page, offset, size) for the page's life so
  that its bind groups stay cached. WebGPU refuses a buffer bound read-only and read-write in one
  dispatch (ranges apart or not): a dispatch that reads one range of a driver buffer and writes
  another runs the kernel's *read-write twin* (:meth:`Runtime.twin`: every binding read-write);
* **readbacks** of several tensors share one staging buffer (kept for the next read), one map
  and the open batch's submit (the copies follow the batch's pass in its command buffer);
* **synchronize()** submits the batch and waits on this thread (:func:`.settings.sync_mode`): no fence
  copy, no mapping, no wgpu-py poll thread; a synchronized step that repeats its launches skips
  rewriting the parameter arena (same bytes). A W6 step is 12 wgpu-native calls, releases included.

wgpu raises its validation errors from the call that caused them (shader and pipeline
creation, ``encoder.finish``); they become :mod:`ember_wgpu.errors` exceptions naming the
kernel. A lost device is only logged by wgpu-native, so a logging handler records it and the
next sync point raises :class:`~ember_wgpu.errors.WgpuDeviceLostError`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from ember.dtypes import DType
from ember.errors import InvalidArgumentError
from ember.kernel_cache import KernelCache
from ember.lazy.replay import ReplayPools
from ember.memory import DEFAULT_CACHE_LIMIT, Block, BufferPool

from . import adapters, settings, trusted
from .errors import (
    WgpuDeviceLostError,
    WgpuKernelError,
    WgpuLimitError,
    WgpuOutOfMemoryError,
    WgpuValidationError,
)
from .handle import WgpuArray
from .recorder import Copy, recorder
from .settings import MAX_BATCH
from .subbuffer import SubBuffer, binding
from .typemap import TypeMap

__all__ = ["Runtime", "Pipeline", "MAX_BATCH", "ARENA_BYTES"]

ARENA_BYTES = 1 << 22
_BG_CACHE_LIMIT = 16384
#: readback staging buffers up to this size are kept for the next read
_STAGING_KEEP = 64 << 20
#: dispatches in the first chunk submitted after a sync point (then doubling up to settings.submit_every())
SUBMIT_FIRST = 4


class Pipeline:
    """A compiled compute pipeline, the binding layout it was built for, its WGSL source and (made
    when first needed, :meth:`Runtime.twin`) its read-write twin."""

    __slots__ = ("pipeline", "layout_key", "bind_group_layout", "name", "source", "twin")

    def __init__(
        self, pipeline: Any, layout_key: tuple[str, ...], bind_group_layout: Any, name: str, source: str = ""
    ) -> None:
        self.pipeline = pipeline
        self.layout_key = layout_key
        self.bind_group_layout = bind_group_layout
        self.name = name
        self.source = source
        self.twin: Pipeline | None = None


def _mixed(kinds: tuple[str, ...], buffers: Sequence[Any]) -> bool:
    """Whether one driver buffer is bound both read-only and read-write (two ranges carved from it)."""
    seen: dict[int, str] = {}
    for kind, b in zip(kinds, buffers):
        root = b.buffer.uid if type(b) is SubBuffer else b.uid
        if seen.setdefault(root, kind) != kind:
            return True
    return False


class _LostWatcher(logging.Handler):
    """Records device-lost and other errors that wgpu-native only logs."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.lost: str | None = None
        self.last_error: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "device was lost" in msg.lower():
            self.lost = msg
        self.last_error = msg


class Runtime:
    """Everything one WGPU device needs: device, queue, caches, pool and the open batch."""

    def __init__(self, index: int) -> None:
        wgpu = adapters._wgpu()
        self.wgpu = wgpu
        self.index = index
        timed = ("timestamp-query",) if settings.recorder_kind() == "timed" else ()
        self.adapter, self.device = adapters.open_device(index, timed)
        self.queue = self.device.queue
        self.name = self.adapter.info.get("device", "?")
        self.limits = dict(self.device.limits)
        self.features = set(self.device.features)
        self.types = TypeMap(f16_native="shader-f16" in self.features)
        self.max_binding = int(self.limits.get("max-storage-buffer-binding-size", 128 << 20))
        self.max_buffer = int(self.limits.get("max-buffer-size", 256 << 20))
        self.max_groups = int(self.limits.get("max-compute-workgroups-per-dimension", 65535))
        self.checked = settings.checked()
        self.max_storage_buffers = int(self.limits.get("max-storage-buffers-per-shader-stage", 8))
        self.shared_bytes = int(self.limits.get("max-compute-workgroup-storage-size", 16384))
        self.align = max(16, int(self.limits.get("min-uniform-buffer-offset-alignment", 256)))
        # where a carved block may start: a storage binding's offset alignment (and whole vec4s)
        self.sub_align = max(16, int(self.limits.get("min-storage-buffer-offset-alignment", 256)))
        usage = wgpu.BufferUsage
        self._storage_usage = usage.STORAGE | usage.COPY_SRC | usage.COPY_DST
        # A freed buffer is reusable at once: commands recorded later in the batch run after those
        # that used it. Uploads (queue.write_buffer) are not ordered so: they avoid buffers the open
        # batch references, or submit it first (upload()). A driver buffer the open batch references
        # (itself or a range carved from it) is destroyed only after the submit (flush()); any other
        # at once (work already submitted keeps what it uses alive).
        self._subs: dict[int, dict[tuple[int, int], SubBuffer]] = {}  # driver buffer uid -> its carved views
        self.pool: BufferPool[Any] = self._make_pool(f"wgpu:{index}")
        self.replay_pools = ReplayPools()  # em.jit replays' private pools, counted by memory_stats
        self._pipelines: dict[str, Pipeline] = {}
        self.kernel_cache = KernelCache("wgpu", *adapters.cache_identity(self.adapter))
        self._layouts: dict[tuple[str, ...], tuple[Any, Any]] = {}
        self.kernels: dict[Any, Any] = {}  # generated-kernel cache for the kernel modules
        self.plans: dict[Any, Any] = {}  # elementwise launches by (program, geometry): kernels/elementwise.py
        self._bg_cache: dict[tuple, Any] = {}
        self._bg_by_uid: dict[int, list[tuple]] = {}
        self._arena = self.device.create_buffer(size=ARENA_BYTES, usage=usage.UNIFORM | usage.COPY_DST)
        self._arena_host = bytearray(ARENA_BYTES)
        self._arena_used = 0  # the arena's bytes in use since the last sync point
        self._arena_sent = 0  # ... of which the submits so far wrote (or found written)
        self.recorder = recorder(self.device, self.queue)
        self._write_arena = self.recorder.writer(self._arena, self._arena_host)  # (offset, bytes)
        self._open = False  # a compute pass is being recorded
        self._last_pipe: Pipeline | None = None
        self._count = 0
        self.batch_refs: set[int] = set()
        self._names: list[str] = []
        self.submits = 0
        self.idle_submits = 0  # of them, submitted because the device was found idle (submit_idle_s)
        self.dispatches = 0
        self.arena_writes = 0
        self.waits = 0
        self._watcher = _LostWatcher()
        logging.getLogger("wgpu").addHandler(self._watcher)
        # what the device's arena holds (buffers start zeroed): a batch whose parameter bytes are
        # there already, at the same offsets (a synchronized step repeating its launches), writes none
        self._arena_view = memoryview(self._arena_host)
        self._arena_device = bytearray(ARENA_BYTES)
        self._arena_device_view = memoryview(self._arena_device)
        cpu = str(self.adapter.info.get("adapter_type", "")).lower() == "cpu"
        self.sync_mode = settings.sync_mode(self.device, cpu)
        # the open batch is submitted at `_chunk` dispatches: SUBMIT_FIRST after a sync point, doubling
        # up to `submit_every` (MAX_BATCH: sync points only)
        self.submit_every = settings.submit_every(cpu)
        self.submit_groups = settings.submit_groups()
        self.submit_idle_s = 0.0 if cpu else settings.submit_idle_s()
        self._idle_poll_at = 0.0  # perf_counter time before which no idle poll is made
        self._chunk = self._first_chunk()
        self._groups = 0  # workgroups of the open batch
        self.spin_s = settings.spin_seconds()
        self._raw_poll: tuple[Any, Any, Any] | None = None  # wgpu-native's poll, the device, NULL: see _spin
        self._staging_buf: Any = None  # the mappable buffer of the last read, kept for the next (read())
        self._sync_buf = self._create_buffer(16)
        self._sync_stage = self.device.create_buffer(
            size=16, usage=self.wgpu.BufferUsage.MAP_READ | self.wgpu.BufferUsage.COPY_DST
        )

    # -- buffers ---------------------------------------------------------------------------
    def _make_pool(self, device: str | None, release: Callable[[Any], None] | None = None) -> BufferPool[Any]:
        """The device's pool (``device`` its label: it carves small blocks and a step plan's out of
        driver buffers, :class:`~.subbuffer.SubBuffer` s, and defers destroying a driver buffer the
        open batch references, itself or a range of it, to the submit: ``defer_release``; under
        ``adaptive`` making room inside an acquire, the pool submits the batch first, ``on_pressure``),
        or a private one (None: an em.jit replay's, static with no cache limit and no sub-allocation:
        it releases a buffer only when memory runs short, and ``release`` then refuses the replay,
        whose dispatches keep using them)."""
        if device is None:
            return BufferPool(
                self._create_buffer,
                release or self._destroy_buffer,
                cache_limit=None,
                max_class=self.max_binding,
                defer_release=self._in_batch,
                on_pressure=self.flush,
                strategy="static",
            )
        return BufferPool(
            self._create_buffer,
            self._destroy_buffer,
            cache_limit=DEFAULT_CACHE_LIMIT,
            max_class=self.max_binding,
            defer_release=self._holds,
            on_pressure=self.flush,
            device=device,
            sub_allocate=self._sub_allocate,
            alignment=self.sub_align,
        )

    def _sub_allocate(self, page: Any, offset: int, nbytes: int) -> SubBuffer:
        """The view of ``nbytes`` at ``offset`` of ``page`` (the pool's ``sub_allocate``): made once
        per (offset, size) and kept as long as the page, so its uid, and the bind groups cached under
        it, come back when the pool carves the same range again (every step under a step plan). Its
        size is a whole number of vec4s: the range carved is a multiple of ``sub_align``."""
        views = self._subs.get(page.uid)
        if views is None:
            views = self._subs[page.uid] = {}
        view = views.get((offset, nbytes))
        if view is None:
            view = views[offset, nbytes] = SubBuffer(page, offset, -(-nbytes // 16) * 16)
        return view

    def _create_buffer(self, size: int) -> Any:
        """A new storage buffer (the pool's ``allocate``; it retries once after releasing its cache)."""
        if size > self.max_buffer:
            raise WgpuLimitError(
                f"wgpu:{self.index} ({self.name}): a buffer of {size} bytes exceeds this adapter's "
                f"max-buffer-size of {self.max_buffer} bytes; split the tensor into smaller ones"
            )
        try:  # whole multiples of 16 bytes: a vec4 kernel may read the whole last vec4 of a tensor
            return self.device.create_buffer(size=-(-size // 16) * 16, usage=self._storage_usage)
        except self.wgpu.GPUError as exc:
            raise WgpuOutOfMemoryError(
                f"wgpu:{self.index} ({self.name}): could not allocate {size} bytes "
                f"({self.pool.in_use} bytes in use by live tensors): {exc}. Free tensors you no "
                f"longer need, or use smaller batches."
            ) from None

    def _destroy_buffer(self, buf: Any) -> None:
        """Destroy a driver buffer, the bind groups that name it and its carved views (the pools'
        ``release``: a buffer the open batch references waits for the submit, ``defer_release``)."""
        for key in self._bg_by_uid.pop(buf.uid, ()):
            self._bg_cache.pop(key, None)
        self._subs.pop(buf.uid, None)
        buf.destroy()

    def _holds(self, buf: Any) -> bool:
        """Whether the open batch references the driver buffer ``buf`` or a view carved from it."""
        refs = self.batch_refs
        if not refs:
            return False
        if buf.uid in refs:
            return True
        views = self._subs.get(buf.uid)
        return views is not None and any(v.uid in refs for v in views.values())

    def _in_batch(self, buf: Any) -> bool:
        """Whether the open batch references ``buf`` (for a carved block: any range overlapping it)."""
        if type(buf) is not SubBuffer:
            return self._holds(buf)
        refs = self.batch_refs
        if not refs:
            return False
        lo, hi = buf.offset, buf.offset + buf.size
        for v in self._subs.get(buf.buffer.uid, {}).values():
            if v.uid in refs and v.offset < hi and lo < v.offset + v.size:
                return True
        return False

    def alloc(self, nbytes: int, upload: bool = False) -> Block[Any]:  # empty() repeats the check
        """A pooled buffer of at least ``nbytes`` (for an upload: one no pending command uses)."""
        if nbytes > self.max_binding:
            raise WgpuLimitError(
                f"wgpu:{self.index} ({self.name}): a tensor of {nbytes} bytes exceeds this adapter's "
                f"max-storage-buffer-binding-size of {self.max_binding} bytes, the most one kernel can "
                f"bind; split it (e.g. process the batch in chunks) or use a device with a larger limit"
            )
        return self.pool.acquire(nbytes, self._in_batch if upload else None)

    def empty(self, shape: tuple[int, ...], dtype: DType) -> WgpuArray:
        """A new contiguous tensor whose contents a kernel is about to write."""
        n = 1
        for d in shape:
            n *= d
        if n == 0:
            return WgpuArray(None, shape, dtype)
        n *= self.types[dtype].host.itemsize
        if n > self.max_binding:
            self.alloc(n)  # raises, naming the limit
        return WgpuArray(self.pool.acquire(n, None), shape, dtype)

    def upload(self, array: np.ndarray, dtype: DType) -> WgpuArray:
        """A tensor holding ``array`` (any numpy array with ``dtype``'s values)."""
        shape = tuple(array.shape)
        if array.size == 0:
            return WgpuArray(None, shape, dtype)
        data = self.types.to_device_bytes(array, dtype)
        raw = memoryview(data).cast("B")
        if self.pool.strategy == "adaptive":
            # the request as any other, so a step plan hands it its planned range; a range the open
            # batch still uses submits the batch before the write (avoiding it would allocate beside
            # the plan's arena)
            storage = self.alloc(raw.nbytes)
            if self._in_batch(storage.raw):
                self.flush()
        else:
            storage = self.alloc(raw.nbytes, upload=True)
        if raw.nbytes % 4:
            raw = memoryview(bytes(raw) + bytes(4 - raw.nbytes % 4))
        buf = storage.raw
        if type(buf) is SubBuffer:
            self.queue.write_buffer(buf.buffer, buf.offset, raw)
        else:
            self.queue.write_buffer(buf, 0, raw)
        return WgpuArray(storage, shape, dtype)

    # -- kernels ---------------------------------------------------------------------------
    def _layout(self, bindings: tuple[str, ...]) -> tuple[Any, Any]:
        found = self._layouts.get(bindings)
        if found is None:
            wgpu = self.wgpu
            entries = [
                {
                    "binding": 0,
                    "visibility": wgpu.ShaderStage.COMPUTE,
                    "buffer": {"type": "uniform", "has_dynamic_offset": True},
                }
            ]
            for i, kind in enumerate(bindings):
                entries.append(
                    {
                        "binding": i + 1,
                        "visibility": wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": "read-only-storage" if kind == "r" else "storage"},
                    }
                )
            if len(bindings) > self.max_storage_buffers:
                raise WgpuLimitError(
                    f"wgpu:{self.index} ({self.name}): a kernel binding {len(bindings)} storage buffers exceeds "
                    f"max-storage-buffers-per-shader-stage={self.max_storage_buffers}; split the fused program"
                )
            bgl = self.device.create_bind_group_layout(entries=entries)
            found = (bgl, self.device.create_pipeline_layout(bind_group_layouts=[bgl]))
            self._layouts[bindings] = found
        return found

    def pipeline(self, name: str, source: str, bindings: tuple[str, ...]) -> Pipeline:
        """The compiled pipeline of ``source`` (``bindings``: 'r' read-only, 'w' read-write storage)."""
        found = self._pipelines.get(source)
        if found is not None:
            return found
        bgl, layout = self._layout(bindings)
        try:
            module = None if self.checked else trusted.module(self.device, name, source)
            if module is None:
                module = self.device.create_shader_module(label=name, code=source)
            pipe = self.device.create_compute_pipeline(
                label=name, layout=layout, compute={"module": module, "entry_point": "main"}
            )
        except self.wgpu.GPUError as exc:
            saved = self.kernel_cache.save_failed(name, source, ".wgsl")
            raise WgpuKernelError(
                f"wgpu:{self.index} ({self.name}) rejected the generated kernel {name!r}: {exc}\n"
                f"The WGSL source is saved at {saved}. This is a bug in ember-wgpu's code generation; "
                f"please report it with that file. Meanwhile the op runs on another device "
                f"(e.g. x.to('cpu'))."
            ) from None
        found = Pipeline(pipe, bindings, bgl, name, source)
        self._pipelines[source] = found
        return found

    def twin(self, pipe: Pipeline) -> Pipeline:
        """``pipe`` with every storage binding read-write (its WGSL's ``var<storage, read>`` too), for
        a dispatch that reads one range of a driver buffer and writes another: WebGPU refuses one
        buffer bound read-only and read-write in one dispatch. Compiled once, when first needed."""
        twin = pipe.twin
        if twin is None:
            kinds = pipe.layout_key
            if "r" not in kinds:
                twin = pipe
            else:
                source = pipe.source.replace("var<storage, read>", "var<storage, read_write>")
                twin = self.pipeline(f"{pipe.name}_rw", source, ("w",) * len(kinds))
            pipe.twin = twin
        return twin

    def bound_as(self, pipe: Pipeline, buffers: Sequence[Any]) -> Pipeline:
        """The pipeline a dispatch of ``pipe`` over ``buffers`` runs: ``pipe``, or its read-write
        twin where one driver buffer would be bound read-only and read-write."""
        return self.twin(pipe) if _mixed(pipe.layout_key, buffers) else pipe

    # -- recording -------------------------------------------------------------------------
    def dispatch(
        self, pipe: Pipeline, params: bytes, buffers: Sequence[Any], groups: tuple[int, int, int], name: str = ""
    ) -> None:
        """Record one dispatch of ``pipe`` over ``groups`` workgroups (submitted at the next sync)."""
        gx, gy, gz = groups
        limit = self.max_groups
        if (gx > limit or gy > limit or gz > limit or not (gx and gy and gz)) and not self._check_groups(
            pipe, groups, name
        ):
            return
        n = len(params)
        if self._arena_used + n > ARENA_BYTES:
            self.flush()
            self._arena_used = self._arena_sent = 0  # (queue.write_buffer runs after the work submitted)
        rec = self.recorder
        if not self._open:
            rec.begin()
            self._open = True
            self._last_pipe = None
        off = self._arena_used
        self._arena_host[off : off + n] = params
        self._arena_used = off + -(-n // self.align) * self.align
        uids = tuple([b.uid for b in buffers])
        key = (pipe.layout_key, n, uids)
        found = self._bg_cache.get(key)
        if found is None:
            found = self._bind_group(pipe, n, buffers, key, uids)
        bg, rw = found
        if rw:
            pipe = pipe.twin or self.twin(pipe)
        if pipe is not self._last_pipe:
            rec.record(pipe.pipeline, bg, off, gx, gy, gz)
            self._last_pipe = pipe
        else:
            rec.record(None, bg, off, gx, gy, gz)
        self.batch_refs.update(uids)
        self._names.append(name or pipe.name)
        self._count += 1
        self.dispatches += 1
        self._groups += gx * gy * gz
        if self._count >= self._chunk and (self._groups >= self.submit_groups or self._count >= MAX_BATCH):
            self.flush()
            self._chunk = min(2 * self._chunk, self.submit_every)
        elif self.submit_idle_s and self._groups >= self.submit_groups:
            now = time.perf_counter()
            if now >= self._idle_poll_at:  # the device ran out of submitted work: hand it what is recorded
                self._idle_poll_at = now + self.submit_idle_s
                if self._queue_empty():
                    self.flush()
                    self.idle_submits += 1

    def set_submit_every(self, every: int, groups: int | None = None, idle_us: float | None = None) -> None:
        """Submit the open batch every ``every`` dispatches from now on (0: at sync points only)
        once it holds ``groups`` workgroups (None: as before), as ``EMBER_WGPU_SUBMIT_EVERY`` and
        ``EMBER_WGPU_SUBMIT_GROUPS`` do at start-up; the first chunk after a sync point is smaller.
        ``idle_us`` (``EMBER_WGPU_SUBMIT_IDLE_US``; 0: off, None: as before): also submit a batch of
        ``groups`` workgroups or more as soon as the device is found idle, polling at most once per
        ``idle_us`` microseconds, so the device does not wait for the next chunk while the host records."""
        if every < 0:
            raise InvalidArgumentError(f"submit_every={every}: give 0 (sync points only) or more dispatches")
        if idle_us is not None and idle_us < 0:
            raise InvalidArgumentError(f"idle_us={idle_us}: give 0 (off) or more microseconds")
        self.submit_every = min(every, MAX_BATCH) if every else MAX_BATCH
        if groups is not None:
            self.submit_groups = max(groups, 0)
        if idle_us is not None:
            self.submit_idle_s = idle_us * 1e-6
        self._chunk = self._first_chunk()

    def _first_chunk(self) -> int:
        """The dispatches of the first submit after a sync point (the device is idle then: start it soon)."""
        every = self.submit_every
        return min(SUBMIT_FIRST, every) if every < MAX_BATCH else MAX_BATCH

    def _check_groups(self, pipe: Pipeline, groups: tuple[int, int, int], name: str) -> bool:
        """Whether a dispatch over ``groups`` runs anything; raises past the adapter's limit."""
        for g in groups:
            if g > self.max_groups:
                raise WgpuLimitError(
                    f"kernel {name or pipe.name!r}: {groups} workgroups exceed max-compute-workgroups-per-dimension"
                    f"={self.max_groups} of wgpu:{self.index} ({self.name})"
                )
        return groups[0] != 0 and groups[1] != 0 and groups[2] != 0

    @contextlib.contextmanager
    def recording(self, rec: Any) -> Iterator[None]:
        """Recording mode for an ``em.jit`` replay (:class:`ember.lazy.replay.Recording`): each
        dispatch is noted as (pipeline, parameter bytes, buffers, workgroups) instead of recorded
        into the batch; buffers come from a pool of the replay's own (``rec.pools``), reused
        between dispatches as in a batch; a readback refuses. Uploads still run, once: what they
        write is a constant, so they get buffers of the device's pool that no dispatch ever wrote
        or will (a private one may have been a step's before), held in ``rec.held``."""

        def dispatch(
            pipe: Pipeline, params: bytes, buffers: Sequence[Any], groups: tuple[int, int, int], name: str = ""
        ) -> None:
            if self._check_groups(pipe, groups, name):
                rec.launches.append((pipe, bytes(params), tuple(buffers), tuple(groups)))

        def read(arrays: Sequence[WgpuArray]) -> list[np.ndarray]:
            shown = ", ".join(f"{a.dtype}{list(a.shape)}" for a in arrays)
            rec.refuse(f"a step reads {shown} back to the host")

        shared = rec.swap_pool(
            self, self._make_pool(None, lambda raw: rec.refuse("device memory ran short while recording"))
        )
        upload = rec.held_upload(self, shared, functools.partial(Runtime.upload, self), lambda a: a.storage)
        self.dispatch, self.upload, self.read = dispatch, upload, read  # type: ignore[method-assign]
        try:
            yield
        finally:
            self.pool = shared
            del self.dispatch, self.upload, self.read

    def _bind_group(
        self, pipe: Pipeline, n: int, buffers: Sequence[Any], key: tuple, uids: tuple[int, ...]
    ) -> tuple[Any, bool]:
        """A new bind group of ``buffers`` for ``pipe``, or for its read-write twin (then True)."""
        bound = self.bound_as(pipe, buffers)
        if len(self._bg_cache) >= _BG_CACHE_LIMIT:
            self._bg_cache.clear()
            self._bg_by_uid.clear()
        entries = [{"binding": 0, "resource": {"buffer": self._arena, "offset": 0, "size": n}}]
        for i, b in enumerate(buffers):
            entries.append({"binding": i + 1, "resource": binding(b)})
        bg = self.device.create_bind_group(layout=bound.bind_group_layout, entries=entries)
        found = self._bg_cache[key] = (bg, bound is not pipe)
        # forgotten with the driver buffer (a carved view lives as long as its page)
        for uid in {b.buffer.uid if type(b) is SubBuffer else b.uid for b in buffers}:
            self._bg_by_uid.setdefault(uid, []).append(key)
        return found

    def flush(self, fence: bool = False, copies: Sequence[Copy] = ()) -> None:
        """Submit everything recorded so far (no wait), then ``copies`` in the same submit;
        ``fence`` adds a copy into the sync buffer, which is mappable once everything submitted has run."""
        self._check_lost()
        if fence:
            copies = [*copies, (self._sync_buf, 0, self._sync_stage, 0, 4)]
        if not self._open:
            if copies:
                self.recorder.submit(self.recorder.copies(copies))
                self.submits += 1
            self.pool.trim()
            return
        names = self._names
        start, used = self._arena_sent, self._arena_used
        if used > start:
            fresh = self._arena_view[start:used]
            if fresh != self._arena_device_view[start:used]:
                self._write_arena(start, used - start)
                self._arena_device_view[start:used] = fresh
                self.arena_writes += 1
            self._arena_sent = used
        self._open = False
        self._last_pipe = None
        self._count = 0
        self._groups = 0
        self._names = []
        try:
            command_buffer = self.recorder.finish(copies)
        except self.wgpu.GPUError as exc:
            self.batch_refs.clear()
            shown = ", ".join(dict.fromkeys(names[-12:]))
            raise WgpuValidationError(
                f"wgpu:{self.index} ({self.name}) rejected a batch of {len(names)} kernel dispatches "
                f"(the last ones: {shown}): {exc}\nThe results of those ops are lost. This is a bug in "
                f"ember-wgpu; please report it with the message above."
            ) from None
        self.recorder.submit(command_buffer)
        self.submits += 1
        self.batch_refs.clear()
        self.pool.trim()

    def _check_lost(self) -> None:
        if self._watcher.lost:
            raise WgpuDeviceLostError(
                f"wgpu:{self.index} ({self.name}) was lost: {self._watcher.lost}\nEvery tensor on it is gone. "
                f"This follows a driver reset, a crash or a kernel that ran too long (try smaller sizes); "
                f"restart the process to get a fresh device."
            )

    # -- sync points -----------------------------------------------------------------------
    def read(self, arrays: Sequence[WgpuArray]) -> list[np.ndarray]:
        """Host copies of ``arrays``: the open batch and the copies into one staging buffer in one
        submit, then one map, waited for on this thread as :meth:`synchronize` waits."""
        plan: list[tuple[int, int, int, int] | None] = []
        total = 0
        for a in arrays:
            if a.size == 0 or a.storage is None:
                plan.append(None)
                continue
            item = self.types[a.dtype].itemsize
            lo, hi = a.span()
            blo = lo * item // 4 * 4
            bhi = -(-(hi * item) // 4) * 4
            plan.append((blo, bhi - blo, total, lo * item - blo))
            total += bhi - blo
        results: list[np.ndarray] = []
        raw: Any = b""
        if not total:
            self.flush()
        else:
            staging = self._staging(total)
            copies = [(a.buffer, p[0], staging, p[2], p[1]) for a, p in zip(arrays, plan) if p is not None]
            try:
                self.flush(copies=copies)  # the open batch and the copies: one submit
                self._map_read(staging, total)
                self._chunk = self._first_chunk()
                self._arena_used = self._arena_sent = 0
                raw = staging.read_mapped(0, total)
                staging.unmap()
            except BaseException:
                staging.destroy()
                raise
            self._give_staging(staging)
            self._check_lost()
        for a, p in zip(arrays, plan):
            host = self.types[a.dtype].host
            if p is None:
                results.append(np.empty(a.shape, dtype=a.dtype.numpy))
                continue
            blo, size, at, first = p
            base = np.frombuffer(raw, dtype=np.uint8, count=size, offset=at)
            lo, _ = a.span()
            start = first + (a.offset - lo) * host.itemsize
            view = np.lib.stride_tricks.as_strided(
                base[start:].view(host) if start < size else base.view(host),
                shape=a.shape,
                strides=tuple(s * host.itemsize for s in a.strides),
            )
            results.append(self.types.from_device_bytes(np.array(view, copy=True), a.dtype))
        return results

    def _staging(self, nbytes: int) -> Any:
        """A mappable buffer of at least ``nbytes`` (the one kept from the last read when large enough)."""
        kept, self._staging_buf = self._staging_buf, None
        if kept is not None and kept.size >= nbytes:
            return kept
        if kept is not None:
            kept.destroy()
        usage = self.wgpu.BufferUsage.MAP_READ | self.wgpu.BufferUsage.COPY_DST
        return self.device.create_buffer(size=-(-nbytes // 256) * 256, usage=usage)

    def _give_staging(self, buf: Any) -> None:
        """Keep ``buf`` for the next read (up to ``_STAGING_KEEP`` bytes), else destroy it."""
        if buf.size <= _STAGING_KEEP and self._staging_buf is None:
            self._staging_buf = buf
        else:
            buf.destroy()

    def _map_read(self, buf: Any, nbytes: int) -> None:
        """Map ``buf``'s first ``nbytes`` for reading once the submits before have run. The copies
        into it were in the last submit, so wgpu-py's extra empty submit (``READ_NOSYNC`` skips it)
        is not needed; the wait is this thread's (``sync_mode``), the promise then already resolved."""
        if self.sync_mode == "map":
            buf.map_sync(self.wgpu.MapMode.READ, 0, nbytes)
            return
        promise = buf.map_async("READ_NOSYNC", 0, nbytes)
        try:
            if self.sync_mode != "spin" or not self._spin():
                self.device._poll_wait()
        except self.wgpu.GPUError as exc:
            self._check_lost()
            raise WgpuValidationError(f"wgpu:{self.index} ({self.name}): reading back failed: {exc}") from None
        promise.sync_wait()  # the callback ran during the poll (or in wgpu-py's poll thread)

    def synchronize(self) -> None:
        """Submit and wait until the device has finished all work recorded so far (``sync_mode``:
        see :func:`.settings.sync_mode`)."""
        mode = self.sync_mode
        if mode == "map":
            self.flush(fence=True)
            self._sync_stage.map_sync(self.wgpu.MapMode.READ)  # resolves once the fence's submit has run
            self._sync_stage.unmap()
        else:
            self.flush()
            try:
                if mode != "spin" or not self._spin():
                    self.device._poll_wait()  # wgpuDevicePoll(wait=True): returns once every submit has run
            except self.wgpu.GPUError as exc:
                self._check_lost()
                raise WgpuValidationError(
                    f"wgpu:{self.index} ({self.name}): waiting for the device failed: {exc}"
                ) from None
        self.waits += 1
        self._chunk = self._first_chunk()
        self._arena_used = self._arena_sent = 0  # the next step's parameters from the start again
        self._check_lost()

    def _poller(self) -> tuple[Any, Any, Any]:
        """(wgpu-native's poll, the device, NULL), made once."""
        if self._raw_poll is None:
            from wgpu.backends.wgpu_native import ffi, lib

            self._raw_poll = (lib.wgpuDevicePoll, self.device._internal, ffi.NULL)
        return self._raw_poll

    def _queue_empty(self) -> bool:
        """Whether every submit has run (one non-blocking poll)."""
        poll, device, null = self._poller()
        # wgpu-native returns a Rust bool where the header says a 32-bit WGPUBool: only the low byte is set
        return bool(poll(device, False, null) & 0xFF)

    def _spin(self) -> bool:
        """Poll without blocking until the queue is empty (True) or ``spin_s`` has passed (False)."""
        poll, device, null = self._poller()
        if poll(device, False, null) & 0xFF:
            return True
        clock = time.perf_counter
        end = clock() + self.spin_s
        while not poll(device, False, null) & 0xFF:
            if clock() > end:
                return False
        return True

    def stats(self) -> dict[str, Any]:
        """Counters of the runtime besides the pool's (``memory_stats()["extra"]``)."""
        return {
            "device": self.name,
            "pipelines": len(self._pipelines),
            "bind_groups_cached": len(self._bg_cache),
            "submits": self.submits,
            "dispatches": self.dispatches,
            "arena_writes": self.arena_writes,
            "waits": self.waits,
            "pending_dispatches": self._count,
            "submit_every": self.submit_every,
            "submit_groups": self.submit_groups,
            "submit_idle_us": self.submit_idle_s * 1e6,
            "idle_submits": self.idle_submits,
            "sync_mode": self.sync_mode,
            "recorder": self.recorder.kind,
        }

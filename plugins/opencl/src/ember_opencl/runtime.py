"""Platforms and devices, and the per-device runtime: context, queue, pool, program cache.

Devices are numbered over (platform, device) pairs: platforms sorted by name, vendor and
version (the ICD loader's own order depends on the directory listing), devices in the order
their platform reports them. ``Device("opencl:i")`` is pair ``i``.

Programs may build on a thread pool (:data:`BUILD_THREADS`) while the host goes on: a kernel whose
program is still building is a :class:`_Pending` stand-in, and its launches, with every queue
operation after them, wait in order in a host-side list until something needs the device's
results (a download, ``finish``, the queue itself); so the programs a step needs compile side
by side instead of one after another. A build that fails raises its error there.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np
import pyopencl as cl

from ember.errors import DeviceUnavailableError
from ember.lazy.replay import ReplayPools
from ember.memory import BufferPool
from ember.shapes import numel

from . import settings
from .array import CLArray
from .build_worker import BuildProcesses
from .cache import ProgramCache
from .cltypes import ctype
from .driver_start import wait as _driver_started
from .errors import DeviceMemoryError, KernelBuildError, driver_errors, no_platform_error, translate
from .release import Releaser, release_mode
from .staging import Staging
from .staging import enabled as pinned_uploads
from .views import ViewLedger

__all__ = ["device_list", "describe", "Runtime", "Family", "FAMILIES", "FAMILY_AFTER", "BUILD_THREADS"]

#: whether sibling kernels (the other ops of a kernel's group, same dtypes and layout) are built as
#: one program (:class:`Family`); False: every kernel its own program, as before
FAMILIES = True
#: a group is built once this many of its kernels were built alone (0: at the first miss). PoCL: a
#: build costs ~0.2 s whatever its size, but reading its binary back ~0.09 s per kernel, so a group of
#: six pays when three or more are used (plugins/opencl/README.md, *Cold start*, has the measurements)
FAMILY_AFTER = 1


#: EMBER_OPENCL_BUILD_PROCESSES unset: the workers a GPU runtime starts when ember's cache holds no
#: program for its device (a cold process), on a host of at least AUTO_MIN_CPUS CPUs. H100, first W2
#: result from an empty cache (ember's road, bytecode): 3.85 s building here, 2.45 s with 4 workers,
#: 3.46 s with 8 (their compilers compete); warm runs start none (plugins/cuda/logs/h100-2026-12-06-final)
AUTO_BUILD_PROCESSES = 4
AUTO_MIN_CPUS = 8
#: the automatic workers end after this long without a build (each holds a context, and memory, on the
#: device): a cold process's burst of builds is over by then; later ones build in the process itself
AUTO_IDLE_S = 30.0


def _host_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _auto_build_processes(is_cpu: bool, cold: bool) -> int:
    """The build workers of a runtime: :data:`BUILD_PROCESSES` where set, else :data:`AUTO_BUILD_PROCESSES`
    for a cold GPU runtime on a host with :data:`AUTO_MIN_CPUS` CPUs or more, else none (a CPU device
    compiles on the host's cores, which its kernels need too; a warm one loads stored binaries)."""
    if BUILD_PROCESSES is not None:
        return BUILD_PROCESSES
    if is_cpu or not cold or _host_cpus() < AUTO_MIN_CPUS:
        return 0
    return AUTO_BUILD_PROCESSES


def _release_buffer(buf: cl.Buffer) -> None:
    buf.release()


def _release_views_at_exit(ref: weakref.ref[Runtime]) -> None:
    """Before the interpreter's teardown: the runtime's views in the ledger's order (its queue finished),
    not in whatever order the garbage collector would drop them (NVIDIA's crash: :mod:`.views`)."""
    rt = ref()
    if rt is None or not rt.views.made:
        return
    try:
        rt.finish()
    except Exception:  # noqa: BLE001 - a dead context at exit: nothing to order any more
        return
    rt.views.release_all(_release_buffer)


#: most views waiting for an idle queue (:meth:`Runtime._sweep_views`) before the runtime makes one (a
#: clFinish): a training loop that never reads back still lets its views go
IDLE_RELEASES_MAX = 4096


#: threads building programs in the background (EMBER_OPENCL_BUILD_THREADS). 0, the default: each
#: program builds on the calling thread when its kernel is asked for. Opt-in: neither PoCL nor NVIDIA
#: (H100, driver 580.159) compiles programs of one process side by side: W2's 72 cold builds (the GEMM
#: tuner's included): first result 32.0 s built here, 29.5 s in 8 threads, their summed build time 28.2 -> 36.2 s,
#: and loading 18 stored binaries 1.37 -> 1.83 s (plugins/cuda/logs/h100-2026-12-06-eve/call1/cold-bt*.txt)
BUILD_THREADS = settings.build_threads()
#: worker processes compiling programs (EMBER_OPENCL_BUILD_PROCESSES, :mod:`.build_worker`). None, the
#: default: :func:`_auto_build_processes` (4 for a cold GPU runtime). With N, N builds are under way at
#: once (at least N build threads)
BUILD_PROCESSES = settings.build_processes()


@dataclass(frozen=True)
class Family:
    """Sibling kernels compiled together: ``make()`` returns (source, [(kernel key, name, argtypes)]);
    ``after`` overrides :data:`FAMILY_AFTER` (a pair of ops is worth building together at once)."""

    key: Any
    make: Callable[[], tuple[str, list[tuple[Any, str, list[Any]]]]] = field(compare=False)
    after: int | None = None


class _Pending:
    """A kernel whose program is still building: what :meth:`Runtime.kernel` returns meanwhile.
    Launches of it wait in :meth:`Runtime._drain`; ``kernel`` is the real one once resolved."""

    __slots__ = ("key", "future", "function_name", "argtypes", "fallback", "kernel", "wg")

    def __init__(self, key: Any, future: Future[Any], name: str, argtypes: list[Any], fallback: Any) -> None:
        self.key = key
        self.future = future
        self.function_name = name
        self.argtypes = argtypes
        #: where the program is a family's: (source, name, argtypes) of the kernel alone, or the
        #: ``make`` giving them, built if the family fails to build
        self.fallback = fallback
        self.kernel: Any = None
        self.wg = 0


#: deferred program binaries are stored at the latest when this many wait (see :meth:`Runtime._store_programs`)
STORE_AFTER = 64

#: whether a constant (:meth:`Runtime.constant`: ``full``, autodiff's seed, a default affine
#: parameter) is written by the queue (clEnqueueFillBuffer) instead of uploaded: no host copy to hold
#: (EMBER_OPENCL_FILL=0 uploads, to measure the difference)
FILL = settings.fill()

#: an upload of a caller's array up to this size is copied on the host and queued without waiting
#: (:meth:`Runtime._copy_in`); a larger one waits for its transfer
UPLOAD_COPY_BYTES = 16 * 2**20
#: uploads (or host bytes) in flight at which the finished ones are let go
IN_FLIGHT_CHECK, IN_FLIGHT_BYTES = 32, 64 * 2**20

#: whether a GPU's runtime starts the driver's compiler while the host goes on, when ember's cache
#: holds none of its programs (:meth:`Runtime._warm_up`)
WARM_UP = True
#: whether that warm-up builds the programs most steps need first (the generic float32 GEMMs:
#: :func:`.matmul.head_start_sources`) rather than a one-line program. NVIDIA builds one program at
#: a time per process, ~0.2-0.85 s a GEMM program (H100), so the ones built while the host makes its
#: inputs would be off a cold first step's path; measured, they were not: W2's cold first result on an
#: H100 took 3.90 / 3.77 s with the head start and 3.61 / 3.29 s without (the warm-up's builds hold the
#: driver's one build slot when the step's own programs arrive). Off by default; on, a process that
#: never multiplies float32 matrices builds them for nothing (once per driver and ember version)
HEAD_START = False


#: a grid-stride launch on a GPU is capped at this many work-groups per compute unit: W6 (2^26
#: float32) through NVIDIA's OpenCL on the H200 ran 0.346 / 0.276 / 0.264 ms per kernel at 8 / 32 / 128
#: (benchmarks/w6_sweep.py, plugins/cuda/logs/h200-2026-12-02-w6/run1/)
GROUPS_PER_CU = 128


@functools.lru_cache(maxsize=1)
def device_list() -> tuple[tuple[Any, Any], ...]:
    """Every (platform, device) pair in ember's stable order; raises if there is no platform."""
    _driver_started()  # (the loader is not to be started from two threads at once)
    try:
        platforms = cl.get_platforms()
    except Exception as exc:  # PLATFORM_NOT_FOUND_KHR from the ICD loader
        raise no_platform_error(str(exc).strip()) from exc
    if not platforms:
        raise no_platform_error()
    pairs = []
    for p in sorted(platforms, key=lambda p: (p.name, p.vendor, p.version)):
        try:
            devices = p.get_devices()
        except Exception:  # a platform with no devices raises DEVICE_NOT_FOUND
            continue
        pairs.extend((p, d) for d in devices)
    return tuple(pairs)


def _pair(index: int) -> tuple[Any, Any]:
    pairs = device_list()
    if not 0 <= index < len(pairs):
        raise DeviceUnavailableError(
            f"opencl:{index} does not exist: {len(pairs)} OpenCL device(s) found "
            f"(indices 0..{len(pairs) - 1}). Run `ember devices` to list them."
        )
    return pairs[index]


def _has(device: Any, ext: str) -> bool:
    return ext in device.extensions.split()


def describe(index: int) -> dict[str, Any]:
    """Name, vendor, platform, memory, compute units, fp16/fp64 and driver of device ``index``."""
    platform, d = _pair(index)
    return {
        "name": d.name.strip(),
        "vendor": d.vendor.strip(),
        "platform": platform.name.strip(),
        "type": cl.device_type.to_string(d.type),
        "memory_bytes": int(d.global_mem_size),
        "compute_units": int(d.max_compute_units),
        "max_work_group_size": int(d.max_work_group_size),
        "local_memory_bytes": int(d.local_mem_size),
        "fp16": _has(d, "cl_khr_fp16"),
        "fp64": _has(d, "cl_khr_fp64"),
        "opencl": d.version.strip(),
        "driver_version": d.driver_version.strip(),
    }


class Runtime:
    """One OpenCL device in use: its queue, buffer pool, program cache and compiled kernels."""

    def __init__(self, index: int) -> None:
        platform, device = _pair(index)
        self.index = index
        self.label = f"opencl:{index} ({device.name.strip()})"
        self.platform = platform
        self.device = device
        #: queue operations waiting for a program: (kernel, global, local, args) or a callable, in order
        self._deferred: list[Any] = []
        #: (transfer event, bytes) of uploads not yet seen complete (:meth:`_copy_in`: dropping one would wait)
        self._in_flight: list[tuple[Any, int]] = []
        self._in_flight_bytes = 0
        #: pinned slots uploads are written from (:mod:`.staging`; made at the first upload, GPUs only)
        self.staging: Staging | None = None
        self._pinned: bool | None = None
        with driver_errors("creating the context and queue", self.label):
            self.context = cl.Context([device])
            self._queue = cl.CommandQueue(self.context, device)
        #: whether the pool may carve blocks out of larger buffers (``EMBER_OPENCL_SUB_BUFFERS``). NVIDIA's
        #: driver (580.159, an H100) crashed in clReleaseMemObject on a step plan's views until the cause
        #: was found: releasing a used view while a younger view inside it lives; every view now goes by
        #: :class:`.views.ViewLedger`'s rule
        self.sub_buffers = settings.sub_buffers()
        #: where releasing a buffer waits for the queue (NVIDIA), the last release happens on a thread
        self.releaser = None
        backlog = max(1 << 28, int(device.global_mem_size) // 16)  # most bytes a release may wait with
        if release_mode(platform) == "thread":
            self.releaser = Releaser(backlog)
        #: the pool's sub-buffers by parent, released in the order NVIDIA's driver needs (:mod:`.views`);
        #: where releases go to the thread, at the queue's idle points on this thread
        self.views = ViewLedger()
        atexit.register(_release_views_at_exit, weakref.ref(self))
        self._idle_limit = backlog  # most bytes of held parents before the runtime finishes the queue itself
        self.fp64 = _has(device, "cl_khr_fp64")
        self.fp16 = _has(device, "cl_khr_fp16")
        self.atomics64 = _has(device, "cl_khr_int64_base_atomics")
        self.is_cpu = bool(device.type & cl.device_type.CPU)
        self.compute_units = int(device.max_compute_units)
        self.max_wg = int(device.max_work_group_size)
        self.local_mem = int(device.local_mem_size)
        self.max_alloc = int(device.max_mem_alloc_size)
        # the queue is in order: a buffer handed out again is written only after every kernel queued
        # before that still reads it, so a freed buffer is reusable (and releasable) at once; no cache limit
        # adaptive carves small blocks out of pages as sub-buffers (a cl.Buffer like any other, so the
        # kernels take them unchanged), aligned as CL_DEVICE_MEM_BASE_ADDR_ALIGN (in bits) requires
        self.pool: BufferPool[cl.Buffer] = self._make_pool(f"opencl:{index}")
        self.replay_pools = ReplayPools()  # em.jit replays' private pools, counted by memory_stats
        self.programs = ProgramCache(self.context, device, self.label)
        #: on a CPU device a binary's read-back compiles the program again (PoCL): stored once the
        #: programs stop changing (:meth:`download`), off a new process's first result
        self.programs.defer_stores = self.is_cpu
        #: the program cache's build count at the last read-back (see :meth:`download`)
        self._builds_seen = -1
        self.options = self._build_options(device)
        self._kernels: dict[Any, tuple[Any, int]] = {}
        #: kernels a family program holds that nothing has asked for yet: key -> (program, name, argtypes)
        self._members: dict[Any, tuple[Any, str, list[Any]]] = {}
        #: per family: how many of its kernels were built alone so far (see :data:`FAMILY_AFTER`)
        self._family_touches: dict[Any, int] = {}
        #: each built kernel's scalar argument types, by id (a bound copy for a replay needs them)
        self._argtypes: dict[int, list[Any]] = {}
        #: background program builds (None: on the calling thread); see the module's docstring
        threads = BUILD_THREADS
        workers = _auto_build_processes(self.is_cpu, BUILD_PROCESSES is None and self._cold())
        if workers:
            where = (platform.name, platform.vendor, platform.version, platform.get_devices().index(device))
            idle = AUTO_IDLE_S if BUILD_PROCESSES is None else None  # (workers asked for stay)
            self.programs.processes = BuildProcesses(workers, where, idle_s=idle)
            threads = max(threads, workers)
        self._builder = ThreadPoolExecutor(threads, "ember-opencl-build") if threads else None
        #: while True (an em.jit recording), kernels are built before :meth:`kernel` returns
        self._sync = False
        #: how often, and how long in all, the host waited for a program still building (a launch
        #: needing it, or a download or finish behind such a launch)
        #: ``warm_up_s``: the compiler's warm-up build, on a thread of its own (:meth:`_warm_up`)
        self.waits = {"build_waits": 0, "build_wait_s": 0.0, "warm_up_s": 0.0}
        #: how many results were read back to the host: until the first, GEMMs are not tuned (tune.py)
        self.read_backs = 0
        self._warm_up()

    def _warm_up(self) -> threading.Thread | None:
        """On a GPU whose programs are not on disk yet (a cold process will build them), build a
        one-line program on a thread of its own, so the driver loads and starts its compiler while the
        host goes on (making inputs, say): NVIDIA's first build of a process cost ~0.3-0.4 s more than
        the same size later (H100, W2: 0.85 s for the first GEMM program, 0.44-0.58 s for the others).
        With :data:`HEAD_START` those are the generic GEMMs most steps need first (built through the
        program cache; with build processes, handed to the workers).
        Not on CPU devices (PoCL's time goes to each build, and its cores are the host's); not where a
        stored program exists (a warm process loads binaries; the compiler would only compete); not
        with build processes, whose workers are started here instead (they warm their own up)."""
        cold = self._cold()
        if self.programs.processes is not None and cold:
            self.programs.processes.start()  # (the workers open the device meanwhile)
            if WARM_UP and HEAD_START and not self.is_cpu:  # their first builds: the head-start programs
                from .matmul import head_start_sources  # noqa: PLC0415  (matmul imports this module)

                for source in head_start_sources(self):
                    self.programs.request(source, self.options, self._builder)
        if not WARM_UP or self.is_cpu or self.programs.processes is not None or not cold:
            return None  # (with build processes this process compiles nothing: it loads their binaries)
        thread = threading.Thread(target=self._build_warm_up, name="ember-opencl-warm-up")
        thread.start()  # (not a daemon: an exit waits for the build rather than cutting the driver off)
        return thread

    def _cold(self) -> bool:
        """Whether ember's disk cache holds no program for this device (or is off)."""
        disk = self.programs.disk
        if not disk.enabled:
            return True
        try:
            with os.scandir(disk.directory) as entries:
                return not any(e.name.endswith(".bin") for e in entries)
        except OSError:
            return True

    def _build_warm_up(self) -> None:
        """Build the programs of :func:`.matmul.head_start_sources` through the program cache (a
        step asking for one while it builds waits for it rather than building it again); with
        :data:`HEAD_START` off, or none fitting the device, a one-line program only starts the compiler."""
        start = time.perf_counter()
        sources = []
        if HEAD_START:
            from .matmul import head_start_sources  # noqa: PLC0415  (matmul imports this module)

            sources = head_start_sources(self)
        try:
            if not sources:
                source = "__kernel void ember_warm_up(__global int* x) { x[get_global_id(0)] = 0; }"
                cl.Program(self.context, source).build(options=self.options, devices=[self.device], cache_dir=False)
            for source in sources:
                self.programs.request(source, self.options)  # (built here; a failure is kept for its real use)
        except Exception:  # only a head start: a compiler that fails here says so at the first real build
            pass
        self.waits["warm_up_s"] = time.perf_counter() - start

    @property
    def queue(self) -> Any:
        """The in-order queue, once every deferred operation is on it (for callers that enqueue directly)."""
        self._drain()
        return self._queue

    def _make_pool(self, device: str | None, release: Callable[[Any], None] | None = None) -> BufferPool[cl.Buffer]:
        """The device's pool (``device`` its label), or a private one (None: an em.jit replay's,
        static with no sub-buffers and no cache limit: it releases a buffer only when memory runs
        short, and ``release`` then refuses the replay, whose kernels keep using them)."""
        return BufferPool(
            self._allocate,
            release or self._release,
            cache_limit=None,
            max_class=self.max_alloc,
            device=device,
            strategy="static" if device is None else None,
            sub_allocate=self.views.make if self.sub_buffers else None,
            sub_release=self._release_view,
            alignment=max(int(self.device.mem_base_addr_align) // 8, 16),
        )

    def _release(self, buf: cl.Buffer) -> None:
        """Give a buffer back to the driver, after the deferred launches that may still use it (in
        their queue order, not waiting for their programs), on a :class:`Releaser`'s thread where set;
        a parent of views not yet released, after them (:class:`.views.ViewLedger`)."""
        if self.views.hold(buf):
            self._sweep_views()
            return
        self._release_now(buf)

    def _release_now(self, buf: cl.Buffer) -> None:
        release = buf.release if self.releaser is None else functools.partial(self.releaser.release, buf)
        if self._deferred:
            self._deferred.append(release)
        else:
            release()

    @staticmethod
    def _build_options(device: Any) -> str:
        opts = []
        try:
            if device.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT:
                opts.append("-cl-fp32-correctly-rounded-divide-sqrt")
        except Exception:
            pass
        return " ".join(opts)

    # -- kernels ------------------------------------------------------------------------
    def kernel(self, key: Any, make: Any, family: Family | None = None) -> tuple[Any, int]:
        """The compiled kernel for ``key``; ``make()`` returns (source, name, argtypes) on a miss.

        ``family`` names the sibling kernels of ``key`` (see :class:`Family`): once
        :data:`FAMILY_AFTER` of them were built alone, the next miss builds them all as one
        program. Returns (kernel, preferred work-group size multiple); while the program builds in
        the background, (a :class:`_Pending` that :meth:`launch` takes, the device's largest
        work-group size: every caller clamps it to 256 or less, checked when the kernel is ready).
        """
        found = self._kernels.get(key)
        if found is not None:
            return found
        member = self._members.pop(key, None)
        fallback: Any = make
        if member is None:
            source, name, argtypes = make()
            fallback = (source, name, argtypes)
            if family is not None and FAMILIES and not self.programs.holds(source, self.options):
                member = self._from_family(key, family)
            if member is None:
                future, fallback = self._request(source), None
        if member is not None:
            future, name, argtypes = member
        pending = _Pending(key, future, name, argtypes, fallback)
        if self._builder is None or self._sync or future.done():
            return self._resolve(pending)
        found = (pending, self.max_wg)
        self._kernels[key] = found
        return found

    def _request(self, source: str) -> Future[Any]:
        return self.programs.request(source, self.options, None if self._sync else self._builder)

    def _resolve(self, pending: _Pending) -> tuple[Any, int]:
        """Wait for ``pending``'s program and make its kernel (its family failed: the kernel alone)."""
        if pending.kernel is not None:
            return pending.kernel, pending.wg
        try:
            try:
                if not pending.future.done():
                    start = time.perf_counter()
                    futures.wait([pending.future])
                    self.waits["build_waits"] += 1
                    self.waits["build_wait_s"] += time.perf_counter() - start
                prg = pending.future.result()
            except KernelBuildError:
                if pending.fallback is None:
                    raise
                source, pending.function_name, pending.argtypes = (
                    pending.fallback() if callable(pending.fallback) else pending.fallback
                )
                prg = self.programs.program(source, self.options)
            name, argtypes = pending.function_name, pending.argtypes
            with driver_errors(f"creating kernel {name}", self.label):
                knl = cl.Kernel(prg, name)
                knl.set_scalar_arg_dtypes(argtypes)
                wg = int(knl.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, self.device))
        except BaseException:
            self._kernels.pop(pending.key, None)  # the next use asks again (a failed build: the same error)
            raise
        self._argtypes[id(knl)] = argtypes
        pending.kernel, pending.wg = knl, wg
        self._kernels[pending.key] = (knl, wg)
        return knl, wg

    def _from_family(self, key: Any, family: Family) -> tuple[Any, str, list[Any]] | None:
        """Build ``family`` as one program when its turn has come; None: build ``key`` alone."""
        touches = self._family_touches.get(family.key, 0)
        if touches < 0:  # built already (this key was not in it), or its build failed
            return None
        if touches < (FAMILY_AFTER if family.after is None else family.after):
            self._family_touches[family.key] = touches + 1
            return None
        source, members = family.make()
        if all(k != key for k, _, _ in members):
            return None
        self._family_touches[family.key] = -1
        future = self._request(source)
        if future.done() and future.exception() is not None:
            return None  # a sibling this compiler rejects: each kernel builds alone, as before
        for k, name, argtypes in members:
            if k not in self._kernels:
                self._members[k] = (future, name, argtypes)
        return self._members.pop(key, None)

    def launch(self, knl: Any, gsize: Sequence[int], lsize: Sequence[int] | None, args: Sequence[Any]) -> None:
        if self._deferred or type(knl) is _Pending:
            if not self._deferred and knl.kernel is not None:
                knl = knl.kernel
            else:  # behind a program still building: in order, after what waits already
                self._deferred.append((knl, tuple(gsize), None if lsize is None else tuple(lsize), tuple(args)))
                return
        try:  # (a plain try: this is the hot path of every op)
            knl(self._queue, gsize, lsize, *args)
        except Exception as exc:
            if type(exc).__module__.split(".")[0] != "pyopencl":
                raise
            raise translate(exc, f"running kernel {knl.function_name}", self.label, self.pool.stats()) from exc

    def _ready(self, knl: _Pending, lsize: Sequence[int] | None) -> Any:
        """The real kernel of ``knl`` (waiting for its build); ``lsize`` was chosen from a guessed
        work-group size: the kernel must take it."""
        real, wg = self._resolve(knl)
        if lsize is not None and numel(tuple(lsize)) > wg:
            raise KernelBuildError(
                f"{self.label}: kernel {knl.function_name} takes work-groups of at most {wg} items, but was "
                f"queued with {numel(tuple(lsize))} before its program was built (a background build "
                f"guesses the device's {self.max_wg}). This is a bug in ember-opencl: please report it; "
                f"meanwhile set EMBER_OPENCL_BUILD_THREADS=0 (programs build before their first launch)."
            )
        return real

    def _drain(self) -> None:
        """Put the deferred operations on the queue, in order, waiting for their programs; a build
        that failed raises its error here, and what was queued after it is dropped."""
        while self._deferred:
            work, self._deferred = self._deferred, []
            for item in work:
                if type(item) is not tuple:
                    try:
                        item()
                    except BaseException:
                        self._deferred.clear()
                        raise
                    continue
                knl, gsize, lsize, args = item
                try:
                    if type(knl) is _Pending:
                        knl = self._ready(knl, lsize)
                    knl(self._queue, gsize, lsize, *args)
                except Exception as exc:
                    self._deferred.clear()
                    if type(exc).__module__.split(".")[0] != "pyopencl":
                        raise
                    raise translate(exc, f"running kernel {knl.function_name}", self.label, self.pool.stats()) from exc

    @contextlib.contextmanager
    def recording(self, rec: Any) -> Iterator[None]:
        """Recording mode for an ``em.jit`` replay (:class:`ember.lazy.replay.Recording`): each
        launch is noted as (a kernel object with its arguments bound, global size, local size)
        instead of queued; buffers come from a pool of the replay's own (``rec.pools``), reused
        between steps as the in-order queue allows; a readback refuses. Uploads still run, once:
        what they write is a constant, so they get buffers of the device's pool that no launch
        ever wrote or will (a private one may have been a step's before), held in ``rec.held``."""

        def launch(knl: Any, gsize: Sequence[int], lsize: Sequence[int] | None, args: Sequence[Any]) -> None:
            if not all(gsize):
                return  # an empty grid queues nothing
            if type(knl) is _Pending:
                knl = self._ready(knl, lsize)
            with driver_errors(f"binding the arguments of kernel {knl.function_name}", self.label):
                rec.launches.append((self._bound(knl, args), tuple(gsize), None if lsize is None else tuple(lsize)))

        def download(a: CLArray) -> np.ndarray:
            rec.refuse(f"a step reads a {a.dtype}{list(a.shape)} tensor back to the host")

        self._drain()
        shared = rec.swap_pool(
            self, self._make_pool(None, lambda raw: rec.refuse("device memory ran short while recording"))
        )
        upload = rec.held_upload(self, shared, functools.partial(Runtime.upload, self), lambda a: a.block)

        def constant(value: Any, dtype: Any) -> CLArray:  # a held upload: the replays read it, none writes it
            return upload(np.asarray(value).astype(dtype.numpy).reshape(1), dtype)

        self.launch, self.upload, self.download = launch, upload, download  # type: ignore[method-assign]
        self.constant = constant  # type: ignore[method-assign]
        self._sync = True  # a bound launch needs its kernel now
        try:
            yield
        finally:
            self.pool = shared
            self._sync = False
            del self.launch, self.upload, self.download, self.constant

    def _bound(self, knl: Any, args: Sequence[Any]) -> Any:
        """A kernel object of its own with ``args`` set: clCloneKernel (OpenCL 2.1) of ``knl``
        after binding them, or a new kernel of the same program where cloning is missing."""
        knl.set_args(*args)
        try:
            return knl.clone()
        except Exception:  # OpenCL < 2.1 (INVALID_OPERATION, or no clCloneKernel in the ICD)
            fresh = cl.Kernel(knl.program, knl.function_name)
            fresh.set_scalar_arg_dtypes(self._argtypes[id(knl)])
            fresh.set_args(*args)
            return fresh

    def grid(self, n: int, wg: int) -> tuple[tuple[int], tuple[int]]:
        """(global size, local size) for ``n`` work items: one per item on CPUs, a capped
        grid-stride launch on GPUs (kernels generated with ``grid_stride = not is_cpu``)."""
        local = min(wg, 64 if self.is_cpu else 256)
        groups = -(-n // local)
        if not self.is_cpu:
            groups = min(groups, self.compute_units * GROUPS_PER_CU)
        return (groups * local,), (local,)

    # -- memory -------------------------------------------------------------------------
    def _allocate(self, nbytes: int) -> cl.Buffer:
        """A new driver buffer (the pool's ``allocate``); out of memory raises DeviceMemoryError."""
        if self._deferred:
            try:
                return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)
            except Exception:  # buffers released behind deferred launches are not free yet: free them
                self._drain()
        with driver_errors(f"allocating {nbytes} bytes", self.label, self.pool.stats):
            return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)

    def empty(self, shape: tuple[int, ...], dtype: Any) -> CLArray:
        """A new contiguous handle (uninitialised)."""
        n = prod(shape)
        if not n:
            return CLArray(None, tuple(shape), None, 0, dtype)
        nbytes = n * ctype(dtype).itemsize
        if nbytes > self.max_alloc:
            raise DeviceMemoryError(
                f"{self.label}: cannot allocate {nbytes / 2**20:.1f} MiB in one buffer: the device allows at "
                f"most {self.max_alloc / 2**20:.1f} MiB per allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE). "
                f"Split the tensor or use a smaller batch."
            )
        return CLArray(self.pool.acquire(nbytes), tuple(shape), None, 0, dtype)

    def upload(self, array: np.ndarray, dtype: Any) -> CLArray:
        out = self.empty(tuple(array.shape), dtype)
        if out.size:
            raw = np.ascontiguousarray(array).view(ctype(dtype).np_storage)
            if self._deferred:  # after the launches waiting for a program (a copy: the caller may reuse its array)
                self._deferred.append(functools.partial(self._copy_in, out.buf, raw.copy(), True))
            else:
                self._copy_in(out.buf, raw)
        return out

    def constant(self, value: Any, dtype: Any) -> CLArray:
        """A one-element buffer holding ``value``, filled by the queue in order (no host copy: W4's step
        makes five such constants, each of which held the host until the queue drained while uploads
        dropped their transfer event, see :meth:`_copy_in`). Recording an ``em.jit`` step swaps in a
        held upload (:meth:`recording`)."""
        raw = np.asarray(value).astype(dtype.numpy).reshape(1).view(ctype(dtype).np_storage)
        if not FILL:
            return self.upload(raw, dtype)
        out = self.empty((1,), dtype)
        if self._deferred:  # after the launches waiting for a program, in order
            self._deferred.append(functools.partial(self._fill, out.buf, raw.copy()))
        else:
            self._fill(out.buf, raw)
        return out

    def _fill(self, buf: cl.Buffer, pattern: np.ndarray) -> None:
        with driver_errors("filling a device buffer", self.label, self.pool.stats):
            cl.enqueue_fill_buffer(self._queue, buf, pattern, 0, pattern.nbytes)

    def _copy_in(self, buf: cl.Buffer, raw: np.ndarray, owned: bool = False) -> None:
        """Queue a host -> device copy of ``raw`` without waiting for the queue. pyopencl's transfer
        event (a NannyEvent, which keeps the host array alive) waits in its destructor until the copy
        has run, i.e. behind every kernel queued before it: dropped at once, as before, each upload
        held the host until the queue drained. So the event is kept until it is seen complete (checked
        every :data:`IN_FLIGHT_CHECK` uploads or :data:`IN_FLIGHT_BYTES`), and the caller's array is copied
        first (it may change it at once) unless ``owned``; one larger than :data:`UPLOAD_COPY_BYTES` is a
        blocking transfer instead (a host copy would cost more)."""
        with driver_errors("copying to the device", self.label, self.pool.stats):
            staging = self._stager()
            if staging is not None and staging.write(self._queue, buf, raw):
                return  # from pinned host memory: queued without waiting (.staging)
            if not owned and raw.nbytes > UPLOAD_COPY_BYTES:
                cl.enqueue_copy(self._queue, buf, raw, is_blocking=True)
                return
            event = cl.enqueue_copy(self._queue, buf, raw if owned else raw.copy(), is_blocking=False)
        flying = self._in_flight
        flying.append((event, raw.nbytes))
        self._in_flight_bytes += raw.nbytes
        if len(flying) >= IN_FLIGHT_CHECK or self._in_flight_bytes > IN_FLIGHT_BYTES:
            done = cl.command_execution_status.COMPLETE  # the finished ones go (their destructors wait for nothing)
            self._in_flight = [(e, n) for e, n in flying if e.command_execution_status != done]
            self._in_flight_bytes = sum(n for _, n in self._in_flight)

    def download(self, a: CLArray) -> np.ndarray:
        """The host copy of a contiguous handle, as its ember dtype's numpy type."""
        c = ctype(a.dtype)
        host = np.empty(a.shape, dtype=c.np_storage)
        if a.size:
            self._drain()
            with driver_errors("copying to the host", self.label, self.pool.stats):
                cl.enqueue_copy(self._queue, host, a.buf, src_offset=a.offset * c.itemsize, is_blocking=True)
            self._forget_uploads()  # (an in-order queue: every transfer queued before the read has run)
        self.read_backs += 1
        self._store_programs()
        if a.dtype.name == "bool":
            return host.view(np.bool_)
        return host.view(a.dtype.numpy)

    def _store_programs(self) -> None:
        """Store the binaries the program cache deferred once a read-back finds no program built since
        the one before (a step that needs nothing new: a second step) or many are waiting."""
        programs = self.programs
        builds = programs.stats["builds"]
        if programs.unstored and (builds == self._builds_seen or programs.unstored >= STORE_AFTER):
            programs.store_deferred()
        self._builds_seen = builds

    def finish(self) -> None:
        self._drain()
        with driver_errors("waiting for queued work", self.label, self.pool.stats):
            self._queue.finish()
        self._forget_uploads()

    def _stager(self) -> Staging | None:
        """The pinned slots, made at the first upload where :func:`.staging.enabled` (else None)."""
        if self._pinned is None:
            self._pinned = pinned_uploads(self.is_cpu)
            if self._pinned:
                self.staging = Staging(self.context, self._queue)
        return self.staging

    def _release_view(self, view: cl.Buffer) -> None:
        """The pool is done with a sub-buffer: it goes once no younger view over its range is left
        (:class:`.views.ViewLedger`: NVIDIA's driver crashes otherwise)."""
        self.views.dead(view)
        self._sweep_views()

    def _sweep_views(self) -> None:
        """Release what the view ledger lets go: at once, after the deferred launches that may still use
        it; where releases go to the thread (NVIDIA), at the queue's next idle point (a read-back or
        finish) and on this thread, as NVIDIA's driver also crashed releasing views on the
        :class:`Releaser`'s thread while this one queued work (2026-12-06). A loop that never reads back
        finishes the queue itself past :data:`IDLE_RELEASES_MAX` waiting views or the release backlog's
        bytes of held parents."""
        if self.releaser is None:
            self.views.sweep(self._release_now)
        elif self.views.pending > IDLE_RELEASES_MAX or self.views.held_bytes > self._idle_limit:
            self._release_idle(finish=True)

    def _release_idle(self, finish: bool = False) -> None:
        """Release what waited for an idle queue (the queue has run everything before): the views the
        ledger lets go, youngest first, and held parents after their views; with ``finish``, make the
        queue idle first, unless launches held back from it may still use them."""
        if finish:
            if self._deferred:
                return
            self._queue.finish()
        self.views.sweep(_release_buffer)

    def _forget_uploads(self) -> None:
        """Let every upload's event go: the queue has run them all (a read-back or finish); what
        waited for an idle queue is released."""
        if self.views.due and self.releaser is not None:
            self._release_idle()
        self._in_flight = []
        self._in_flight_bytes = 0
        if self.staging is not None:
            self.staging.forget()

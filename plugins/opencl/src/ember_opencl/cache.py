"""Compiled programs: in memory per process, and on disk through :class:`ember.kernel_cache.KernelCache`.

The disk cache (``ember.config.cache_dir() / "opencl" / <device folder>``) is keyed by the
device (platform, name, OpenCL version), the driver version, ember's version, the source and
the build options, so a driver update starts fresh. A second process loads program binaries
instead of compiling; a binary the driver refuses (stale, or from another driver build) is
removed and compiled again. ``stats`` counts ``memory_hits``, ``disk_loads`` and ``builds``,
``seconds`` the time spent building (``build_s``), reading binaries back from the driver to
store them (``binary_s``) and loading stored ones (``load_s``); the disk layer's own counters
are in ``disk.stats()``.

Programs are futures (:meth:`ProgramCache.request`): a build runs on the caller's thread pool
while the host goes on (with ``processes``, in a worker process: :mod:`.build_worker`), a build
already under way is shared (nothing builds twice), and a program that failed to build fails
again, with the same error, wherever it is asked for.

With ``defer_stores`` (the runtime sets it on CPU devices) a program built here is stored later:
:meth:`ProgramCache.store_deferred` reads the binaries back and writes them (the runtime calls it
once the programs a step needs stop changing; every cache with some left does at exit). On PoCL
reading a binary back compiles every kernel of the program again (for any work-group size): 1.6-2.9
s of W2's 4.5-7.7 s cold first result, and 15-18 s of 28-31 s on the GPU's paths (``--as-gpu``).
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any

import pyopencl as cl

from ember.kernel_cache import KernelCache

from .build_worker import BuildFailed, BuildProcesses, Unavailable
from .errors import KernelBuildError, translate

__all__ = ["ProgramCache", "device_name"]

#: caches holding built programs whose binaries are not stored yet (stored at exit)
_DEFERRED: weakref.WeakSet[ProgramCache] = weakref.WeakSet()


@atexit.register  # (registered after pyopencl's own exit handlers, so it runs before them)
def _store_all_deferred() -> None:
    for cache in list(_DEFERRED):
        cache.store_deferred()


def device_name(device: cl.Device) -> str:
    """What identifies the device's compiler besides the driver version: platform and device."""
    return " / ".join((device.platform.name, device.platform.version, device.name, device.version))


class ProgramCache:
    """Builds programs once per process and once per machine (binaries on disk)."""

    def __init__(self, context: cl.Context, device: cl.Device, label: str, directory: Path | None = None) -> None:
        self.context = context
        self.device = device
        self.label = label
        self.disk = KernelCache("opencl", device_name(device), device.driver_version, directory=directory)
        #: (source, options) -> the program's future (done, failed with a build error, or under way)
        self._programs: dict[tuple[str, str], Future[cl.Program]] = {}
        self._lock = threading.Lock()
        self.stats = {"memory_hits": 0, "disk_loads": 0, "builds": 0}
        #: worker processes building programs (EMBER_OPENCL_BUILD_PROCESSES; None: this process builds)
        self.processes: BuildProcesses | None = None
        #: seconds spent compiling source, reading binaries back from the driver, loading stored binaries
        #: (summed over the build threads: more than the wall time when builds overlap)
        self.seconds = {"build_s": 0.0, "binary_s": 0.0, "load_s": 0.0}
        #: whether a program built here is stored later (:meth:`store_deferred`) rather than at once
        self.defer_stores = False
        #: (disk key, program) built here and not stored yet
        self._unstored: list[tuple[Any, cl.Program]] = []

    def program(self, source: str, options: str = "") -> cl.Program:
        """The built program for ``source`` (from memory, disk, or a fresh build on this thread)."""
        return self.request(source, options).result()

    def request(self, source: str, options: str = "", pool: Executor | None = None) -> Future[cl.Program]:
        """The future of ``source``'s program: one asked for before (built, building or failed) is
        shared; a new one is loaded or built on ``pool`` (None: here, before returning)."""
        with self._lock:
            found = self._programs.get((source, options))
            if found is not None:
                self.stats["memory_hits"] += 1
                return found
            future: Future[cl.Program] = Future()
            self._programs[(source, options)] = future
        key = self.disk.key(source, options)
        binary = self.disk.load(key)  # (here: the counters say at once whether it builds)
        with self._lock:
            self.stats["builds" if binary is None else "disk_loads"] += 1
        if pool is not None:
            try:
                pool.submit(self._fill, future, source, options, key, binary)
                return future
            except RuntimeError:  # the pool is shut down (interpreter exit): build here
                pass
        self._fill(future, source, options, key, binary)
        return future

    def holds(self, source: str, options: str = "") -> bool:
        """Whether ``source`` is built (or loaded, or under way) in this process already."""
        return (source, options) in self._programs

    def _fill(self, future: Future[cl.Program], source: str, options: str, key: Any, binary: bytes | None) -> None:
        """Load ``binary`` or build ``source`` into ``future``; a driver error other than a failed
        build is not kept (the next request tries again), a failed build is (it would fail again)."""
        if not future.set_running_or_notify_cancel():
            return
        try:
            prg = None if binary is None else self._load(key, binary, options)
            if prg is None:
                if binary is not None:  # refused: counted as a build after all
                    with self._lock:
                        self.stats["disk_loads"] -= 1
                        self.stats["builds"] += 1
                prg = None if self.processes is None else self._build_elsewhere(key, source, options)
            if prg is None:
                prg = self._build(source, options)
                if self.defer_stores:
                    with self._lock:
                        self._unstored.append((key, prg))
                    _DEFERRED.add(self)
                else:
                    self._store(key, prg)
        except BaseException as exc:
            if not isinstance(exc, KernelBuildError):
                with self._lock:
                    self._programs.pop((source, options), None)
            future.set_exception(exc)
        else:
            future.set_result(prg)

    def _build_elsewhere(self, key: Any, source: str, options: str) -> cl.Program | None:
        """``source`` built by a worker process and loaded here from its binary (stored too); None
        when no worker could (build it here). A source that does not compile raises its
        :class:`KernelBuildError` as a build here would."""
        assert self.processes is not None
        start = time.perf_counter()
        try:
            binary = self.processes.build(source, options)
        except BuildFailed as exc:
            raise self._build_error(source, options, str(exc)) from None
        except Unavailable:
            return None
        finally:
            self._count("build_s", time.perf_counter() - start)
        start = time.perf_counter()
        try:
            prg = cl.Program(self.context, [self.device], [binary]).build(options=options, devices=[self.device])
        except Exception:  # the worker's binary does not load here: build it here after all
            return None
        self._count("load_s", time.perf_counter() - start)
        self.disk.store(key, binary)
        return prg

    def _store(self, key: Any, prg: cl.Program) -> None:
        """Read ``prg``'s binary back from the driver and store it under ``key`` (nothing with the disk
        cache off: the read-back is a compile of its own on PoCL)."""
        if not self.disk.enabled:
            return
        start = time.perf_counter()
        binaries = prg.get_info(cl.program_info.BINARIES)
        self._count("binary_s", time.perf_counter() - start)
        if binaries and binaries[0]:
            self.disk.store(key, bytes(binaries[0]))

    @property
    def unstored(self) -> int:
        """How many programs built here wait for :meth:`store_deferred`."""
        return len(self._unstored)

    def store_deferred(self) -> int:
        """Store the binaries of the programs built with ``defer_stores`` (best effort: one the driver
        cannot give back is built again by the next process); returns how many were stored."""
        with self._lock:
            pending, self._unstored = self._unstored, []
        stored = 0
        for key, prg in pending:
            try:
                self._store(key, prg)
                stored += 1
            except Exception:
                pass
        return stored

    def _count(self, what: str, seconds: float) -> None:
        with self._lock:
            self.seconds[what] += seconds

    def _load(self, key: Any, binary: bytes, options: str) -> cl.Program | None:
        start = time.perf_counter()
        try:
            prg = cl.Program(self.context, [self.device], [binary]).build(options=options, devices=[self.device])
        except Exception:  # a binary this driver refuses: compile from source, store a fresh one
            self.disk.reject(key)
            return None
        self._count("load_s", time.perf_counter() - start)
        return prg

    # -- building ------------------------------------------------------------------------
    def _build(self, source: str, options: str) -> cl.Program:
        start = time.perf_counter()
        try:
            return cl.Program(self.context, source).build(options=options, devices=[self.device], cache_dir=False)
        except Exception as exc:
            if type(exc).__module__.split(".")[0] != "pyopencl":
                raise
            if "BUILD_PROGRAM_FAILURE" not in str(exc) and getattr(exc, "code", None) != -11:
                raise translate(exc, "building a kernel", self.label) from exc
            raise self._build_error(source, options, str(exc)) from exc
        finally:
            self._count("build_s", time.perf_counter() - start)

    def _build_error(self, source: str, options: str, log: str) -> KernelBuildError:
        where = self.disk.save_failed("kernel", source, ".cl")
        lines = [ln for ln in log.splitlines() if ln.strip()]
        errors = [ln for ln in lines if "error" in ln.lower()]
        excerpt = "\n".join((errors or lines)[:12])
        return KernelBuildError(
            f"{self.label}: a generated OpenCL kernel failed to build (options: {options or 'none'}). "
            f"Build log excerpt:\n{excerpt}\nThe generated source is saved at {where}. This is a bug in "
            f"ember-opencl or the device's compiler: please report it with that file and `ember devices`; "
            f"meanwhile run on another device (e.g. Device.cpu())."
        )

    def info(self) -> dict[str, Any]:
        """Build counters and the disk cache's counters (``memory_stats()["extra"]["kernel_cache"]``)."""
        seconds = {k: round(v, 4) for k, v in self.seconds.items()}
        workers = {} if self.processes is None else dict(self.processes.stats)
        counts = {"in_memory": len(self._programs), "unstored": len(self._unstored)}
        return {**self.stats, **workers, **seconds, **counts, "disk": self.disk.stats()}

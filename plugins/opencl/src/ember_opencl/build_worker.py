"""Programs compiled in processes of their own (``EMBER_OPENCL_BUILD_PROCESSES=N``; unset, 4 for a GPU
runtime whose programs are not in ember's cache yet, on a host of 8 CPUs or more: ``runtime.AUTO_BUILD_PROCESSES``).

NVIDIA's driver (H100, 580.159) and PoCL compile one program at a time per process: threads do not
build side by side (README, *Cold start: background builds*), but processes do (four processes each
building W2's 19 programs at once: 4.4-5.3 s each, one alone 4.0 s). A :class:`BuildProcesses` keeps
N workers (``python -m ember_opencl.build_worker``, importing pyopencl alone), each with a context on
the same device, its compiler started by a one-line build as it opens; a worker compiles a source
and returns the program's binary, which the runtime loads into its own context (what a disk-cache
hit does; on NVIDIA the binary is PTX, and the worker's build should have left its machine code in
the driver's compute cache, shared by the processes, for the load to find: unmeasured) and stores.
On PoCL the binary's read-back, which holds the GIL in the runtime's process, is the worker's. A
worker that fails or dies is not used again: the program builds in the runtime's process, as
without workers.

The protocol is tuples of str, int and bytes fields (a tag byte and a 4-byte length each; nothing that
could run code, unlike pickle), over the worker's stdin and stdout: first the device
(platform name, vendor, version and the device's position in its platform), answered ``("ready",
name)``; then (source, options) requests, answered ``("ok", binary)``, ``("build_failed", log)`` or
``("error", text)``. A closed stdin ends the worker.
"""

from __future__ import annotations

import atexit
import os
import queue
import struct
import sys
import threading
import time
from typing import Any, BinaryIO

__all__ = ["BuildProcesses", "BuildFailed", "Unavailable", "serve"]


class BuildFailed(Exception):
    """The source does not compile (the argument is the driver's log)."""


class Unavailable(Exception):
    """No worker could build it (none left, or it died): build in this process instead."""


_TAGS = {str: b"s", int: b"i", bytes: b"b"}


def _exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("the other end closed")
    return data


def _read(stream: BinaryIO) -> tuple[Any, ...]:
    """One message: a tuple of str, int and bytes fields."""
    (count,) = _exactly(stream, 1)
    fields: list[Any] = []
    for _ in range(count):
        tag = _exactly(stream, 1)
        (size,) = struct.unpack("<I", _exactly(stream, 4))
        data = _exactly(stream, size)
        if tag == b"b":
            fields.append(data)
        elif tag == b"s":
            fields.append(data.decode())
        elif tag == b"i":
            fields.append(int(data))
        else:
            raise EOFError(f"a field of unknown kind {tag!r}: the other end is not an ember build worker")
    return tuple(fields)


def _write(stream: BinaryIO, message: tuple[Any, ...]) -> None:
    parts = [bytes([len(message)])]
    for field in message:
        data = field if isinstance(field, bytes) else str(field).encode()
        parts += [_TAGS[type(field)], struct.pack("<I", len(data)), data]
    stream.write(b"".join(parts))
    stream.flush()


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    """The worker's loop: open the device named by the first message, then build until stdin closes."""
    import pyopencl as cl

    name, vendor, version, position = _read(requests)
    platform = next(p for p in cl.get_platforms() if (p.name, p.vendor, p.version) == (name, vendor, version))
    device = platform.get_devices()[position]
    context = cl.Context([device])
    try:  # start the compiler before the first request (NVIDIA: the first build of a process ~0.3 s slower)
        warm = "__kernel void ember_warm_up(__global int* x) { x[get_global_id(0)] = 0; }"
        cl.Program(context, warm).build(devices=[device], cache_dir=False)
    except Exception:
        pass
    _write(replies, ("ready", device.name))
    while True:
        try:
            source, options = _read(requests)
        except EOFError:
            return
        try:
            prg = cl.Program(context, source).build(options=options, devices=[device], cache_dir=False)
            (binary,) = prg.get_info(cl.program_info.BINARIES)
            reply: tuple[str, Any] = ("ok", bytes(binary))
        except Exception as exc:
            failed = "BUILD_PROGRAM_FAILURE" in str(exc) or getattr(exc, "code", None) == -11
            reply = ("build_failed" if failed else "error", str(exc))
        _write(replies, reply)


class _Worker:
    def __init__(self, where: tuple[str, str, str, int]) -> None:
        import subprocess  # noqa: PLC0415  (only where build processes are asked for: ~2 ms off every open)

        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where ember_opencl is found
        path = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ember_opencl.build_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": path},
        )
        _write(self.proc.stdin, where)  # type: ignore[arg-type]
        self.ready = False

    def build(self, source: str, options: str) -> tuple[str, Any]:
        if not self.ready:
            kind, _ = _read(self.proc.stdout)  # type: ignore[arg-type]
            if kind != "ready":
                raise EOFError(f"the worker answered {kind!r} instead of 'ready'")
            self.ready = True
        _write(self.proc.stdin, (source, options))  # type: ignore[arg-type]
        return _read(self.proc.stdout)  # type: ignore[arg-type, no-any-return]

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(5)
        except Exception:
            self.proc.kill()


class BuildProcesses:
    """``count`` worker processes building programs for one device (``where``: platform name, vendor,
    version, the device's position in its platform). :meth:`build` may be called from several
    threads: each request takes an idle worker, or waits for one. ``idle_s``: the workers end once
    no build has run for that long (each holds a context, and so memory, on the device); later builds
    then happen in the calling process (None: they live as long as the process)."""

    def __init__(self, count: int, where: tuple[str, str, str, int], idle_s: float | None = None) -> None:
        self.count = count
        self.where = where
        self.idle_s = idle_s
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self._started = False
        self._busy = 0  # builds asking for or holding a worker
        self._last = time.monotonic()  # when the last build ended (or the workers started)
        self.stats = {"process_builds": 0, "process_failures": 0, "idle_closed": 0}

    def start(self) -> None:
        """Start the workers (they import pyopencl and open the device meanwhile); at most once."""
        with self._lock:
            if self._started:
                return
            self._started = True
            for _ in range(self.count):
                try:
                    worker = _Worker(self.where)
                except Exception:
                    continue
                self._workers.append(worker)
                self._idle.put(worker)
            if not self._workers:
                self._idle.put(None)
            self._last = time.monotonic()
        atexit.register(self.close)
        if self.idle_s is not None and self._workers:
            threading.Thread(target=self._close_when_idle, name="ember-opencl-build-idle", daemon=True).start()

    def _close_when_idle(self) -> None:
        """End the workers once no build has asked for one for :attr:`idle_s` seconds."""
        assert self.idle_s is not None
        while True:
            time.sleep(max(self.idle_s / 4, 0.01))
            with self._lock:
                if not self._workers:
                    return
                if self._busy or time.monotonic() - self._last < self.idle_s:
                    continue
                workers, self._workers = self._workers, []
                while True:  # no worker is handed out from now on: a build asks, gets None, builds here
                    try:
                        self._idle.get_nowait()
                    except queue.Empty:
                        break
                self._idle.put(None)
                self.stats["idle_closed"] += len(workers)
            for worker in workers:
                worker.close()
            return

    def build(self, source: str, options: str) -> bytes:
        """The binary of ``source`` built by a worker; :class:`BuildFailed` with the driver's log if it
        does not compile, :class:`Unavailable` if no worker could (then build it here)."""
        self.start()
        with self._lock:
            self._busy += 1
        try:
            worker = self._idle.get()
            if worker is None:  # no worker is left: wake the next waiter too
                self._idle.put(None)
                raise Unavailable("no build worker is running")
            try:
                kind, payload = worker.build(source, options)
            except Exception as exc:
                self._retire(worker)
                raise Unavailable(f"a build worker stopped: {exc}") from exc
            self._idle.put(worker)
        finally:
            with self._lock:
                self._busy -= 1
                self._last = time.monotonic()
        if kind == "ok":
            with self._lock:
                self.stats["process_builds"] += 1
            return payload  # type: ignore[no-any-return]
        if kind == "build_failed":
            raise BuildFailed(payload)
        with self._lock:
            self.stats["process_failures"] += 1
        raise Unavailable(f"a build worker could not build it: {payload}")

    def _retire(self, worker: _Worker) -> None:
        with self._lock:
            self.stats["process_failures"] += 1
            if worker in self._workers:
                self._workers.remove(worker)
            last = not self._workers
        worker.close()
        if last:
            self._idle.put(None)

    def close(self) -> None:
        """End the workers (at exit, or when the runtime goes)."""
        with self._lock:
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()


if __name__ == "__main__":
    replies = os.fdopen(os.dup(1), "wb")  # the protocol's; anything the driver prints goes to stderr
    os.dup2(2, 1)
    serve(sys.stdin.buffer, replies)

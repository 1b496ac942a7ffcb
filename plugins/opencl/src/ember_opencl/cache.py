"""Compiled programs, cached in memory and on disk per device and driver version.

A program is keyed by the hash of its source and build options. The disk cache lives in
``ember.config.cache_dir() / "opencl" / <device key>``, where the device key hashes the
platform, device name, device version and driver version, so a driver update starts a
fresh folder. Binaries are written atomically (temporary file, then rename), so processes
sharing the folder never see half a file; a second process loads binaries instead of
compiling (``stats["disk_loads"]`` counts them, ``stats["builds"]`` counts compilations).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import pyopencl as cl

from ember import config

from .errors import KernelBuildError, translate

__all__ = ["ProgramCache", "device_key", "CACHE_FORMAT"]

#: bump when the layout of cached files changes
CACHE_FORMAT = "1"


def device_key(device: cl.Device) -> str:
    """A short stable name for (platform, device, driver): the cache folder of this device."""
    parts = [
        CACHE_FORMAT,
        device.platform.name,
        device.platform.version,
        device.name,
        device.version,
        device.driver_version,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:20]


class ProgramCache:
    """Builds programs once per process and once per machine (binaries on disk)."""

    def __init__(self, context: cl.Context, device: cl.Device, label: str, directory: Path | None = None) -> None:
        self.context = context
        self.device = device
        self.label = label
        base = directory if directory is not None else config.cache_dir() / "opencl"
        self.directory = base / device_key(device)
        self._programs: dict[str, cl.Program] = {}
        self._lock = threading.Lock()
        self._disk_ok = True
        self.stats = {"memory_hits": 0, "disk_loads": 0, "builds": 0, "disk_writes": 0}

    @staticmethod
    def key(source: str, options: str) -> str:
        return hashlib.sha256(f"{CACHE_FORMAT}\0{options}\0{source}".encode()).hexdigest()

    def program(self, source: str, options: str = "") -> cl.Program:
        """The built program for ``source`` (from memory, disk, or a fresh build)."""
        key = self.key(source, options)
        with self._lock:
            found = self._programs.get(key)
            if found is not None:
                self.stats["memory_hits"] += 1
                return found
            prg = self._load(key, options)
            if prg is None:
                prg = self._build(source, options)
                self._store(key, prg)
            self._programs[key] = prg
            return prg

    # -- disk --------------------------------------------------------------------------
    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.bin"

    def _load(self, key: str, options: str) -> cl.Program | None:
        path = self._path(key)
        try:
            binary = path.read_bytes()
        except OSError:
            return None
        try:
            prg = cl.Program(self.context, [self.device], [binary]).build(options=options, devices=[self.device])
        except Exception:  # a stale or corrupt binary: rebuild from source
            return None
        self.stats["disk_loads"] += 1
        return prg

    def _store(self, key: str, prg: cl.Program) -> None:
        if not self._disk_ok:
            return
        try:
            binaries = prg.get_info(cl.program_info.BINARIES)
            binary = binaries[0] if binaries else b""
            if not binary:
                return
            self.directory.mkdir(parents=True, exist_ok=True)
            info = self.directory / "device.txt"
            if not info.exists():
                self._atomic_write(info, f"{self.label}\n{self.device.driver_version}\n".encode())
            self._atomic_write(self._path(key), bytes(binary))
            self.stats["disk_writes"] += 1
        except OSError as exc:
            self._disk_ok = False
            warnings.warn(
                f"ember-opencl: cannot write the kernel cache in {self.directory} ({exc}); kernels will be "
                f"compiled again by the next process. Set EMBER_CACHE_DIR to a writable folder.",
                RuntimeWarning,
                stacklevel=3,
            )

    def _atomic_write(self, path: Path, data: bytes) -> None:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    # -- building ------------------------------------------------------------------------
    def _build(self, source: str, options: str) -> cl.Program:
        self.stats["builds"] += 1
        try:
            return cl.Program(self.context, source).build(options=options, devices=[self.device], cache_dir=False)
        except Exception as exc:
            if type(exc).__module__.split(".")[0] != "pyopencl":
                raise
            if "BUILD_PROGRAM_FAILURE" not in str(exc) and getattr(exc, "code", None) != -11:
                raise translate(exc, "building a kernel", self.label) from exc
            raise self._build_error(source, options, str(exc)) from exc

    def _build_error(self, source: str, options: str, log: str) -> KernelBuildError:
        where = "(could not save the source)"
        try:
            folder = self.directory / "failed"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{self.key(source, options)[:16]}.cl"
            path.write_text(source)
            where = str(path)
        except OSError:
            pass
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
        return {"directory": str(self.directory), **self.stats, "in_memory": len(self._programs)}

"""Compiled kernels cached on disk per device and driver, so that a second process starts warm.

A backend makes one :class:`KernelCache` per device, named by the device and its driver
version, and asks it for entries by :class:`KernelKey`: the device name, the driver version,
ember's version, the SHA-256 of the kernel source and the compile options. What an entry
holds is the backend's business (an OpenCL program binary, generated WGSL text...).

Entries live in ``config.cache_dir() / <backend> / <device folder> / <key digest>.bin``; the
device folder is a hash of (device, driver, ember version) with a ``device.txt`` saying which
device it is, so a driver or ember update starts a fresh folder. Writes are atomic (a
temporary file in the same folder, then ``os.replace``), so processes sharing the folder never
read half an entry. Each entry starts with a header (magic, payload length, SHA-256 of the
payload); an entry that is truncated or corrupt is counted, removed and treated as a miss, so
the backend compiles again and stores a good copy. Nothing here raises on a bad or unwritable
cache: the worst case is compiling as if there were no cache. ``EMBER_KERNEL_CACHE=0`` turns
the disk cache off; :func:`cache_stats` reports every open cache (for ``ember doctor``).
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import threading
import warnings
import weakref
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TypedDict

from . import config

__all__ = ["KernelKey", "KernelCache", "KernelCacheStats", "cache_stats", "ember_version", "CACHE_FORMAT"]

#: bump when the layout of cache entries changes
CACHE_FORMAT = 1
_MAGIC = b"EMBERKC1"
_HEADER = struct.Struct("<8sQ32s")  # magic, payload length, sha256 of the payload


def ember_version() -> str:
    """The installed ember version (part of every key: a new ember may generate other kernels)."""
    try:
        return metadata.version("ember")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


_VERSION = ember_version()


@dataclass(frozen=True)
class KernelKey:
    """What a compiled kernel depends on; :meth:`digest` names its cache entry."""

    device: str
    driver: str
    source_sha256: str
    options: str = ""
    ember: str = field(default=_VERSION)

    @classmethod
    def for_source(cls, device: str, driver: str, source: str | bytes, options: str = "") -> KernelKey:
        data = source.encode() if isinstance(source, str) else source
        return cls(device, driver, hashlib.sha256(data).hexdigest(), options)

    def digest(self) -> str:
        parts = (str(CACHE_FORMAT), self.device, self.driver, self.ember, self.options, self.source_sha256)
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()


class KernelCacheStats(TypedDict):
    """Counters of one cache: ``hits`` entries read, ``misses`` absent, ``corrupt`` bad headers or
    checksums (removed), ``rejected`` read but refused by the backend (stale), ``writes`` stored,
    ``write_errors`` failed writes (the cache then stops writing)."""

    backend: str
    device: str
    directory: str
    enabled: bool
    hits: int
    misses: int
    corrupt: int
    rejected: int
    writes: int
    write_errors: int


_OPEN: weakref.WeakSet[KernelCache] = weakref.WeakSet()


class KernelCache:
    """The on-disk kernel store of one device (``backend``: ``"opencl"``, ``"wgpu"``...)."""

    def __init__(self, backend: str, device: str, driver: str, *, directory: Path | None = None) -> None:
        self.backend = backend
        self.device = device
        self.driver = driver
        self._base = directory
        self._folder = hashlib.sha256("\0".join((str(CACHE_FORMAT), device, driver, _VERSION)).encode()).hexdigest()[
            :20
        ]
        self.enabled = config.kernel_cache_enabled()
        self._lock = threading.Lock()
        self.counts = {"hits": 0, "misses": 0, "corrupt": 0, "rejected": 0, "writes": 0, "write_errors": 0}
        _OPEN.add(self)

    @property
    def directory(self) -> Path:
        """This device's folder: under ``directory`` if one was given, else ``config.cache_dir()`` (read now)."""
        base = self._base if self._base is not None else config.cache_dir() / self.backend
        return base / self._folder

    def key(self, source: str | bytes, options: str = "") -> KernelKey:
        """The key of ``source`` compiled with ``options`` on this device."""
        return KernelKey.for_source(self.device, self.driver, source, options)

    def path(self, key: KernelKey) -> Path:
        return self.directory / f"{key.digest()}.bin"

    # -- reading ---------------------------------------------------------------------------
    def load(self, key: KernelKey) -> bytes | None:
        """The stored payload of ``key``, or None (absent, disabled, or corrupt: then removed)."""
        if not self.enabled:
            return None
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            self._count("misses")
            return None
        payload = _unpack(data)
        if payload is None:
            self._count("corrupt")
            self._remove(path)
            return None
        self._count("hits")
        return payload

    def reject(self, key: KernelKey) -> None:
        """The backend could not use what :meth:`load` returned (a stale binary): count it and remove it."""
        self._count("rejected")
        self._remove(self.path(key))

    # -- writing ---------------------------------------------------------------------------
    def store(self, key: KernelKey, payload: bytes) -> bool:
        """Write ``payload`` for ``key`` atomically; False when the cache is off or cannot be written."""
        if not self.enabled:
            return False
        header = _HEADER.pack(_MAGIC, len(payload), hashlib.sha256(payload).digest())
        folder = self.directory
        try:
            folder.mkdir(parents=True, exist_ok=True)
            info = folder / "device.txt"
            if not info.exists():
                _atomic_write(info, f"{self.backend}\n{self.device}\n{self.driver}\nember {_VERSION}\n".encode())
            _atomic_write(folder / f"{key.digest()}.bin", header + payload)
        except OSError as exc:
            self._count("write_errors")
            self.enabled = False
            warnings.warn(
                f"ember: cannot write the {self.backend} kernel cache in {folder} ({exc}); kernels will "
                f"be compiled again by the next process. Set EMBER_CACHE_DIR to a writable folder.",
                RuntimeWarning,
                stacklevel=3,
            )
            return False
        self._count("writes")
        return True

    def save_failed(self, name: str, source: str, suffix: str) -> str:
        """Save the source of a kernel the driver rejected under ``failed/``; returns where (for the error)."""
        digest = hashlib.sha256(source.encode()).hexdigest()[:12]
        try:
            folder = self.directory.parent / "failed"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{name}-{digest}{suffix}"
            path.write_text(source, encoding="utf-8")
            return str(path)
        except OSError:
            return "(could not be written)"

    # -- housekeeping ----------------------------------------------------------------------
    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    @staticmethod
    def _remove(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass

    def stats(self) -> KernelCacheStats:
        return {
            "backend": self.backend,
            "device": self.device,
            "directory": str(self.directory),
            "enabled": self.enabled,
            **self.counts,  # type: ignore[typeddict-item]
        }


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it over ``path``."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
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


def _unpack(data: bytes) -> bytes | None:
    """The payload of a stored entry, or None when the header, length or checksum is wrong."""
    if len(data) < _HEADER.size:
        return None
    magic, length, checksum = _HEADER.unpack_from(data)
    payload = data[_HEADER.size :]
    if magic != _MAGIC or length != len(payload) or hashlib.sha256(payload).digest() != checksum:
        return None
    return payload


def cache_stats() -> list[KernelCacheStats]:
    """The counters of every kernel cache open in this process (what ``ember doctor`` can show)."""
    return [cache.stats() for cache in list(_OPEN)]

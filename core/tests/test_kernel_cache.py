"""ember.kernel_cache: keys, atomic writes, corrupt and truncated entries, counters, other processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ember import config
from ember.kernel_cache import KernelCache, KernelKey, cache_stats


class Compiler:
    """A fake driver compiler: ``compile`` returns a 'binary' and counts how often it ran."""

    def __init__(self) -> None:
        self.builds = 0

    def compile(self, source: str) -> bytes:
        self.builds += 1
        return b"BIN:" + source.encode()[::-1]


def program(cache: KernelCache, compiler: Compiler, source: str, options: str = "") -> bytes:
    """What a backend does: load the binary, else compile it and store it."""
    key = cache.key(source, options)
    binary = cache.load(key)
    if binary is None:
        binary = compiler.compile(source)
        cache.store(key, binary)
    return binary


@pytest.fixture
def cache(tmp_path: Path) -> KernelCache:
    return KernelCache("fake", "Fake GPU 9000", "driver 1.2.3", directory=tmp_path)


def test_key_covers_device_driver_version_source_and_options():
    base = KernelKey.for_source("dev", "drv 1", "kernel void f() {}", "-O2")
    variants = [
        KernelKey.for_source("dev2", "drv 1", "kernel void f() {}", "-O2"),
        KernelKey.for_source("dev", "drv 2", "kernel void f() {}", "-O2"),
        KernelKey.for_source("dev", "drv 1", "kernel void g() {}", "-O2"),
        KernelKey.for_source("dev", "drv 1", "kernel void f() {}", "-O3"),
        KernelKey("dev", "drv 1", base.source_sha256, "-O2", ember="99.0"),
    ]
    digests = {k.digest() for k in variants}
    assert len(digests) == len(variants) and base.digest() not in digests
    assert base.digest() == KernelKey.for_source("dev", "drv 1", b"kernel void f() {}", "-O2").digest()


def test_second_lookup_is_a_hit_and_the_same_bytes(cache):
    cc = Compiler()
    first = program(cache, cc, "src")
    second = program(KernelCache("fake", "Fake GPU 9000", "driver 1.2.3", directory=cache.directory.parent), cc, "src")
    assert first == second and cc.builds == 1
    assert cache.stats()["misses"] == 1 and cache.stats()["writes"] == 1


def test_other_driver_uses_another_folder(cache):
    cc = Compiler()
    program(cache, cc, "src")
    newer = KernelCache("fake", "Fake GPU 9000", "driver 2.0", directory=cache.directory.parent)
    assert newer.directory != cache.directory
    program(newer, cc, "src")
    assert cc.builds == 2
    assert (cache.directory / "device.txt").read_text().splitlines()[:3] == ["fake", "Fake GPU 9000", "driver 1.2.3"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: b"garbage",  # shorter than a header
        lambda data: data[: len(data) - 3],  # truncated payload
        lambda data: data[:-1] + bytes([data[-1] ^ 0xFF]),  # a flipped bit: checksum mismatch
        lambda data: b"XXXXXXXX" + data[8:],  # another format
        lambda data: b"",
    ],
)
def test_corrupt_entry_is_ignored_recompiled_and_rewritten(cache, damage):
    cc = Compiler()
    good = program(cache, cc, "src")
    path = cache.path(cache.key("src"))
    path.write_bytes(damage(path.read_bytes()))
    assert program(cache, cc, "src") == good  # no crash, the right binary
    assert cc.builds == 2 and cache.stats()["corrupt"] == 1
    assert program(cache, cc, "src") == good and cc.builds == 2  # the rewritten entry is good again
    assert cache.stats()["hits"] == 1


def test_rejected_entry_is_removed(cache):
    cc = Compiler()
    program(cache, cc, "src")
    key = cache.key("src")
    assert cache.load(key) is not None
    cache.reject(key)  # the driver refused the binary (a stale one)
    assert not cache.path(key).exists() and cache.stats()["rejected"] == 1


def test_writes_leave_no_temporary_files(cache):
    cc = Compiler()
    for i in range(20):
        program(cache, cc, f"src {i}")
    names = [p.name for p in cache.directory.iterdir()]
    assert len(names) == 21 and not [n for n in names if n.startswith(".tmp-")]


def test_interrupted_write_keeps_the_old_entry(cache, monkeypatch):
    cc = Compiler()
    good = program(cache, cc, "src")
    key = cache.key("src")

    def crash(src, dst):
        raise KeyboardInterrupt  # the process dies between writing the temporary file and the rename

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        cache.store(key, b"a new binary that never lands")
    monkeypatch.undo()
    assert cache.load(key) == good
    assert not [p for p in cache.directory.iterdir() if p.name.startswith(".tmp-")]


def test_unwritable_directory_warns_once_and_keeps_working(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = KernelCache("fake", "dev", "drv", directory=blocker)
    cc = Compiler()
    with pytest.warns(RuntimeWarning, match="EMBER_CACHE_DIR"):
        program(cache, cc, "a")
    program(cache, cc, "b")  # no second warning: writing is off now
    assert cc.builds == 2 and cache.stats()["write_errors"] == 1 and not cache.enabled


def test_cache_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_KERNEL_CACHE", "0")
    assert not config.kernel_cache_enabled()
    cache = KernelCache("fake", "dev", "drv", directory=tmp_path)
    cc = Compiler()
    program(cache, cc, "a")
    program(cache, cc, "a")
    assert cc.builds == 2 and not any(tmp_path.rglob("*.bin"))


def test_default_directory_is_under_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    cache = KernelCache("fake", "dev", "drv")
    assert cache.directory.parent == tmp_path / "fake"
    assert cache.stats() in cache_stats()


def test_failed_source_is_saved(cache):
    where = cache.save_failed("broken", "kernel void broken(", ".cl")
    assert Path(where).read_text() == "kernel void broken(" and Path(where).parent.name == "failed"


def test_processes_share_entries(tmp_path):
    child = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from ember.kernel_cache import KernelCache
        cache = KernelCache("fake", "dev", "drv", directory=Path(sys.argv[1]))
        key = cache.key("shared source")
        found = cache.load(key)
        if found is None:
            cache.store(key, b"compiled once")
        print(json.dumps({"found": found.decode() if found else None, **cache.stats()}))
        """
    )
    import json

    runs = [
        json.loads(subprocess.run([sys.executable, "-c", child, str(tmp_path)], capture_output=True, text=True,
                                  check=True).stdout)
        for _ in range(2)
    ]  # fmt: skip
    assert runs[0]["found"] is None and runs[0]["writes"] == 1
    assert runs[1]["found"] == "compiled once" and runs[1]["hits"] == 1 and runs[1]["writes"] == 0

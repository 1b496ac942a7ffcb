"""The on-disk program cache across processes, Philox bit-identity, and driver-error translation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import ember as em
from ember.random import philox_words

CHILD = textwrap.dedent(
    """
    import json
    import ember as em
    dev = em.Device("opencl:%d")
    x = em.arange(10, dtype="float32", device=dev)
    y = (em.exp(x) * 2.0 + x).sum()
    print(json.dumps({"value": float(y.item()), "cache": dev.memory_stats()["extra"]["kernel_cache"]}))
    """
)


def _child(index: int, cache: str) -> dict:
    env = dict(os.environ, EMBER_CACHE_DIR=cache)
    out = subprocess.run(
        [sys.executable, "-c", CHILD % index], env=env, capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_second_process_loads_binaries_instead_of_compiling(dev, tmp_path):
    first = _child(dev.index, str(tmp_path))
    second = _child(dev.index, str(tmp_path))
    assert first["cache"]["builds"] > 0 and first["cache"]["disk_loads"] == 0
    assert second["cache"]["builds"] == 0, second
    assert second["cache"]["disk_loads"] == first["cache"]["builds"]
    assert second["value"] == first["value"]
    folder = tmp_path / "opencl"
    (device_dir,) = folder.iterdir()
    assert (device_dir / "device.txt").exists()
    assert not [p for p in device_dir.iterdir() if p.name.startswith(".tmp-")]  # atomic writes left nothing behind


def test_corrupt_cache_file_is_rebuilt(dev, tmp_path):
    _child(dev.index, str(tmp_path))
    (device_dir,) = (tmp_path / "opencl").iterdir()
    for p in device_dir.glob("*.bin"):
        p.write_bytes(b"not a binary")
    again = _child(dev.index, str(tmp_path))
    assert again["cache"]["builds"] > 0


def test_binary_the_driver_refuses_is_rebuilt_and_replaced(dev, tmp_path):
    from ember_opencl.cache import ProgramCache

    rt = dev.backend.rt
    source = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= 2.0f; }"
    cache = ProgramCache(rt.context, rt.device, rt.label, directory=tmp_path)
    cache.disk.store(cache.disk.key(source, rt.options), b"a well-formed entry holding no binary")
    cache.program(source, rt.options)
    assert cache.stats["builds"] == 1 and cache.disk.stats()["rejected"] == 1
    fresh = ProgramCache(rt.context, rt.device, rt.label, directory=tmp_path)
    fresh.program(source, rt.options)
    assert fresh.stats == {"memory_hits": 0, "disk_loads": 1, "builds": 0}  # the entry was replaced by a real binary


@pytest.mark.parametrize(
    "key,counter,size",
    [((0, 0), 0, 9), ((0x12345678, 0x9ABCDEF0), 5, 1001), ((1, 2), 2**32 - 3, 50), ((7, 7), 2**64 - 2, 17)],
)
def test_philox_words_are_bit_identical(dev, key, counter, size):
    got = dev.backend.to_numpy(dev.backend.random_bits(key=key, counter=counter, size=size))
    want = philox_words(key[0], key[1], counter, size)
    assert got.dtype == np.uint32
    np.testing.assert_array_equal(got, want)


def test_seeded_sampling_matches_cpu(dev):
    em.seed(123)
    a = em.rand((3, 5), device=dev).numpy()
    em.seed(123)
    b = em.rand((3, 5), device="cpu").numpy()
    np.testing.assert_array_equal(a, b)


def test_invalid_device_index_names_the_count():
    n = em.Device.opencl(0).backend.device_count()
    with pytest.raises(em.DeviceUnavailableError, match=rf"found {n} device\(s\)"):
        _ = em.Device("opencl", n + 3).backend


def test_build_failure_reports_log_and_source(dev, tmp_path):
    from ember_opencl.cache import ProgramCache
    from ember_opencl.errors import KernelBuildError

    rt = dev.backend.rt
    cache = ProgramCache(rt.context, rt.device, rt.label, directory=tmp_path)
    with pytest.raises(KernelBuildError) as info:
        cache.program("__kernel void broken(__global float* x) { x[0] = undefined_name; }")
    msg = str(info.value)
    assert "undefined_name" in msg and "failed to build" in msg
    saved = msg.split("saved at ")[1].split(". ")[0]
    assert "undefined_name" in open(saved).read()
    assert isinstance(info.value, em.EmberError) and isinstance(info.value, RuntimeError)


def test_out_of_memory_is_an_ember_error(dev):
    from ember_opencl.errors import DeviceMemoryError

    too_big = dev.backend.rt.max_alloc // 4 + 1024
    with pytest.raises(DeviceMemoryError, match="per allocation"):
        (em.ones((too_big,), dtype="float32", device=dev) * 2.0).realize()  # deferred until realized
    assert issubclass(DeviceMemoryError, MemoryError)


def test_driver_status_codes_are_translated():
    from ember_opencl.errors import DeviceMemoryError, OpenCLError, translate

    class FakeClError(Exception):
        code = -4

    err = translate(FakeClError("clEnqueueNDRangeKernel failed: MEM_OBJECT_ALLOCATION_FAILURE"), "running", "opencl:0")
    assert isinstance(err, DeviceMemoryError) and "smaller batch" in str(err)
    FakeClError.code = -30
    err = translate(FakeClError("INVALID_VALUE"), "running a kernel", "opencl:0")
    assert isinstance(err, OpenCLError) and "INVALID_VALUE" in str(err)


def test_no_platform_message_says_to_install_pocl():
    from ember_opencl.errors import no_platform_error

    err = no_platform_error("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")
    assert isinstance(err, em.DeviceUnavailableError)
    assert "apt-get install pocl-opencl-icd ocl-icd-libopencl1" in str(err)


def test_no_platform_in_a_subprocess(tmp_path):
    code = (
        "import ember as em\n"
        "try:\n    em.Device('opencl:0').backend\n"
        "except em.DeviceUnavailableError as e:\n    print(e)\n"
    )
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path), OPENCL_VENDOR_PATH=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "no OpenCL platform found" in out.stdout and "pocl-opencl-icd" in out.stdout, out.stdout + out.stderr

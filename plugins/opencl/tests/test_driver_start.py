"""The driver's start-up on a thread while the backend imports (ember_opencl.driver_start): it runs
in a new process that opens an OpenCL device, it is over before ember's first OpenCL call, it finds
the ICD loader pyopencl loaded, the devices listed are the same with it off, and it can be turned off."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pyopencl = pytest.importorskip("pyopencl")

from ember_opencl import driver_start  # noqa: E402
from ember_opencl.runtime import device_list  # noqa: E402

_CHILD = """
import json
import ember as em
from ember_opencl import driver_start, runtime

dev = em.Device("opencl:0")
dev.synchronize()
thread = driver_start._thread
pairs = [(p.name, d.name) for p, d in runtime.device_list()]
print(json.dumps({"started": thread is not None, "alive": thread is not None and thread.is_alive(),
                  "pairs": pairs, "value": (em.ones((3,), device=dev) * 2).numpy().tolist()}))
"""


def _devices_or_skip() -> None:
    try:
        device_list()
    except Exception as exc:
        pytest.skip(f"no OpenCL platform: {exc}")


def _child(early: str | None) -> dict:
    env = dict(os.environ)
    env.pop("EMBER_OPENCL_EARLY_DRIVER", None)
    if early is not None:
        env["EMBER_OPENCL_EARLY_DRIVER"] = early
    done = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_loader_path_names_the_loaded_icd_loader() -> None:
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("no /proc/self/maps here: the driver does not start early")
    path = driver_start.loader_path()
    assert path is not None and os.path.basename(path).startswith("libOpenCL") and os.path.exists(path)


def test_early_start_runs_and_lists_the_same_devices() -> None:
    _devices_or_skip()
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("no /proc/self/maps here: the driver does not start early")
    early, off = _child(None), _child("0")
    assert early["started"] and not early["alive"]  # over before device_list asked the loader
    assert not off["started"]
    assert early["pairs"] == off["pairs"] and early["pairs"]
    assert early["value"] == off["value"] == [2.0, 2.0, 2.0]


def test_wait_without_a_start_returns() -> None:
    driver_start.wait()  # (in this process a start may or may not have happened: either way it returns)

"""ember_cpu.host_memory: glibc's thresholds set once at the backend's import (page faults of a
repeated allocation pattern as the observable), and EMBER_CPU_MALLOC=0 leaving malloc alone."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the settings are glibc's")

_FAULTS = """
import resource, numpy as np
import ember_cpu.backend  # the import applies the settings
from ember_cpu import host_memory
def step():  # a step's temporaries: 4 and 12 MiB arrays, freed at its end
    a = np.ones((1024, 1024), np.float32); b = a + 1; c = np.ones((3, 1024, 1024), np.float32); del a, b, c
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    step()
print(host_memory.applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _run(env_value: str | None) -> tuple[bool, int]:
    import os

    env = dict(os.environ)
    env.pop("EMBER_CPU_MALLOC", None)
    if env_value is not None:
        env["EMBER_CPU_MALLOC"] = env_value
    out = subprocess.run([sys.executable, "-c", _FAULTS], env=env, capture_output=True, text=True, check=True)
    applied, faults = out.stdout.split()
    return applied == "True", int(faults)


def test_freed_arrays_are_reused_without_page_faults():
    applied, faults = _run(None)
    assert applied
    # 20 steps of 20 MiB of arrays: ~2,500 faults when the blocks are mapped anew (glibc's defaults)
    assert faults < 200, f"{faults} page faults: freed arrays were returned to the kernel"


def test_ember_cpu_malloc_0_leaves_malloc_alone():
    applied, _ = _run("0")
    assert not applied

"""Fixtures: the OpenCL device under test (skipped with the reason when there is none)."""

from __future__ import annotations

import os

import pytest

# GEMM autotuning on first use is a device-time cost the tests must not pay (tune.py; tested there)
os.environ.setdefault("EMBER_AUTOTUNE", "0")

import ember as em

try:  # a fresh GPU runtime's warm-up builds the generic GEMMs (runtime.HEAD_START): the tests that
    # count a fresh runtime's builds must not see them (test_warm_up.py turns it on)
    from ember_opencl import runtime as _runtime

    _runtime.HEAD_START = False
except ImportError:  # no pyopencl: every test skips
    pass


@pytest.fixture(scope="session")
def dev() -> em.Device:
    """``opencl:<EMBER_OPENCL_DEVICE or 0>``; skips when no OpenCL platform is installed."""
    try:
        d = em.Device.opencl()
        _ = d.backend
    except em.errors.DeviceUnavailableError as exc:
        pytest.skip(f"no OpenCL device: {exc}")
    return d


@pytest.fixture(scope="session")
def cpu() -> em.Device:
    return em.Device.cpu()


def pytest_configure(config: pytest.Config) -> None:
    # numpy's IEEE warnings from the CPU references, and PoCL's compiler remarks, are expected
    config.addinivalue_line("filterwarnings", "ignore:.*encountered in:RuntimeWarning")
    config.addinivalue_line("filterwarnings", "ignore:Non-empty compiler output")

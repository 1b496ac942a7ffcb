"""Fixtures: one wgpu device for the session (skips everything when no adapter is found)."""

from __future__ import annotations

import os
from typing import Any

import pytest


@pytest.fixture(scope="session")
def dev() -> Any:
    import ember as em

    try:
        device = em.Device(f"wgpu:{os.environ.get('EMBER_WGPU_DEVICE', '0')}")  # gemm_h200.sh picks NVIDIA's
        assert device.backend is not None  # loads wgpu and opens the adapter
    except Exception as exc:  # no Vulkan/Metal/D3D12 adapter on this machine
        pytest.skip(f"no WGPU adapter: {exc}")
    return device


@pytest.fixture(scope="session")
def rt(dev: Any) -> Any:
    """The device's runtime (pipelines, pool, batching)."""
    return dev.backend.rt


@pytest.fixture
def sync_points_only(rt: Any) -> Any:
    """The runtime submitting its open batch at sync points only (no chunked submits, whatever
    ``EMBER_WGPU_SUBMIT_EVERY`` says), for tests of what the open batch holds; restored after."""
    before = rt.submit_every
    rt.set_submit_every(0)
    yield rt
    rt.set_submit_every(before)

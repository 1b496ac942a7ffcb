"""Where the adaptive pool carves blocks out of larger buffers: every platform but NVIDIA's (its driver
crashed releasing a dropped step plan's sub-buffers), with EMBER_OPENCL_SUB_BUFFERS to choose."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ember.errors import InvalidArgumentError
from ember_opencl import runtime


@pytest.mark.parametrize(
    ("platform", "env", "expected"),
    [
        ("Portable Computing Language", None, True),
        ("NVIDIA CUDA", None, False),
        ("NVIDIA CUDA", "1", True),
        ("Portable Computing Language", "0", False),
    ],
)
def test_the_platform_and_the_setting_decide(monkeypatch, platform, env, expected) -> None:  # noqa: ANN001
    if env is None:
        monkeypatch.delenv("EMBER_OPENCL_SUB_BUFFERS", raising=False)
    else:
        monkeypatch.setenv("EMBER_OPENCL_SUB_BUFFERS", env)
    assert runtime._sub_buffers(SimpleNamespace(name=platform)) is expected


def test_a_bad_setting_names_the_variable(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("EMBER_OPENCL_SUB_BUFFERS", "yes")
    with pytest.raises(InvalidArgumentError, match="EMBER_OPENCL_SUB_BUFFERS must be 1 or 0"):
        runtime._sub_buffers(SimpleNamespace(name="NVIDIA CUDA"))


def test_the_device_pool_follows_the_runtime(dev) -> None:  # noqa: ANN001
    """The pool of the device under test carves only where the runtime says it may."""
    import ember as em

    rt = em.Device(dev).backend.rt
    assert (rt.pool._sub is not None) is rt.sub_buffers

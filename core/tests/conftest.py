"""Shared fixtures for core unit tests: a fresh plugin registry and a fake second device.

The golden tests against PyTorch skip when torch is not importable, so that the core env runs
without it. With ``EMBER_REQUIRE_TORCH=1`` (the golden-torch tox env sets it) a missing torch is
a usage error instead, and any test skipped for a reason that names torch fails the run.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import ember as em
from ember.plugins import BackendSpec, PluginRegistry, get_registry, set_registry

REQUIRE_TORCH = os.environ.get("EMBER_REQUIRE_TORCH", "") not in ("", "0")
_torch_skips: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if not REQUIRE_TORCH:
        return
    try:
        import torch  # noqa: F401
    except Exception as exc:
        raise pytest.UsageError(
            f"EMBER_REQUIRE_TORCH=1 (the golden-torch env) but PyTorch cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc


def pytest_report_header(config: pytest.Config) -> str | None:
    if not REQUIRE_TORCH:
        return None
    import torch

    return f"EMBER_REQUIRE_TORCH=1: torch {torch.__version__} ({torch.__file__}); a skip that names torch fails the run"


def _note_torch_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if REQUIRE_TORCH and report.skipped and "torch" in str(report.longrepr).lower():
        _torch_skips.append(f"{report.nodeid}: {report.longrepr}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note_torch_skip(report)  # a module-level importorskip


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note_torch_skip(report)  # a skipif mark or pytest.skip


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _torch_skips:
        lines = "\n  ".join(_torch_skips)
        print(f"\nEMBER_REQUIRE_TORCH=1 but {len(_torch_skips)} torch test(s) were skipped:\n  {lines}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


class TwinBackend(em.Backend):
    """A second numpy 'device' kind, so cross-device rules can be tested on one machine."""

    name = "twin"

    def __init__(self, device: em.Device) -> None:
        super().__init__(device)
        from ember_cpu.backend import CpuBackend

        self._cpu = CpuBackend(device)

    def implementation(self, op: str):  # reuse the CPU kernels
        return self._cpu.implementation(op)


class TwinPlugin:
    @em.hookimpl
    def ember_register_backends(self, registry: PluginRegistry) -> None:
        registry.add_backend(BackendSpec(name="twin", kinds=("twin",), loader=lambda: TwinBackend))


@pytest.fixture
def twin() -> em.Device:
    """A device of kind 'twin' (numpy underneath) registered in the process-wide registry."""
    reg = get_registry()
    if "twin" not in reg.specs:
        reg.discover()
        reg.register(TwinPlugin(), name="twin-test-plugin")
    return em.Device("twin:0")


@pytest.fixture
def fresh_registry():
    """A new, empty registry swapped in for the duration of a test."""
    reg = PluginRegistry()
    previous = set_registry(reg)
    yield reg
    set_registry(previous)


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)

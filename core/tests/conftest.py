"""Shared fixtures for core unit tests: a fresh plugin registry and a fake second device."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.plugins import BackendSpec, PluginRegistry, get_registry, set_registry


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

"""Entry-point module of ember-cpu: registers the ``cpu`` backend like any third-party plugin."""

from __future__ import annotations

import ember
from ember.plugins import BackendSpec


def _load() -> type:
    from .backend import CpuBackend

    return CpuBackend


@ember.hookimpl
def ember_register_backends(registry: ember.plugins.PluginRegistry) -> None:
    """Add the numpy CPU backend."""
    registry.add_backend(BackendSpec(name="cpu", kinds=("cpu",), loader=_load, priority=0))

"""Entry-point module of ember-wgpu: registers the ``wgpu`` backend; wgpu itself loads lazily."""

from __future__ import annotations

import ember
from ember.plugins import BackendSpec


def _load() -> type:
    from .backend import WgpuBackend  # imports wgpu: only when a wgpu device is first used

    return WgpuBackend


@ember.hookimpl
def ember_register_backends(registry: ember.plugins.PluginRegistry) -> None:
    """Add the WebGPU backend (Vulkan, Metal or D3D12 through wgpu-native)."""
    registry.add_backend(BackendSpec(name="wgpu", kinds=("wgpu",), loader=_load, priority=0))

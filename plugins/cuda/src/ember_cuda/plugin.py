"""Entry-point module of ember-cuda: registers the ``cuda`` backend.

Importing this module is cheap and never imports CuPy: the loader does, the first time a CUDA
device is asked for. Without CuPy, a driver or a GPU the backend still loads and reports no
device, with the reason (``ember doctor`` prints it).
"""

from __future__ import annotations

import ember
from ember.plugins import BackendSpec


def _load() -> type:
    from .backend import CudaBackend

    return CudaBackend


@ember.hookimpl
def ember_register_backends(registry: ember.plugins.PluginRegistry) -> None:
    """Add the CUDA backend (NVIDIA GPUs through CuPy)."""
    registry.add_backend(BackendSpec(name="cuda", kinds=("cuda",), loader=_load, priority=0))

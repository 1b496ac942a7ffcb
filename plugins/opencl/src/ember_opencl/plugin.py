"""Entry-point module of ember-opencl: registers the ``opencl`` backend.

Importing this module is cheap: pyopencl is imported by the loader, the first time an
OpenCL device is used; the driver then starts on a thread while the backend's modules import
(:mod:`.driver_start`).
"""

from __future__ import annotations

import ember
from ember.plugins import BackendSpec


def _load() -> type:
    import pyopencl  # noqa: F401  (first: the driver's start-up calls the ICD loader pyopencl loads)

    from . import driver_start

    driver_start.start()
    from .backend import OpenCLBackend

    return OpenCLBackend


@ember.hookimpl
def ember_register_backends(registry: ember.plugins.PluginRegistry) -> None:
    """Add the OpenCL backend (any OpenCL 1.2+ platform: NVIDIA, AMD, Intel, PoCL)."""
    registry.add_backend(BackendSpec(name="opencl", kinds=("opencl",), loader=_load, priority=0))

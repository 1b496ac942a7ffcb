"""Entry-point module of ember-fused: registers its extension ops and its conformance cases
through ember's plugin hooks, as ember-linalg does."""

from __future__ import annotations

import ember


@ember.hookimpl
def ember_register_extensions(registry: ember.plugins.PluginRegistry) -> None:
    """Import the package (which defines the ops and registers their kernels) and list its ops."""
    import ember_fused

    registry.add_extensions(*ember_fused.EXTENSION_OPS)


@ember.hookimpl
def ember_conformance_modules() -> list[str]:
    """The fused ops' conformance cases (numpy float64 references, gradients included)."""
    return ["ember_fused.conformance"]

"""Entry-point module of ember-linalg: registers its extension ops and its conformance cases
through ember's plugin hooks, exactly as a third-party extension would."""

from __future__ import annotations

import ember


@ember.hookimpl
def ember_register_extensions(registry: ember.plugins.PluginRegistry) -> None:
    """Import the package (which defines the ops and registers their kernels) and list its ops."""
    import ember_linalg

    registry.add_extensions(*ember_linalg.EXTENSION_OPS)


@ember.hookimpl
def ember_conformance_modules() -> list[str]:
    """The linalg cases of the conformance suite (numpy float64 references, gradients included)."""
    return ["ember_linalg.conformance"]

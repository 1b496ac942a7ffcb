"""Entry-point module of ember-example-ops: the two hooks through which any third-party
extension plugs into ember (its ops for ``ember plugins``, its cases for the conformance suite)."""

from __future__ import annotations

import ember


@ember.hookimpl
def ember_register_extensions(registry: ember.plugins.PluginRegistry) -> None:
    """Import the package (which defines the ops and registers their kernels) and list its ops."""
    import ember_example_ops

    registry.add_extensions(*ember_example_ops.EXTENSION_OPS)


@ember.hookimpl
def ember_conformance_modules() -> list[str]:
    """The package's own conformance cases (numpy float64 references, gradients included)."""
    return ["ember_example_ops.conformance"]

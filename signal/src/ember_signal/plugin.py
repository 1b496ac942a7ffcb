"""Entry-point module of ember-signal: defines its extension ops and adds its conformance cases."""

from __future__ import annotations

import ember


@ember.hookimpl
def ember_register_extensions(registry: ember.plugins.PluginRegistry) -> None:
    """Importing the package defines the ``signal_*`` extension ops and their kernels."""
    import ember_signal  # noqa: F401


@ember.hookimpl
def ember_conformance_modules() -> list[str]:
    """The signal cases of the conformance suite (run on every device under test)."""
    return ["ember_signal.conformance"]

"""Entry-point module of ember-checked: tells ember about the ``checked`` device kind.

Importing this module must stay cheap (``ember plugins`` imports it to list the plugin),
so the backend itself is imported by the loader, the first time a ``checked`` device is used.
"""

from __future__ import annotations

import ember
from ember.plugins import BackendSpec


def _load() -> type[ember.Backend]:
    from .backend import CheckedBackend

    return CheckedBackend


@ember.hookimpl
def ember_register_backends(registry: ember.plugins.PluginRegistry) -> None:
    """Add the ``checked`` backend."""
    registry.add_backend(BackendSpec(name="checked", kinds=("checked",), loader=_load))

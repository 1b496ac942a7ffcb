"""ember-cuda: the CUDA backend of ember, over CuPy (``Device.cuda(i)``).

``use_stream`` and ``current_stream`` load on first access, so that plugin discovery (which
imports this package for ``ember_cuda.plugin``) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time they load on first access
    from .streams import current_stream, use_stream

__all__ = ["current_stream", "use_stream"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import streams

        return getattr(streams, name)
    raise AttributeError(f"module 'ember_cuda' has no attribute {name!r}")

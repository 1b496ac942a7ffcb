"""ember-checked: a debugging backend for ember that checks the backend contract on every call.

``CheckedArray`` and ``ContractError`` load on first access: plugin discovery imports this
package (for ``ember_checked.plugin``) and must stay cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for type checkers; at run time they load on first access
    from .handles import CheckedArray, ContractError

__version__ = "0.1.0"

__all__ = ["CheckedArray", "ContractError", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("CheckedArray", "ContractError"):
        from . import handles

        return getattr(handles, name)
    raise AttributeError(f"module 'ember_checked' has no attribute {name!r}")

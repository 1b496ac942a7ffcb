"""ember-checked: a debugging backend for ember that checks the backend contract on every call."""

from .handles import CheckedArray, ContractError

__version__ = "0.1.0"

__all__ = ["CheckedArray", "ContractError", "__version__"]

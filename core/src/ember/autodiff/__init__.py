"""Reverse-mode autodiff: the graph, grad mode, and the functional API."""

from .api import backward, grad, value_and_grad
from .mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

__all__ = [
    "backward",
    "grad",
    "value_and_grad",
    "no_grad",
    "enable_grad",
    "is_grad_enabled",
    "set_grad_enabled",
]

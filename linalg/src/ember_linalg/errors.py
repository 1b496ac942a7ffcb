"""The error a factorization raises when its input has none (singular, not positive definite)."""

from __future__ import annotations

from ember.errors import InvalidArgumentError

__all__ = ["LinAlgError"]


class LinAlgError(InvalidArgumentError):
    """The matrix has no such factorization or the system no unique solution (a ValueError, as numpy's)."""

"""Grad mode: whether ops record a graph in this thread (``no_grad`` / ``enable_grad``)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import ArgumentTypeError

__all__ = ["no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled"]

F = TypeVar("F", bound=Callable[..., Any])


class _State(threading.local):
    enabled = True


_STATE = _State()


def is_grad_enabled() -> bool:
    """Whether ops in this thread record the autodiff graph."""
    return _STATE.enabled


class set_grad_enabled:
    """Context manager (and decorator) that sets grad mode, restoring it on exit."""

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool) and type(mode).__name__ != "bool_":
            raise ArgumentTypeError(f"set_grad_enabled: mode must be True or False, got {mode!r}")
        self.mode = bool(mode)
        self.prev: list[bool] = []

    def __enter__(self) -> None:
        self.prev.append(_STATE.enabled)
        _STATE.enabled = self.mode

    def __exit__(self, *exc: object) -> None:
        _STATE.enabled = self.prev.pop()

    def __call__(self, fn: F) -> F:
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


class no_grad(set_grad_enabled):
    """``with em.no_grad():`` ops inside record no graph (inference, optimizer updates)."""

    def __init__(self) -> None:
        super().__init__(False)


class enable_grad(set_grad_enabled):
    """``with em.enable_grad():`` re-enables recording inside a ``no_grad`` block."""

    def __init__(self) -> None:
        super().__init__(True)

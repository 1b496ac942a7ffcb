"""One CUDA stream per device, and a way to run ember's work on another one.

Each CUDA device gets its own stream when its backend starts; ember's kernels and copies are
queued on it, in order. ``with ember_cuda.use_stream(stream):`` queues the work of the block on
another CuPy stream (e.g. one you overlap with data loading) and restores ember's afterwards.
A stream is per thread, as in CuPy: work started from another thread uses that thread's stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ember.errors import ArgumentTypeError

from .runtime import cupy

__all__ = ["current_stream", "use_stream"]


def current_stream() -> Any:
    """The CuPy stream ember's CUDA work is queued on in this thread."""
    return cupy().cuda.get_current_stream()


@contextmanager
def use_stream(stream: Any) -> Iterator[Any]:
    """Queue ember's CUDA work inside the block on ``stream`` (a ``cupy.cuda.Stream``)."""
    cp = cupy()
    if not isinstance(stream, cp.cuda.Stream):
        raise ArgumentTypeError(
            f"use_stream(stream=...): expected a cupy.cuda.Stream, got {type(stream).__name__}; "
            "make one with cupy.cuda.Stream(non_blocking=True)"
        )
    previous = cp.cuda.get_current_stream()
    stream.use()
    try:
        yield stream
    finally:
        previous.use()  # explicitly: CuPy's ``with stream`` restores its own stack, not ember's stream

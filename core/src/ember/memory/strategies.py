"""The pool strategies' names and tunables, and how a request is rounded: :func:`size_class` (the
ladder of ``static``) and :func:`fine_size` (``exclusive`` and ``adaptive``), remembered per size."""

from __future__ import annotations

from typing import Any, TypeVar

from .. import config
from ..errors import InvalidArgumentError

__all__ = [
    "DEFAULT_CACHE_LIMIT", "STRATEGIES", "SMALL_LIMIT", "HEADROOM", "PAGE_SIZE", "size_class", "fine_size",
]  # fmt: skip

#: the type of a backend's raw buffer, which a pool hands out inside a Block
Raw = TypeVar("Raw")

#: free buffers a pool keeps for reuse, in bytes, unless the backend chooses another limit
DEFAULT_CACHE_LIMIT = 2 << 30

#: the pool strategies (module docstring); ``EMBER_MEMORY`` and ``Device(..., memory=)`` name one
STRATEGIES = config.MEMORY_STRATEGIES

#: adaptive: requests up to this many bytes are small (their own free lists)
SMALL_LIMIT = 1 << 20

#: adaptive: reserved memory may exceed the peak in use by this fraction before the pool reuses
#: larger buffers early or releases empty ones instead of allocating
HEADROOM = 0.04

#: adaptive with sub-allocation: the largest page small blocks are carved from (a quarter of it at most)
PAGE_SIZE = 2 << 20

#: adaptive: a size's free buffers are released once unused for this many acquires, at least
_MIN_IDLE = 4096


def size_class(nbytes: int) -> int:
    """The static ladder: a multiple of 16 for ``nbytes``, at most 25% (or 255 bytes) more.

    16-byte steps up to 256 bytes, 256-byte steps up to 64 KiB, then four classes per power of two.
    """
    n = max(int(nbytes), 1)
    if n <= 256:
        step = 16
    elif n <= 65536:
        step = 256
    else:
        step = (1 << (n - 1).bit_length()) >> 3  # an eighth of the next power of two
    return -(-n // step) * step


def fine_size(nbytes: int) -> int:
    """The adaptive and exclusive rounding: 16-byte steps up to 512 bytes, then 512-byte steps."""
    n = max(int(nbytes), 1)
    step = 16 if n <= 512 else 512
    return -(-n // step) * step


#: size_class / fine_size of the request sizes seen so far (a program asks for few distinct sizes; capped)
_CLASSES: dict[int, int] = {}
_FINE: dict[int, int] = {}
_CLASSES_MAX = 65536


def _class_of(nbytes: int) -> int:
    """:func:`size_class`, remembered in ``_CLASSES``."""
    size = size_class(nbytes)
    if len(_CLASSES) < _CLASSES_MAX and type(nbytes) is int and nbytes > 0:
        _CLASSES[nbytes] = size
    return size


def _fine_of(nbytes: int) -> int:
    """:func:`fine_size`, remembered in ``_FINE``."""
    size = fine_size(nbytes)
    if len(_FINE) < _CLASSES_MAX and type(nbytes) is int and nbytes > 0:
        _FINE[nbytes] = size
    return size


def _check_strategy(name: Any, what: str) -> str:
    if not isinstance(name, str) or name.strip().lower() not in STRATEGIES:
        raise InvalidArgumentError(f"{what}={name!r}: expected one of {', '.join(repr(s) for s in STRATEGIES)}")
    return name.strip().lower()

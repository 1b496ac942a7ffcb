"""Checks of a backend's GEMM tuner (an :class:`ember.tuning.GemmTuner` behind its ``tune``
module) that backends' own tuning tests share; each backend's test first stores a choice and
shows that it runs."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from ember.tuning import shape_class

from .checks import check

__all__ = ["check_torn_choice_is_not_tuned"]


def check_torn_choice_is_not_tuned(tune: ModuleType, rt: Any, dtype: str, M: int, N: int, K: int) -> None:
    """The stored choice for (``dtype``, the class of ``M``, ``N``, ``K``) on ``rt``, cut to 10
    bytes as by a crash mid-write, reads back as "not tuned" (None) instead of raising; ``tune``
    is the backend's module (``store_for``, ``_key``, ``forget``, ``lookup``)."""
    store = tune.store_for(rt)
    entry = store.path(tune._key(store, dtype, shape_class(M, N, K)))
    entry.write_bytes(entry.read_bytes()[:10])
    tune.forget(rt)
    got = tune.lookup(rt, dtype, M, N, K)
    tune.forget(rt)
    check(
        got is None,
        f"the stored {dtype} choice for M={M}, N={N}, K={K}, cut to 10 bytes, read back as {got!r}, not None "
        f"(not tuned); entry {entry}",
    )

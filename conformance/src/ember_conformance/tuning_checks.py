"""Checks of a backend's GEMM tuner (an :class:`ember.tuning.GemmTuner` behind its ``tune``
module) that backends' own tuning tests share; each backend's test first stores a choice and
shows that it runs."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from ember.tuning import shape_class

from .checks import check

__all__ = ["check_torn_choice_is_not_tuned", "check_layout_choice_runs"]


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


def check_layout_choice_runs(
    tune: ModuleType,
    rt: Any,
    plain: Any,
    for_tb: Any,
    product: Callable[[np.ndarray, np.ndarray, bool], np.ndarray],
    ran: Callable[[Any], bool],
    shape: tuple[int, int, int] = (40, 36, 72),
) -> None:
    """With ``plain`` stored for a float32 (M, K) @ (K, N) class and ``for_tb`` for its ``tB`` layout,
    a product with B a transposed view runs ``for_tb`` and a row-major one ``plain``, both matching
    numpy float64. ``product(a, b, b_transposed)`` runs one on the device (its kernels built anew)
    and returns the result; ``ran(config)`` says whether a kernel of that config ran."""
    m, k, n = shape
    tune.record(rt, "float32", shape_class(m, n, k), plain)
    tune.record(rt, "float32", shape_class(m, n, k, "tB"), for_tb)
    rng = np.random.default_rng(9)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    for transposed, config, other in ((True, for_tb, plain), (False, plain, None)):
        got = product(a, b, transposed)
        check(np.allclose(got, want, rtol=1e-4, atol=1e-4), f"B transposed={transposed}: wrong product")
        check(ran(config), f"B transposed={transposed}: {config} (stored for this layout) did not run")
        check(other is None or not ran(other), f"B transposed: the row-major class's {other} ran instead")

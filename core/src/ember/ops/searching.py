"""Searching and set functions of the Array API: ``searchsorted``, ``isin`` and the ``unique_*``
family, each a composite of sorting, gathering and comparison, so every backend has them.

``searchsorted`` and ``isin`` are ops a backend may implement natively. ``unique_values`` is an
op too; its result length depends on the data, so its composite (like ``nonzero``) reads one
mask back to the host. ``unique_counts``, ``unique_inverse`` and ``unique_all`` build on the
same sorted view. NaNs sort last and, as the standard says, every NaN is distinct.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..creation import full, zeros
from ..dispatch import apply, define
from ..dtypes import BOOL, COMPLEX, NUMERIC, bool_, int64, promote_types, scalar_dtype
from ..errors import InvalidArgumentError, ShapeError
from .elementwise import _reject, _tensor_arg, clip, isnan, logical_not, where
from .indexing import nonzero, take
from .linalg import argsort, sort
from .movement import concat, reshape
from .reduction import cumulative_sum

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = [
    "searchsorted", "isin", "unique_values", "unique_counts", "unique_inverse", "unique_all",
    "UniqueCountsResult", "UniqueInverseResult", "UniqueAllResult",
]  # fmt: skip


def _goes_right(side: str, probe: Tensor, value: Tensor) -> Tensor:
    """Whether the insertion point of ``value`` lies right of ``probe`` (NaN sorts last)."""
    if side == "left":
        out = probe < value
        if probe._dtype.kind == "f":
            out = out | (isnan(value) & logical_not(isnan(probe)))
    else:
        out = probe <= value
        if probe._dtype.kind == "f":
            out = out | isnan(value)
    return out


def _searchsorted(a: Tensor, v: Tensor, side: str) -> Tensor:
    # a vectorised binary search: every value halves its own [lo, hi) range per step
    n = a._shape[0]
    lo = zeros(v._shape, dtype=int64, device=v._device)
    if n == 0:
        return lo
    hi = full(v._shape, n, dtype=int64, device=v._device)
    for _ in range(n.bit_length()):
        mid = (lo + hi) // 2
        probe = take(a, clip(mid, 0, n - 1))
        active = lo < hi
        right = _goes_right(side, probe, v)
        lo = where(active & right, mid + 1, lo)
        hi = where(active & logical_not(right), mid, hi)
    return lo


SEARCHSORTED = define(
    "searchsorted",
    kind="other",
    native="searchsorted(a, v, *, side) -> handle  # a: sorted 1-D; int64 insertion points of v's shape",
    composite=_searchsorted,
    differentiable=False,
)


def _common(x1: Tensor, x2: Tensor, op: str) -> tuple[Tensor, Tensor]:
    if x1._dtype is not x2._dtype:
        dt = promote_types(x1._dtype, x2._dtype, op)
        x1, x2 = x1.astype(dt, copy=False), x2.astype(dt, copy=False)
    return x1, x2


def searchsorted(x1: Any, x2: Any, /, *, side: str = "left", sorter: Any = None) -> Tensor:
    """Indices where ``x2``'s values would be inserted into the sorted 1-D ``x1`` to keep it sorted.

    >>> import ember as em
    >>> em.searchsorted(em.tensor([1.0, 2.0, 4.0]), em.tensor([2.0, 3.0]), side="right").tolist()
    [2, 2]
    """
    if side not in ("left", "right"):
        raise InvalidArgumentError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    a = _tensor_arg(x1, "searchsorted")
    if a.ndim != 1:
        raise ShapeError(f"searchsorted: x1 must be 1-D (a sorted sequence), got shape {a._shape}")
    if isinstance(x2, (bool, int, float)):  # a Python scalar takes x1's dtype (weakly typed)
        v = full((), x2, dtype=scalar_dtype(a._dtype, x2, "searchsorted"), device=a._device)
    else:
        v = _tensor_arg(x2, "searchsorted", a)
    if a._dtype not in NUMERIC:
        raise _reject("searchsorted", NUMERIC, a._dtype)
    if sorter is not None:
        a = take(a, _tensor_arg(sorter, "searchsorted", a))
    a, v = _common(a, v, "searchsorted")
    return apply(SEARCHSORTED, (a, v), {"side": side}, v._shape, int64)


def _isin(x1: Tensor, x2: Tensor, invert: bool) -> Tensor:
    pool = sort(reshape(x2, (-1,)))
    n = pool._shape[0]
    if n == 0:
        found = full(x1._shape, False, dtype=bool_, device=x1._device)
    else:
        at = clip(searchsorted(pool, x1), 0, n - 1)
        found = take(pool, at) == x1
    return logical_not(found) if invert else found


ISIN = define(
    "isin",
    kind="other",
    native="isin(a, b, *, invert) -> handle  # bool of a's shape: a's element is among b's",
    composite=_isin,
    differentiable=False,
)


def isin(x1: Any, x2: Any, /, *, invert: bool = False) -> Tensor:
    """Whether each element of ``x1`` equals some element of ``x2`` (``invert``: does not)."""
    a = _tensor_arg(x1, "isin")
    b = _tensor_arg(x2, "isin", a)
    if a._dtype not in NUMERIC | BOOL:
        raise _reject("isin", NUMERIC | BOOL, a._dtype)
    a, b = _common(a, b, "isin")
    if a._dtype is bool_:  # sorting works on numbers
        a, b = a.astype("uint8"), b.astype("uint8")
    return apply(ISIN, (a, b), {"invert": bool(invert)}, a._shape, bool_)


# -- unique ---------------------------------------------------------------------------------


class UniqueCountsResult(NamedTuple):
    values: Tensor
    counts: Tensor


class UniqueInverseResult(NamedTuple):
    values: Tensor
    inverse_indices: Tensor


class UniqueAllResult(NamedTuple):
    values: Tensor
    indices: Tensor
    inverse_indices: Tensor
    counts: Tensor


def _starts(ordered: Tensor) -> Tensor:
    """Where a new value begins in a sorted 1-D tensor (each NaN begins its own)."""
    first = full((1,), True, dtype=bool_, device=ordered._device)
    if ordered._shape[0] < 2:
        return first[: ordered._shape[0]]
    return concat([first, ordered[1:] != ordered[:-1]])


def _unique_values(x: Tensor) -> Tensor:
    ordered = sort(reshape(x, (-1,)))
    if ordered._shape[0] == 0:
        return ordered
    return take(ordered, nonzero(_starts(ordered))[0])


UNIQUE_VALUES = define(
    "unique_values",
    kind="other",
    native="unique_values(a) -> handle  # sorted distinct values, 1-D; its length depends on the data",
    composite=_unique_values,
    differentiable=False,
)


def _checked(x: Any, op: str) -> Tensor:
    t = _tensor_arg(x, op)
    if t._dtype not in NUMERIC | BOOL | COMPLEX:
        raise _reject(op, NUMERIC | BOOL | COMPLEX, t._dtype)
    return t


def unique_values(x: Any, /) -> Tensor:
    """The distinct values of ``x``, sorted, as a 1-D tensor.

    >>> import ember as em
    >>> em.unique_values(em.tensor([3, 1, 3, 2])).tolist()
    [1, 2, 3]
    """
    t = _checked(x, "unique_values")
    return apply(UNIQUE_VALUES, (t,), {}, None if t.size else (0,), t._dtype)


def _unique_parts(x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """values, indices of first occurrences, inverse indices (x's shape), counts."""
    flat = reshape(x, (-1,))
    n = flat._shape[0]
    empty = zeros((0,), dtype=int64, device=x._device)
    if n == 0:
        return flat, empty, reshape(empty, x._shape), empty
    order = argsort(flat)  # stable: the first of equal values is its first occurrence
    ordered = take(flat, order)
    starts = _starts(ordered)
    where_starts = nonzero(starts)[0]
    values = take(ordered, where_starts)
    edges = concat([where_starts, full((1,), n, dtype=int64, device=x._device)])
    counts = edges[1:] - edges[:-1]
    group = cumulative_sum(starts.astype(int64)) - 1  # the distinct value at each sorted place
    inverse = reshape(take(group, argsort(order)), x._shape)
    return values, take(order, where_starts), inverse, counts


def unique_counts(x: Any, /) -> UniqueCountsResult:
    """The distinct values of ``x`` and how often each occurs."""
    values, _, _, counts = _unique_parts(_checked(x, "unique_counts"))
    return UniqueCountsResult(values, counts)


def unique_inverse(x: Any, /) -> UniqueInverseResult:
    """The distinct values of ``x`` and, for each element of ``x``, the index of its value."""
    values, _, inverse, _ = _unique_parts(_checked(x, "unique_inverse"))
    return UniqueInverseResult(values, inverse)


def unique_all(x: Any, /) -> UniqueAllResult:
    """Distinct values, the index of each one's first occurrence, inverse indices and counts."""
    return UniqueAllResult(*_unique_parts(_checked(x, "unique_all")))

"""The Dataset protocol and composable transforms (map, shuffle, split, window, concat).

A dataset is anything with ``__len__`` and ``__getitem__(i)``; items are numpy arrays, Python
numbers, or tuples/dicts of them. Transforms return new datasets and never copy the data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, EmberIndexError, InvalidArgumentError, MissingMethodError
from .loader import default_collate

__all__ = ["Dataset", "InMemoryDataset", "MappedDataset", "Subset", "ConcatDataset", "WindowDataset", "random_split"]


def _permutation(n: int, seed: int) -> np.ndarray:
    if isinstance(seed, bool) or not hasattr(seed, "__index__"):
        raise ArgumentTypeError(f"split/shuffle: seed must be an int (or None), got {seed!r} ({type(seed).__name__})")
    return np.random.default_rng(seed).permutation(n)


class Dataset:
    """Base class with the transforms; subclasses implement ``__len__`` and ``__getitem__``."""

    def __len__(self) -> int:
        raise MissingMethodError(f"{type(self).__name__} must implement __len__")

    def __getitem__(self, index: int) -> Any:
        raise MissingMethodError(f"{type(self).__name__} must implement __getitem__")

    def map(self, fn: Callable[[Any], Any]) -> MappedDataset:
        """Apply ``fn`` to every item when it is read."""
        return MappedDataset(self, fn)

    def shuffle(self, seed: int) -> Subset:
        """A fixed random order (the same for the same seed)."""
        return Subset(self, _permutation(len(self), seed))

    def split(self, *parts: float | int, seed: int | None = None) -> list[Subset]:
        """Split into consecutive parts given as fractions (summing to 1) or counts."""
        return random_split(self, parts, seed=seed)

    def window(self, size: int, stride: int = 1) -> WindowDataset:
        """Sliding windows of ``size`` consecutive items, ``stride`` apart."""
        return WindowDataset(self, size, stride)

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])

    def _check_index(self, index: int) -> int:
        n = len(self)
        if not isinstance(index, (int, np.integer)):
            raise ArgumentTypeError(f"{type(self).__name__}: index must be an int, got {type(index).__name__}")
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise EmberIndexError(f"{type(self).__name__}: index {index} out of range for {n} items")
        return i


class InMemoryDataset(Dataset):
    """Rows of equally long arrays: ``InMemoryDataset(x, y)`` yields ``(x[i], y[i])``.

    A dict of arrays yields dicts; a single array yields its rows.
    """

    def __init__(self, *arrays: Any, **named: Any) -> None:
        if arrays and named:
            raise ArgumentTypeError("InMemoryDataset: give arrays either positionally or by name, not both")
        if not arrays and not named:
            raise InvalidArgumentError("InMemoryDataset: needs at least one array")
        self.names = list(named) if named else None
        cols = [np.asarray(a) for a in (named.values() if named else arrays)]
        lengths = {len(c) for c in cols}
        if len(lengths) != 1:
            raise InvalidArgumentError(f"InMemoryDataset: arrays have different lengths {sorted(lengths)}")
        self.columns = cols

    def __len__(self) -> int:
        return len(self.columns[0])

    def __getitem__(self, index: int) -> Any:
        i = self._check_index(index)
        row = [c[i] for c in self.columns]
        if self.names is not None:
            return dict(zip(self.names, row))
        return row[0] if len(row) == 1 else tuple(row)


class MappedDataset(Dataset):
    def __init__(self, source: Any, fn: Callable[[Any], Any]) -> None:
        self.source = source
        self.fn = fn

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, index: int) -> Any:
        return self.fn(self.source[index])


class Subset(Dataset):
    """The items of ``source`` at ``indices``, in that order."""

    def __init__(self, source: Any, indices: Sequence[int] | np.ndarray) -> None:
        self.source = source
        raw = np.asarray(indices)
        if raw.size and raw.dtype.kind not in "iu":
            raise ArgumentTypeError(f"Subset: indices must be integers, got an array of {raw.dtype}")
        self.indices = raw.astype(np.int64)
        n = len(source)
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= n):
            raise EmberIndexError(f"Subset: indices out of range for a dataset of {n} items")

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Any:
        return self.source[int(self.indices[self._check_index(index)])]


class ConcatDataset(Dataset):
    def __init__(self, parts: Sequence[Any]) -> None:
        self.parts = list(parts)
        if not self.parts:
            raise InvalidArgumentError("ConcatDataset: parts is empty; give at least one dataset")
        for k, p in enumerate(self.parts):
            if not hasattr(p, "__len__") or not hasattr(p, "__getitem__"):
                raise ArgumentTypeError(f"ConcatDataset: part {k} ({type(p).__name__}) has no __len__ and __getitem__")
        self.offsets = np.cumsum([0] + [len(p) for p in self.parts])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, index: int) -> Any:
        i = self._check_index(index)
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1
        return self.parts[k][i - int(self.offsets[k])]


class WindowDataset(Dataset):
    """Item i is the stacked items ``source[i*stride : i*stride + size]``."""

    def __init__(self, source: Any, size: int, stride: int = 1) -> None:
        if size < 1 or stride < 1:
            raise InvalidArgumentError(f"window: size and stride must be >= 1, got size={size}, stride={stride}")
        self.source = source
        self.size = size
        self.stride = stride

    def __len__(self) -> int:
        n = len(self.source)
        return 0 if n < self.size else (n - self.size) // self.stride + 1

    def __getitem__(self, index: int) -> Any:
        start = self._check_index(index) * self.stride
        return default_collate([self.source[start + k] for k in range(self.size)], as_tensors=False)


def random_split(dataset: Any, parts: Sequence[float | int], seed: int | None = None) -> list[Subset]:
    """Split ``dataset`` into parts (fractions summing to 1, or counts), shuffled when ``seed`` is given."""
    n = len(dataset)
    if not parts:
        raise InvalidArgumentError("split: give at least one part")
    if all(isinstance(p, int) for p in parts):
        counts = [int(p) for p in parts]
        if sum(counts) != n:
            raise InvalidArgumentError(f"split: counts {counts} sum to {sum(counts)}, but the dataset has {n} items")
    else:
        fr = [float(p) for p in parts]
        if any(f < 0 for f in fr) or abs(sum(fr) - 1.0) > 1e-6:
            raise InvalidArgumentError(f"split: fractions {fr} must be non-negative and sum to 1")
        counts = [int(np.floor(f * n)) for f in fr]
        for k in range(n - sum(counts)):
            counts[k % len(counts)] += 1
    order = _permutation(n, seed) if seed is not None else np.arange(n)
    out, start = [], 0
    for c in counts:
        out.append(Subset(dataset, order[start : start + c]))
        start += c
    return out

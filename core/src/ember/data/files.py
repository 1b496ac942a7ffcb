"""Datasets read from files: CSV (standard library) and Parquet (pyarrow)."""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import DataError, EmberKeyError
from .dataset import Dataset

__all__ = ["CsvDataset", "ParquetDataset"]


def _as_list(cols: str | Sequence[str] | None) -> list[str]:
    if cols is None:
        return []
    return [cols] if isinstance(cols, str) else list(cols)


class _TableDataset(Dataset):
    """Numeric columns held in memory; item = (features, target) or features alone."""

    def __init__(self, columns: dict[str, np.ndarray], target: Any, features: Any, dtype: Any, source: str) -> None:
        targets = _as_list(target)
        names = list(columns)
        for c in targets + _as_list(features):
            if c not in columns:
                raise EmberKeyError(f"{source}: no column named {c!r}; the columns are {names}")
        feats = _as_list(features) or [c for c in names if c not in targets]
        if not feats:
            raise DataError(f"{source}: no feature columns left after taking the target {targets}")
        self.feature_names = feats
        self.target_names = targets
        self.features = np.stack([columns[c] for c in feats], axis=1).astype(dtype)
        if targets:
            t = np.stack([columns[c] for c in targets], axis=1)
            self.targets = t[:, 0] if len(targets) == 1 else t
            if np.issubdtype(self.targets.dtype, np.floating):
                self.targets = self.targets.astype(dtype)
        else:
            self.targets = None

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> Any:
        i = self._check_index(index)
        if self.targets is None:
            return self.features[i]
        return self.features[i], self.targets[i]


def _check_file(path: str | os.PathLike, kind: str) -> str:
    p = os.fspath(path)
    if not os.path.isfile(p):
        raise FileNotFoundError(f"{kind}: no file at {p!r}")
    return p


class CsvDataset(_TableDataset):
    """Numeric CSV with a header row; ``target`` names the label column(s).

    >>> # CsvDataset("houses.csv", target="price") yields (features float32[k], price)
    """

    def __init__(
        self,
        path: str | os.PathLike,
        target: str | Sequence[str] | None = None,
        features: Sequence[str] | None = None,
        dtype: Any = np.float32,
        delimiter: str = ",",
    ) -> None:
        p = _check_file(path, "CsvDataset")
        with open(p, newline="", encoding="utf-8") as f:
            reader = csv.reader(f, delimiter=delimiter)
            try:
                header = [h.strip() for h in next(reader)]
            except StopIteration:
                raise DataError(f"CsvDataset: {p!r} is empty; expected a header row") from None
            rows = []
            for lineno, row in enumerate(reader, start=2):
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != len(header):
                    raise DataError(f"CsvDataset: {p}:{lineno} has {len(row)} fields, the header has {len(header)}")
                try:
                    rows.append([float(c) for c in row])
                except ValueError:
                    bad = next(c for c in row if not _is_number(c))
                    col = header[row.index(bad)]
                    raise DataError(f"CsvDataset: {p}:{lineno} column {col!r} holds {bad!r}, not a number") from None
        data = np.asarray(rows, dtype=np.float64).reshape(-1, len(header))
        columns = {h: data[:, k] for k, h in enumerate(header)}
        super().__init__(columns, target, features, dtype, "CsvDataset")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class ParquetDataset(_TableDataset):
    """Numeric columns of a Parquet file (needs pyarrow)."""

    def __init__(
        self,
        path: str | os.PathLike,
        target: str | Sequence[str] | None = None,
        features: Sequence[str] | None = None,
        dtype: Any = np.float32,
    ) -> None:
        p = _check_file(path, "ParquetDataset")
        try:
            import pyarrow.parquet as pq  # optional and heavy: only ParquetDataset needs it
        except ImportError:
            raise ImportError("ParquetDataset needs pyarrow: pip install pyarrow") from None
        table = pq.read_table(p)
        columns = {}
        for name in table.column_names:
            col = table.column(name).to_numpy(zero_copy_only=False)
            if col.dtype.kind not in "biuf":
                if name in _as_list(target) + _as_list(features):
                    raise DataError(f"ParquetDataset: column {name!r} has non-numeric type {col.dtype}")
                continue
            columns[name] = col
        super().__init__(columns, target, features, dtype, "ParquetDataset")

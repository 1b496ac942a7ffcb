"""Datasets read from files: CSV (standard library) and Parquet (pyarrow).

Bad data is refused, never guessed at: errors name the file, the row (and the file line for CSV)
and the column. A missing value is an error unless ``nulls="nan"`` asks for NaN in its place.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentTypeError, DataError, DataFileNotFoundError, EmberKeyError, MissingDependencyError
from .dataset import Dataset

__all__ = ["CsvDataset", "ParquetDataset"]

_NULLS = ("error", "nan")


def _as_list(cols: str | Sequence[str] | None, kind: str, argument: str) -> list[str]:
    if cols is None:
        return []
    if isinstance(cols, str):
        return [cols]
    out = list(cols)
    for c in out:
        if not isinstance(c, str):
            raise ArgumentTypeError(f"{kind}: {argument} must be a column name or a list of names, got {cols!r}")
    return out


def _check_nulls(nulls: str, kind: str) -> None:
    if nulls not in _NULLS:
        raise DataError(
            f"{kind}: nulls must be 'error' (refuse missing values) or 'nan' (read them as NaN), got {nulls!r}"
        )


class _TableDataset(Dataset):
    """Numeric columns held in memory; item = (features, target) or features alone."""

    def __init__(
        self, columns: dict[str, np.ndarray], targets: list[str], features: list[str], dtype: Any, source: str
    ) -> None:
        names = list(columns)
        for c in targets + features:
            if c not in columns:
                raise EmberKeyError(f"{source}: no column named {c!r}; the columns are {names}")
        feats = features or [c for c in names if c not in targets]
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
    try:
        p = os.fspath(path)
    except TypeError:
        raise ArgumentTypeError(f"{kind}: path must be a str or os.PathLike, got {type(path).__name__}") from None
    if not os.path.isfile(p):
        raise DataFileNotFoundError(f"{kind}: no file at {p!r}; check the path (relative to {os.getcwd()!r})")
    return p


def _read_text(p: str, encoding: str) -> str:
    with open(p, "rb") as f:
        raw = f.read()
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DataError(
            f"CsvDataset: {p}:{line}: byte {raw[exc.start : exc.start + 1]!r} at character {col} is not valid "
            f"{encoding} ({exc.reason}); re-save the file as {encoding} or pass encoding= (e.g. 'latin-1')"
        ) from None


class CsvDataset(_TableDataset):
    """Numeric CSV with a header row; ``target`` names the label column(s).

    ``nulls="nan"`` reads empty cells as NaN; the default refuses them, naming the file line and
    column. A header that names a column twice is refused.

    >>> # CsvDataset("houses.csv", target="price") yields (features float32[k], price)
    """

    def __init__(
        self,
        path: str | os.PathLike,
        target: str | Sequence[str] | None = None,
        features: Sequence[str] | None = None,
        dtype: Any = np.float32,
        delimiter: str = ",",
        *,
        nulls: str = "error",
        encoding: str = "utf-8",
    ) -> None:
        kind = "CsvDataset"
        p = _check_file(path, kind)
        _check_nulls(nulls, kind)
        targets, feats = _as_list(target, kind, "target"), _as_list(features, kind, "features")
        reader = csv.reader(io.StringIO(_read_text(p, encoding), newline=""), delimiter=delimiter)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise DataError(f"CsvDataset: {p!r} is empty; expected a header row") from None
        except csv.Error as exc:
            raise DataError(f"CsvDataset: {p}:1 (the header) is not valid CSV: {exc}") from None
        seen: dict[str, int] = {}
        for k, h in enumerate(header):
            if not h:
                raise DataError(f"CsvDataset: {p}:1 column {k + 1} has an empty name; every column needs a name")
            if h in seen:
                raise DataError(
                    f"CsvDataset: {p}:1 names column {h!r} twice (columns {seen[h] + 1} and {k + 1}); "
                    f"rename one so that each column is known by one name"
                )
            seen[h] = k
        rows = []
        lineno = 1
        try:
            for row in reader:
                lineno = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                if len(row) != len(header):
                    raise DataError(
                        f"CsvDataset: {p}:{lineno} (row {len(rows) + 1}) has {len(row)} fields, "
                        f"the header has {len(header)}"
                    )
                rows.append([_cell(c, p, lineno, len(rows) + 1, header[k], nulls) for k, c in enumerate(row)])
        except csv.Error as exc:
            raise DataError(f"CsvDataset: {p}:{reader.line_num} is not valid CSV: {exc}") from None
        data = np.asarray(rows, dtype=np.float64).reshape(-1, len(header))
        columns = {h: data[:, k] for k, h in enumerate(header)}
        super().__init__(columns, targets, feats, dtype, f"CsvDataset({p!r})")


def _cell(text: str, p: str, lineno: int, row: int, column: str, nulls: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    if not text.strip():
        if nulls == "nan":
            return float("nan")
        raise DataError(
            f"CsvDataset: {p}:{lineno} (row {row}) column {column!r} is empty; fill it in, or pass "
            f"nulls='nan' to read missing values as NaN"
        )
    raise DataError(f"CsvDataset: {p}:{lineno} (row {row}) column {column!r} holds {text!r}, not a number")


class ParquetDataset(_TableDataset):
    """Numeric (bool, integer, float) columns of a Parquet file (needs pyarrow).

    A column of another type (strings, dates, lists) is refused if the dataset would use it, unless
    ``unsupported="skip"`` leaves such columns out (or name the columns you want with ``features=``).
    Nulls are refused unless ``nulls="nan"``.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        target: str | Sequence[str] | None = None,
        features: Sequence[str] | None = None,
        dtype: Any = np.float32,
        *,
        nulls: str = "error",
        unsupported: str = "error",
    ) -> None:
        kind = "ParquetDataset"
        p = _check_file(path, kind)
        _check_nulls(nulls, kind)
        if unsupported not in ("error", "skip"):
            raise DataError(
                f"ParquetDataset: unsupported must be 'error' (refuse non-numeric columns) or 'skip' "
                f"(leave them out of the features), got {unsupported!r}"
            )
        targets, feats = _as_list(target, kind, "target"), _as_list(features, kind, "features")
        try:
            import pyarrow as pa  # optional and heavy: only ParquetDataset needs it
            import pyarrow.parquet as pq
        except ImportError:
            raise MissingDependencyError(
                "ParquetDataset needs pyarrow: pip install pyarrow (or ember[parquet])"
            ) from None
        try:
            table = pq.read_table(p)
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"ParquetDataset: {p!r} is not a readable Parquet file: {exc}") from None
        wanted = set(targets + feats) if feats else None  # None: every column but the targets is a feature
        columns = {}
        for name in table.column_names:
            used = wanted is None or name in wanted
            if not used:
                continue
            chunked = table.column(name)
            typ = chunked.type
            if not (pa.types.is_boolean(typ) or pa.types.is_integer(typ) or pa.types.is_floating(typ)):
                if unsupported == "skip" and name not in targets + feats:
                    continue
                raise DataError(
                    f"ParquetDataset: {p!r} column {name!r} has type {typ}, which is not numeric "
                    f"(bool, integer or float); list the numeric columns with features=[...] or pass "
                    f"unsupported='skip' to leave it out"
                )
            if chunked.null_count:
                first = _first_null(chunked)
                if nulls == "error":
                    raise DataError(
                        f"ParquetDataset: {p!r} column {name!r} has {chunked.null_count} null(s), the first at "
                        f"row {first}; fill them in, or pass nulls='nan' to read them as NaN"
                    )
                col = chunked.cast(pa.float64()).to_numpy(zero_copy_only=False)
            else:
                col = chunked.to_numpy(zero_copy_only=False)
            columns[name] = col
        super().__init__(columns, targets, feats, dtype, f"ParquetDataset({p!r})")


def _first_null(chunked: Any) -> int:
    offset = 0
    for chunk in chunked.chunks:
        if chunk.null_count:
            mask = chunk.is_null().to_numpy(zero_copy_only=False)
            return offset + int(np.flatnonzero(mask)[0])
        offset += len(chunk)
    return -1

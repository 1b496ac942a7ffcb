"""The loaders refuse bad data with ember errors naming file, row and column; DataLoader's
``timeout`` and Ctrl-C stop a run promptly."""

from __future__ import annotations

import _thread
import signal
import threading
import time

import numpy as np
import pytest

from ember.data import CsvDataset, DataLoader, InMemoryDataset, ParquetDataset
from ember.errors import DataError, DataFileNotFoundError, EmberError, LoaderTimeoutError


class _Blocking:
    """Items 0..n-1; item ``block_at`` waits on ``release`` (a dataset stuck on I/O)."""

    def __init__(self, n: int = 8, block_at: int = 3) -> None:
        self.n, self.block_at = n, block_at
        self.release = threading.Event()
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        if i == self.block_at:
            self.release.wait(30)
        self.loaded.append(i)
        return np.array([i], dtype=np.float32)


def _loader_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("ember-dataloader")]


@pytest.mark.parametrize("num_workers", [1, 3])
def test_timeout_names_the_dataset_index(num_workers):
    ds = _Blocking()
    loader = DataLoader(ds, batch_size=2, num_workers=num_workers, timeout=0.3)
    got = []
    t0 = time.monotonic()
    with pytest.raises(LoaderTimeoutError, match=r"timeout=0\.3.*batch 1 .*dataset index 3 \(for") as info:
        for batch in loader:
            got.append(batch.numpy().ravel().tolist())
    assert time.monotonic() - t0 < 3
    assert got == [[0.0, 1.0]]
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, EmberError)
    ds.release.set()
    deadline = time.monotonic() + 3
    while _loader_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _loader_threads()
    assert max(ds.loaded) < 6  # the stopped loader loaded nothing past the batch it was on


def test_timeout_none_waits_and_a_slow_item_within_the_timeout_is_fine():
    class Slow(_Blocking):
        def __getitem__(self, i):
            time.sleep(0.05)
            return np.array([i], dtype=np.float32)

    out = [b.numpy().ravel().tolist() for b in DataLoader(Slow(4), batch_size=2, timeout=2.0)]
    assert out == [[0.0, 1.0], [2.0, 3.0]]
    assert [len(b) for b in DataLoader(Slow(4), batch_size=2, timeout=None)] == [2, 2]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"timeout": 0}, "timeout must be > 0"),
        ({"timeout": -1.0}, "timeout must be > 0"),
        ({"timeout": "5"}, "timeout must be a number"),
        ({"timeout": 1.0, "num_workers": 0}, "timeout=1.0 needs worker threads"),
        ({"timeout": 1.0, "prefetch": 0}, "timeout=1.0 needs worker threads"),
    ],
)
def test_timeout_argument_is_checked(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match) as info:
        DataLoader(InMemoryDataset(np.zeros(4)), **kwargs)
    assert isinstance(info.value, EmberError)


@pytest.mark.parametrize("num_workers", [1, 3])
def test_ctrl_c_stops_the_run_and_its_threads(num_workers):
    # interrupt_main runs the SIGINT handler, and only Python's default raises KeyboardInterrupt; a
    # process started in the background by a shell inherits SIGINT ignored (POSIX), so set it here
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_run(num_workers)
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_run(num_workers: int) -> None:
    ds = _Blocking(n=8, block_at=2)
    loader = DataLoader(ds, batch_size=2, num_workers=num_workers)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    t0 = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in loader:
                pass
        elapsed = time.monotonic() - t0
    finally:
        timer.cancel()
        ds.release.set()
    assert elapsed < 2, elapsed
    deadline = time.monotonic() + 2
    while _loader_threads() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _loader_threads()
    assert time.monotonic() - t0 < 5
    assert max(ds.loaded, default=0) < 6


# -- CSV -------------------------------------------------------------------------------------
def _csv(tmp_path, text: str | bytes, name: str = "d.csv"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text, match",
    [
        ("a,b,a\n1,2,3\n", r"d\.csv:1 names column 'a' twice \(columns 1 and 3\)"),
        ("a,,c\n1,2,3\n", r"d\.csv:1 column 2 has an empty name"),
        ("a,b\n1,2\n3,x\n", r"d\.csv:3 \(row 2\) column 'b' holds 'x', not a number"),
        ("a,b\n1,2\n3,\n", r"d\.csv:3 \(row 2\) column 'b' is empty.*nulls='nan'"),
        ("a,b\n1,2\n3,4,5\n", r"d\.csv:3 \(row 2\) has 3 fields, the header has 2"),
        ("", r"d\.csv' is empty; expected a header row"),
    ],
)
def test_csv_errors_name_file_row_and_column(tmp_path, text, match):
    with pytest.raises(DataError, match=match):
        CsvDataset(_csv(tmp_path, text))


def test_csv_nulls_nan_reads_empty_cells_as_nan(tmp_path):
    ds = CsvDataset(_csv(tmp_path, "a,b\n1,\n,4\n"), nulls="nan")
    np.testing.assert_array_equal(ds.features, np.array([[1, np.nan], [np.nan, 4]], dtype=np.float32))
    with pytest.raises(DataError, match="nulls must be 'error'"):
        CsvDataset(_csv(tmp_path, "a\n1\n"), nulls="zero")


def test_csv_non_utf8_byte_names_file_and_line(tmp_path):
    p = _csv(tmp_path, b"a,b\n1,2\n3,\xff4\n")
    with pytest.raises(DataError, match=r"d\.csv:3: byte b'\\xff' at character 3 is not valid utf-8"):
        CsvDataset(p)
    assert CsvDataset(_csv(tmp_path, b"a,b\n1,2\n", "ok.csv"), encoding="latin-1").features.shape == (1, 2)


def test_missing_file_is_an_ember_error(tmp_path):
    with pytest.raises(DataFileNotFoundError, match=r"CsvDataset: no file at .*nope\.csv") as info:
        CsvDataset(tmp_path / "nope.csv")
    assert isinstance(info.value, FileNotFoundError)


# -- Parquet ---------------------------------------------------------------------------------
@pytest.fixture
def pq():
    pytest.importorskip("pyarrow", reason="pyarrow is optional; ParquetDataset needs it")
    import pyarrow.parquet as pq

    return pq


def test_parquet_nulls_are_refused_or_read_as_nan(tmp_path, pq):
    import pyarrow as pa

    pq.write_table(pa.table({"x": [1.0, 2.0, 3.0], "n": [1, None, 3], "y": [0, 1, 0]}), tmp_path / "t.parquet")
    with pytest.raises(DataError, match=r"t\.parquet' column 'n' has 1 null\(s\), the first at row 1.*nulls='nan'"):
        ParquetDataset(tmp_path / "t.parquet", target="y")
    ds = ParquetDataset(tmp_path / "t.parquet", target="y", nulls="nan")
    np.testing.assert_array_equal(ds.features[:, 1], np.array([1, np.nan, 3], dtype=np.float32))
    assert ParquetDataset(tmp_path / "t.parquet", target="y", features=["x"]).features.shape == (3, 1)


def test_parquet_unsupported_column_types(tmp_path, pq):
    import pyarrow as pa

    pq.write_table(pa.table({"x": [1.0, 2.0], "when": pa.array([1, 2], pa.date32())}), tmp_path / "t.parquet")
    with pytest.raises(DataError, match=r"column 'when' has type date32\[day\], which is not numeric"):
        ParquetDataset(tmp_path / "t.parquet")
    assert ParquetDataset(tmp_path / "t.parquet", unsupported="skip").feature_names == ["x"]
    assert ParquetDataset(tmp_path / "t.parquet", features=["x"]).feature_names == ["x"]
    with pytest.raises(DataError, match="column 'when' has type"):
        ParquetDataset(tmp_path / "t.parquet", features=["x", "when"], unsupported="skip")


def test_corrupt_parquet_names_the_file(tmp_path, pq):
    p = tmp_path / "bad.parquet"
    p.write_bytes(b"PAR1 this is not parquet at all PAR1")
    with pytest.raises(DataError, match=r"ParquetDataset: '.*bad\.parquet' is not a readable Parquet file") as info:
        ParquetDataset(p)
    assert isinstance(info.value, ValueError) and type(info.value).__module__ == "ember.errors"

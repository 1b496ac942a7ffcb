"""ember.data: datasets, transforms, files and the DataLoader."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.data import CsvDataset, DataLoader, InMemoryDataset, ParquetDataset


def make(n=10):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n) % 3
    return x, y, InMemoryDataset(x, y)


def test_in_memory_items_and_named_columns():
    x, y, ds = make()
    assert len(ds) == 10
    xi, yi = ds[3]
    np.testing.assert_array_equal(xi, x[3])
    assert yi == y[3]
    named = InMemoryDataset(features=x, label=y)
    assert set(named[0]) == {"features", "label"}
    with pytest.raises(ValueError, match="different lengths"):
        InMemoryDataset(x, y[:5])
    with pytest.raises(IndexError, match="out of range"):
        ds[10]


def test_transforms_map_shuffle_split_window():
    x, y, ds = make()
    doubled = ds.map(lambda item: (item[0] * 2, item[1]))
    np.testing.assert_array_equal(doubled[1][0], x[1] * 2)
    sh = ds.shuffle(seed=3)
    order = [int(sh[i][0][0]) // 2 for i in range(10)]
    assert sorted(order) == list(range(10)) and order != list(range(10))
    assert [int(ds.shuffle(seed=3)[i][0][0]) // 2 for i in range(10)] == order
    train, valid = ds.split(0.8, 0.2, seed=1)
    assert len(train) == 8 and len(valid) == 2
    ids = {int(train[i][0][0]) for i in range(8)} | {int(valid[i][0][0]) for i in range(2)}
    assert len(ids) == 10
    with pytest.raises(ValueError, match="sum to 1"):
        ds.split(0.5, 0.2)
    w = InMemoryDataset(np.arange(10.0)).window(4, stride=3)
    assert len(w) == 3
    np.testing.assert_array_equal(w[2], [6.0, 7.0, 8.0, 9.0])


def test_loader_batches_and_drop_last():
    x, y, ds = make(10)
    batches = list(DataLoader(ds, batch_size=4))
    assert [b[0].shape for b in batches] == [(4, 2), (4, 2), (2, 2)]
    assert batches[0][0].dtype is em.float32 and batches[0][1].dtype is em.int64
    np.testing.assert_array_equal(np.concatenate([b[0].numpy() for b in batches]), x)
    assert len(list(DataLoader(ds, batch_size=4, drop_last=True))) == 2


def test_shuffle_is_seeded_per_epoch_and_covers_everything():
    _, _, ds = make(12)
    loader = DataLoader(ds, batch_size=5, shuffle=True, seed=7)
    e0 = np.concatenate([b[1].numpy() * 0 + b[0].numpy()[:, 0] for b in loader])
    e1 = np.concatenate([b[0].numpy()[:, 0] for b in loader])
    assert sorted(e0.tolist()) == sorted(e1.tolist()) and not np.array_equal(e0, e1)
    again = DataLoader(ds, batch_size=5, shuffle=True, seed=7)
    np.testing.assert_array_equal(np.concatenate([b[0].numpy()[:, 0] for b in again]), e0)


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_resume_mid_epoch_gives_the_remaining_batches(workers):
    _, _, ds = make(20)
    full = [b[0].numpy() for b in DataLoader(ds, batch_size=3, shuffle=True, seed=1, num_workers=workers)]
    loader = DataLoader(ds, batch_size=3, shuffle=True, seed=1, num_workers=workers)
    it = iter(loader)
    seen = [next(it)[0].numpy() for _ in range(2)]
    state = loader.state_dict()
    it.close()
    resumed = DataLoader(ds, batch_size=3, shuffle=True, seed=1, num_workers=workers)
    resumed.load_state_dict(state)
    rest = [b[0].numpy() for b in resumed]
    for a, b in zip(seen + rest, full):
        np.testing.assert_array_equal(a, b)
    assert len(seen + rest) == len(full)


def test_worker_errors_reach_the_consumer():
    bad = InMemoryDataset(np.arange(6.0)).map(lambda v: v if v < 4 else 1 / 0)
    with pytest.raises(ZeroDivisionError):
        list(DataLoader(bad, batch_size=2, num_workers=2))


def test_csv_dataset(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("a,b,price\n1,2,10.5\n3,4,20\n\n5,6,30\n")
    ds = CsvDataset(p, target="price")
    assert len(ds) == 3 and ds.feature_names == ["a", "b"]
    f, t = ds[2]
    np.testing.assert_array_equal(f, [5.0, 6.0])
    assert f.dtype == np.float32 and t == pytest.approx(30.0)
    p.write_text("a,b\n1,x\n")
    with pytest.raises(ValueError, match="column 'b' holds 'x'"):
        CsvDataset(p)
    with pytest.raises(KeyError, match="no column named 'zz'"):
        CsvDataset(_write(tmp_path), target="zz")
    with pytest.raises(FileNotFoundError):
        CsvDataset(tmp_path / "missing.csv")


def _write(tmp_path):
    q = tmp_path / "ok.csv"
    q.write_text("a,b\n1,2\n")
    return q


def test_parquet_dataset(tmp_path):
    pa = pytest.importorskip("pyarrow", reason="pyarrow is optional; ParquetDataset needs it")
    import pyarrow.parquet as pq

    table = pa.table({"x1": [1.0, 2.0, 3.0], "x2": [4, 5, 6], "y": [0, 1, 0], "name": ["a", "b", "c"]})
    pq.write_table(table, tmp_path / "t.parquet")
    with pytest.raises(em.errors.DataError, match="column 'name' has type string"):
        ParquetDataset(tmp_path / "t.parquet", target="y")
    ds = ParquetDataset(tmp_path / "t.parquet", target="y", unsupported="skip")
    assert ds.feature_names == ["x1", "x2"]
    f, t = ds[1]
    np.testing.assert_array_equal(f, [2.0, 5.0])
    assert t == 1

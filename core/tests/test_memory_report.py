"""The MemoryReport Learner callback (memory.csv, memory.png) and ``ember memory-report``."""

from __future__ import annotations

import csv
import sys

import numpy as np
import pytest

import ember as em
from ember import cli
from ember.data import DataLoader, InMemoryDataset
from ember.errors import MissingDependencyError
from ember.train import LearnerBuilder, MemoryReport
from ember.train.memory_report import FIELDS, plot_memory, read_memory_csv

nn = em.nn
optim = em.optim


def _pooled_device() -> em.Device:
    for dev in em.Device.available():
        if dev.kind in ("opencl", "wgpu", "cuda"):
            return dev
    pytest.skip("no pooled device (opencl, wgpu or cuda) here: the CPU backend does not count its memory")


def _fit(dev: em.Device, tmp_path, report: MemoryReport, seen: list[int]) -> tuple[int, dict]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((96, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    ad = dev.autodiff()
    model = nn.Sequential(nn.Linear(4, 32, device=ad), nn.ReLU(), nn.Linear(32, 2, device=ad))
    learner = (
        LearnerBuilder(model)
        .optimizer(lambda p: optim.SGD(p, lr=0.1))
        .log_dir(tmp_path)
        .callback(report)
        .callback(lambda learner: seen.append(dev.memory_stats()["in_use_bytes"]))
        .epochs(2)
        .progress(False)
        .build()
    )
    learner.fit(DataLoader(InMemoryDataset(x, y), batch_size=16))
    return learner.step, dev.memory_stats()


def test_callback_writes_one_row_per_step_and_the_plot(tmp_path):
    dev = _pooled_device()
    report = MemoryReport()
    seen: list[int] = []
    steps, after = _fit(dev, tmp_path, report, seen)
    with open(tmp_path / "memory.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == FIELDS and len(rows) == steps == 12
    assert [int(r["step"]) for r in rows] == list(range(1, 13))
    for r in rows:
        assert int(r["reserved_bytes"]) >= int(r["in_use_bytes"]) > 0
        assert int(r["peak_in_use_bytes"]) >= int(r["in_use_bytes"])
    # the CSV holds what memory_stats() said at each step (read by a second callback, after the report)
    assert [int(r["in_use_bytes"]) for r in rows] == seen
    assert int(rows[-1]["peak_in_use_bytes"]) <= after["peak_in_use_bytes"]
    pytest.importorskip("matplotlib", reason="the PNG plot needs matplotlib")
    assert (tmp_path / "memory.png").stat().st_size > 1000


def _write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)


def test_cli_plots_a_csv_and_prints_the_peaks(tmp_path, capsys):
    mib = 2**20
    rows = [
        {"step": i, "seconds": i * 0.5, "reserved_bytes": (10 + i) * mib, "in_use_bytes": (8 + i) * mib,
         "peak_reserved_bytes": (11 + i) * mib, "peak_in_use_bytes": (9 + i) * mib}
        for i in range(1, 6)
    ]  # fmt: skip
    _write_csv(tmp_path / "memory.csv", rows)
    assert read_memory_csv(tmp_path)[2]["in_use_bytes"] == 11 * mib
    pytest.importorskip("matplotlib", reason="the PNG plot needs matplotlib")
    assert cli.main(["memory-report", str(tmp_path), "-o", str(tmp_path / "out.png")]) == 0
    out = capsys.readouterr().out
    assert "5 steps: peak reserved 16.0 MiB, peak in use 14.0 MiB (1.143x)" in out
    assert "13.0 MiB in use" in out and (tmp_path / "out.png").stat().st_size > 1000


def test_cli_says_what_is_missing(tmp_path, capsys):
    assert cli.main(["memory-report", str(tmp_path)]) == 1
    assert "MemoryReport" in capsys.readouterr().out
    (tmp_path / "memory.csv").write_text("a,b\n1,2\n")
    assert cli.main(["memory-report", str(tmp_path)]) == 1
    assert "lacks the column(s) step, reserved_bytes, in_use_bytes" in capsys.readouterr().out


def test_plot_without_matplotlib_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(MissingDependencyError, match=r'pip install "ember\[train\]"'):
        plot_memory([], tmp_path / "m.png")

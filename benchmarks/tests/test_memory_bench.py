"""benchmarks/memory.py: it refuses a device without a pool, and on a pooled device (opencl, wgpu) it
measures every strategy of W3 and W4 at smoke-test sizes (skipped, with the reason, where there is none)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ember as em
from benchmarks import memory as bench


def test_a_device_without_a_pool_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--device", "checked:0", "--quick"])  # numpy underneath, no pool, not the CPU backend
    assert "no ember buffer pool" in capsys.readouterr().err


def test_the_cpu_backend_reports_the_host_peak_of_a_step(tmp_path: Path) -> None:
    """No pool on cpu: one row per workload, numpy's peak (tracemalloc) above what was there before."""
    out = tmp_path / "cpu.json"
    assert bench.main(["W4", "--device", "cpu", "--quick", "--steps", "2", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["results"]["W4"]
    assert row["strategy"] == "host (tracemalloc)" and row["peak_reserved_bytes"] is None
    assert row["peak_in_use_bytes"] > 0


def test_pool_micro_times_hits_and_misses() -> None:
    micro = bench.pool_micro(repeats=1, n=10)
    assert set(micro) == {"hit_ns", "miss_ns", "hit_ns_paged", "miss_ns_paged"}
    assert all(v > 0 for v in micro.values())


def test_h200_mode_gathers_each_device_into_one_report(tmp_path: Path) -> None:
    """--h200 with --devices (here the CPU backend, so that it runs anywhere): a subprocess per device,
    its JSON, and memory.md with its table."""
    code = bench.main(
        ["W4", "--h200", "--devices", "cpu", "--quick", "--steps", "2", "--rounds", "1", "--out", str(tmp_path)]
    )
    assert code == 0
    assert json.loads((tmp_path / "memory-cpu.json").read_text())["results"]["W4"]
    report = (tmp_path / "memory.md").read_text()
    assert "cpu" in report and "| W4 | host (tracemalloc) |" in report
    assert (tmp_path / "memory-log.txt").exists()


def test_every_strategy_is_measured(tmp_path: Path) -> None:
    pooled = [d for d in em.Device.available() if d.kind in ("opencl", "wgpu")]
    if not pooled:
        pytest.skip("no opencl or wgpu device here (PoCL / lavapipe): nothing pools memory to measure")
    out = tmp_path / "mem.json"
    assert bench.main(["--device", str(pooled[0]), "--quick", "--steps", "2", "--rounds", "1", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"W3", "W4"}
    for rows in results.values():
        by = {r["strategy"]: r for r in rows}
        assert set(by) == {"adaptive", "static", "exclusive"}
        assert by["exclusive"]["peak_reserved_bytes"] == by["exclusive"]["peak_in_use_bytes"] > 0
        for r in rows:
            assert r["peak_reserved_bytes"] >= r["peak_in_use_bytes"] > 0
        assert by["adaptive"]["peak_reserved_bytes"] <= 1.05 * by["adaptive"]["peak_in_use_bytes"]

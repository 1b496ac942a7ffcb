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
        bench.main(["--device", "cpu", "--quick"])
    assert "no ember buffer pool" in capsys.readouterr().err


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

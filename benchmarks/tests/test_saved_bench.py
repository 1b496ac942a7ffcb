"""benchmarks/saved.py: on a pooled device it lists W3's and W4's saved tensors at backward() and each
vjp rule's peak, beside torch's saved tensors where torch is installed (skipped, with the reason, where
there is no pooled device)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import ember as em
from benchmarks import saved as bench


def test_saved_tensors_are_listed_op_by_op(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pooled = [d for d in em.Device.available() if d.kind in ("opencl", "wgpu")]
    if not pooled:
        pytest.skip("no opencl or wgpu device here (PoCL / lavapipe): nothing pools memory to measure")
    out = tmp_path / "saved.json"
    assert bench.main(["--device", str(pooled[0]), "--sizes", "quick", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert set(results) == {"W3", "W4"}
    for row in results.values():
        ours = row["ember"]
        assert ours["saved"] and ours["vjp"]
        assert ours["step_peak_in_use"] >= ours["in_use_at_backward"] > 0
        if row["torch"] is not None:  # torch installed: its saved set and its step's peak beside ember's
            assert bench._total(row["torch"]["saved"]) > 0 and "step_peak_above_start" in row["torch"]
    assert "| ember vjp rule |" in capsys.readouterr().out

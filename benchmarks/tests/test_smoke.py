"""The runner itself, in CI: ``--quick`` W1/W5/W6 on cpu against numpy, checking the structure
of the report (never the times)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ember as em
from benchmarks import Case, Settings, Unavailable, compare
from benchmarks import runner as runner_mod
from benchmarks.peers import Impl

REPO = Path(__file__).resolve().parents[2]
UNITS = {"W1": "µs/op", "W5": "FLOP/s", "W6": "B/s"}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, Any], str]:
    out = tmp_path_factory.mktemp("bench")
    js, md = out / "report.json", out / "report.md"
    cmd = [sys.executable, "-m", "benchmarks", "W1", "w5", "W6", "--quick", "--device", "cpu", "--peers", "numpy"]
    proc = subprocess.run(
        [*cmd, "--json", str(js), "--markdown", str(md)], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout, json.loads(js.read_text()), md.read_text()


def test_report_records_machine_versions_and_settings(quick_run: tuple[str, dict[str, Any], str]) -> None:
    _, report, _ = quick_run
    meta = report["meta"]
    for key in ("date", "machine", "os", "python", "versions", "ember_device", "ember_describe", "git"):
        assert key in meta
    assert meta["machine"]["cpu"] and meta["machine"]["cores"] >= 1
    assert meta["versions"]["numpy"] == np.__version__
    assert "ember" in meta["versions"]
    assert meta["ember_device"] == "cpu:0"
    assert "error" not in meta["ember_describe"]
    assert report["settings"]["sizes"] == "quick"
    assert report["exit_status"] == 0


def test_each_workload_has_ember_and_numpy_rows(quick_run: tuple[str, dict[str, Any], str]) -> None:
    _, report, _ = quick_run
    assert [w["id"] for w in report["workloads"]] == ["W1", "W5", "W6"]
    for w in report["workloads"]:
        rows = {row["impl"]: row for row in w["impls"]}
        expected = ["ember", "ember_jit"] if w["id"] == "W1" else ["ember"]  # em.jit only where the workload has it
        if em.Device.cpu().capabilities.fusion:  # the lazy layer off beside it, where the device fuses
            expected.append("ember-unfused")
        expected.append("numpy")
        assert [row["impl"] for row in w["impls"]] == expected
        numpy_row = rows["numpy"]
        for row in [rows[name] for name in expected]:
            assert row["status"] == "ok", row
            assert len(row["times_ms"]) == w["iters"]
            assert row["median_ms"] > 0 and row["min_ms"] <= row["median_ms"]
            assert row["derived"]["unit"] == UNITS[w["id"]] and row["derived"]["value"] > 0
        assert numpy_row["ember_ratio"] > 0
        assert numpy_row["check"]["status"] == "ok", numpy_row["check"]
        if "ember_jit" in rows:  # the replayed chain gives eager's result
            assert rows["ember_jit"]["check"]["status"] == "ok", rows["ember_jit"]["check"]


def test_text_and_markdown_tables(quick_run: tuple[str, dict[str, Any], str]) -> None:
    text, _, markdown = quick_run
    assert "median ms" in text and "ember/impl" in text
    for wid in UNITS:
        assert wid in text and wid in markdown
    assert markdown.lstrip().startswith("### cpu:0 — ")
    assert "| workload | size | impl | N | median ms |" in markdown


def test_missing_peer_is_reported_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    real = runner_mod.import_peer

    def fake(name: str) -> Any:
        if name == "cupy":
            raise ImportError("not installed")
        return real(name)

    monkeypatch.setattr(runner_mod, "import_peer", fake)
    gate = runner_mod._peer_gate("cupy", Settings(explicit_peers=True), gpu_run=True)
    assert gate is not None and gate["status"] == "not installed"


def test_unavailable_builder_becomes_a_status() -> None:
    def build(module: Any, size: dict[str, int]) -> Case:
        raise Unavailable("no em.conv yet")

    row = runner_mod._measure(Impl("ember", "ember cpu:0", build), runner_mod.WORKLOADS["W3"], {}, 0, 1)
    assert row == {"status": "unavailable", "reason": "no em.conv yet"}


def test_compare_flags_mismatch_and_nan() -> None:
    a = np.linspace(1.0, 2.0, 10, dtype=np.float32)
    assert compare({"y": a}, {"y": a.copy()}, 1e-6)["status"] == "ok"
    bad = compare({"y": a, "z": a}, {"y": a, "z": a * 1.01}, 1e-4)
    assert bad["status"] == "mismatch" and bad["worst"] == "z"
    assert compare({"y": a * np.nan}, {"y": a}, 1e-4)["status"] == "mismatch"


def test_a_pooled_devices_rows_count_the_driver_calls_of_their_timed_steps() -> None:
    """On a device with pools, each ember row says how many driver allocations and frees the
    timed steps made: with ``memory="exclusive"`` (a driver allocation per buffer) that is at
    least one a step, and the table's note says so."""
    from ember.errors import DeviceUnavailableError

    try:
        dev = em.Device("opencl:0", memory="exclusive")
        dev.backend  # noqa: B018 - the plugin loads here (a device spec alone does not load it)
    except DeviceUnavailableError as exc:
        pytest.skip(f"no opencl:0 here (CI has PoCL): {exc}")
    settings = Settings(workloads=["W6"], device="opencl:0", peers=[], sizes="quick", iters=3, check=False)
    entries = runner_mod.run(settings, dev, log=lambda message: None)
    ember_row = entries[0]["impls"][0]
    assert ember_row["status"] == "ok", ember_row
    assert ember_row["pool"]["allocations"] >= 3 and ember_row["pool"]["frees"] >= 3
    from benchmarks.report import format_table

    _, rows = format_table({"workloads": entries})
    assert "allocs" in rows[0][-1]


def test_the_pool_counts_cover_the_timed_steps_only() -> None:
    """The row's pool counts are the difference over the timed steps: allocations made while the
    case is built and warmed up are not counted (a fake device whose pool counts every step)."""
    from benchmarks import w6_elementwise

    class Counting:
        kind = "fake"

        def __init__(self) -> None:
            self.allocations = 0

        def memory_stats(self) -> dict[str, Any]:
            return {"allocations": self.allocations, "frees": 2 * self.allocations}

    dev = Counting()

    def build(module: Any, size: dict[str, int]) -> Case:
        dev.allocations += 100  # building the case: outside the timed steps

        def step() -> int:
            dev.allocations += 1
            return dev.allocations

        return Case(step, lambda: None, dict)

    row = runner_mod._measure(Impl("ember", "ember fake", build), w6_elementwise, {"n": 4}, 2, 5, dev)
    assert row["status"] == "ok" and row["pool"] == {"allocations": 5, "frees": 10}
    assert "pool" not in runner_mod._measure(Impl("ember", "ember fake", build), w6_elementwise, {"n": 4}, 2, 5)

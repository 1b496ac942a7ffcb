"""The SM clock beside a timed row: read from nvidia-smi where there is one, shown when it was low."""

import subprocess

from benchmarks import clocks
from benchmarks.report import format_table


def test_no_nvidia_smi_means_no_clock(monkeypatch):
    monkeypatch.setattr(clocks.shutil, "which", lambda name: None)
    assert clocks.sm_clock() is None


def test_the_clock_is_parsed_and_a_bad_answer_is_none(monkeypatch):
    monkeypatch.setattr(clocks.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    answers = iter(["345, 1980\n", "not a clock\n"])

    def run(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 0, stdout=next(answers), stderr="")

    monkeypatch.setattr(clocks.subprocess, "run", run)
    assert clocks.sm_clock() == (345, 1980)
    assert clocks.sm_clock() is None


def _report(before: int, after: int) -> dict:
    row = {"impl": "ember", "label": "ember wgpu:0", "status": "ok", "median_ms": 9.0, "min_ms": 8.0}
    row["sm_clock_mhz"] = {"before": before, "after": after, "max": 1980}
    entry = {"id": "W3", "title": "W3 CNN training step", "size": "batch 512", "iters": 50, "impls": [row]}
    return {"workloads": [entry]}


def test_a_row_timed_at_a_lowered_clock_says_so():
    _, rows = format_table(_report(345, 1980))
    assert "SM clock 345->1980 of 1980 MHz" in rows[0][-1]
    _, rows = format_table(_report(1980, 1980))
    assert "SM clock" not in rows[0][-1]


def test_the_memory_table_names_a_strategy_timed_at_a_lowered_clock():
    from benchmarks.memory import table

    def row(strategy, before):
        return {
            "strategy": strategy,
            "peak_reserved_bytes": 2**20,
            "peak_in_use_bytes": 2**20,
            "base_in_use_bytes": 0,
            "median_step_s": 0.003,
            "sm_clock_mhz": {"before": before, "after": 1980, "max": 1980},
        }

    text = table({"W3": [row("adaptive", 345), row("static", 1980)]}, "opencl:0", "gpu", 20)
    assert "W3 adaptive: SM clock 345->1980 of 1980 MHz" in text
    assert "W3 static: SM clock" not in text

"""``benchmarks.host_calls``: it counts a workload's calls per step (never a clock) and its
``--like-gpu`` path takes every op through the lazy hook."""

from __future__ import annotations

import ember as em
from benchmarks import host_calls


def test_host_calls_counts_a_step(capsys):
    assert host_calls.main(["W2", "--warmup", "1", "--steps", "2", "--top", "5"]) == 0
    out = capsys.readouterr().out
    line = out.splitlines()[0]
    assert line.startswith("W2 cpu:0") and "Python calls/step" in line
    python = float(line.rsplit(": ", 1)[1].split(" Python")[0])
    assert python > 0
    assert "calls/step" in out.splitlines()[1]  # the cProfile table's header


def test_count_calls_counts_core_frames():
    x = em.tensor([1.0, 2.0])
    counts = host_calls.count_calls(lambda: x + 1.0, lambda: None, 3)
    assert counts["python"] >= counts["py312"] >= counts["core"] >= 1
    assert counts["c"] >= 0

"""``benchmarks.host_time``: it times rounds of a workload's steps and reports the median; the
``--like-gpu`` path takes every op through the lazy hook (no wall-clock assert: only the report)."""

from __future__ import annotations

from benchmarks import host_time


def test_host_time_reports_rounds(capsys):
    assert host_time.main(["W2", "--like-gpu", "--warmup", "1", "--rounds", "3", "--steps", "2"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("W2 cpu:0") and "like-gpu (thread clock)" in line
    rounds = line.split("(rounds: ", 1)[1].rstrip(")").split()
    assert len(rounds) == 3


def test_time_rounds_counts_every_step():
    calls = []
    times = host_time.time_rounds(lambda: calls.append(1), lambda: None, rounds=2, steps=5)
    assert len(times) == 2 and all(t >= 0 for t in times)
    assert len(calls) == 10

"""benchmarks.spin's summary of py-spy's collapsed stacks: self and total shares per function,
and ``--under`` keeping only the samples below a frame (the timed steps, not the warm-up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.spin import stacks

RAW = """\
main (spin.py:1);warm (spin.py:9);step (w3.py:5) 10
main (spin.py:1);timed (spin.py:34);step (w3.py:5);matmul (/x/blas.py:129) 30
main (spin.py:1);timed (spin.py:34);step (w3.py:5);launch (/x/conv.py:338) 20
main (spin.py:1);timed (spin.py:34);step (w3.py:5) 50
"""


def _rows(text: str) -> dict[str, tuple[float, float]]:
    out = {}
    for line in text.splitlines()[2:]:
        if not line.strip():
            break
        own, total, name = line.split(None, 2)
        out[name] = (float(own), float(total))
    return out


def test_shares_count_each_stack_once_per_function(tmp_path: Path) -> None:
    path = tmp_path / "w3.txt"
    path.write_text(RAW)
    text = stacks(str(path), 10, None)
    assert text.startswith("110 samples")
    rows = _rows(text)
    assert rows["step (w3.py:5)"] == pytest.approx((100 * 60 / 110, 100.0), abs=0.05)  # printed to 0.1%
    assert rows["matmul (blas.py:129)"] == pytest.approx((100 * 30 / 110,) * 2, abs=0.05)  # the path shortened


def test_under_keeps_the_samples_below_a_frame(tmp_path: Path) -> None:
    path = tmp_path / "w3.txt"
    path.write_text(RAW)
    text = stacks(str(path), 10, "timed (spin")
    assert text.startswith("100 samples under timed (spin")
    rows = _rows(text)
    assert rows["step (w3.py:5)"] == (50.0, 100.0)
    assert rows["launch (conv.py:338)"] == (20.0, 20.0)
    assert "warm (spin.py:9)" not in text

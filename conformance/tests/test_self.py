"""Checks of the suite's own machinery: comparisons fail when they should, the report renders."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember_conformance.checks import assert_close
from ember_conformance.jit_checks import assert_native_replay, check_training
from ember_conformance.report import CoverageReport
from ember_conformance.specs import ALL_SPECS


def test_assert_close_catches_differences():
    t = em.tensor([1.0, float("nan"), 3.0])
    assert_close(t, np.array([1.0, np.nan, 3.0000001]), em.float32)
    with pytest.raises(pytest.fail.Exception, match="NaN positions"):
        assert_close(t, np.array([1.0, 2.0, 3.0]), em.float32)
    with pytest.raises(pytest.fail.Exception, match="outside rtol"):
        assert_close(t, np.array([1.1, np.nan, 3.0]), em.float32)
    with pytest.raises(pytest.fail.Exception, match="dtype"):
        assert_close(t, np.array([1.0, np.nan, 3.0]), em.float64)
    with pytest.raises(pytest.fail.Exception, match="differ"):
        assert_close(em.tensor([1, 2]), np.array([1, 3]), em.int64)


def test_jit_checks_catch_a_step_list_replay_and_an_unknown_optimizer(monkeypatch):
    monkeypatch.setenv("EMBER_JIT_NATIVE", "0")
    f = em.jit(lambda x: x + 1.0)
    for _ in range(2):
        f(em.tensor([1.0]))
    with pytest.raises(AssertionError, match="expected a native cpu replay"):
        assert_native_replay(f, "cpu")
    with pytest.raises(em.errors.InvalidArgumentError, match="optimizer must be one of"):
        check_training(em.Device.cpu().autodiff(), optimizer="lion")


def test_spec_names_unique():
    names = [spec.name for spec in ALL_SPECS]
    assert len(names) == len(set(names))


def test_report_renders(tmp_path):
    report = CoverageReport(str(tmp_path / "r.md"), "cpu")
    report.records = {
        "a": {
            "id": "a",
            "family": "unary",
            "op": "exp",
            "dtype": "float32",
            "case": "c",
            "outcome": "pass",
            "reason": "",
        },
        "b": {
            "id": "b",
            "family": "unary",
            "op": "exp",
            "dtype": "float64",
            "case": "c",
            "outcome": "skip",
            "reason": "no f64",
        },
    }
    text = report.as_markdown()
    assert "| exp |" in text and "no f64" in text and "1 skipped" in text
    assert report.as_json()["summary"] == {"cases": 2, "pass": 1, "skip": 1, "fail": 0}

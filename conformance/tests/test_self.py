"""Checks of the suite's own machinery: comparisons fail when they should, the report renders."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import ember as em
import ember_conformance
from ember.plugins import get_registry
from ember_conformance.checks import assert_close, check, check_equal
from ember_conformance.fused_reduce_checks import check_float16_sum
from ember_conformance.jit_checks import assert_native_replay, check_training
from ember_conformance.report import CoverageReport
from ember_conformance.runner import run_reject
from ember_conformance.specs import ALL_SPECS
from ember_conformance.specs.base import reject_params
from ember_conformance.specs.elementwise import UNARY
from ember_conformance.tuning_checks import check_torn_choice_is_not_tuned


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
    with pytest.raises(pytest.fail.Exception, match="expected a native cpu replay, got ''"):
        assert_native_replay(f, "cpu")
    with pytest.raises(em.errors.InvalidArgumentError, match="optimizer must be one of"):
        check_training(em.Device.cpu().autodiff(), optimizer="lion")


def test_check_fails_with_its_message():
    check(True, lambda: 1 / 0)  # a lazy message is only built on failure
    with pytest.raises(pytest.fail.Exception, match="^shape: 3$"):
        check(False, lambda: "shape: 3")
    check_equal((2, 3), (2, 3), "shape")
    with pytest.raises(pytest.fail.Exception, match=r"^shape: got \(2, 3\), expected \(3, 2\)$"):
        check_equal((2, 3), (3, 2), "shape")


def test_fused_reduce_check_catches_a_wrong_dtype():
    """A backend whose float16 sum comes back float32 fails check_float16_sum, naming the dtype."""
    backend = SimpleNamespace(
        run_fused=lambda prog, args, shape: (np.exp(args[0].astype(np.float32)).sum(axis=1),),
        to_numpy=lambda handle: handle,
    )
    with pytest.raises(pytest.fail.Exception, match="came back as float32, not float16"):
        check_float16_sum(SimpleNamespace(backend=backend), (4, 8), upload=lambda v: v)


def test_tuning_check_catches_a_torn_choice_read_as_tuned(tmp_path):
    """A tuner that still returns a choice from a torn entry fails, naming what it read back."""
    entry = tmp_path / "choice.json"
    entry.write_text('{"tile": 64, "split": 1}')
    forgotten = []
    tune = SimpleNamespace(
        store_for=lambda rt: SimpleNamespace(path=lambda key: tmp_path / key),
        _key=lambda store, dtype, cls: "choice.json",
        forget=forgotten.append,
        lookup=lambda rt, dtype, M, N, K: {"tile": 64},
    )
    with pytest.raises(pytest.fail.Exception, match=r"M=64, N=64, K=64, .* read back as \{'tile': 64\}, not None"):
        check_torn_choice_is_not_tuned(tune, "rt", "float32", 64, 64, 64)
    assert entry.read_bytes() == b'{"tile": 6' and forgotten == ["rt", "rt"]


def test_reject_check_catches_an_error_that_does_not_name_the_dtype():
    """An op whose DTypeError does not name the rejected dtype fails run_reject, quoting the error."""
    spec, dtype, case = reject_params(UNARY)[0].values

    def rejects(*args, **kwargs):
        raise em.DTypeError("unsupported input")

    with pytest.raises(pytest.fail.Exception, match=f"does not name {dtype}: unsupported input"):
        run_reject(dataclasses.replace(spec, fn=rejects), dtype, case, em.Device.cpu())


def _helper_modules() -> list[str]:
    """Modules whose asserts pytest may not rewrite: ember_conformance's non-test modules (rewritten
    only while plugin autoload marks the package) and the conformance modules extensions register
    (never: not test_*.py files, not plugins)."""
    root = Path(ember_conformance.__file__).parent
    ours = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if not path.name.startswith("test_"):
            ours.append(".".join(("ember_conformance", *parts[: -1 if parts[-1] == "__init__" else None])))
    return ours + sorted(get_registry().conformance_modules())


@pytest.mark.parametrize("name", _helper_modules())
def test_helper_modules_check_without_bare_asserts(name):
    """A bare assert in these modules loses its values (not rewritten) and vanishes under python -O:
    they check with ember_conformance.checks.check / check_equal / assert_close instead."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, name
    tree = ast.parse(Path(spec.origin).read_text())
    lines = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert not lines, f"{name}: bare assert on lines {lines}"


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

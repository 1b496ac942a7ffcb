"""The environment settings: one set of readers (``ember.config.env_*``) with one set of spellings and
errors, and every variable the sources read listed in a settings table (core's ``ember.config``, each
plugin's ``settings`` module), with no table naming a variable nothing reads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ember.config import env_choice, env_flag, env_float, env_int
from ember.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parents[2]
#: the sources that may read settings: core, the backends, the extensions, the conformance suite
SOURCES = ["core/src", "plugins/cpu/src", "plugins/cuda/src", "plugins/opencl/src", "plugins/wgpu/src"]
SOURCES += ["linalg/src", "signal/src", "fused/src", "conformance/src"]
#: where the tables are
TABLES = ["core/src/ember/config.py"] + [
    f"plugins/{p}/src/ember_{p}/settings.py" for p in ("cpu", "cuda", "opencl", "wgpu")
]

_READ = re.compile(
    r"""(?:env_(?:flag|int|float|choice)\(|environ(?:\.get)?[(\[]|getenv\()\s*["'](EMBER_[A-Z0-9_]+)["']"""
)
_ROW = re.compile(r"^\|\s*(EMBER_[A-Z0-9_]+)\s*\|", re.MULTILINE)


def _read_in_sources() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in _READ.findall(path.read_text(encoding="utf-8")):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def _tabled() -> dict[str, str]:
    rows: dict[str, str] = {}
    for table in TABLES:
        for name in _ROW.findall((ROOT / table).read_text(encoding="utf-8")):
            assert name not in rows, f"{name} is listed in {rows[name]} and {table}"
            rows[name] = table
    return rows


def test_every_setting_read_is_listed_in_a_table_and_every_listed_one_is_read():
    read, tabled = _read_in_sources(), _tabled()
    assert len(read) > 40  # the scan found the readers (a broken pattern would find none)
    missing = {name: where for name, where in read.items() if name not in tabled}
    assert not missing, f"settings read but in no table (add a row to the package's settings table): {missing}"
    stale = {name: table for name, table in tabled.items() if name not in read}
    assert not stale, f"settings in a table that nothing reads: {stale}"


def test_a_plugin_setting_is_listed_in_its_own_plugin_table():
    for name, table in _tabled().items():
        plugin = re.match(r"EMBER_(CPU|CUDA|OPENCL|WGPU)_", name)
        if plugin and name not in ("EMBER_OPENCL_DEVICE", "EMBER_WGPU_ADAPTER"):  # device picks: core's
            assert table.endswith(f"ember_{plugin.group(1).lower()}/settings.py"), (name, table)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), ("ON", True), ("yes", True), ("0", False), ("False", False), (" off ", False)],
)
def test_a_flag_takes_the_usual_spellings(monkeypatch, value, expected):
    monkeypatch.setenv("EMBER_TEST_FLAG", value)
    assert env_flag("EMBER_TEST_FLAG", not expected) is expected


def test_an_unset_flag_is_its_default_and_a_typo_is_refused(monkeypatch):
    monkeypatch.delenv("EMBER_TEST_FLAG", raising=False)
    assert env_flag("EMBER_TEST_FLAG", True) is True and env_flag("EMBER_TEST_FLAG", None) is None
    monkeypatch.setenv("EMBER_TEST_FLAG", "")
    assert env_flag("EMBER_TEST_FLAG", False) is False
    monkeypatch.setenv("EMBER_TEST_FLAG", "of")
    with pytest.raises(InvalidArgumentError, match=r"EMBER_TEST_FLAG='of': expected 1 or 0 .*; unset means 1"):
        env_flag("EMBER_TEST_FLAG", True)


def test_a_number_is_checked_against_its_bounds(monkeypatch):
    monkeypatch.setenv("EMBER_TEST_N", " 12 ")
    assert env_int("EMBER_TEST_N", 3) == 12
    monkeypatch.setenv("EMBER_TEST_N", "0")
    with pytest.raises(
        InvalidArgumentError, match=r"EMBER_TEST_N='0': expected threads \(a whole number >= 1\), e.g. 2"
    ):
        env_int("EMBER_TEST_N", 3, what="threads", example="2", minimum=1)
    monkeypatch.setenv("EMBER_TEST_N", "many")
    with pytest.raises(InvalidArgumentError, match=r"EMBER_TEST_N='many': .*\(0: off\)"):
        env_int("EMBER_TEST_N", 3, zero="off")
    monkeypatch.setenv("EMBER_TEST_N", "2.5")
    assert env_float("EMBER_TEST_N", 1.0) == 2.5
    for bad in ("-1", "nan", "soon"):
        monkeypatch.setenv("EMBER_TEST_N", bad)
        with pytest.raises(InvalidArgumentError, match=f"EMBER_TEST_N='{bad}'"):
            env_float("EMBER_TEST_N", 1.0)
    monkeypatch.setenv("EMBER_TEST_N", "0")
    assert env_float("EMBER_TEST_N", 1.0) == 0.0
    with pytest.raises(InvalidArgumentError, match="EMBER_TEST_N='0': expected seconds, e.g. 60"):
        env_float("EMBER_TEST_N", 1.0, what="seconds", example="60", positive=True)
    monkeypatch.delenv("EMBER_TEST_N")
    assert env_int("EMBER_TEST_N", 3) == 3 and env_float("EMBER_TEST_N", 1.5) == 1.5


def test_a_choice_names_the_choices(monkeypatch):
    monkeypatch.setenv("EMBER_TEST_MODE", "Spin")
    assert env_choice("EMBER_TEST_MODE", ("spin", "wait"), "wait") == "spin"
    monkeypatch.setenv("EMBER_TEST_MODE", "sleep")
    with pytest.raises(
        InvalidArgumentError, match=r"EMBER_TEST_MODE='sleep': expected one of spin, wait \(unset: wait\)"
    ):
        env_choice("EMBER_TEST_MODE", ("spin", "wait"), "wait")

"""ember finds the checked backend through its entry point, like any installed plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata

import ember as em


def _ember(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True, timeout=120,
        env=None if env is None else {**os.environ, **env},
    )  # fmt: skip
    return done.stdout + done.stderr


def test_registered_through_the_ember_backends_entry_point():
    found = {ep.name: ep.value for ep in metadata.entry_points(group="ember.backends")}
    assert found.get("checked") == "ember_checked.plugin"


def test_ember_plugins_lists_it():
    out = _ember("plugins")
    line = next(line for line in out.splitlines() if line.startswith("checked"))
    assert "ember-checked" in line and line.rstrip().endswith("ok")


def test_ember_doctor_finds_two_complete_devices():
    out = _ember("doctor")
    assert "[ ok ] checked: 2 device(s)" in out
    assert "missing primitives" not in out


def test_its_setting_shows_in_ember_settings_and_a_bad_value_is_reported():
    """A third-party backend's settings module (beside its entry point's module) is found like the
    in-tree ones: ``ember settings`` lists its row with the value set, doctor counts the devices it
    asks for, and a value its reader refuses is a [fail] line, not a surprise at the first device."""
    out = _ember("settings", "--set", env={"EMBER_CHECKED_DEVICES": "3"})
    row = next(line for line in out.splitlines() if line.startswith("EMBER_CHECKED_DEVICES"))
    assert row.split()[1:3] == ["3", "2"] and row.rstrip().endswith("ember_checked")
    assert "[ ok ] checked: 3 device(s)" in _ember("doctor", env={"EMBER_CHECKED_DEVICES": "3"})
    out = _ember("settings", env={"EMBER_CHECKED_DEVICES": "none"})
    assert "[fail] EMBER_CHECKED_DEVICES='none': expected a number of devices" in out


def test_devices_are_reachable_by_name():
    assert em.Device("checked:1").backend.device is em.Device("checked:1")
    assert {"checked:0", "checked:1"} <= {str(d) for d in em.Device.available()}


def test_listing_plugins_does_not_load_the_backend():
    code = (
        "import sys, ember; from ember.plugins import get_registry; get_registry().discover(); "
        "assert 'ember_checked.plugin' in sys.modules; print('ember_checked.backend' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "False", done.stderr

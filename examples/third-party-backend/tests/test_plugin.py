"""ember finds the checked backend through its entry point, like any installed plugin."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import ember as em


def _ember(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True, timeout=120)
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

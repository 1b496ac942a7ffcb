"""The ember command."""

from __future__ import annotations

import subprocess
import sys

import ember as em
from ember.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember.cli", *args], capture_output=True, text=True)


def test_version():
    out = run("--version")
    assert out.returncode == 0 and em.__version__ in out.stdout


def test_plugins_lists_cpu():
    out = run("plugins")
    assert out.returncode == 0
    assert "cpu" in out.stdout and "ember-cpu" in out.stdout


def test_devices_lists_cpu(capsys):
    assert main(["devices"]) == 0
    assert "cpu:0" in capsys.readouterr().out


def test_doctor_reports_cpu_ok(capsys):
    main(["doctor"])
    out = capsys.readouterr().out
    assert "[ ok ] cpu" in out and "default device cpu:0 is usable" in out


def test_failed_plugin_shows_in_plugins_output(capsys, fresh_registry):
    class Broken:
        @em.hookimpl
        def ember_register_backends(self, registry):
            raise ImportError("needs libfoo.so")

    fresh_registry.register(Broken(), name="broken")
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "broken" in out and "failed: ImportError: needs libfoo.so" in out

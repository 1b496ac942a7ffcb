"""The ember command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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


def test_ops_lists_the_op_table_and_what_a_device_computes_natively(capsys):
    from ember.cli import main
    from ember.dispatch import OPS

    assert main(["ops", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    native = em.Device.cpu().capabilities.native_ops
    builtin = [op for op in OPS.values() if not op.extension]
    assert f"{len(native & {op.name for op in builtin})} of {len(builtin)} ops native on cpu" in out
    assert "softmax(a, *, axis) -> handle" in out
    assert main(["ops", "--markdown"]) == 0
    assert capsys.readouterr().out == (Path(__file__).parents[2] / "docs" / "ops.md").read_text(encoding="utf-8")

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


def test_settings_lists_core_and_plugin_settings_with_their_values(capsys, monkeypatch):
    """`ember settings`: every row of ember.config's table and of an installed plugin's settings module
    (the cpu plugin's here), the value set now beside the default."""
    from ember import config
    from ember_cpu import settings as cpu_settings

    monkeypatch.setenv("EMBER_CPU_FUSED_THREADS", "3")
    assert main(["settings"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    for name, _, _ in config.settings_table(config.__doc__) + config.settings_table(cpu_settings.__doc__):
        assert name in rows, name
    assert rows["EMBER_CPU_FUSED_THREADS"][1:2] == ["3"] and rows["EMBER_CPU_FUSED_THREADS"][-1] == "ember_cpu"
    assert rows["EMBER_MEMORY"][1:3] == ["-", "adaptive"]
    assert main(["settings", "--set"]) == 0
    shown = [line.split()[0] for line in capsys.readouterr().out.splitlines()[2:]]
    assert "EMBER_CPU_FUSED_THREADS" in shown and "EMBER_MEMORY" not in shown


def test_a_misspelt_setting_is_named_with_the_one_meant(capsys, monkeypatch):
    """A variable no package reads is otherwise ignored without a word: settings and doctor say so."""
    monkeypatch.setenv("EMBER_CPU_FUSED_THRAEDS", "3")
    assert main(["settings", "--set"]) == 1
    out = capsys.readouterr().out
    assert "[warn] EMBER_CPU_FUSED_THRAEDS is set but no installed package reads it" in out
    assert "(did you mean EMBER_CPU_FUSED_THREADS" in out
    main(["doctor"])
    assert "[warn] EMBER_CPU_FUSED_THRAEDS is set" in capsys.readouterr().out


def test_a_value_no_reader_takes_fails_settings_and_doctor(capsys, monkeypatch):
    """A set value its reader refuses (a typo in a flag, a count that is no number) is reported when asked,
    not only when a device first reads it."""
    monkeypatch.setenv("EMBER_CPU_SPLIT_GEMM", "maybe")
    monkeypatch.setenv("EMBER_MEMORY", "greedy")
    assert main(["settings", "--set"]) == 1
    out = capsys.readouterr().out
    assert "[fail] EMBER_CPU_SPLIT_GEMM='maybe': expected 1 or 0" in out
    assert "[fail] EMBER_MEMORY='greedy': expected one of adaptive, static, exclusive" in out
    assert main(["doctor"]) == 1
    assert "[fail] EMBER_CPU_SPLIT_GEMM='maybe'" in capsys.readouterr().out
    monkeypatch.delenv("EMBER_CPU_SPLIT_GEMM")
    monkeypatch.delenv("EMBER_MEMORY")
    assert main(["settings", "--set"]) == 0


def test_every_settings_module_checks_every_setting_it_lists(monkeypatch):
    """check() of ember.config and of each plugin's settings module reads every variable of its table: a
    value no reader takes in any of them is reported (a row left out of check() would pass silently)."""
    import importlib.util

    from ember import config

    root = Path(__file__).resolve().parents[2]
    modules = [config]
    for plugin in ("cpu", "cuda", "opencl", "wgpu"):  # loaded from the checkout: CI's core env installs cpu only
        path = root / "plugins" / plugin / "src" / f"ember_{plugin}" / "settings.py"
        spec = importlib.util.spec_from_file_location(f"_settings_of_{plugin}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)  # (it imports ember.config alone)
        modules.append(module)
    for module in modules:
        rows = config.settings_table(module.__doc__)
        assert rows, module.__name__
        for variable, _, _ in rows:
            if variable in ("EMBER_DEVICE", "EMBER_PLUGINS", "EMBER_CACHE_DIR"):  # free text: any value is one
                continue
            monkeypatch.setenv(variable, "-7.5x")
            assert any(variable in line for line in module.check()), (module.__name__, variable)
            monkeypatch.delenv(variable)


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

"""Plugins cannot take ember down: one that exits, hangs, hijacks a device kind or shadows
another's name is contained, reported, and shown by `ember plugins` / `ember doctor`."""

from __future__ import annotations

import sys
import textwrap
import time

import pytest

import ember as em
from ember import plugins as ember_plugins
from ember.cli import main
from ember.plugins import EntryPoint, PluginConflictWarning, PluginRegistry


def _install(monkeypatch, tmp_path, plugins: dict[tuple[str, str], str]) -> None:
    """Entry points ``(name, distribution) -> module source`` plus the real cpu plugin."""
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [EntryPoint(name="cpu", value="ember_cpu.plugin", group="ember.backends", distribution="ember-cpu")]
    for i, ((name, dist), source) in enumerate(plugins.items()):
        module = f"hostile_plugin_{i}_{abs(hash((name, dist, str(tmp_path))))}"
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        eps.append(EntryPoint(name=name, value=module, group="ember.backends", distribution=dist, version="9.9"))
    monkeypatch.setattr(ember_plugins, "find_entry_points", lambda groups=(): [ep for ep in eps if ep.group in groups])


def test_a_plugin_that_calls_sys_exit_is_contained(monkeypatch, tmp_path, fresh_registry: PluginRegistry):
    _install(monkeypatch, tmp_path, {("exiter", "evil-exit"): "import sys\nsys.exit(7)\n"})
    fresh_registry.discover()  # must not end the process
    info = fresh_registry.plugins["exiter"]
    assert info.status == "failed" and info.error == "SystemExit: 7", info.error
    assert fresh_registry.plugins["cpu"].status == "ok" and "cpu" in fresh_registry.kinds()


def test_a_plugin_that_hangs_at_import_is_abandoned_after_the_time_limit(
    monkeypatch, tmp_path, fresh_registry: PluginRegistry
):
    monkeypatch.setenv("EMBER_PLUGIN_TIMEOUT", "0.5")
    _install(monkeypatch, tmp_path, {("sleeper", "evil-hang"): "import time\ntime.sleep(30)\n"})
    start = time.monotonic()
    fresh_registry.discover()
    assert time.monotonic() - start < 10
    info = fresh_registry.plugins["sleeper"]
    assert info.status == "failed"
    assert "did not finish within 0.5 s" in info.error and "EMBER_PLUGIN_TIMEOUT" in info.error
    assert fresh_registry.backend_class("cpu").name == "cpu"  # the others still work


def test_a_backend_loader_that_hangs_is_a_device_error(monkeypatch, tmp_path, fresh_registry: PluginRegistry):
    monkeypatch.setenv("EMBER_PLUGIN_TIMEOUT", "0.5")
    source = """
    import time
    import ember as em
    from ember.plugins import BackendSpec

    def load():
        time.sleep(30)

    @em.hookimpl
    def ember_register_backends(registry):
        registry.add_backend(BackendSpec(name="slow", kinds=("slowkind",), loader=load))
    """
    _install(monkeypatch, tmp_path, {("slow", "evil-slow"): source})
    with pytest.raises(em.DeviceUnavailableError, match=r"slowkind.*did not finish within 0.5 s"):
        fresh_registry.backend_class("slowkind")


def test_a_kind_hijack_warns_and_doctor_says_who_serves(monkeypatch, tmp_path, capsys, fresh_registry):
    source = """
    import ember as em
    from ember.plugins import BackendSpec

    def load():
        from ember_cpu.backend import CpuBackend
        return type("HijackBackend", (CpuBackend,), {"name": "hijack"})

    @em.hookimpl
    def ember_register_backends(registry):
        registry.add_backend(BackendSpec(name="hijack", kinds=("cpu",), loader=load, priority=10))
    """
    _install(monkeypatch, tmp_path, {("zzhijack", "evil-hijack"): source})
    with pytest.warns(
        PluginConflictWarning, match=r"'zzhijack' registers device kind 'cpu', which plugin\(s\) cpu also serve"
    ):
        fresh_registry.discover()
    assert fresh_registry.provider("cpu") == "zzhijack"
    main(["doctor"])
    out = capsys.readouterr().out
    assert "[ ok ] cpu: 1 device(s), served by plugin 'zzhijack' (also offered by cpu)" in out
    main(["plugins"])
    assert "cpu (served by zzhijack)" in capsys.readouterr().out


def test_same_entry_point_name_from_two_distributions_lists_both(monkeypatch, tmp_path, fresh_registry):
    source = """
    import ember as em

    @em.hookimpl
    def ember_register_backends(registry):
        pass
    """
    _install(monkeypatch, tmp_path, {("cpu", "cpu-lookalike"): source})
    monkeypatch.setenv("EMBER_PLUGINS", "cpu")
    fresh_registry.discover()
    named_cpu = {info.distribution: info for info in fresh_registry.plugins.values() if info.name == "cpu"}
    assert set(named_cpu) == {"ember-cpu", "cpu-lookalike"}, "both distributions are listed"
    assert all(info.status == "ok" for info in named_cpu.values()), "EMBER_PLUGINS=cpu allows both"
    assert fresh_registry.provider("cpu") == named_cpu["ember-cpu"].key
    assert fresh_registry.backend_class("cpu").name == "cpu"


def test_allow_list_is_case_insensitive_and_named_in_errors(monkeypatch, fresh_registry: PluginRegistry):
    monkeypatch.setenv("EMBER_PLUGINS", "CPU")
    assert fresh_registry.backend_class("cpu").name == "cpu"
    other = PluginRegistry()
    monkeypatch.setenv("EMBER_PLUGINS", "opencl")
    with pytest.raises(em.DeviceUnavailableError, match=r"plugin cpu is installed but left out by EMBER_PLUGINS"):
        other.backend_class("cpu")


def test_plugin_timeout_setting_is_checked(monkeypatch, fresh_registry: PluginRegistry):
    monkeypatch.setenv("EMBER_PLUGIN_TIMEOUT", "soon")
    with pytest.raises(em.errors.InvalidArgumentError, match="EMBER_PLUGIN_TIMEOUT='soon'"):
        fresh_registry.discover()


def test_keyboard_interrupt_is_not_swallowed():
    from ember.plugins import contained

    def interrupted():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        contained(interrupted, "a plugin")
    assert sys.exc_info() == (None, None, None)

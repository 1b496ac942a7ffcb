"""Plugin discovery: registration, isolation of broken plugins, allow-list, errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ember as em
from ember import plugins
from ember.plugins import BackendSpec, EntryPoint, PluginRegistry


class GoodPlugin:
    @em.hookimpl
    def ember_register_backends(self, registry):
        from ember_cpu.backend import CpuBackend

        registry.add_backend(BackendSpec(name="good", kinds=("goodkind",), loader=lambda: CpuBackend))


class RaisingPlugin:
    @em.hookimpl
    def ember_register_backends(self, registry):
        raise RuntimeError("boom in register")


class MalformedPlugin:
    @em.hookimpl
    def ember_register_backends(self, registry):
        registry.add_backend(("not", "a", "spec"))


def _fake_entry_points(values: dict[str, str]):
    eps = [EntryPoint(name=n, value=v, group="ember.backends") for n, v in values.items()]

    def find_entry_points(groups=plugins.ENTRY_POINT_GROUPS):
        return [ep for ep in eps if ep.group in groups]

    return find_entry_points


def test_broken_plugin_does_not_break_the_others(fresh_registry: PluginRegistry):
    fresh_registry.register(RaisingPlugin(), name="raising")
    fresh_registry.register(GoodPlugin(), name="good")
    assert fresh_registry.plugins["raising"].status == "failed"
    assert "boom in register" in fresh_registry.plugins["raising"].error
    assert fresh_registry.plugins["good"].status == "ok"
    assert "goodkind" in fresh_registry.kinds()


def test_malformed_registration_names_the_plugin(fresh_registry: PluginRegistry):
    fresh_registry.register(MalformedPlugin(), name="malformed")
    info = fresh_registry.plugins["malformed"]
    assert info.status == "failed"
    assert "malformed" in info.error and "BackendSpec" in info.error


def test_entry_point_that_fails_to_import_is_recorded(monkeypatch, fresh_registry: PluginRegistry):
    monkeypatch.setattr(
        plugins,
        "find_entry_points",
        _fake_entry_points({"ghost": "ember_no_such_module_xyz.plugin", "cpu": "ember_cpu.plugin"}),
    )
    fresh_registry.discover()
    ghost = fresh_registry.plugins["ghost"]
    assert ghost.status == "failed"
    assert "ModuleNotFoundError" in ghost.error
    assert fresh_registry.plugins["cpu"].status == "ok"
    assert "cpu" in fresh_registry.kinds()


def test_allow_list_disables_other_plugins(monkeypatch, fresh_registry: PluginRegistry):
    monkeypatch.setenv("EMBER_PLUGINS", "cpu")
    monkeypatch.setattr(
        plugins, "find_entry_points", _fake_entry_points({"other": "ember_cpu.plugin", "cpu": "ember_cpu.plugin"})
    )
    fresh_registry.discover()
    assert fresh_registry.plugins["other"].status == "disabled"
    assert fresh_registry.plugins["cpu"].status == "ok"


def test_discovery_is_idempotent(fresh_registry: PluginRegistry):
    fresh_registry.discover()
    first = dict(fresh_registry.specs)
    fresh_registry.discover()
    assert {k: len(v) for k, v in fresh_registry.specs.items()} == {k: len(v) for k, v in first.items()}


def test_unknown_device_kind_says_what_to_install(fresh_registry: PluginRegistry):
    fresh_registry.register(GoodPlugin(), name="good")
    with pytest.raises(em.DeviceUnavailableError) as err:
        fresh_registry.backend_class("remote")
    assert "no remote backend is released yet" in str(err.value)  # no package name that does not exist


def test_loader_failure_is_a_clear_device_error(fresh_registry: PluginRegistry):
    class BadLoader:
        @em.hookimpl
        def ember_register_backends(self, registry):
            def load():
                raise ImportError("No module named 'pyopencl'")

            registry.add_backend(BackendSpec(name="opencl", kinds=("opencl",), loader=load))

    fresh_registry.register(BadLoader(), name="opencl")
    with pytest.raises(em.DeviceUnavailableError) as err:
        fresh_registry.backend_class("opencl")
    msg = str(err.value)
    assert "pyopencl" in msg and "ember[opencl]" in msg


def test_priority_picks_the_higher_spec(fresh_registry: PluginRegistry):
    from ember_cpu.backend import CpuBackend

    class Low(CpuBackend):
        name = "low"

    class High(CpuBackend):
        name = "high"

    class Two:
        @em.hookimpl
        def ember_register_backends(self, registry):
            registry.add_backend(BackendSpec(name="low", kinds=("k",), loader=lambda: Low, priority=0))
            registry.add_backend(BackendSpec(name="high", kinds=("k",), loader=lambda: High, priority=5))

    fresh_registry.register(Two(), name="two")
    assert fresh_registry.backend_class("k") is High


def test_import_ember_loads_no_backend():
    code = "import sys, ember; print(any(m.startswith(('ember_cpu', 'pyopencl', 'wgpu', 'cupy')) for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_cpu_backend_is_complete():
    assert em.Device.cpu().backend.missing_primitives() == []

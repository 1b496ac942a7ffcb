"""Lazy, light discovery: opening a device imports the backend plugins' registration modules and
nothing heavy; the extension plugins wait for ``discover()``; entry points are read from the
dist-info folders without importlib.metadata, with the same answer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile

import pytest

import ember as em
from ember import plugins
from ember.plugins import ENTRY_POINT_GROUPS, EntryPoint, PluginRegistry

#: what no registration may import: the backends' libraries and the heavy host libraries
HEAVY = ("pyopencl", "wgpu", "cupy", "numba", "llvmlite", "scipy", "torch")
EXTENSIONS = ("ember_linalg", "ember_signal", "ember_fused")


def _modules_after(code: str, prefixes: tuple[str, ...]) -> list[str]:
    """The modules starting with one of ``prefixes`` that a new process holds after ``code``."""
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_ember_imports_no_plugin_and_no_entry_point_machinery():
    assert _modules_after("import ember", HEAVY + ("ember_", "importlib.metadata")) == []


def test_opening_a_device_imports_neither_extensions_nor_heavy_libraries():
    loaded = _modules_after(
        "import ember as em\nem.Device('cpu').backend", HEAVY + EXTENSIONS + ("importlib.metadata", "ember.nn")
    )
    assert loaded == []


def test_full_discovery_imports_no_heavy_library():
    code = "import ember as em\nkinds = em.plugins.get_registry().kinds()\nassert 'cpu' in kinds, kinds"
    assert _modules_after(code, HEAVY + ("importlib.metadata",)) == []


def test_backends_first_extensions_on_discover():
    reg = PluginRegistry()
    assert reg.backend_class("cpu").name == "cpu"
    groups = {info.group for info in reg.plugins.values()}
    assert groups == {"ember.backends"}, "only the backend plugins load for a device"
    reg.discover()
    ext = {info.name: info for info in reg.plugins.values() if info.group == "ember.extensions"}
    if "linalg" in ext:  # installed in the dev environment: its ops are listed as before
        assert ext["linalg"].status == "ok" and "linalg_svd" in ext["linalg"].extensions
    names = [info.name for info in reg.plugins.values()]
    backend_names = [info.name for info in reg.plugins.values() if info.group == "ember.backends"]
    assert names[: len(backend_names)] == sorted(backend_names), "`ember plugins` order: backends, then extensions"


def test_scan_agrees_with_importlib_metadata():
    fast = plugins._scan_path(ENTRY_POINT_GROUPS)
    assert fast is not None, "the dev environment's path holds only folders"

    def key(ep: EntryPoint) -> tuple[str, str, str]:
        return ep.group, ep.name, ep.distribution

    assert sorted(fast, key=key) == sorted(plugins._scan_metadata(ENTRY_POINT_GROUPS), key=key)
    assert any(ep.name == "cpu" and ep.distribution == "ember-cpu" for ep in fast)


def _dist(root, folder: str, name: str, version: str, entry_points: str) -> None:
    d = root / folder
    d.mkdir(parents=True)
    (d / ("METADATA" if folder.endswith(".dist-info") else "PKG-INFO")).write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: x\n\nName: not-a-header\n"
    )
    (d / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def test_scan_reads_dist_info_and_egg_info_folders(monkeypatch, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    _dist(
        first,
        "my_plugin-1.2.dist-info",
        "my-plugin",
        "1.2",
        """
        [console_scripts]
        tool = my_plugin.cli:main

        # a comment
        [ember.backends]
        mine = my_plugin.plugin
        other = my_plugin.other:hooks.obj [extra]
        """,
    )
    _dist(first, "Old.Egg-0.1.egg-info", "Old.Egg", "0.1", "[ember.extensions]\nold = old_egg.plugin\n")
    (first / "single-0.1.egg-info").write_text("Name: single\n")  # an egg-info that is a file
    _dist(second, "My.Plugin-0.9.dist-info", "My.Plugin", "0.9", "[ember.backends]\nshadowed = nope\n")
    monkeypatch.setattr(sys, "path", [str(first), str(tmp_path / "missing"), str(second)])
    found = plugins._scan_path(ENTRY_POINT_GROUPS)
    assert found is not None
    assert sorted(found, key=lambda ep: ep.name) == [
        EntryPoint("mine", "my_plugin.plugin", "ember.backends", "my-plugin", "1.2"),
        EntryPoint("old", "old_egg.plugin", "ember.extensions", "Old.Egg", "0.1"),
        EntryPoint("other", "my_plugin.other:hooks.obj [extra]", "ember.backends", "my-plugin", "1.2"),
    ], "the first of a distribution on the path wins, as importlib.metadata counts"


def test_a_zip_on_the_path_falls_back_to_importlib_metadata(monkeypatch, tmp_path):
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-1.0.dist-info/METADATA", "Name: zipped\nVersion: 1.0\n\n")
        z.writestr("zipped-1.0.dist-info/entry_points.txt", "[ember.backends]\nzipped = zipped.plugin\n")
    monkeypatch.setattr(sys, "path", [str(archive)])
    assert plugins._scan_path(ENTRY_POINT_GROUPS) is None
    found = plugins.find_entry_points(ENTRY_POINT_GROUPS)
    assert found == [EntryPoint("zipped", "zipped.plugin", "ember.backends", "zipped", "1.0")]


def test_entry_point_load_follows_attributes():
    assert EntryPoint("x", "ember.plugins:PluginRegistry.discover", "ember.backends").load() is (
        PluginRegistry.discover
    )
    with pytest.raises(em.PluginError, match="not 'module' or 'module:attribute'"):
        EntryPoint("x", "not a module", "ember.backends").load()


def _install(monkeypatch, tmp_path, sources: dict[tuple[str, str], str]) -> None:
    """Entry points ``(name, group) -> module source``."""
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = []
    for (name, group), source in sources.items():
        module = f"lazy_plugin_{name}_{abs(hash(str(tmp_path)))}"
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
        eps.append(EntryPoint(name=name, value=module, group=group, distribution=f"dist-{name}", version="1"))
    monkeypatch.setattr(plugins, "find_entry_points", lambda groups=(): [ep for ep in eps if ep.group in groups])


_BOTH_HOOKS = """
import ember as em
from ember.plugins import BackendSpec

CALLS = []

def load():
    from ember_cpu.backend import CpuBackend
    return CpuBackend

@em.hookimpl
def ember_register_backends(registry):
    CALLS.append("backends")
    registry.add_backend(BackendSpec(name="{kind}", kinds=("{kind}",), loader=load))

@em.hookimpl
def ember_register_extensions(registry):
    CALLS.append("extensions")
"""


def test_a_backend_plugins_extension_hook_waits_for_discover(monkeypatch, tmp_path, fresh_registry):
    _install(monkeypatch, tmp_path, {("both", "ember.backends"): _BOTH_HOOKS.format(kind="bothkind")})
    assert fresh_registry.backend_class("bothkind").name == "cpu"
    module = sys.modules[fresh_registry.manager.get_plugin("both").__name__]
    assert module.CALLS == ["backends"]
    fresh_registry.discover()
    assert module.CALLS == ["backends", "extensions"]
    fresh_registry.discover()
    assert module.CALLS == ["backends", "extensions"], "once"


def test_a_backend_registered_by_an_extension_plugin_is_found(monkeypatch, tmp_path, fresh_registry):
    _install(monkeypatch, tmp_path, {("ext", "ember.extensions"): _BOTH_HOOKS.format(kind="extkind")})
    assert fresh_registry.backend_class("extkind").name == "cpu"
    assert fresh_registry.plugins["ext"].backends == ["extkind"]


def test_a_failing_extension_plugin_does_not_stop_a_device(monkeypatch, tmp_path, fresh_registry):
    _install(monkeypatch, tmp_path, {("broken", "ember.extensions"): "raise RuntimeError('broken extension')\n"})
    monkeypatch.setattr(
        plugins,
        "find_entry_points",
        lambda groups=(), found=plugins.find_entry_points: (
            found(groups) + [EntryPoint("cpu", "ember_cpu.plugin", "ember.backends", "ember-cpu", "0.1.0")]
        ),
    )
    assert fresh_registry.backend_class("cpu").name == "cpu"
    assert "broken" not in fresh_registry.plugins, "not imported for a device"
    assert "cpu" in fresh_registry.kinds()
    assert fresh_registry.plugins["broken"].status == "failed"
    assert "broken extension" in fresh_registry.plugins["broken"].error


def test_the_nn_fused_road_discovers_the_extensions():
    pytest.importorskip("ember_fused")
    code = (
        "import ember as em\nfrom ember.nn.fused_ops import fused_op\nx = em.ones((2, 2))\nfused_op('fused_linear', x)"
    )
    assert "ember_fused" in _modules_after(code, ("ember_fused",)), "the first lookup loads the extensions"

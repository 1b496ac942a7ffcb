"""The pytest plugin, loaded through the ``pytest11`` entry point whenever ember-conformance is
installed.

It adds ``--ember-device`` and ``--ember-report`` and the ``device`` / ``ad_device`` fixtures;
it does nothing else unless conformance tests are collected, and imports ember lazily.

Run the suite with ``pytest --pyargs ember_conformance --ember-device=cpu``.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

_PACKAGE_DIR = Path(__file__).resolve().parent
_IEEE_WARNINGS = "ignore:(.*(invalid value|divide by zero|overflow) encountered|Mean of empty slice):RuntimeWarning"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ember", "ember conformance suite (ember-conformance)")
    group.addoption(
        "--ember-device",
        action="store",
        default=None,
        metavar="SPEC",
        help="device the conformance suite checks: any 'kind:index' spec, e.g. cpu, opencl:0, or a third-party "
        "kind such as checked (default: EMBER_DEVICE, else cpu)",
    )
    group.addoption(
        "--ember-primitives-only",
        action="store_true",
        default=False,
        help="hide the backend's native fast paths so every composite op runs through ember's core definition on "
        "the required primitives (what a backend implementing only those would compute)",
    )
    group.addoption(
        "--ember-dtypes",
        action="store",
        default=None,
        metavar="LIST",
        help="comma-separated dtypes to check (e.g. float32,int64,bool); cases of other dtypes skip with that "
        "reason ('all', the default, checks every dtype). For time-boxed runs on backends that compile a kernel "
        "per dtype",
    )
    group.addoption(
        "--ember-shard",
        action="store",
        default=None,
        metavar="I/N",
        help="run only shard I of N (0 <= I < N): the I-th of N contiguous slices of the collected cases, so N "
        "processes run the suite in parallel (on a GPU machine, N kernel compilers) and together run every case once",
    )
    group.addoption(
        "--ember-report",
        action="store",
        default=None,
        metavar="FILE",
        help="write the op x dtype coverage table with pass/skip/fail and reasons to FILE (Markdown; JSON if FILE "
        "ends in .json)",
    )


def device_spec(config: pytest.Config) -> str:
    """The device named by ``--ember-device``, else ``EMBER_DEVICE``, else ``cpu``."""
    spec = config.getoption("ember_device", None)
    if not spec:
        from ember import config as ember_config

        spec = ember_config.default_device()
    return str(spec)


def device_label(config: pytest.Config) -> str:
    """The device spec plus the suite's mode, for headers and the report."""
    extra = " (primitives only: native fast paths hidden)" if config.getoption("ember_primitives_only", False) else ""
    return device_spec(config) + extra


def _is_conformance(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    name = getattr(module, "__name__", "")
    return name.startswith("ember_conformance.") or getattr(module, "EMBER_CONFORMANCE", False)


def _running_suite(config: pytest.Config) -> bool:
    return config.getoption("ember_device", None) is not None or any("ember_conformance" in a for a in config.args)


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("ember_report", None)
    if path:
        from .report import CoverageReport

        config.pluginmanager.register(CoverageReport(path, device_label(config)), "ember-conformance-report")


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not _running_suite(config):
        return None
    from .report import fusion_note

    return [f"ember conformance device: {device_label(config)}", f"ember fusion: {fusion_note()}"]


@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> Any:
    """The Device named by ``--ember-device`` (autodiff off)."""
    import ember as em

    spec = device_spec(pytestconfig)
    try:
        dev = em.Device(spec).without_autodiff()
        dev.synchronize()  # loads the backend now: a missing plugin is one clear message, not N errors
        if pytestconfig.getoption("ember_primitives_only", False):
            from .fakes import primitives_only

            dev = primitives_only(dev)
            dev.synchronize()
    except Exception as exc:
        pytest.exit(f"ember conformance: --ember-device={spec} cannot be used: {type(exc).__name__}: {exc}", 4)
    return dev


@pytest.fixture(scope="session")
def ad_device(device: Any) -> Any:
    """The same device with autodiff on."""
    return device.autodiff()


def _classify(item: pytest.Item) -> dict[str, str]:
    from ember.dtypes import DType

    family = getattr(item, "originalname", item.name).removeprefix("test_")
    params = getattr(getattr(item, "callspec", None), "params", {})
    spec = params.get("spec")
    op = getattr(spec, "name", None) or params.get("op") or params.get("module") or family
    dtypes = [v for v in params.values() if isinstance(v, DType)]
    case = params.get("case")
    case_name = getattr(case, "name", None)
    if case_name is None:
        rest = [
            str(v) for k, v in params.items() if k not in ("spec", "op") and v is not (dtypes[0] if dtypes else None)
        ]
        case_name = "-".join(rest) or "-"
    return {
        "ember_family": family,
        "ember_op": str(op),
        "ember_dtype": str(dtypes[0]) if dtypes else "-",
        "ember_case": case_name,
    }


def _selected_dtypes(config: pytest.Config) -> set[str] | None:
    raw = config.getoption("ember_dtypes", None)
    if not raw or raw.strip().lower() == "all":
        return None
    from ember.dtypes import as_dtype

    return {as_dtype(name.strip(), "--ember-dtypes").name for name in raw.split(",") if name.strip()}


def _extension_items(session: pytest.Session, seen: set[Path]) -> list[pytest.Item]:
    """Items from the test modules extensions add through ``ember_conformance_modules``."""
    from ember.plugins import get_registry

    found: list[pytest.Item] = []
    for name in get_registry().conformance_modules():
        module = importlib.import_module(name)
        path = Path(module.__file__ or "").resolve()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        collector = pytest.Module.from_parent(session, path=path)
        found.extend(session.genitems(collector))
    return found


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if _is_conformance(item)]
    if not ours:
        return
    seen = {Path(str(item.path)).resolve() for item in ours}
    if not any(p.parent == _PACKAGE_DIR for p in seen):
        return
    extra = _extension_items(session, seen)
    items.extend(extra)
    selected = _selected_dtypes(config)
    for item in ours + extra:
        tags = _classify(item)
        for key, value in tags.items():
            item.user_properties.append((key, value))
        if selected is not None and tags["ember_dtype"] != "-" and tags["ember_dtype"] not in selected:
            item.add_marker(pytest.mark.skip(reason=f"dtype {tags['ember_dtype']} not selected by --ember-dtypes"))
        # NaN/inf and empty inputs are the point of some cases: numpy-based backends warn about them
        item.add_marker(pytest.mark.filterwarnings(_IEEE_WARNINGS))
    shard = _shard(config)
    if shard is not None:
        index, count = shard
        start, stop = len(items) * index // count, len(items) * (index + 1) // count
        config.hook.pytest_deselected(items=items[:start] + items[stop:])
        items[:] = items[start:stop]


def _shard(config: pytest.Config) -> tuple[int, int] | None:
    """``--ember-shard=I/N`` as (I, N), checked."""
    text = config.getoption("ember_shard", None)
    if not text:
        return None
    try:
        index, count = (int(v) for v in text.split("/"))
    except ValueError:
        index, count = -1, 0
    if not 0 <= index < count:
        raise pytest.UsageError(f"--ember-shard={text!r}: expected I/N with 0 <= I < N, e.g. --ember-shard=0/4")
    return index, count

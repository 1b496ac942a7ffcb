"""The packaging env: build every distribution as a user would get it, install it, run it.

    python .ci/packaging.py --workdir DIR [--devices cpu,opencl:0,wgpu:0,checked:0]

1. ``python -m build`` each distribution of ``[tool.ember] distributions`` (root pyproject.toml)
   into DIR/dist: the sdist, then the wheel built *from that sdist* (build's default), so an
   sdist that lacks a file its wheel needs fails here. Each must be named for the one version.
2. ``twine check --strict`` every file: the metadata and README that PyPI would render.
3. A fresh venv (``python -m venv`` in DIR), where ``pip install --find-links DIR/dist
   "ember[cpu,opencl,wgpu]==V"`` resolves the extras' pins to the wheels just built (third-party
   dependencies come from the registry pip is configured with); then ember-checked and
   ember-conformance the same way. pip's install report must show every ember distribution
   coming from DIR/dist, so a same-named project on the index cannot stand in for ours.
4. From a temporary directory outside the checkout, with that venv's interpreter (so only the
   installed packages are importable, never the source tree): ``ember --version``, ``ember
   plugins`` (every plugin listed, status ok, at version V), then a tiny program on each device
   (a tensor, add, matmul, sum, a gradient) checked against numpy, and a short run of the
   installed conformance suite (its pytest plugin registers through the installed entry point).

Exit status 0 when all of it passes; otherwise 1, after every step that could run, with the
failing command's output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from email.parser import Parser
from pathlib import Path

import versions
from pip_locked import source_tree_lock

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 600
#: the plugin (``ember plugins`` row) and distribution behind each device kind checked
PLUGINS = {"cpu": "ember-cpu", "opencl": "ember-opencl", "wgpu": "ember-wgpu", "checked": "ember-checked"}
#: a conformance module that runs in seconds on any device
CONFORMANCE_SMOKE = "ember_conformance.test_creation"

PROGRAM = r"""
import importlib.metadata as md, sys
import numpy as np
import ember as em

assert em.__file__.startswith(sys.prefix), f"ember imported from {em.__file__}, not from the venv {sys.prefix}"
assert em.__version__ == md.version("ember"), f"ember.__version__ {em.__version__} != metadata {md.version('ember')}"
dev = em.Device(sys.argv[1]).autodiff()
a_np = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
a = em.tensor(a_np, device=dev, requires_grad=True)
b = em.ones((2, 2), device=dev)
c = (a + b) @ a
s = c.sum()
s.backward()
want = (a_np + 1) @ a_np
np.testing.assert_allclose(c.numpy(), want, rtol=1e-6)
np.testing.assert_allclose(s.item(), want.sum(), rtol=1e-6)
ones = np.ones((2, 2), dtype=np.float32)  # d sum((a + 1) @ a) / da: through each factor of the product
np.testing.assert_allclose(a.grad.numpy(), ones @ a_np.T + (a_np + 1).T @ ones, rtol=1e-6)
print(f"{dev}: (a + 1) @ a = {c.tolist()}, sum = {s.item()}, grad ok")
"""


class Run:
    """Runs the steps and records failures; later steps run where they do not depend on a failed one."""

    def __init__(self) -> None:
        self.failures: list[str] = []
        self.timings: list[tuple[str, float]] = []

    def sh(
        self, what: str, cmd: list, cwd: Path | None = None, env: dict | None = None, show: bool = False
    ) -> str | None:
        """Run ``cmd``: its stdout on success (printed too if ``show``), else None, the failure
        recorded with the command's output."""
        start = time.perf_counter()
        try:
            done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
            ok, stdout, out = done.returncode == 0, done.stdout, done.stdout + done.stderr
            why = f"exit status {done.returncode}"
        except subprocess.TimeoutExpired as exc:
            ok, stdout, out = False, "", f"{exc.stdout or ''}{exc.stderr or ''}"
            why = f"timed out after {TIMEOUT_S} s"
        seconds = time.perf_counter() - start
        self.timings.append((what, seconds))
        print(f"[{'ok' if ok else 'FAIL'}] {what} ({seconds:.1f} s)", flush=True)
        if not ok:
            shown = " ".join("'<program>'" if "\n" in str(arg) else str(arg) for arg in cmd)
            self.fail(f"{what}: {why}\n  $ {shown}\n{_indent(out)}")
            return None
        if show and stdout.strip():
            print(_indent(stdout), flush=True)
        return stdout

    def fail(self, message: str) -> None:
        self.failures.append(message)
        print(f"ERROR: {message}", flush=True)


def _indent(text: str) -> str:
    return "    " + text.strip().replace("\n", "\n    ")


def _project_name(directory: Path) -> str:
    return versions.tomllib.loads((directory / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]


def _check_wheel_metadata(run: Run, wheel: Path, version: str) -> None:
    """The built METADATA carries the version and the pins of pyproject.toml."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(zf.read(name).decode("utf-8"))
    if meta["Version"] != version:
        run.fail(f"{wheel.name}: METADATA says Version {meta['Version']}, [tool.ember] says {version}")
    for req in meta.get_all("Requires-Dist") or []:
        if req.startswith("ember") and f"={version}" not in req:  # ==V, or ~=V for ember-checked
            run.fail(f"{wheel.name}: Requires-Dist {req!r} is not pinned to {version}")


def build(run: Run, config: versions.Config, dist: Path) -> int:
    """Build every sdist, and a wheel from each, into ``dist``; how many distributions built."""
    built = 0
    for rel in config.distributions:
        project = _project_name(ROOT / rel)
        cmd = [sys.executable, "-m", "build", "--outdir", dist, ROOT / rel]
        if run.sh(f"build {project}: sdist, then the wheel from the sdist", cmd) is None:
            continue
        stem = f"{project.replace('-', '_')}-{config.version}"
        sdist, wheel = dist / f"{stem}.tar.gz", dist / f"{stem}-py3-none-any.whl"
        missing = [p.name for p in (sdist, wheel) if not p.is_file()]
        if missing:
            found = sorted(p.name for p in dist.glob(f"{project.replace('-', '_')}-*"))
            run.fail(f"{project}: expected {', '.join(missing)} in {dist} (version {config.version}); found {found}")
            continue
        _check_wheel_metadata(run, wheel, config.version)
        built += 1
    return built


def install(run: Run, venv_python: Path, dist: Path, workdir: Path, requirements: list[str]) -> bool:
    """pip install ``requirements`` with ``dist`` as a find-links source; every ember distribution
    it installs must come from ``dist``."""
    report = workdir / f"pip-report-{len(run.timings)}.json"
    cmd = [venv_python, "-m", "pip", "install", "--find-links", dist, "--report", report, *requirements]
    if run.sh("pip install " + " ".join(f'"{r}"' if "[" in r else r for r in requirements), cmd, cwd=workdir) is None:
        return False
    ok = True
    for item in json.loads(report.read_text(encoding="utf-8"))["install"]:
        name, url = item["metadata"]["name"], item["download_info"]["url"]
        if name.startswith("ember") and not url.startswith(dist.as_uri() + "/"):
            run.fail(f"pip installed {name} from {url}, not from the freshly built {dist}")
            ok = False
    return ok


def check_plugins(run: Run, out: str | None, version: str, kinds: list[str]) -> None:
    """Every expected plugin is a row of ``ember plugins``: its distribution, version V, status ok."""
    if out is None:
        return
    rows = {cells[0]: cells for cells in (line.split() for line in out.splitlines()) if len(cells) >= 6}
    for kind in kinds:
        cells = rows.get(kind)
        if cells is None:
            run.fail(f"`ember plugins` does not list the {kind} plugin ({PLUGINS[kind]})")
        elif cells[2] != PLUGINS[kind] or cells[3] != version or " ".join(cells[5:]) != "ok":
            run.fail(
                f"`ember plugins`: expected `{kind} ... {PLUGINS[kind]} {version} ... ok`, got `{' '.join(cells)}`"
            )


def use_installed(run: Run, venv: Path, version: str, devices: list[str]) -> None:
    """The installed ember, run from a directory outside the checkout with nothing on PYTHONPATH."""
    py, ember = venv / "bin" / "python", venv / "bin" / "ember"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSAFEPATH")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    with tempfile.TemporaryDirectory(prefix="ember-packaging-") as outside:
        cwd = Path(outside)
        out = run.sh("ember --version", [ember, "--version"], cwd=cwd, env=env)
        if out is not None and out.strip() != f"ember {version}":
            run.fail(f"`ember --version` printed {out.strip()!r}, expected 'ember {version}'")
        out = run.sh("ember plugins", [ember, "plugins"], cwd=cwd, env=env, show=True)
        check_plugins(run, out, version, [d.partition(":")[0] for d in devices])
        run.sh("ember devices", [ember, "devices"], cwd=cwd, env=env, show=True)
        for device in devices:
            run.sh(f"tiny program on {device}", [py, "-c", PROGRAM, device], cwd=cwd, env=env, show=True)
        smoke = [
            py,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--pyargs",
            CONFORMANCE_SMOKE,
            "--ember-device=cpu",
        ]
        run.sh(f"the installed conformance plugin: {CONFORMANCE_SMOKE} on cpu", smoke, cwd=cwd, env=env)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, type=Path, help="emptied first; holds dist/ and the venv")
    parser.add_argument("--devices", default="cpu,opencl:0,wgpu:0,checked:0", help="comma-separated device specs")
    parser.add_argument("--lock-dir", type=Path, help="builds take the install lock (pip_locked.py) in this dir")
    args = parser.parse_args(argv)
    devices = args.devices.split(",")
    kinds = [d.partition(":")[0] for d in devices]
    unknown = [k for k in kinds if k not in PLUGINS]
    if unknown:
        parser.error(f"no plugin known for device kind(s) {unknown}; known: {sorted(PLUGINS)}")
    workdir = args.workdir.resolve()
    if workdir == ROOT or ROOT.is_relative_to(workdir):
        parser.error(f"--workdir {workdir} would delete the checkout")
    config = versions.load_config(ROOT)
    shutil.rmtree(workdir, ignore_errors=True)
    dist, venv = workdir / "dist", workdir / "venv"
    dist.mkdir(parents=True)
    start = time.perf_counter()

    run = Run()
    # building an sdist writes *.egg-info into the source tree, as an editable install does
    with source_tree_lock(args.lock_dir) if args.lock_dir else contextlib.nullcontext():
        built = build(run, config, dist)
    artifacts = sorted(str(p) for p in dist.iterdir())
    if artifacts:
        twine = [sys.executable, "-m", "twine", "check", "--strict", *artifacts]
        run.sh(f"twine check --strict: {len(artifacts)} files", twine)
    if built == len(config.distributions) and run.sh("fresh venv", [sys.executable, "-m", "venv", venv]) is not None:
        py, pin = venv / "bin" / "python", f"=={config.version}"
        extras = ",".join(k for k in ("cpu", "opencl", "wgpu") if k in kinds)
        ok = install(run, py, dist, workdir, [f"ember[{extras}]{pin}"])
        more = [f"ember-checked{pin}"] if "checked" in kinds else []
        ok = install(run, py, dist, workdir, [*more, f"ember-conformance{pin}"]) and ok
        if ok:
            use_installed(run, venv, config.version, devices)

    print(f"\npackaging: {len(run.timings)} steps in {time.perf_counter() - start:.0f} s; the slowest:")
    for what, seconds in sorted(run.timings, key=lambda t: -t[1])[:5]:
        print(f"  {seconds:6.1f} s  {what}")
    if run.failures:
        print(f"\npackaging: FAILED, {len(run.failures)} problem(s):", file=sys.stderr)
        for failure in run.failures:
            print(f"- {failure.splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"packaging: ok, version {config.version}: {len(artifacts)} files in {dist}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

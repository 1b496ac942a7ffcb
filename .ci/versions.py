"""One version for every distribution of this checkout: write it, or check that nothing drifted.

    python .ci/versions.py            write the version and the pins into every pyproject.toml
    python .ci/versions.py --check    exit 1, with a diff, if writing would change anything (lint env)

The source of truth is ``[tool.ember] version`` in the root pyproject.toml (the workspace file,
which is never built); ``[tool.ember] distributions`` lists the directories released with it.
To release 0.2.0: edit that one line, run this script, commit what it changed.

What it writes, in each distribution's pyproject.toml:

* ``[project] version``;
* every requirement on an ember distribution (``ember``, ``ember-*``) in ``[project]
  dependencies`` and ``[project.optional-dependencies]``: the core's extras (``ember[cpu]`` ->
  ``ember-cpu==V``), and each plugin's dependency on ``ember``, pinned ``==V``. The core and its
  plugins are released together from this repository and talk through the Backend contract,
  which is internal and changes between releases (0.x), so only the exact same release of each
  is known to work; ``~=V`` (any later patch release) would promise a compatibility nobody tests.
  The one exception is ``examples/third-party-backend`` (ember-checked): it shows how a plugin
  released *outside* this repository should depend on ember, so it gets ``~=V`` (this minor
  release line, a patch release or later: ``>=V, ==MAJOR.MINOR.*``).

It also checks ember's ``__version__``: core/src/ember/__init__.py holds it as a literal, which
this script keeps equal to V (write mode rewrites that line too, --check reports drift); if that
file reads the version from importlib.metadata instead there is nothing to keep.

Why a write-and-check script rather than setuptools' dynamic version (``dynamic = ["version"]``
with ``[tool.setuptools.dynamic] version = {file = "../VERSION"}``): an sdist must build on its
own, and a file outside the distribution's directory is not in its sdist, so the wheel built
from the sdist would fail (or get a wrong version); the extras' pins could not be dynamic at
all. Static values, written from one place and checked in CI, keep every sdist self-contained.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
#: the distributions whose ember requirements are a compatible-release range, not an exact pin
COMPATIBLE_PINS = {"examples/third-party-backend"}
#: a literal ``__version__`` kept equal to the release version (see the docstring)
VERSION_LITERALS = {"core/src/ember/__init__.py": re.compile(r'^(__version__\s*=\s*)"([^"]*)"', re.M)}

_VERSION = re.compile(r"^\d+(\.\d+)+((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")  # PEP 440, public versions
_HEADER = re.compile(r"^\s*\[([^\[\]]+)\]\s*(#.*)?$")
_KEY = re.compile(r'^\s*([A-Za-z0-9_-]+|"[^"]*")\s*=(?!=)')  # a key (not a string in an array)
# a requirement on an ember distribution inside a TOML string: name, [extras], specifier, ; marker
_EMBER_REQ = re.compile(
    r'"(?P<name>ember(?:[-_.][A-Za-z0-9]+)*)\s*(?P<extras>\[[^\]]*\])?'
    r'\s*(?P<spec>(?:[<>=!~][^";]*?)?)\s*(?P<marker>;[^"]*)?"'
)


@dataclass
class Config:
    version: str
    distributions: list[str]


def load_config(root: Path = ROOT) -> Config:
    """``[tool.ember]`` of the root pyproject.toml, validated."""
    data = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    table = data.get("tool", {}).get("ember")
    if not isinstance(table, dict) or "version" not in table or "distributions" not in table:
        raise SystemExit(f"{root / 'pyproject.toml'}: no [tool.ember] table with `version` and `distributions`")
    version, dists = table["version"], table["distributions"]
    if not isinstance(version, str) or not _VERSION.match(version):
        raise SystemExit(f"[tool.ember] version = {version!r} is not a PEP 440 version like 0.2.0")
    if not isinstance(dists, list) or not dists or not all(isinstance(d, str) for d in dists):
        raise SystemExit("[tool.ember] distributions must be a non-empty list of directories")
    return Config(version, dists)


def pin_for(dist: str, version: str) -> str:
    return f"~={version}" if dist in COMPATIBLE_PINS else f"=={version}"


def rewrite_pyproject(text: str, version: str, pin: str) -> str:
    """``text`` with ``[project] version`` set and every ember requirement in the dependency
    tables pinned with ``pin``; comments, order and layout are kept."""
    out, table, key = [], "", ""
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line)
        if header:
            table, key = header.group(1).strip(), ""
            out.append(line)
            continue
        k = _KEY.match(line)
        if k:
            key = k.group(1).strip('"')
        if table == "project" and k and key == "version":
            line = re.sub(r'=\s*"[^"]*"', f'= "{version}"', line, count=1)
        elif (table == "project" and key == "dependencies") or table == "project.optional-dependencies":
            line = _EMBER_REQ.sub(lambda m: f'"{m["name"]}{m["extras"] or ""}{pin}{m["marker"] or ""}"', line)
        out.append(line)
    return "".join(out)


def validate(path: str, text: str, version: str, pin: str) -> list[str]:
    """Problems the rewrite cannot fix: what TOML parsing of the rewritten file says."""
    try:
        project = tomllib.loads(text).get("project", {})
    except tomllib.TOMLDecodeError as exc:
        return [f"{path}: not valid TOML: {exc}"]
    problems = []
    if project.get("version") != version:
        dynamic = " (it is dynamic: make it a static value)" if "version" in project.get("dynamic", []) else ""
        problems.append(f"{path}: [project] version is {project.get('version')!r}, not {version!r}{dynamic}")
    reqs = list(project.get("dependencies", []))
    reqs += [r for group in project.get("optional-dependencies", {}).values() for r in group]
    for req in reqs:
        m = _EMBER_REQ.fullmatch(f'"{req}"')
        if m and m["spec"] != pin:
            problems.append(f"{path}: requirement {req!r} is not pinned {pin}")
    return problems


def planned(root: Path, config: Config) -> tuple[dict[Path, tuple[str, str]], list[str]]:
    """{file: (current text, wanted text)} for every file this script owns, and problems."""
    files: dict[Path, tuple[str, str]] = {}
    problems: list[str] = []
    for dist in config.distributions:
        path = root / dist / "pyproject.toml"
        if not path.is_file():
            problems.append(f"{dist}/pyproject.toml does not exist ([tool.ember] distributions lists {dist!r})")
            continue
        text = path.read_text(encoding="utf-8")
        pin = pin_for(dist, config.version)
        wanted = rewrite_pyproject(text, config.version, pin)
        problems += validate(f"{dist}/pyproject.toml", wanted, config.version, pin)
        files[path] = (text, wanted)
    for rel, pattern in VERSION_LITERALS.items():
        path = root / rel
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            files[path] = (text, pattern.sub(rf'\g<1>"{config.version}"', text, count=1))
    return files, problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    config = load_config()
    files, problems = planned(ROOT, config)
    stale = {path: texts for path, texts in files.items() if texts[0] != texts[1]}
    for path, (old, new) in stale.items():
        rel = path.relative_to(ROOT).as_posix()
        if args.check:
            diff = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}")
            sys.stdout.writelines(diff)
        else:
            path.write_text(new, encoding="utf-8")
            print(f"wrote {rel}")
    for problem in problems:
        print(f"ERROR: {problem}", file=sys.stderr)
    if args.check and stale:
        print(
            f"\nERROR: {len(stale)} file(s) disagree with [tool.ember] version = {config.version!r} in pyproject.toml; "
            "run `python .ci/versions.py` and commit the result",
            file=sys.stderr,
        )
        return 1
    if problems:
        return 1
    names = ", ".join(config.distributions)
    print(f"version {config.version}: {'in step' if args.check else 'written'} in {names}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Run what a reader of the README would run: its Python snippets and every examples/*.py script.

    python .ci/run_examples.py --devices cpu,checked

Each snippet and script runs in a fresh interpreter once per device, with EMBER_DEVICE set to
it. The run fails if anything fails, and also if there is nothing to run. SMOKE_COMMANDS are
short `ember ...` runs; ``{out}`` in them becomes a fresh temporary directory.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 600

#: short end-to-end runs of the `ember` command (arguments after `ember`), each once per device
SMOKE_COMMANDS: list[list[str]] = [
    ["train", "digits", "--epochs", "1", "--no-progress", "--out", "{out}"],
]


def readme_snippets() -> list[tuple[str, str]]:
    """(name, code) of every ```python block of README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    return [(f"README.md python block {i + 1}", code) for i, code in enumerate(blocks)]


def example_scripts() -> list[Path]:
    return sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))


def run(name: str, command: list[str], device: str) -> bool:
    env = dict(os.environ, EMBER_DEVICE=device)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ember-example-") as out:
        command = [arg.replace("{out}", out) for arg in command]
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
            ok, output = done.returncode == 0, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            ok, output = False, f"timed out after {TIMEOUT_S} s\n{exc.stdout or ''}{exc.stderr or ''}"
    print(f"[{'ok' if ok else 'FAIL'}] {name} on {device} ({time.perf_counter() - start:.1f} s)")
    if not ok:
        print("    " + output.strip().replace("\n", "\n    "))
    return ok


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="cpu", help="comma-separated device specs (default: cpu)")
    args = parser.parse_args(argv)
    jobs: list[tuple[str, list[str]]] = [(name, [sys.executable, "-c", code]) for name, code in readme_snippets()]
    jobs += [(str(p.relative_to(ROOT)), [sys.executable, str(p)]) for p in example_scripts()]
    jobs += [("ember " + " ".join(cmd), [sys.executable, "-m", "ember.cli", *cmd]) for cmd in SMOKE_COMMANDS]
    if not jobs:
        print("nothing to run: README.md has no python blocks and examples/ no scripts", file=sys.stderr)
        return 1
    results = [run(name, cmd, dev) for dev in args.devices.split(",") for name, cmd in jobs]
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

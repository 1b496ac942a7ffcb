"""`pip install` under a lock shared by every tox env, so envs may run in parallel.

`tox run-parallel` starts several envs at once; each installs the local distributions in
editable mode, and setuptools writes their ``*.egg-info`` into the shared source tree, so two
installs of one distribution at the same moment can read each other's half-written metadata.
tox's ``install_command`` runs this script instead of pip: installs take turns (they are a small
part of an env's time), tests still run side by side. The lock is an advisory ``flock`` on a file
in tox's work directory, released by the kernel if the process dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def source_tree_lock(lock_dir: Path) -> Iterator[None]:
    """Hold the lock every step that writes build metadata into the source tree takes."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / "pip-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: pip_locked.py LOCK_DIR [pip install arguments...]", file=sys.stderr)
        return 2
    with source_tree_lock(Path(argv[0])):
        return subprocess.call([sys.executable, "-m", "pip", "install", *argv[1:]])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

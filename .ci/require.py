"""Preconditions of the tox envs: stop early, and say why, when something an env needs is missing.

    python .ci/require.py distribution plugins/opencl   the directory holds a distribution
    python .ci/require.py device opencl:0               ember can open that device
    python .ci/require.py cuda                          this machine has an NVIDIA GPU
    python .ci/require.py or-skip cuda:0 CMD...          run CMD when ember can open the device;
                                                        otherwise say why it is skipped and exit 0

Exit status 0 when the requirement holds, 1 with a message on stderr otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DRIVER_HINTS = {
    "opencl": "OpenCL needs a platform driver; on Debian without a GPU: apt-get install pocl-opencl-icd "
    "ocl-icd-libopencl1 (.ci/run does this)",
    "wgpu": "WGPU needs a Vulkan driver; on Debian without a GPU: apt-get install mesa-vulkan-drivers "
    "libvulkan1 (.ci/run does this)",
    "cuda": "CUDA needs an NVIDIA GPU, its driver, and cupy for the driver's CUDA version",
}


def distribution(path: str) -> str | None:
    if (ROOT / path / "pyproject.toml").is_file():
        return None
    return (
        f"{path}/pyproject.toml does not exist: this env tests the distribution in {path}/, "
        f"which this checkout does not have yet. The env fails until it is added."
    )


def device(spec: str) -> str | None:
    import ember

    try:
        info = ember.Device(spec).describe()
    except Exception as exc:  # the error says which plugin failed and why
        hint = DRIVER_HINTS.get(spec.partition(":")[0], "")
        return f"device {spec} is not usable: {type(exc).__name__}: {exc}" + (f"\n{hint}" if hint else "")
    print(f"{spec}: {info}")
    return None


def cuda() -> str | None:
    why = (
        "conformance-cuda runs the suite on a CUDA GPU and needs a machine with an NVIDIA GPU and "
        "its driver (nvidia-smi must list a GPU). It is not part of the default env_list; run "
        "`tox run -e conformance-cuda` on a GPU machine."
    )
    if shutil.which("nvidia-smi") is None:
        return why + " nvidia-smi was not found on this machine."
    done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if done.returncode != 0 or "GPU" not in done.stdout:
        return why + f" nvidia-smi -L found no GPU: {(done.stdout + done.stderr).strip()}"
    print(done.stdout.strip())
    return None


def or_skip(spec: str, *command: str) -> int:
    """Run ``command`` if ``spec`` opens; else a skip with the reason (a GPU env on a machine without one)."""
    problem = device(spec)
    if problem:
        print(f"\nSKIPPED: {' '.join(command)}\n  because {problem}\n", file=sys.stderr)
        return 0
    return subprocess.run(list(command)).returncode


def main(argv: list[str]) -> int:
    if argv[:1] == ["or-skip"] and len(argv) > 2:
        return or_skip(argv[1], *argv[2:])
    checks = {"distribution": distribution, "device": device, "cuda": cuda}
    if not argv or argv[0] not in checks:
        print(__doc__, file=sys.stderr)
        return 2
    problem = checks[argv[0]](*argv[1:])
    if problem:
        print(f"\nERROR: {problem}\n", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

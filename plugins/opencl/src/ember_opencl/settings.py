"""Every setting ember-opencl reads from the environment, in one place (core's are in ``ember.config``).

| variable                      | meaning                                                         | default            |
|-------------------------------|-----------------------------------------------------------------|--------------------|
| EMBER_OPENCL_BUILD_THREADS    | threads building programs in the background (0: none)           | 0                  |
| EMBER_OPENCL_BUILD_PROCESSES  | worker processes compiling programs (0: none)                   | 4 on a cold GPU    |
| EMBER_OPENCL_EARLY_DRIVER     | 0: the driver starts when a device is opened, not at import     | 1                  |
| EMBER_OPENCL_SUB_BUFFERS      | 0: the adaptive pool hands out whole buffers only               | 1                  |
| EMBER_OPENCL_RELEASE          | thread or now: where a buffer's release waits for the queue     | thread on NVIDIA   |
| EMBER_OPENCL_FILL             | 0: constants are uploaded instead of filled by the queue        | 1                  |
| EMBER_OPENCL_PINNED           | 1 / 0: uploads through pinned host buffers                      | 1 on GPUs          |
| EMBER_OPENCL_IN_PLACE         | 0: fused programs never write into a dying operand              | 1                  |
| EMBER_OPENCL_IMPLICIT_CONV    | 1: convolutions as implicit GEMMs on CPU devices too            | 0 (GPUs always)    |
| EMBER_OPENCL_NATIVE_WGRAD     | 0: conv weight gradients by unfold + matmul                     | 1                  |
| EMBER_OPENCL_FLASH            | 0: no flash attention kernels; 1: on CPU devices too            | 1 on GPUs only     |

Most are for measuring one path against another; the README's sections say which change speed.
"""

from __future__ import annotations

from ember.config import env_choice, env_flag, env_int, read_errors

__all__ = [
    "check",
    "build_threads",
    "build_processes",
    "early_driver",
    "sub_buffers",
    "release_mode",
    "fill",
    "pinned",
    "in_place",
    "implicit_conv_on_cpu",
    "native_wgrad",
    "flash",
]


def build_threads() -> int:
    """Threads building programs in the background (``EMBER_OPENCL_BUILD_THREADS``; unset or 0: none)."""
    return env_int("EMBER_OPENCL_BUILD_THREADS", 0, what="threads", example="4", zero="build on the calling thread")


def build_processes() -> int | None:
    """Worker processes compiling programs (``EMBER_OPENCL_BUILD_PROCESSES``; 0: none; unset: None, the
    runtime chooses: :func:`.runtime._auto_build_processes`)."""
    value = env_int("EMBER_OPENCL_BUILD_PROCESSES", -1, what="worker processes", example="4", zero="this process")
    return None if value < 0 else value


def early_driver() -> bool:
    """Whether the OpenCL driver starts on a thread at ember-opencl's import (``EMBER_OPENCL_EARLY_DRIVER=0``: no)."""
    return env_flag("EMBER_OPENCL_EARLY_DRIVER", True)


def sub_buffers() -> bool:
    """Whether the adaptive pool carves blocks out of larger buffers (``EMBER_OPENCL_SUB_BUFFERS=0``: no)."""
    return env_flag("EMBER_OPENCL_SUB_BUFFERS", True)


def release_mode(platform_name: str) -> str:
    """``thread`` (a buffer's last release on a daemon thread: NVIDIA's waits for the queue) or ``now``
    (``EMBER_OPENCL_RELEASE``; unset: thread on NVIDIA's platform, now elsewhere)."""
    return env_choice(
        "EMBER_OPENCL_RELEASE", ("thread", "now"), "thread" if "NVIDIA" in platform_name.upper() else "now"
    )


def fill() -> bool:
    """Whether constants are written by the queue (clEnqueueFillBuffer) rather than uploaded
    (``EMBER_OPENCL_FILL=0``: uploaded, to compare)."""
    return env_flag("EMBER_OPENCL_FILL", True)


def pinned(is_cpu: bool) -> bool:
    """Whether uploads go through pinned host buffers (``EMBER_OPENCL_PINNED``; unset: on GPUs)."""
    return env_flag("EMBER_OPENCL_PINNED", not is_cpu)


def in_place() -> bool:
    """Whether fused programs may write into an operand that dies with them (``EMBER_OPENCL_IN_PLACE=0``: never)."""
    return env_flag("EMBER_OPENCL_IN_PLACE", True)


def implicit_conv_on_cpu() -> bool:
    """Whether CPU devices run convolutions as implicit GEMMs too (``EMBER_OPENCL_IMPLICIT_CONV=1``, to
    test these kernels on a CPU; GPUs always do): on PoCL im2col + the vector matmul is ~10x faster."""
    return env_flag("EMBER_OPENCL_IMPLICIT_CONV", False)


def native_wgrad() -> bool:
    """Whether conv's weight gradient has its own kernel (``EMBER_OPENCL_NATIVE_WGRAD=0``: unfold + matmul)."""
    return env_flag("EMBER_OPENCL_NATIVE_WGRAD", True)


def flash() -> bool | None:
    """Where the flash attention kernels run (``EMBER_OPENCL_FLASH``): None (unset) on GPUs only, the
    composite's vector GEMM being faster on CPU devices; True (1) on every device; False (0) nowhere."""
    return env_flag("EMBER_OPENCL_FLASH", None)


def check() -> list[str]:
    """What ``ember settings`` reports: the values set now that these readers refuse."""
    return read_errors(
        [build_threads, build_processes, early_driver, sub_buffers, lambda: release_mode(""), fill,
         lambda: pinned(False), in_place, implicit_conv_on_cpu, native_wgrad, flash]
    )  # fmt: skip

"""Every setting ember-wgpu reads from the environment, in one place (core's are in ``ember.config``).

| variable                  | meaning                                                           | default            |
|---------------------------|-------------------------------------------------------------------|--------------------|
| EMBER_WGPU_SYNC           | how ``synchronize()`` waits: spin, wait or map                    | spin; wait on CPUs |
| EMBER_WGPU_SPIN_US        | µs a spinning sync polls before it blocks                         | 2000               |
| EMBER_WGPU_SUBMIT_EVERY   | dispatches after which the open batch is submitted (0: at syncs)  | 32; 0 on CPUs      |
| EMBER_WGPU_SUBMIT_GROUPS  | workgroups a batch holds before an early submit                   | 1024               |
| EMBER_WGPU_SUBMIT_IDLE_US | µs between polls for an idle device in a step (0: no polls; GPUs) | 0                  |
| EMBER_WGPU_CHECKS         | 1: kernels keep naga's bounds checks                              | 0                  |
| EMBER_WGPU_RECORDER       | native, public or timed (GPU timestamps per dispatch)             | native             |
| EMBER_WGPU_IN_PLACE       | 0: fused programs never write into a dying operand                | 1                  |
| EMBER_WGPU_IMPLICIT_CONV  | 0: convolutions by core's unfold + matmul                         | 1                  |
| EMBER_WGPU_NATIVE_WGRAD   | 0: conv weight gradients by unfold + matmul                       | 1                  |
| EMBER_WGPU_FLASH          | 0: attention by the composite forward and autodiff's rule         | 1                  |
| EMBER_WGPU_FLASH_BACKWARD | 1: attention's backward by the flash kernels too                  | 0                  |

Most are for measuring one path against another; the README says which change speed. Read when
asked for (a runtime reads its own at start-up), so a test can change the environment first.
"""

from __future__ import annotations

from typing import Any

from ember.config import env_choice, env_flag, env_float, env_int, read_errors

__all__ = [
    "check",
    "sync_mode",
    "spin_seconds",
    "submit_every",
    "submit_groups",
    "submit_idle_s",
    "checked",
    "recorder_kind",
    "in_place",
    "implicit_conv",
    "native_wgrad",
    "flash",
    "flash_backward",
    "MAX_BATCH",
    "SPIN_US",
    "SUBMIT_GROUPS",
    "RECORDERS",
]

#: most dispatches one command batch holds before it is submitted whatever the settings
MAX_BATCH = 2048
#: how long synchronize() spins on a non-blocking poll before it blocks (EMBER_WGPU_SPIN_US)
SPIN_US = 2000
#: workgroups a chunk must hold before it is submitted early (EMBER_WGPU_SUBMIT_GROUPS): an
#: H100 holds ~1-2k resident workgroups; a chain of one-workgroup launches is not worth a submit
SUBMIT_GROUPS = 1024
#: the command recorders (:mod:`.recorder`), the default first
RECORDERS = ("native", "public", "timed")


def sync_mode(device: Any, cpu: bool) -> str:
    """How :meth:`Runtime.synchronize` waits (``EMBER_WGPU_SYNC``): ``spin`` (the default on GPU
    adapters) polls the device without blocking on this thread until its queue is empty (for at most
    ``SPIN_US``, then blocks), the lowest latency; ``wait`` (the default on CPU adapters, whose
    device threads a spinning host thread would slow) blocks in one ``wgpuDevicePoll(wait=True)``;
    ``map`` maps a persistent buffer filled by a copy in the last submit (wgpu-py's ``map_sync``:
    its poll thread, a callback and, for a MAP_READ buffer, an extra empty submit), the public-API
    way, also taken where wgpu-py lacks ``device._poll_wait``."""
    mode = env_choice("EMBER_WGPU_SYNC", ("spin", "wait", "map"), "wait" if cpu else "spin")
    if not callable(getattr(device, "_poll_wait", None)) or getattr(device, "_internal", None) is None:
        return "map"
    return mode


def spin_seconds() -> float:
    """Seconds :meth:`Runtime._spin` polls before it gives up (``EMBER_WGPU_SPIN_US``, microseconds)."""
    return env_int("EMBER_WGPU_SPIN_US", SPIN_US, what="whole microseconds", example="2000") / 1e6


def submit_every(cpu: bool) -> int:
    """Dispatches after which the open batch is submitted without waiting for a sync point
    (``EMBER_WGPU_SUBMIT_EVERY``; 0: only at sync points and every ``MAX_BATCH``). Default 32 on
    GPU adapters, where the device then overlaps the host's recording; 0 on CPU adapters, whose
    device threads share the host's cores."""
    default = 0 if cpu else 32
    every = env_int("EMBER_WGPU_SUBMIT_EVERY", default, what="dispatches", example="32", zero="sync points only")
    return min(every, MAX_BATCH) if every else MAX_BATCH


def submit_groups() -> int:
    """Workgroups a chunk must hold to be submitted before a sync point (``EMBER_WGPU_SUBMIT_GROUPS``)."""
    return env_int("EMBER_WGPU_SUBMIT_GROUPS", SUBMIT_GROUPS, what="a number of workgroups", example="1024")


def submit_idle_s() -> float:
    """Seconds between polls for an idle device within a step (``EMBER_WGPU_SUBMIT_IDLE_US``, in µs;
    unset or 0: no polls): see :meth:`Runtime.set_submit_every`."""
    us = env_float("EMBER_WGPU_SUBMIT_IDLE_US", 0.0, what="microseconds between polls", example="50", zero="off")
    return us * 1e-6


def checked() -> bool:
    """Whether kernels keep naga's runtime checks (``EMBER_WGPU_CHECKS=1``): bounds clamps on every
    array access and loop bounding. Off by default where wgpu-native can drop them (:mod:`.trusted`):
    ember's kernels guard their own indices."""
    return env_flag("EMBER_WGPU_CHECKS", False)


def recorder_kind() -> str:
    """The recorder ``EMBER_WGPU_RECORDER`` asks for (unset: ``native``)."""
    return env_choice("EMBER_WGPU_RECORDER", RECORDERS, RECORDERS[0])


def in_place() -> bool:
    """Whether fused programs may write into an operand that dies with them (``EMBER_WGPU_IN_PLACE=0``:
    never, to measure what the offer saves)."""
    return env_flag("EMBER_WGPU_IN_PLACE", True)


def implicit_conv() -> bool:
    """Whether convolutions run as implicit GEMMs (``EMBER_WGPU_IMPLICIT_CONV=0``: core's unfold +
    matmul composite, to compare)."""
    return env_flag("EMBER_WGPU_IMPLICIT_CONV", True)


def native_wgrad() -> bool:
    """Whether conv's weight gradient runs as its own kernel (``EMBER_WGPU_NATIVE_WGRAD=0``: unfold + matmul)."""
    return env_flag("EMBER_WGPU_NATIVE_WGRAD", True)


def flash() -> bool:
    """Whether the flash attention kernels run (``EMBER_WGPU_FLASH=0``: the composite forward)."""
    return env_flag("EMBER_WGPU_FLASH", True)


def flash_backward() -> bool:
    """Whether attention's backward runs through the flash kernels (``EMBER_WGPU_FLASH_BACKWARD=1``)."""
    return env_flag("EMBER_WGPU_FLASH_BACKWARD", False)


def check() -> list[str]:
    """What ``ember settings`` reports: the values set now that these readers refuse."""
    return read_errors(
        [lambda: sync_mode(None, False), spin_seconds, lambda: submit_every(False), submit_groups,
         submit_idle_s, checked, recorder_kind, in_place, implicit_conv, native_wgrad, flash, flash_backward]
    )  # fmt: skip

"""Queue profiling for the opencl probe scripts (kernel_time, conv_time, skinny_time, gemm_layout_time):
importing it makes every pyopencl queue a profiling one and notes each kernel launch, ember's own
(``Kernel.__call__``) and em.jit's replays (``enqueue_nd_range_kernel``), as (label, event) in
:data:`EVENTS`; the label is the kernel's name, with its launch grid when :data:`BY_GRID` is set.
Import it before ember opens a device. Not a test, not part of the package."""

from __future__ import annotations

from typing import Any

import pyopencl as cl

__all__ = ["EVENTS", "BY_GRID", "gpu_us"]

#: (label, event) per launch since the last clear
EVENTS: list[tuple[str, Any]] = []
#: label launches "name (global) / (local)": GEMMs of different shapes then read apart
BY_GRID = False

_Queue = cl.CommandQueue
_kernel_call = cl.Kernel.__call__
_enqueue_nd = cl.enqueue_nd_range_kernel


def gpu_us(event: Any) -> float:
    """The event's kernel time on the device, µs."""
    return (event.profile.end - event.profile.start) * 1e-3


def _label(knl: Any, grid: Any) -> str:
    if not BY_GRID or not grid:
        return knl.function_name
    return f"{knl.function_name} {tuple(grid[0])} / {tuple(grid[1]) if len(grid) > 1 and grid[1] else '-'}"


def _profiling_queue(context: Any, device: Any = None, properties: Any = None) -> Any:
    return _Queue(context, device, properties=cl.command_queue_properties.PROFILING_ENABLE)


def _record(knl: Any, *a: Any, **k: Any) -> Any:
    event = _kernel_call(knl, *a, **k)
    EVENTS.append((_label(knl, a[1:3]), event))
    return event


def _record_nd(queue: Any, knl: Any, *a: Any, **k: Any) -> Any:
    event = _enqueue_nd(queue, knl, *a, **k)
    EVENTS.append((_label(knl, a[0:2]), event))
    return event


cl.CommandQueue = _profiling_queue  # type: ignore[misc]
cl.Kernel.__call__ = _record  # type: ignore[method-assign]
cl.enqueue_nd_range_kernel = _record_nd

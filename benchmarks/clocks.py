"""The NVIDIA GPU's SM clock beside a timed row, read through ``nvidia-smi`` (None where there is none).

An H100 lowers its SM clock to 345-495 MHz when idle for about a second and, under a light load, can
stay there for many seconds (plugins/wgpu/logs/h100-2026-12-07-ninth: 14 s at 345 MHz inside one run of
the runner), so a row's time depends on a clock nobody set. The runner reads the clock right before and
right after each row's timed steps and says so in the row where it was below :data:`LOW` of its maximum.
"""

from __future__ import annotations

import shutil
import subprocess

__all__ = ["LOW", "sm_clock", "span", "low_text"]

#: a clock below this fraction of the maximum is reported with the row
LOW = 0.9


def sm_clock(index: int = 0) -> tuple[int, int] | None:
    """(current, maximum) SM clock in MHz of NVIDIA GPU ``index``, or None (no nvidia-smi, no such GPU)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    query = ["--query-gpu=clocks.sm,clocks.max.sm", "--format=csv,noheader,nounits", "-i", str(index)]
    try:
        done = subprocess.run([exe, *query], capture_output=True, text=True, timeout=10, check=False)
        current, most = (int(v.strip()) for v in done.stdout.strip().splitlines()[0].split(","))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return current, most


def span(before: tuple[int, int] | None, after: tuple[int, int] | None) -> dict[str, int] | None:
    """The record a row keeps (``sm_clock_mhz``): the clock before and after its timed steps and the
    maximum; None where either reading failed."""
    if before is None or after is None:
        return None
    return {"before": before[0], "after": after[0], "max": before[1]}


def low_text(record: dict[str, int] | None) -> str | None:
    """What a row's note says of a :func:`span` record below :data:`LOW` of the maximum, else None."""
    if not record or min(record["before"], record["after"]) >= LOW * record["max"]:
        return None
    return f"SM clock {record['before']}->{record['after']} of {record['max']} MHz"

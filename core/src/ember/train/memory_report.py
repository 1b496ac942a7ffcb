"""Device memory over a training run: a Learner callback that samples ``memory_stats()`` after every
optimizer step into ``memory.csv``, and the plot of reserved vs in use (``memory.png``) that it and
``ember memory-report`` draw. matplotlib (the ``train`` extra) is needed for the plot only."""

from __future__ import annotations

import csv
import os
import time
from pathlib import Path
from typing import Any

from ..errors import DataError, DataFileNotFoundError, MissingDependencyError

__all__ = ["MemoryReport", "read_memory_csv", "plot_memory", "FIELDS"]

#: the columns of memory.csv: the step, seconds since the first sample, and MemoryStats' byte counts
FIELDS = ("step", "seconds", "reserved_bytes", "in_use_bytes", "peak_reserved_bytes", "peak_in_use_bytes")

_MIB = 2**20


class MemoryReport:
    """``LearnerBuilder.callback(MemoryReport())``: one row per optimizer step in ``memory.csv`` and,
    every ``plot_every`` seconds and when ``fit`` ends, ``memory.png`` beside ``metrics.png``.

    ``directory`` defaults to the learner's log directory (``log_dir``, else the checkpoint
    directory). A device that cannot measure (``in_use_bytes`` None, e.g. the CPU backend) is
    recorded as empty cells and the plot says so.
    """

    def __init__(self, directory: str | os.PathLike | None = None, *, plot_every: float = 30.0) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.plot_every = plot_every
        self.rows: list[dict[str, Any]] = []
        self.strategy: str | None = None
        self.device = ""
        self._start: float | None = None
        self._last_plot = time.perf_counter()

    def _dir(self, learner: Any) -> Path:
        directory = self.directory or getattr(learner, "log_dir", None)
        if directory is None:
            raise DataError(
                "MemoryReport: no directory to write memory.csv to; pass MemoryReport(directory) or give "
                "the learner a log_dir / checkpoint directory"
            )
        return Path(directory)

    def __call__(self, learner: Any) -> None:
        device = learner.device
        stats = device.memory_stats()
        now = time.perf_counter()
        if self._start is None:
            self._start = now
        self.strategy = stats.get("strategy")
        self.device = f"{device.kind}:{device.index}"
        row = {"step": learner.step, "seconds": round(now - self._start, 4)}
        row.update({k: stats.get(k) for k in FIELDS[2:]})
        self.rows.append(row)
        directory = self._dir(learner)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "memory.csv"
        new = not path.is_file() or len(self.rows) == 1
        with open(path, "w" if new else "a", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS)
            if new:
                writer.writeheader()
            writer.writerow(row)
        if now - self._last_plot > self.plot_every:
            self.plot(learner)

    def plot(self, learner: Any) -> Path | None:
        """Draw ``memory.png`` from the rows so far (None without matplotlib: the CSV is still written)."""
        self._last_plot = time.perf_counter()
        try:
            return plot_memory(self.rows, self._dir(learner) / "memory.png", title=self._title())
        except MissingDependencyError:
            return None

    def close(self, learner: Any) -> None:
        """Called by ``Learner.fit`` when it returns: the final plot."""
        if self.rows:
            self.plot(learner)

    def _title(self) -> str:
        return f"{self.device} memory ({self.strategy or 'not pooled'})"


def read_memory_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The rows of a ``memory.csv`` (empty cells -> None)."""
    p = Path(path)
    if p.is_dir():
        p = p / "memory.csv"
    if not p.is_file():
        raise DataFileNotFoundError(
            f"memory-report: {p} does not exist; train with the MemoryReport callback "
            f"(LearnerBuilder.callback(MemoryReport())) to write it"
        )
    with open(p, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [k for k in ("step", "reserved_bytes", "in_use_bytes") if k not in (reader.fieldnames or ())]
        if missing:
            raise DataError(
                f"memory-report: {p} lacks the column(s) {', '.join(missing)} (expected {', '.join(FIELDS)})"
            )
        rows = []
        for raw in reader:
            rows.append(
                {k: (float(v) if k == "seconds" else int(v)) if v not in ("", None) else None for k, v in raw.items()}
            )
    return rows


def plot_memory(rows: list[dict[str, Any]], png: str | os.PathLike, *, title: str = "device memory") -> Path:
    """Reserved and in use (MiB) against the step, with their running peaks, saved as ``png``."""
    try:
        import matplotlib  # optional and heavy: only the plot needs it

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError(
            'plotting memory needs matplotlib: pip install "ember[train]" (or pip install matplotlib)'
        ) from None
    out = Path(png)
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    measured = [r for r in rows if r.get("in_use_bytes") is not None]
    if measured:
        steps = [r["step"] for r in measured]
        for key, label, style in (
            ("reserved_bytes", "reserved", "-"),
            ("in_use_bytes", "in use", "-"),
            ("peak_reserved_bytes", "peak reserved", ":"),
            ("peak_in_use_bytes", "peak in use", ":"),
        ):
            ys = [(r.get(key) or 0) / _MIB for r in measured]
            ax.plot(steps, ys, style, label=label)
        ax.set_ylabel("MiB")
        ax.legend()
    else:
        ax.text(0.5, 0.5, "this device does not count its memory", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, out)
    return out

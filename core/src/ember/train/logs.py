"""Training logs: a JSONL and a CSV of epoch metrics, and a PNG plot of the curves."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["MetricsLog"]


class MetricsLog:
    """Appends one JSON line per record to ``metrics.jsonl``; rewrites ``metrics.csv`` and
    ``metrics.png`` from the epoch records. Survives restarts: ``truncate(step)`` drops
    records written after a checkpoint that training is resuming from."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.jsonl = self.dir / "metrics.jsonl"
        self.csv = self.dir / "metrics.csv"
        self.png = self.dir / "metrics.png"

    def records(self, kind: str | None = None) -> list[dict[str, Any]]:
        if not self.jsonl.is_file():
            return []
        out = []
        for line in self.jsonl.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut short by a crash
            if kind is None or rec.get("kind") == kind:
                out.append(rec)
        return out

    def append(self, record: dict[str, Any]) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with open(self.jsonl, "a", encoding="utf-8") as f:
            f.write(json.dumps(clean) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def truncate(self, step: int, epoch: int | None = None) -> None:
        """Keep only records up to ``step`` (and epoch rows up to ``epoch``), one row per epoch.

        Called when training resumes from a checkpoint taken there: rows written after it, by a
        run that was killed, would otherwise be written again.
        """
        keep: list[dict[str, Any]] = []
        seen: dict[Any, int] = {}
        for r in self.records():
            try:
                if int(r.get("step", 0)) > step:
                    continue
            except (TypeError, ValueError):
                continue
            if r.get("kind") == "epoch":
                if epoch is not None and not (isinstance(r.get("epoch"), int) and r["epoch"] <= epoch):
                    continue
                if r.get("epoch") in seen:  # a duplicate left by an older ember: keep the later row
                    keep[seen[r["epoch"]]] = r
                    continue
                seen[r.get("epoch")] = len(keep)
            keep.append(r)
        data = "".join(json.dumps(r) + "\n" for r in keep)
        if self.jsonl.is_file() and self.jsonl.read_text(encoding="utf-8", errors="replace") == data:
            return
        tmp = self.jsonl.with_suffix(".jsonl.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.jsonl)

    def write_csv(self) -> None:
        rows = self.records("epoch")
        if not rows:
            return
        fields = sorted({k for r in rows for k in r if k != "kind"}, key=lambda k: (k not in ("epoch", "step"), k))
        tmp = self.csv.with_suffix(".csv.tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.csv)

    def plot(self) -> Path | None:
        """Draw one panel per metric (train and valid curves over epochs); None without matplotlib."""
        rows = self.records("epoch")
        if not rows:
            return None
        try:
            import matplotlib  # optional and heavy: only plot() needs it

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        names = sorted(
            {k.split("_", 1)[1] for r in rows for k in r if k.startswith(("train_", "valid_"))} - {"seconds"}
        )
        if not names:
            return None
        cols = min(3, len(names))
        nrows = -(-len(names) // cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
        for ax, name in zip(axes.flat, names):
            for split in ("train", "valid"):
                pts = [(r["epoch"], r[f"{split}_{name}"]) for r in rows if r.get(f"{split}_{name}") is not None]
                if pts:
                    xs, ys = zip(*pts)
                    ax.plot(xs, ys, marker="o", markersize=3, label=split)
            ax.set_title(name)
            ax.set_xlabel("epoch")
            ax.grid(alpha=0.3)
            ax.legend()
        for ax in list(axes.flat)[len(names) :]:
            ax.axis("off")
        fig.tight_layout()
        tmp = self.png.with_suffix(".tmp.png")
        fig.savefig(tmp, dpi=110)
        plt.close(fig)
        os.replace(tmp, self.png)
        return self.png

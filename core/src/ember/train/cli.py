"""``ember train TASK``: train a bundled example on any device, with checkpoints and resume."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..data.loader import DataLoader
from ..device import Device
from ..random import seed
from .learner import LearnerBuilder
from .tasks import TASKS

__all__ = ["main", "run"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ember train",
        description="Train a bundled example model. Checkpoints, metrics.jsonl/csv and metrics.png go to --out.",
    )
    p.add_argument("task", choices=sorted(TASKS), help="digits (CNN), reverse (Transformer), tabular (MLP on a CSV)")
    p.add_argument(
        "--device", default=None, help="device spec, e.g. cpu, opencl:0, wgpu (default: EMBER_DEVICE or cpu)"
    )
    p.add_argument("--epochs", type=int, default=None, help="number of epochs (default: the task's recipe)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: the task's recipe)")
    p.add_argument("--seed", type=int, default=0, help="seed of ember's random stream (same numbers on every device)")
    p.add_argument("--out", default=None, help="output directory (default: runs/TASK)")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    p.add_argument("--checkpoint-every-steps", type=int, default=None, help="also checkpoint every N optimizer steps")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--csv", default=None, help="tabular: the CSV file to learn from")
    p.add_argument("--target", default=None, help="tabular: the column to predict")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Build the task and train it; returns the final metrics."""
    out = Path(args.out or f"runs/{args.task}")
    device = Device(args.device) if args.device else Device.default()
    seed(args.seed)
    kwargs: dict[str, Any] = {"lr": args.lr, "epochs": args.epochs}
    if args.task == "tabular":
        kwargs.update(csv=args.csv, target=args.target, out=out)
    task = TASKS[args.task](device.autodiff(), **kwargs)
    bs = args.batch_size or task.batch_size
    train = DataLoader(task.train, batch_size=bs, shuffle=True, seed=args.seed, device=device)
    valid = DataLoader(task.valid, batch_size=256, device=device)
    builder = (
        LearnerBuilder(task.model)
        .optimizer(task.optimizer)
        .loss(task.loss)
        .metrics(*task.metrics)
        .checkpoint(out, every=1, every_steps=args.checkpoint_every_steps, keep=3)
        .epochs(task.epochs)
        .model_config(task.model_config)
        .progress(not args.no_progress)
    )
    if task.scheduler is not None:
        builder = builder.scheduler(task.scheduler)
    learner = builder.build()
    print(f"ember train {task.name} on {device} ({device.describe().get('name', '')}), output in {out}/",
          file=sys.stderr)  # fmt: skip
    start = time.perf_counter()
    history = learner.fit(train, valid, resume=args.resume)
    final = {k: v for k, v in history[-1].items() if k not in ("kind",)} if history else {}
    final["seconds"] = round(time.perf_counter() - start, 2)
    final["checkpoint"] = str(learner.checkpoint_dir)
    print(json.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in final.items()}))
    return final


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        run(args)
    except KeyboardInterrupt:
        print("interrupted; resume with --resume", file=sys.stderr)
        return 130
    except ImportError as exc:
        print(f"ember train: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

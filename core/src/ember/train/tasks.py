"""The bundled example tasks behind ``ember train``: data, model and recipe for each.

- ``digits``: a small CNN on scikit-learn's bundled 8x8 handwritten digits (no download).
- ``reverse``: a Transformer encoder that learns to reverse token sequences (synthetic data).
- ``tabular``: an MLP regressor on a CSV file (scikit-learn's bundled diabetes table by default).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .. import nn, optim
from ..data.dataset import InMemoryDataset
from ..data.files import CsvDataset
from ..errors import InvalidArgumentError, MissingDependencyError
from ..ops.nn import cross_entropy
from .metrics import F1, MAE, RMSE, Accuracy

__all__ = ["Task", "TASKS", "digits", "reverse", "tabular"]


@dataclass
class Task:
    """Everything ``ember train`` needs for one example."""

    name: str
    train: Any
    valid: Any
    model: Any
    model_config: dict[str, Any]
    loss: Callable[[Any, Any], Any]
    metrics: list[Any]
    optimizer: Callable[[Any], Any]
    epochs: int
    batch_size: int
    scheduler: Callable[[Any], Any] | None = None
    monitor: str = "valid_loss"
    summary: dict[str, str] = field(default_factory=dict)


def _need_sklearn(task: str) -> Any:
    try:
        import sklearn.datasets as datasets  # optional and heavy: only the example tasks need it
    except ImportError:
        raise MissingDependencyError(
            f"ember train {task} uses scikit-learn's bundled datasets: pip install scikit-learn "
            f"(it is in the root requirements.txt)"
        ) from None
    return datasets


def digits(device: Any, lr: float | None = None, epochs: int | None = None) -> Task:
    """CNN on the 1,797 8x8 digit images; reaches ~98% validation accuracy in 20 epochs."""
    data = _need_sklearn("digits").load_digits()
    x = (data.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = data.target.astype(np.int64)
    train, valid = InMemoryDataset(x, y).split(0.8, 0.2, seed=0)
    model = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, device=device),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1, device=device),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128, device=device),
        nn.ReLU(),
        nn.Dropout(0.25),
        nn.Linear(128, 10, device=device),
    )
    config = {"task": "digits", "layers": "conv32-conv64-maxpool-fc128-fc10", "input": [1, 8, 8]}
    return Task(
        "digits", train, valid, model, config, cross_entropy, [Accuracy(), F1(10)],
        lambda params: optim.Adam(params, lr=lr or 2e-3), epochs or 20, 64, monitor="valid_accuracy",
    )  # fmt: skip


class ReverseModel(nn.Module):
    """Embedding + sinusoidal positions + Transformer encoder + per-position classifier."""

    def __init__(self, vocab: int, length: int, d_model: int, heads: int, layers: int, device: Any) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model, device=device)
        self.pos = nn.SinusoidalPositionalEncoding(d_model, max_len=length)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, dropout=0.0, batch_first=True, norm_first=True,
            device=device,
        )  # fmt: skip
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(d_model, vocab, device=device)

    def forward(self, tokens: Any) -> Any:
        h = self.encoder(self.pos(self.embed(tokens)))
        return self.head(h).moveaxis(-1, 1)  # (N, vocab, L): cross-entropy takes classes on axis 1


def reverse(device: Any, lr: float | None = None, epochs: int | None = None) -> Task:
    """Learn to output each sequence reversed (needs attention across positions)."""
    vocab, length = 12, 10
    rng = np.random.default_rng(0)
    seqs = rng.integers(0, vocab, size=(6000, length)).astype(np.int64)
    train, valid = InMemoryDataset(seqs, seqs[:, ::-1].copy()).split(0.9, 0.1, seed=0)
    model = ReverseModel(vocab, length, d_model=64, heads=4, layers=2, device=device)
    config = {"task": "reverse", "vocab": vocab, "length": length, "d_model": 64, "heads": 4, "layers": 2}
    return Task(
        "reverse", train, valid, model, config, cross_entropy, [Accuracy()],
        lambda params: optim.AdamW(params, lr=lr or 1e-3, weight_decay=0.01), epochs or 15, 64,
        monitor="valid_accuracy",
    )  # fmt: skip


def tabular(
    device: Any,
    lr: float | None = None,
    epochs: int | None = None,
    csv: str | None = None,
    target: str | None = None,
    out: Path | None = None,
) -> Task:
    """MLP regression on a CSV; without ``csv`` it writes scikit-learn's diabetes table first."""
    if csv is None:
        data = _need_sklearn("tabular").load_diabetes()
        path = Path(out or ".") / "diabetes.csv"
        path.parent.mkdir(parents=True, exist_ok=True)
        header = ",".join(list(data.feature_names) + ["progression"])
        np.savetxt(path, np.column_stack([data.data, data.target]), delimiter=",", header=header, comments="")
        csv, target = os.fspath(path), "progression"
    if target is None:
        raise InvalidArgumentError("ember train tabular: --target names the column to predict in --csv")
    table = CsvDataset(csv, target=target)
    feats = table.features
    mean, std = feats.mean(0), feats.std(0) + 1e-8
    t = np.asarray(table.targets, dtype=np.float32)
    t_mean, t_std = float(t.mean()), float(t.std() + 1e-8)
    ds = InMemoryDataset(((feats - mean) / std).astype(np.float32), ((t - t_mean) / t_std).astype(np.float32))
    train, valid = ds.split(0.8, 0.2, seed=0)
    d = feats.shape[1]
    model = nn.Sequential(
        nn.Linear(d, 64, device=device), nn.ReLU(), nn.Linear(64, 64, device=device), nn.ReLU(),
        nn.Linear(64, 1, device=device), nn.Flatten(0),
    )  # fmt: skip

    def mse(output: Any, target: Any) -> Any:
        return ((output - target) ** 2).mean()

    config = {"task": "tabular", "features": table.feature_names, "target": target, "hidden": [64, 64],
              "target_mean": t_mean, "target_std": t_std}  # fmt: skip
    return Task(
        "tabular", train, valid, model, config, mse, [MAE(), RMSE()],
        lambda params: optim.Adam(params, lr=lr or 1e-3), epochs or 60, 32,
        summary={"note": "metrics are in units of the standardised target"},
    )  # fmt: skip


TASKS: dict[str, Callable[..., Task]] = {"digits": digits, "reverse": reverse, "tabular": tabular}

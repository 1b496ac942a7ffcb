"""Metrics accumulated over an epoch: loss, accuracy, top-k, precision/recall/F1, MAE/RMSE,
perplexity. Each keeps host-side sums (one small readback per batch) and ``compute()``s a float."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError, MissingMethodError

__all__ = ["Metric", "Loss", "Accuracy", "TopKAccuracy", "Precision", "Recall", "F1", "MAE", "RMSE", "Perplexity"]


def _np(x: Any) -> np.ndarray:
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x)


class Metric:
    """Base class: ``reset()``, ``update(output, target, loss)``, ``compute() -> float``."""

    name = "metric"
    higher_is_better = True

    def reset(self) -> None:
        raise MissingMethodError(f"{type(self).__name__}: a Metric subclass implements reset()")

    def update(self, output: Any, target: Any, loss: float | None = None) -> None:
        raise MissingMethodError(f"{type(self).__name__}: a Metric subclass implements update(output, target, loss)")

    def compute(self) -> float:
        raise MissingMethodError(f"{type(self).__name__}: a Metric subclass implements compute()")

    def state(self) -> dict[str, Any]:
        """The running sums, for checkpoints taken mid-epoch."""
        return {k: v for k, v in vars(self).items() if not k.startswith("_")}

    def load_state(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Loss(Metric):
    """Mean of the per-batch loss, weighted by batch size."""

    name = "loss"
    higher_is_better = False

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0.0
        self.count = 0

    def update(self, output: Any, target: Any, loss: float | None = None) -> None:
        if loss is None:
            return
        n = len(_np(target)) if target is not None and np.ndim(_np(target)) else 1
        self.total += float(loss) * n
        self.count += n

    def compute(self) -> float:
        return self.total / self.count if self.count else float("nan")


def _classes(output: Any) -> np.ndarray:
    out = _np(output)
    return out.argmax(axis=1) if out.ndim > 1 else (out > 0).astype(np.int64)


class Accuracy(Metric):
    """Fraction of argmax predictions equal to the integer target (class axis 1)."""

    name = "accuracy"

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.correct = 0
        self.count = 0

    def update(self, output: Any, target: Any, loss: float | None = None) -> None:
        pred = _classes(output)
        t = _np(target)
        self.correct += int((pred == t).sum())
        self.count += int(t.size)

    def compute(self) -> float:
        return self.correct / self.count if self.count else float("nan")


class TopKAccuracy(Metric):
    """Fraction of targets among the ``k`` highest scores."""

    higher_is_better = True

    def __init__(self, k: int = 5) -> None:
        self.k = k
        self.name = f"top{k}_accuracy"
        self.reset()

    def reset(self) -> None:
        self.correct = 0
        self.count = 0

    def update(self, output: Any, target: Any, loss: float | None = None) -> None:
        out = _np(output)
        t = _np(target)
        top = np.argsort(-out, axis=1, kind="stable")[:, : self.k]
        self.correct += int((top == t[:, None]).any(axis=1).sum())
        self.count += int(t.size)

    def compute(self) -> float:
        return self.correct / self.count if self.count else float("nan")


class _Confusion(Metric):
    """Per-class true/false positives and false negatives, macro-averaged."""

    def __init__(self, num_classes: int, average: str = "macro") -> None:
        if average not in ("macro", "micro"):
            raise InvalidArgumentError(f"{type(self).__name__}: average must be 'macro' or 'micro', got {average!r}")
        self.num_classes = num_classes
        self.average = average
        self.reset()

    def reset(self) -> None:
        self.tp = [0] * self.num_classes
        self.fp = [0] * self.num_classes
        self.fn = [0] * self.num_classes

    def update(self, output: Any, target: Any, loss: float | None = None) -> None:
        pred = _classes(output).reshape(-1)
        t = _np(target).reshape(-1)
        for c in range(self.num_classes):
            self.tp[c] += int(((pred == c) & (t == c)).sum())
            self.fp[c] += int(((pred == c) & (t != c)).sum())
            self.fn[c] += int(((pred != c) & (t == c)).sum())

    def _pr(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tp, fp, fn = (np.asarray(v, dtype=np.float64) for v in (self.tp, self.fp, self.fn))
        if self.average == "micro":
            tp, fp, fn = tp.sum(keepdims=True), fp.sum(keepdims=True), fn.sum(keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(tp + fp > 0, tp / (tp + fp), 0.0)
            recall = np.where(tp + fn > 0, tp / (tp + fn), 0.0)
            f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
        return precision, recall, f1


class Precision(_Confusion):
    name = "precision"

    def compute(self) -> float:
        return float(self._pr()[0].mean())


class Recall(_Confusion):
    name = "recall"

    def compute(self) -> float:
        return float(self._pr()[1].mean())


class F1(_Confusion):
    name = "f1"

    def compute(self) -> float:
        return float(self._pr()[2].mean())


class MAE(Metric):
    """Mean absolute error of regression outputs."""

    name = "mae"
    higher_is_better = False

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total = 0.0
        self.count = 0

    def update(self, output: Any, target: Any, loss: float | None = None) -> None:
        o = _np(output).astype(np.float64).reshape(-1)
        t = _np(target).astype(np.float64).reshape(-1)
        self.total += float(np.abs(o - t).sum())
        self.count += t.size

    def compute(self) -> float:
        return self.total / self.count if self.count else float("nan")


class RMSE(MAE):
    """Root mean squared error of regression outputs."""

    name = "rmse"

    def update(self, output: Any, target: Any, loss: float | None = None) -> None:
        o = _np(output).astype(np.float64).reshape(-1)
        t = _np(target).astype(np.float64).reshape(-1)
        self.total += float(((o - t) ** 2).sum())
        self.count += t.size

    def compute(self) -> float:
        return math.sqrt(self.total / self.count) if self.count else float("nan")


class Perplexity(Loss):
    """exp of the mean cross-entropy loss (language models)."""

    name = "perplexity"

    def compute(self) -> float:
        mean = super().compute()
        return math.exp(mean) if math.isfinite(mean) else float("nan")

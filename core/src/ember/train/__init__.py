"""Training: the Learner and its builder, metrics, checkpoints, logs, and ``ember train``."""

from .checkpoint import Checkpoint, latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from .learner import EarlyStopping, Learner, LearnerBuilder
from .logs import MetricsLog
from .memory_report import MemoryReport
from .metrics import F1, MAE, RMSE, Accuracy, Loss, Metric, Perplexity, Precision, Recall, TopKAccuracy

__all__ = [
    "Learner",
    "LearnerBuilder",
    "EarlyStopping",
    "Metric",
    "Loss",
    "Accuracy",
    "TopKAccuracy",
    "Precision",
    "Recall",
    "F1",
    "MAE",
    "RMSE",
    "Perplexity",
    "MetricsLog",
    "MemoryReport",
    "Checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "list_checkpoints",
]

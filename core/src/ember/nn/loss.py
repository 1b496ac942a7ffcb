"""Loss modules: ``criterion = nn.CrossEntropyLoss(); loss = criterion(logits, target)``."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from ..tensor import Tensor
from . import losses
from .module import Module

__all__ = [
    "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss",
    "BCEWithLogitsLoss", "KLDivLoss",
]  # fmt: skip


class _Loss(Module):
    def __init__(self, reduction: str = "mean", **extra: Any) -> None:
        super().__init__()
        if reduction not in ("mean", "sum", "none", "batchmean"):
            raise InvalidArgumentError(
                f"{type(self).__name__}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}"
            )
        self.reduction = reduction
        for name, value in extra.items():
            if isinstance(value, Tensor):
                self.register_buffer(name, value)
            else:
                setattr(self, name, value)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits (N, C, ...) against class indices or probabilities."""

    def __init__(
        self,
        weight: Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__(reduction, weight=weight, ignore_index=ignore_index, label_smoothing=label_smoothing)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return losses.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing)


class NLLLoss(_Loss):
    """Negative log-likelihood of log-probabilities (N, C, ...) at class indices (N, ...)."""

    def __init__(self, weight: Tensor | None = None, ignore_index: int = -100, reduction: str = "mean") -> None:
        super().__init__(reduction, weight=weight, ignore_index=ignore_index)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return losses.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class MSELoss(_Loss):
    """Mean squared error."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return losses.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """Mean absolute error."""

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return losses.l1_loss(input, target, self.reduction)


class SmoothL1Loss(_Loss):
    """Quadratic below ``beta``, linear above."""

    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__(reduction, beta=beta)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return losses.smooth_l1_loss(input, target, self.reduction, self.beta)


class HuberLoss(_Loss):
    """Quadratic below ``delta``, linear (slope delta) above."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__(reduction, delta=delta)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return losses.huber_loss(input, target, self.reduction, self.delta)


class BCELoss(_Loss):
    """Binary cross-entropy of probabilities."""

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean") -> None:
        super().__init__(reduction, weight=weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return losses.binary_cross_entropy(input, target, self.weight, self.reduction)


class BCEWithLogitsLoss(_Loss):
    """Binary cross-entropy of logits, computed stably."""

    def __init__(self, weight: Tensor | None = None, reduction: str = "mean", pos_weight: Tensor | None = None) -> None:
        super().__init__(reduction, weight=weight, pos_weight=pos_weight)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return losses.binary_cross_entropy_with_logits(input, target, self.weight, self.reduction, self.pos_weight)


class KLDivLoss(_Loss):
    """KL divergence of log-probabilities ``input`` from ``target``; reduction may be 'batchmean'."""

    def __init__(self, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__(reduction, log_target=log_target)

    def forward(self, input: Tensor, target: Tensor) -> Tensor:
        return losses.kl_div(input, target, self.reduction, self.log_target)

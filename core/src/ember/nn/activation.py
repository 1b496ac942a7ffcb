"""Activation layers: thin modules over the functional forms."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgumentError
from ..tensor import Tensor
from . import functional as F
from .config import Config
from .module import Module

__all__ = [
    "ReLU", "ReLUConfig", "GELU", "GELUConfig", "SiLU", "SiLUConfig", "Tanh", "TanhConfig",
    "Sigmoid", "SigmoidConfig", "Softmax", "SoftmaxConfig", "LogSoftmax", "LogSoftmaxConfig",
    "LeakyReLU", "LeakyReLUConfig", "ELU", "ELUConfig", "Softplus", "SoftplusConfig", "Mish", "MishConfig",
]  # fmt: skip


@dataclass
class ReLUConfig(Config):
    """max(x, 0)."""


class ReLU(Module):
    """max(x, 0)."""

    config_class = ReLUConfig

    def __init__(self) -> None:
        super().__init__()
        self._config = ReLUConfig()

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


@dataclass
class GELUConfig(Config):
    """Gaussian error linear unit; approximate is 'none' (erf) or 'tanh'."""

    approximate: str = "none"


class GELU(Module):
    """x * Phi(x), exact (``approximate='none'``) or with the tanh approximation."""

    config_class = GELUConfig

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise InvalidArgumentError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self._config = GELUConfig(approximate)
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)


@dataclass
class SiLUConfig(Config):
    """x * sigmoid(x)."""


class SiLU(Module):
    """x * sigmoid(x) (swish)."""

    config_class = SiLUConfig

    def __init__(self) -> None:
        super().__init__()
        self._config = SiLUConfig()

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


@dataclass
class TanhConfig(Config):
    """tanh(x)."""


class Tanh(Module):
    """tanh(x)."""

    config_class = TanhConfig

    def __init__(self) -> None:
        super().__init__()
        self._config = TanhConfig()

    def forward(self, x: Tensor) -> Tensor:
        return F.tanh(x)


@dataclass
class SigmoidConfig(Config):
    """1 / (1 + exp(-x))."""


class Sigmoid(Module):
    """1 / (1 + exp(-x))."""

    config_class = SigmoidConfig

    def __init__(self) -> None:
        super().__init__()
        self._config = SigmoidConfig()

    def forward(self, x: Tensor) -> Tensor:
        return F.sigmoid(x)


@dataclass
class SoftmaxConfig(Config):
    """exp(x) / sum(exp(x)) along dim."""

    dim: int = -1


class Softmax(Module):
    """exp(x) / sum(exp(x)) along ``dim`` (default the last axis)."""

    config_class = SoftmaxConfig

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self._config = SoftmaxConfig(dim)
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.softmax(x, self.dim)


@dataclass
class LogSoftmaxConfig(Config):
    """x - logsumexp(x) along dim."""

    dim: int = -1


class LogSoftmax(Module):
    """x - logsumexp(x) along ``dim``."""

    config_class = LogSoftmaxConfig

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self._config = LogSoftmaxConfig(dim)
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return F.log_softmax(x, self.dim)


@dataclass
class LeakyReLUConfig(Config):
    """x where x > 0, else negative_slope * x."""

    negative_slope: float = 0.01


class LeakyReLU(Module):
    """x where x > 0, else ``negative_slope * x``."""

    config_class = LeakyReLUConfig

    def __init__(self, negative_slope: float = 0.01) -> None:
        super().__init__()
        self._config = LeakyReLUConfig(negative_slope)
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)


@dataclass
class ELUConfig(Config):
    """x where x > 0, else alpha * (exp(x) - 1)."""

    alpha: float = 1.0


class ELU(Module):
    """x where x > 0, else ``alpha * (exp(x) - 1)``."""

    config_class = ELUConfig

    def __init__(self, alpha: float = 1.0) -> None:
        super().__init__()
        self._config = ELUConfig(alpha)
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return F.elu(x, self.alpha)


@dataclass
class SoftplusConfig(Config):
    """log(1 + exp(beta x)) / beta."""

    beta: float = 1.0


class Softplus(Module):
    """log(1 + exp(beta x)) / beta, without overflow."""

    config_class = SoftplusConfig

    def __init__(self, beta: float = 1.0) -> None:
        super().__init__()
        self._config = SoftplusConfig(beta)
        self.beta = beta

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta)


@dataclass
class MishConfig(Config):
    """x * tanh(softplus(x))."""


class Mish(Module):
    """x * tanh(softplus(x))."""

    config_class = MishConfig

    def __init__(self) -> None:
        super().__init__()
        self._config = MishConfig()

    def forward(self, x: Tensor) -> Tensor:
        return F.mish(x)

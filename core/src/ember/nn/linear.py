"""Linear, Identity, Flatten, Embedding and Dropout layers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import DTypeError, InvalidArgumentError
from ..ops.movement import flatten
from ..shapes import as_int
from ..tensor import Tensor
from . import functional as F
from . import init
from ._util import new_param, uniform_param
from .config import Config
from .module import Module, Parameter

__all__ = [
    "Linear", "LinearConfig", "Identity", "IdentityConfig", "Flatten", "FlattenConfig",
    "Embedding", "EmbeddingConfig", "Dropout", "DropoutConfig",
]  # fmt: skip


@dataclass
class LinearConfig(Config):
    """y = x W^T + b with W of shape (out_features, in_features)."""

    in_features: int
    out_features: int
    bias: bool = True


class Linear(Module):
    """Fully connected layer: y = x W^T + b. Weight and bias are uniform on +-1/sqrt(in_features).

    >>> import ember as em
    >>> from ember import nn
    >>> nn.Linear(4, 2)(em.ones((3, 4))).shape
    (3, 2)
    """

    config_class = LinearConfig

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device: Any = None, dtype: Any = None
    ) -> None:
        super().__init__()
        for arg, v in (("in_features", in_features), ("out_features", out_features)):
            if as_int(v, "Linear", arg) < 0:
                raise InvalidArgumentError(f"Linear: {arg} must be >= 0, got {v!r}")
        self._config = LinearConfig(in_features, out_features, bias)
        self.in_features, self.out_features = in_features, out_features
        w = new_param((out_features, in_features), device, dtype)
        self.weight = Parameter(init.kaiming_uniform_(w, a=math.sqrt(5)))
        if bias:
            self.bias = uniform_param((out_features,), 1 / math.sqrt(in_features) if in_features else 0, device, dtype)
        else:
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias, name="Linear")


@dataclass
class IdentityConfig(Config):
    """Returns its input."""


class Identity(Module):
    """Returns its input unchanged (a placeholder layer)."""

    config_class = IdentityConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()
        self._config = IdentityConfig()

    def forward(self, x: Any) -> Any:
        return x


@dataclass
class FlattenConfig(Config):
    """Flattens axes start_dim..end_dim into one."""

    start_dim: int = 1
    end_dim: int = -1


class Flatten(Module):
    """Flattens axes ``start_dim..end_dim`` (by default all but the batch axis)."""

    config_class = FlattenConfig

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self._config = FlattenConfig(start_dim, end_dim)
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return flatten(x, self.start_dim, self.end_dim)


@dataclass
class EmbeddingConfig(Config):
    """A lookup table of num_embeddings vectors of size embedding_dim."""

    num_embeddings: int
    embedding_dim: int
    padding_idx: int | None = None


class Embedding(Module):
    """Maps integer ids (any shape) to rows of a (num_embeddings, embedding_dim) table, init N(0, 1).

    The ``padding_idx`` row starts at zero and receives no gradient.
    """

    config_class = EmbeddingConfig

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        for arg, v in (("num_embeddings", num_embeddings), ("embedding_dim", embedding_dim)):
            if as_int(v, "Embedding", arg) < 1:
                raise InvalidArgumentError(f"Embedding: {arg} must be >= 1, got {v!r}")
        self._config = EmbeddingConfig(num_embeddings, embedding_dim, padding_idx)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise InvalidArgumentError(f"Embedding: padding_idx={padding_idx} is outside [0, {num_embeddings})")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        w = init.normal_(new_param((num_embeddings, embedding_dim), device, dtype))
        if padding_idx is not None:
            w[padding_idx] = 0.0
        self.weight = Parameter(w)

    def forward(self, indices: Tensor) -> Tensor:
        if not isinstance(indices, Tensor) or indices.dtype.kind not in "iu":
            got = indices.dtype if isinstance(indices, Tensor) else type(indices).__name__
            raise DTypeError(f"Embedding: expected a tensor of integer ids, got {got}")
        return F.embedding(indices, self.weight, self.padding_idx)


@dataclass
class DropoutConfig(Config):
    """Zeroes elements with probability p while training."""

    p: float = 0.5


class Dropout(Module):
    """Zeroes each element with probability ``p`` in training mode, scaling the rest by 1/(1-p)."""

    config_class = DropoutConfig

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise InvalidArgumentError(f"Dropout: p must be in [0, 1], got {p}")
        self._config = DropoutConfig(p)
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.p, self.training)

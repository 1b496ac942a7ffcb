"""Position encodings: rotary (RoPE) for queries and keys, and fixed sinusoidal ones.

The tables are computed on the host in float64 and cast, so they are identical on every device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..creation import tensor
from ..device import device_arg
from ..errors import InvalidArgumentError, ShapeError
from ..ops.indexing import take
from ..ops.movement import concat, stack
from ..tensor import Tensor
from ._util import param_dtype
from .config import Config
from .module import Module

__all__ = [
    "RotaryEmbedding", "RotaryEmbeddingConfig", "SinusoidalPositionalEncoding", "SinusoidalPositionalEncodingConfig",
    "sinusoidal_table",
]  # fmt: skip


def _rotary_tables(length: int, dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    inv_freq = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    angles = np.arange(length, dtype=np.float64)[:, None] * inv_freq[None, :]
    return np.cos(angles), np.sin(angles)


@dataclass
class RotaryEmbeddingConfig(Config):
    """Rotary position embedding of the first dim features (dim even); interleaved pairs or halves."""

    dim: int
    base: float = 10000.0
    interleaved: bool = False
    max_seq_len: int = 2048


class RotaryEmbedding(Module):
    """Rotary position embedding (RoPE) applied to queries and keys of shape (..., L, D).

    Feature pairs of the first ``dim`` features are rotated by ``position * base**(-2i/dim)``.
    ``interleaved=False`` pairs feature i with i + dim/2 (GPT-NeoX / Hugging Face "rotate half");
    ``interleaved=True`` pairs 2i with 2i+1 (RoFormer, Meta LLaMA). Features past ``dim`` pass
    through. Positions start at ``offset`` (for decoding with a cache) or are given explicitly.

    >>> import ember as em
    >>> from ember import nn
    >>> rope = nn.RotaryEmbedding(8)
    >>> q = em.ones((2, 4, 5, 8))                 # (N, heads, L, head_dim)
    >>> rope(q).shape
    (2, 4, 5, 8)
    """

    config_class = RotaryEmbeddingConfig

    def __init__(
        self,
        dim: int,
        base: float = 10000.0,
        interleaved: bool = False,
        max_seq_len: int = 2048,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if dim < 2 or dim % 2:
            raise InvalidArgumentError(f"RotaryEmbedding: dim must be a positive even number, got {dim}")
        self._config = RotaryEmbeddingConfig(dim, base, interleaved, max_seq_len)
        self.dim, self.base, self.interleaved, self.max_seq_len = dim, base, interleaved, max_seq_len
        self._build(max_seq_len, device_arg(device), param_dtype(dtype))

    def _build(self, length: int, device: Any, dtype: Any) -> None:
        cos, sin = _rotary_tables(length, self.dim, self.base)
        self.register_buffer("cos_cached", tensor(cos, dtype=dtype, device=device), persistent=False)
        self.register_buffer("sin_cached", tensor(sin, dtype=dtype, device=device), persistent=False)

    def _tables(self, length: int, offset: int, positions: Tensor | None) -> tuple[Tensor, Tensor]:
        cos, sin = self.cos_cached, self.sin_cached
        if positions is not None:
            need = int(positions.max().item()) + 1
        else:
            need = offset + length
        if need > cos.shape[0]:
            self._build(max(need, 2 * cos.shape[0]), cos.device, cos.dtype)
            cos, sin = self.cos_cached, self.sin_cached
        if positions is not None:
            return take(cos, positions, axis=0), take(sin, positions, axis=0)
        return cos[offset : offset + length], sin[offset : offset + length]

    def forward(self, x: Tensor, offset: int = 0, positions: Tensor | None = None) -> Tensor:
        """``x`` (..., L, D) with D >= dim, rotated by position; ``positions`` (L,) overrides offset."""
        if not isinstance(x, Tensor) or x.ndim < 2 or x.shape[-1] < self.dim:
            got = x.shape if isinstance(x, Tensor) else type(x).__name__
            raise ShapeError(f"RotaryEmbedding: expected input of shape (..., L, D) with D >= {self.dim}, got {got}")
        length = x.shape[-2]
        if positions is not None and positions.shape != (length,):
            raise ShapeError(f"RotaryEmbedding: positions must have shape ({length},) (L,), got {positions.shape}")
        cos, sin = self._tables(length, offset, positions)
        if cos.dtype is not x.dtype:
            cos, sin = cos.astype(x.dtype), sin.astype(x.dtype)
        half = self.dim // 2
        rot, rest = x[..., : self.dim], x[..., self.dim :]
        if self.interleaved:
            pairs = rot.reshape(rot.shape[:-1] + (half, 2))
            a, b = pairs[..., 0], pairs[..., 1]
            out = stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(rot.shape)
        else:
            a, b = rot[..., :half], rot[..., half:]
            out = concat([a * cos - b * sin, b * cos + a * sin], axis=-1)
        return out if rest.shape[-1] == 0 else concat([out, rest], axis=-1)

    def rotate(self, q: Tensor, k: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """Both queries and keys rotated (the usual use inside attention)."""
        return self(q, offset), self(k, offset)


def sinusoidal_table(length: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """PE[p, 2i] = sin(p / base**(2i/d)), PE[p, 2i+1] = cos(p / base**(2i/d)), float64 (length, d_model)."""
    pos = np.arange(length, dtype=np.float64)[:, None]
    div = base ** (np.arange(0, d_model, 2, dtype=np.float64) / d_model)
    pe = np.zeros((length, d_model))
    pe[:, 0::2] = np.sin(pos / div)
    pe[:, 1::2] = np.cos(pos / div)[:, : d_model // 2]
    return pe


@dataclass
class SinusoidalPositionalEncodingConfig(Config):
    """Adds the fixed sin/cos table of "Attention Is All You Need" to (N, L, d_model) inputs."""

    d_model: int
    max_len: int = 5000
    base: float = 10000.0
    batch_first: bool = True


class SinusoidalPositionalEncoding(Module):
    """x + PE[offset : offset + L] for x of shape (N, L, d_model) (``batch_first``), (L, N, d_model)
    or (L, d_model)."""

    config_class = SinusoidalPositionalEncodingConfig

    def __init__(
        self,
        d_model: int,
        max_len: int = 5000,
        base: float = 10000.0,
        batch_first: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self._config = SinusoidalPositionalEncodingConfig(d_model, max_len, base, batch_first)
        self.d_model, self.max_len, self.base, self.batch_first = d_model, max_len, base, batch_first
        table = sinusoidal_table(max_len, d_model, base)
        self.register_buffer("pe", tensor(table, dtype=param_dtype(dtype), device=device_arg(device)), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        if not isinstance(x, Tensor) or x.ndim not in (2, 3) or x.shape[-1] != self.d_model:
            got = x.shape if isinstance(x, Tensor) else type(x).__name__
            layout = "(N, L, d_model)" if self.batch_first else "(L, N, d_model)"
            raise ShapeError(
                f"SinusoidalPositionalEncoding: expected input of shape {layout} or (L, d_model) with "
                f"d_model={self.d_model}, got {got}"
            )
        seq_axis = 1 if (self.batch_first and x.ndim == 3) else 0
        length = x.shape[seq_axis]
        if offset + length > self.pe.shape[0]:
            table = sinusoidal_table(offset + length, self.d_model, self.base)
            self.register_buffer("pe", tensor(table, dtype=self.pe.dtype, device=self.pe.device), persistent=False)
        pe = self.pe[offset : offset + length]
        if pe.dtype is not x.dtype:
            pe = pe.astype(x.dtype)
        if seq_axis == 0 and x.ndim == 3:
            pe = pe.reshape((length, 1, self.d_model))
        return x + pe

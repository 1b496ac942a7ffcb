"""Multi-head attention (PyTorch's ``nn.MultiheadAttention`` semantics and parameter names)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..creation import arange, zeros
from ..errors import DTypeError, InvalidArgumentError, ShapeError
from ..ops.linalg import matmul
from ..ops.movement import expand_dims, squeeze
from ..tensor import Tensor
from . import functional as F
from . import fused_ops, init
from ._util import new_param
from .config import Config
from .linear import Linear
from .module import Module, Parameter

__all__ = ["MultiHeadAttention", "MultiHeadAttentionConfig", "causal_mask"]


def causal_mask(size: int, device: Any = None) -> Tensor:
    """A boolean (size, size) mask that is True above the diagonal: the positions to hide."""
    idx = arange(size, device=device)
    return idx.reshape((1, size)) > idx.reshape((size, 1))


@dataclass
class MultiHeadAttentionConfig(Config):
    """Attention with num_heads heads of size embed_dim / num_heads; kdim/vdim default to embed_dim."""

    embed_dim: int
    num_heads: int
    dropout: float = 0.0
    bias: bool = True
    kdim: int | None = None
    vdim: int | None = None
    batch_first: bool = False


class MultiHeadAttention(Module):
    """Multi-head attention: ``out, weights = mha(query, key, value)``.

    Inputs are (L, N, E) or, with ``batch_first=True``, (N, L, E) (also unbatched (L, E)).
    Masks follow PyTorch: a boolean ``attn_mask`` ((L, S) or (N * num_heads, L, S)) and
    ``key_padding_mask`` ((N, S)) are True where attention is *not* allowed; float masks are
    added to the scores. ``is_causal=True`` hides future positions. ``key``/``value`` default
    to ``query`` (self-attention). ``need_weights=False`` skips the weights (returned as None)
    and uses the fused ``scaled_dot_product_attention``.

    >>> import ember as em
    >>> from ember import nn
    >>> mha = nn.MultiHeadAttention(8, 2, batch_first=True)
    >>> out, w = mha(em.ones((3, 5, 8)))
    >>> out.shape, w.shape
    ((3, 5, 8), (3, 5, 5))
    """

    config_class = MultiHeadAttentionConfig

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if num_heads < 1 or embed_dim % num_heads:
            raise InvalidArgumentError(
                f"MultiHeadAttention: embed_dim={embed_dim} must be divisible by num_heads={num_heads}"
            )
        self._config = MultiHeadAttentionConfig(embed_dim, num_heads, dropout, bias, kdim, vdim, batch_first)
        self.embed_dim, self.num_heads, self.dropout, self.batch_first = embed_dim, num_heads, dropout, batch_first
        self.head_dim = embed_dim // num_heads
        self.kdim = embed_dim if kdim is None else kdim
        self.vdim = embed_dim if vdim is None else vdim
        self._same_dims = self.kdim == embed_dim and self.vdim == embed_dim
        if self._same_dims:
            w = new_param((3 * embed_dim, embed_dim), device, dtype)
            self.in_proj_weight = Parameter(init.xavier_uniform_(w))
        else:
            for name, d in (("q_proj_weight", embed_dim), ("k_proj_weight", self.kdim), ("v_proj_weight", self.vdim)):
                self.register_parameter(name, Parameter(init.xavier_uniform_(new_param((embed_dim, d), device, dtype))))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(init.zeros_(new_param((3 * embed_dim,), device, dtype)))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dtype)
        if bias:
            init.zeros_(self.out_proj.bias)

    def _projections(self) -> tuple[tuple[Tensor, Tensor | None], ...]:
        e = self.embed_dim
        b = self.in_proj_bias
        biases = (None, None, None) if b is None else (b[:e], b[e : 2 * e], b[2 * e :])
        if self._same_dims:
            w = self.in_proj_weight
            weights = (w[:e], w[e : 2 * e], w[2 * e :])
        else:
            weights = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)
        return tuple(zip(weights, biases))

    def _mask(
        self, attn_mask: Any, key_padding_mask: Any, is_causal: bool, n: int, lq: int, s: int, like: Tensor
    ) -> Tensor | None:
        """One additive float mask broadcastable to (N, H, L, S), or None."""
        h = self.num_heads
        total: Tensor | None = None

        def additive(m: Tensor, what: str) -> Tensor:
            if m.dtype.kind == "b":
                return zeros(m.shape, dtype=like.dtype, device=like.device).masked_fill(m, float("-inf"))
            if not m.dtype.is_floating:
                raise DTypeError(f"MultiHeadAttention: {what} must be boolean or floating-point, got {m.dtype}")
            return m.astype(like.dtype) if m.dtype is not like.dtype else m

        if attn_mask is not None:
            if attn_mask.shape == (lq, s):
                m = attn_mask.reshape((1, 1, lq, s))
            elif attn_mask.shape == (n * h, lq, s):
                m = attn_mask.reshape((n, h, lq, s))
            else:
                raise ShapeError(
                    f"MultiHeadAttention: attn_mask must have shape ({lq}, {s}) or ({n * h}, {lq}, {s}) "
                    f"(L, S) / (N * num_heads, L, S), got {attn_mask.shape}"
                )
            total = additive(m, "attn_mask")
        if key_padding_mask is not None:
            if key_padding_mask.shape != (n, s):
                raise ShapeError(
                    f"MultiHeadAttention: key_padding_mask must have shape ({n}, {s}) (N, S), "
                    f"got {key_padding_mask.shape}"
                )
            m = additive(key_padding_mask.reshape((n, 1, 1, s)), "key_padding_mask")
            total = m if total is None else total + m
        if is_causal:
            m = additive(causal_mask(max(lq, s), like.device)[:lq, :s].reshape((1, 1, lq, s)), "causal mask")
            total = m if total is None else total + m
        return total

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        need_weights: bool = True,
        attn_mask: Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """(output, attention weights or None); weights are (N, L, S), or (N, H, L, S) unaveraged."""
        key = query if key is None else key
        value = key if value is None else value
        layout = "(N, L, E)" if self.batch_first else "(L, N, E)"
        for name, t, width in (("query", query, self.embed_dim), ("key", key, self.kdim), ("value", value, self.vdim)):
            if not isinstance(t, Tensor) or t.ndim not in (2, 3) or t.shape[-1] != width:
                got = t.shape if isinstance(t, Tensor) else type(t).__name__
                raise ShapeError(
                    f"MultiHeadAttention: expected {name} of shape {layout} or unbatched (L, E) with "
                    f"E={width}, got {got}"
                )
        batched = query.ndim == 3
        if not batched:
            query, key, value = (expand_dims(t, 0) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = expand_dims(key_padding_mask, 0)
        elif not self.batch_first:
            query, key, value = (t.swapaxes(0, 1) for t in (query, key, value))
        n, lq, _ = query.shape
        s = key.shape[1]
        if key.shape[0] != n or value.shape[:2] != key.shape[:2]:
            raise ShapeError(
                f"MultiHeadAttention: query, key and value must share the batch size and key/value the "
                f"length; got {query.shape}, {key.shape}, {value.shape} (as (N, L, E))"
            )
        (wq, bq), (wk, bk), (wv, bv) = self._projections()
        h, d = self.num_heads, self.head_dim

        def heads(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
            y = F.linear(x, w, b, name="MultiHeadAttention")
            return y.reshape((n, y.shape[1], h, d)).permute((0, 2, 1, 3))

        q, k, v = heads(query, wq, bq), heads(key, wk, bk), heads(value, wv, bv)
        mask = self._mask(attn_mask, key_padding_mask, is_causal, n, lq, s, q)
        drop = self.dropout if self.training else 0.0
        weights = None
        if need_weights or drop:
            scores = matmul(q, k.mT) * (1.0 / math.sqrt(d))
            if mask is not None:
                scores = scores + mask
            p = F.dropout(F.softmax(scores, -1), drop, training=bool(drop))
            out = matmul(p, v)
            if need_weights:
                weights = p.mean(axis=1) if average_attn_weights else p
        else:
            # ember-fused's flash-style fused_attention where installed and the device has it
            out = fused_ops.attention(q, k, v, mask, F.scaled_dot_product_attention)
        out = self.out_proj(out.permute((0, 2, 1, 3)).reshape((n, lq, self.embed_dim)))
        if not batched:
            out = squeeze(out, 0)
            weights = None if weights is None else squeeze(weights, 0)
        elif not self.batch_first:
            out = out.swapaxes(0, 1)
        return out, weights

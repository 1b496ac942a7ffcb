"""Transformer encoder and decoder layers and stacks (PyTorch structure and parameter names)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import InvalidArgumentError
from ..tensor import Tensor
from . import functional as F
from . import fused_ops
from .attention import MultiHeadAttention
from .config import Config, as_config
from .containers import ModuleList
from .linear import Dropout, Linear
from .module import Module
from .normalization import LayerNorm, LayerNormConfig

__all__ = [
    "TransformerEncoderLayer", "TransformerEncoderLayerConfig", "TransformerEncoder", "TransformerEncoderConfig",
    "TransformerDecoderLayer", "TransformerDecoderLayerConfig", "TransformerDecoder", "TransformerDecoderConfig",
]  # fmt: skip

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


@dataclass
class _LayerConfig(Config):
    d_model: int
    nhead: int
    dim_feedforward: int = 2048
    dropout: float = 0.1
    activation: str = "relu"
    layer_norm_eps: float = 1e-5
    batch_first: bool = False
    norm_first: bool = False
    bias: bool = True


@dataclass
class TransformerEncoderLayerConfig(_LayerConfig):
    """Self-attention then a feed-forward block, each with a residual and LayerNorm (post- or pre-norm)."""


@dataclass
class TransformerDecoderLayerConfig(_LayerConfig):
    """Self-attention, attention over the encoder memory, then feed-forward; residuals and LayerNorms."""


class _Layer(Module):
    """The parts shared by encoder and decoder layers: attention, feed-forward, norms, dropouts."""

    config_class: ClassVar[type[_LayerConfig]]
    #: whether the layer attends over an encoder memory (a second attention, norm and dropout)
    decoder = False

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        config = self.config_class(
            d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, norm_first, bias
        )
        decoder = self.decoder
        if config.activation not in _ACTIVATIONS:
            raise InvalidArgumentError(
                f"{type(self).__name__}: activation must be 'relu' or 'gelu', got {config.activation!r}"
            )
        self._config = config
        c = config
        self.norm_first, self.activation = c.norm_first, c.activation
        kw = {"device": device, "dtype": dtype}
        mha = {"dropout": c.dropout, "bias": c.bias, "batch_first": c.batch_first, **kw}
        self.self_attn = MultiHeadAttention(c.d_model, c.nhead, **mha)
        if decoder:
            self.multihead_attn = MultiHeadAttention(c.d_model, c.nhead, **mha)
        self.linear1 = Linear(c.d_model, c.dim_feedforward, bias=c.bias, **kw)
        self.dropout = Dropout(c.dropout)
        self.linear2 = Linear(c.dim_feedforward, c.d_model, bias=c.bias, **kw)
        for i in range(1, 4 if decoder else 3):
            setattr(self, f"norm{i}", LayerNorm(c.d_model, eps=c.layer_norm_eps, bias=c.bias, **kw))
        for i in range(1, 4 if decoder else 3):
            setattr(self, f"dropout{i}", Dropout(c.dropout))

    def _ff_block(self, x: Tensor) -> Tensor:
        act = _ACTIVATIONS[self.activation]
        # fused_ops: ember-fused's fused_linear where installed and the device has it
        h = fused_ops.linear_activation(x, self.linear1, self.activation, act)
        return self.dropout2(self.linear2(self.dropout(h)))

    def _sa_block(self, x: Tensor, mask: Any, padding: Any, causal: bool) -> Tensor:
        out, _ = self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=padding, need_weights=False, is_causal=causal)
        return self.dropout1(out)


class TransformerEncoderLayer(_Layer):
    """One encoder block. ``norm_first=False`` (post-norm) is the original Transformer; inputs as in
    MultiHeadAttention: (L, N, E), or (N, L, E) with ``batch_first``.

    >>> import ember as em
    >>> from ember import nn
    >>> layer = nn.TransformerEncoderLayer(16, 4, dim_feedforward=32, batch_first=True)
    >>> layer(em.ones((2, 7, 16))).shape
    (2, 7, 16)
    """

    config_class = TransformerEncoderLayerConfig

    def forward(
        self,
        src: Tensor,
        src_mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        # fused_ops.add_norm: (norm(x + branch), x + branch), ember-fused's row kernel where installed
        if self.norm_first:
            normed, x = fused_ops.add_norm(self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal), x,
                                           self.norm2)  # fmt: skip
            return x + self._ff_block(normed)
        x = fused_ops.add_norm(self._sa_block(x, src_mask, src_key_padding_mask, is_causal), x, self.norm1)[0]
        return fused_ops.add_norm(self._ff_block(x), x, self.norm2)[0]


class TransformerDecoderLayer(_Layer):
    """One decoder block: masked self-attention, attention over ``memory``, feed-forward."""

    config_class = TransformerDecoderLayerConfig
    decoder = True

    def _ff_block(self, x: Tensor) -> Tensor:
        act = _ACTIVATIONS[self.activation]
        return self.dropout3(self.linear2(self.dropout(act(self.linear1(x)))))

    def _mha_block(self, x: Tensor, memory: Tensor, mask: Any, padding: Any, causal: bool) -> Tensor:
        out, _ = self.multihead_attn(
            x, memory, memory, attn_mask=mask, key_padding_mask=padding, need_weights=False, is_causal=causal
        )
        return self.dropout2(out)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
        x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
        return self.norm3(x + self._ff_block(x))


def _stack(layer: Any, num_layers: int, device: Any, dtype: Any) -> ModuleList:
    """``num_layers`` layers: fresh ones from a config, or deep copies of a module (as PyTorch does)."""
    if isinstance(layer, Config):
        return ModuleList(layer.init(device, dtype) for _ in range(num_layers))
    return ModuleList(copy.deepcopy(layer) for _ in range(num_layers))


def _norm(norm: Any, device: Any, dtype: Any) -> Module | None:
    return norm.init(device, dtype) if isinstance(norm, Config) else norm


class _Stack(Module):
    """What TransformerEncoder and TransformerDecoder share: the layers, the optional norm, the config."""

    config_class: ClassVar[type[TransformerEncoderConfig | TransformerDecoderConfig]]

    def __init__(self, layer: Any, num_layers: int, norm: Any, device: Any, dtype: Any) -> None:
        super().__init__()
        self.num_layers = num_layers
        self.layers = _stack(layer, num_layers, device, dtype)
        self.register_module("norm", _norm(norm, device, dtype))

    def config(self) -> TransformerEncoderConfig | TransformerDecoderConfig:
        norm = self.norm.config() if self.norm is not None else None
        return self.config_class(self.layers[0].config(), self.num_layers, norm)  # type: ignore[arg-type]


@dataclass
class TransformerEncoderConfig(Config):
    """num_layers encoder layers built from encoder_layer (each initialised independently), then an optional norm."""

    encoder_layer: TransformerEncoderLayerConfig
    num_layers: int
    norm: LayerNormConfig | None = None

    def __post_init__(self) -> None:
        self.encoder_layer = as_config(self.encoder_layer, TransformerEncoderLayerConfig)
        self.norm = as_config(self.norm, LayerNormConfig)


class TransformerEncoder(_Stack):
    """A stack of encoder layers. ``encoder_layer`` is a layer (copied ``num_layers`` times, as in
    PyTorch, so all start equal) or a TransformerEncoderLayerConfig (each layer initialised afresh).
    """

    config_class = TransformerEncoderConfig

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer | TransformerEncoderLayerConfig,
        num_layers: int,
        norm: Module | LayerNormConfig | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(encoder_layer, num_layers, norm, device, dtype)

    def forward(
        self,
        src: Tensor,
        mask: Tensor | None = None,
        src_key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
    ) -> Tensor:
        x = src
        for layer in self.layers:
            x = layer(x, mask, src_key_padding_mask, is_causal)
        return x if self.norm is None else self.norm(x)


@dataclass
class TransformerDecoderConfig(Config):
    """num_layers decoder layers built from decoder_layer, then an optional norm."""

    decoder_layer: TransformerDecoderLayerConfig
    num_layers: int
    norm: LayerNormConfig | None = None

    def __post_init__(self) -> None:
        self.decoder_layer = as_config(self.decoder_layer, TransformerDecoderLayerConfig)
        self.norm = as_config(self.norm, LayerNormConfig)


class TransformerDecoder(_Stack):
    """A stack of decoder layers (``decoder_layer`` copied, or built from a config per layer)."""

    config_class = TransformerDecoderConfig

    def __init__(
        self,
        decoder_layer: TransformerDecoderLayer | TransformerDecoderLayerConfig,
        num_layers: int,
        norm: Module | LayerNormConfig | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        super().__init__(decoder_layer, num_layers, norm, device, dtype)

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        tgt_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        tgt_key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
    ) -> Tensor:
        x = tgt
        for layer in self.layers:
            x = layer(
                x,
                memory,
                tgt_mask,
                memory_mask,
                tgt_key_padding_mask,
                memory_key_padding_mask,
                tgt_is_causal,
                memory_is_causal,
            )
        return x if self.norm is None else self.norm(x)

"""ember.nn: layers, models and losses, PyTorch-shaped, with Burn-style configs.

``from ember import nn``; functional forms in ``nn.functional`` (``import ember.nn.functional as F``),
initialisers in ``nn.init``. Every layer ``X`` has an ``XConfig`` dataclass with ``.init(device)``.

>>> import ember as em
>>> from ember import nn
>>> dev = em.Device.cpu().autodiff()
>>> model = nn.Sequential(nn.Linear(4, 8, device=dev), nn.ReLU(), nn.Linear(8, 2, device=dev))
>>> model(em.ones((3, 4), device=dev)).shape
(3, 2)
"""

from __future__ import annotations

from . import functional, init, lora
from .activation import (
    ELU,
    GELU,
    ELUConfig,
    GELUConfig,
    LeakyReLU,
    LeakyReLUConfig,
    LogSoftmax,
    LogSoftmaxConfig,
    Mish,
    MishConfig,
    ReLU,
    ReLUConfig,
    Sigmoid,
    SigmoidConfig,
    SiLU,
    SiLUConfig,
    Softmax,
    SoftmaxConfig,
    Softplus,
    SoftplusConfig,
    Tanh,
    TanhConfig,
)
from .attention import MultiHeadAttention, MultiHeadAttentionConfig, causal_mask
from .config import Config, config_from_dict
from .containers import ModuleDict, ModuleList, Sequential, SequentialConfig
from .conv import (
    Conv1d,
    Conv1dConfig,
    Conv2d,
    Conv2dConfig,
    ConvTranspose1d,
    ConvTranspose1dConfig,
    ConvTranspose2d,
    ConvTranspose2dConfig,
)
from .linear import (
    Dropout,
    DropoutConfig,
    Embedding,
    EmbeddingConfig,
    Flatten,
    FlattenConfig,
    Identity,
    IdentityConfig,
    Linear,
    LinearConfig,
)
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .module import LoadResult, Module, Parameter, StateDictError
from .normalization import (
    BatchNorm1d,
    BatchNorm1dConfig,
    BatchNorm2d,
    BatchNorm2dConfig,
    GroupNorm,
    GroupNormConfig,
    LayerNorm,
    LayerNormConfig,
    RMSNorm,
    RMSNormConfig,
)
from .paramgroup import ParamGroup
from .pooling import (
    AdaptiveAvgPool2d,
    AdaptiveAvgPool2dConfig,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool2dConfig,
    AvgPool1d,
    AvgPool1dConfig,
    AvgPool2d,
    AvgPool2dConfig,
    MaxPool1d,
    MaxPool1dConfig,
    MaxPool2d,
    MaxPool2dConfig,
)
from .positional import (
    RotaryEmbedding,
    RotaryEmbeddingConfig,
    SinusoidalPositionalEncoding,
    SinusoidalPositionalEncodingConfig,
)
from .rnn import GRU, LSTM, RNN, GRUConfig, LSTMConfig, RNNConfig
from .transformer import (
    TransformerDecoder,
    TransformerDecoderConfig,
    TransformerDecoderLayer,
    TransformerDecoderLayerConfig,
    TransformerEncoder,
    TransformerEncoderConfig,
    TransformerEncoderLayer,
    TransformerEncoderLayerConfig,
)

__all__ = [
    "functional", "init", "ELU", "GELU", "ELUConfig", "GELUConfig", "LeakyReLU", "LeakyReLUConfig", "LogSoftmax",
    "LogSoftmaxConfig", "Mish", "MishConfig", "ReLU", "ReLUConfig", "Sigmoid", "SigmoidConfig", "SiLU",
    "SiLUConfig", "Softmax", "SoftmaxConfig", "Softplus", "SoftplusConfig", "Tanh", "TanhConfig",
    "MultiHeadAttention", "MultiHeadAttentionConfig", "causal_mask", "Config", "config_from_dict", "ModuleDict",
    "ModuleList", "Sequential", "SequentialConfig", "Conv1d", "Conv1dConfig", "Conv2d", "Conv2dConfig",
    "ConvTranspose1d", "ConvTranspose1dConfig", "ConvTranspose2d", "ConvTranspose2dConfig", "Dropout",
    "DropoutConfig", "Embedding", "EmbeddingConfig", "Flatten", "FlattenConfig", "Identity", "IdentityConfig",
    "Linear", "LinearConfig", "BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss", "HuberLoss", "KLDivLoss",
    "L1Loss", "MSELoss", "NLLLoss", "SmoothL1Loss", "LoadResult", "Module", "Parameter", "StateDictError",
    "BatchNorm1d", "BatchNorm1dConfig", "BatchNorm2d", "BatchNorm2dConfig", "GroupNorm", "GroupNormConfig",
    "LayerNorm", "LayerNormConfig", "RMSNorm", "RMSNormConfig", "AdaptiveAvgPool2d", "AdaptiveAvgPool2dConfig",
    "AdaptiveMaxPool2d", "AdaptiveMaxPool2dConfig", "AvgPool1d", "AvgPool1dConfig", "AvgPool2d", "AvgPool2dConfig",
    "MaxPool1d", "MaxPool1dConfig", "MaxPool2d", "MaxPool2dConfig", "RotaryEmbedding", "RotaryEmbeddingConfig",
    "SinusoidalPositionalEncoding", "SinusoidalPositionalEncodingConfig", "GRU", "LSTM", "RNN", "GRUConfig",
    "LSTMConfig", "RNNConfig", "TransformerDecoder", "TransformerDecoderConfig", "TransformerDecoderLayer",
    "TransformerDecoderLayerConfig", "TransformerEncoder", "TransformerEncoderConfig", "TransformerEncoderLayer",
    "TransformerEncoderLayerConfig", "ParamGroup", "lora",
]  # fmt: skip

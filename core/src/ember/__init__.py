"""Ember: a deep-learning framework where the model is written once and the device is chosen
at run time. This module is an index of the public API; definitions live in submodules.

>>> import ember as em
>>> dev = em.Device.cpu().autodiff()
>>> w = em.tensor([[1.0, 2.0]], device=dev, requires_grad=True)
>>> (w * w).sum().backward()
>>> w.grad.tolist()
[[2.0, 4.0]]
"""

from __future__ import annotations

import importlib
import math as _math
from typing import Any

__version__ = "0.1.0"

# The Tensor class first: importing ember.tensor binds the submodule as `ember.tensor`, and the
# creation function of that name, imported below, must win.
from .tensor import Tensor

# isort: split
from . import dtypes, errors, lazy
from .amp import GradScaler, autocast
from .autodiff.api import backward, grad, value_and_grad
from .autodiff.mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from .backend import Backend, Capabilities
from .creation import (
    arange,
    asarray,
    empty,
    empty_like,
    eye,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    linspace,
    ones,
    ones_like,
    tensor,
    zeros,
    zeros_like,
)
from .device import Device
from .dtypes import (
    DType,
    bfloat16,
    bool_,
    can_cast,
    finfo,
    float16,
    float32,
    float64,
    iinfo,
    int8,
    int16,
    int32,
    int64,
    result_type,
    uint8,
    uint16,
    uint32,
    uint64,
)
from .errors import (
    AutodiffError,
    DeviceMismatchError,
    DeviceUnavailableError,
    DTypeError,
    EmberError,
    NotImplementedOpError,
    PluginError,
    ShapeError,
)
from .extension import backend_extension
from .jit import jit
from .ops.attention import scaled_dot_product_attention
from .ops.conv import conv, conv_transpose, fold, unfold
from .ops.einsum import einsum
from .ops.elementwise import (
    abs,
    acos,
    acosh,
    add,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_invert,
    bitwise_left_shift,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    ceil,
    clip,
    cos,
    cosh,
    divide,
    equal,
    erf,
    exp,
    exp2,
    expm1,
    floor,
    floor_divide,
    greater,
    greater_equal,
    hypot,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    positive,
    pow,
    reciprocal,
    remainder,
    round,
    rsqrt,
    sign,
    sin,
    sinh,
    sqrt,
    square,
    subtract,
    tan,
    tanh,
    trunc,
    where,
)
from .ops.indexing import argwhere, index_put, nonzero, one_hot, scatter_add, take, take_along_axis
from .ops.linalg import (
    argsort,
    diagonal,
    matmul,
    matrix_transpose,
    outer,
    sort,
    tensordot,
    topk,
    trace,
    vecdot,
    vector_norm,
)
from .ops.movement import (
    broadcast_arrays,
    broadcast_to,
    chunk,
    concat,
    expand_dims,
    flatten,
    flip,
    meshgrid,
    moveaxis,
    pad,
    permute_dims,
    repeat,
    reshape,
    roll,
    split,
    squeeze,
    stack,
    swapaxes,
    tile,
    tril,
    triu,
    unstack,
)
from .ops.nn import (
    batch_norm,
    cross_entropy,
    dropout,
    elu,
    embedding,
    gelu,
    hardtanh,
    layer_norm,
    leaky_relu,
    log_softmax,
    mish,
    relu,
    rms_norm,
    sigmoid,
    silu,
    softmax,
    softplus,
)
from .ops.pooling import adaptive_avg_pool, adaptive_max_pool, avg_pool, interpolate, max_pool
from .ops.reduction import (
    all,
    any,
    argmax,
    argmin,
    count_nonzero,
    cumulative_prod,
    cumulative_sum,
    logsumexp,
    max,
    mean,
    min,
    prod,
    std,
    sum,
    var,
)
from .plugins import hookimpl
from .random import bernoulli, normal, permutation, rand, randint, randn, seed, uniform
from .transfer import astype, clone, to

# isort: split
# The Array API standard's namespace facts: version, inspection, constants, dtype helpers
from .dtypes import bool_ as bool  # noqa: A004  (the standard's name; ember.bool_ stays)
from .dtypes import complex64, complex128, isdtype
from .inspection import __array_api_version__, __array_namespace_info__
from .ops.elementwise import angle, conj, copysign, imag, nextafter, real, signbit
from .ops.movement import broadcast_shapes_public as broadcast_shapes
from .ops.reduction import diff
from .ops.searching import isin, searchsorted, unique_all, unique_counts, unique_inverse, unique_values

e = _math.e
pi = _math.pi
inf = _math.inf
nan = _math.nan
newaxis = None

concatenate = concat
cumsum = cumulative_sum
permute = permute_dims
transpose = swapaxes

#: submodules loaded on first attribute access (kept out of ``import ember``)
_LAZY_SUBMODULES = {
    "nn",
    "onnx",
    "optim",
    "data",
    "train",
    "memory",
    "random",
    "cli",
    "plugins",
    "config",
    "dispatch",
    "autodiff",
    "shapes",
    "quant",
}
#: namespaces provided by separately installed extension plugins, each installed as ``ember[<name>]``
#: (ember-signal also gives the Array API ``fft`` extension)
_EXTENSION_NAMESPACES = {
    "linalg": "ember_linalg",
    "signal": "ember_signal",
    "fft": "ember_signal.fft",
    "fused": "ember_fused",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _EXTENSION_NAMESPACES:
        module = _EXTENSION_NAMESPACES[name]
        try:
            return importlib.import_module(module)
        except ImportError:
            raise errors.EmberAttributeError(
                f"ember.{name} comes from the {module.split('.')[0].replace('_', '-')} extension plugin, which is "
                f'not installed: pip install "ember[{module.split(".")[0].removeprefix("ember_")}]"'
            ) from None
    raise errors.EmberAttributeError(f"module 'ember' has no attribute {name!r}")


__all__ = [name for name in dir() if not name.startswith("_") and name not in ("annotations", "importlib", "Any")]

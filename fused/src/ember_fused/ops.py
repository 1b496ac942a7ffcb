"""The fused ops as ``@backend_extension`` ops. Each reference is the unfused sequence in ember
Tensor ops, so it runs on every backend and autodiff differentiates it; native kernels
(kernels_opencl, kernels_wgpu, kernels_cuda) replace the forward where they exist.

``fused_layer_norm_residual`` has two results; the op packs them along a new leading axis of
size 2 (``out``, ``new_residual``) and the public function splits them (the slices carry the
gradients back).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember as em
from ember.errors import DTypeError, InvalidArgumentError, ShapeError

__all__ = [
    "ACTIVATIONS", "EXTENSION_OPS", "FUSED_LINEAR", "FUSED_LAYER_NORM_RESIDUAL", "FUSED_ATTENTION",
    "fused_linear", "fused_layer_norm_residual", "fused_attention", "activation_name",
]  # fmt: skip

_FLOATS = ("float32", "float64")

#: the activations fused_linear applies in its epilogue, by name ("gelu" is erf's, "gelu_tanh" the tanh form)
ACTIVATIONS = ("none", "relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid")


def activation_name(activation: Any) -> str:
    """The canonical name of ``activation`` (None means "none"); an ember error for anything else."""
    name = "none" if activation is None else activation
    if name not in ACTIVATIONS:
        raise InvalidArgumentError(
            f"fused_linear: activation must be one of {', '.join(ACTIVATIONS)} or None, got {activation!r}"
        )
    return name


def _activate(y: Any, activation: str) -> Any:
    F = em.nn.functional
    if activation == "relu":
        return F.relu(y)
    if activation == "gelu":
        return F.gelu(y)
    if activation == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if activation == "silu":
        return F.silu(y)
    if activation == "tanh":
        return y.tanh()
    if activation == "sigmoid":
        return y.sigmoid()
    return y


# -- fused_linear --------------------------------------------------------------------------------
def _linear_check(x: Any, w: Any, *bias: Any, activation: str = "none") -> None:
    """x (..., in), weight (out, in), bias (out,): the shapes F.linear takes."""
    activation_name(activation)
    if x.ndim < 1 or w.ndim != 2 or x.shape[-1] != w.shape[1]:
        raise ShapeError(f"fused_linear: x {tuple(x.shape)} and weight {tuple(w.shape)} do not fit: weight must be "
                         "(out_features, in_features) with in_features == x.shape[-1]")  # fmt: skip
    if len(bias) > 1:
        raise InvalidArgumentError(f"fused_linear: at most one bias, got {len(bias)}")
    if bias and tuple(bias[0].shape) != (w.shape[0],):
        raise ShapeError(f"fused_linear: bias must have shape ({w.shape[0]},), got {tuple(bias[0].shape)}")


def _linear_sample(rng: np.random.Generator, dtype: str) -> list[tuple[tuple[np.ndarray, ...], dict[str, Any]]]:
    x, w, b = rng.uniform(-1, 1, (2, 3, 5)), rng.uniform(-1, 1, (4, 5)), rng.uniform(-1, 1, (4,))
    # relu's kink is avoided by the finite differences: values are kept away from 0 by the bias below
    return [
        ((x, w, b), {"activation": "gelu"}),
        ((x[0], w, b + np.sign(b) * 3.0), {"activation": "relu"}),
        ((x, w), {"activation": "silu"}),
        ((x[1], w, b), {"activation": "tanh"}),
    ]


@em.backend_extension("fused_linear", dtypes=_FLOATS, check=_linear_check, sample=_linear_sample, tolerance=4.0)
def FUSED_LINEAR(x: Any, w: Any, *bias: Any, activation: str = "none") -> Any:
    """activation(x @ w.T + bias): the unfused sequence (matmul, add, activation)."""
    y = x @ w.mT
    if bias:
        y = y + bias[0]
    return _activate(y, activation)


def fused_linear(x: Any, weight: Any, bias: Any = None, activation: Any = None) -> Any:
    """``activation(x @ weight.T + bias)`` with the bias and activation in one epilogue kernel after the
    backend's matmul where the device has the native kernel. ``weight`` is (out, in) as in F.linear."""
    act = activation_name(activation)
    args = (x, weight) if bias is None else (x, weight, bias)
    return FUSED_LINEAR(*args, activation=act)


# -- fused_layer_norm_residual --------------------------------------------------------------------
def _lnr_check(x: Any, residual: Any, weight: Any, bias: Any, eps: float = 1e-5) -> None:
    if tuple(x.shape) != tuple(residual.shape):
        raise ShapeError(
            f"fused_layer_norm_residual: x {tuple(x.shape)} and residual {tuple(residual.shape)} must have one shape"
        )
    if x.ndim < 1 or tuple(weight.shape) != (x.shape[-1],) or tuple(bias.shape) != (x.shape[-1],):
        width = x.shape[-1] if x.ndim else "?"
        raise ShapeError(f"fused_layer_norm_residual: weight and bias must have shape ({width},), "
                         f"got {tuple(weight.shape)} and {tuple(bias.shape)}")  # fmt: skip
    if not eps > 0:
        raise InvalidArgumentError(f"fused_layer_norm_residual: eps must be positive, got {eps!r}")


def _lnr_sample(rng: np.random.Generator, dtype: str) -> list[tuple[tuple[np.ndarray, ...], dict[str, Any]]]:
    return [
        ((rng.normal(size=(3, 7)), rng.normal(size=(3, 7)), rng.uniform(0.5, 1.5, 7), rng.normal(size=7)), {}),
        ((rng.normal(size=(2, 2, 300)), rng.normal(size=(2, 2, 300)), rng.uniform(0.5, 1.5, 300), rng.normal(size=300)),
         {"eps": 1e-3}),
    ]  # fmt: skip


@em.backend_extension("fused_layer_norm_residual", dtypes=_FLOATS, check=_lnr_check, sample=_lnr_sample, tolerance=4.0)
def FUSED_LAYER_NORM_RESIDUAL(x: Any, residual: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Any:
    """stack([layer_norm(x + residual) * weight + bias, x + residual]): the two results packed."""
    h = x + residual
    out = em.nn.functional.layer_norm(h, (h.shape[-1],), weight, bias, eps=eps)
    return em.stack([out, h], axis=0)


@FUSED_LAYER_NORM_RESIDUAL.vjp
def _lnr_vjp(ctx: em.extension.VjpContext, g: Any) -> tuple[Any, Any, Any, Any]:
    """The layer-norm backward in Tensor ops from the forward's own ``x + residual`` (the packed
    output's second half): with it, the forward's kernel runs even when gradients are recorded."""
    _, _, weight, _ = ctx.inputs
    eps = float(ctx.params.get("eps", 1e-5))
    h = ctx.output[1]
    d = h - h.mean(axis=-1, keepdims=True)
    rstd = ((d * d).mean(axis=-1, keepdims=True) + eps).rsqrt()
    xhat = d * rstd
    g_out, g_h = g[0], g[1]
    lead = tuple(range(h.ndim - 1))
    gw = (g_out * xhat).sum(axis=lead) if lead else g_out * xhat
    gb = g_out.sum(axis=lead) if lead else g_out
    gxhat = g_out * weight
    gx = g_h + rstd * (gxhat - gxhat.mean(axis=-1, keepdims=True) - xhat * (gxhat * xhat).mean(axis=-1, keepdims=True))
    return gx, gx, gw, gb


def fused_layer_norm_residual(x: Any, residual: Any, weight: Any, bias: Any, eps: float = 1e-5) -> tuple[Any, Any]:
    """``(layer_norm(x + residual), x + residual)`` over the last axis in one row kernel where the
    device has it: the pre-norm transformer's "add the branch, normalise for the next one"."""
    packed = FUSED_LAYER_NORM_RESIDUAL(x, residual, weight, bias, eps=float(eps))
    return packed[0], packed[1]


# -- fused_attention -----------------------------------------------------------------------------
def _attn_check(q: Any, k: Any, v: Any, *mask: Any, is_causal: bool = False, scale: float | None = None) -> None:
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ShapeError("fused_attention: q, k and v need at least 2 dimensions (..., L, E)")
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"fused_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} do not fit: q "
                         "and k need one embedding size, k and v one length")  # fmt: skip
    if len(mask) > 1:
        raise InvalidArgumentError(f"fused_attention: at most one mask, got {len(mask)}")
    # declared here, not through ``dtypes=``, which would hold the (boolean) mask to it too
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype.name not in _FLOATS:
            raise DTypeError(f"fused_attention: {name} has dtype {t.dtype}; expected one of {', '.join(_FLOATS)}")


def _attn_sample(rng: np.random.Generator, dtype: str) -> list[tuple[tuple[np.ndarray, ...], dict[str, Any]]]:
    q, k, v = rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 7, 8)), rng.normal(size=(2, 7, 8))
    big = [rng.normal(size=(1, 2, 40, 16)) for _ in range(3)]  # more keys than one tile
    return [
        ((q, k, v), {"scale": 0.35}),
        ((q, k, v), {"is_causal": True, "scale": 0.35}),
        (tuple(big), {"is_causal": True, "scale": 0.25}),
    ]


@em.backend_extension("fused_attention", check=_attn_check, sample=_attn_sample, tolerance=4.0)
def FUSED_ATTENTION(q: Any, k: Any, v: Any, *mask: Any, is_causal: bool = False, scale: float | None = None) -> Any:
    """softmax(q @ k^T * scale + mask) @ v, the (L, S) scores written out: the unfused sequence.
    ``is_causal``: query r sees key n when n <= r + S - L (as scaled_dot_product_attention)."""
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = (q @ k.mT) * sc
    if is_causal:
        n, m = q.shape[-2], k.shape[-2]
        seen = em.arange(m, device=q.device).reshape((1, m)) <= em.arange(n, device=q.device).reshape((n, 1)) + (m - n)
        s = em.where(seen, s, float("-inf"))
    if mask:
        s = em.where(mask[0], s, float("-inf")) if mask[0].dtype == em.bool_ else s + mask[0]
    return em.nn.functional.softmax(s, dim=-1) @ v


def fused_attention(
    q: Any, k: Any, v: Any, mask: Any = None, *, is_causal: bool = False, scale: float | None = None
) -> Any:
    """softmax(q k^T * scale + mask) v without the score matrix where the device has the flash-style
    kernel (queries in tiles, keys streamed through local memory, online softmax). ``mask`` is
    boolean (True = attend) or additive; the native kernels take ``is_causal`` and hand an explicit
    mask to the backend's scaled_dot_product_attention."""
    sc = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    args = (q, k, v) if mask is None else (q, k, v, mask)
    return FUSED_ATTENTION(*args, is_causal=bool(is_causal), scale=sc)


EXTENSION_OPS = (FUSED_LINEAR, FUSED_LAYER_NORM_RESIDUAL, FUSED_ATTENTION)

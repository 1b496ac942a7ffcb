"""The nn layers' road to an installed extension's fused ops (ember-fused: ``fused_linear``,
``fused_layer_norm_residual``, ``fused_attention``). They are looked up in the extension registry
at call time, so core never imports the extension (the first lookup runs plugin discovery, which
imports the installed extension plugins); a layer takes the fused op only where the
device kind has its native kernel and, for an op without a custom vjp, no gradient is being
recorded (it would run its reference, the unfused sequence, anyway); else today's code runs.
``EMBER_NN_FUSED=0`` turns the road off.
"""

from __future__ import annotations

from typing import Any

from ..autodiff.mode import is_grad_enabled
from ..config import nn_fused_enabled
from ..extension import EXTENSIONS, Extension
from ..plugins import get_registry
from ..tensor import Tensor

__all__ = ["fused_op", "add_norm", "linear_activation", "attention"]

_FLOATS = ("float32", "float64")


def fused_op(name: str, *tensors: Tensor | None) -> Extension | None:
    """The extension op ``name`` when it can replace the unfused sequence on these tensors, else None."""
    if not nn_fused_enabled():
        return None
    ext = EXTENSIONS.get(name)
    if ext is None:
        get_registry().discover()  # the extension plugins load on first need, not with the device
        ext = EXTENSIONS.get(name)
        if ext is None:
            return None
    present = [t for t in tensors if t is not None]
    kind = present[0].device.kind
    if kind not in ext.kernels:
        return None
    for t in present:
        if t.dtype.name not in _FLOATS or t.device != present[0].device:
            return None
    if not ext.has_vjp and is_grad_enabled() and any(t.requires_grad for t in present):
        return None
    return ext


def add_norm(branch: Tensor, residual: Tensor, norm: Any) -> tuple[Tensor, Tensor]:
    """``(norm(residual + branch), residual + branch)``: one fused row kernel where available."""
    op = fused_op("fused_layer_norm_residual", branch, residual, norm.weight, norm.bias)
    if op is not None and len(norm.normalized_shape) == 1 and norm.weight is not None and norm.bias is not None:
        packed = op(branch, residual, norm.weight, norm.bias, eps=float(norm.eps))
        return packed[0], packed[1]
    h = residual + branch
    return norm(h), h


def linear_activation(x: Tensor, linear: Any, activation: str, act: Any) -> Tensor:
    """``act(linear(x))``: the backend's matmul and one bias + activation kernel where available."""
    op = fused_op("fused_linear", x, linear.weight, linear.bias)
    if op is not None:
        bias = () if linear.bias is None else (linear.bias,)
        return op(x, linear.weight, *bias, activation=activation)
    return act(linear(x))


def attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, sdpa: Any) -> Tensor:
    """softmax(q k^T / sqrt(d) + mask) v through the flash-style fused kernel where available."""
    op = fused_op("fused_attention", q, k, v) if mask is None else None
    if op is not None:
        return op(q, k, v, is_causal=False, scale=1.0 / float(q.shape[-1]) ** 0.5)
    return sdpa(q, k, v, attn_mask=mask)

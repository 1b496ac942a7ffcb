"""QuantLinear: a Linear layer whose weight is stored as int8 or NF4 codes and read through
the ``dequant_matmul`` op (a backend's native kernel where it has one)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..creation import tensor as new_tensor
from ..dtypes import float32
from ..errors import ArgumentTypeError
from ..nn.linear import Linear
from ..nn.module import Module
from ..ops.movement import pad as pad_tensor
from ..ops.movement import reshape, slice_tensor
from ..ops.quant import dequant_matmul
from ..tensor import Tensor
from .formats import DQ_BLOCK, QuantizedWeight, quantize_int8, quantize_nf4

__all__ = ["QuantLinear"]


class QuantLinear(Module):
    """``y = x @ dequantize(W).T + b`` with ``W`` held as codes and scales (buffers, never
    trained); the bias stays a float parameter. LoRA adapts it like a Linear (QLoRA) but never
    merges into it."""

    #: what :mod:`ember.nn.lora` reads: adapt like a Linear layer, but never merge
    lora_kind: ClassVar[str] = "linear"
    quantized: ClassVar[bool] = True

    def __init__(self, qw: QuantizedWeight, bias: Tensor | None, device: Any, compute_dtype: Any = float32) -> None:
        super().__init__()
        if not isinstance(qw, QuantizedWeight):
            raise ArgumentTypeError(f"QuantLinear: expected a QuantizedWeight, got {type(qw).__name__}")
        self.format, self.block_size = qw.format, qw.block_size
        self.out_features, self.in_features = qw.shape
        self.compute_dtype = compute_dtype
        self.double_quant = qw.scale_codes is not None
        self.adapter_device = device  # where LoRA adapters over this layer live (autodiff: trainable)
        plain = device
        self.register_buffer("qweight", new_tensor(qw.qweight, device=plain))
        if self.double_quant:
            self.register_buffer("scale_codes", new_tensor(qw.scale_codes, device=plain))
            self.register_buffer("scale_scales", new_tensor(qw.scale_scales, device=plain))
            self.register_buffer("scale_offset", new_tensor(np.float32(qw.scale_offset), device=plain))
        else:
            self.register_buffer("scales", new_tensor(qw.scales, device=plain))
        if bias is not None:
            self.register_parameter("bias", bias)
        else:
            self.register_parameter("bias", None)

    @classmethod
    def from_linear(cls, layer: Linear, format: str, block_size: int = 64, double_quant: bool = False) -> QuantLinear:
        """Quantize ``layer``'s weight (``format`` "int8" or "nf4"); the bias is kept, frozen."""
        w = layer.weight.numpy()
        qw = quantize_int8(w) if format == "int8" else quantize_nf4(w, block_size, double_quant)
        bias = layer.bias
        out = cls(qw, None, layer.weight.device, layer.weight.dtype)
        if bias is not None:
            out.register_parameter("bias", bias.detach())
            out.freeze()
        return out

    def absmax(self) -> Tensor:
        """The float32 scales ``dequant_matmul`` reads (double-quantized ones decoded, in ember ops)."""
        if not self.double_quant:
            return self.scales
        n = self.scale_codes.shape[0]
        groups = self.scale_scales.shape[0]
        codes = self.scale_codes.astype(float32)
        pad = groups * DQ_BLOCK - n
        if pad:
            codes = pad_tensor(codes, ((0, pad),))
        flat = reshape(reshape(codes, (groups, DQ_BLOCK)) * reshape(self.scale_scales, (groups, 1)), (-1,))
        if pad:
            flat = slice_tensor(flat, (0,), (n,), (1,))
        return flat + self.scale_offset

    def weight_bytes(self) -> int:
        """Bytes of the stored weight (codes and every scale)."""
        return sum(t.size * t.dtype.itemsize for _, t in self.named_buffers())

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or not x.dtype.is_floating:
            got = x.dtype if isinstance(x, Tensor) else type(x).__name__
            raise ArgumentTypeError(f"QuantLinear: expected a floating-point tensor, got {got}")
        shape = (self.out_features, self.in_features)
        out = dequant_matmul(
            x, self.qweight, self.absmax(), format=self.format, shape=shape, block_size=self.block_size
        )
        return out + self.bias if self.bias is not None else out

    def extra_repr(self) -> str:
        dq = ", double_quant=True" if self.double_quant else ""
        bs = f", block_size={self.block_size}" if self.format == "nf4" else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, format={self.format!r}{bs}{dq}"

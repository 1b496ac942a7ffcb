"""ember.quant: int8 and NF4 weight quantization for inference and QLoRA.

``quantize(model, "nf4", double_quant=True)`` replaces Linear layers by :class:`QuantLinear`,
whose forward is the ``dequant_matmul`` op (a backend's native kernel, else dequantize +
matmul); ``nn.lora.apply_lora`` over such a model is QLoRA.
"""

from ..ops.quant import FORMATS, NF4_LEVELS, dequant_matmul, dequantize, nf4_levels
from .api import QuantReport, quantize
from .formats import QuantizedWeight, dequantize_numpy, quantize_int8, quantize_nf4
from .modules import QuantLinear

__all__ = [
    "FORMATS", "NF4_LEVELS", "nf4_levels", "dequant_matmul", "dequantize", "quantize", "QuantReport",
    "QuantizedWeight", "quantize_int8", "quantize_nf4", "dequantize_numpy", "QuantLinear",
]  # fmt: skip

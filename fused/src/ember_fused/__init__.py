"""ember-fused: fused ops for ember, seen as ``em.fused``.

``fused_linear`` (matmul + bias + activation), ``fused_layer_norm_residual`` (add the residual,
layer-normalise, return both) and ``fused_attention`` (flash-style: no score matrix) are
``@backend_extension`` ops: the reference is the unfused sequence in ember Tensor ops (every
backend, gradients through autodiff), native kernels replace the forward on opencl, wgpu and
cuda. Importing the package registers them; ember's nn layers pick them up through the
extension registry when the device has the kernel (docs/fused.md).
"""

from __future__ import annotations

from . import kernels_cuda, kernels_opencl, kernels_wgpu
from .ops import ACTIVATIONS, EXTENSION_OPS, fused_attention, fused_layer_norm_residual, fused_linear

__version__ = "0.1.0"

kernels_opencl.register("opencl")
kernels_wgpu.register("wgpu")
kernels_cuda.register("cuda")

__all__ = ["ACTIVATIONS", "EXTENSION_OPS", "fused_attention", "fused_layer_norm_residual", "fused_linear"]

"""ember-example-ops: a worked third-party ember extension (docs/writing-an-extension.md).

Two small ops made with ``@em.backend_extension``: ``swiglu(a, b) = silu(a) * b`` (the gated
unit of LLaMA-style MLPs, with a hand-written gradient) and ``squared_relu(x) = relu(x) ** 2``
(Primer's activation, differentiated through its reference). Each has a reference in ember
Tensor ops (every backend), a numpy kernel for cpu and an OpenCL C kernel for opencl devices.
Importing the package registers them.
"""

from __future__ import annotations

from . import kernels_cpu, kernels_opencl
from .ops import EXTENSION_OPS, squared_relu, swiglu

__version__ = "0.1.0"

kernels_cpu.register("cpu")
kernels_opencl.register("opencl")

__all__ = ["EXTENSION_OPS", "squared_relu", "swiglu"]

"""What the C-family kernels (OpenCL C and CUDA C) share: the activation formulas of the
fused_linear epilogue, written once over a compute type ``T`` and a math-function suffix."""

from __future__ import annotations

__all__ = ["c_activation"]

# v is the value in the compute type; {f} is the math suffix ("" in OpenCL C and for CUDA doubles,
# "f" for CUDA floats, whose C++ overloads NVRTC does not promise without headers)
_C_ACT = {
    "none": "v",
    "relu": "(v > (T)0 ? v : (T)0)",
    "gelu": "(T)0.5 * v * ((T)1 + erf{f}(v * (T)0.7071067811865476))",
    "gelu_tanh": "(T)0.5 * v * ((T)1 + tanh{f}((T)0.7978845608028654 * (v + (T)0.044715 * v * v * v)))",
    "silu": "v / ((T)1 + exp{f}(-v))",
    "tanh": "tanh{f}(v)",
    "sigmoid": "(T)1 / ((T)1 + exp{f}(-v))",
}


def c_activation(activation: str, suffix: str = "") -> str:
    """The C expression of ``activation`` applied to ``v`` (of type ``T``)."""
    return _C_ACT[activation].format(f=suffix)

"""Native kernels for the ``cuda`` device through CuPy (``backend.cp``): registered only when
ember-cuda is installed; CuPy and ember_cuda are imported inside the kernels, so nothing here
runs without a GPU. fused_linear is the backend's matmul (cuBLAS) and one epilogue RawKernel;
fused_layer_norm_residual is one block per row; fused_attention is ember-cuda's flash-style
kernel (ember_cuda.attention, not a copy), with the backend's scaled_dot_product_attention as its
fallback for what that kernel does not cover (masks, float64, other head sizes).
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from typing import Any

import numpy as np

from .ops import FUSED_ATTENTION, FUSED_LAYER_NORM_RESIDUAL, FUSED_LINEAR

__all__ = ["register", "CALLS", "epilogue_source", "lnr_source"]

CALLS: Counter[str] = Counter()
_CTYPE = {"float32": ("float", "f"), "float64": ("double", "")}
_WG = 256
_compiled: dict[Any, Any] = {}
_attention: dict[int, Any] = {}

# the epilogue's activations: v is the value in the compute type, {f} the math suffix ("f" for
# floats, whose C++ overloads NVRTC does not promise without headers, "" for doubles)
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
    """The CUDA C expression of ``activation`` applied to ``v`` (of type ``T``)."""
    return _C_ACT[activation].format(f=suffix)


def epilogue_source(dtype: str, activation: str, bias: bool) -> str:
    """CUDA C of the bias + activation epilogue, in place over the matmul's result."""
    ctype, f = _CTYPE[dtype]
    add = "v += b[i % N];" if bias else ""
    return (
        f"#define T {ctype}\n"
        'extern "C" __global__ void fused_bias_act(T* __restrict__ y, const T* __restrict__ b, const long long n,\n'
        "                                          const long long N) {\n"
        "    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
        "         i += (long long)gridDim.x * blockDim.x) {\n"
        f"        T v = y[i]; {add} y[i] = {c_activation(activation, f)};\n"
        "    }\n"
        "}\n"
    )


def lnr_source(dtype: str) -> str:
    """CUDA C of layer_norm(x + residual) and x + residual, one block of 256 threads per row."""
    ctype, f = _CTYPE[dtype]
    return (
        f"#define T {ctype}\n#define WG {_WG}\n"
        "__device__ T block_sum(T* red, T v) {\n"
        "    const int t = threadIdx.x;\n"
        "    red[t] = v;\n"
        "    __syncthreads();\n"
        "    for (int s = WG / 2; s > 0; s >>= 1) { if (t < s) red[t] += red[t + s]; __syncthreads(); }\n"
        "    const T r = red[0];\n"
        "    __syncthreads();\n"
        "    return r;\n"
        "}\n"
        'extern "C" __global__ void __launch_bounds__(WG) fused_lnr(T* __restrict__ out, const T* __restrict__ x,\n'
        "        const T* __restrict__ r, const T* __restrict__ w, const T* __restrict__ b, const long long C,\n"
        "        const long long total, const T eps) {\n"
        "    __shared__ T red[WG];\n"
        "    const long long row = blockIdx.x;\n"
        "    const int t = threadIdx.x;\n"
        "    const T* xr = x + row * C; const T* rr = r + row * C;\n"
        "    T* o = out + row * C; T* h = out + total + row * C;\n"
        "    T acc = 0;\n"
        "    for (long long j = t; j < C; j += WG) { const T v = xr[j] + rr[j]; h[j] = v; acc += v; }\n"
        "    const T mean = block_sum(red, acc) / (T)C;\n"
        "    T acc2 = 0;\n"
        "    for (long long j = t; j < C; j += WG) { const T d = h[j] - mean; acc2 += d * d; }\n"
        f"    const T rstd = rsqrt{f}(block_sum(red, acc2) / (T)C + eps);\n"
        "    for (long long j = t; j < C; j += WG) o[j] = (h[j] - mean) * rstd * w[j] + b[j];\n"
        "}\n"
    )


def _kernel(cp: Any, key: Any, source: str, name: str) -> Any:
    k = _compiled.get(key)
    if k is None:
        k = _compiled[key] = cp.RawKernel(source, name)
    return k


def _fused_linear(backend: Any, x: Any, w: Any, *bias: Any, activation: str = "none") -> Any:
    cp = backend.cp
    y = cp.ascontiguousarray(backend.implementation("matmul")(x, w.T))
    n = int(y.size)
    if n == 0 or (activation == "none" and not bias):
        return y
    key = ("bias_act", y.dtype.name, activation, bool(bias))
    knl = _kernel(cp, key, epilogue_source(y.dtype.name, activation, bool(bias)), "fused_bias_act")
    b = cp.ascontiguousarray(bias[0]) if bias else y
    blocks = min(-(-n // _WG), 65536)
    CALLS["fused_linear"] += 1
    knl((blocks,), (_WG,), (y, b, np.int64(n), np.int64(y.shape[-1])))
    return y


def _fused_lnr(backend: Any, x: Any, residual: Any, weight: Any, bias: Any, eps: float = 1e-5) -> Any:
    cp = backend.cp
    x, residual, weight, bias = (cp.ascontiguousarray(a) for a in (x, residual, weight, bias))
    out = cp.empty((2, *x.shape), x.dtype)
    total = int(x.size)
    if total == 0:
        return out
    C = x.shape[-1]
    knl = _kernel(cp, ("lnr", x.dtype.name), lnr_source(x.dtype.name), "fused_lnr")
    CALLS["fused_layer_norm_residual"] += 1
    knl((total // C,), (_WG,), (out, x, residual, weight, bias, np.int64(C), np.int64(total), x.dtype.type(eps)))
    return out


def _fused_attention(
    backend: Any, q: Any, k: Any, v: Any, *mask: Any, is_causal: bool = False, scale: float = 1.0
) -> Any:
    run = _attention.get(id(backend))
    if run is None:
        from ember_cuda.attention import flash_attention

        run = _attention[id(backend)] = flash_attention(
            backend.cp, backend.implementation("scaled_dot_product_attention")
        )
    CALLS["fused_attention"] += 1
    return run(q, k, v, *mask, is_causal=is_causal, scale=scale)


def register(kind: str = "cuda") -> bool:
    """Register the CuPy kernels when ember-cuda is installed; whether they were."""
    if importlib.util.find_spec("ember_cuda") is None:
        return False
    FUSED_LINEAR.kernel(kind)(_fused_linear)
    FUSED_LAYER_NORM_RESIDUAL.kernel(kind)(_fused_lnr)
    FUSED_ATTENTION.kernel(kind)(_fused_attention)
    return True

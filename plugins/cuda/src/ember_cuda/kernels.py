"""Kernels of ember-cuda's own where CuPy's generic path is slow: fused activations, and a
direct launch for the binary ops on small tensors.

The shared kernels build gelu from five CuPy ufunc passes over memory and sigmoid from scipy's
expit; here each activation and its gradient pieces are one CuPy ``ElementwiseKernel`` pass,
compiled once per dtype. float32 and float64 only: 16-bit inputs take the shared path, which
computes in float32 and rounds back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["fast_kernels", "binary_kernels"]

#: op -> the CUDA C body computing ``y`` from ``x`` (type ``T``)
_UNARY = {
    # erfc(-x / sqrt 2) = 1 + erf(x / sqrt 2) without the cancellation for negative x
    "gelu": "y = (T)0.5 * x * erfc(-x * (T)0.70710678118654752440)",
    "sigmoid": "y = (T)1 / ((T)1 + exp(-x))",
    "silu": "y = x / ((T)1 + exp(-x))",
    "relu": "y = x < (T)0 ? (T)0 : x",  # NaN stays NaN, as numpy's maximum
    "softplus": "y = (x > (T)0 ? x : (T)0) + log1p(exp(-fabs(x)))",
}


def fast_kernels(cp: Any) -> dict[str, Callable[..., Any]]:
    """op name -> fused kernel, falling back to ``None`` (the caller's table) for other dtypes."""
    from ember.array_module.nn import KERNELS as shared

    floats = (cp.dtype(cp.float32), cp.dtype(cp.float64))
    table: dict[str, Callable[..., Any]] = {}
    for op, body in _UNARY.items():
        fused = cp.ElementwiseKernel("T x", "T y", body, f"ember_{op}")
        table[op] = _with_fallback(fused, shared[op], floats)
    return table


def _with_fallback(fused: Any, fallback: Callable[..., Any], dtypes: tuple[Any, ...]) -> Callable[..., Any]:
    def run(a: Any) -> Any:
        if a.dtype in dtypes:
            return fused(a)
        return fallback(a)

    return run


# -- the dispatch-bound path: binary ops on contiguous operands of one shape ---------------------
#: op -> C expression of ``a`` and ``b`` (type T); the ops a training step runs most often
_BINARY = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b"}
_CTYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}

_BINARY_SOURCE = r"""
extern "C" __global__ void ember_{op}_{ctype_id}_{form}(const {T}* __restrict__ x, {b_decl}, {T}* __restrict__ y,
                                                   const long long n) {{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {{ const {T} a = x[i]; const {T} b = {b_read}; y[i] = {expr}; }}
}}
"""


def binary_kernels(cp: Any, shared: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """add/sub/mul/div as one precompiled kernel launch when both operands are C-contiguous
    arrays of one shape and dtype (or ``b`` is a Python scalar): CuPy's ufunc machinery costs
    more than the launch itself on small tensors. Everything else goes to the ufunc (``shared``)."""
    ndarray, empty, int64 = cp.ndarray, cp.empty, cp.int64
    compiled: dict[tuple[str, str, str], Any] = {}

    def kernel(op: str, dtname: str, form: str) -> Any:
        key = (op, dtname, form)
        k = compiled.get(key)
        if k is None:
            T = _CTYPES[dtname]
            b_decl = f"const {T}* __restrict__ z" if form == "tt" else f"const {T} z"
            b_read = "z[i]" if form == "tt" else "z"
            src = _BINARY_SOURCE.format(
                op=op, ctype_id=dtname, form=form, T=T, b_decl=b_decl, b_read=b_read, expr=_BINARY[op]
            )
            k = compiled[key] = cp.RawKernel(src, f"ember_{op}_{dtname}_{form}")
        return k

    scalar_types = {"float32": cp.float32, "float64": cp.float64, "int32": cp.int32, "int64": cp.int64}

    def make(op: str) -> Callable[..., Any]:
        fallback = shared[op]
        # integer division is numpy's true division (and never traps on zero): floats only
        dtypes = {"float32", "float64"} if op == "div" else set(_CTYPES)

        def run(a: Any, b: Any) -> Any:
            dt = a.dtype
            name = dt.name
            if name in dtypes and a.flags.c_contiguous:
                if type(b) is ndarray:
                    if b.dtype == dt and b.shape == a.shape and b.flags.c_contiguous:
                        n = a.size
                        out = empty(a.shape, dt)
                        if n:
                            kernel(op, name, "tt")(((n + 255) >> 8,), (256,), (a, b, out, int64(n)))
                        return out
                elif type(b) is float or type(b) is int:
                    if name[0] == "f" or type(b) is int:
                        n = a.size
                        out = empty(a.shape, dt)
                        if n:
                            kernel(op, name, "ts")(((n + 255) >> 8,), (256,), (a, scalar_types[name](b), out, int64(n)))
                        return out
            return fallback(a, b)

        return run

    return {op: make(op) for op in _BINARY}

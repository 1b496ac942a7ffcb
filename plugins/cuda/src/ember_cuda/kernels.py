"""Kernels of ember-cuda's own where CuPy's generic path is slow.

CuPy's ufunc machinery (type resolution, broadcasting, an indexer per dimension count) costs
more than the launch on small tensors and leaves bandwidth unused on large ones; its gelu is
five passes over memory. For C-contiguous operands of one shape (or a tensor and a Python
scalar) in float32, float64, int32 or int64, the ops below are one precompiled kernel: a
grid-stride loop, four elements per thread (``float4`` loads) for aligned float32. Anything else
goes to the shared kernel the op had before (``fallback``).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["fast_kernels", "BINARY", "UNARY"]

#: op -> C expression of ``a`` and ``b``
BINARY = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b"}
#: op -> C expression of ``a`` (``T`` is the element type); activations training spends time in
UNARY = {
    # erfc(-x / sqrt 2) = 1 + erf(x / sqrt 2) without the cancellation for negative x
    "gelu": "(T)0.5 * a * erfc(-a * (T)0.70710678118654752440)",
    "sigmoid": "(T)1 / ((T)1 + exp(-a))",
    "silu": "a / ((T)1 + exp(-a))",
    "relu": "a < (T)0 ? (T)0 : a",  # NaN stays NaN, as numpy's maximum
    "softplus": "(a > (T)0 ? a : (T)0) + log1p(exp(-fabs(a)))",
}
_CTYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}
_FLOATS = ("float32", "float64")
_LANES = ("x", "y", "z", "w")

_SOURCE = r"""
typedef {T} T;
__device__ __forceinline__ T ember_op(const T a, const T b) {{ return {expr}; }}
extern "C" __global__ void {name}(const {V}* __restrict__ x, {b_decl}, {V}* __restrict__ y, const long long n) {{
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {{
        const {V} a = x[i];
        {b_load}
        {V} r;
        {body}
        y[i] = r;
    }}
}}
"""


def _source(name: str, ctype: str, expr: str, form: str, vec: bool) -> str:
    """A grid-stride kernel ``y[i] = op(x[i], b)``; form "tt" (b an array), "ts" (b a scalar), "t" (unary)."""
    V = "float4" if vec else ctype
    if form == "tt":
        b_decl, b_load = f"const {V}* __restrict__ z", f"const {V} b = z[i];"
    else:
        b_decl, b_load = f"const {ctype} z", f"const {ctype} b = z;"
    if vec:
        bl = (lambda c: f"b.{c}") if form == "tt" else (lambda c: "b")
        body = " ".join(f"r.{c} = ember_op(a.{c}, {bl(c)});" for c in _LANES)
    else:
        body = "r = ember_op(a, b);"
    return _SOURCE.format(T=ctype, expr=expr, name=name, V=V, b_decl=b_decl, b_load=b_load, body=body)


class Launcher:
    """One kernel launched through ``cuLaunchKernel`` with a parameter block kept between calls.

    CuPy's ``RawKernel.__call__`` boxes every argument in a new C object and checks its type on
    each launch (9 µs a call on the H200's host, more than the kernel); here the argument slots
    are ctypes values written in place, and the launch is one call into CuPy's driver binding.
    ``ctypes_types`` are the kernel's parameter types in order (``c_void_p`` for arrays).
    """

    def __init__(self, cp: Any, kernel: Any, ctypes_types: tuple[Any, ...]) -> None:
        self._function = kernel.kernel.ptr  # compiles for the current device
        self._launch = cp.cuda.driver.launchKernel
        self._stream = cp.cuda.get_current_stream
        self._slots = [t() for t in ctypes_types]
        self._block = (ctypes.c_void_p * len(ctypes_types))(*(ctypes.addressof(v) for v in self._slots))
        self._address = ctypes.addressof(self._block)
        self._lock = threading.Lock()

    def __call__(self, blocks: int, threads: int, *values: Any) -> None:
        """Launch ``blocks`` x ``threads`` on the current stream; ``values`` are ints (pointers) or numbers."""
        with self._lock:  # the slots are read by the launch itself, so one launch at a time fills them
            for slot, value in zip(self._slots, values):
                slot.value = value
            self._launch(self._function, blocks, 1, 1, threads, 1, 1, 0, self._stream().ptr, self._address, 0)


_SCALAR_CTYPES = {
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
    "int32": ctypes.c_int,
    "int64": ctypes.c_longlong,
}


def fast_kernels(cp: Any, fallback: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """op name -> the direct kernel for :data:`BINARY` and :data:`UNARY`, falling back to
    ``fallback[op]`` for operands it does not cover."""
    ndarray, empty = cp.ndarray, cp.empty
    #: dtype -> its name, for the dtypes these kernels take (numpy's ``dtype.name`` is Python code)
    names = {np.dtype(n): n for n in _CTYPES}
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    max_blocks = sms * 16
    compiled: dict[tuple[str, str, str, bool], Launcher] = {}
    pointer = ctypes.c_void_p

    def kernel(op: str, dtname: str, form: str, vec: bool) -> Launcher:
        key = (op, dtname, form, vec)
        k = compiled.get(key)
        if k is None:
            name = f"ember_{op}_{dtname}_{form}{'_v4' if vec else ''}"
            expr = BINARY.get(op) or UNARY[op]
            raw = cp.RawKernel(_source(name, _CTYPES[dtname], expr, form, vec), name)
            second = pointer if form == "tt" else _SCALAR_CTYPES[dtname]
            k = compiled[key] = Launcher(cp, raw, (pointer, second, pointer, ctypes.c_longlong))
        return k

    def launch(op: str, name: str, form: str, a: Any, b: Any) -> Any:
        out = empty(a.shape, a.dtype)
        n = a.size
        if n:
            x = a.data.ptr
            z = b.data.ptr if form == "tt" else b
            vec = n >= 1024 and name == "float32" and n % 4 == 0 and not (x & 15) and (form != "tt" or not (z & 15))
            if vec:
                n //= 4
            blocks = min((n + 255) >> 8, max_blocks)
            kernel(op, name, form, vec)(blocks, 256, x, z, out.data.ptr, n)
        return out

    def binary(op: str) -> Callable[..., Any]:
        other = fallback[op]
        # integer division is numpy's true division (and never traps on zero): floats only
        dtypes = {dt: n for dt, n in names.items() if op != "div" or n in _FLOATS}

        def run(a: Any, b: Any) -> Any:
            name = dtypes.get(a.dtype)
            if name is not None and a.flags.c_contiguous:
                if type(b) is ndarray:
                    if b.dtype == a.dtype and b.shape == a.shape and b.flags.c_contiguous:
                        return launch(op, name, "tt", a, b)
                elif type(b) is float or type(b) is int:
                    if name[0] == "f" or type(b) is int:
                        return launch(op, name, "ts", a, b)
            return other(a, b)

        return run

    def unary(op: str) -> Callable[..., Any]:
        other = fallback[op]
        floats = {dt: n for dt, n in names.items() if n in _FLOATS}

        def run(a: Any) -> Any:
            name = floats.get(a.dtype)
            if name is not None:
                if not a.flags.c_contiguous:
                    a = cp.ascontiguousarray(a)
                return launch(op, name, "t", a, 0)
            return other(a)

        return run

    return {**{op: binary(op) for op in BINARY}, **{op: unary(op) for op in UNARY}}


def exact_nextafter(cp: Any) -> Callable[..., Any]:
    """``nextafter`` by its definition on the bit patterns: CuPy's flushes subnormals to zero
    (``nextafter(0, 1)`` gives the smallest normal float32), and misses float16's overflow steps.
    The selection is done on the integer patterns, so every float dtype (bfloat16 too) stays itself."""
    itypes = {2: cp.int16, 4: cp.int32, 8: cp.int64}

    def nextafter(a: Any, b: Any) -> Any:
        dtype, shape = a.dtype, a.shape
        b = cp.asarray(b, dtype=dtype)
        shape = tuple(np.broadcast_shapes(a.shape, b.shape))
        a = cp.ascontiguousarray(cp.broadcast_to(a, shape)).reshape(shape)
        b = cp.ascontiguousarray(cp.broadcast_to(b, shape)).reshape(shape)
        itype = itypes[dtype.itemsize]
        bits, bbits = a.view(itype), b.view(itype)
        one = itype(1)
        away = (b > a) == (a > 0)  # one step away from zero adds one to the pattern, toward it subtracts
        out = cp.where(away, bits + one, bits - one)
        sign = itype(-(1 << (8 * dtype.itemsize - 1)))
        out = cp.where(a == 0, cp.where(b > 0, one, sign | one), out)
        out = cp.where(a == b, bbits, out)
        nan = cp.asarray(np.full((), np.nan, dtype=dtype).view(np.dtype(itype)))
        out = cp.where(cp.isnan(a) | cp.isnan(b), nan, out).astype(itype, copy=False)
        return out.view(dtype)

    return nextafter


def exact_remainder(cp: Any, fallback: Callable[..., Any]) -> Callable[..., Any]:
    """Floating ``remainder`` as numpy defines it (the sign of the divisor, from ``fmod``): CuPy's
    loses the sign of zero and gives NaN for a finite dividend over an infinite divisor."""

    def remainder(a: Any, b: Any) -> Any:
        if a.dtype.kind != "f":
            return fallback(a, b)
        b = cp.asarray(b, dtype=a.dtype)
        mod = cp.fmod(a, b)
        flip = (mod != 0) & ((b < 0) != (mod < 0))  # NaN compares false: a zero divisor stays NaN
        out = cp.where(flip, mod + b, mod)
        return cp.where(mod == 0, cp.copysign(cp.zeros((), a.dtype), b), out).astype(a.dtype, copy=False)

    return remainder

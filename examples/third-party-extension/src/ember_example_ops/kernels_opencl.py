"""Native kernels for ``opencl`` devices, in OpenCL C, compiled and launched through ember-opencl's
runtime (``backend.rt``: ``kernel`` compiles and caches by key, ``empty`` allocates a result,
``grid`` sizes the launch, ``launch`` queues it). Registered only when ember-opencl is installed;
nothing here imports pyopencl. Inputs are made contiguous first (``backend.make_contiguous``),
so a kernel reads ``buffer[offset + i]``; every kernel is a grid-stride loop because ``rt.grid``
caps the number of work groups on GPUs.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from .ops import squared_relu, swiglu

__all__ = ["register", "SOURCES"]

_CTYPE = {"float32": "float", "float64": "double"}

#: the kernel bodies: ``T`` is the C type, ``a[i]`` etc. the inputs' elements
SOURCES = {
    "swiglu": (
        "__global const T* a, const long oa, __global const T* b, const long ob",
        "const T x = a[oa + i]; out[i] = x / ((T)1 + exp(-x)) * b[ob + i];",
    ),
    "squared_relu": (
        "__global const T* a, const long oa",
        "const T r = fmax(a[oa + i], (T)0); out[i] = r * r;",
    ),
}


def _source(op: str, ctype: str) -> str:
    params, body = SOURCES[op]
    pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if ctype == "double" else ""
    return (
        f"{pragma}#define T {ctype}\n"
        f"__kernel void example_{op}(__global T* restrict out, {params}, const long n) {{\n"
        "    for (long i = get_global_id(0); i < n; i += get_global_size(0)) { " + body + " }\n"
        "}\n"
    )


def _run(backend: Any, op: str, *inputs: Any) -> Any:
    rt = backend.rt
    inputs = tuple(backend.make_contiguous(x) for x in inputs)
    first = inputs[0]
    out = rt.empty(first.shape, first.dtype)
    n = int(np.prod(first.shape, dtype=np.int64))
    if n == 0:
        return out
    ctype = _CTYPE[first.dtype.name]
    argtypes = [None] + [None, np.int64] * len(inputs) + [np.int64]
    knl, wg = rt.kernel(("example_ops", op, ctype), lambda: (_source(op, ctype), f"example_{op}", argtypes))
    gsize, lsize = rt.grid(n, wg)
    args: list[Any] = [out.buf]
    for x in inputs:
        args += [x.buf, x.offset]
    rt.launch(knl, gsize, lsize, [*args, n])
    return out


def _swiglu(backend: Any, a: Any, b: Any) -> Any:
    return _run(backend, "swiglu", a, b)


def _squared_relu(backend: Any, x: Any) -> Any:
    return _run(backend, "squared_relu", x)


def register(kind: str = "opencl") -> bool:
    """Register the OpenCL kernels when ember-opencl is installed; whether they were."""
    if importlib.util.find_spec("ember_opencl") is None:
        return False
    swiglu.kernel(kind)(_swiglu)
    squared_relu.kernel(kind)(_squared_relu)
    return True

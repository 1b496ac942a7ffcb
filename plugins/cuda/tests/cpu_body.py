"""Run a generated kernel body on the CPU: the ``__device__`` part of ``codegen`` compiled by g++
with small stand-ins for the CUDA built-ins (bit casts, the float16 ``cvt`` instructions), so
the expression table's semantics (sign rules, NaN, zero divisors, rounding) can be checked
against numpy on a machine without a GPU. Math library results may differ from CUDA's by an ulp;
the branches and special values are what this checks."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

import numpy as np
from ember_cuda.codegen import PREAMBLE_F16, ctype, device_source

from ember.lazy.program import FusedProgram

_PRELUDE = r"""
#include <math.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
using std::isnan; using std::isinf; using std::isfinite;
#define __device__
#define __forceinline__ inline
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; memcpy(&u, &f, 4); return u; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
"""

_F16 = r"""
static inline float ember_h2f(unsigned short h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static inline unsigned short ember_f2h(float f) {
    _Float16 x = (_Float16)f; unsigned short h; memcpy(&h, &x, 2); return h;
}
static inline unsigned short ember_d2h(double d) {
    _Float16 x = (_Float16)d; unsigned short h; memcpy(&h, &x, 2); return h;
}
"""


def available() -> bool:
    return shutil.which("g++") is not None


def run(prog: FusedProgram, columns: list[np.ndarray]) -> list[np.ndarray]:
    """``prog``'s outputs over equal-length input ``columns`` (one per input, scalars too), as
    float64 / int64 / bool arrays, computed by the generated body compiled for the CPU."""
    types = [ctype(d) for d in prog.value_dtypes()]
    n = len(columns[0])
    body = device_source(prog, "k").replace(PREAMBLE_F16, _F16)
    reads, call = [], []
    for j in range(len(prog.inputs)):
        c = types[j]
        host, fmt = {"f": ("double", "%lf"), "u": ("unsigned long long", "%llu")}.get(c.kind, ("long long", "%lld"))
        value = c.rounded(f"({c.compute})t{j}")  # a 16-bit float input holds a 16-bit value
        reads.append(f'{host} t{j}; if (scanf("{fmt}", &t{j}) != 1) return 2; const {c.compute} v{j} = {value};')
        call.append(f"v{j}")
    writes = []
    for k, o in enumerate(prog.outputs):
        c = types[o]
        reads.append(f"{c.compute} r{k};")
        call.append(f"r{k}")
        if c.kind == "f":
            writes.append(f'printf("%a ", (double)r{k});')
        elif c.kind == "u":
            writes.append(f'printf("%llu ", (unsigned long long)r{k});')
        else:
            writes.append(f'printf("%lld ", (long long)r{k});')
    main = (
        'int main() { int n; if (scanf("%d", &n) != 1) return 2; for (int e = 0; e < n; ++e) {\n'
        + "\n".join(reads)
        + f"\nk_body({', '.join(call)});\n"
        + "\n".join(writes)
        + '\nprintf("\\n"); } return 0; }\n'
    )
    text = [str(n)]
    for e in range(n):
        for j in range(len(prog.inputs)):
            v = columns[j][e]
            text.append(float(v).hex() if types[j].kind == "f" else str(int(v)))
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "k.cpp"), os.path.join(tmp, "k")
        with open(src, "w") as f:
            f.write(_PRELUDE + body + main)
        subprocess.run(["g++", "-O0", "-std=c++17", "-o", exe, src], check=True, capture_output=True, text=True)
        done = subprocess.run([exe], input=" ".join(text), capture_output=True, text=True, check=True)
    rows = [line.split() for line in done.stdout.splitlines()]
    outs = []
    for k, o in enumerate(prog.outputs):
        c = types[o]
        if c.kind == "f":
            outs.append(np.array([float.fromhex(r[k]) for r in rows]))
        elif c.kind == "b":
            outs.append(np.array([int(r[k]) != 0 for r in rows]))
        else:
            outs.append(np.array([int(r[k]) for r in rows], dtype=object))
    return outs


_KERNEL_PRELUDE = r"""
struct ember_dim3 { unsigned int x, y, z; };
static const ember_dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0}, blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
struct alignas(16) float4 { float x, y, z, w; };
#define __global__
#define __restrict__ __restrict
"""


class KernelLibrary:
    """A whole generated kernel built by g++ as a host function: one "thread" whose grid-stride
    loop walks every element, reading and writing host memory through the same arguments."""

    def __init__(self, source: str, tmp: str) -> None:
        import ctypes

        src, lib = os.path.join(tmp, "kernel.cpp"), os.path.join(tmp, f"kernel{len(os.listdir(tmp))}.so")
        with open(src, "w") as f:
            f.write(_PRELUDE + _KERNEL_PRELUDE + source.replace(PREAMBLE_F16, _F16))
        subprocess.run(
            ["g++", "-O1", "-std=c++17", "-shared", "-fPIC", "-o", lib, src], check=True, capture_output=True
        )
        self.lib = ctypes.CDLL(lib)

    def function(self, name: str, argtypes: tuple[object, ...]) -> object:
        fn = getattr(self.lib, name)
        fn.argtypes = list(argtypes)
        fn.restype = None
        return fn

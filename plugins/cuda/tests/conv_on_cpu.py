"""Run ember-cuda's convolution and pooling kernels (``conv.py``) on the CPU, behind a stand-in CuPy.

The kernels' own CUDA source is compiled by g++ into a shared library with stand-ins for the
built-ins (``blockIdx`` and friends are globals, ``float4`` / ``double2`` plain structs); each
kernel gets a C wrapper that runs every thread of the launch's grid one after another (the kernels
share nothing between threads), last to first and then first to last: a result that differs
between the two orders means two threads wrote one element. ``FakeCupy`` is enough of CuPy for
``conv.conv_kernels``: arrays are numpy arrays (``DeviceArray``, with CuPy's ``data.ptr``), each
allocated with guard zones on both sides, and ``empty`` fills with NaN, so an element a kernel
should write but does not shows up in the result, and a write past either end of a buffer fails the
launch. ``FakeCupy.matmul`` (the cuBLAS stand-in) checks that both operands have the layout the
backend's direct cuBLAS call takes (``blas._layout``), so a slow CuPy fallback cannot hide there."""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import subprocess
import tempfile
import weakref
from collections import Counter
from types import SimpleNamespace
from typing import Any

import numpy as np

_PRELUDE = r"""
#include <algorithm>
#include <cstring>
using std::max;
using std::min;
struct ember_dim3 { unsigned int x, y, z; };
static ember_dim3 blockIdx, threadIdx, blockDim, gridDim;
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(16) double2 { double x, y; };
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
"""

_SIGNATURE = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\)')
_GUARD = 64  # elements of guard zone on each side of every buffer


def available() -> bool:
    return shutil.which("g++") is not None


def _parameters(params: str) -> list[tuple[str, str | None]]:
    """(name, the C pointer type or None for an int) of each parameter of a kernel's signature."""
    out = []
    for p in params.split(","):
        decl = p.replace("__restrict__", "").strip()
        name = decl.split()[-1].lstrip("*")
        out.append((name, decl[: decl.rindex(name)].strip() if "*" in decl else None))
    return out


@functools.cache
def _library(code: str) -> tuple[ctypes.CDLL, dict[str, list[bool]]]:
    """``code`` built by g++ with a ``run_<kernel>(grid, block, args...)`` per kernel; the kernels'
    parameter kinds (True: a pointer)."""
    kernels = {name: _parameters(params) for name, params in _SIGNATURE.findall(code)}
    wrappers = []
    for name, params in kernels.items():
        decl = ", ".join(f"{'void*' if ptr else 'int'} {p}" for p, ptr in params)
        call = ", ".join(f"({ptr}){p}" if ptr else p for p, ptr in params)
        wrappers.append(
            f'extern "C" void run_{name}(int grid, int block, int reverse, {decl}) {{\n'
            "  gridDim = {(unsigned)grid, 1, 1}; blockDim = {(unsigned)block, 1, 1};\n"
            "  for (int j = 0; j < grid * block; j++) {\n"
            "    const int k = reverse ? grid * block - 1 - j : j;\n"
            "    blockIdx = {(unsigned)(k / block), 0, 0}; threadIdx = {(unsigned)(k % block), 0, 0};\n"
            f"    {name}({call});\n"
            "  }\n}\n"
        )
    text = _PRELUDE + code.replace('extern "C" __global__', "static") + "".join(wrappers)
    folder = tempfile.mkdtemp(prefix="ember-conv-on-cpu-")
    cpp, lib = os.path.join(folder, "k.cpp"), os.path.join(folder, "k.so")
    with open(cpp, "w") as f:
        f.write(text)
    flags = ["-std=c++17", "-O1", "-shared", "-fPIC", "-ffp-contract=off", "-Wall", "-Werror", "-Wno-unused-function"]
    done = subprocess.run(["g++", *flags, "-o", lib, cpp], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"g++ failed:\n{done.stderr[-4000:]}")
    return ctypes.CDLL(lib), {name: [ptr is not None for _, ptr in params] for name, params in kernels.items()}


class DeviceArray(np.ndarray):
    """A numpy array with CuPy's ``data.ptr``."""

    @property
    def data(self) -> Any:  # type: ignore[override]
        return SimpleNamespace(ptr=self.ctypes.data)


class FakeCupy:
    """The part of CuPy ``conv.conv_kernels`` uses, over numpy, running kernels through g++."""

    def __init__(self, sms: int = 1, *, check_order: bool = True) -> None:
        self.cuda = SimpleNamespace(Device=lambda: SimpleNamespace(attributes={"MultiProcessorCount": sms}))
        self.launches: Counter[str] = Counter()
        self.check_order = check_order  # run each launch in both thread orders and compare
        self.gemms = 0
        self.accumulated = 0  # GEMMs that added into their output (``accumulate=True``)
        self._buffers: list[tuple[weakref.ref[np.ndarray], bytes, bytes]] = []  # (a buffer dies with its arrays)
        #: the most bytes of live buffers seen at an allocation (reset it to measure a call's)
        self.peak = 0

    def live_bytes(self) -> int:
        """Bytes of the buffers some array still holds (guard zones not counted)."""
        self._buffers = [b for b in self._buffers if b[0]() is not None]
        return sum(ref().nbytes - 2 * _GUARD * ref().itemsize for ref, _, _ in self._buffers)  # type: ignore[union-attr]

    # -- arrays --------------------------------------------------------------------------------
    def empty(self, shape: Any, dtype: Any = np.float32) -> DeviceArray:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        size = int(np.prod(shape))
        base = np.full(size + 2 * _GUARD, np.nan, dtype=dtype)
        base[:_GUARD] = np.arange(_GUARD)  # guard values a kernel would not write by chance
        base[-_GUARD:] = -np.arange(_GUARD) - 0.5
        self._buffers.append((weakref.ref(base), base[:_GUARD].tobytes(), base[-_GUARD:].tobytes()))
        self.peak = max(self.peak, self.live_bytes())
        return base[_GUARD : _GUARD + size].reshape(shape).view(DeviceArray)

    def asarray(self, a: Any, dtype: Any = None) -> DeviceArray:
        a = np.asarray(a, dtype=dtype)
        out = self.empty(a.shape, a.dtype)
        out[...] = a
        return out

    def zeros(self, shape: Any, dtype: Any = np.float32) -> DeviceArray:
        out = self.empty(shape, dtype)
        out[...] = 0
        return out

    def ones(self, shape: Any, dtype: Any = np.float32) -> DeviceArray:
        out = self.empty(shape, dtype)
        out[...] = 1
        return out

    def ascontiguousarray(self, a: Any) -> DeviceArray:
        return a if isinstance(a, DeviceArray) and a.flags.c_contiguous else self.asarray(a)

    def check_guards(self) -> None:
        self._buffers = [b for b in self._buffers if b[0]() is not None]
        for ref, head, tail in self._buffers:
            base = ref()
            if base is not None and (base[:_GUARD].tobytes() != head or base[-_GUARD:].tobytes() != tail):
                raise AssertionError(f"a kernel wrote past a buffer of {base.size - 2 * _GUARD} elements")

    # -- cuBLAS's stand-in -----------------------------------------------------------------------
    def matmul(self, a: Any, b: Any, *, out: Any = None, accumulate: bool = False) -> DeviceArray:
        """a @ b, after checking the backend's direct cuBLAS call takes both operands as they are;
        into ``out`` (which must be what that call stores into: C-contiguous, the product's shape)
        and added to it with ``accumulate``, as ``blas.matmul`` does."""
        from ember_cuda.blas import _layout

        assert _layout(a) is not None and _layout(b) is not None, (a.shape, a.strides, b.shape, b.strides)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        for x in (a, b):
            assert x.shape[:-2] == batch or int(np.prod(x.shape[:-2])) == 1, (a.shape, b.shape)
        self.gemms += 1
        product = np.matmul(a, b)
        if out is None:
            return self.asarray(product)
        assert isinstance(out, DeviceArray) and out.flags.c_contiguous and out.shape == product.shape, out.shape
        out[...] = out + product if accumulate else product
        self.accumulated += accumulate
        return out

    matmul.takes_out = True  # type: ignore[attr-defined]  # (as blas.matmul)

    # -- kernels ---------------------------------------------------------------------------------
    def RawModule(self, code: str) -> Any:  # noqa: N802 - CuPy's name
        lib, kinds = _library(code)
        fake = self

        def get_function(name: str) -> Any:
            run = getattr(lib, f"run_{name}")
            pointers = kinds[name]

            def launch(grid: tuple[int, ...], block: tuple[int, ...], args: tuple[Any, ...]) -> None:
                assert len(grid) == 1 and len(block) == 1 and len(args) == len(pointers), (name, grid, block)
                values = []
                for a, ptr in zip(args, pointers):
                    if ptr:
                        assert isinstance(a, DeviceArray) and a.flags.c_contiguous, (name, type(a))
                        values.append(ctypes.c_void_p(a.ctypes.data))
                    else:
                        assert isinstance(a, np.int32), (name, type(a))
                        values.append(ctypes.c_int(int(a)))
                arrays = [a for a, ptr in zip(args, pointers) if ptr]
                if fake.check_order:
                    before = [a.copy() for a in arrays]
                    run(ctypes.c_int(grid[0]), ctypes.c_int(block[0]), ctypes.c_int(1), *values)
                    backwards = [a.copy() for a in arrays]
                    for a, b in zip(arrays, before):
                        a[...] = b
                run(ctypes.c_int(grid[0]), ctypes.c_int(block[0]), ctypes.c_int(0), *values)
                for a, b in zip(arrays, backwards if fake.check_order else ()):  # two threads, one element
                    assert a.tobytes() == b.tobytes(), f"{name}: the result depends on the order of its threads"
                fake.launches[name] += 1
                fake.check_guards()

            return launch

        return SimpleNamespace(get_function=get_function)

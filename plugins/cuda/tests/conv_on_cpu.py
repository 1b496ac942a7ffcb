"""Run ember-cuda's convolution and pooling kernels (``conv.py``) on the CPU, behind a stand-in CuPy.

The kernels' own CUDA source is compiled by g++ into a shared library with stand-ins for the
built-ins (``blockIdx`` and friends are globals, ``float4`` / ``double2`` plain structs); each
kernel gets a C wrapper that runs every thread of the launch's grid one after another, last to
first and then first to last: a result that differs between the two orders means two threads wrote
one element. A module that calls ``__syncthreads`` (the implicit-GEMM kernels, ``igemm.py``) runs
each block's threads as fibers (ucontext) that take turns up to each barrier, ``__shared__``
arrays being statics that the block's fibers share; a barrier that some threads of a block skip
fails the launch. ``FakeCupy`` is enough of CuPy for
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
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(n)
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
"""

#: a block's threads as fibers: each runs to its next ``__syncthreads`` (or its end) in turn
_FIBERS = r"""
#include <ucontext.h>
#include <vector>
static ucontext_t ember_scheduler;
static std::vector<ucontext_t> ember_fibers;
static std::vector<char> ember_stacks;
static std::vector<int> ember_state;  // 0 runnable, 1 at a barrier, 2 returned
static int ember_current;
static void (*ember_body)();
static void __syncthreads() {
  ember_state[ember_current] = 1;
  swapcontext(&ember_fibers[ember_current], &ember_scheduler);
}
static void ember_fiber_main() { ember_body(); ember_state[ember_current] = 2; }
// the block at blockIdx, its threads in turn (last first with reverse); 1: a barrier some threads skipped
static int ember_run_block(int block, int reverse) {
  const size_t stack = 1 << 17;
  ember_fibers.assign(block, ucontext_t());
  ember_stacks.resize(block * stack);
  ember_state.assign(block, 0);
  for (int i = 0; i < block; i++) {
    getcontext(&ember_fibers[i]);
    ember_fibers[i].uc_stack.ss_sp = &ember_stacks[i * stack];
    ember_fibers[i].uc_stack.ss_size = stack;
    ember_fibers[i].uc_link = &ember_scheduler;
    makecontext(&ember_fibers[i], ember_fiber_main, 0);
  }
  for (;;) {
    int returned = 0, waiting = 0;
    for (int j = 0; j < block; j++) {
      const int i = reverse ? block - 1 - j : j;
      if (ember_state[i] != 2) {
        ember_state[i] = 0;
        ember_current = i;
        threadIdx = {(unsigned)i, 0, 0};
        swapcontext(&ember_scheduler, &ember_fibers[i]);
      }
      if (ember_state[i] == 2) returned++; else waiting++;
    }
    if (returned == block) return 0;
    if (returned) return 1;
  }
}
"""

_SIGNATURE = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\(\w+\) )?(\w+)\(([^)]*)\)')
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
    fibers = "__syncthreads" in code
    wrappers = []
    for name, params in kernels.items():
        decl = ", ".join(f"{'void*' if ptr else 'int'} {p}" for p, ptr in params)
        call = ", ".join(f"({ptr}){p}" if ptr else p for p, ptr in params)
        if fibers:  # the arguments in statics, read by the body each fiber runs
            store = " ".join(f"ember_a_{name}_{p} = {p};" for p, _ in params)
            wrappers.append(
                "".join(f"static {'void*' if ptr else 'int'} ember_a_{name}_{p};\n" for p, ptr in params)
                + f"static void ember_b_{name}() {{ {name}("
                + ", ".join(f"({ptr})ember_a_{name}_{p}" if ptr else f"ember_a_{name}_{p}" for p, ptr in params)
                + "); }\n"
                f'extern "C" int run_{name}(int grid, int block, int reverse, {decl}) {{\n'
                f"  {store} ember_body = ember_b_{name};\n"
                "  gridDim = {(unsigned)grid, 1, 1}; blockDim = {(unsigned)block, 1, 1};\n"
                "  for (int j = 0; j < grid; j++) {\n"
                "    blockIdx = {(unsigned)(reverse ? grid - 1 - j : j), 0, 0};\n"
                "    if (ember_run_block(block, reverse)) return 1;\n"
                "  }\n  return 0;\n}\n"
            )
            continue
        wrappers.append(
            f'extern "C" int run_{name}(int grid, int block, int reverse, {decl}) {{\n'
            "  gridDim = {(unsigned)grid, 1, 1}; blockDim = {(unsigned)block, 1, 1};\n"
            "  for (int j = 0; j < grid * block; j++) {\n"
            "    const int k = reverse ? grid * block - 1 - j : j;\n"
            "    blockIdx = {(unsigned)(k / block), 0, 0}; threadIdx = {(unsigned)(k % block), 0, 0};\n"
            f"    {name}({call});\n"
            "  }\n  return 0;\n}\n"
        )
    text = _PRELUDE + (_FIBERS if fibers else "") + code.replace('extern "C" __global__', "static") + "".join(wrappers)
    folder = tempfile.mkdtemp(prefix="ember-conv-on-cpu-")
    cpp, lib = os.path.join(folder, "k.cpp"), os.path.join(folder, "k.so")
    with open(cpp, "w") as f:
        f.write(text)
    flags = ["-std=c++17", "-O1", "-shared", "-fPIC", "-ffp-contract=off", "-Wall", "-Werror"]
    flags += ["-Wno-unused-function", "-Wno-unknown-pragmas"]
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
                diverged = f"{name}: a __syncthreads that some threads of a block skipped"
                if fake.check_order:
                    before = [a.copy() for a in arrays]
                    assert not run(ctypes.c_int(grid[0]), ctypes.c_int(block[0]), ctypes.c_int(1), *values), diverged
                    backwards = [a.copy() for a in arrays]
                    for a, b in zip(arrays, before):
                        a[...] = b
                assert not run(ctypes.c_int(grid[0]), ctypes.c_int(block[0]), ctypes.c_int(0), *values), diverged
                for a, b in zip(arrays, backwards if fake.check_order else ()):  # two threads, one element
                    assert a.tobytes() == b.tobytes(), f"{name}: the result depends on the order of its threads"
                fake.launches[name] += 1
                fake.check_guards()

            return launch

        return SimpleNamespace(get_function=get_function)

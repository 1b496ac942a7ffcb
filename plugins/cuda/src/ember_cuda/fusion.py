"""Running a :class:`~ember.lazy.program.FusedProgram` on CuPy arrays: the layout of a launch
(:func:`plan`), its argument block (:func:`pack`), and the kernel cache (:class:`FusedKernels`).

:func:`plan` broadcasts each tensor operand to the iteration shape, drops unit dimensions and
merges the dimensions every operand walks in step, then names each operand's mode (``c``
contiguous, ``z`` one element, ``s`` strided). The modes, the strided rank, the index type and
the ``float4`` choice are the kernel's cache key with the program; the sizes and strides are
arguments, so a new shape of the same layout compiles nothing.
"""

from __future__ import annotations

import ctypes
import functools
import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.lazy.program import FusedProgram

from .codegen import KERNEL_NAME, Layout, ctype, round16, source

__all__ = ["Plan", "plan", "pack", "argument_types", "FusedKernels", "COMPILE_OPTIONS", "INT32_LIMIT"]

#: indices stay below this in int32 kernels (room for one grid-stride step past the end)
INT32_LIMIT = 2**31 - 2**24
#: fused code keeps a * b + c as two roundings, as numpy computes it
COMPILE_OPTIONS = ("--std=c++17", "--fmad=false")
THREADS = 256
#: a grid-stride launch is capped at this many resident waves of blocks: W6 (2^26 float32) on the H200
#: ran 0.306 / 0.297 / 0.275 / 0.281 ms per kernel at 1 / 4 / 8 / 16 waves (benchmarks/w6_sweep.py,
#: plugins/cuda/logs/h200-2026-12-02-w6/run1/): more blocks keep more loads in flight
WAVES = 8

_SCALAR_CTYPES = {
    "bool": ctypes.c_bool,
    "signed char": ctypes.c_byte,
    "unsigned char": ctypes.c_ubyte,
    "short": ctypes.c_short,
    "unsigned short": ctypes.c_ushort,
    "int": ctypes.c_int,
    "unsigned int": ctypes.c_uint,
    "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong,
    "float": ctypes.c_float,
    "double": ctypes.c_double,
}


@dataclass(frozen=True)
class Plan:
    """One launch's layout (the cache key's part) and its numbers (the arguments' part)."""

    layout: Layout
    n: int
    shape: tuple[int, ...]  # collapsed iteration shape (strided kernels read it)
    strides: tuple[tuple[int, ...], ...]  # per tensor operand, in elements, over ``shape``


def plan(
    shape: tuple[int, ...],
    operands: list[tuple[tuple[int, ...], tuple[int, ...], int]],
    float32: tuple[bool, ...] | None = None,
) -> Plan:
    """The layout of iterating ``shape`` over ``operands`` = (shape, strides in elements, address).

    ``float32`` (per operand: is it float32) is given when every output is float32; the float4
    path is then taken if the count is a multiple of 4, no operand is strided and every
    contiguous operand is float32 at a 16-byte aligned address.
    """
    modes, cshape, cstrides, reach, n = _geometry(shape, tuple((o[0], o[1]) for o in operands))
    index = "int" if reach < INT32_LIMIT else "long long"
    strided = "s" in modes
    vec4 = (
        float32 is not None
        and not strided
        and n % 4 == 0
        and n > 0
        and all(m == "z" or (f and addr % 16 == 0) for m, f, (_, _, addr) in zip(modes, float32, operands))
    )
    layout = Layout(modes, len(cshape) if strided else 0, "long long" if vec4 else index, vec4)
    return Plan(layout, n, cshape, cstrides)


@functools.lru_cache(maxsize=4096)
def _geometry(
    shape: tuple[int, ...], operands: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]
) -> tuple[tuple[str, ...], tuple[int, ...], tuple[tuple[int, ...], ...], int, int]:
    """The address-free part of :func:`plan`, cached: a training step launches the same few
    geometries every iteration, and working them out is most of a launch's host time.

    Returns the operand modes, the collapsed shape and strides, the furthest index and the count.
    """
    n = math.prod(shape)
    rank = len(shape)
    full: list[list[int]] = []
    for oshape, ostrides in operands:
        pad = rank - len(oshape)
        st = [0] * pad + [0 if oshape[d] == 1 else ostrides[d] for d in range(len(oshape))]
        full.append(st)
    dims = [d for d in range(rank) if shape[d] != 1]
    cshape: list[int] = []
    cstrides: list[list[int]] = [[] for _ in operands]
    for d in dims:
        if cshape and all(st[-1] == full[k][d] * shape[d] for k, st in enumerate(cstrides)):
            cshape[-1] *= shape[d]
            for k, st in enumerate(cstrides):
                st[-1] = full[k][d]
            continue
        cshape.append(shape[d])
        for k, st in enumerate(cstrides):
            st.append(full[k][d])
    contiguous = [math.prod(cshape[d + 1 :]) for d in range(len(cshape))]
    modes = []
    for st in cstrides:
        if n > 1 and all(s == 0 for s in st):
            modes.append("z")
        elif st == contiguous or n <= 1:
            modes.append("c")
        else:
            modes.append("s")
    reach = max([n] + [sum((e - 1) * abs(s) for e, s in zip(cshape, st)) for st in cstrides])
    return tuple(modes), tuple(cshape), tuple(tuple(st) for st in cstrides), reach, n


def argument_types(prog: FusedProgram, layout: Layout) -> tuple[Any, ...]:
    """The ctypes types of the kernel's parameters, in the order :func:`codegen.source` declares them."""
    index = ctypes.c_int if layout.index == "int" else ctypes.c_longlong
    strided = "s" in layout.modes
    types: list[Any] = [index] + ([index] * layout.rank if strided else [])
    modes = iter(layout.modes)
    for dt, kind in prog.inputs:
        if kind == "scalar":
            types.append(_SCALAR_CTYPES[ctype(dt).compute])
            continue
        types.append(ctypes.c_void_p)
        if next(modes) == "s" and not layout.vec4:
            types += [index] * layout.rank
    types += [ctypes.c_void_p] * len(prog.outputs)
    return tuple(types)


def pack(prog: FusedProgram, p: Plan, operands: list[Any], addresses: list[int], outputs: list[int]) -> list[Any]:
    """The argument values: ``n``, the collapsed shape if strided, per input its address (and
    strides) or its scalar value converted to the input's dtype, then the output addresses."""
    layout = p.layout
    strided = "s" in layout.modes
    values: list[Any] = [p.n] + (list(p.shape) if strided else [])
    tensor = 0
    for (dt, kind), value in zip(prog.inputs, operands):
        if kind == "scalar":
            values.append(scalar_value(value, dt))
            continue
        values.append(addresses[tensor])
        if layout.modes[tensor] == "s":
            values += list(p.strides[tensor])
        tensor += 1
    return values + list(outputs)


def scalar_value(value: Any, dtype: str) -> Any:
    """A Python number as the kernel argument of a scalar input of ``dtype`` (16-bit floats rounded first)."""
    c = ctype(dtype)
    if c.kind == "b":
        return bool(value)
    if c.kind == "f":
        v = float(value)
        if c.half:  # numpy's double -> float16 is one correct rounding
            v = float(np.float16(v)) if dtype == "float16" else round16(float(np.float32(v)), dtype)
        return v
    return int(value)


class FusedKernels:
    """Compiled fused kernels of one device, by (program, layout): a Launcher and a grid size each."""

    def __init__(self, cp: Any) -> None:
        from .kernels import Launcher  # noqa: PLC0415 - kernels imports CuPy-facing code only

        self.cp = cp
        self._launcher = Launcher
        #: (program, layout, aliased output) -> (launcher, most blocks)
        self._cache: dict[tuple[FusedProgram, Layout, bool], tuple[Any, int]] = {}
        #: (program, shape, operand shapes and strides, alignments) -> (plan, launcher, most blocks)
        self._launches: dict[tuple[Any, ...], tuple[Plan, Any, int]] = {}
        self._lock = threading.Lock()
        self.compiled = 0
        props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        self.sms = int(props.get("multiProcessorCount", 100))

    def launcher(self, prog: FusedProgram, layout: Layout, alias: bool = False) -> tuple[Any, int]:
        """The launcher of ``prog`` under ``layout`` and its most blocks (one resident wave),
        compiling it on first use (CuPy's CompileException, or ValueError from the generator).
        ``alias``: the output is one of the inputs' buffers (an in-place update), so no pointer is
        declared ``__restrict__`` (which promises the compiler they never overlap)."""
        key = (prog, layout, alias)
        found = self._cache.get(key)
        if found is None:
            with self._lock:
                found = self._cache.get(key)
                if found is None:
                    text = source(prog, layout)
                    if alias:
                        text = text.replace("__restrict__ ", "")
                    kernel = self.cp.RawKernel(text, KERNEL_NAME, options=COMPILE_OPTIONS)
                    launch = self._launcher(self.cp, kernel, argument_types(prog, layout))
                    found = self._cache[key] = (launch, self.sms * self._blocks_per_sm(launch))
                    self.compiled += 1
        return found

    def _blocks_per_sm(self, launch: Any) -> int:
        """How many THREADS-blocks of the kernel one SM holds at once (8, a full SM, if unknown)."""
        driver = getattr(self.cp.cuda, "driver", None)
        occupancy = getattr(driver, "occupancyMaxActiveBlocksPerMultiprocessor", None)
        function = getattr(launch, "_function", None)
        if occupancy is None or function is None:
            return 8
        try:
            return max(1, int(occupancy(function, THREADS, 0)))
        except (TypeError, ValueError, RuntimeError):  # CuPy's driver errors are RuntimeErrors
            return 8

    def run(self, prog: FusedProgram, operands: list[Any], shape: tuple[int, ...], out: Any = None) -> list[Any]:
        """Run ``prog`` over ``shape``: ``operands`` are CuPy arrays and Python numbers in input order;
        ``out`` (a one-output program's) is written instead of a new array: an operand, in place."""
        cp = self.cp
        dts = prog.value_dtypes()
        if out is not None:
            outs = [out]
        else:
            outs = [cp.empty(shape, dtype=_numpy_dtype(dts[o])) for o in prog.outputs]
        out_ptrs = [o.data.ptr for o in outs]
        tensors = [operands[j] for j in prog.tensor_inputs]
        ptrs = [t.data.ptr for t in tensors]
        # the launch depends on the addresses only through their 16-byte alignment (the float4 path)
        key = (
            prog,
            shape,
            tuple([(t.shape, t.strides) for t in tensors]),
            tuple([ptr % 16 == 0 for ptr in ptrs]),
            all(ptr % 16 == 0 for ptr in out_ptrs),
            out is not None,
        )
        found = self._launches.get(key)
        if found is None:
            described = [(tuple(t.shape), tuple(s // t.itemsize for s in t.strides), t.data.ptr) for t in tensors]
            f32 = tuple(dts[j] == "float32" for j in prog.tensor_inputs)
            vec4 = all(dts[o] == "float32" for o in prog.outputs) and key[4]
            p = plan(tuple(shape), described, f32 if vec4 else None)
            launch, most = self.launcher(prog, p.layout, out is not None) if p.n else (None, 0)
            if len(self._launches) >= _MAX_LAUNCHES:
                self._launches.clear()
            found = self._launches[key] = (p, launch, most)
        p, launch, most = found
        if p.n == 0:
            return outs
        values = pack(prog, p, operands, ptrs, out_ptrs)
        work = p.n // 4 if p.layout.vec4 else p.n
        launch(max(1, min((work + THREADS - 1) // THREADS, most * WAVES)), THREADS, *values)
        return outs


#: launch geometries remembered per device (a training step repeats the same few every iteration)
_MAX_LAUNCHES = 8192


def _numpy_dtype(name: str) -> Any:
    from ember.dtypes import as_dtype  # noqa: PLC0415 - a leaf module

    return as_dtype(name).numpy

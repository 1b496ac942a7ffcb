"""The OpenCL backend: handles are :class:`~ember_opencl.array.CLArray` views of device buffers.

Elementwise ops (and native elementwise composites such as ``relu`` or ``gelu``) are
one-instruction programs for the generator in :mod:`ember_opencl.codegen`; reductions,
scans, matmul, sorting, indexing and the neural-network fast paths have kernels of their
own (:mod:`.reduce`, :mod:`.matmul`, :mod:`.sort`, :mod:`.indexing`, :mod:`.nn`). Movement
ops are views. Everything is queued on one in-order queue; ``to_numpy`` waits for it. Modules of
kernels a training step like W2 never runs (conv, sort, quant, philox, replay) are imported at
their first use: ~50 ms of a new process's import where there is no bytecode cache.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable
from types import NotImplementedType
from typing import Any

import numpy as np

from ember.backend import Backend, native
from ember.dtypes import ALL_DTYPES, DType, as_dtype, real_dtype
from ember.lazy import complex_products
from ember.lazy.replay import compile_fixed
from ember.memory import MemoryStats, measured_stats
from ember.views import ViewMovement, contiguous_strides

from . import fused_reduce, indexing, matmul, nn, reduce, settings
from .array import CLArray
from .codegen import FusedProgram
from .complex import REAL_RESULT
from .elementwise import (
    binary_program,
    cast_program,
    contiguous,
    copy_into,
    run_program,
    unary_program,
    where_program,
)
from .ops_table import BINARY_OPS, BOOL_RESULT, ELEMENTWISE_OPS, UNARY_OPS
from .runtime import Runtime, describe, device_list

__all__ = ["OpenCLBackend"]

#: numpy computes ``x ** scalar`` for these exponents with the named op, not ``pow``
_FAST_POW = {2.0: "square", 0.5: "sqrt", -1.0: "reciprocal"}


_FUSION_OPS = ELEMENTWISE_OPS | {"cast", "where"}


class OpenCLBackend(ViewMovement, Backend):
    """Any OpenCL 1.2+ device through PyOpenCL, with kernels generated per dtype and layout."""

    name = "opencl"
    fusion = True
    #: a reduction of a deferred region runs in the region's kernel (ember_opencl.fused_reduce)
    fusion_reductions = fused_reduce.FUSION_REDUCTIONS

    def __init__(self, device: Any) -> None:
        super().__init__(device)
        self.rt = Runtime(device.index)
        if not settings.in_place():  # to measure the in-place offer's effect
            self.fusion_outs = False
        dtypes = set(ALL_DTYPES)
        reasons: dict[str, str] = {}
        if not self.rt.fp64:
            dtypes.discard(as_dtype("float64"))
            reasons["float64"] = f"{self.rt.label} lacks cl_khr_fp64 (no 64-bit floats)"
        # bfloat16 tensors cross to the host as ml_dtypes arrays; look for the package without
        # importing it (1.5-2.5 s on the 2-core CI machine): ember.dtypes imports it on first use
        if importlib.util.find_spec("ml_dtypes") is None:
            dtypes.discard(as_dtype("bfloat16"))
            reasons["bfloat16"] = "bfloat16 needs the ml_dtypes package on the host: pip install ml_dtypes"
        dtypes.add(as_dtype("complex64"))  # float2 pairs (ember_opencl.complex)
        if self.rt.fp64:
            dtypes.add(as_dtype("complex128"))
        else:
            reasons["complex128"] = f"{self.rt.label} lacks cl_khr_fp64, and complex128 is a pair of 64-bit floats"
        # instance attributes: what a device supports depends on the device
        self.supported_dtypes = frozenset(dtypes)  # type: ignore[misc]
        self.unsupported_dtype_reasons = reasons  # type: ignore[misc]
        # a GPU queues work: an index range check would stall the queue (twice per cross-entropy),
        # so none is made there and the index kernels clamp instead; a CPU device keeps the check
        self.cheap_readback = self.rt.is_cpu  # type: ignore[misc]

    # -- discovery -------------------------------------------------------------------------
    @classmethod
    def device_count(cls) -> int:
        return len(device_list())

    @classmethod
    def describe(cls, index: int) -> dict[str, Any]:
        return describe(index)

    # -- native ops: hand-written kernels are @native methods; elementwise ops come from the generator
    def native_kernels(self) -> dict[str, Callable[..., Any]]:
        table = super().native_kernels()
        for op in UNARY_OPS:
            table[op] = functools.partial(self._unary, op)
        for op in BINARY_OPS:
            table[op] = functools.partial(self._binary, op)
        if not settings.native_wgrad():  # A/B: the unfold + matmul composite
            table.pop("conv_weight_grad", None)
        if settings.flash() is False:  # A/B: the composite attention paths
            table["scaled_dot_product_attention"] = self._attention_composite
            table.pop("scaled_dot_product_attention_backward", None)
            table.pop("scaled_dot_product_attention_backward_from_output", None)
        if self.rt.is_cpu:  # (a GPU always runs conv natively: conv.py is imported at its first use)
            from . import conv  # noqa: PLC0415

            if not conv.implicit_wins(self.rt):  # CPU devices: core's unfold + the vector matmul is faster
                table.pop("conv", None)
                table.pop("conv_transpose", None)
                table.pop("conv_weight_grad", None)
        return table

    def capability_notes(self) -> dict[str, str]:
        return {
            "float16/bfloat16": "stored in 16 bits (half via vload_half, bfloat16 as ushort), computed in float",
            "complex64/complex128": "float2 / double2 pairs in numpy's layout; matmul is four real matmuls",
            "scatter_add": "32/64-bit dtypes add with atomics (float order varies run to run); others gather",
            "fusion": "elementwise regions run as one generated kernel (ember.lazy; EMBER_FUSION=0 turns it off)",
            "scaled_dot_product_attention": "GPUs: a flash-style tiled kernel (online softmax, no score tensor; "
            "float32/float16/bfloat16 computed in float, head sizes 32/64/96/128, no explicit mask); other cases, "
            "and CPU devices unless EMBER_OPENCL_FLASH=1: matmul -> fused masked softmax -> matmul",
            "scaled_dot_product_attention_backward": "GPUs: flash-style, a stats pass (log-sum-exp, delta), a dK/dV "
            "kernel per key tile and a dQ kernel per query tile (deterministic, no atomics); other cases are "
            "declined (NotImplemented): the core's composite rule runs them; EMBER_OPENCL_FLASH=0: always the rule",
            "scaled_dot_product_attention_backward_from_output": "as the backward, with the log-sum-exp the flash "
            "forward kept on its output and delta = g . out from a pass over both instead of the stats pass",
            "conv": "GPUs: implicit GEMM (input gathered in the tiled matmul's loader; the weight gradient per "
            "image, summed by one kernel); CPUs: core's unfold + matmul composite (faster there)",
        }

    # -- housekeeping ----------------------------------------------------------------------
    def synchronize(self) -> None:
        self.rt.finish()

    def memory_stats(self) -> MemoryStats:
        """The device pool's counters and each live em.jit replay's private pool (``jit1``...);
        ``extra["kernel_cache"]``: program builds, disk loads, memory hits, and the host's waits for
        programs building in the background."""
        return measured_stats(
            {"device": self.rt.pool, **self.rt.replay_pools.named()},
            note="buffers of live tensors and the pool's free lists (no cache limit)",
            extra={"kernel_cache": {**self.rt.programs.info(), **self.rt.waits}},
        )

    def empty_cache(self) -> None:
        """Return the pool's unused buffers to the driver."""
        self.rt.pool.empty()

    @staticmethod
    def handle_meta(a: CLArray) -> tuple[tuple[int, ...], str]:
        return a.shape, a.dtype.name

    def compile_replay(self, program: Any) -> Callable[[list[Any]], None] | None:
        """An em.jit capture replayed as one list of pre-bound launches (None: a step reads back
        to the host or cannot be recorded; the step list replays, see replay.py)."""
        from .replay import OpenCLReplayer  # noqa: PLC0415

        return compile_fixed(program, OpenCLReplayer(self.rt))

    # -- transfer and creation ---------------------------------------------------------------
    @native
    def from_numpy(self, array: np.ndarray) -> CLArray:
        dt = as_dtype("bool" if array.dtype == np.bool_ else array.dtype)
        return self.rt.upload(array, dt)

    @native
    def to_numpy(self, a: CLArray) -> np.ndarray:
        return self.rt.download(contiguous(self.rt, a))

    @native
    def full(self, *, shape: tuple[int, ...], value: Any, dtype: DType) -> CLArray:
        return self.rt.constant(value, dtype).reshape(()).expand(tuple(shape))  # type: ignore[arg-type]

    @native
    def arange(self, *, start: Any, step: Any, size: int, dtype: DType) -> CLArray:
        if dtype.kind == "f":
            work = "float64" if self.rt.fp64 else "float32"
        else:
            work = "int64"
        prog = _arange_program(work, dtype.name)
        return run_program(self.rt, prog, [start, step], (size,))[0]

    @native
    def random_bits(self, *, key: tuple[int, int], counter: int, size: int) -> CLArray:
        from . import philox  # noqa: PLC0415

        return philox.random_bits(self.rt, key, counter, size)

    # -- elementwise ---------------------------------------------------------------------------
    def _unary(self, op: str, a: CLArray) -> CLArray:
        dt = a.dtype.name
        out = "bool" if op in BOOL_RESULT else dt
        if op in REAL_RESULT and a.dtype.kind == "c":
            out = real_dtype(a.dtype).name
        return run_program(self.rt, unary_program(op, dt, out), [a], a.shape)[0]

    def _binary(self, op: str, a: CLArray, b: Any) -> CLArray:
        dt = a.dtype.name
        out = "bool" if op in BOOL_RESULT else dt
        if isinstance(b, CLArray):
            shape = a.shape if a.shape == b.shape else tuple(np.broadcast_shapes(a.shape, b.shape))
            return run_program(self.rt, binary_program(op, dt, out, False), [a, b], shape)[0]
        if op == "pow" and a.dtype.kind == "f" and b in _FAST_POW:
            return self._unary(_FAST_POW[b], a)  # numpy's fast paths for scalar exponents
        return run_program(self.rt, binary_program(op, dt, out, True), [a, b], a.shape)[0]

    @native
    def where(self, cond: CLArray, a: CLArray, b: CLArray) -> CLArray:
        shape = tuple(np.broadcast_shapes(cond.shape, a.shape, b.shape))
        return run_program(self.rt, where_program(a.dtype.name), [cond, a, b], shape)[0]

    @native
    def cast(self, a: CLArray, *, dtype: DType) -> CLArray:
        if a.dtype is dtype:
            return a
        return run_program(self.rt, cast_program(a.dtype.name, dtype.name), [a], a.shape)[0]

    # -- fusion: the lazy layer's regions, compiled by the same generator as single ops --------
    def fusion_ops(self) -> frozenset[str]:
        return _FUSION_OPS

    #: run_fused writes a region's target into an operand the lazy layer offers (see _in_place)
    fusion_outs = True

    def run_fused(
        self, program: FusedProgram, operands: list[Any], *, shape: tuple[int, ...], outs: Any = None
    ) -> list[CLArray]:
        """Run a fused program over ``shape``; returns its outputs (then its reduced value). An
        offered ``outs[0]`` (the old buffer of ``p.copy_(p - lr * g)``) takes the target when
        :func:`_in_place` allows: the update then runs in place, as torch's ``sub_``."""
        shape = tuple(shape)
        if program.reduce is not None:
            return fused_reduce.run_reduce(self.rt, program, operands, shape)
        if outs is not None and len(program.outputs) == 1 and _in_place(program, operands, shape, outs[0]):
            return run_program(self.rt, program, operands, shape, outs=[outs[0]])
        return run_program(self.rt, program, operands, shape)

    # -- reductions ------------------------------------------------------------------------------
    @native
    def sum(self, a: CLArray, *, axes: tuple[int, ...], keepdims: bool) -> CLArray:
        return reduce.reduce(self.rt, "sum", a, axes, keepdims)

    @native
    def prod(self, a: CLArray, *, axes: tuple[int, ...], keepdims: bool) -> CLArray:
        return reduce.reduce(self.rt, "prod", a, axes, keepdims)

    @native
    def max(self, a: CLArray, *, axes: tuple[int, ...], keepdims: bool) -> CLArray:
        return reduce.reduce(self.rt, "max", a, axes, keepdims)

    @native
    def min(self, a: CLArray, *, axes: tuple[int, ...], keepdims: bool) -> CLArray:
        return reduce.reduce(self.rt, "min", a, axes, keepdims)

    @native
    def any(self, a: CLArray, *, axes: tuple[int, ...], keepdims: bool) -> CLArray:
        return reduce.reduce(self.rt, "any", a, axes, keepdims)

    @native
    def all(self, a: CLArray, *, axes: tuple[int, ...], keepdims: bool) -> CLArray:
        return reduce.reduce(self.rt, "all", a, axes, keepdims)

    @native
    def argmax(self, a: CLArray, *, axis: int, keepdims: bool) -> CLArray:
        return reduce.reduce(self.rt, "argmax", a, (axis,), keepdims)

    @native
    def argmin(self, a: CLArray, *, axis: int, keepdims: bool) -> CLArray:
        return reduce.reduce(self.rt, "argmin", a, (axis,), keepdims)

    @native
    def cumsum(self, a: CLArray, *, axis: int) -> CLArray:
        return reduce.cumsum(self.rt, a, axis)

    # -- movement: reshape, permute, expand, slice and flip are views (ember.views.ViewMovement)
    def make_contiguous(self, a: CLArray) -> CLArray:
        return contiguous(self.rt, a)

    @native
    def pad(self, a: CLArray, *, pads: tuple[tuple[int, int], ...], value: Any) -> CLArray:
        shape = tuple(d + lo + hi for d, (lo, hi) in zip(a.shape, pads))
        out = self.full(shape=shape, value=value, dtype=a.dtype)
        out = contiguous(self.rt, out)
        inner = out.slice([lo for lo, _ in pads], [lo + d for (lo, _), d in zip(pads, a.shape)], [1] * a.ndim)
        copy_into(self.rt, inner, a)
        return out

    @native
    def concat(self, *arrays: CLArray, axis: int) -> CLArray:
        first = arrays[0]
        total = sum(x.shape[axis] for x in arrays)
        shape = first.shape[:axis] + (total,) + first.shape[axis + 1 :]
        out = self.rt.empty(shape, first.dtype)
        start = 0
        for x in arrays:
            n = x.shape[axis]
            if n:
                starts = [start if i == axis else 0 for i in range(len(shape))]
                stops = [start + n if i == axis else d for i, d in enumerate(shape)]
                copy_into(self.rt, out.slice(starts, stops, [1] * len(shape)), x)
            start += n
        return out

    # -- indexing -----------------------------------------------------------------------------------
    @native
    def gather(self, a: CLArray, index: CLArray, *, axis: int) -> CLArray:
        return indexing.gather(self.rt, a, index, axis)

    @native
    def scatter_add(self, a: CLArray, index: CLArray, values: CLArray, *, axis: int) -> CLArray:
        return indexing.scatter_add(self.rt, a, index, values, axis)

    @native
    def index_put(self, a: CLArray, values: CLArray, *indices: CLArray, accumulate: bool) -> CLArray:
        return indexing.index_put(self.rt, a, values, indices, accumulate)

    # -- linear algebra and sorting -------------------------------------------------------------------
    @native
    def matmul(self, a: CLArray, b: CLArray) -> CLArray:
        if a.dtype.kind == "c":  # four real matmuls over float views of the parts (ember.lazy.complex_products)
            return complex_products.matmul(
                a,
                b,
                lambda h, strides, offset, dt: CLArray(h.block, h.shape, strides, offset, dt),
                functools.partial(matmul.matmul, self.rt),
                functools.partial(run_program, self.rt),
            )
        return matmul.matmul(self.rt, a, b)

    @native
    def sort(self, a: CLArray, *, axis: int, descending: bool) -> CLArray:
        from . import sort  # noqa: PLC0415

        return sort.sort(self.rt, a, axis, descending, want="values")

    @native
    def argsort(self, a: CLArray, *, axis: int, descending: bool) -> CLArray:
        from . import sort  # noqa: PLC0415

        return sort.sort(self.rt, a, axis, descending, want="indices")

    # -- neural-network fast paths --------------------------------------------------------------------
    @native
    def softmax(self, a: CLArray, *, axis: int) -> CLArray:
        return nn.softmax(self.rt, a, axis, log=False)

    @native
    def log_softmax(self, a: CLArray, *, axis: int) -> CLArray:
        return nn.softmax(self.rt, a, axis, log=True)

    @native
    def logsumexp(self, a: CLArray, *, axes: tuple[int, ...], keepdims: bool) -> CLArray:
        return nn.logsumexp(self.rt, a, axes, keepdims)

    @native
    def layer_norm(self, x: CLArray, w: CLArray, b: CLArray, *, eps: float) -> CLArray:
        return nn.layer_norm(self.rt, x, w, b, eps)

    @native
    def layer_norm_backward(self, g: CLArray, x: CLArray, w: CLArray, *, eps: float) -> CLArray:
        return nn.layer_norm_backward(self.rt, g, x, w, eps)

    @native
    def rms_norm(self, x: CLArray, w: CLArray, *, eps: float) -> CLArray:
        return nn.layer_norm(self.rt, x, w, None, eps)

    @native
    def cross_entropy(self, logits: CLArray, target: CLArray, *, label_smoothing: float, ignore_index: int) -> CLArray:
        return nn.cross_entropy(self.rt, logits, target, label_smoothing, ignore_index)

    @native
    def cross_entropy_backward(
        self, g: CLArray, logits: CLArray, target: CLArray, *, label_smoothing: float, ignore_index: int
    ) -> CLArray:
        return nn.cross_entropy_backward(self.rt, g, logits, target, label_smoothing, ignore_index)

    @native
    def scaled_dot_product_attention(
        self, q: CLArray, k: CLArray, v: CLArray, *mask: CLArray, is_causal: bool, scale: float
    ) -> CLArray:
        """The flash kernel (attention.py) where it applies, else matmul -> fused softmax -> matmul."""
        from . import attention  # noqa: PLC0415

        return attention.forward(self.rt, q, k, v, mask[0] if mask else None, is_causal, scale)

    @native
    def scaled_dot_product_attention_backward(
        self, g: CLArray, q: CLArray, k: CLArray, v: CLArray, *mask: CLArray, is_causal: bool, scale: float
    ) -> CLArray | NotImplementedType:
        """(gq, gk, gv) packed: the flash backward's three kernels where they apply; the rest is
        declined (``NotImplemented``: dispatch runs the core's composite rule; attention.py)."""
        from . import attention  # noqa: PLC0415

        return attention.backward(self.rt, g, q, k, v, mask[0] if mask else None, is_causal, scale)

    @native
    def scaled_dot_product_attention_backward_from_output(
        self,
        g: CLArray,
        q: CLArray,
        k: CLArray,
        v: CLArray,
        out: CLArray,
        *mask: CLArray,
        is_causal: bool,
        scale: float,
    ) -> CLArray | NotImplementedType:
        """The flash backward reading the log-sum-exp the flash forward kept on ``out`` (a pass over
        ``g`` and ``out`` instead of the stats pass); as the backward above where none was kept."""
        from . import attention  # noqa: PLC0415

        return attention.backward(self.rt, g, q, k, v, mask[0] if mask else None, is_causal, scale, out)

    def _attention_composite(
        self, q: CLArray, k: CLArray, v: CLArray, *mask: CLArray, is_causal: bool, scale: float
    ) -> CLArray:
        """Attention as matmul -> fused softmax -> matmul (``EMBER_OPENCL_FLASH=0``)."""
        return nn.attention(self.rt, q, k, v, mask[0] if mask else None, is_causal, scale)

    # -- convolution (implicit GEMM, conv.py) and pooling ------------------------------------------------
    @native
    def conv(
        self, x: CLArray, w: CLArray, *bias: CLArray, stride: Any, padding: Any, dilation: Any, groups: int
    ) -> Any:
        from . import conv as cv  # noqa: PLC0415

        return cv.conv(self.rt, x, w, bias[0] if bias else None, stride, padding, dilation, groups)

    @native
    def conv_transpose(
        self, x: CLArray, w: CLArray, *bias: CLArray, size: Any, stride: Any, padding: Any, dilation: Any, groups: int
    ) -> Any:
        from . import conv as cv  # noqa: PLC0415

        return cv.conv_transpose(self.rt, x, w, bias[0] if bias else None, size, stride, padding, dilation, groups)

    @native
    def conv_weight_grad(
        self, g: CLArray, x: CLArray, *, kernel: Any, stride: Any, padding: Any, dilation: Any, groups: int
    ) -> CLArray:
        from . import conv as cv  # noqa: PLC0415

        return cv.conv_weight_grad(self.rt, g, x, kernel, stride, padding, dilation, groups)

    @native
    def unfold(self, x: CLArray, *, kernel: Any, stride: Any, padding: Any, dilation: Any, value: float) -> CLArray:
        from . import window as cv  # noqa: PLC0415

        return cv.unfold(self.rt, x, kernel, stride, padding, dilation, value)

    @native
    def fold(self, cols: CLArray, *, size: Any, kernel: Any, stride: Any, padding: Any, dilation: Any) -> CLArray:
        from . import window as cv  # noqa: PLC0415

        return cv.fold(self.rt, cols, size, kernel, stride, padding, dilation)

    @native
    def max_pool(self, x: CLArray, *, kernel: Any, stride: Any, padding: Any, dilation: Any) -> CLArray:
        from . import window as cv  # noqa: PLC0415

        return cv.max_pool(self.rt, x, kernel, stride, padding, dilation)

    @native
    def max_pool_backward(
        self, g: CLArray, x: CLArray, *, kernel: Any, stride: Any, padding: Any, dilation: Any
    ) -> CLArray:
        from . import window as cv  # noqa: PLC0415

        return cv.max_pool_backward(self.rt, g, x, kernel, stride, padding, dilation)

    @native
    def avg_pool(self, x: CLArray, *, kernel: Any, stride: Any, padding: Any, divisor: Any) -> CLArray:
        from . import window as cv  # noqa: PLC0415

        return cv.avg_pool(self.rt, x, kernel, stride, padding, divisor)

    @native  # int8 / NF4 weights (ember.quant); the kernel is in quant.py
    def dequant_matmul(self, x: CLArray, q: CLArray, s: CLArray, *, format: str, shape: Any, block_size: int) -> Any:
        from . import quant  # noqa: PLC0415

        return quant.dequant_matmul(self.rt, x, q, s, format, shape, block_size)


@functools.cache
def _arange_program(work: str, out: str) -> FusedProgram:
    """out = cast(start + step * i) computed in ``work`` (float64 where the device has it)."""
    return FusedProgram(
        ((work, "scalar"), (work, "scalar")),
        (
            ("iota", work, ()),
            ("mul", work, (2, 1)),
            ("add", work, (3, 0)),
            ("cast", out, (4,)),
        ),
        (5,),
    )


_BLOCK_REFS = 2  # sys.getrefcount(a.block) of a block only ``a`` holds: its slot and the call's argument


def _in_place(program: FusedProgram, operands: list[Any], shape: tuple[int, ...], dest: Any) -> bool:
    """Whether the fused kernel may store its one output into ``dest``, an operand the lazy layer
    found nothing else holds: contiguous, of the output's shape and dtype, and its buffer viewed by
    no other handle (a view of the same block, read at other indices, could see a value already
    overwritten). The kernel reads each element before it stores that element, at the same index."""
    if type(dest) is not CLArray or dest.block is None or dest.shape != shape:
        return False
    if dest.strides != contiguous_strides(shape):
        return False
    if as_dtype(program.value_dtypes()[program.outputs[0]]) is not dest.dtype:
        return False
    if sys.getrefcount(dest.block) != _BLOCK_REFS:
        return False
    for x in operands:  # (a loop: no generator frame per operand)
        if x is dest:
            return True
    return False

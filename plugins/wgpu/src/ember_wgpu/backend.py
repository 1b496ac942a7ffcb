"""The WGPU backend: every ember primitive as generated WGSL compute shaders.

Handles are :class:`~ember_wgpu.handle.WgpuArray` views over pooled buffers. Movement ops
(reshape of contiguous data, permute, expand, slice, flip) only make new views; elementwise
ops of every dtype come from one generator (:mod:`ember_wgpu.codegen.elementwise`), the rest
from templated kernels (:mod:`ember_wgpu.kernels`). Work is recorded into batched command
buffers and submitted at sync points (see :mod:`ember_wgpu.runtime`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import NotImplementedType
from typing import Any

import numpy as np

from ember.backend import Backend, native
from ember.dtypes import ALL_DTYPES, DType, as_dtype, complex64
from ember.lazy import complex_products
from ember.lazy.program import FusedProgram
from ember.lazy.replay import compile_fixed
from ember.memory import MemoryStats, measured_stats
from ember.views import ViewMovement, contiguous_strides

from . import adapters, quant, settings
from .handle import WgpuArray
from .kernels import arange as iota
from .kernels import attention, conv, fused_reduce, indexing, matmul, nn, pool, random, reduce, scan, sort, wgrad
from .kernels import elementwise as ew
from .replay import WgpuReplayer
from .runtime import Runtime
from .typemap import UNSUPPORTED

__all__ = ["WgpuBackend"]


#: ops computed by the one elementwise generator (``a``/``b`` handles or Python scalars, numpy broadcasting)
ELEMENTWISE_OPS = frozenset(
    "neg abs sign exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan sinh cosh "
    "tanh asinh acosh atanh erf floor ceil round trunc reciprocal square isnan isinf isfinite logical_not "
    "bitwise_not relu sigmoid silu softplus gelu gelu_tanh add sub mul div floordiv remainder pow maximum "
    "minimum atan2 hypot logaddexp eq ne lt le gt ge logical_and logical_or logical_xor bitwise_and "
    "bitwise_or bitwise_xor conj real imag angle".split()
)

#: what the generator compiles inside a fused region: the elementwise ops, where and cast
FUSION_OPS = ELEMENTWISE_OPS | {"where", "cast"}


class WgpuBackend(ViewMovement, Backend):
    """WebGPU through wgpu-py: Vulkan, Metal or D3D12 adapters."""

    name = "wgpu"
    supported_dtypes = frozenset(dt for dt in (*ALL_DTYPES, complex64) if dt.name not in UNSUPPORTED)
    unsupported_dtype_reasons = dict(UNSUPPORTED)
    cheap_readback = False  # work is queued; index kernels read within bounds of the buffer
    fusion = True  # elementwise regions run as one generated kernel (ember.lazy; EMBER_FUSION=0: off)
    #: a reduction of a deferred region runs in the region's kernel (kernels/fused_reduce.py)
    fusion_reductions = fused_reduce.FUSION_REDUCTIONS

    def __init__(self, device: Any) -> None:
        super().__init__(device)
        self.rt = Runtime(device.index)
        if not settings.in_place():  # to measure the in-place offer's effect
            self.fusion_outs = False

    # -- discovery -------------------------------------------------------------------------
    @classmethod
    def device_count(cls) -> int:
        return len(adapters.adapters())

    @classmethod
    def describe(cls, index: int) -> dict[str, Any]:
        return adapters.describe(index)

    # -- native ops: hand-written kernels are @native methods; elementwise ops come from the generator
    def native_kernels(self) -> dict[str, Callable[..., Any]]:
        table = super().native_kernels()
        for op in ELEMENTWISE_OPS:
            table[op] = functools.partial(ew.apply_op_args, self.rt, op)
        if not conv.implicit_wins(self.rt):  # EMBER_WGPU_IMPLICIT_CONV=0: core's unfold + matmul composite
            table.pop("conv", None)
            table.pop("conv_transpose", None)
        if not wgrad.native_wins(self.rt):  # as conv, or EMBER_WGPU_NATIVE_WGRAD=0: the composite (to measure)
            table.pop("conv_weight_grad", None)
        if not attention.backward_enabled():  # unless EMBER_WGPU_FLASH_BACKWARD=1: autodiff's composite rule
            table.pop("scaled_dot_product_attention_backward", None)
        return table

    def capability_notes(self) -> dict[str, str]:
        return {
            "fusion": "elementwise regions run as one generated WGSL kernel (ember.lazy; EMBER_FUSION=0 turns it off)",
            "complex64": "vec2<f32> pairs in numpy's layout; matmul is four real matmuls (no complex128: no f64)",
            "scaled_dot_product_attention": "a flash-style tiled WGSL kernel (float32 compute, head sizes "
            "32/64/96/128, no explicit mask); other cases batched matmul, row softmax, matmul",
            "scaled_dot_product_attention_backward": "opt-in (EMBER_WGPU_FLASH_BACKWARD=1; slower than the "
            "composite on an H100): a stats pass (log-sum-exp, delta), a dK/dV kernel per key tile, a dQ kernel "
            "per query tile (no atomics, no score tensor; the forward's cases); a mask or other head sizes are "
            "declined (NotImplemented): the core's composite rule runs them",
        }

    # -- housekeeping ------------------------------------------------------------------------
    def synchronize(self) -> None:
        self.rt.synchronize()

    def memory_stats(self) -> MemoryStats:
        """The device pool's and each live em.jit replay's (``jit1``...) counters; ``extra``: pipelines,
        cached bind groups, submits, dispatches, kernel cache."""
        return measured_stats(
            {"device": self.rt.pool, **self.rt.replay_pools.named()},
            note="in use: buffers of live tensors; reserved adds the pool's free buffers (up to 2 GiB)",
            extra=self.rt.stats(),
        )

    @staticmethod
    def handle_meta(a: WgpuArray) -> tuple[tuple[int, ...], str]:
        return a.shape, a.dtype.name

    # -- fusion: the lazy layer's regions, compiled by the same generator as single ops --------
    def fusion_ops(self) -> frozenset[str]:
        return FUSION_OPS

    #: run_fused writes a region's target into an operand the lazy layer offers (see _in_place)
    fusion_outs = True

    def run_fused(
        self, program: FusedProgram, operands: list[Any], *, shape: tuple[int, ...], outs: Any = None
    ) -> list[WgpuArray]:
        """Run a fused region in one kernel: tensor operands broadcast to ``shape`` (strided views
        allowed), Python numbers for scalar inputs; one new contiguous handle per output (then
        the reduced value, when the program ends with a reduction). An offered ``outs[0]`` (the
        old buffer of ``p.copy_(p - lr * g)``) takes the target when :func:`_in_place` allows: the
        update then runs in place, as torch's ``sub_``, stored through the operand's own binding
        (read-write in that kernel: WebGPU forbids a writable binding aliasing another)."""
        shape = tuple(shape)
        if program.reduce is not None:
            return fused_reduce.run_reduce(self.rt, program, operands, shape)
        if outs is not None and len(program.outputs) == 1 and _in_place(program, operands, shape, outs[0]):
            return ew.run_program(self.rt, program, operands, shape, [outs[0]])
        return ew.run_program(self.rt, program, operands, shape)

    def compile_replay(self, program: Any) -> Callable[[list[Any]], None] | None:
        """An em.jit capture replayed as one command buffer per replay (None: a step reads back
        to the host or cannot be recorded; the step list replays, see replay.py)."""
        return compile_fixed(program, WgpuReplayer(self.rt))

    # -- transfer and creation -----------------------------------------------------------------
    @native
    def from_numpy(self, array: np.ndarray) -> WgpuArray:
        return self.rt.upload(array, as_dtype(array.dtype))

    @native
    def to_numpy(self, a: WgpuArray) -> np.ndarray:
        return self.rt.read([a])[0]

    def to_numpy_many(self, handles: list[WgpuArray]) -> list[np.ndarray]:
        """Several tensors read back with one submit and one map (cheaper than one by one)."""
        return self.rt.read(handles)

    @native
    def full(self, *, shape: tuple[int, ...], value: Any, dtype: DType) -> WgpuArray:
        return ew.fill(self.rt, tuple(shape), value, dtype)

    @native
    def arange(self, *, start: Any, step: Any, size: int, dtype: DType) -> WgpuArray:
        if iota.fits(start, step, size, dtype):  # integers within int32: a kernel, exact (no upload)
            return iota.arange(self.rt, start, step, size, dtype)
        # computed on the host as the CPU backend does (float64 / int64, then cast): exact match
        if dtype.kind == "f":
            host = (np.arange(size, dtype=np.float64) * step + start).astype(dtype.numpy)
        else:
            host = (np.arange(size, dtype=np.int64) * step + start).astype(dtype.numpy)
        return self.rt.upload(host, dtype)

    @native
    def random_bits(self, *, key: tuple[int, int], counter: int, size: int) -> WgpuArray:
        return random.random_bits(self.rt, key, counter, size)

    # -- elementwise: one generated kernel per (op, dtypes, layout), see native_kernels() --------
    @native
    def where(self, cond: WgpuArray, a: WgpuArray, b: WgpuArray) -> WgpuArray:
        return ew.apply_op(self.rt, "where", (cond, a, b))

    @native
    def cast(self, a: WgpuArray, *, dtype: DType) -> WgpuArray:
        return ew.apply_op(self.rt, "cast", (a,), dtype=dtype)

    # -- reductions --------------------------------------------------------------------------
    @native
    def sum(self, a: WgpuArray, *, axes: tuple[int, ...], keepdims: bool) -> WgpuArray:
        return reduce.reduce(self.rt, a, "sum", axes, keepdims)

    @native
    def prod(self, a: WgpuArray, *, axes: tuple[int, ...], keepdims: bool) -> WgpuArray:
        return reduce.reduce(self.rt, a, "prod", axes, keepdims)

    @native
    def max(self, a: WgpuArray, *, axes: tuple[int, ...], keepdims: bool) -> WgpuArray:
        return reduce.reduce(self.rt, a, "max", axes, keepdims)

    @native
    def min(self, a: WgpuArray, *, axes: tuple[int, ...], keepdims: bool) -> WgpuArray:
        return reduce.reduce(self.rt, a, "min", axes, keepdims)

    @native
    def any(self, a: WgpuArray, *, axes: tuple[int, ...], keepdims: bool) -> WgpuArray:
        return reduce.reduce(self.rt, a, "any", axes, keepdims)

    @native
    def all(self, a: WgpuArray, *, axes: tuple[int, ...], keepdims: bool) -> WgpuArray:
        return reduce.reduce(self.rt, a, "all", axes, keepdims)

    @native
    def mean(self, a: WgpuArray, *, axes: tuple[int, ...], keepdims: bool) -> WgpuArray:
        return reduce.reduce(self.rt, a, "mean", axes, keepdims)

    @native
    def argmax(self, a: WgpuArray, *, axis: int, keepdims: bool) -> WgpuArray:
        return reduce.reduce(self.rt, a, "argmax", (axis,), keepdims)

    @native
    def argmin(self, a: WgpuArray, *, axis: int, keepdims: bool) -> WgpuArray:
        return reduce.reduce(self.rt, a, "argmin", (axis,), keepdims)

    @native
    def cumsum(self, a: WgpuArray, *, axis: int) -> WgpuArray:
        return scan.cumsum(self.rt, a, axis)

    # -- movement: reshape, permute, expand, slice and flip are views (ember.views.ViewMovement)
    def make_contiguous(self, a: WgpuArray) -> WgpuArray:
        return ew.contiguous(self.rt, a)

    @native
    def pad(self, a: WgpuArray, *, pads: tuple[tuple[int, int], ...], value: Any) -> WgpuArray:
        shape = tuple(d + lo + hi for d, (lo, hi) in zip(a.shape, pads))
        out = ew.fill(self.rt, shape, value, a.dtype)
        inner = out.slice(
            tuple(lo for lo, _ in pads), tuple(lo + d for (lo, _), d in zip(pads, a.shape)), (1,) * len(shape)
        )
        ew.copy_into(self.rt, a, inner)
        return out

    @native
    def concat(self, *arrays: WgpuArray, axis: int) -> WgpuArray:
        first = arrays[0]
        total = sum(x.shape[axis] for x in arrays)
        shape = tuple(total if i == axis else d for i, d in enumerate(first.shape))
        out = self.rt.empty(shape, first.dtype)
        at = 0
        for x in arrays:
            n = x.shape[axis]
            if n and x.size:
                part = out.slice(
                    tuple(at if i == axis else 0 for i in range(len(shape))),
                    tuple(at + n if i == axis else d for i, d in enumerate(shape)),
                    (1,) * len(shape),
                )
                ew.copy_into(self.rt, x, part)
            at += n
        return out

    # -- indexing ------------------------------------------------------------------------------
    @native
    def gather(self, a: WgpuArray, index: WgpuArray, *, axis: int) -> WgpuArray:
        return indexing.gather(self.rt, a, index, axis)

    @native
    def take(self, a: WgpuArray, indices: WgpuArray, *, axis: int) -> WgpuArray:
        return indexing.take(self.rt, a, indices, axis)

    @native
    def scatter_add(self, a: WgpuArray, index: WgpuArray, values: WgpuArray, *, axis: int) -> WgpuArray:
        return indexing.scatter_add(self.rt, a, index, values, axis)

    @native
    def index_put(self, a: WgpuArray, values: WgpuArray, *indices: WgpuArray, accumulate: bool) -> WgpuArray:
        return indexing.index_put(self.rt, a, values, indices, accumulate)

    # -- linear algebra and sorting -------------------------------------------------------------
    @native
    def matmul(self, a: WgpuArray, b: WgpuArray) -> WgpuArray:
        if a.dtype.kind == "c":  # four real matmuls over float32 views of the parts (ember.lazy.complex_products)
            return complex_products.matmul(
                a,
                b,
                lambda h, strides, offset, dt: WgpuArray(h.storage, h.shape, dt, strides, offset),
                functools.partial(matmul.matmul, self.rt),
                functools.partial(ew.run_program, self.rt),
            )
        return matmul.matmul(self.rt, a, b)

    @native  # int8 / NF4 weights (ember.quant); the kernel is in quant.py
    def dequant_matmul(
        self, x: WgpuArray, q: WgpuArray, s: WgpuArray, *, format: str, shape: Any, block_size: int
    ) -> Any:
        return quant.dequant_matmul(self.rt, x, q, s, format, shape, block_size)

    @native
    def sort(self, a: WgpuArray, *, axis: int, descending: bool) -> WgpuArray:
        return sort.sort(self.rt, a, axis, descending, values=True)

    @native
    def argsort(self, a: WgpuArray, *, axis: int, descending: bool) -> WgpuArray:
        return sort.sort(self.rt, a, axis, descending, values=False)

    # -- neural-network fast paths ---------------------------------------------------------------
    @native
    def softmax(self, a: WgpuArray, *, axis: int) -> WgpuArray:
        return nn.softmax(self.rt, a, axis, log=False)

    @native
    def log_softmax(self, a: WgpuArray, *, axis: int) -> WgpuArray:
        return nn.softmax(self.rt, a, axis, log=True)

    @native
    def logsumexp(self, a: WgpuArray, *, axes: tuple[int, ...], keepdims: bool) -> WgpuArray:
        return nn.logsumexp(self.rt, a, tuple(axes), keepdims)

    @native
    def layer_norm(self, x: WgpuArray, w: WgpuArray, b: WgpuArray, *, eps: float) -> WgpuArray:
        return nn.layer_norm(self.rt, x, w, b, eps)

    @native
    def layer_norm_backward(self, g: WgpuArray, x: WgpuArray, w: WgpuArray, *, eps: float) -> WgpuArray:
        return nn.layer_norm_backward(self.rt, g, x, w, eps)

    @native
    def rms_norm(self, x: WgpuArray, w: WgpuArray, *, eps: float) -> WgpuArray:
        return nn.rms_norm(self.rt, x, w, eps)

    @native
    def cross_entropy(
        self, logits: WgpuArray, target: WgpuArray, *, label_smoothing: float, ignore_index: int
    ) -> WgpuArray:
        return nn.cross_entropy(self.rt, logits, target, label_smoothing, ignore_index)

    @native
    def cross_entropy_backward(
        self, g: WgpuArray, logits: WgpuArray, target: WgpuArray, *, label_smoothing: float, ignore_index: int
    ) -> WgpuArray:
        return nn.cross_entropy_backward(self.rt, g, logits, target, label_smoothing, ignore_index)

    @native
    def scaled_dot_product_attention(
        self, q: WgpuArray, k: WgpuArray, v: WgpuArray, *mask: WgpuArray, is_causal: bool, scale: float
    ) -> WgpuArray:
        return attention.forward(self.rt, q, k, v, mask[0] if mask else None, is_causal, scale)

    @native  # kernels/attention.py: what it declines, and all with EMBER_WGPU_FLASH=0, the core's composite rule
    def scaled_dot_product_attention_backward(
        self, g: WgpuArray, q: WgpuArray, k: WgpuArray, v: WgpuArray, *mask: WgpuArray, is_causal: bool, scale: float
    ) -> WgpuArray | NotImplementedType:
        return attention.backward(self.rt, g, q, k, v, mask[0] if mask else None, is_causal, scale)

    @native  # implicit GEMM (kernels/conv.py); the weight gradient too (kernels/wgrad.py)
    def conv(
        self, x: WgpuArray, w: WgpuArray, *bias: WgpuArray, stride: Any, padding: Any, dilation: Any, groups: int
    ) -> WgpuArray:
        b = bias[0] if bias else None
        return conv.conv(self.rt, x, w, b, tuple(stride), tuple(padding), tuple(dilation), groups)

    @native
    def conv_transpose(
        self,
        x: WgpuArray,
        w: WgpuArray,
        *bias: WgpuArray,
        size: Any,
        stride: Any,
        padding: Any,
        dilation: Any,
        groups: int,
    ) -> WgpuArray:
        b = bias[0] if bias else None
        return conv.conv_transpose(
            self.rt, x, w, b, tuple(size), tuple(stride), tuple(padding), tuple(dilation), groups
        )

    @native  # on GPU adapters: implicit GEMM split over the batch, partials summed (kernels/wgrad.py)
    def conv_weight_grad(
        self, g: WgpuArray, x: WgpuArray, *, kernel: Any, stride: Any, padding: Any, dilation: Any, groups: int
    ) -> WgpuArray:
        args = (tuple(kernel), tuple(stride), tuple(map(tuple, padding)), tuple(dilation), groups)
        if self.rt.types[x.dtype].cls in "fiu":
            return wgrad.conv_weight_grad(self.rt, g, x, *args)
        return wgrad.by_unfold(self.rt, g, x, *args, self.matmul)  # complex64, 64-bit integers

    @native
    def unfold(
        self,
        x: WgpuArray,
        *,
        kernel: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[tuple[int, int], ...],
        dilation: tuple[int, ...],
        value: float = 0.0,
    ) -> WgpuArray:
        return conv.unfold(self.rt, x, tuple(kernel), tuple(stride), tuple(padding), tuple(dilation), value)

    @native
    def fold(
        self,
        cols: WgpuArray,
        *,
        size: tuple[int, ...],
        kernel: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[tuple[int, int], ...],
        dilation: tuple[int, ...],
    ) -> WgpuArray:
        return conv.fold(self.rt, cols, tuple(size), tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))

    @native
    def max_pool(
        self,
        x: WgpuArray,
        *,
        kernel: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[tuple[int, int], ...],
        dilation: tuple[int, ...],
    ) -> WgpuArray:
        return pool.max_pool(self.rt, x, tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))

    @native
    def max_pool_backward(
        self,
        g: WgpuArray,
        x: WgpuArray,
        *,
        kernel: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[tuple[int, int], ...],
        dilation: tuple[int, ...],
    ) -> WgpuArray:
        return pool.max_pool_backward(self.rt, g, x, tuple(kernel), tuple(stride), tuple(padding), tuple(dilation))

    @native
    def avg_pool(
        self,
        x: WgpuArray,
        *,
        kernel: tuple[int, ...],
        stride: tuple[int, ...],
        padding: tuple[tuple[int, int], ...],
        divisor: tuple[tuple[int, ...], ...],
    ) -> WgpuArray:
        return pool.avg_pool(self.rt, x, tuple(kernel), tuple(stride), tuple(padding), divisor)


_BLOCK_REFS = 2  # sys.getrefcount(a.storage) of a block only ``a`` holds: its slot and the call's argument


def _in_place(program: FusedProgram, operands: list[Any], shape: tuple[int, ...], dest: Any) -> bool:
    """Whether the fused kernel may store its one output into ``dest``, an operand the lazy layer
    found nothing else holds: contiguous, of the output's shape and dtype, and its block (a whole
    buffer or a range of a page or arena) viewed by no other handle (a view of the same block, read
    at other indices, could see a value already overwritten). The kernel reads each element before
    it stores that element, at the same index, in the same invocation. A one-element tensor is
    left (its input layout is a broadcast scalar, the output's not: it could not share a binding)."""
    if type(dest) is not WgpuArray or dest.storage is None or dest.shape != shape or dest.size < 2:
        return False
    if dest.strides != contiguous_strides(shape):
        return False
    if as_dtype(program.value_dtypes()[program.outputs[0]]) is not dest.dtype:
        return False
    if sys.getrefcount(dest.storage) != _BLOCK_REFS:
        return False
    for x in operands:
        if x is dest:
            return True
    return False

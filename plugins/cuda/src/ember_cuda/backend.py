"""The CUDA backend: CuPy arrays as handles on NVIDIA GPUs.

The bulk of the kernels are ember's shared array-module kernels (``ember.array_module``, the
same code the CPU backend runs over numpy) over CuPy: its ufuncs, reductions and cuBLAS
matmul. This module adds what is specific to CUDA: creation and host transfer, Philox words
on the GPU, memory through ``ember.memory`` (``memory.py``), one stream per device
(``streams.py``), CUDA graph capture (``graphs.py``), direct kernels for the binary ops and
fused activations (``kernels.py``), elementwise regions of the lazy layer as one generated
kernel (``codegen.py``, ``fusion.py``), DLPack without copies, and errors that name the op.

float32 matmul is strict IEEE by default (no TF32), so results match the conformance
tolerances; ``EMBER_CUDA_TF32=1`` or ``backend.set_tf32(True)`` trades precision for speed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ember.array_module import ArrayModule, array_meta, kernels
from ember.backend import Backend, native
from ember.dtypes import ALL_DTYPES, DType
from ember.dtypes import as_dtype as _as_dtype
from ember.errors import EmberError
from ember.lazy.program import Const, FusedProgram, Reduce
from ember.memory import MemoryStats, measured_stats

from . import graphs, philox, runtime, settings
from .attention import flash_attention
from .attention_backward import flash_attention_backward
from .blas import blas_kernels
from .codegen import FUSION_OPS
from .conv import conv_kernels
from .errors import CudaError, KernelLaunchError, describe_args
from .fused_reduce import FUSION_REDUCTIONS, FusedReductions
from .fusion import FusedKernels
from .kernels import exact_nextafter, exact_remainder, fast_kernels
from .memory import DevicePools
from .quant import quant_kernels
from .rows import row_kernels

__all__ = ["CudaBackend"]

_POOLS: list[DevicePools] = []


def _pools(cp: Any) -> DevicePools:
    """The process's one CuPy allocator (CuPy's allocator is process-wide)."""
    if not _POOLS:
        pools = DevicePools(cp)
        pools.install()
        _POOLS.append(pools)
    return _POOLS[0]


def _cupy_module(cp: Any) -> ArrayModule:
    import cupyx.scipy.special as special

    return ArrayModule(xp=cp, ndarray=cp.ndarray, erf=special.erf, expit=special.expit)


class CudaBackend(Backend):
    """CuPy on one NVIDIA GPU."""

    name = "cuda"
    supported_dtypes = frozenset(ALL_DTYPES)
    unsupported_dtype_reasons: ClassVar[dict[str, str]] = {
        name: "the shared kernels take complex tensors over CuPy, but ember-cuda has not been held to the "
        "conformance suite with them on a GPU yet"
        for name in ("complex64", "complex128")
    }
    graph_replay = True
    fusion = True
    #: work is queued: a class-index range check would stall the stream twice per loss (CuPy's
    #: integer indexing wraps out-of-range indices, so a bad label cannot read outside a buffer)
    cheap_readback = False
    #: a reduction of a deferred region runs in the region's kernel (fused_reduce.py)
    fusion_reductions = FUSION_REDUCTIONS
    #: run_fused writes a region's target into an operand the lazy layer offers (see _in_place)
    fusion_outs = True

    @classmethod
    def device_count(cls) -> int:
        return runtime.device_count()

    @classmethod
    def why_unavailable(cls) -> str:
        return runtime.why_unavailable()

    @classmethod
    def describe(cls, index: int) -> dict[str, Any]:
        return runtime.describe(index)

    def __init__(self, device: Any) -> None:
        super().__init__(device)
        cp = self.cp = runtime.cupy()
        self.index = device.index
        self._device = cp.cuda.Device(self.index)
        self.pools = _pools(cp)
        self.pool = self.pools.pool(self.index)
        with self._device:
            #: the stream ember's work on this device is queued on (ordered with the legacy default stream)
            self.stream = cp.cuda.Stream(non_blocking=False)
        self._device.use()
        self.stream.use()
        self._errors = (
            cp.cuda.driver.CUDADriverError,
            cp.cuda.runtime.CUDARuntimeError,
            cp.cuda.compiler.CompileException,
        )
        self.tf32 = False
        self.set_tf32(settings.tf32())
        self._fused: FusedKernels | None = None
        self._reductions: FusedReductions | None = None
        self._multi = self.device_count() > 1
        if not settings.in_place():  # to measure the in-place offer's effect
            self.fusion_outs = False

    # -- settings ------------------------------------------------------------------------------
    def set_tf32(self, enabled: bool) -> None:
        """float32 matmul through TF32 tensor cores (faster, ~1e-3 relative error) or strict IEEE."""
        from cupy._core import _routines_linalg as linalg

        setter = getattr(linalg, "set_compute_type", None)
        if setter is None:
            if enabled:
                raise CudaError(f"this CuPy ({self.cp.__version__}) has no switch for TF32 matmul")
            self.tf32 = False
            return
        strict = getattr(linalg, "COMPUTE_TYPE_PEDANTIC", None) or linalg.COMPUTE_TYPE_DEFAULT
        setter(np.float32, linalg.COMPUTE_TYPE_TF32 if enabled else strict)
        self.tf32 = bool(enabled)

    def capability_notes(self) -> dict[str, str]:
        return {
            "matmul": "float32/float64: one cuBLAS strided-batched GEMM called directly (capturable in a CUDA "
            "graph); strict IEEE unless TF32 is switched on (EMBER_CUDA_TF32=1, then through CuPy)",
            "conv": "2-D, one group, float32/float64: implicit GEMM (the input gathered in a tiled GEMM's loads, "
            "no column buffer; the weight gradient split over the batch and summed in order), "
            "EMBER_CUDA_IMPLICIT_CONV=0: an im2col kernel + cuBLAS; other cases im2col by a strided window view + "
            "batched matmul: CuPy 14 no longer wraps cuDNN",
            "max_pool": "2-D: a thread per output (forward) and per input (backward); other ranks through CuPy",
            "float16/bfloat16": "stored natively; heavy ops compute in float32 and round back",
            "scaled_dot_product_attention": "a flash-style tiled kernel (float32 compute, head sizes 32/64/96/128, "
            "no explicit mask); other cases through the shared kernel",
            "scaled_dot_product_attention_backward": "flash-style: a stats pass (log-sum-exp, delta), a dK/dV kernel "
            "per key tile and a dQ kernel per query tile (deterministic, no atomics, no score tensor; the forward's "
            "cases); a mask, float64 or other head sizes: cuBLAS over batch slices with the row kernels; "
            "EMBER_CUDA_FLASH_BACKWARD=0: autodiff's composite rule, =chunked: the cuBLAS path throughout",
            "softmax": "one warp per row along the last axis (softmax, log_softmax, softmax_backward); other axes "
            "through CuPy",
            "cross_entropy": "one warp per row of 2-D float logits, forward and cross_entropy_backward; other shapes "
            "through CuPy",
            "dequant_matmul": "NF4 decoded by a kernel of its own, then cuBLAS; int8 scales the product",
            "memory": "every CuPy allocation goes through ember.memory.BufferPool (CuPy's own pool is not used)",
            "fusion": "elementwise regions run as one generated CUDA kernel (ember.lazy; EMBER_FUSION=0 turns it "
            "off); a region of one op runs that op's own kernel",
        }

    # -- the native table ------------------------------------------------------------------------
    def native_kernels(self) -> dict[str, Callable[..., Any]]:
        """The shared kernels over CuPy, this class's ``@native`` methods, then the fused fast
        paths; each guarded so a CUDA failure names its op and operands."""
        cp = self.cp
        table = {**kernels(_cupy_module(cp)), **super().native_kernels()}
        table.update(fast_kernels(cp, table))
        table.update(quant_kernels(cp))
        table["nextafter"] = exact_nextafter(cp)
        table["remainder"] = exact_remainder(cp, table["remainder"])
        table.update(row_kernels(cp, table))
        table.update(blas_kernels(cp, table, lambda: self.tf32))
        table["sum"] = self._sum(table["sum"])
        table.update(conv_kernels(cp, table))
        table["scaled_dot_product_attention"] = flash_attention(cp, table["scaled_dot_product_attention"])
        # EMBER_CUDA_FLASH_BACKWARD: 0 leaves attention's backward to autodiff's composite rule,
        # "chunked" runs cuBLAS over batch slices for every case (each to compare with the kernels)
        backward = settings.flash_backward()
        if backward != "0":
            table["scaled_dot_product_attention_backward"] = flash_attention_backward(
                cp, table, chunked=backward == "chunked"
            )
        multi = self.device_count() > 1
        return {op: self._guard(op, fn, multi) for op, fn in table.items()}

    def _sum(self, other: Callable[..., Any]) -> Callable[..., Any]:
        """``sum`` of float32/float64 through the fused-reduction kernel (launch plans): over axes
        that are not the trailing ones (a convolution's bias gradient: N, H, W of NCHW; CuPy's
        reduction gives each of the few outputs one block), and any small array (a mean loss, a
        small bias's gradient: CuPy's reduction costs ~20 µs of host time a call, more than the
        kernel). Large trailing-axes sums stay CuPy's row reduction."""
        programs: dict[Any, FusedProgram] = {}

        def run(a: Any, *, axes: Any, keepdims: bool) -> Any:
            dt = a.dtype.name
            plain = isinstance(axes, tuple) and axes and list(axes) == sorted(set(axes)) and axes[0] >= 0
            if dt not in ("float32", "float64") or not plain or a.size == 0:
                return other(a, axes=axes, keepdims=keepdims)
            if a.size >= 1 << 16 and axes == tuple(range(a.ndim - len(axes), a.ndim)):
                return other(a, axes=axes, keepdims=keepdims)  # CuPy's row reduction
            key = (dt, axes, keepdims)
            prog = programs.get(key)
            if prog is None:
                body = (("copy", dt, (0,)),)
                prog = programs[key] = FusedProgram(((dt, "tensor"),), body, (), Reduce("sum", 1, axes, keepdims))
            return self._run_fused(prog, [a], tuple(a.shape))[-1]

        return run

    def _guard(self, op: str, fn: Callable[..., Any], multi: bool) -> Callable[..., Any]:
        errors = self._errors
        device, stream, where = self._device, self.stream, str(self.device)

        def run(*args: Any, **params: Any) -> Any:
            try:
                return fn(*args, **params)
            except EmberError:
                raise
            except errors as exc:
                raise KernelLaunchError(
                    f"{where}: {op}({describe_args(args, params)}) failed in CUDA: {type(exc).__name__}: {exc}"
                ) from exc

        if not multi:
            return run

        def on_device(*args: Any, **params: Any) -> Any:
            with device, stream:
                return run(*args, **params)

        return on_device

    # -- fusion: the lazy layer's regions ------------------------------------------------------
    def fusion_ops(self) -> frozenset[str]:
        return FUSION_OPS

    def run_fused(
        self, program: FusedProgram, operands: list[Any], *, shape: tuple[int, ...], outs: Any = None
    ) -> list[Any]:
        """Run a fused program over ``shape``: one op by its own kernel (the exact eager path),
        more through a generated kernel cached per (program, layout). An offered ``outs[0]`` (the
        old buffer of ``p.copy_(p - lr * g)``) takes the target when :func:`_in_place` allows: the
        update then runs in place, as torch's ``sub_``."""
        shape = tuple(shape)
        out = None
        if outs is not None and program.reduce is None and len(program.outputs) == 1 and len(program.instructions) > 1:
            if _in_place(self.cp, program, operands, shape, outs[0]):
                out = outs[0]
        if self._multi:
            with self._device, self.stream:
                return self._run_fused(program, operands, shape, out)
        return self._run_fused(program, operands, shape, out)

    def _run_fused(
        self, program: FusedProgram, operands: list[Any], shape: tuple[int, ...], out: Any = None
    ) -> list[Any]:
        if program.reduce is not None:
            try:
                if self._reductions is None:
                    sms = self.cp.cuda.Device().attributes["MultiProcessorCount"]
                    self._reductions = FusedReductions(self.cp, int(sms))
                return self._reductions.run(program, operands, shape)
            except ValueError as exc:
                raise KernelLaunchError(
                    f"{self.device}: the fused reduction cannot be written as CUDA C ({exc}):\n{program.describe()}"
                ) from exc
        single = self._single_op(program, operands, shape)
        if single is not None:
            return [single]
        try:
            if self._fused is None:
                self._fused = FusedKernels(self.cp)
            return self._fused.run(program, operands, shape, out)
        except ValueError as exc:
            raise KernelLaunchError(
                f"{self.device}: the fused program cannot be written as CUDA C ({exc}):\n{program.describe()}"
            ) from exc
        except self._errors as exc:
            raise KernelLaunchError(
                f"{self.device}: the fused program failed to compile or run in CUDA over shape {list(shape)} "
                f"({type(exc).__name__}: {exc}):\n{program.describe()}"
            ) from exc

    def _single_op(self, program: FusedProgram, operands: list[Any], shape: tuple[int, ...]) -> Any:
        """A one-instruction program through the op's own kernel, or None to generate one."""
        n = len(program.inputs)
        if len(program.instructions) != 1 or program.outputs != (n,):
            return None
        op, dt, args = program.instructions[0]
        impl = self.implementation(op)
        if impl is None or any(isinstance(a, Const) for a in args):
            return None
        values = []
        for k, j in enumerate(args):
            value = operands[j]
            # eager passes a binary op's right scalar as the number itself, other scalars as 0-d arrays
            if program.inputs[j][1] == "scalar" and not (k == 1 and len(args) == 2):
                value = self.full(shape=(), value=value, dtype=_as_dtype(program.inputs[j][0]))
            values.append(value)
        out = impl(*values, dtype=_as_dtype(dt)) if op == "cast" else impl(*values)
        cp = self.cp
        if tuple(out.shape) != shape:
            out = cp.broadcast_to(out, shape)
        if not out.flags.c_contiguous or any(out is v for v in values):
            out = cp.array(out, order="C", copy=True)
        if self.handle_meta(out)[1] != dt:
            out = out.astype(_as_dtype(dt).numpy)
        return out

    # -- housekeeping ------------------------------------------------------------------------------
    def synchronize(self) -> None:
        try:
            self.stream.synchronize()
        except self._errors as exc:
            raise CudaError(
                f"{self.device}: a kernel queued earlier failed ({exc}); CUDA reports such errors at the "
                "next synchronisation. Run with CUDA_LAUNCH_BLOCKING=1 to see which op raised it."
            ) from exc

    def memory_stats(self) -> MemoryStats:
        """This GPU's pool (every CuPy allocation of the process on it), and the driver's view."""
        with self._device:
            free, total = self.cp.cuda.runtime.memGetInfo()
        return measured_stats(
            {"device": self.pool},
            note="every CuPy allocation on this GPU goes through ember's pool; CuPy's own pool is unused",
            extra={"driver_free_bytes": int(free), "driver_total_bytes": int(total)},
        )

    def empty_cache(self) -> None:
        """Give the pool's free buffers back to the driver."""
        self.stream.synchronize()
        self.pool.empty()
        self.pool.trim()

    handle_meta = staticmethod(array_meta)

    def dlpack(self, a: Any) -> Any:
        """The CuPy array itself: consumers (PyTorch, CuPy, JAX) share its memory."""
        return a

    def from_dlpack(self, obj: Any) -> Any:
        """Shares a GPU producer's memory on this device; copies from the host or another GPU."""
        cp = self.cp
        where = getattr(obj, "__dlpack_device__", None)
        kind, index = where() if where is not None else (1, 0)
        if int(kind) == 2 and int(index) == self.index:  # kDLCUDA on this GPU: no copy
            return cp.from_dlpack(obj)
        if int(kind) == 2:
            with cp.cuda.Device(int(index)):
                theirs = cp.from_dlpack(obj)
            return cp.array(theirs, copy=True)
        return cp.asarray(np.array(np.from_dlpack(obj), copy=True, order="C"))

    def receive(self, source: Backend, handle: Any) -> Any:
        """A copy of another CUDA device's array, GPU to GPU; None (through the host) otherwise."""
        if not isinstance(source, CudaBackend):
            return None
        source.stream.synchronize()
        return self.cp.array(handle, copy=True)

    def capture(self, fn: Callable[..., Any], *inputs: Any) -> graphs.CapturedGraph:
        """Record ``fn(*inputs)`` (CuPy arrays in and out) as a CUDA graph: ``.replay(*inputs)``."""
        return graphs.capture(self.cp, self.pools, self.index, fn, inputs)

    def compile_replay(self, program: Any) -> Callable[[list[Any]], None] | None:
        """An em.jit capture replayed as one CUDA graph (None: not capturable, see graphs.py)."""
        return graphs.compile_replay(self.cp, self.pools, self.index, program)

    # -- transfer and creation -------------------------------------------------------------------
    @native
    def from_numpy(self, array: np.ndarray) -> Any:
        return self.cp.asarray(array)

    @native
    def to_numpy(self, a: Any) -> np.ndarray:
        return a.get(stream=self.cp.cuda.get_current_stream())

    @native
    def full(self, *, shape: tuple[int, ...], value: Any, dtype: DType) -> Any:
        return self.cp.full(shape, np.asarray(value).astype(dtype.numpy)[()], dtype=dtype.numpy)

    @native
    def arange(self, *, start: Any, step: Any, size: int, dtype: DType) -> Any:
        cp = self.cp
        if dtype.kind == "f":
            return (cp.arange(size, dtype=cp.float64) * step + start).astype(dtype.numpy)
        return (cp.arange(size, dtype=cp.int64) * step + start).astype(dtype.numpy)

    @native
    def random_bits(self, *, key: tuple[int, int], counter: int, size: int) -> Any:
        return philox.random_bits(self.cp, key, counter, size)


def _in_place(cp: Any, program: FusedProgram, operands: list[Any], shape: tuple[int, ...], dest: Any) -> bool:
    """Whether the fused kernel may store its one output into ``dest``, an operand the lazy layer
    found nothing else holds: a CuPy array of its own (not a view: another array viewing the same
    memory holds it as ``base``, so the lazy layer's count would have seen it), C-contiguous, of the
    output's shape and dtype. The kernel reads each element before it stores that element, at the
    same index."""
    if type(dest) is not cp.ndarray or dest.base is not None or tuple(dest.shape) != shape:
        return False
    if not dest.flags.c_contiguous:
        return False
    if dest.dtype != _as_dtype(program.value_dtypes()[program.outputs[0]]).numpy:
        return False
    return any(x is dest for x in operands)

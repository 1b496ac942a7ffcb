"""The CPU backend: numpy arrays as handles, every primitive plus native fast paths.

The kernels are ember's shared array-module kernels (``ember.array_module``, which the CUDA
backend runs over CuPy) over numpy; this module adds what is specific to the host: creation,
transfer, Philox words, and facts about the machine.

Handles are numpy arrays that are never written after creation (views are fine: nothing
mutates them), with one exception: a fused kernel may write its result into an operand that
nothing else holds any more (``fusion_outs``: the lazy layer checks that no tensor, view, saved
input or host array refers to it). float16 uses numpy's own type, bfloat16 ml_dtypes'; both compute the heavy
ops (matmul, transcendental functions) in float32 and round back, as PyTorch's CPU does.
"""

from __future__ import annotations

import os
import platform
import sys
import warnings
from typing import Any

import numpy as np

from ember.array_module import ArrayModule, array_meta, kernels
from ember.backend import Backend, native
from ember.dtypes import ALL_DTYPES, COMPLEX_DTYPES, DType
from ember.lazy.program import FusedProgram
from ember.memory import MemoryStats, unmeasured_stats
from ember.random import philox_words

from . import fusion as fused
from . import gemm, host_memory, quant_kernels
from .threads import blas_threads

# numpy reports overflow / division by zero / invalid values as warnings; ember's semantics
# are IEEE results without warnings (as in PyTorch), so silence them for this module only.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"ember_cpu\.")
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"ember\.array_module\.")


# freed arrays stay in malloc's heap for the next step's temporaries instead of being faulted
# in again (ember_cpu.host_memory; EMBER_CPU_MALLOC=0 leaves malloc alone)
host_memory.keep_freed_memory()


def _erf(a: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # lazily: only models that use erf pay for the import

    return erf(a)


def _expit(a: np.ndarray) -> np.ndarray:
    from scipy.special import expit  # one vectorised pass, ~3x faster than exp/where in numpy

    return expit(a)


#: numpy as the shared kernels see it
NUMPY = ArrayModule(xp=np, ndarray=np.ndarray, erf=_erf, expit=_expit, stable_sort={"kind": "stable"})
_KERNELS = kernels(NUMPY)
_MATMUL = _KERNELS["matmul"]
#: why the backend does not fuse (numba missing, or EMBER_CPU_NUMBA=0); None when it does
NO_FUSION = fused.numba_missing()
#: the process's fused kernels (one host, one cache)
FUSED = fused.FusedKernels(_KERNELS)
_FUSION_OPS = fused.fusion_ops(_KERNELS)
_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: calls of the hand-written numba kernels, by op (tests check that a kernel ran)
NATIVE_CALLS = {
    "max_pool_backward": 0, "conv_transpose": 0, "fold": 0, "conv": 0, "conv_weight_grad": 0, "max_pool": 0,
    "layer_norm": 0, "layer_norm_backward": 0, "layer_norm_grads": 0, "cross_entropy": 0,
    "scaled_dot_product_attention": 0, "scaled_dot_product_attention_backward": 0,
}  # fmt: skip


def _numba_floats(*arrays: np.ndarray) -> bool:
    """Whether the numba kernels take these arrays: numba installed, one float32/float64 dtype."""
    dt = arrays[0].dtype
    return NO_FUSION is None and dt in _NATIVE_FLOATS and all(a.dtype == dt for a in arrays)


def _layer_norm_backward_numpy(g: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """The input gradient of layer norm over ``w.ndim`` trailing axes (16-bit floats in float32)."""
    dt = x.dtype
    if dt.itemsize == 2:
        g, x, w = (a.astype(np.float32) for a in (g, x, w))
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    d = x - x.mean(axis=axes, keepdims=True)
    rstd = (1.0 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)).astype(x.dtype, copy=False)
    xhat = d * rstd
    gh = g * w
    gx = rstd * (gh - gh.mean(axis=axes, keepdims=True) - xhat * (gh * xhat).mean(axis=axes, keepdims=True))
    return gx.astype(dt, copy=False)


def _layer_norm_grads_numpy(g: np.ndarray, x: np.ndarray, w: np.ndarray, eps: float, need_x: bool) -> np.ndarray:
    """``[gx,] gw, gb`` of layer norm over ``w.ndim`` trailing axes, flattened and concatenated."""
    dt = x.dtype
    g32, x32, w32 = (a.astype(np.float32) for a in (g, x, w)) if dt.itemsize == 2 else (g, x, w)
    axes = tuple(range(x.ndim - w.ndim, x.ndim))
    lead = tuple(range(x.ndim - w.ndim))
    d = x32 - x32.mean(axis=axes, keepdims=True)
    xhat = d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + eps)
    parts = [(g32 * xhat).sum(axis=lead), g32.sum(axis=lead)]
    if need_x:
        parts.insert(0, _layer_norm_backward_numpy(g32, x32, w32, eps))
    return np.concatenate([np.ravel(p) for p in parts]).astype(dt, copy=False)


def _numba() -> Any:
    from . import numba_kernels  # noqa: PLC0415 - imports numba

    return numba_kernels


def _conv() -> Any:
    from . import conv_kernels  # noqa: PLC0415 - imports numba

    return conv_kernels


class CpuBackend(Backend):
    """numpy on the host CPU."""

    name = "cpu"
    supported_dtypes = frozenset(ALL_DTYPES + COMPLEX_DTYPES)
    fusion = NO_FUSION is None
    #: smaller ops run at once through numpy: deferring them costs more than it saves
    fusion_min_elements = fused.MIN_ELEMENTS
    #: a reduction of a deferred region runs in the region's numba kernel (ember_cpu.fusion)
    fusion_reductions = fused.FUSION_REDUCTIONS
    #: a fused kernel may write its result into an operand nothing else holds (``p.copy_(p - lr * g)``)
    fusion_outs = True

    @classmethod
    def device_count(cls) -> int:
        return 1

    @classmethod
    def describe(cls, index: int) -> dict[str, Any]:
        model = platform.processor() or platform.machine()
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                for line in f:
                    if line.startswith("model name"):
                        model = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        mem = None
        try:
            mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            pass
        return {
            "name": model,
            "vendor": platform.machine(),
            "cores": os.cpu_count(),
            "memory_bytes": mem,
            "numpy": np.__version__,
            "fp16": True,
            "fp64": True,
        }

    def memory_stats(self) -> MemoryStats:
        """Unmeasured (numpy owns host memory); ``extra["peak_rss_bytes"]`` is the process's peak resident set."""
        try:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        except (ImportError, OSError):
            peak = None
        note = "host memory is managed by numpy, without a pool; extra['peak_rss_bytes'] is the process's peak RSS"
        return unmeasured_stats(note, extra={"peak_rss_bytes": peak})

    handle_meta = staticmethod(array_meta)

    def dlpack(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a)

    def from_dlpack(self, obj: Any) -> np.ndarray:
        return np.array(np.from_dlpack(obj), copy=True)

    # -- transfer and creation -------------------------------------------------------------
    @native
    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return array

    @native
    def to_numpy(self, a: np.ndarray) -> np.ndarray:
        view = a.view()
        view.flags.writeable = False
        return view

    @native
    def full(self, *, shape: tuple[int, ...], value: Any, dtype: DType) -> np.ndarray:
        return np.full(shape, value, dtype=dtype.numpy)

    @native
    def arange(self, *, start: Any, step: Any, size: int, dtype: DType) -> np.ndarray:
        if dtype.kind == "f":
            return (np.arange(size, dtype=np.float64) * step + start).astype(dtype.numpy)
        return (np.arange(size, dtype=np.int64) * step + start).astype(dtype.numpy)

    @native
    def random_bits(self, *, key: tuple[int, int], counter: int, size: int) -> np.ndarray:
        return philox_words(key[0], key[1], counter, size)

    # int8 / NF4 weights (ember.quant): numpy kernels of this backend's own
    dequant_matmul = native(staticmethod(quant_kernels.dequant_matmul))
    dequantize = native(staticmethod(quant_kernels.dequantize_op))

    @native
    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """A stack of rows times one matrix ((..., M, K) @ (K, N)) as one 2-D BLAS product when
        the stack's rows merge without a copy: one GEMM with M x batch rows instead of one per
        matrix (W4's (8, 128, 768) @ (768, 256), one thread: 8.5-8.7 -> 4.2 ms; most of its
        shapes 5-40 % faster, none slower beyond the noise); else the shared kernel. Large
        products split over ember's threads (ember_cpu.gemm)."""
        if a.ndim > 2 and b.ndim == 2 and a.dtype == b.dtype:
            try:
                rows = np.reshape(a, (-1, a.shape[-1]), copy=False)
            except ValueError:  # the stack's rows do not merge into one strided matrix
                rows = None
            if rows is not None:
                return _product(rows, b).reshape(a.shape[:-1] + b.shape[-1:])
        return _product(a, b)

    # -- attention in blocks of heads (ember_cpu.attention) ------------------------------------
    @native
    def scaled_dot_product_attention(
        self, q: np.ndarray, k: np.ndarray, v: np.ndarray, *mask: np.ndarray, is_causal: bool, scale: float
    ) -> np.ndarray:
        """One batched product per block of heads for the scores and one for the output, the
        softmax between them in place (ember_cpu.attention); the output in q's memory order."""
        from .attention import attention_forward  # noqa: PLC0415

        NATIVE_CALLS["scaled_dot_product_attention"] += 1
        return attention_forward(q, k, v, mask[0] if mask else None, is_causal=is_causal, scale=scale)

    @native
    def scaled_dot_product_attention_backward(
        self,
        g: np.ndarray,
        q: np.ndarray,
        k: np.ndarray,
        v: np.ndarray,
        *mask: np.ndarray,
        is_causal: bool,
        scale: float,
    ) -> np.ndarray:
        """(gq, gk, gv) packed: the probabilities recomputed per block of heads, five batched
        products and one row pass for the score gradient (ember_cpu.attention)."""
        from .attention import attention_backward  # noqa: PLC0415

        NATIVE_CALLS["scaled_dot_product_attention_backward"] += 1
        return attention_backward(g, q, k, v, mask[0] if mask else None, is_causal=is_causal, scale=scale)

    # -- training hot paths: numba kernels where numba is installed (ember_cpu.numba_kernels) ----
    @native
    def max_pool(self, x: np.ndarray, *, kernel: Any, stride: Any, padding: Any, dilation: Any) -> np.ndarray:
        """2-D float32/float64 pools without padding or dilation in one numba pass (W3's
        (64, 32, 28, 28) 2x2: 0.92 -> 0.32 ms); everything else the numpy kernel."""
        plain = not any(lo or hi for lo, hi in padding) and all(d == 1 for d in dilation)
        if len(kernel) == 2 and plain and x.ndim == 4 and x.size and _numba_floats(x):
            NATIVE_CALLS["max_pool"] += 1
            return _conv().max_pool2d(x, tuple(kernel), tuple(stride))
        return _KERNELS["max_pool"](x, kernel=kernel, stride=stride, padding=padding, dilation=dilation)

    @native
    def max_pool_backward(
        self, g: np.ndarray, x: np.ndarray, *, kernel: Any, stride: Any, padding: Any, dilation: Any
    ) -> np.ndarray:
        """2-D float32/float64 pools in one parallel numba pass; everything else the numpy kernel."""
        if NO_FUSION is None and len(kernel) == 2 and x.dtype in _NATIVE_FLOATS and g.dtype == x.dtype:
            from .numba_kernels import max_pool2d_backward  # noqa: PLC0415 - imports numba

            NATIVE_CALLS["max_pool_backward"] += 1
            return max_pool2d_backward(
                np.ascontiguousarray(g), np.ascontiguousarray(x), kernel, stride, padding, dilation
            )  # fmt: skip
        params = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation}
        return _KERNELS["max_pool_backward"](g, x, **params)

    @native
    def conv(
        self, x: np.ndarray, w: np.ndarray, *bias: np.ndarray, stride: Any, padding: Any, dilation: Any, groups: int
    ) -> np.ndarray:
        """2-D float convolutions: numba im2col columns (Cin*K, N*L), one BLAS product per group
        over the whole batch, its rows laid out (N, Cout, L) with the bias in one pass
        (ember_cpu.conv_kernels); else the numpy kernel."""
        if x.ndim != 4 or not x.size or not w.size or not _numba_floats(x, w, *bias):
            params = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
            return _KERNELS["conv"](x, w, *bias, **params)
        NATIVE_CALLS["conv"] += 1
        return _conv().conv2d(x, w, bias[0] if bias else None, tuple(stride), padding, tuple(dilation), groups)

    @native
    def conv_weight_grad(
        self, g: np.ndarray, x: np.ndarray, *, kernel: Any, stride: Any, padding: Any, dilation: Any, groups: int
    ) -> np.ndarray:
        """2-D float weight gradients as one BLAS product per group with K = N * L (the rows of
        ``g`` times the im2col columns), instead of one product per sample and a sum; else numpy."""
        if x.ndim != 4 or not g.size or not x.size or not _numba_floats(g, x):
            params = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
            return _KERNELS["conv_weight_grad"](g, x, **params)
        NATIVE_CALLS["conv_weight_grad"] += 1
        return _conv().conv2d_weight_grad(g, x, tuple(kernel), tuple(stride), padding, tuple(dilation), groups)

    @native
    def conv_transpose(
        self,
        x: np.ndarray,
        w: np.ndarray,
        *bias: np.ndarray,
        size: Any,
        stride: Any,
        padding: Any,
        dilation: Any,
        groups: int,
    ) -> np.ndarray:
        """2-D float transposed convolutions (a convolution's input gradient): one BLAS product
        per sample, then a numba fold over row slices (ember_cpu.conv_kernels); else the numpy kernel."""
        params = {"size": size, "stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        if x.ndim != 4 or not x.size or not w.size or not _numba_floats(x, w, *bias):
            return _KERNELS["conv_transpose"](x, w, *bias, **params)
        NATIVE_CALLS["conv_transpose"] += 1
        b = bias[0] if bias else None
        return _conv().conv2d_transpose(x, w, b, tuple(size), tuple(stride), padding, tuple(dilation), groups)

    @native
    def fold(self, cols: np.ndarray, *, size: Any, kernel: Any, stride: Any, padding: Any, dilation: Any) -> np.ndarray:
        """2-D float col2im in one numba pass over row slices (ember_cpu.conv_kernels.col2im); else
        the numpy kernel."""
        if len(kernel) != 2 or not cols.size or not _numba_floats(cols):
            return _KERNELS["fold"](cols, size=size, kernel=kernel, stride=stride, padding=padding, dilation=dilation)
        NATIVE_CALLS["fold"] += 1
        blocks = _conv().blocks2d(tuple(size), tuple(kernel), tuple(stride), padding, tuple(dilation))
        return _conv().col2im(cols, tuple(size), tuple(kernel), tuple(stride), padding, tuple(dilation), blocks)

    @native
    def cross_entropy(
        self, logits: np.ndarray, target: np.ndarray, *, label_smoothing: float, ignore_index: int
    ) -> np.ndarray:
        """(N, C) float32/float64 logits with int64 targets: one numba pass per row
        (W2's (128, 10): 0.13 ms in the numpy kernel's ten calls); else the numpy kernel."""
        rows = logits.ndim == 2 and target.ndim == 1 and target.dtype == np.int64 and logits.size
        if not rows or not _numba_floats(logits):
            return _KERNELS["cross_entropy"](logits, target, label_smoothing=label_smoothing, ignore_index=ignore_index)
        NATIVE_CALLS["cross_entropy"] += 1
        x = np.ascontiguousarray(logits)
        return _numba().cross_entropy_rows(x, np.ascontiguousarray(target), float(label_smoothing), int(ignore_index))

    @native
    def layer_norm(self, x: np.ndarray, w: np.ndarray, b: np.ndarray, *, eps: float) -> np.ndarray:
        """Over one trailing axis of float32/float64: one numba pass per row; else the numpy kernel."""
        if w.ndim != 1 or x.ndim < 1 or x.shape[-1] == 0 or not _numba_floats(x, w, b):
            return _KERNELS["layer_norm"](x, w, b, eps=eps)
        NATIVE_CALLS["layer_norm"] += 1
        rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
        # eps in x's dtype, as the composite adds it (float32(1e-5) is what an ONNX file holds)
        eps = float(x.dtype.type(eps))
        out = _numba().layer_norm_rows(rows, np.ascontiguousarray(w), np.ascontiguousarray(b), eps)
        return out.reshape(x.shape)

    @native
    def layer_norm_backward(self, g: np.ndarray, x: np.ndarray, w: np.ndarray, *, eps: float) -> np.ndarray:
        """Over one trailing axis of float32/float64: one numba pass per row; else the numpy composite."""
        if w.ndim != 1 or x.ndim < 1 or x.shape[-1] == 0 or not _numba_floats(g, x, w):
            return _layer_norm_backward_numpy(g, x, w, eps)
        NATIVE_CALLS["layer_norm_backward"] += 1
        eps = float(x.dtype.type(eps))  # in x's dtype, as the forward kernel and the composite
        n = x.shape[-1]
        rows = np.ascontiguousarray(x).reshape(-1, n)
        gx = _numba().layer_norm_backward_rows(
            np.ascontiguousarray(g).reshape(-1, n), rows, np.ascontiguousarray(w), eps
        )
        return gx.reshape(x.shape)

    @native
    def layer_norm_grads(self, g: np.ndarray, x: np.ndarray, w: np.ndarray, *, eps: float, need_x: bool) -> np.ndarray:
        """``[gx,] gw, gb`` packed, over one trailing axis of float32/float64: one numba pass per
        row (statistics, gx, the column sums); else numpy."""
        eps = float(x.dtype.type(eps))  # in x's dtype, as the forward kernel and the composite
        n = x.shape[-1] if x.ndim else 0
        if w.ndim != 1 or x.ndim < 1 or n == 0 or not _numba_floats(g, x, w):
            return _layer_norm_grads_numpy(g, x, w, eps, need_x)
        NATIVE_CALLS["layer_norm_grads"] += 1
        rows = np.ascontiguousarray(x).reshape(-1, n)
        return _numba().layer_norm_grads_rows(
            np.ascontiguousarray(g).reshape(-1, n), rows, np.ascontiguousarray(w), eps, need_x
        )

    def capability_notes(self) -> dict[str, str]:
        if NO_FUSION is not None:
            return {"fusion": f"off: {NO_FUSION}; every op runs its own numpy kernel"}
        return {
            "fusion": f"elementwise ops of >= {fused.MIN_ELEMENTS} elements are deferred and run as one numba "
            "kernel per region, smaller ones at once through numpy (ember.lazy; EMBER_FUSION=0 turns it off)"
        }

    # -- fusion: the lazy layer's regions (ember_cpu.fusion) ------------------------------------
    def fusion_ops(self) -> frozenset[str]:
        return _FUSION_OPS

    def run_fused(
        self, program: FusedProgram, operands: list[Any], *, shape: tuple[int, ...], outs: Any = None
    ) -> list[np.ndarray]:
        """Run a fused program over ``shape``: one numba kernel (into an offered operand's buffer
        where ``outs`` offers one it can write at the index it reads), or op by op if it is small."""
        results = FUSED.run(program, operands, tuple(shape), outs)
        if outs is not None and "ember_cpu.conv_kernels" in sys.modules:  # an operand rewritten in place
            for r in results:  # loses the im2col columns a forward pass kept for it
                if any(r is o for o in outs):
                    sys.modules["ember_cpu.conv_kernels"].COLUMNS.discard(r)
        return results

    def compile_replay(self, program: Any) -> Any:
        """An em.jit capture's step list with two-array elementwise kernels called as their raw
        numpy ufuncs (ember_cpu.replay); None when none could be."""
        from .replay import compile_replay  # noqa: PLC0415 - imports ember.lazy.jit

        return compile_replay(program, _KERNELS)

    def native_kernels(self) -> dict[str, Any]:
        """The shared numpy kernels, then this class's ``@native`` methods; those that run BLAS
        products first let :data:`~ember_cpu.threads.blas_threads` fit the BLAS's thread count
        to the cores other processes leave idle."""
        table = {**_KERNELS, **super().native_kernels()}
        for op in BLAS_OPS:
            if op in table:
                table[op] = _fits_threads(table[op])
        return table


#: ops whose kernels spend their time in BLAS products
BLAS_OPS = (
    "matmul", "conv", "conv_transpose", "conv_weight_grad", "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward", "dequant_matmul",
)  # fmt: skip


def _product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b``: split over ember's threads when the op pinned the BLAS and it is large
    (:func:`ember_cpu.gemm.matmul`), else the shared kernel."""
    if gemm.blas_pin.held():
        out = gemm.matmul(a, b)
        if out is not None:
            return out
    return _MATMUL(a, b)


def _fits_threads(kernel: Any) -> Any:
    """``kernel`` with numpy's BLAS on one thread while ember's threads are in use
    (:func:`ember_cpu.gemm.wanted`), or else after a look at the machine's load
    (:meth:`ember_cpu.threads.BlasThreads.update`)."""
    update = blas_threads.update
    wanted, pin = gemm.wanted, gemm.blas_pin

    def run(*args: Any, **kw: Any) -> Any:
        if wanted():
            pin.enter()
            try:
                return kernel(*args, **kw)
            finally:
                pin.leave()
        update()
        return kernel(*args, **kw)

    run.__name__ = getattr(kernel, "__name__", "kernel")
    run.__doc__ = kernel.__doc__
    run.__wrapped__ = kernel  # type: ignore[attr-defined]
    return run

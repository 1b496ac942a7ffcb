"""The CPU backend: numpy arrays as handles, every primitive plus native fast paths.

Handles are numpy arrays that are never written after creation (views are fine: nothing
mutates them). float16 uses numpy's own type, bfloat16 ml_dtypes'; both compute the heavy
ops (matmul, transcendental functions) in float32 and round back, as PyTorch's CPU does.
"""

from __future__ import annotations

import os
import platform
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from ember.backend import Backend, native
from ember.dtypes import ALL_DTYPES, DType
from ember.memory import MemoryStats, unmeasured_stats
from ember.random import philox_words

from . import conv_kernels, nn_kernels

# numpy reports overflow / division by zero / invalid values as warnings; ember's semantics
# are IEEE results without warnings (as in PyTorch), so silence them for this module only.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"ember_cpu\.")

_F32 = np.dtype(np.float32)
_ND = np.ndarray
_asarray = np.asarray


def _arr(x: Any) -> np.ndarray:
    """numpy returns scalars from 0-d ops; handles are always arrays."""
    return x if type(x) is _ND else _asarray(x)


def _via_f32(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compute float16/bfloat16 in float32 and round the result back."""

    def wrapped(a: np.ndarray, *rest: Any, **kw: Any) -> np.ndarray:
        dt = a.dtype
        if dt.itemsize == 2 and dt.kind != "i" and dt.kind != "u":
            args = [r.astype(_F32) if isinstance(r, _ND) else r for r in rest]
            return _arr(fn(a.astype(_F32), *args, **kw)).astype(dt)
        return _arr(fn(a, *rest, **kw))

    wrapped.__name__ = getattr(fn, "__name__", "op")
    return wrapped


def _keep_dtype(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A binary ufunc whose result keeps ``a``'s dtype when ``b`` is a Python float (numpy
    promotes bfloat16 with a Python float to float32)."""

    def op(a: np.ndarray, b: Any) -> np.ndarray:
        if type(b) is float and a.dtype.kind == "V":
            b = np.asarray(b, dtype=a.dtype)
        return _arr(fn(a, b))

    op.__name__ = fn.__name__
    return op


def _erf(a: np.ndarray) -> np.ndarray:
    from scipy.special import erf  # lazily: only models that use erf pay for the import

    return erf(a)


class CpuBackend(Backend):
    """numpy on the host CPU."""

    name = "cpu"
    supported_dtypes = frozenset(ALL_DTYPES)

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

    @staticmethod
    def handle_meta(a: np.ndarray) -> tuple[tuple[int, ...], str]:
        return a.shape, ("bool" if a.dtype == np.bool_ else a.dtype.name)

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

    # -- elementwise unary -----------------------------------------------------------------
    neg = native(staticmethod(lambda a: _arr(np.negative(a))))
    abs = native(staticmethod(lambda a: _arr(np.abs(a))))
    sign = native(staticmethod(lambda a: _arr(np.sign(a))))
    exp = native(staticmethod(_via_f32(np.exp)))
    log = native(staticmethod(_via_f32(np.log)))
    sqrt = native(staticmethod(_via_f32(np.sqrt)))
    rsqrt = native(staticmethod(_via_f32(lambda a: 1.0 / np.sqrt(a))))
    sin = native(staticmethod(_via_f32(np.sin)))
    cos = native(staticmethod(_via_f32(np.cos)))
    tanh = native(staticmethod(_via_f32(np.tanh)))
    erf = native(staticmethod(_via_f32(_erf)))
    floor = native(staticmethod(lambda a: _arr(np.floor(a)) if a.dtype.kind in "fV" else a))
    ceil = native(staticmethod(lambda a: _arr(np.ceil(a)) if a.dtype.kind in "fV" else a))
    round = native(staticmethod(lambda a: _arr(np.round(a)) if a.dtype.kind in "fV" else a))
    trunc = native(staticmethod(lambda a: _arr(np.trunc(a)) if a.dtype.kind in "fV" else a))
    reciprocal = native(staticmethod(_via_f32(lambda a: 1.0 / a)))
    isnan = native(staticmethod(lambda a: _arr(np.isnan(a))))
    isinf = native(staticmethod(lambda a: _arr(np.isinf(a))))
    logical_not = native(staticmethod(lambda a: _arr(np.logical_not(a))))
    bitwise_not = native(staticmethod(lambda a: _arr(np.invert(a))))

    # native versions of composite unary ops
    exp2 = native(staticmethod(_via_f32(np.exp2)))
    expm1 = native(staticmethod(_via_f32(np.expm1)))
    log2 = native(staticmethod(_via_f32(np.log2)))
    log10 = native(staticmethod(_via_f32(np.log10)))
    log1p = native(staticmethod(_via_f32(np.log1p)))
    tan = native(staticmethod(_via_f32(np.tan)))
    asin = native(staticmethod(_via_f32(np.arcsin)))
    acos = native(staticmethod(_via_f32(np.arccos)))
    atan = native(staticmethod(_via_f32(np.arctan)))
    sinh = native(staticmethod(_via_f32(np.sinh)))
    cosh = native(staticmethod(_via_f32(np.cosh)))
    asinh = native(staticmethod(_via_f32(np.arcsinh)))
    acosh = native(staticmethod(_via_f32(np.arccosh)))
    atanh = native(staticmethod(_via_f32(np.arctanh)))
    square = native(staticmethod(lambda a: _arr(np.multiply(a, a))))
    isfinite = native(staticmethod(lambda a: _arr(np.isfinite(a))))

    # -- elementwise binary ----------------------------------------------------------------
    add = native(staticmethod(_keep_dtype(np.add)))
    sub = native(staticmethod(_keep_dtype(np.subtract)))
    mul = native(staticmethod(_keep_dtype(np.multiply)))
    div = native(staticmethod(_keep_dtype(np.true_divide)))
    floordiv = native(staticmethod(_keep_dtype(np.floor_divide)))
    remainder = native(staticmethod(_keep_dtype(np.remainder)))
    pow = native(staticmethod(_via_f32(np.power)))
    maximum = native(staticmethod(_keep_dtype(np.maximum)))
    minimum = native(staticmethod(_keep_dtype(np.minimum)))
    atan2 = native(staticmethod(_via_f32(np.arctan2)))
    hypot = native(staticmethod(_via_f32(np.hypot)))
    logaddexp = native(staticmethod(_via_f32(np.logaddexp)))
    eq = native(staticmethod(lambda a, b: _arr(np.equal(a, b))))
    ne = native(staticmethod(lambda a, b: _arr(np.not_equal(a, b))))
    lt = native(staticmethod(lambda a, b: _arr(np.less(a, b))))
    le = native(staticmethod(lambda a, b: _arr(np.less_equal(a, b))))
    gt = native(staticmethod(lambda a, b: _arr(np.greater(a, b))))
    ge = native(staticmethod(lambda a, b: _arr(np.greater_equal(a, b))))
    logical_and = native(staticmethod(lambda a, b: _arr(np.logical_and(a, b))))
    logical_or = native(staticmethod(lambda a, b: _arr(np.logical_or(a, b))))
    logical_xor = native(staticmethod(lambda a, b: _arr(np.logical_xor(a, b))))
    bitwise_and = native(staticmethod(lambda a, b: _arr(np.bitwise_and(a, b))))
    bitwise_or = native(staticmethod(lambda a, b: _arr(np.bitwise_or(a, b))))
    bitwise_xor = native(staticmethod(lambda a, b: _arr(np.bitwise_xor(a, b))))

    @native
    @staticmethod
    def where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _arr(np.where(cond, a, b))

    @native
    @staticmethod
    def cast(a: np.ndarray, *, dtype: DType) -> np.ndarray:
        target = dtype.numpy
        if dtype.kind in "iu" and a.dtype.kind in "fV":
            # float -> int truncates toward zero; go through float64 so bfloat16 casts too
            return _arr(np.trunc(a.astype(np.float64))).astype(target)  # _arr: a 0-d input stays an array
        return a.astype(target)

    # -- reductions ------------------------------------------------------------------------
    @native
    @staticmethod
    def sum(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":
            return _arr(np.sum(a, axis=axes, keepdims=keepdims, dtype=_F32)).astype(a.dtype)
        return _arr(np.sum(a, axis=axes, keepdims=keepdims))

    @native
    @staticmethod
    def prod(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":
            return _arr(np.prod(a, axis=axes, keepdims=keepdims, dtype=_F32)).astype(a.dtype)
        return _arr(np.prod(a, axis=axes, keepdims=keepdims))

    @native
    @staticmethod
    def max(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return _arr(np.max(a, axis=axes, keepdims=keepdims))

    @native
    @staticmethod
    def min(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return _arr(np.min(a, axis=axes, keepdims=keepdims))

    @native
    @staticmethod
    def any(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return _arr(np.any(a, axis=axes, keepdims=keepdims))

    @native
    @staticmethod
    def all(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return _arr(np.all(a, axis=axes, keepdims=keepdims))

    @native
    @staticmethod
    def argmax(a: np.ndarray, *, axis: int, keepdims: bool) -> np.ndarray:
        return _arr(np.argmax(a, axis=axis, keepdims=keepdims)).astype(np.int64, copy=False)

    @native
    @staticmethod
    def argmin(a: np.ndarray, *, axis: int, keepdims: bool) -> np.ndarray:
        return _arr(np.argmin(a, axis=axis, keepdims=keepdims)).astype(np.int64, copy=False)

    @native
    @staticmethod
    def cumsum(a: np.ndarray, *, axis: int) -> np.ndarray:
        if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":
            return np.cumsum(a, axis=axis, dtype=_F32).astype(a.dtype)
        return np.cumsum(a, axis=axis)

    @native
    @staticmethod
    def mean(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        if a.dtype.itemsize == 2:
            return _arr(np.mean(a, axis=axes, keepdims=keepdims, dtype=_F32)).astype(a.dtype)
        return _arr(np.mean(a, axis=axes, keepdims=keepdims))

    # -- movement --------------------------------------------------------------------------
    @native
    @staticmethod
    def reshape(a: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
        return a.reshape(shape)

    @native
    @staticmethod
    def permute(a: np.ndarray, *, axes: tuple[int, ...]) -> np.ndarray:
        return a.transpose(axes)

    @native
    @staticmethod
    def expand(a: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
        return np.broadcast_to(a, shape)

    @native
    @staticmethod
    def slice(a: np.ndarray, *, starts: tuple[int, ...], stops: tuple[int, ...], steps: tuple[int, ...]) -> np.ndarray:
        return a[tuple(slice(s, e, k) for s, e, k in zip(starts, stops, steps))]

    @native
    @staticmethod
    def pad(a: np.ndarray, *, pads: tuple[tuple[int, int], ...], value: Any) -> np.ndarray:
        return np.pad(a, pads, mode="constant", constant_values=np.asarray(value).astype(a.dtype))

    @native
    @staticmethod
    def flip(a: np.ndarray, *, axes: tuple[int, ...]) -> np.ndarray:
        return np.flip(a, axis=axes)

    @native
    @staticmethod
    def concat(*arrays: np.ndarray, axis: int) -> np.ndarray:
        return np.concatenate(arrays, axis=axis)

    # -- indexing --------------------------------------------------------------------------
    @native
    @staticmethod
    def gather(a: np.ndarray, index: np.ndarray, *, axis: int) -> np.ndarray:
        return np.take_along_axis(a, index, axis=axis)

    @native
    @staticmethod
    def take(a: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
        return np.take(a, indices, axis=axis)

    @native
    @staticmethod
    def scatter_add(a: np.ndarray, index: np.ndarray, values: np.ndarray, *, axis: int) -> np.ndarray:
        out = np.array(a, copy=True)
        grid = list(np.ogrid[tuple(slice(0, n) for n in index.shape)])
        grid[axis] = index
        if out.dtype.itemsize == 2 and out.dtype.kind not in "iu":
            acc = out.astype(_F32)
            np.add.at(acc, tuple(grid), values.astype(_F32))
            return acc.astype(out.dtype)
        np.add.at(out, tuple(grid), values)
        return out

    @native
    @staticmethod
    def index_put(a: np.ndarray, values: np.ndarray, *indices: np.ndarray, accumulate: bool) -> np.ndarray:
        out = np.array(a, copy=True)
        if accumulate:
            np.add.at(out, indices, values)
        else:
            out[indices] = values
        return out

    # -- linear algebra and sorting ----------------------------------------------------------
    @native
    @staticmethod
    def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":
            return np.matmul(a.astype(_F32), b.astype(_F32)).astype(a.dtype)
        return _arr(np.matmul(a, b))

    @native
    @staticmethod
    def sort(a: np.ndarray, *, axis: int, descending: bool) -> np.ndarray:
        if a.dtype.kind == "V":  # ml_dtypes' bfloat16 sort misplaces NaN; float32 holds it exactly
            return CpuBackend.sort(a.astype(_F32), axis=axis, descending=descending).astype(a.dtype)
        out = np.sort(a, axis=axis, kind="stable")
        return np.flip(out, axis=axis) if descending else out

    @native
    @staticmethod
    def argsort(a: np.ndarray, *, axis: int, descending: bool) -> np.ndarray:
        if a.dtype.kind == "V":
            a = a.astype(_F32)
        if not descending:
            return np.argsort(a, axis=axis, kind="stable").astype(np.int64, copy=False)
        n = a.shape[axis]
        idx = np.argsort(np.flip(a, axis=axis), axis=axis, kind="stable")
        return np.flip(n - 1 - idx, axis=axis).astype(np.int64, copy=False)

    # -- neural-network fast paths (kernels in nn_kernels) -----------------------------------
    relu = native(staticmethod(nn_kernels.relu))
    sigmoid = native(staticmethod(nn_kernels.sigmoid))
    gelu = native(staticmethod(nn_kernels.gelu))
    silu = native(staticmethod(nn_kernels.silu))
    softplus = native(staticmethod(nn_kernels.softplus))
    softmax = native(staticmethod(nn_kernels.softmax))
    log_softmax = native(staticmethod(nn_kernels.log_softmax))
    logsumexp = native(staticmethod(nn_kernels.logsumexp))
    layer_norm = native(staticmethod(nn_kernels.layer_norm))
    rms_norm = native(staticmethod(nn_kernels.rms_norm))
    cross_entropy = native(staticmethod(nn_kernels.cross_entropy))
    scaled_dot_product_attention = native(staticmethod(nn_kernels.attention))
    conv = native(staticmethod(conv_kernels.conv))
    conv_transpose = native(staticmethod(conv_kernels.conv_transpose))
    unfold = native(staticmethod(conv_kernels.unfold))
    fold = native(staticmethod(conv_kernels.fold))
    max_pool = native(staticmethod(conv_kernels.max_pool))
    max_pool_backward = native(staticmethod(conv_kernels.max_pool_backward))
    avg_pool = native(staticmethod(conv_kernels.avg_pool))
    adaptive_avg_pool = native(staticmethod(conv_kernels.adaptive_avg_pool))
    adaptive_max_pool = native(staticmethod(conv_kernels.adaptive_max_pool))
    interpolate = native(staticmethod(conv_kernels.interpolate))

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

from ember.backend import Backend
from ember.dtypes import ALL_DTYPES, DType
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

    def memory_stats(self) -> dict[str, Any]:
        try:
            import resource

            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        except (ImportError, OSError):
            peak = None
        return {"peak_rss_bytes": peak, "note": "host memory is managed by numpy; no pool"}

    @staticmethod
    def handle_meta(a: np.ndarray) -> tuple[tuple[int, ...], str]:
        return a.shape, ("bool" if a.dtype == np.bool_ else a.dtype.name)

    def dlpack(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a)

    def from_dlpack(self, obj: Any) -> np.ndarray:
        return np.array(np.from_dlpack(obj), copy=True)

    # -- transfer and creation -------------------------------------------------------------
    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return array

    def to_numpy(self, a: np.ndarray) -> np.ndarray:
        view = a.view()
        view.flags.writeable = False
        return view

    def full(self, *, shape: tuple[int, ...], value: Any, dtype: DType) -> np.ndarray:
        return np.full(shape, value, dtype=dtype.numpy)

    def arange(self, *, start: Any, step: Any, size: int, dtype: DType) -> np.ndarray:
        if dtype.kind == "f":
            return (np.arange(size, dtype=np.float64) * step + start).astype(dtype.numpy)
        return (np.arange(size, dtype=np.int64) * step + start).astype(dtype.numpy)

    def random_bits(self, *, key: tuple[int, int], counter: int, size: int) -> np.ndarray:
        return philox_words(key[0], key[1], counter, size)

    # -- elementwise unary -----------------------------------------------------------------
    neg = staticmethod(lambda a: _arr(np.negative(a)))
    abs = staticmethod(lambda a: _arr(np.abs(a)))
    sign = staticmethod(lambda a: _arr(np.sign(a)))
    exp = staticmethod(_via_f32(np.exp))
    log = staticmethod(_via_f32(np.log))
    sqrt = staticmethod(_via_f32(np.sqrt))
    rsqrt = staticmethod(_via_f32(lambda a: 1.0 / np.sqrt(a)))
    sin = staticmethod(_via_f32(np.sin))
    cos = staticmethod(_via_f32(np.cos))
    tanh = staticmethod(_via_f32(np.tanh))
    erf = staticmethod(_via_f32(_erf))
    floor = staticmethod(lambda a: _arr(np.floor(a)) if a.dtype.kind in "fV" else a)
    ceil = staticmethod(lambda a: _arr(np.ceil(a)) if a.dtype.kind in "fV" else a)
    round = staticmethod(lambda a: _arr(np.round(a)) if a.dtype.kind in "fV" else a)
    trunc = staticmethod(lambda a: _arr(np.trunc(a)) if a.dtype.kind in "fV" else a)
    reciprocal = staticmethod(_via_f32(lambda a: 1.0 / a))
    isnan = staticmethod(lambda a: _arr(np.isnan(a)))
    isinf = staticmethod(lambda a: _arr(np.isinf(a)))
    logical_not = staticmethod(lambda a: _arr(np.logical_not(a)))
    bitwise_not = staticmethod(lambda a: _arr(np.invert(a)))

    # native versions of composite unary ops
    exp2 = staticmethod(_via_f32(np.exp2))
    expm1 = staticmethod(_via_f32(np.expm1))
    log2 = staticmethod(_via_f32(np.log2))
    log10 = staticmethod(_via_f32(np.log10))
    log1p = staticmethod(_via_f32(np.log1p))
    tan = staticmethod(_via_f32(np.tan))
    asin = staticmethod(_via_f32(np.arcsin))
    acos = staticmethod(_via_f32(np.arccos))
    atan = staticmethod(_via_f32(np.arctan))
    sinh = staticmethod(_via_f32(np.sinh))
    cosh = staticmethod(_via_f32(np.cosh))
    asinh = staticmethod(_via_f32(np.arcsinh))
    acosh = staticmethod(_via_f32(np.arccosh))
    atanh = staticmethod(_via_f32(np.arctanh))
    square = staticmethod(lambda a: _arr(np.multiply(a, a)))
    isfinite = staticmethod(lambda a: _arr(np.isfinite(a)))

    # -- elementwise binary ----------------------------------------------------------------
    add = staticmethod(_keep_dtype(np.add))
    sub = staticmethod(_keep_dtype(np.subtract))
    mul = staticmethod(_keep_dtype(np.multiply))
    div = staticmethod(_keep_dtype(np.true_divide))
    floordiv = staticmethod(_keep_dtype(np.floor_divide))
    remainder = staticmethod(_keep_dtype(np.remainder))
    pow = staticmethod(_via_f32(np.power))
    maximum = staticmethod(_keep_dtype(np.maximum))
    minimum = staticmethod(_keep_dtype(np.minimum))
    atan2 = staticmethod(_via_f32(np.arctan2))
    hypot = staticmethod(_via_f32(np.hypot))
    logaddexp = staticmethod(_via_f32(np.logaddexp))
    eq = staticmethod(lambda a, b: _arr(np.equal(a, b)))
    ne = staticmethod(lambda a, b: _arr(np.not_equal(a, b)))
    lt = staticmethod(lambda a, b: _arr(np.less(a, b)))
    le = staticmethod(lambda a, b: _arr(np.less_equal(a, b)))
    gt = staticmethod(lambda a, b: _arr(np.greater(a, b)))
    ge = staticmethod(lambda a, b: _arr(np.greater_equal(a, b)))
    logical_and = staticmethod(lambda a, b: _arr(np.logical_and(a, b)))
    logical_or = staticmethod(lambda a, b: _arr(np.logical_or(a, b)))
    logical_xor = staticmethod(lambda a, b: _arr(np.logical_xor(a, b)))
    bitwise_and = staticmethod(lambda a, b: _arr(np.bitwise_and(a, b)))
    bitwise_or = staticmethod(lambda a, b: _arr(np.bitwise_or(a, b)))
    bitwise_xor = staticmethod(lambda a, b: _arr(np.bitwise_xor(a, b)))

    @staticmethod
    def where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return _arr(np.where(cond, a, b))

    @staticmethod
    def cast(a: np.ndarray, *, dtype: DType) -> np.ndarray:
        target = dtype.numpy
        if dtype.kind in "iu" and a.dtype.kind in "fV":
            # float -> int truncates toward zero; go through float64 so bfloat16 casts too
            return np.trunc(a.astype(np.float64)).astype(target)
        return a.astype(target)

    # -- reductions ------------------------------------------------------------------------
    @staticmethod
    def sum(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":
            return _arr(np.sum(a, axis=axes, keepdims=keepdims, dtype=_F32)).astype(a.dtype)
        return _arr(np.sum(a, axis=axes, keepdims=keepdims))

    @staticmethod
    def prod(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":
            return _arr(np.prod(a, axis=axes, keepdims=keepdims, dtype=_F32)).astype(a.dtype)
        return _arr(np.prod(a, axis=axes, keepdims=keepdims))

    @staticmethod
    def max(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return _arr(np.max(a, axis=axes, keepdims=keepdims))

    @staticmethod
    def min(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return _arr(np.min(a, axis=axes, keepdims=keepdims))

    @staticmethod
    def any(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return _arr(np.any(a, axis=axes, keepdims=keepdims))

    @staticmethod
    def all(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return _arr(np.all(a, axis=axes, keepdims=keepdims))

    @staticmethod
    def argmax(a: np.ndarray, *, axis: int, keepdims: bool) -> np.ndarray:
        return _arr(np.argmax(a, axis=axis, keepdims=keepdims)).astype(np.int64, copy=False)

    @staticmethod
    def argmin(a: np.ndarray, *, axis: int, keepdims: bool) -> np.ndarray:
        return _arr(np.argmin(a, axis=axis, keepdims=keepdims)).astype(np.int64, copy=False)

    @staticmethod
    def cumsum(a: np.ndarray, *, axis: int) -> np.ndarray:
        if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":
            return np.cumsum(a, axis=axis, dtype=_F32).astype(a.dtype)
        return np.cumsum(a, axis=axis)

    @staticmethod
    def mean(a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        if a.dtype.itemsize == 2:
            return _arr(np.mean(a, axis=axes, keepdims=keepdims, dtype=_F32)).astype(a.dtype)
        return _arr(np.mean(a, axis=axes, keepdims=keepdims))

    # -- movement --------------------------------------------------------------------------
    @staticmethod
    def reshape(a: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
        return a.reshape(shape)

    @staticmethod
    def permute(a: np.ndarray, *, axes: tuple[int, ...]) -> np.ndarray:
        return a.transpose(axes)

    @staticmethod
    def expand(a: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
        return np.broadcast_to(a, shape)

    @staticmethod
    def slice(a: np.ndarray, *, starts: tuple[int, ...], stops: tuple[int, ...], steps: tuple[int, ...]) -> np.ndarray:
        return a[tuple(slice(s, e, k) for s, e, k in zip(starts, stops, steps))]

    @staticmethod
    def pad(a: np.ndarray, *, pads: tuple[tuple[int, int], ...], value: Any) -> np.ndarray:
        return np.pad(a, pads, mode="constant", constant_values=np.asarray(value).astype(a.dtype))

    @staticmethod
    def flip(a: np.ndarray, *, axes: tuple[int, ...]) -> np.ndarray:
        return np.flip(a, axis=axes)

    @staticmethod
    def concat(*arrays: np.ndarray, axis: int) -> np.ndarray:
        return np.concatenate(arrays, axis=axis)

    # -- indexing --------------------------------------------------------------------------
    @staticmethod
    def gather(a: np.ndarray, index: np.ndarray, *, axis: int) -> np.ndarray:
        return np.take_along_axis(a, index, axis=axis)

    @staticmethod
    def take(a: np.ndarray, indices: np.ndarray, *, axis: int) -> np.ndarray:
        return np.take(a, indices, axis=axis)

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

    @staticmethod
    def index_put(a: np.ndarray, values: np.ndarray, *indices: np.ndarray, accumulate: bool) -> np.ndarray:
        out = np.array(a, copy=True)
        if accumulate:
            np.add.at(out, indices, values)
        else:
            out[indices] = values
        return out

    # -- linear algebra and sorting ----------------------------------------------------------
    @staticmethod
    def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if a.dtype.itemsize == 2 and a.dtype.kind not in "iu":
            return np.matmul(a.astype(_F32), b.astype(_F32)).astype(a.dtype)
        return _arr(np.matmul(a, b))

    @staticmethod
    def sort(a: np.ndarray, *, axis: int, descending: bool) -> np.ndarray:
        if a.dtype.kind == "V":  # ml_dtypes' bfloat16 sort misplaces NaN; float32 holds it exactly
            return CpuBackend.sort(a.astype(_F32), axis=axis, descending=descending).astype(a.dtype)
        out = np.sort(a, axis=axis, kind="stable")
        return np.flip(out, axis=axis) if descending else out

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
    relu = staticmethod(nn_kernels.relu)
    sigmoid = staticmethod(nn_kernels.sigmoid)
    gelu = staticmethod(nn_kernels.gelu)
    silu = staticmethod(nn_kernels.silu)
    softplus = staticmethod(nn_kernels.softplus)
    softmax = staticmethod(nn_kernels.softmax)
    log_softmax = staticmethod(nn_kernels.log_softmax)
    logsumexp = staticmethod(nn_kernels.logsumexp)
    layer_norm = staticmethod(nn_kernels.layer_norm)
    rms_norm = staticmethod(nn_kernels.rms_norm)
    cross_entropy = staticmethod(nn_kernels.cross_entropy)
    scaled_dot_product_attention = staticmethod(nn_kernels.attention)
    conv = staticmethod(conv_kernels.conv)
    conv_transpose = staticmethod(conv_kernels.conv_transpose)
    unfold = staticmethod(conv_kernels.unfold)
    fold = staticmethod(conv_kernels.fold)
    max_pool = staticmethod(conv_kernels.max_pool)
    max_pool_backward = staticmethod(conv_kernels.max_pool_backward)
    avg_pool = staticmethod(conv_kernels.avg_pool)
    adaptive_avg_pool = staticmethod(conv_kernels.adaptive_avg_pool)
    adaptive_max_pool = staticmethod(conv_kernels.adaptive_max_pool)
    interpolate = staticmethod(conv_kernels.interpolate)

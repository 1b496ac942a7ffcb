"""The elementwise, reduction, movement, indexing, matmul and sort kernels over one library.

:func:`primitives` builds them as closures over the library's functions, so a call costs what
the library's own function costs (the CPU backend's dispatch fast path depends on it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ember.dtypes import DType

from .registry import ArrayModule

__all__ = ["primitives"]


def primitives(m: ArrayModule) -> dict[str, Callable[..., Any]]:
    """op name -> kernel for the required primitives (except creation, transfer and random bits)
    and the elementwise and reduction ops that have a one-call equivalent in the library."""
    xp = m.xp
    nd = m.ndarray
    asarray = xp.asarray
    f32 = xp.dtype(xp.float32)
    stable = m.stable_sort

    def arr(x: Any) -> Any:
        """numpy returns scalars from 0-d ops; handles are always arrays."""
        return x if type(x) is nd else asarray(x)

    def is_half(dt: Any) -> bool:
        return dt.itemsize == 2 and dt.kind not in "iu"

    def via_f32(fn: Callable[..., Any]) -> Callable[..., Any]:
        """Compute float16/bfloat16 in float32 and round the result back."""

        def wrapped(a: Any, *rest: Any) -> Any:
            dt = a.dtype
            if dt.itemsize == 2 and dt.kind != "i" and dt.kind != "u":
                args = [r.astype(f32) if isinstance(r, nd) else r for r in rest]
                return arr(fn(a.astype(f32), *args)).astype(dt)
            return arr(fn(a, *rest))

        return wrapped

    def keep_dtype(fn: Callable[..., Any]) -> Callable[..., Any]:
        """A ufunc whose result keeps ``a``'s dtype: libraries without bfloat16 loops compute
        it in float32 (numpy promotes bfloat16 with a Python float, CuPy with any scalar)."""

        def op(a: Any, b: Any) -> Any:
            if type(b) is nd:  # two arrays of one dtype keep it in every library (the W1 path)
                return arr(fn(a, b))
            dt = a.dtype
            if dt.kind == "V":
                if type(b) is float:
                    b = asarray(b, dtype=dt)
                out = arr(fn(a, b))
                return out if out.dtype == dt else out.astype(dt)
            return arr(fn(a, b))

        return op

    def keep_dtype1(fn: Callable[..., Any]) -> Callable[..., Any]:
        """:func:`keep_dtype` for a unary ufunc."""

        def op(a: Any) -> Any:
            out = arr(fn(a))
            return out if out.dtype == a.dtype else out.astype(a.dtype)

        return op

    def plain(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda *args: arr(fn(*args))

    def float_only(fn: Callable[..., Any]) -> Callable[..., Any]:
        """Rounding ops: integers and booleans are already whole."""
        kept = keep_dtype1(fn)
        return lambda a: kept(a) if a.dtype.kind in "fV" else a

    k: dict[str, Callable[..., Any]] = {}

    # -- elementwise unary -------------------------------------------------------------------
    for name, fn in {
        "isnan": xp.isnan, "isinf": xp.isinf, "isfinite": xp.isfinite, "logical_not": xp.logical_not,
        "bitwise_not": xp.invert,
    }.items():  # fmt: skip
        k[name] = plain(fn)
    for name, fn in {
        "neg": xp.negative, "abs": xp.abs, "sign": xp.sign, "square": lambda a: xp.multiply(a, a),
    }.items():  # fmt: skip
        k[name] = keep_dtype1(fn)
    kept_abs = k["abs"]
    k["abs"] = lambda a: arr(xp.abs(a)) if a.dtype.kind == "c" else kept_abs(a)  # |z| is real

    def expm1(a: Any) -> Any:
        """expm1, except that complex infinities and NaNs follow exp(z) - 1 (C99 Annex G, as the
        Array API's special cases do; numpy's complex expm1 gives NaN there), and expm1(-0+0j) is +0."""
        if a.dtype.kind != "c":
            return xp.expm1(a)
        return arr(xp.where(xp.isfinite(a) & (a != 0), xp.expm1(a), xp.exp(a) - 1))

    def tanh(a: Any) -> Any:
        """tanh, except tanh(±inf + yj) for finite y is ±1 ± 0j (the zero with y's sign)."""
        out = xp.tanh(a)
        if a.dtype.kind != "c":
            return out
        edge = xp.isinf(a.real) & xp.isfinite(a.imag)
        if edge.any():
            limit = xp.empty_like(a)  # parts set one by one: adding 1j * -0.0 would lose the zero's sign
            limit.real = xp.copysign(1.0, a.real)
            limit.imag = xp.copysign(0.0, a.imag)  # the standard's table: 1 + 0j for y > 0
            out = xp.where(edge, limit, out)
        return arr(out)

    for name, fn in {
        "exp": xp.exp, "log": xp.log, "sqrt": xp.sqrt, "rsqrt": lambda a: 1.0 / xp.sqrt(a), "sin": xp.sin,
        "cos": xp.cos, "tanh": tanh, "erf": m.erf, "reciprocal": lambda a: 1.0 / a, "exp2": xp.exp2,
        "expm1": expm1, "log2": xp.log2, "log10": xp.log10, "log1p": xp.log1p, "tan": xp.tan,
        "asin": xp.arcsin, "acos": xp.arccos, "atan": xp.arctan, "sinh": xp.sinh, "cosh": xp.cosh,
        "asinh": xp.arcsinh, "acosh": xp.arccosh, "atanh": xp.arctanh,
    }.items():  # fmt: skip
        k[name] = via_f32(fn)
    for name, fn in {"floor": xp.floor, "ceil": xp.ceil, "trunc": xp.trunc}.items():
        k[name] = float_only(fn)
    rounded = keep_dtype1(xp.round)
    k["round"] = lambda a: rounded(a) if a.dtype.kind in "fVc" else a  # complex: each part
    # complex parts (the composites cover real tensors only)
    k["conj"] = plain(xp.conj)
    k["real"] = lambda a: xp.array(xp.real(a), copy=True)  # a copy: real() is a strided view
    k["imag"] = lambda a: xp.array(xp.imag(a), copy=True) if a.dtype.kind == "c" else xp.zeros_like(a)
    # native versions of the Array API's sign-bit composites: the library reads the bit itself (NaNs too)
    k["signbit"] = plain(xp.signbit)

    # -- elementwise binary ------------------------------------------------------------------
    def floor_divide(a: Any, b: Any) -> Any:
        """floor_divide, except that an infinity divided by a finite number is an infinity (the Array
        API's special case; numpy gives NaN, pairing // with %)."""
        out = xp.floor_divide(a, b)
        if a.dtype.kind in "fV":
            # an infinity divided by a finite number, or a finite number by an infinity: floor(a / b)
            fix = (xp.isinf(a) & xp.isfinite(b) & (xp.asarray(b) != 0)) | (xp.isfinite(a) & xp.isinf(b))
            if fix.any():
                out = xp.where(fix, xp.floor(xp.true_divide(a, b)).astype(out.dtype), out)
        return out

    def nextafter(a: Any, b: Any) -> Any:
        return xp.nextafter(a, xp.asarray(b, dtype=a.dtype))

    for name, fn in {
        "add": xp.add, "sub": xp.subtract, "mul": xp.multiply, "div": xp.true_divide,
        "floordiv": floor_divide, "remainder": xp.remainder, "maximum": xp.maximum, "minimum": xp.minimum,
        "copysign": xp.copysign, "nextafter": nextafter,
    }.items():  # fmt: skip
        k[name] = keep_dtype(fn)
    for name, fn in {"pow": xp.power, "atan2": xp.arctan2, "hypot": xp.hypot, "logaddexp": xp.logaddexp}.items():
        k[name] = via_f32(fn)
    for name, fn in {
        "eq": xp.equal, "ne": xp.not_equal, "lt": xp.less, "le": xp.less_equal, "gt": xp.greater,
        "ge": xp.greater_equal, "logical_and": xp.logical_and, "logical_or": xp.logical_or,
        "logical_xor": xp.logical_xor, "bitwise_and": xp.bitwise_and, "bitwise_or": xp.bitwise_or,
        "bitwise_xor": xp.bitwise_xor,
    }.items():  # fmt: skip
        k[name] = plain(fn)

    def where(cond: Any, a: Any, b: Any) -> Any:
        out = arr(xp.where(cond, a, b))
        return out if out.dtype == a.dtype else out.astype(a.dtype)  # CuPy's bfloat16 where gives float32

    def cast(a: Any, *, dtype: DType) -> Any:
        target = dtype.numpy
        if a.dtype.kind == "c" and dtype.kind in "iufV":
            a = xp.real(a)  # complex -> real keeps the real part (numpy would warn that it does)
        if dtype.kind in "iu" and a.dtype.kind in "fV":
            # float -> int truncates toward zero; go through float64 so bfloat16 casts too
            return arr(xp.trunc(a.astype(xp.float64))).astype(target)  # a 0-d array stays an array
        return a.astype(target)

    # -- reductions --------------------------------------------------------------------------
    def accumulating(fn: Callable[..., Any]) -> Callable[..., Any]:
        """A reduction that accumulates 16-bit floats in float32, and everything else in its own
        dtype (numpy widens small integers; ember's core casts first when it wants that)."""

        def reduce(a: Any, *, axes: tuple[int, ...], keepdims: bool) -> Any:
            if is_half(a.dtype):
                return arr(fn(a, axis=axes, keepdims=keepdims, dtype=f32)).astype(a.dtype)
            return arr(fn(a, axis=axes, keepdims=keepdims, dtype=a.dtype))

        return reduce

    def exact(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda a, *, axes, keepdims: arr(fn(a, axis=axes, keepdims=keepdims))

    def arg(fn: Callable[..., Any]) -> Callable[..., Any]:
        return lambda a, *, axis, keepdims: arr(fn(a, axis=axis, keepdims=keepdims)).astype(xp.int64, copy=False)

    def cumsum(a: Any, *, axis: int) -> Any:
        if is_half(a.dtype):
            return xp.cumsum(a, axis=axis, dtype=f32).astype(a.dtype)
        return xp.cumsum(a, axis=axis)

    def mean(a: Any, *, axes: tuple[int, ...], keepdims: bool) -> Any:
        if a.dtype.itemsize == 2:
            return arr(xp.mean(a, axis=axes, keepdims=keepdims, dtype=f32)).astype(a.dtype)
        return arr(xp.mean(a, axis=axes, keepdims=keepdims))

    # -- movement ----------------------------------------------------------------------------
    def reshape(a: Any, *, shape: tuple[int, ...]) -> Any:
        return a.reshape(shape)

    def permute(a: Any, *, axes: tuple[int, ...]) -> Any:
        return a.transpose(axes)

    def expand(a: Any, *, shape: tuple[int, ...]) -> Any:
        return xp.broadcast_to(a, shape)

    def slice_(a: Any, *, starts: tuple[int, ...], stops: tuple[int, ...], steps: tuple[int, ...]) -> Any:
        return a[tuple(map(slice, starts, stops, steps))]

    def pad(a: Any, *, pads: tuple[tuple[int, int], ...], value: Any) -> Any:
        return xp.pad(a, pads, mode="constant", constant_values=np.asarray(value).astype(a.dtype)[()])

    def flip(a: Any, *, axes: tuple[int, ...]) -> Any:
        return xp.flip(a, axis=axes)

    def concat(*arrays: Any, axis: int) -> Any:
        return xp.concatenate(arrays, axis=axis)

    # -- indexing ----------------------------------------------------------------------------
    def gather(a: Any, index: Any, *, axis: int) -> Any:
        return xp.take_along_axis(a, index, axis=axis)

    def take(a: Any, indices: Any, *, axis: int) -> Any:
        return xp.take(a, indices, axis=axis)

    def accumulator(dt: Any) -> Any:
        """The dtype ``add.at`` accumulates ``dt`` in: float32 for 16-bit floats, int64 for
        narrow integers and booleans (every library has atomics for those), else ``dt``."""
        if is_half(dt):
            return f32
        if dt.kind == "b" or (dt.kind in "iu" and dt.itemsize < 4):
            return xp.dtype(xp.int64)
        return dt

    def add_at(out: Any, where: tuple[Any, ...], values: Any) -> Any:
        acc = accumulator(out.dtype)
        if acc == out.dtype:
            out = out.copy()
            xp.add.at(out, where, values)
            return out
        total = out.astype(acc)
        xp.add.at(total, where, xp.asarray(values).astype(acc))
        return (total != 0) if out.dtype.kind == "b" else total.astype(out.dtype)

    def scatter_add(a: Any, index: Any, values: Any, *, axis: int) -> Any:
        grid = list(xp.ogrid[tuple(slice(0, n) for n in index.shape)])
        grid[axis] = index
        return add_at(a, tuple(grid), values)

    def index_put(a: Any, values: Any, *indices: Any, accumulate: bool) -> Any:
        if accumulate:
            return add_at(a, indices, values)
        out = a.copy()
        out[indices] = values
        return out

    # -- linear algebra and sorting ------------------------------------------------------------
    def matmul(a: Any, b: Any) -> Any:
        if is_half(a.dtype):
            return xp.matmul(a.astype(f32), b.astype(f32)).astype(a.dtype)
        return arr(xp.matmul(a, b))

    def sort(a: Any, *, axis: int, descending: bool) -> Any:
        if a.dtype.kind == "V":  # ml_dtypes' bfloat16 sort misplaces NaN; float32 holds it exactly
            return sort(a.astype(f32), axis=axis, descending=descending).astype(a.dtype)
        out = xp.sort(a, axis=axis, **stable)
        return xp.flip(out, axis=axis) if descending else out

    def argsort(a: Any, *, axis: int, descending: bool) -> Any:
        if a.dtype.kind == "V":
            a = a.astype(f32)
        if not descending:
            return xp.argsort(a, axis=axis, **stable).astype(xp.int64, copy=False)
        n = a.shape[axis]
        idx = xp.argsort(xp.flip(a, axis=axis), axis=axis, **stable)
        return xp.flip(n - 1 - idx, axis=axis).astype(xp.int64, copy=False)

    k.update(
        where=where, cast=cast, cumsum=cumsum, mean=mean, reshape=reshape, permute=permute, expand=expand,
        slice=slice_, pad=pad, flip=flip, concat=concat, gather=gather, take=take, scatter_add=scatter_add,
        index_put=index_put, matmul=matmul, sort=sort, argsort=argsort,
        sum=accumulating(xp.sum), prod=accumulating(xp.prod), max=exact(xp.max), min=exact(xp.min),
        any=exact(xp.any), all=exact(xp.all), argmax=arg(xp.argmax), argmin=arg(xp.argmin),
    )  # fmt: skip
    return k

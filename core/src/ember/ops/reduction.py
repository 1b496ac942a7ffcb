"""Reductions over axes: primitives (sum, prod, max, min, argmax, argmin, any, all, cumsum)
and composites (mean, var, std, logsumexp, count_nonzero, cumulative_prod)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import dispatch as _dispatch
from ..amp import _STATE as _AMP
from ..amp import FLOAT32, autocast
from ..dispatch import apply, define
from ..dtypes import DType, as_dtype, bool_, int64, uint64
from ..errors import DTypeError, InvalidArgumentError, ShapeError
from ..shapes import normalize_axes, normalize_axis, reduced_shape
from .elementwise import (
    ANY,
    FLOAT,
    FLOAT_OR_COMPLEX,
    NUMERIC,
    NUMERIC_OR_COMPLEX,
    _reject,
    _tensor_arg,
    conj,
    exp,
    log,
    sqrt,
    where,
)
from .movement import broadcast_to, concat, pad, slice_tensor

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = [
    "sum", "prod", "max", "min", "argmax", "argmin", "any", "all", "cumulative_sum",
    "cumulative_prod", "mean", "var", "std", "logsumexp", "count_nonzero", "diff",
]  # fmt: skip


def _keep(g: Tensor, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    """Reshape a reduced gradient so it broadcasts against ``x``."""
    if keepdims or not axes:
        return g
    return g.reshape(reduced_shape(x._shape, axes, True))


def _sum_vjp(g: Tensor, out: Tensor, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> tuple[Any]:
    return (_keep(g, x, axes, keepdims).broadcast_to(x._shape),)


def _prod_vjp(g: Tensor, out: Tensor, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> tuple[Any]:
    # exact with zeros: the gradient at a lone zero is the product of the others
    g = _keep(g, x, axes, keepdims)
    y = _keep(out, x, axes, keepdims)
    is_zero = x == 0
    zeros = is_zero.astype(x._dtype).sum(axis=axes, keepdims=True)
    others = where(is_zero, 1.0, x).prod(axis=axes, keepdims=True)
    safe_x = where(is_zero, 1.0, x)
    grad = where(is_zero, where(zeros == 1, others, 0.0), y / safe_x)
    return (g * (conj(grad) if grad._dtype.kind == "c" else grad),)  # holomorphic: times the conjugate


def _extreme_vjp(g: Tensor, out: Tensor, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> tuple[Any]:
    # ties share the gradient equally
    y = _keep(out, x, axes, keepdims)
    mask = (x == y).astype(g._dtype)
    count = mask.sum(axis=axes, keepdims=True)
    return (_keep(g, x, axes, keepdims) * mask / count,)


def _cumsum_vjp(g: Tensor, out: Tensor, x: Tensor, axis: int) -> tuple[Any]:
    return (cumulative_sum(g.flip(axis), axis=axis).flip(axis),)


SUM = define("sum", kind="reduction", autocast=FLOAT32, primitive=True, vjp=_sum_vjp)
PROD = define("prod", kind="reduction", primitive=True, vjp=_prod_vjp)
MAX = define("max", kind="reduction", primitive=True, vjp=_extreme_vjp)
MIN = define("min", kind="reduction", primitive=True, vjp=_extreme_vjp)
ARGMAX = define("argmax", kind="reduction", primitive=True, differentiable=False)
ARGMIN = define("argmin", kind="reduction", primitive=True, differentiable=False)
ANY_ = define("any", kind="reduction", primitive=True, differentiable=False)
ALL_ = define("all", kind="reduction", primitive=True, differentiable=False)
CUMSUM = define("cumsum", kind="scan", primitive=True, vjp=_cumsum_vjp)


def _accumulator(dt: DType, op: str, dtype: Any) -> DType:
    if dtype is not None:
        out = as_dtype(dtype)
        if out.kind == "b":
            raise DTypeError(f"{op}: dtype must be numeric, got {out}")
        return out
    if dt.kind == "b" or dt.kind == "i":
        return int64
    if dt.kind == "u":
        return uint64
    return dt


#: (shape, axis as given, keepdims) -> (axes, result shape), for the reductions a model repeats
_REDUCTIONS: dict[tuple[Any, ...], tuple[tuple[int, ...], tuple[int, ...]]] = {}
_INT = {int}


def _reduction_shape(shape: tuple[int, ...], axis: Any, keepdims: bool, op: str) -> tuple[Any, ...]:
    """The normalised axes and the result shape of reducing ``shape`` over ``axis``."""
    t = type(axis)
    if axis is None or t is int or (t is tuple and set(map(type, axis)) <= _INT):  # 1.0 or True: checked
        key = (shape, axis, keepdims)
        hit = _REDUCTIONS.get(key)
        if hit is None:
            axes = normalize_axes(axis, len(shape), op)
            hit = (axes, reduced_shape(shape, axes, keepdims))
            if len(_REDUCTIONS) >= 4096:
                _REDUCTIONS.clear()
            _REDUCTIONS[key] = hit
        return hit
    axes = normalize_axes(axis, len(shape), op)
    return axes, reduced_shape(shape, axes, keepdims)


def _reduce(
    op: Any,
    x: Any,
    axis: Any,
    keepdims: bool,
    accepts: frozenset[DType],
    out_dtype: DType | None,
    identity: bool = True,
) -> Tensor:
    if type(x) is not _dispatch._TENSOR:
        x = _tensor_arg(x, op.name)
    if x._dtype not in accepts:
        raise _reject(op.name, accepts, x._dtype)
    keepdims = bool(keepdims)
    axes, shape = _reduction_shape(x._shape, axis, keepdims, op.name)
    if not identity:
        for a in axes:
            if x._shape[a] == 0:
                raise ShapeError(
                    f"{op.name}: cannot reduce over axis {a} of size 0 (shape {x._shape}); "
                    f"{op.name} has no identity element"
                )
    dt = x._dtype if out_dtype is None else out_dtype
    return apply(op, (x,), {"axes": axes, "keepdims": keepdims}, shape, dt)


def sum(x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
    """Sum over ``axis`` (all axes when None). Integers and booleans sum in int64/uint64."""
    if type(x) is not _dispatch._TENSOR:
        x = _tensor_arg(x, "sum")
    if dtype is not None or x._dtype.kind in "biu":  # else the accumulator is x's own dtype
        acc = _accumulator(x._dtype, "sum", dtype)
        if x._dtype is not acc:
            x = x.astype(acc)
    if dtype is not None and _AMP.dtype is not None:
        # an explicit dtype is the caller's choice: autocast's float32 policy does not override it
        with autocast(enabled=False):
            return _reduce(SUM, x, axis, keepdims, NUMERIC_OR_COMPLEX, None)
    return _reduce(SUM, x, axis, keepdims, NUMERIC_OR_COMPLEX, None)


def prod(x: Any, axis: Any = None, keepdims: bool = False, dtype: Any = None) -> Tensor:
    """Product over ``axis``."""
    x = _tensor_arg(x, "prod")
    acc = _accumulator(x._dtype, "prod", dtype)
    if x._dtype is not acc:
        x = x.astype(acc)
    return _reduce(PROD, x, axis, keepdims, NUMERIC_OR_COMPLEX, None)


def max(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Largest value over ``axis`` (NaN propagates)."""
    return _reduce(MAX, x, axis, keepdims, NUMERIC, None, identity=False)


def min(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Smallest value over ``axis`` (NaN propagates)."""
    return _reduce(MIN, x, axis, keepdims, NUMERIC, None, identity=False)


def any(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Whether any element over ``axis`` is nonzero."""
    x = _tensor_arg(x, "any")
    if x._dtype is not bool_:
        x = x != 0
    return _reduce(ANY_, x, axis, keepdims, ANY, bool_)


def all(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Whether every element over ``axis`` is nonzero."""
    x = _tensor_arg(x, "all")
    if x._dtype is not bool_:
        x = x != 0
    return _reduce(ALL_, x, axis, keepdims, ANY, bool_)


def _arg(op: Any, x: Any, axis: int | None, keepdims: bool) -> Tensor:
    x = _tensor_arg(x, op.name)
    if x._dtype not in NUMERIC:
        raise _reject(op.name, NUMERIC, x._dtype)
    if axis is None:
        flat = x.reshape((-1,))
        out = _arg(op, flat, 0, False)
        return out.reshape((1,) * x.ndim) if keepdims else out
    ax = normalize_axis(axis, x.ndim, op.name)
    if x.ndim == 0:
        return _arg(op, x.reshape((1,)), 0, False).reshape(())
    if x._shape[ax] == 0:
        raise ShapeError(f"{op.name}: axis {ax} has size 0 (shape {x._shape}); there is no extreme element")
    shape = reduced_shape(x._shape, (ax,), keepdims)
    return apply(op, (x,), {"axis": ax, "keepdims": bool(keepdims)}, shape, int64)


def argmax(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the first largest value along ``axis`` (flattened when None)."""
    return _arg(ARGMAX, x, axis, keepdims)


def argmin(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the first smallest value along ``axis`` (flattened when None)."""
    return _arg(ARGMIN, x, axis, keepdims)


def _scan_axis(x: Tensor, axis: int | None, op: str) -> tuple[Tensor, int]:
    """The tensor and axis a scan runs over: a 1-D (or flattened) tensor when ``axis`` is None."""
    if axis is None:
        if x.ndim != 1:
            x = x.reshape((-1,))
        axis = 0
    return x, normalize_axis(axis, x.ndim, op)


def _with_initial(y: Tensor, axis: int, identity: int) -> Tensor:
    """``y`` with the scan's identity prepended along ``axis`` (``include_initial=True``)."""
    pads = tuple((1, 0) if i == axis else (0, 0) for i in range(y.ndim))
    return pad(y, pads, value=identity)


def cumulative_sum(x: Any, /, axis: int | None = None, dtype: Any = None, *, include_initial: bool = False) -> Tensor:
    """Running sum along ``axis`` (the flattened tensor when None and ndim > 1).

    ``include_initial=True`` starts with the empty sum, 0, so the axis grows by one.
    """
    x = _tensor_arg(x, "cumulative_sum")
    acc = _accumulator(x._dtype, "cumulative_sum", dtype)
    if x._dtype is not acc:
        x = x.astype(acc)
    if x._dtype not in NUMERIC_OR_COMPLEX:
        raise _reject("cumsum", NUMERIC_OR_COMPLEX, x._dtype)
    if x.ndim == 0:
        return x
    x, ax = _scan_axis(x, axis, "cumulative_sum")
    y = apply(CUMSUM, (x,), {"axis": ax}, x._shape, x._dtype) if x._shape[ax] else x
    return _with_initial(y, ax, 0) if include_initial else y


def _cumprod(x: Tensor, axis: int) -> Tensor:
    # a Hillis-Steele scan: log2(n) steps, each multiplying by the running products 2**k places
    # back (the identity, 1, shifted in); exact for integers (wrapping as a loop would) and zeros
    n = x._shape[axis]
    low = x._dtype.kind == "f" and x._dtype.bits == 16
    y = x.astype("float32") if low else x  # float16/bfloat16 multiply in float32, as sum does on cpu
    k = 1
    while k < n:
        keep = _slice_axis(y, axis, 0, n - k)
        pads = tuple((k, 0) if i == axis else (0, 0) for i in range(y.ndim))
        y = y * pad(keep, pads, value=1)
        k *= 2
    return y.astype(x._dtype) if low else y


def _slice_axis(x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    """``x[..., start:stop, ...]`` along ``axis``."""
    starts = [start if i == axis else 0 for i in range(x.ndim)]
    stops = [stop if i == axis else d for i, d in enumerate(x._shape)]
    return slice_tensor(x, starts, stops, [1] * x.ndim)


CUMPROD = define("cumulative_prod", kind="scan", native="cumulative_prod(a, *, axis) -> handle", composite=_cumprod)


def cumulative_prod(x: Any, /, axis: int | None = None, dtype: Any = None, *, include_initial: bool = False) -> Tensor:
    """Running product along ``axis``; integers multiply in int64/uint64 unless ``dtype`` says otherwise.

    ``include_initial=True`` starts with the empty product, 1, so the axis grows by one.
    """
    x = _tensor_arg(x, "cumulative_prod")
    acc = _accumulator(x._dtype, "cumulative_prod", dtype)
    if x._dtype is not acc:
        x = x.astype(acc)
    if x._dtype not in NUMERIC_OR_COMPLEX:
        raise _reject("cumulative_prod", NUMERIC_OR_COMPLEX, x._dtype)
    if x.ndim == 0:
        return x
    x, ax = _scan_axis(x, axis, "cumulative_prod")
    y = apply(CUMPROD, (x,), {"axis": ax}, x._shape, x._dtype) if x._shape[ax] else x
    return _with_initial(y, ax, 1) if include_initial else y


def _diff(x: Tensor, axis: int, n: int) -> Tensor:
    for _ in range(n):
        length = x._shape[axis]
        hi, lo = _slice_axis(x, axis, 1, length), _slice_axis(x, axis, 0, length - 1 if length else 0)
        x = (hi != lo) if x._dtype is bool_ else hi - lo
    return x


DIFF = define("diff", kind="other", native="diff(a, *, axis, n) -> handle  # n-th forward difference", composite=_diff)


def diff(x: Any, /, *, axis: int = -1, n: int = 1, prepend: Any = None, append: Any = None) -> Tensor:
    """The ``n``-th forward difference along ``axis`` (``x[i+1] - x[i]``; ``!=`` for booleans).

    ``prepend`` and ``append`` are joined to ``x`` along ``axis`` first.

    >>> import ember as em
    >>> em.diff(em.tensor([1, 4, 9, 16])).tolist()
    [3, 5, 7]
    """
    x = _tensor_arg(x, "diff")
    if x.ndim == 0:
        raise ShapeError("diff: x must have at least one dimension; 0-d tensors have no axis to difference")
    ax = normalize_axis(axis, x.ndim, "diff")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidArgumentError(f"diff: n must be a non-negative int, got {n!r}")
    parts = [p for p in (prepend, x, append) if p is not None]
    if len(parts) > 1:
        parts = [_tensor_arg(p, "diff", x) for p in parts]
        parts = [broadcast_to(p, x._shape[:ax] + (1,) + x._shape[ax + 1 :]) if p.ndim == 0 else p for p in parts]
        x = concat(parts, axis=ax)
    if n == 0:
        return x
    kept = x._shape[ax] - n if x._shape[ax] > n else 0
    shape = x._shape[:ax] + (kept,) + x._shape[ax + 1 :]
    return apply(DIFF, (x,), {"axis": ax, "n": n}, shape, x._dtype)


def _count(x: Tensor, axes: tuple[int, ...]) -> int:
    n = 1
    for a in axes:
        n *= x._shape[a]
    return n


def _mean(x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    n = _count(x, axes)
    return sum(x, axis=axes, keepdims=keepdims) / float(n) if n else sum(x, axis=axes, keepdims=keepdims) * float("nan")


MEAN = define(
    "mean", kind="reduction", native="mean(a, *, axes, keepdims) -> handle", autocast=FLOAT32, composite=_mean
)


def _floating(x: Any, op: str, accepts: frozenset = FLOAT) -> Tensor:
    x = _tensor_arg(x, op)
    if x._dtype not in accepts:
        raise _reject(op, accepts, x._dtype)
    return x


def mean(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over ``axis`` (floating-point and complex tensors)."""
    x = _floating(x, "mean", FLOAT_OR_COMPLEX)
    keepdims = bool(keepdims)
    axes, shape = _reduction_shape(x._shape, axis, keepdims, "mean")
    return apply(MEAN, (x,), {"axes": axes, "keepdims": keepdims}, shape, x._dtype)


def _var(x: Tensor, axes: tuple[int, ...], keepdims: bool, correction: float) -> Tensor:
    mu = mean(x, axis=axes, keepdims=True)
    d = x - mu
    n = _count(x, axes) - correction
    total = sum(d * d, axis=axes, keepdims=keepdims)
    return total / float(n) if n > 0 else total * float("nan")


VAR = define("var", kind="reduction", native="var(a, *, axes, keepdims, correction) -> handle", composite=_var)


def var(x: Any, axis: Any = None, keepdims: bool = False, correction: float = 0.0) -> Tensor:
    """Variance over ``axis``; ``correction=1`` gives the unbiased estimate."""
    x = _floating(x, "var")
    axes = normalize_axes(axis, x.ndim, "var")
    if isinstance(correction, bool) or not isinstance(correction, (int, float)) or not correction >= 0:
        raise InvalidArgumentError(
            f"var: correction must be a number >= 0 (0: population, 1: sample variance), got {correction!r}"
        )
    return apply(
        VAR,
        (x,),
        {"axes": axes, "keepdims": bool(keepdims), "correction": float(correction)},
        reduced_shape(x._shape, axes, keepdims),
        x._dtype,
    )


def std(x: Any, axis: Any = None, keepdims: bool = False, correction: float = 0.0) -> Tensor:
    """Standard deviation over ``axis``."""
    return sqrt(var(x, axis=axis, keepdims=keepdims, correction=correction))


def _logsumexp(x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    m = max(x, axis=axes, keepdims=True).detach()
    m = where(m.isinf(), 0.0, m)
    out = log(sum(exp(x - m), axis=axes, keepdims=True)) + m
    return out if keepdims else out.reshape(reduced_shape(x._shape, axes, False))


def _logsumexp_vjp(g: Tensor, out: Tensor, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> tuple[Any]:
    y = _keep(out, x, axes, keepdims)
    return (_keep(g, x, axes, keepdims) * exp(x - y),)


LOGSUMEXP = define(
    "logsumexp",
    kind="reduction",
    native="logsumexp(a, *, axes, keepdims) -> handle",
    composite=_logsumexp,
    vjp=_logsumexp_vjp,
)


def logsumexp(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) over ``axis``, computed without overflow."""
    x = _floating(x, "logsumexp")
    axes = normalize_axes(axis, x.ndim, "logsumexp")
    if not axes and x.ndim:
        return x
    return apply(
        LOGSUMEXP, (x,), {"axes": axes, "keepdims": bool(keepdims)}, reduced_shape(x._shape, axes, keepdims), x._dtype
    )


def count_nonzero(x: Any, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Number of nonzero elements over ``axis`` (int64)."""
    x = _tensor_arg(x, "count_nonzero")
    nonzero = x if x._dtype is bool_ else x != 0
    return sum(nonzero.astype(int64), axis=axis, keepdims=keepdims)

"""Linear algebra and sorting in the core namespace: matmul (primitive), sort/argsort
(primitives), and composites (tensordot, vecdot, outer, diagonal, trace, norms, topk)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import dispatch as _dispatch
from ..amp import LOW
from ..creation import zeros
from ..dispatch import apply, define, is_tensor
from ..dtypes import bool_, int64, promote_types
from ..errors import ArgumentTypeError, DTypeError, InvalidArgumentError, ShapeError
from ..shapes import as_int, as_ints, broadcast_shapes, normalize_axes, normalize_axis
from .elementwise import NUMERIC, NUMERIC_OR_COMPLEX, _needs, _reject, _tensor_arg, abs, conj, sqrt, where
from .indexing import scatter_add, take_along_axis
from .movement import PERMUTE, permute_dims, reshape, slice_tensor

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = [
    "matmul", "matrix_transpose", "tensordot", "vecdot", "outer", "diagonal", "trace",
    "vector_norm", "sort", "argsort", "topk",
]  # fmt: skip


def _matmul_vjp(g: Tensor, out: Tensor, a: Tensor, b: Tensor) -> tuple[Any, Any]:
    need_a, need_b = _needs(a), _needs(b)
    # complex operands: the adjoints are the conjugate transposes (PyTorch's convention); an operand
    # is read only for the other's gradient (a stand-in otherwise, ember.autodiff.node.READ_FOR)
    if a._dtype.kind == "c" and need_b:
        a = conj(a)
    if b._dtype.kind == "c" and need_a:
        b = conj(b)
    ga = matmul(g, matrix_transpose(b)) if need_a else None
    gb = None
    if need_b:
        if b.ndim == 2 and g.ndim > 2:  # a weight used by (..., n, k) inputs: one (k, N) @ (N, m) GEMM
            gb = matmul(matrix_transpose(reshape(a, (-1, a._shape[-1]))), reshape(g, (-1, g._shape[-1])))
        else:
            gb = matmul(matrix_transpose(a), g)
    return ga, gb


MATMUL = define("matmul", kind="contraction", autocast=LOW, primitive=True, vjp=_matmul_vjp)


def matmul(a: Any, b: Any) -> Tensor:
    """Matrix product with numpy semantics (1-D operands, broadcast batch axes)."""
    T = _dispatch._TENSOR
    if type(a) is not T:
        a = _tensor_arg(a, "matmul", b if is_tensor(b) else None)
    if type(b) is not T:
        b = _tensor_arg(b, "matmul", a)
    shape_a, shape_b = a._shape, b._shape  # as the user passed them, for the messages
    if len(shape_a) >= 2 and len(shape_b) >= 2 and a._dtype is b._dtype and a._dtype in NUMERIC_OR_COMPLEX:
        # the common case (matrices or batches of them, one dtype): no promotion, no squeeze
        n, k = shape_a[-2:]
        k2, m = shape_b[-2:]
        if k == k2:
            lead_a, lead_b = shape_a[:-2], shape_b[:-2]
            batch = lead_a if lead_a == lead_b else broadcast_shapes(lead_a, lead_b, op="matmul")
            return apply(MATMUL, (a, b), {}, batch + (n, m), a._dtype)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError("matmul: operands must have at least 1 dimension; use * for scalars")
    dt = promote_types(a._dtype, b._dtype, "matmul") if a._dtype is not b._dtype else a._dtype
    if dt not in NUMERIC_OR_COMPLEX:
        raise _reject("matmul", NUMERIC_OR_COMPLEX, dt)
    if a._dtype is not dt:
        a = a.astype(dt)
    if b._dtype is not dt:
        b = b.astype(dt)
    if a.ndim == 1 and b.ndim == 1 and a._shape != b._shape:
        raise ShapeError(
            f"matmul: 1-D operands of shapes {a._shape} and {b._shape} differ in length "
            f"({a._shape[0]} != {b._shape[0]}); a vector product needs two vectors of the same length."
        )
    squeeze_a = a.ndim == 1
    squeeze_b = b.ndim == 1
    if squeeze_a:
        a = reshape(a, (1, a._shape[0]))
    if squeeze_b:
        b = reshape(b, (b._shape[0], 1))
    n, k = a._shape[-2:]
    k2, m = b._shape[-2:]
    if k != k2:
        raise ShapeError(
            f"matmul: inner dimensions differ: {shape_a} @ {shape_b} ({k} != {k2}). The last axis "
            f"of the first operand must equal the second-to-last axis of the second."
        )
    batch = broadcast_shapes(a._shape[:-2], b._shape[:-2], op="matmul")
    out = apply(MATMUL, (a, b), {}, batch + (n, m), dt)
    if squeeze_a or squeeze_b:
        shape = batch + ((n,) if not squeeze_a else ()) + ((m,) if not squeeze_b else ())
        out = reshape(out, shape)
    return out


def matrix_transpose(x: Any) -> Tensor:
    """Swap the last two axes."""
    if type(x) is not _dispatch._TENSOR:
        x = _tensor_arg(x, "matrix_transpose")
    shape = x._shape
    ndim = len(shape)
    if ndim < 2:
        raise ShapeError(f"matrix_transpose: needs at least 2 dimensions, got shape {x._shape}")
    # swapaxes(x, -1, -2), its permutation built here: every matmul's backward transposes twice
    axes = _TRANSPOSES.get(ndim)
    if axes is None:
        axes = _TRANSPOSES[ndim] = tuple(range(ndim - 2)) + (ndim - 1, ndim - 2)
    return apply(PERMUTE, (x,), {"axes": axes}, shape[:-2] + (shape[-1], shape[-2]), x._dtype)


#: ndim -> the permutation that swaps the last two axes
_TRANSPOSES: dict[int, tuple[int, ...]] = {}


def tensordot(a: Any, b: Any, axes: Any = 2) -> Tensor:
    """Sum products over the last ``axes`` of ``a`` and the first of ``b`` (or given axis lists)."""
    a = _tensor_arg(a, "tensordot")
    b = _tensor_arg(b, "tensordot", a)
    if isinstance(axes, int) and not isinstance(axes, bool):
        if not 0 <= axes <= min(a.ndim, b.ndim):
            raise ShapeError(
                f"tensordot: axes={axes} must be in 0..{min(a.ndim, b.ndim)} for operands of shapes "
                f"{a._shape} and {b._shape} (the number of trailing/leading axes to contract)"
            )
        ax_a = list(range(a.ndim - axes, a.ndim))
        ax_b = list(range(axes))
    else:
        try:
            first, second = axes
        except (TypeError, ValueError):
            raise ArgumentTypeError(
                f"tensordot: axes must be an int or a pair of axis sequences, got {axes!r}"
            ) from None
        ax_a = [normalize_axis(i, a.ndim, "tensordot", "axes") for i in as_ints(first, "tensordot", "axes")]
        ax_b = [normalize_axis(i, b.ndim, "tensordot", "axes") for i in as_ints(second, "tensordot", "axes")]
    if len(ax_a) != len(ax_b) or any(a._shape[i] != b._shape[j] for i, j in zip(ax_a, ax_b)):
        raise ShapeError(f"tensordot: contracted axes of {a._shape} and {b._shape} do not match")
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = 1
    for i in ax_a:
        k *= a._shape[i]
    m = n = 1  # sizes written out: -1 cannot be inferred when k is 0
    for i in free_a:
        m *= a._shape[i]
    for i in free_b:
        n *= b._shape[i]
    am = reshape(permute_dims(a, free_a + ax_a), (m, k))
    bm = reshape(permute_dims(b, ax_b + free_b), (k, n))
    return reshape(matmul(am, bm), tuple(a._shape[i] for i in free_a) + tuple(b._shape[i] for i in free_b))


def vecdot(a: Any, b: Any, /, *, axis: int = -1) -> Tensor:
    """Dot product along ``axis`` with broadcasting; the result keeps the promoted dtype.

    ``axis`` counts from the end of each input (Array API): -1 is the last axis of both.
    """
    a = _tensor_arg(a, "vecdot")
    b = _tensor_arg(b, "vecdot", a)
    dt = promote_types(a._dtype, b._dtype, "vecdot")
    ndim = min(a.ndim, b.ndim)
    if ndim == 0 or not -ndim <= axis < max(a.ndim, b.ndim):
        raise ShapeError(
            f"vecdot: axis={axis} is out of range for x1 {a._shape} and x2 {b._shape}; give an axis in "
            f"[-{ndim}, -1] (counted from the end of both)"
        )
    back = axis - max(a.ndim, b.ndim) if axis >= 0 else axis
    if a._shape[back] != b._shape[back]:
        raise ShapeError(
            f"vecdot: axis {axis} has length {a._shape[back]} in x1 {a._shape} but {b._shape[back]} in x2 "
            f"{b._shape}; the contracted axis must have one length"
        )
    if dt.kind == "c":  # the standard's vecdot conjugates x1
        a = conj(a)
    return (a * b).sum(axis=back, dtype=dt)


def outer(a: Any, b: Any) -> Tensor:
    """Outer product of two 1-D tensors."""
    a = _tensor_arg(a, "outer")
    b = _tensor_arg(b, "outer", a)
    if a.ndim != 1 or b.ndim != 1:
        raise ShapeError(f"outer: expects 1-D tensors, got {a._shape} and {b._shape}")
    return reshape(a, (-1, 1)) * reshape(b, (1, -1))


def diagonal(x: Any, offset: int = 0) -> Tensor:
    """Diagonal ``offset`` of the last two axes."""
    x = _tensor_arg(x, "diagonal")
    if x.ndim < 2:
        raise ShapeError(f"diagonal: needs at least 2 dimensions, got shape {x._shape}")
    n, m = x._shape[-2:]
    length = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    flat = reshape(x, x._shape[:-2] + (n * m,))
    if length == 0:
        return slice_tensor(flat, (0,) * flat.ndim, flat._shape[:-1] + (0,), (1,) * flat.ndim)
    stop = start + (length - 1) * (m + 1) + 1
    lead = flat.ndim - 1
    return slice_tensor(flat, (0,) * lead + (start,), flat._shape[:-1] + (stop,), (1,) * lead + (m + 1,))


def trace(x: Any, offset: int = 0) -> Tensor:
    """Sum of diagonal ``offset`` of the last two axes."""
    return diagonal(x, offset).sum(axis=-1)


def _l2_composite(x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    return sqrt((x * x).sum(axis=axes, keepdims=keepdims))


def _l2_vjp(g: Tensor, out: Tensor, x: Tensor, axes: tuple[int, ...], keepdims: bool) -> tuple[Any]:
    if not keepdims:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x._shape))
        g, out = reshape(g, shape), reshape(out, shape)
    safe = where(out == 0, 1.0, out)
    return (where(out == 0, 0.0, g * x / safe),)


def _linear_composite(x: Tensor, w: Tensor, *bias: Tensor) -> Tensor:
    out = matmul(x, matrix_transpose(w))
    return out + bias[0] if bias else out


LINEAR = define(
    "linear",
    kind="contraction",
    native="linear(x, weight[, bias]) -> handle  # x @ weight.T + bias",
    composite=_linear_composite,
    autocast=LOW,
)


def linear(x: Any, weight: Any, bias: Any = None, *, name: str = "linear") -> Tensor:
    """``x @ weight.T + bias`` for x of shape (..., in_features), weight (out_features, in_features)."""
    x = _tensor_arg(x, name)
    weight = _tensor_arg(weight, name, x)
    if weight.ndim != 2:
        raise ShapeError(f"{name}: weight must be 2-D (out_features, in_features), got shape {weight.shape}")
    if x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ShapeError(
            f"{name}: expected input of shape (..., {weight.shape[1]}) (last axis = in_features), got {x.shape}"
        )
    inputs: tuple[Tensor, ...] = (x, weight)
    dt = promote_types(x._dtype, weight._dtype, name)
    if bias is not None:
        bias = _tensor_arg(bias, name, x)
        inputs += (bias,)
        dt = promote_types(dt, bias._dtype, name)
    if dt not in NUMERIC:
        raise _reject(name, NUMERIC, dt)
    return apply(LINEAR, inputs, {}, x._shape[:-1] + (weight._shape[0],), dt)


L2NORM = define(
    "l2_norm", kind="reduction", native="l2_norm(a, *, axes, keepdims) -> handle", composite=_l2_composite, vjp=_l2_vjp
)


def vector_norm(x: Any, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Tensor:
    """p-norm over ``axis``: ord 2 (default), 1, inf, -inf, 0, or any other p (negative included)."""
    x = _tensor_arg(x, "vector_norm")
    if x._dtype.kind != "f":
        raise DTypeError(f"vector_norm: expected a floating-point tensor, got {x._dtype}")
    axes = normalize_axes(axis, x.ndim, "vector_norm")
    if ord == 2:
        shape = (
            tuple(1 if i in axes else d for i, d in enumerate(x._shape))
            if keepdims
            else tuple(d for i, d in enumerate(x._shape) if i not in axes)
        )
        return apply(L2NORM, (x,), {"axes": axes, "keepdims": bool(keepdims)}, shape, x._dtype)
    a = abs(x)
    if ord == 1:
        return a.sum(axis=axes, keepdims=keepdims)
    if ord == float("inf"):
        return a.max(axis=axes, keepdims=keepdims)
    if ord == float("-inf"):
        return a.min(axis=axes, keepdims=keepdims)
    if ord == 0:
        return (x != 0).astype(x._dtype).sum(axis=axes, keepdims=keepdims)
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise ArgumentTypeError(f"vector_norm: ord must be a number (1, 2, any p, 0 or +-inf), got {ord!r}")
    p = float(ord)
    if p != p:
        raise InvalidArgumentError(f"vector_norm: ord must be a number, not NaN, got {ord!r}")
    # a negative p is the standard's (sum |x|^p)^(1/p) too: a zero entry makes it 0, as numpy
    return (a**p).sum(axis=axes, keepdims=keepdims) ** (1.0 / p)


def _sort_vjp(g: Tensor, out: Tensor, x: Tensor, axis: int, descending: bool) -> tuple[Any]:

    idx = argsort(x, axis=axis, descending=descending)
    return (scatter_add(zeros(x._shape, dtype=g._dtype, device=g._device), idx, g, axis),)


SORT = define("sort", kind="other", primitive=True, vjp=_sort_vjp)
ARGSORT = define("argsort", kind="other", primitive=True, differentiable=False)


def _sortable(x: Any, op: str, axis: int) -> tuple[Tensor, int]:
    x = _tensor_arg(x, op)
    if x._dtype is bool_:
        x = x.astype("uint8")
    if x._dtype not in NUMERIC_OR_COMPLEX:  # complex: lexicographic (real, then imaginary), as numpy
        raise _reject(op, NUMERIC_OR_COMPLEX, x._dtype)
    if x.ndim == 0:
        raise ShapeError(f"{op}: 0-d tensors cannot be sorted")
    return x, normalize_axis(axis, x.ndim, op)


def sort(x: Any, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """Sorted values along ``axis`` (stable; NaN last when ascending)."""
    src = _tensor_arg(x, "sort")
    y, ax = _sortable(src, "sort", axis)
    out = apply(SORT, (y,), {"axis": ax, "descending": bool(descending)}, y._shape, y._dtype)
    return out.astype(bool_) if src._dtype is bool_ else out


def argsort(x: Any, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """Indices that sort ``x`` along ``axis`` (stable: ties keep their order)."""
    y, ax = _sortable(x, "argsort", axis)
    return apply(ARGSORT, (y,), {"axis": ax, "descending": bool(descending)}, y._shape, int64)


def topk(x: Any, k: int, axis: int = -1, largest: bool = True) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) values along ``axis`` and their indices, sorted."""
    y, ax = _sortable(x, "topk", axis)
    n = y._shape[ax]
    k = as_int(k, "topk", "k")
    if not 0 <= k <= n:
        raise ShapeError(f"topk: k={k} must be between 0 and the axis length {n}")
    idx = argsort(y, axis=ax, descending=largest)
    starts = (0,) * y.ndim
    stops = tuple(k if i == ax else d for i, d in enumerate(y._shape))
    idx = slice_tensor(idx, starts, stops, (1,) * y.ndim)
    return take_along_axis(_tensor_arg(x, "topk"), idx, ax), idx

"""Convolution, pooling, interpolation and im2col (unfold / fold) over (N, C, *spatial) tensors
with 1 to 3 spatial dims, PyTorch semantics.

Each op's composite uses movement primitives (slice, pad, reshape, concat), matmul, take and
reductions, so a backend with only the primitives runs it; its vjp rule sits next to it, so a
backend's native kernel is used in training too. Inside the ops, padding is always explicit
``(lo, hi)`` pairs per spatial axis ("same" pads asymmetrically, ``ceil_mode`` pads the high
side further), so an op's parameters fully determine its output shape.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, NamedTuple

import numpy as np

from ..amp import _STATE as _AMP
from ..amp import autocast_inputs
from ..dispatch import apply, define
from ..dtypes import int64
from ..errors import DTypeError, ShapeError
from ..tensor import Tensor
from .elementwise import FLOAT, _reject, _tensor_arg, where
from .indexing import SCATTER_ADD, TAKE
from .linalg import matmul, matrix_transpose
from .movement import (
    broadcast_to,
    concat,
    expand_dims,
    moveaxis,
    pad,
    permute_dims,
    reshape,
    slice_tensor,
    squeeze,
)
from .reduction import argmax, mean
from .reduction import max as reduce_max
from .reduction import sum as reduce_sum

__all__ = [
    "conv", "conv_transpose", "unfold", "fold", "max_pool", "avg_pool", "adaptive_avg_pool",
    "adaptive_max_pool", "interpolate", "adaptive_windows", "interpolation_weights",
]  # fmt: skip

Ints = tuple[int, ...]
Pads = tuple[tuple[int, int], ...]


# -- shape arithmetic and argument checks ------------------------------------------------
def _span(k: int, d: int) -> int:
    return d * (k - 1) + 1


def _blocks(sizes: Ints, kernel: Ints, stride: Ints, padding: Pads, dilation: Ints) -> Ints:
    """Number of kernel placements per spatial axis."""
    return tuple(
        (n + lo + hi - _span(k, d)) // s + 1 for n, k, s, (lo, hi), d in zip(sizes, kernel, stride, padding, dilation)
    )


def _ints(value: Any, nd: int, name: str, op: str, low: int) -> Ints:
    """An int or a sequence of ``nd`` ints, each at least ``low``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        out = (int(value),) * nd
    else:
        try:
            out = tuple(int(v) for v in value)
        except (TypeError, ValueError):
            raise TypeError(f"{op}: {name} must be an int or a tuple of {nd} ints, got {value!r}") from None
        if len(out) != nd:
            raise ShapeError(f"{op}: {name}={value!r} needs {nd} entries, one per spatial dim")
    if any(v < low for v in out):
        raise ShapeError(f"{op}: every entry of {name} must be >= {low}, got {value!r}")
    return out


def _float_input(x: Any, op: str) -> Tensor:
    x = _tensor_arg(x, op)
    if x._dtype not in FLOAT:
        raise _reject(op, FLOAT, x._dtype)
    return x


def _same_dtype(t: Any, like: Tensor, name: str, op: str) -> Tensor:
    t = _tensor_arg(t, op, like)
    if t._dtype is not like._dtype:
        raise DTypeError(f"{op}: {name} has dtype {t._dtype} but the input is {like._dtype}; cast one to match")
    return t


def _spatial_dims(kernel_size: Any, x: Tensor, op: str) -> int:
    """Spatial dims from a tuple ``kernel_size``, else ``x.ndim - 2``."""
    nd = x.ndim - 2 if isinstance(kernel_size, (int, np.integer)) else len(kernel_size)
    if not 1 <= nd <= 3:
        raise ShapeError(f"{op}: expected 1 to 3 spatial dims, got input of shape {x._shape}")
    return nd


def _batched(x: Tensor, nd: int, op: str) -> tuple[Tensor, bool]:
    """``x`` as (N, C, *spatial) and whether a batch axis was added to an unbatched input."""
    if x.ndim == nd + 2:
        return x, False
    if x.ndim == nd + 1:
        return expand_dims(x, 0), True
    raise ShapeError(
        f"{op}: expected input of shape (N, C, *spatial) or (C, *spatial) with {nd} spatial dim(s), got {x._shape}"
    )


def _unbatch(y: Tensor, added: bool) -> Tensor:
    return squeeze(y, 0) if added else y


def _check_fits(op: str, sizes: Ints, kernel: Ints, padding: Pads, dilation: Ints) -> None:
    for i, (n, k, (lo, hi), d) in enumerate(zip(sizes, kernel, padding, dilation)):
        if n + lo + hi < _span(k, d):
            raise ShapeError(
                f"{op}: kernel {kernel} (dilated extent {_span(k, d)} on spatial axis {i}) is larger than "
                f"the padded input ({n} + {lo + hi} padding); use a smaller kernel or more padding"
            )


def _const(values: Any, like: Tensor, dtype: Any = None) -> Tensor:
    """A constant tensor on ``like``'s device (``like``'s dtype unless given)."""
    from ..creation import tensor

    return tensor(np.asarray(values), dtype=like._dtype if dtype is None else dtype, device=like._device)


# -- unfold / fold (im2col and its adjoint) ----------------------------------------------
def _unfold_composite(x: Tensor, kernel: Ints, stride: Ints, padding: Pads, dilation: Ints, value: float) -> Tensor:
    n, c = x._shape[:2]
    blocks = _blocks(x._shape[2:], kernel, stride, padding, dilation)
    length = math.prod(blocks)
    if any(lo or hi for lo, hi in padding):
        x = pad(x, ((0, 0), (0, 0)) + tuple(padding), value=value)
    pieces = []
    for offsets in itertools.product(*(range(k) for k in kernel)):
        starts = (0, 0) + tuple(o * d for o, d in zip(offsets, dilation))
        stops = (n, c) + tuple(o * d + (b - 1) * s + 1 for o, d, b, s in zip(offsets, dilation, blocks, stride))
        piece = slice_tensor(x, starts, stops, (1, 1) + tuple(stride))
        pieces.append(reshape(piece, (n, c, 1, length)))
    cols = concat(pieces, axis=2) if len(pieces) > 1 else pieces[0]
    return reshape(cols, (n, c * len(pieces), length))


def _dilate_pad(t: Tensor, axis: int, step: int, before: int, total: int) -> Tensor:
    """Spread ``t`` along ``axis`` with ``step - 1`` zeros between elements, then zero-pad it to
    length ``total`` starting at ``before`` (movement ops only)."""
    shape = t._shape
    b = shape[axis]
    if step > 1 and b > 1:
        t = reshape(t, shape[: axis + 1] + (1,) + shape[axis + 1 :])
        t = pad(t, tuple((0, step - 1) if i == axis + 1 else (0, 0) for i in range(t.ndim)))
        t = reshape(t, shape[:axis] + (b * step,) + shape[axis + 1 :])
        stops = tuple((b - 1) * step + 1 if i == axis else d for i, d in enumerate(t._shape))
        t = slice_tensor(t, (0,) * t.ndim, stops, (1,) * t.ndim)
    after = total - before - t._shape[axis]
    return pad(t, tuple((before, after) if i == axis else (0, 0) for i in range(t.ndim)))


def _fold_composite(
    cols: Tensor,
    size: Ints,
    kernel: Ints,
    stride: Ints,
    padding: Pads,
    dilation: Ints,
) -> Tensor:
    n = cols._shape[0]
    nd = len(kernel)
    c = cols._shape[1] // math.prod(kernel)
    blocks = _blocks(size, kernel, stride, padding, dilation)
    padded = tuple(sz + lo + hi for sz, (lo, hi) in zip(size, padding))
    grid = reshape(cols, (n, c) + tuple(kernel) + blocks)
    out: Tensor | None = None
    for offsets in itertools.product(*(range(k) for k in kernel)):
        starts = (0, 0) + offsets + (0,) * nd
        stops = (n, c) + tuple(o + 1 for o in offsets) + blocks
        piece = reshape(slice_tensor(grid, starts, stops, (1,) * grid.ndim), (n, c) + blocks)
        for i in range(nd):
            piece = _dilate_pad(piece, 2 + i, stride[i], offsets[i] * dilation[i], padded[i])
        out = piece if out is None else out + piece
    starts = (0, 0) + tuple(lo for lo, _ in padding)
    stops = (n, c) + tuple(lo + sz for (lo, _), sz in zip(padding, size))
    return slice_tensor(out, starts, stops, (1,) * out.ndim)


def _unfold_vjp(
    g: Tensor, out: Tensor, x: Tensor, kernel: Any, stride: Any, padding: Pads, dilation: Any, value: float
) -> tuple[Any]:
    return (_fold_op(g, x._shape[2:], kernel, stride, padding, dilation),)


def _fold_vjp(
    g: Tensor, out: Tensor, cols: Tensor, size: Any, kernel: Any, stride: Any, padding: Pads, dilation: Any
) -> tuple[Any]:
    return (_unfold_op(g, kernel, stride, padding, dilation),)


UNFOLD = define("unfold", composite=_unfold_composite, vjp=_unfold_vjp)
FOLD = define("fold", composite=_fold_composite, vjp=_fold_vjp)


def _unfold_op(
    x: Tensor,
    kernel: Ints,
    stride: Ints,
    padding: Pads,
    dilation: Ints,
    value: float = 0.0,
) -> Tensor:
    """(N, C, *spatial) -> (N, C * prod(kernel), L), checked arguments."""
    n, c = x._shape[:2]
    blocks = _blocks(x._shape[2:], kernel, stride, padding, dilation)
    params = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation, "value": value}
    return apply(UNFOLD, (x,), params, (n, c * math.prod(kernel), math.prod(blocks)), x._dtype)


def _fold_op(
    cols: Tensor,
    size: Ints,
    kernel: Ints,
    stride: Ints,
    padding: Pads,
    dilation: Ints,
) -> Tensor:
    """(N, C * prod(kernel), L) -> (N, C, *size), summing overlaps; checked arguments."""
    n, ck = cols._shape[:2]
    params = {"size": tuple(size), "kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation}
    return apply(FOLD, (cols,), params, (n, ck // math.prod(kernel)) + tuple(size), cols._dtype)


# -- convolution -------------------------------------------------------------------------
def _weight_grad(a: Tensor, b: Tensor) -> Tensor:
    """sum over n of a[n, g] @ b[n, g]^T for a (N, G, P, L), b (N, G, Q, L): (G, P, Q)."""
    return reduce_sum(matmul(a, matrix_transpose(b)), axis=0)


def _bias_grad(g: Tensor, bias: tuple[Tensor, ...]) -> tuple[Any, ...]:
    if bias and bias[0]._rg:
        return (reduce_sum(g, axis=(0,) + tuple(range(2, g.ndim))),)
    return tuple(None for _ in bias)


def _add_bias(y: Tensor, bias: tuple[Tensor, ...]) -> Tensor:
    if not bias:
        return y
    return y + reshape(bias[0], (1, y._shape[1]) + (1,) * (y.ndim - 2))


def _conv_composite(
    x: Tensor, w: Tensor, *bias: Tensor, stride: Ints, padding: Pads, dilation: Ints, groups: int
) -> Tensor:
    n = x._shape[0]
    cout = w._shape[0]
    kernel = w._shape[2:]
    blocks = _blocks(x._shape[2:], kernel, stride, padding, dilation)
    length = math.prod(blocks)
    cols = _unfold_op(x, kernel, stride, padding, dilation)  # (N, Cin * K, L)
    if groups == 1:
        y = matmul(reshape(w, (cout, -1)), cols)
    else:
        cols = reshape(cols, (n, groups, cols._shape[1] // groups, length))
        y = matmul(reshape(w, (groups, cout // groups, -1)), cols)
    return _add_bias(reshape(y, (n, cout) + blocks), bias)


def _conv_vjp(
    g: Tensor, out: Tensor, x: Tensor, w: Tensor, *bias: Tensor, stride: Any, padding: Pads, dilation: Any, groups: int
) -> tuple[Any, ...]:
    gx = gw = None
    if x._rg:
        gx = _conv_transpose_op(g, w, (), x._shape[2:], stride, padding, dilation, groups)
    if w._rg:
        n, cout = g._shape[:2]
        cols = _unfold_op(x, w._shape[2:], stride, padding, dilation)
        length = cols._shape[2]
        a = reshape(g, (n, groups, cout // groups, length))
        b = reshape(cols, (n, groups, cols._shape[1] // groups, length))
        gw = reshape(_weight_grad(a, b), w._shape)
    return (gx, gw) + _bias_grad(g, bias)


def _conv_transpose_composite(
    x: Tensor,
    w: Tensor,
    *bias: Tensor,
    size: Ints,
    stride: Ints,
    padding: Pads,
    dilation: Ints,
    groups: int,
) -> Tensor:
    n, cin = x._shape[:2]
    kernel = w._shape[2:]
    length = math.prod(x._shape[2:])
    xm = reshape(x, (n, groups, cin // groups, length))
    wm = reshape(w, (groups, cin // groups, w._shape[1] * math.prod(kernel)))
    cols = matmul(matrix_transpose(wm), xm)  # (N, G, Cout/G * K, L)
    cols = reshape(cols, (n, groups * cols._shape[2], length))
    return _add_bias(_fold_op(cols, size, kernel, stride, padding, dilation), bias)


def _conv_transpose_vjp(
    g: Tensor,
    out: Tensor,
    x: Tensor,
    w: Tensor,
    *bias: Tensor,
    size: Any,
    stride: Any,
    padding: Pads,
    dilation: Any,
    groups: int,
) -> tuple[Any, ...]:
    gx = gw = None
    if x._rg:
        gx = _conv_op(g, w, (), stride, padding, dilation, groups)
    if w._rg:
        n, cin = x._shape[:2]
        cols = _unfold_op(g, w._shape[2:], stride, padding, dilation)  # (N, Cout * K, L)
        length = cols._shape[2]
        a = reshape(x, (n, groups, cin // groups, length))
        b = reshape(cols, (n, groups, cols._shape[1] // groups, length))
        gw = reshape(_weight_grad(a, b), w._shape)
    return (gx, gw) + _bias_grad(g, bias)


CONV = define("conv", composite=_conv_composite, vjp=_conv_vjp)
CONV_TRANSPOSE = define("conv_transpose", composite=_conv_transpose_composite, vjp=_conv_transpose_vjp)


def _conv_op(
    x: Tensor,
    w: Tensor,
    bias: tuple[Tensor, ...],
    stride: Ints,
    padding: Pads,
    dilation: Ints,
    groups: int,
) -> Tensor:
    blocks = _blocks(x._shape[2:], w._shape[2:], stride, padding, dilation)
    params = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    return apply(CONV, (x, w) + bias, params, (x._shape[0], w._shape[0]) + blocks, x._dtype)


def _conv_transpose_op(
    x: Tensor,
    w: Tensor,
    bias: tuple[Tensor, ...],
    size: Ints,
    stride: Ints,
    padding: Pads,
    dilation: Ints,
    groups: int,
) -> Tensor:
    params = {"size": tuple(size), "stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    shape = (x._shape[0], w._shape[1] * groups) + tuple(size)
    return apply(CONV_TRANSPOSE, (x, w) + bias, params, shape, x._dtype)


def _conv_args(
    op: str, x: Any, weight: Any, bias: Any, groups: Any, transposed: bool
) -> tuple[Tensor, Tensor, tuple[Tensor, ...], int, bool]:
    """Check input, weight, bias and groups; returns batched x, w, bias, groups, added-batch flag."""
    if _AMP.dtype is not None:  # autocast: conv and conv_transpose run in the low-precision dtype
        x, weight, bias = autocast_inputs(op, x, weight, bias)
    x = _float_input(x, op)
    w = _same_dtype(weight, x, "weight", op)
    nd = w.ndim - 2
    if not 1 <= nd <= 3:
        raise ShapeError(f"{op}: weight must be (out, in / groups, *kernel) with 1 to 3 kernel dims, got {w._shape}")
    x, added = _batched(x, nd, op)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ShapeError(f"{op}: groups must be a positive int, got {groups!r}")
    groups = int(groups)
    cin = x._shape[1]
    if cin % groups:
        raise ShapeError(f"{op}: groups={groups} does not divide the {cin} input channels")
    if transposed:
        if w._shape[0] != cin:
            raise ShapeError(
                f"{op}: weight {w._shape} expects {w._shape[0]} input channels (weight is (C_in, C_out / groups, "
                f"*kernel)), but the input {x._shape} has {cin}"
            )
        cout = w._shape[1] * groups
    else:
        cout = w._shape[0]
        if cout % groups:
            raise ShapeError(f"{op}: groups={groups} does not divide the {cout} output channels of weight {w._shape}")
        if w._shape[1] * groups != cin:
            raise ShapeError(
                f"{op}: weight {w._shape} expects {w._shape[1] * groups} input channels "
                f"({w._shape[1]} per group x {groups} groups), but the input {x._shape} has {cin}"
            )
    extra: tuple[Tensor, ...] = ()
    if bias is not None:
        b = _same_dtype(bias, x, "bias", op)
        if b._shape != (cout,):
            raise ShapeError(f"{op}: bias must have shape ({cout},) (one per output channel), got {b._shape}")
        extra = (b,)
    return x, w, extra, groups, added


def _conv_padding(padding: Any, kernel: Ints, stride: Ints, dilation: Ints, op: str) -> Pads:
    nd = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding == "same":
            if any(s != 1 for s in stride):
                raise ShapeError(f"{op}: padding='same' needs stride 1, got stride={stride}")
            totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
            return tuple((t // 2, t - t // 2) for t in totals)
        raise ShapeError(f"{op}: padding must be an int, a tuple, 'valid' or 'same', got {padding!r}")
    return tuple((p, p) for p in _ints(padding, nd, "padding", op, 0))


def conv(
    x: Any, weight: Any, bias: Any = None, stride: Any = 1, padding: Any = 0, dilation: Any = 1, groups: int = 1
) -> Tensor:
    """N-d convolution (cross-correlation) of ``x`` (N, C_in, *spatial) with ``weight``
    (C_out, C_in / groups, *kernel), 1 to 3 spatial dims; ``padding`` may be 'valid' or 'same'.

    >>> import ember as em
    >>> x = em.ones((1, 1, 4))
    >>> em.conv(x, em.ones((1, 1, 3)), padding=1).tolist()
    [[[2.0, 3.0, 3.0, 2.0]]]
    """
    x, w, extra, groups, added = _conv_args("conv", x, weight, bias, groups, transposed=False)
    nd = w.ndim - 2
    kernel = w._shape[2:]
    st = _ints(stride, nd, "stride", "conv", 1)
    dil = _ints(dilation, nd, "dilation", "conv", 1)
    pads = _conv_padding(padding, kernel, st, dil, "conv")
    _check_fits("conv", x._shape[2:], kernel, pads, dil)
    return _unbatch(_conv_op(x, w, extra, st, pads, dil, groups), added)


def conv_transpose(
    x: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """Transposed convolution (the gradient of :func:`conv` with respect to its input) of ``x``
    (N, C_in, *spatial) with ``weight`` (C_in, C_out / groups, *kernel).

    >>> import ember as em
    >>> em.conv_transpose(em.ones((1, 1, 2)), em.ones((1, 1, 3)), stride=2).tolist()
    [[[1.0, 1.0, 2.0, 1.0, 1.0]]]
    """
    op = "conv_transpose"
    x, w, extra, groups, added = _conv_args(op, x, weight, bias, groups, transposed=True)
    nd = w.ndim - 2
    kernel = w._shape[2:]
    st = _ints(stride, nd, "stride", op, 1)
    dil = _ints(dilation, nd, "dilation", op, 1)
    pad_ = _ints(padding, nd, "padding", op, 0)
    outpad = _ints(output_padding, nd, "output_padding", op, 0)
    size = []
    pads = []
    for i, (n, k, s, d, p, o) in enumerate(zip(x._shape[2:], kernel, st, dil, pad_, outpad)):
        if o >= s and o >= d:
            raise ShapeError(f"{op}: output_padding {outpad} must be smaller than the stride or the dilation")
        if o >= s + p:
            raise ShapeError(f"{op}: output_padding {outpad} must be smaller than stride + padding on axis {i}")
        out = (n - 1) * s - 2 * p + _span(k, d) + o
        if out < 1:
            raise ShapeError(f"{op}: the output would have size {out} on spatial axis {i}; reduce the padding")
        size.append(out)
        pads.append((p, max(0, p - o)))
    return _unbatch(_conv_transpose_op(x, w, extra, tuple(size), st, tuple(pads), dil, groups), added)


def unfold(x: Any, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1) -> Tensor:
    """Sliding blocks of ``x`` (N, C, *spatial) as columns (N, C * prod(kernel), L), im2col; the
    row index is channel-major, then kernel offset (``torch.nn.functional.unfold``)."""
    x = _float_input(x, "unfold")
    nd = _spatial_dims(kernel_size, x, "unfold")
    x, added = _batched(x, nd, "unfold")
    kernel = _ints(kernel_size, nd, "kernel_size", "unfold", 1)
    st = _ints(stride, nd, "stride", "unfold", 1)
    dil = _ints(dilation, nd, "dilation", "unfold", 1)
    pads = tuple((p, p) for p in _ints(padding, nd, "padding", "unfold", 0))
    _check_fits("unfold", x._shape[2:], kernel, pads, dil)
    return _unbatch(_unfold_op(x, kernel, st, pads, dil), added)


def fold(x: Any, output_size: Any, kernel_size: Any, stride: Any = 1, padding: Any = 0, dilation: Any = 1) -> Tensor:
    """Sum columns (N, C * prod(kernel), L) back into (N, C, *output_size), the adjoint of
    :func:`unfold` (col2im; overlapping blocks add up)."""
    x = _float_input(x, "fold")
    if not isinstance(kernel_size, (int, np.integer)):
        nd = len(kernel_size)
    elif not isinstance(output_size, (int, np.integer)):
        nd = len(output_size)
    else:
        nd = 2
    if not 1 <= nd <= 3:
        raise ShapeError(f"fold: expected 1 to 3 spatial dims, got kernel_size {kernel_size!r}")
    size = _ints(output_size, nd, "output_size", "fold", 1)
    if x.ndim == 2:
        x, added = expand_dims(x, 0), True
    elif x.ndim == 3:
        added = False
    else:
        raise ShapeError(
            f"fold: expected input (N, C * prod(kernel_size), L) or (C * prod(kernel_size), L), got {x._shape}"
        )
    kernel = _ints(kernel_size, nd, "kernel_size", "fold", 1)
    st = _ints(stride, nd, "stride", "fold", 1)
    dil = _ints(dilation, nd, "dilation", "fold", 1)
    pads = tuple((p, p) for p in _ints(padding, nd, "padding", "fold", 0))
    k = math.prod(kernel)
    if x._shape[1] % k:
        raise ShapeError(f"fold: input axis 1 has {x._shape[1]} rows, not a multiple of prod(kernel_size)={k}")
    _check_fits("fold", size, kernel, pads, dil)
    blocks = _blocks(size, kernel, st, pads, dil)
    if math.prod(blocks) != x._shape[2]:
        raise ShapeError(
            f"fold: output_size {size} with kernel {kernel}, stride {st}, padding {padding!r}, dilation {dil} "
            f"has {math.prod(blocks)} blocks {blocks}, but the input has L={x._shape[2]}"
        )
    return _unbatch(_fold_op(x, size, kernel, st, pads, dil), added)


# -- pooling -----------------------------------------------------------------------------
def _windows(x: Tensor, kernel: Ints, stride: Ints, padding: Pads, dilation: Ints, value: float) -> Tensor:
    """(N, C, K, L) window elements of x (padded with ``value``)."""
    n, c = x._shape[:2]
    cols = _unfold_op(x, kernel, stride, padding, dilation, value)
    return reshape(cols, (n, c, math.prod(kernel), cols._shape[2]))


def _max_pool_composite(x: Tensor, kernel: Ints, stride: Ints, padding: Pads, dilation: Ints) -> Tensor:
    blocks = _blocks(x._shape[2:], kernel, stride, padding, dilation)
    win = _windows(x, kernel, stride, padding, dilation, float("-inf"))
    return reshape(reduce_max(win, axis=2), x._shape[:2] + blocks)


def _first_max(win: Tensor, y: Tensor) -> list[Tensor]:
    """Per kernel offset, where it holds its window's first maximum ``y`` (PyTorch's choice on
    ties): a running "found" mask, cheaper than argmax over a strided axis."""
    n, c, k, length = win._shape
    found: Tensor | None = None
    masks = []
    for i in range(k):
        hit = slice_tensor(win, (0, 0, i, 0), (n, c, i + 1, length), (1, 1, 1, 1)) == y
        if found is not None:
            hit = hit & ~found
        found = hit if found is None else found | hit
        masks.append(hit)
    return masks


def _max_pool_grad_composite(
    g: Tensor, x: Tensor, out: Tensor, kernel: Any, stride: Any, padding: Pads, dilation: Any
) -> Tensor:
    win = _windows(x, kernel, stride, padding, dilation, float("-inf"))
    n, c, k, length = win._shape
    gy = reshape(g, (n, c, 1, length))
    parts = [where(hit, gy, 0.0) for hit in _first_max(win, reshape(out, (n, c, 1, length)))]
    gcols = reshape(concat(parts, axis=2) if k > 1 else parts[0], (n, c * k, length))
    return _fold_op(gcols, x._shape[2:], kernel, stride, padding, dilation)


def _max_pool_grad_vjp(
    gg: Tensor, gx: Tensor, g: Tensor, x: Tensor, out: Tensor, kernel: Any, stride: Any, padding: Pads, dilation: Any
) -> tuple[Any, ...]:
    # linear in g: the adjoint picks gg at each window's first maximum; zero almost everywhere in x
    win = _windows(x, kernel, stride, padding, dilation, float("-inf"))
    n, c, k, length = win._shape
    ggw = _windows(gg, kernel, stride, padding, dilation, 0.0)
    picked = None
    for i, hit in enumerate(_first_max(win, reshape(out, (n, c, 1, length)))):
        part = where(hit, slice_tensor(ggw, (0, 0, i, 0), (n, c, i + 1, length), (1, 1, 1, 1)), 0.0)
        picked = part if picked is None else picked + part
    return reshape(picked, g._shape), None, None


MAX_POOL_GRAD = define("max_pool_backward", composite=_max_pool_grad_composite, vjp=_max_pool_grad_vjp)


def _max_pool_vjp(
    g: Tensor, out: Tensor, x: Tensor, kernel: Any, stride: Any, padding: Pads, dilation: Any
) -> tuple[Any]:
    params = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation}
    return (apply(MAX_POOL_GRAD, (g, x, out), params, x._shape, x._dtype),)


def _divisor(divisor: tuple[Ints, ...], like: Tensor) -> Tensor:
    """(1, 1, *blocks) tensor of the per-window divisors, the outer product of the per-axis ones."""
    full = np.ones((), dtype=np.float64)
    for d in divisor:
        full = np.multiply.outer(full, np.asarray(d, dtype=np.float64))
    return _const(full.reshape((1, 1) + full.shape), like)


def _avg_pool_composite(x: Tensor, kernel: Ints, stride: Ints, padding: Pads, divisor: tuple[Ints, ...]) -> Tensor:
    ones = (1,) * len(kernel)
    blocks = _blocks(x._shape[2:], kernel, stride, padding, ones)
    win = _windows(x, kernel, stride, padding, ones, 0.0)
    return reshape(reduce_sum(win, axis=2), x._shape[:2] + blocks) / _divisor(divisor, x)


def _avg_pool_vjp(
    g: Tensor, out: Tensor, x: Tensor, kernel: Any, stride: Any, padding: Pads, divisor: Any
) -> tuple[Any]:
    n, c = x._shape[:2]
    k = math.prod(kernel)
    length = math.prod(g._shape[2:])
    gd = reshape(g / _divisor(divisor, g), (n, c, 1, length))
    gcols = reshape(broadcast_to(gd, (n, c, k, length)), (n, c * k, length))
    ones = (1,) * len(kernel)
    return (_fold_op(gcols, x._shape[2:], kernel, stride, padding, ones),)


MAX_POOL = define("max_pool", composite=_max_pool_composite, vjp=_max_pool_vjp)
AVG_POOL = define("avg_pool", composite=_avg_pool_composite, vjp=_avg_pool_vjp)


class _Pool(NamedTuple):
    x: Tensor
    added: bool
    kernel: Ints
    stride: Ints
    padding: Ints
    dilation: Ints
    out: Ints
    pads: Pads  # (lo, hi) per axis; hi grows to fit the windows ceil_mode adds


def _pool_args(op: str, x: Any, kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool) -> _Pool:
    """Checked pooling arguments and the output size (PyTorch's rules)."""
    x = _float_input(x, op)
    nd = _spatial_dims(kernel_size, x, op)
    x, added = _batched(x, nd, op)
    kernel = _ints(kernel_size, nd, "kernel_size", op, 1)
    no_stride = stride is None or (not isinstance(stride, (int, np.integer)) and len(stride) == 0)
    st = kernel if no_stride else _ints(stride, nd, "stride", op, 1)
    pd = _ints(padding, nd, "padding", op, 0)
    dil = _ints(dilation, nd, "dilation", op, 1)
    out = []
    pads = []
    for i, (n, k, s, p, d) in enumerate(zip(x._shape[2:], kernel, st, pd, dil)):
        span = _span(k, d)
        limit = span // 2 if op == "max_pool" else k // 2
        if p > limit:
            raise ShapeError(f"{op}: padding {pd} must be at most half the kernel size {kernel} (axis {i})")
        num = n + 2 * p - span
        o = (-(-num // s) if ceil_mode else num // s) + 1
        if ceil_mode and (o - 1) * s >= n + p:
            o -= 1
        if o < 1:
            raise ShapeError(
                f"{op}: kernel {kernel} (dilated extent {span} on spatial axis {i}) is larger than the padded "
                f"input ({n} + {2 * p} padding)"
            )
        out.append(o)
        pads.append((p, max(p, (o - 1) * s + span - n - p)))
    return _Pool(x, added, kernel, st, pd, dil, tuple(out), tuple(pads))


def max_pool(
    x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1, ceil_mode: bool = False
) -> Tensor:
    """Maximum over sliding windows of (N, C, *spatial) (stride defaults to the kernel size).

    >>> import ember as em
    >>> em.max_pool(em.tensor([[[1.0, 3.0, 2.0, 5.0]]]), 2).tolist()
    [[[3.0, 5.0]]]
    """
    a = _pool_args("max_pool", x, kernel_size, stride, padding, dilation, ceil_mode)
    params = {"kernel": a.kernel, "stride": a.stride, "padding": a.pads, "dilation": a.dilation}
    return _unbatch(apply(MAX_POOL, (a.x,), params, a.x._shape[:2] + a.out, a.x._dtype), a.added)


def avg_pool(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """Mean over sliding windows of (N, C, *spatial); ``count_include_pad`` counts the zero
    padding in the divisor (windows that ``ceil_mode`` adds past the padding never do).

    >>> import ember as em
    >>> em.avg_pool(em.tensor([[[1.0, 3.0, 2.0, 5.0]]]), 2).tolist()
    [[[2.0, 3.5]]]
    """
    a = _pool_args("avg_pool", x, kernel_size, stride, padding, 1, ceil_mode)
    divisor = []
    for n, k, s, p, o in zip(a.x._shape[2:], a.kernel, a.stride, a.padding, a.out):
        counts = []
        for i in range(o):
            start = i * s - p
            end = min(start + k, n + p)
            size = end - start
            counts.append(size if count_include_pad else min(end, n) - max(start, 0))
        divisor.append(tuple(counts))
    params = {"kernel": a.kernel, "stride": a.stride, "padding": a.pads, "divisor": tuple(divisor)}
    return _unbatch(apply(AVG_POOL, (a.x,), params, a.x._shape[:2] + a.out, a.x._dtype), a.added)


# -- adaptive pooling --------------------------------------------------------------------
def adaptive_windows(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Window starts floor(i * in / out) and ends ceil((i + 1) * in / out) of one axis."""
    i = np.arange(out_size, dtype=np.int64)
    return (i * in_size) // out_size, -((-(i + 1) * in_size) // out_size)


def _take_const(x: Tensor, index: np.ndarray, axis: int) -> Tensor:
    """x taken at constant, in-range indices along ``axis`` (no host check of the indices)."""
    shape = tuple(len(index) if i == axis else d for i, d in enumerate(x._shape))
    return apply(TAKE, (x, _const(index, x, int64)), {"axis": axis}, shape, x._dtype)


def _scatter_const(g: Tensor, index: np.ndarray, axis: int, size: int) -> Tensor:
    """The adjoint of :func:`_take_const`: g summed into ``size`` rows at ``index``."""
    from ..creation import zeros

    shape = tuple(size if i == axis else d for i, d in enumerate(g._shape))
    idx = np.asarray(index, dtype=np.int64).reshape(tuple(-1 if i == axis else 1 for i in range(g.ndim)))
    idx_t = broadcast_to(_const(idx, g, int64), g._shape)
    base = zeros(shape, dtype=g._dtype, device=g._device)
    return apply(SCATTER_ADD, (base, idx_t, g), {"axis": axis}, shape, g._dtype)


def _adaptive_plan(sizes: Ints, out: Ints) -> list[tuple[np.ndarray, int]]:
    """Per axis: the flat window indices (windows padded by repeating their last element) and
    the padded window length."""
    plan = []
    for n, o in zip(sizes, out):
        start, end = adaptive_windows(n, o)
        k = int((end - start).max())
        idx = np.minimum(start[:, None] + np.arange(k)[None, :], end[:, None] - 1)
        plan.append((idx.reshape(-1), k))
    return plan


def _adaptive_gather(x: Tensor, size: Ints) -> tuple[Tensor, list[tuple[np.ndarray, int]]]:
    """(N, C, *size, K) window elements of x, K the product of the padded window lengths."""
    nd = len(size)
    plan = _adaptive_plan(x._shape[2:], size)
    y = x
    for i, (idx, _) in enumerate(plan):
        y = _take_const(y, idx, 2 + i)
    ks = tuple(k for _, k in plan)
    y = reshape(y, x._shape[:2] + tuple(v for o, k in zip(size, ks) for v in (o, k)))
    y = permute_dims(y, (0, 1) + tuple(2 + 2 * i for i in range(nd)) + tuple(3 + 2 * i for i in range(nd)))
    return reshape(y, x._shape[:2] + size + (math.prod(ks),)), plan


def _adaptive_max_vjp(g: Tensor, out: Tensor, x: Tensor, size: Ints) -> tuple[Any]:
    nd = len(size)
    win, plan = _adaptive_gather(x, size)
    k = win._shape[-1]
    hit = argmax(win, axis=-1, keepdims=True) == _const(np.arange(k), x, int64)
    gw = where(hit, expand_dims(g, -1), 0.0)
    ks = tuple(kk for _, kk in plan)
    gw = reshape(gw, x._shape[:2] + size + ks)
    inverse = [0, 1]
    for i in range(nd):
        inverse += [2 + i, 2 + nd + i]
    gw = reshape(permute_dims(gw, tuple(inverse)), x._shape[:2] + tuple(o * kk for o, kk in zip(size, ks)))
    for i in reversed(range(nd)):
        gw = _scatter_const(gw, plan[i][0], 2 + i, x._shape[2 + i])
    return (gw,)


def _adaptive_matrix(in_size: int, out_size: int) -> np.ndarray:
    """(out, in) averaging matrix of one axis."""
    start, end = adaptive_windows(in_size, out_size)
    pos = np.arange(in_size)
    inside = (pos[None, :] >= start[:, None]) & (pos[None, :] < end[:, None])
    return inside / (end - start)[:, None]


def _adaptive_avg_composite(x: Tensor, size: Ints) -> Tensor:
    y = x
    for i, o in enumerate(size):
        axis = 2 + i
        n = y._shape[axis]
        if n == o:
            continue
        if n % o == 0:
            y = mean(reshape(y, y._shape[:axis] + (o, n // o) + y._shape[axis + 1 :]), axis=axis + 1)
        else:
            y = moveaxis(matmul(moveaxis(y, axis, -1), _const(_adaptive_matrix(n, o).T, y)), -1, axis)
    return y


def _adaptive_avg_vjp(g: Tensor, out: Tensor, x: Tensor, size: Ints) -> tuple[Any]:
    for i in reversed(range(len(size))):
        axis = 2 + i
        n = x._shape[axis]
        if n != size[i]:
            g = moveaxis(matmul(moveaxis(g, axis, -1), _const(_adaptive_matrix(n, size[i]), g)), -1, axis)
    return (g,)


ADAPTIVE_AVG_POOL = define("adaptive_avg_pool", composite=_adaptive_avg_composite, vjp=_adaptive_avg_vjp)
ADAPTIVE_MAX_POOL = define(
    "adaptive_max_pool",
    composite=lambda x, size: reduce_max(_adaptive_gather(x, size)[0], axis=-1),
    vjp=_adaptive_max_vjp,
)


def _adaptive_args(op: str, x: Any, output_size: Any) -> tuple[Tensor, bool, Ints]:
    x = _float_input(x, op)
    if isinstance(output_size, (int, np.integer)) or output_size is None:
        nd = x.ndim - 2
    else:
        nd = len(output_size)
    if not 1 <= nd <= 3:
        raise ShapeError(f"{op}: expected 1 to 3 spatial dims, got input of shape {x._shape}")
    x, added = _batched(x, nd, op)
    if isinstance(output_size, (int, np.integer)) or output_size is None:
        output_size = (output_size,) * nd
    # None keeps that axis' input size (PyTorch)
    size = tuple(n if o is None else o for n, o in zip(x._shape[2:], output_size))
    size = _ints(size, nd, "output_size", op, 1)
    for i, n in enumerate(x._shape[2:]):
        if n < 1:
            raise ShapeError(f"{op}: spatial axis {i} of the input {x._shape} is empty")
    return x, added, size


def adaptive_avg_pool(x: Any, output_size: Any) -> Tensor:
    """Mean over windows [floor(i * in / out), ceil((i + 1) * in / out)) giving ``output_size``.

    >>> import ember as em
    >>> em.adaptive_avg_pool(em.tensor([[[1.0, 2.0, 3.0]]]), 2).tolist()
    [[[1.5, 2.5]]]
    """
    x, added, size = _adaptive_args("adaptive_avg_pool", x, output_size)
    return _unbatch(apply(ADAPTIVE_AVG_POOL, (x,), {"size": size}, x._shape[:2] + size, x._dtype), added)


def adaptive_max_pool(x: Any, output_size: Any) -> Tensor:
    """Maximum over windows [floor(i * in / out), ceil((i + 1) * in / out)) giving ``output_size``."""
    x, added, size = _adaptive_args("adaptive_max_pool", x, output_size)
    return _unbatch(apply(ADAPTIVE_MAX_POOL, (x,), {"size": size}, x._shape[:2] + size, x._dtype), added)


# -- interpolation -----------------------------------------------------------------------
def interpolation_weights(
    in_size: int, out_size: int, mode: str, align_corners: bool, scale: float | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Source rows ``i0``, ``i1`` and weight ``w1`` of one axis: y = x[i0] * (1 - w1) + x[i1] * w1
    (PyTorch's coordinate conventions; ``scale`` is the user's scale factor, or None)."""
    dst = np.arange(out_size, dtype=np.float64)
    ratio = 1.0 / scale if scale else in_size / out_size
    if mode == "nearest":  # in float32, as PyTorch computes it
        src = np.floor(dst.astype(np.float32) * np.float32(ratio))
        i0 = np.minimum(src.astype(np.int64), in_size - 1)
        return i0, i0, np.zeros(out_size)
    if align_corners:
        src = dst * ((in_size - 1) / (out_size - 1) if out_size > 1 else 0.0)
    else:
        src = np.maximum((dst + 0.5) * ratio - 0.5, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    i1 = np.minimum(i0 + 1, in_size - 1)
    return i0, i1, src - i0


def _axis_weights(w: np.ndarray, ndim: int, axis: int, like: Tensor) -> Tensor:
    return _const(w.reshape((-1,) + (1,) * (ndim - axis - 1)), like)


def _interpolate_composite(
    x: Tensor, size: Ints, mode: str, align_corners: bool, scales: tuple[float | None, ...]
) -> Tensor:
    for i, (o, sc) in enumerate(zip(size, scales)):
        axis = 2 + i
        i0, i1, w1 = interpolation_weights(x._shape[axis], o, mode, align_corners, sc)
        if mode == "nearest" or not w1.any():
            if not (len(i0) == x._shape[axis] and (i0 == np.arange(len(i0))).all()):
                x = _take_const(x, i0, axis)
            continue
        x0 = _take_const(x, i0, axis)
        x1 = _take_const(x, i1, axis)
        x = x0 * _axis_weights(1.0 - w1, x.ndim, axis, x) + x1 * _axis_weights(w1, x.ndim, axis, x)
    return x


def _interpolate_vjp(
    g: Tensor,
    out: Tensor,
    x: Tensor,
    size: Ints,
    mode: str,
    align_corners: bool,
    scales: tuple[float | None, ...],
) -> tuple[Any]:
    for i in reversed(range(len(size))):
        axis = 2 + i
        n = x._shape[axis]
        i0, i1, w1 = interpolation_weights(n, size[i], mode, align_corners, scales[i])
        if mode == "nearest" or not w1.any():
            if not (len(i0) == n and (i0 == np.arange(n)).all()):
                g = _scatter_const(g, i0, axis, n)
            continue
        parts = concat(
            [g * _axis_weights(1.0 - w1, g.ndim, axis, g), g * _axis_weights(w1, g.ndim, axis, g)], axis=axis
        )
        g = _scatter_const(parts, np.concatenate([i0, i1]), axis, n)
    return (g,)


INTERPOLATE = define("interpolate", composite=_interpolate_composite, vjp=_interpolate_vjp)

_MODES = {"nearest": None, "linear": 1, "bilinear": 2, "trilinear": 3}


def interpolate(
    x: Any,
    size: Any = None,
    scale_factor: Any = None,
    mode: str = "nearest",
    align_corners: bool | None = None,
) -> Tensor:
    """Resize the spatial axes of (N, C, *spatial) to ``size`` or by ``scale_factor``:
    'nearest', or separable 'linear' / 'bilinear' / 'trilinear' (PyTorch conventions).

    >>> import ember as em
    >>> em.interpolate(em.tensor([[[0.0, 2.0]]]), size=3, mode="linear", align_corners=True).tolist()
    [[[0.0, 1.0, 2.0]]]
    >>> em.interpolate(em.tensor([[[0.0, 2.0]]]), scale_factor=2).tolist()
    [[[0.0, 0.0, 2.0, 2.0]]]
    """
    op = "interpolate"
    x = _float_input(x, op)
    if mode not in _MODES:
        raise ValueError(f"{op}: mode must be one of {sorted(_MODES)}, got {mode!r}")
    nd = x.ndim - 2
    if not 1 <= nd <= 3:
        raise ShapeError(f"{op}: expected input (N, C, *spatial) with 1 to 3 spatial dims, got {x._shape}")
    want = _MODES[mode]
    if want is not None and want != nd:
        raise ShapeError(f"{op}: mode {mode!r} needs {want} spatial dim(s), got input of shape {x._shape}")
    if mode == "nearest" and align_corners is not None:
        raise ValueError(f"{op}: align_corners applies to the linear modes only, not {mode!r}")
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of size and scale_factor")
    scales: tuple[float | None, ...]
    if size is not None:
        out = _ints(size, nd, "size", op, 1)
        scales = (None,) * nd
    else:
        if isinstance(scale_factor, (int, float)):
            factors = (float(scale_factor),) * nd
        else:
            factors = tuple(float(f) for f in scale_factor)
            if len(factors) != nd:
                raise ShapeError(f"{op}: scale_factor {scale_factor!r} needs {nd} entries, one per spatial dim")
        if any(not f > 0 for f in factors):
            raise ShapeError(f"{op}: scale_factor must be positive, got {scale_factor!r}")
        out = tuple(math.floor(n * f) for n, f in zip(x._shape[2:], factors))
        if any(o < 1 for o in out):
            raise ShapeError(f"{op}: scale_factor {scale_factor!r} gives an empty output {out} for {x._shape}")
        # PyTorch's kernels copy an axis whose size is unchanged (linear, and 2-D nearest) and
        # halve indices where the size doubles (2-D nearest); dropping the scale does the same
        shortcut = (1,) if mode != "nearest" else (1, 2) if nd == 2 else ()
        scales = tuple(
            None if o in tuple(k * n for k in shortcut) else f for n, o, f in zip(x._shape[2:], out, factors)
        )
    if any(n < 1 for n in x._shape[2:]):
        raise ShapeError(f"{op}: the input {x._shape} has an empty spatial axis")
    params = {
        "size": out,
        "mode": "nearest" if mode == "nearest" else "linear",
        "align_corners": bool(align_corners),
        "scales": scales,
    }
    return apply(INTERPOLATE, (x,), params, x._shape[:2] + out, x._dtype)

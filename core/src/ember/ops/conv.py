"""Convolution, transposed convolution and im2col (unfold / fold) over (N, C, *spatial) tensors
with 1 to 3 spatial dims, PyTorch semantics; pooling and interpolation are in ``pooling``.

Each op's composite uses movement primitives (slice, pad, reshape, concat) and matmul, so a
backend with only the primitives runs it; its vjp rule sits next to it, so a backend's native
kernel is used in training too. Inside the ops, padding is always explicit ``(lo, hi)`` pairs
per spatial axis ("same" pads asymmetrically; ceil-mode pooling pads the high side further), so
an op's parameters fully determine its output shape.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import dispatch as _dispatch
from ..amp import _STATE as _AMP
from ..amp import LOW
from ..creation import tensor
from ..dispatch import Op, apply, define, effective_dtype
from ..errors import ArgumentTypeError, DTypeError, ShapeError
from .elementwise import FLOAT, _reject, _tensor_arg
from .linalg import matmul, matrix_transpose
from .movement import concat, expand_dims, pad, reshape, slice_tensor, squeeze
from .reduction import sum as reduce_sum

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = ["conv", "conv_transpose", "unfold", "fold"]

Ints = tuple[int, ...]
Pads = tuple[tuple[int, int], ...]


# -- shape arithmetic and argument checks ------------------------------------------------
def _span(k: int, d: int) -> int:
    return d * (k - 1) + 1


def _blocks(sizes: Ints, kernel: Ints, stride: Ints, padding: Pads, dilation: Ints) -> Ints:
    """Number of kernel placements per spatial axis (``d * (k - 1) + 1`` is :func:`_span`)."""
    return tuple(
        [
            (n + lo + hi - d * (k - 1) - 1) // s + 1
            for n, k, s, (lo, hi), d in zip(sizes, kernel, stride, padding, dilation)
        ]
    )


def _ints(value: Any, nd: int, name: str, op: str, low: int) -> Ints:
    """An int or a sequence of ``nd`` ints, each at least ``low``."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        out = (int(value),) * nd
    else:
        try:
            out = tuple(int(v) for v in value)
        except (TypeError, ValueError):
            raise ArgumentTypeError(f"{op}: {name} must be an int or a tuple of {nd} ints, got {value!r}") from None
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


def _same_dtype(t: Any, like: Tensor, name: str, op: str, policy: Op | None = None) -> Tensor:
    """``t`` as a tensor whose dtype matches ``like``'s once ``policy``'s autocast has run."""
    t = _tensor_arg(t, op, like)
    if effective_dtype(policy, t._dtype) is not effective_dtype(policy, like._dtype):
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


UNFOLD = define(
    "unfold",
    kind="movement",
    native="unfold(x, *, kernel, stride, padding, dilation, value) -> handle  # (N, C*prod(kernel), blocks)",
    composite=_unfold_composite,
    vjp=_unfold_vjp,
)
FOLD = define(
    "fold",
    kind="movement",
    native="fold(cols, *, size, kernel, stride, padding, dilation) -> handle  # inverse of unfold, summed",
    composite=_fold_composite,
    vjp=_fold_vjp,
)


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


def _weight_grad_by_batch(a: Tensor, src: Tensor, shape: Ints, groups: int, unfold: Any) -> Tensor:
    """The weight gradient sum_n a[n] @ unfold(src[n])^T over groups, ``shape`` the weight's, taken over
    slices of the batch so that the unfolded columns of a slice hold no more elements than the larger of
    ``a`` and ``src`` (the whole batch's columns are prod(kernel) times the input: the largest tensor of a
    convolution's backward otherwise)."""
    n = a._shape[0]
    length = math.prod(a._shape[2:])
    per_sample = src._shape[1] * math.prod(shape[2:]) * length  # unfolded elements of one sample
    limit = a.size if a.size > src.size else src.size
    step = min(n, limit // per_sample) if per_sample else n
    step = step if step > 0 else 1
    total: Tensor | None = None
    for start in range(0, n, step):
        stop = min(start + step, n)
        a_i, src_i = (t if step >= n else _batch_slice(t, start, stop) for t in (a, src))
        cols = unfold(src_i)  # (m, C * K, L)
        m = stop - start
        part = _weight_grad(
            reshape(a_i, (m, groups, a._shape[1] // groups, length)),
            reshape(cols, (m, groups, cols._shape[1] // groups, length)),
        )
        del cols
        total = part if total is None else total + part
    return reshape(total, shape)


def _batch_slice(t: Tensor, start: int, stop: int) -> Tensor:
    return slice_tensor(t, (start,) + (0,) * (t.ndim - 1), (stop,) + t._shape[1:], (1,) * t.ndim)


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
    cout = w._shape[0]
    kernel = w._shape[2:]
    blocks = _blocks(x._shape[2:], kernel, stride, padding, dilation)
    length = math.prod(blocks)

    def run(x: Tensor) -> Tensor:
        n = x._shape[0]
        cols = _unfold_op(x, kernel, stride, padding, dilation)  # (N, Cin * K, L)
        if groups == 1:
            y = matmul(reshape(w, (cout, -1)), cols)
        else:
            cols = reshape(cols, (n, groups, cols._shape[1] // groups, length))
            y = matmul(reshape(w, (groups, cout // groups, -1)), cols)
        return reshape(y, (n, cout) + blocks)

    per_sample = x._shape[1] * math.prod(kernel) * length
    y = _by_batch(run, x, per_sample, max(x.size, x._shape[0] * cout * length))
    return _add_bias(y, bias)


def _by_batch(fn: Any, x: Tensor, per_sample: int, limit: int) -> Tensor:
    """``fn(x)`` over slices of the batch whose im2col columns (``per_sample`` elements a sample) hold
    at most ``limit`` elements, concatenated: the columns of the whole batch are prod(kernel) times
    the input, the largest tensor of a convolution otherwise."""
    n = x._shape[0]
    step = min(n, limit // per_sample) if per_sample else n
    if step >= n or n == 0:
        return fn(x)
    step = step if step > 0 else 1
    parts = [fn(_batch_slice(x, s, min(s + step, n))) for s in range(0, n, step)]
    return concat(parts, axis=0)


def _conv_vjp(
    g: Tensor, out: Tensor, x: Tensor, w: Tensor, *bias: Tensor, stride: Any, padding: Pads, dilation: Any, groups: int
) -> tuple[Any, ...]:
    gx = gw = None
    if x._rg:
        gx = _conv_transpose_op(g, w, (), x._shape[2:], stride, padding, dilation, groups)
    if w._rg:
        params = {"kernel": w._shape[2:], "stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
        gw = apply(CONV_WEIGHT_GRAD, (g, x), params, w._shape, w._dtype)
    return (gx, gw) + _bias_grad(g, bias)


def _conv_weight_grad_composite(
    g: Tensor, x: Tensor, *, kernel: Ints, stride: Ints, padding: Pads, dilation: Ints, groups: int
) -> Tensor:
    shape = (g._shape[1], x._shape[1] // groups) + tuple(kernel)
    return _weight_grad_by_batch(g, x, shape, groups, lambda t: _unfold_op(t, kernel, stride, padding, dilation))


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
    cin = x._shape[1]
    kernel = w._shape[2:]
    length = math.prod(x._shape[2:])
    wm = reshape(w, (groups, cin // groups, w._shape[1] * math.prod(kernel)))

    def run(x: Tensor) -> Tensor:
        n = x._shape[0]
        cols = matmul(matrix_transpose(wm), reshape(x, (n, groups, cin // groups, length)))  # (N, G, Cout/G * K, L)
        cols = reshape(cols, (n, groups * cols._shape[2], length))
        return _fold_op(cols, size, kernel, stride, padding, dilation)

    per_sample = groups * w._shape[1] * math.prod(kernel) * length
    y = _by_batch(run, x, per_sample, max(x.size, x._shape[0] * groups * w._shape[1] * math.prod(size)))
    return _add_bias(y, bias)


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
        gw = _weight_grad_by_batch(
            x, g, w._shape, groups, lambda t: _unfold_op(t, w._shape[2:], stride, padding, dilation)
        )
    return (gx, gw) + _bias_grad(g, bias)


CONV = define(
    "conv",
    kind="contraction",
    native="conv(x, w[, bias], *, stride, padding, dilation, groups) -> handle  # 1-3 spatial dims",
    autocast=LOW,
    composite=_conv_composite,
    vjp=_conv_vjp,
)
CONV_WEIGHT_GRAD = define(
    "conv_weight_grad",
    kind="contraction",
    native="conv_weight_grad(g, x, *, kernel, stride, padding, dilation, groups) -> handle  # conv's dL/dw",
    composite=_conv_weight_grad_composite,  # no vjp of its own: a second derivative runs the composite
)
CONV_TRANSPOSE = define(
    "conv_transpose",
    kind="contraction",
    native="conv_transpose(x, w[, bias], *, size, stride, padding, dilation, groups) -> handle",
    autocast=LOW,
    composite=_conv_transpose_composite,
    vjp=_conv_transpose_vjp,
)


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
    policy = CONV_TRANSPOSE if transposed else CONV
    x = _float_input(x, op)
    w = _same_dtype(weight, x, "weight", op, policy)
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
        b = _same_dtype(bias, x, "bias", op, policy)
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
    T = _dispatch._TENSOR
    key: tuple[Any, ...] | None = None
    if type(x) is T and type(weight) is T and (bias is None or type(bias) is T):
        # a model's convs repeat their arguments every step: the checks below ran for this key before
        # (argument types in the key: True is refused where 1 is taken; autocast decides dtype matches)
        key = (
            x._shape, x._dtype, weight._shape, weight._dtype,
            None if bias is None else bias._shape, None if bias is None else bias._dtype,
            type(stride), stride, type(padding), padding, type(dilation), dilation, type(groups), groups,
            _AMP.dtype,
        )  # fmt: skip
        try:
            hit = _CONV_ARGS.get(key)
        except TypeError:  # an unhashable argument (a list): the checks below take it
            hit = key = None
        if hit is not None:
            params, shape, added = hit
            if added:
                x = expand_dims(x, 0)
            y = apply(CONV, (x, weight) if bias is None else (x, weight, bias), dict(params), shape, x._dtype)
            return squeeze(y, 0) if added else y
    x, w, extra, groups, added = _conv_args("conv", x, weight, bias, groups, transposed=False)
    nd = w.ndim - 2
    kernel = w._shape[2:]
    st = _ints(stride, nd, "stride", "conv", 1)
    dil = _ints(dilation, nd, "dilation", "conv", 1)
    pads = _conv_padding(padding, kernel, st, dil, "conv")
    _check_fits("conv", x._shape[2:], kernel, pads, dil)
    if key is not None:
        blocks = _blocks(x._shape[2:], kernel, st, pads, dil)
        if len(_CONV_ARGS) >= _MAX_ARGS:
            _CONV_ARGS.clear()
        params = {"stride": st, "padding": pads, "dilation": dil, "groups": groups}
        _CONV_ARGS[key] = (params, (x._shape[0], w._shape[0]) + blocks, added)
    return _unbatch(_conv_op(x, w, extra, st, pads, dil, groups), added)


#: conv's arguments as given (tensor shapes and dtypes, the autocast dtype) -> its checked parameters,
#: result shape and whether a batch axis was added; bounded (cleared when full)
_CONV_ARGS: dict[tuple[Any, ...], tuple[dict[str, Any], tuple[int, ...], bool]] = {}
_MAX_ARGS = 1024


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

"""Pooling (max, average, adaptive) and interpolation over (N, C, *spatial) tensors with 1 to 3
spatial dims, PyTorch semantics.

Max and average pooling are built on ``unfold`` (max pads with -inf) and differentiate through
``fold``; the adaptive pools and interpolation gather constant indices with ``take``. Each op
has a vjp rule, so a backend's native kernel is used in training too. ``adaptive_windows`` and
``interpolation_weights`` give backends the exact index arithmetic.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .. import dispatch as _dispatch
from ..creation import zeros
from ..dispatch import apply, define
from ..dtypes import int64
from ..errors import InvalidArgumentError, ShapeError
from .conv import (
    _MAX_ARGS,
    Ints,
    Pads,
    _batched,
    _blocks,
    _const,
    _float_input,
    _fold_op,
    _ints,
    _span,
    _spatial_dims,
    _unbatch,
    _unfold_op,
)
from .elementwise import where
from .indexing import SCATTER_ADD, TAKE
from .linalg import matmul
from .movement import broadcast_to, concat, expand_dims, moveaxis, permute_dims, reshape, slice_tensor
from .reduction import argmax, mean
from .reduction import max as reduce_max
from .reduction import sum as reduce_sum

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = [
    "max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "interpolate",
    "adaptive_windows", "interpolation_weights",
]  # fmt: skip


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


def _max_pool_grad_composite(g: Tensor, x: Tensor, kernel: Any, stride: Any, padding: Pads, dilation: Any) -> Tensor:
    win = _windows(x, kernel, stride, padding, dilation, float("-inf"))
    n, c, k, length = win._shape
    gy = reshape(g, (n, c, 1, length))
    parts = [where(hit, gy, 0.0) for hit in _first_max(win, reduce_max(win, axis=2, keepdims=True))]
    gcols = reshape(concat(parts, axis=2) if k > 1 else parts[0], (n, c * k, length))
    return _fold_op(gcols, x._shape[2:], kernel, stride, padding, dilation)


def _max_pool_grad_vjp(
    gg: Tensor, gx: Tensor, g: Tensor, x: Tensor, kernel: Any, stride: Any, padding: Pads, dilation: Any
) -> tuple[Any, ...]:
    # linear in g: the adjoint picks gg at each window's first maximum; zero almost everywhere in x
    win = _windows(x, kernel, stride, padding, dilation, float("-inf"))
    n, c, k, length = win._shape
    ggw = _windows(gg, kernel, stride, padding, dilation, 0.0)
    picked = None
    for i, hit in enumerate(_first_max(win, reduce_max(win, axis=2, keepdims=True))):
        part = where(hit, slice_tensor(ggw, (0, 0, i, 0), (n, c, i + 1, length), (1, 1, 1, 1)), 0.0)
        picked = part if picked is None else picked + part
    return reshape(picked, g._shape), None


MAX_POOL_GRAD = define(
    "max_pool_backward",
    kind="other",
    # the window maxima are found again from x, not read from the forward's output: the output
    # need not live until the backward pass (it dies with its last other consumer)
    native="max_pool_backward(g, x, *, kernel, stride, padding, dilation) -> handle",
    composite=_max_pool_grad_composite,
    vjp=_max_pool_grad_vjp,
)


def _max_pool_vjp(
    g: Tensor, out: Tensor, x: Tensor, kernel: Any, stride: Any, padding: Pads, dilation: Any
) -> tuple[Any]:
    params = {"kernel": kernel, "stride": stride, "padding": padding, "dilation": dilation}
    return (apply(MAX_POOL_GRAD, (g, x), params, x._shape, x._dtype),)


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


MAX_POOL = define(
    "max_pool",
    kind="other",
    native="max_pool(x, *, kernel, stride, padding, dilation) -> handle  # padding: ((lo, hi), ...)",
    composite=_max_pool_composite,
    vjp=_max_pool_vjp,
)
AVG_POOL = define(
    "avg_pool",
    kind="other",
    native="avg_pool(x, *, kernel, stride, padding, divisor) -> handle",
    composite=_avg_pool_composite,
    vjp=_avg_pool_vjp,
)


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
    key: tuple[Any, ...] | None = None
    if type(x) is _dispatch._TENSOR:
        # a model's pools repeat their arguments every step: the checks of _pool_args ran for this key
        # before (argument types in the key: True is refused where 1 is taken)
        key = (
            x._shape, x._dtype, type(kernel_size), kernel_size, type(stride), stride,
            type(padding), padding, type(dilation), dilation, type(ceil_mode), ceil_mode,
        )  # fmt: skip
        try:
            hit = _MAX_POOL_ARGS.get(key)
        except TypeError:  # an unhashable argument (a list): _pool_args takes it
            hit = key = None
        if hit is not None:
            params, shape, added = hit
            if added:
                x = expand_dims(x, 0)
            y = apply(MAX_POOL, (x,), dict(params), shape, x._dtype)
            return _unbatch(y, added)
    a = _pool_args("max_pool", x, kernel_size, stride, padding, dilation, ceil_mode)
    params = {"kernel": a.kernel, "stride": a.stride, "padding": a.pads, "dilation": a.dilation}
    shape = a.x._shape[:2] + a.out
    if key is not None:
        if len(_MAX_POOL_ARGS) >= _MAX_ARGS:
            _MAX_POOL_ARGS.clear()
        _MAX_POOL_ARGS[key] = (dict(params), shape, a.added)
    return _unbatch(apply(MAX_POOL, (a.x,), params, shape, a.x._dtype), a.added)


#: max_pool's arguments as given (with the input's shape and dtype) -> its checked parameters, result
#: shape and whether a batch axis was added; bounded (cleared when full)
_MAX_POOL_ARGS: dict[tuple[Any, ...], tuple[dict[str, Any], tuple[int, ...], bool]] = {}


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


ADAPTIVE_AVG_POOL = define(
    "adaptive_avg_pool",
    kind="other",
    native="adaptive_avg_pool(x, *, size) -> handle",
    composite=_adaptive_avg_composite,
    vjp=_adaptive_avg_vjp,
)
ADAPTIVE_MAX_POOL = define(
    "adaptive_max_pool",
    kind="other",
    native="adaptive_max_pool(x, *, size) -> handle",
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


INTERPOLATE = define(
    "interpolate",
    kind="other",
    native="interpolate(x, *, size, mode, align_corners, scales) -> handle  # mode: nearest | linear",
    composite=_interpolate_composite,
    vjp=_interpolate_vjp,
)

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
        raise InvalidArgumentError(f"{op}: mode must be one of {sorted(_MODES)}, got {mode!r}")
    nd = x.ndim - 2
    if not 1 <= nd <= 3:
        raise ShapeError(f"{op}: expected input (N, C, *spatial) with 1 to 3 spatial dims, got {x._shape}")
    want = _MODES[mode]
    if want is not None and want != nd:
        raise ShapeError(f"{op}: mode {mode!r} needs {want} spatial dim(s), got input of shape {x._shape}")
    if mode == "nearest" and align_corners is not None:
        raise InvalidArgumentError(f"{op}: align_corners applies to the linear modes only, not {mode!r}")
    if (size is None) == (scale_factor is None):
        raise InvalidArgumentError(f"{op}: give exactly one of size and scale_factor")
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

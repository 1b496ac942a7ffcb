"""ONNX handlers: shapes, movement, indexing, creation, control flow."""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as em

from ..tensor import Tensor
from .registry import Context, OnnxNode, handler
from .util import bad, checked_shape, const, dtype_of, host, ints, norm_axis, on, unsupported


# -- constants and shapes ----------------------------------------------------------------------
@handler("Constant")
def _constant(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    a = node.attrs
    if "value" in a:
        arr = np.asarray(a["value"])
    elif "value_float" in a:
        arr = np.asarray(a["value_float"], dtype=np.float32)
    elif "value_floats" in a:
        arr = np.asarray(a["value_floats"], dtype=np.float32)
    elif "value_int" in a:
        arr = np.asarray(a["value_int"], dtype=np.int64)
    elif "value_ints" in a:
        arr = np.asarray(a["value_ints"], dtype=np.int64)
    else:
        raise unsupported(node, f"a Constant holding {sorted(a) or 'nothing'} (strings or sparse tensors)")
    return on(arr, ctx.device)


@handler("Shape")
def _shape(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    dims = list(xs[0].shape)
    n = len(dims)
    start = node.attr("start", 0)
    end = node.attr("end", n)
    start = min(max(start + n if start < 0 else start, 0), n)
    end = min(max(end + n if end < 0 else end, 0), n)
    return on(np.asarray(dims[start:end], dtype=np.int64), ctx.device)


@handler("Size")
def _size(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return on(np.asarray(xs[0].size, dtype=np.int64), ctx.device)


@handler("ConstantOfShape")
def _constant_of_shape(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    shape = checked_shape(ints(xs[0]), node)
    value = node.attr("value")
    arr = np.zeros((1,), np.float32) if value is None else np.asarray(value).reshape(-1)
    return on(np.full(shape, arr[0], dtype=arr.dtype), ctx.device)


@handler("EyeLike")
def _eyelike(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    dt = dtype_of(node.attr("dtype"), node) if node.attr("dtype") is not None else x.dtype
    n, m = x.shape
    return on(np.eye(n, m, k=node.attr("k", 0), dtype=dt.numpy), ctx.device)


# -- reshaping ---------------------------------------------------------------------------------
def reshape_target(shape: list[int], like: tuple[int, ...], allowzero: bool, node: OnnxNode) -> tuple[int, ...]:
    """ONNX Reshape's target: 0 copies the input's dim (unless ``allowzero``), -1 is inferred."""
    out = []
    for i, d in enumerate(shape):
        if d == 0 and not allowzero:
            if i >= len(like):
                raise bad(node, f"shape {shape} copies dim {i}, which the input of shape {like} lacks")
            out.append(like[i])
        else:
            out.append(d)
    if out.count(-1) > 1:
        raise bad(node, f"shape {shape} has more than one -1")
    return tuple(out)


@handler("Reshape", since=1)
def _reshape_attr(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return x.reshape(reshape_target(node.attr("shape", []), x.shape, False, node))


@handler("Reshape", since=5)
def _reshape(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return x.reshape(reshape_target(ints(xs[1]), x.shape, bool(node.attr("allowzero", 0)), node))


@handler("Flatten")
def _flatten(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    axis = node.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        raise bad(node, f"axis {node.attr('axis')} is out of range for rank {x.ndim}")
    a = int(np.prod(x.shape[:axis], dtype=np.int64))
    b = int(np.prod(x.shape[axis:], dtype=np.int64))
    return x.reshape((a, b))


@handler("Transpose")
def _transpose(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    perm = node.attr("perm") or list(range(x.ndim))[::-1]
    return em.permute_dims(x, perm)


def _axes_of(ctx: Context, node: OnnxNode, xs: list[Any], since: int) -> list[int] | None:
    if ctx.opset >= since:
        return ints(xs[1]) if len(xs) > 1 else None
    return node.attr("axes")


@handler("Squeeze")
def _squeeze(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    axes = _axes_of(ctx, node, xs, 13)
    if axes is None:
        return x.reshape(tuple(d for d in x.shape if d != 1))
    ax = {norm_axis(a, x.ndim, node) for a in axes}
    return x.reshape(tuple(d for i, d in enumerate(x.shape) if i not in ax))


@handler("Unsqueeze")
def _unsqueeze(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    axes = _axes_of(ctx, node, xs, 13) or []
    n = x.ndim + len(axes)
    ax = sorted(norm_axis(a, n, node) for a in axes)
    shape = list(x.shape)
    for a in ax:
        shape.insert(a, 1)
    return x.reshape(tuple(shape))


@handler("Concat")
def _concat(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    ts = [x for x in xs if x is not None]
    axis = norm_axis(node.attr("axis", 0), ts[0].ndim, node)
    return em.concat(ts, axis=axis)


@handler("Split")
def _split(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    x = xs[0]
    axis = norm_axis(node.attr("axis", 0), x.ndim, node)
    n = x.shape[axis]
    if ctx.opset >= 13:
        sizes = ints(xs[1]) if len(xs) > 1 else None
    else:
        sizes = node.attr("split")
    if not sizes:
        count = node.attr("num_outputs") or len(node.outputs)
        step = -(-n // count)
        sizes = [min(step, n - i * step) for i in range(count)]
    if sum(sizes) != n:
        raise bad(node, f"split sizes {sizes} do not add up to the axis length {n}")
    out, start = [], 0
    for s in sizes:
        out.append(_take_range(x, axis, start, start + s, 1))
        start += s
    return out


def _take_range(x: Tensor, axis: int, start: int, stop: int, step: int) -> Tensor:
    key = [slice(None)] * x.ndim
    key[axis] = slice(start, stop, step)
    return x[tuple(key)]


@handler("Slice", since=1)
def _slice_attr(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return slice_tensor(xs[0], node.attr("starts"), node.attr("ends"), node.attr("axes"), None, node)


@handler("Slice", since=10)
def _slice(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    extra = [ints(x) if x is not None else None for x in xs[1:]] + [None] * 4
    return slice_tensor(xs[0], extra[0], extra[1], extra[2], extra[3], node)


def slice_tensor(x: Tensor, starts: Any, ends: Any, axes: Any, steps: Any, node: OnnxNode) -> Tensor:
    """ONNX Slice: per-axis start/end/step, clamped as ONNX says, negative steps included."""
    if starts is None or ends is None or len(starts) != len(ends):
        raise bad(node, "starts and ends must be given with one entry per sliced axis")
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    key: list[Any] = [slice(None)] * x.ndim
    flips = []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = norm_axis(a, x.ndim, node)
        if st == 0:
            raise bad(node, "a slice step is 0")
        n = x.shape[a]
        first, last, step = slice(s, e, st).indices(n)
        idx = range(first, last, step)
        if st > 0:
            key[a] = slice(first, max(first, last), step)
        else:
            if len(idx) == 0:
                key[a] = slice(0, 0, 1)
            else:
                # reversed slice: flip the axis, then take a forward slice of it
                lo = n - 1 - idx[0]
                key[a] = slice(lo, lo + (len(idx) - 1) * (-step) + 1, -step)
                flips.append(a)
    if flips:
        x = em.flip(x, axis=tuple(flips))
    return x[tuple(key)]


@handler("Expand")
def _expand(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    shape = ints(xs[1])
    target = checked_shape(np.broadcast_shapes(tuple(x.shape), tuple(checked_shape(shape, node, "target"))), node)
    return em.broadcast_to(x, target)


@handler("Tile")
def _tile(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    reps = ints(xs[1])
    checked_shape([d * r for d, r in zip(xs[0].shape, reps)] + reps[xs[0].ndim :], node)
    return em.tile(xs[0], reps)


def _pad_axis_index(n: int, lo: int, hi: int, mode: str) -> np.ndarray:
    pos = np.arange(-lo, n + hi)
    if mode == "edge":
        return np.clip(pos, 0, n - 1)
    if mode == "wrap":
        return pos % n
    # reflect (without repeating the edge)
    if n == 1:
        return np.zeros_like(pos)
    period = 2 * (n - 1)
    p = np.abs(pos) % period
    return np.where(p >= n, period - p, p)


def pad_tensor(x: Tensor, pads: list[int], value: Any, mode: str, axes: list[int] | None, node: OnnxNode) -> Tensor:
    """ONNX Pad: ``pads`` is [begin..., end...] over ``axes``; negative pads crop."""
    nd = x.ndim
    axes = [norm_axis(a, nd, node) for a in axes] if axes is not None else list(range(nd))
    k = len(axes)
    if len(pads) != 2 * k:
        raise bad(node, f"pads has {len(pads)} entries; it needs 2 per padded axis ({2 * k})")
    lo = [0] * nd
    hi = [0] * nd
    for i, a in enumerate(axes):
        lo[a], hi[a] = pads[i], pads[i + k]
    # crop first (negative pads)
    key = [slice(max(-lo[a], 0), x.shape[a] - max(-hi[a], 0)) for a in range(nd)]
    x = x[tuple(key)]
    lo = [max(v, 0) for v in lo]
    hi = [max(v, 0) for v in hi]
    checked_shape([d + a + b for d, a, b in zip(x.shape, lo, hi)], node)
    if mode == "constant":
        return em.pad(x, tuple(zip(lo, hi)), value=value)
    if mode not in ("reflect", "edge", "wrap"):
        raise bad(node, f"mode must be constant, reflect, edge or wrap, got {mode!r}")
    for a in range(nd):
        if lo[a] or hi[a]:
            idx = _pad_axis_index(x.shape[a], lo[a], hi[a], mode)
            x = em.take(x, on(idx.astype(np.int64), x.device), axis=a)
    return x


@handler("Pad", since=1)
def _pad_attr(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    pads = node.attr("pads", node.attr("paddings"))
    return pad_tensor(xs[0], pads, node.attr("value", 0.0), node.attr("mode", "constant"), None, node)


@handler("Pad", since=11)
def _pad(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    pads = ints(xs[1])
    value: Any = 0
    if len(xs) > 2 and xs[2] is not None:
        value = host(xs[2]).reshape(-1)[0].item()
    axes = ints(xs[3]) if len(xs) > 3 and xs[3] is not None else None
    return pad_tensor(x, pads, value, node.attr("mode", "constant"), axes, node)


# -- indexing ----------------------------------------------------------------------------------
def _wrap(index: Tensor, n: int) -> Tensor:
    index = index.astype("int64")
    return em.where(index < 0, index + n, index)


@handler("Gather")
def _gather(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, index = xs
    axis = norm_axis(node.attr("axis", 0), x.ndim, node)
    idx = _wrap(index, x.shape[axis])
    flat = em.take(x, idx.reshape((-1,)), axis=axis)
    return flat.reshape(x.shape[:axis] + index.shape + x.shape[axis + 1 :])


@handler("GatherElements")
def _gather_elements(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, index = xs
    axis = norm_axis(node.attr("axis", 0), x.ndim, node)
    return em.take_along_axis(x, _wrap(index, x.shape[axis]), axis=axis)


@handler("GatherND")
def _gather_nd(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, index = xs
    b = node.attr("batch_dims", 0)
    k = index.shape[-1]
    batch = x.shape[:b]
    nb = int(np.prod(batch, dtype=np.int64))
    inner = x.shape[b : b + k]
    rest = x.shape[b + k :]
    idx = index.astype("int64")
    strides = np.cumprod((list(inner[1:]) + [1])[::-1])[::-1].astype(np.int64)
    dims = const(np.asarray(inner, dtype=np.int64), idx)
    idx = em.where(idx < 0, idx + dims, idx)
    flat = em.sum(idx * const(strides, idx), axis=-1)  # (*batch, *lead)
    lead = index.shape[b:-1]
    nl = int(np.prod(lead, dtype=np.int64))
    ninner = int(np.prod(inner, dtype=np.int64))
    offsets = const((np.arange(nb, dtype=np.int64) * ninner).reshape(nb, 1), idx)
    flat = (flat.reshape((nb, nl)) + offsets).reshape((-1,))
    table = x.reshape((nb * ninner,) + tuple(rest))
    return em.take(table, flat, axis=0).reshape(tuple(batch) + tuple(lead) + tuple(rest))


def _grids(shape: tuple[int, ...], axis: int, index: Tensor) -> tuple[Tensor, ...]:
    """Index tuples that address ``index``'s positions, with ``index`` on ``axis``."""
    out = []
    for a in range(len(shape)):
        if a == axis:
            out.append(index)
        else:
            g = np.arange(shape[a], dtype=np.int64).reshape(tuple(-1 if i == a else 1 for i in range(len(shape))))
            out.append(on(np.array(np.broadcast_to(g, shape)), index.device))
    return tuple(out)


def _scatter(x: Tensor, indices: tuple[Tensor, ...], updates: Tensor, reduction: str, node: OnnxNode) -> Tensor:
    if reduction == "none":
        return em.index_put(x, indices, updates)
    if reduction == "add":
        return em.index_put(x, indices, updates, accumulate=True)
    ufunc = {"mul": np.multiply, "max": np.maximum, "min": np.minimum}.get(reduction)
    if ufunc is None:
        raise bad(node, f"reduction must be none, add, mul, max or min, got {reduction!r}")
    # ember has no multiplying or max/min scatter: these few reductions run on the host
    out = np.array(host(x), copy=True)
    ufunc.at(out, tuple(host(i) for i in indices), host(updates))
    return on(out, x.device)


def _scatter_elements(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, index, updates = xs
    axis = norm_axis(node.attr("axis", 0), x.ndim, node)
    idx = _wrap(index, x.shape[axis])
    return _scatter(x, _grids(tuple(index.shape), axis, idx), updates, node.attr("reduction", "none"), node)


handler("ScatterElements")(_scatter_elements)
handler("Scatter")(_scatter_elements)


@handler("ScatterND")
def _scatter_nd(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, index, updates = xs
    k = index.shape[-1]
    idx = index.astype("int64")
    parts = tuple(_wrap(idx[..., i], x.shape[i]) for i in range(k))
    return _scatter(x, parts, updates, node.attr("reduction", "none"), node)


@handler("OneHot")
def _one_hot(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    indices, depth_t, values = xs
    depth = int(host(depth_t).reshape(-1)[0])
    checked_shape(tuple(indices.shape) + (depth,), node)
    idx = indices.astype("int64")
    idx = em.where(idx < 0, idx + depth, idx)
    nd = idx.ndim + 1
    axis = norm_axis(node.attr("axis", -1), nd, node)
    pos = em.arange(depth, device=idx.device).reshape(tuple(-1 if i == axis else 1 for i in range(nd)))
    hot = em.expand_dims(idx, axis=axis) == pos
    off, on_ = values[0], values[1]
    return em.where(hot, on_, off)


@handler("Trilu")
def _trilu(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    k = ints(xs[1])[0] if len(xs) > 1 and xs[1] is not None else 0
    return em.triu(x, k) if node.attr("upper", 1) else em.tril(x, k)


@handler("NonZero")
def _nonzero(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    arr = np.asarray(np.nonzero(host(x)), dtype=np.int64).reshape(x.ndim, -1)
    return on(arr, ctx.device)


@handler("TopK")
def _topk(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    x = xs[0]
    k = ints(xs[1])[0] if ctx.opset >= 10 else node.attr("k")
    axis = norm_axis(node.attr("axis", -1), x.ndim, node)
    largest = bool(node.attr("largest", 1))
    order = em.argsort(x, axis=axis, descending=largest, stable=True)
    key = [slice(None)] * x.ndim
    key[axis] = slice(0, k)
    idx = order[tuple(key)]
    return [em.take_along_axis(x, idx, axis=axis), idx]


@handler("Compress")
def _compress(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, cond = xs
    keep = np.nonzero(host(cond).reshape(-1))[0].astype(np.int64)
    axis = node.attr("axis")
    if axis is None:
        x = x.reshape((-1,))
        axis = 0
    axis = norm_axis(axis, x.ndim, node)
    keep = keep[keep < x.shape[axis]]
    return em.take(x, on(keep, ctx.device), axis=axis)


@handler("DepthToSpace")
def _depth_to_space(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    b = node.attr("blocksize")
    n, c, h, w = x.shape
    if node.attr("mode", "DCR") == "DCR":
        y = x.reshape((n, b, b, c // (b * b), h, w)).permute((0, 3, 4, 1, 5, 2))
    else:
        y = x.reshape((n, c // (b * b), b, b, h, w)).permute((0, 1, 4, 2, 5, 3))
    return y.reshape((n, c // (b * b), h * b, w * b))


@handler("SpaceToDepth")
def _space_to_depth(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    b = node.attr("blocksize")
    n, c, h, w = x.shape
    if node.attr("mode", "DCR") == "CRD":
        y = x.reshape((n, c, h // b, b, w // b, b)).permute((0, 1, 3, 5, 2, 4))
    else:
        y = x.reshape((n, c, h // b, b, w // b, b)).permute((0, 3, 5, 1, 2, 4))
    return y.reshape((n, c * b * b, h // b, w // b))


@handler("ReverseSequence")
def _reverse_sequence(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, lens_t = xs
    bax, tax = node.attr("batch_axis", 1), node.attr("time_axis", 0)
    lens = ints(lens_t)
    t = x.shape[tax]
    index = np.zeros((x.shape[bax], t), dtype=np.int64)
    for i, n in enumerate(lens):
        index[i] = np.concatenate([np.arange(n)[::-1], np.arange(n, t)])
    shape = [1] * x.ndim
    shape[bax], shape[tax] = x.shape[bax], t
    idx = index if bax < tax else index.T
    full = np.broadcast_to(idx.reshape(shape), x.shape)
    return em.take_along_axis(x, on(np.array(full), ctx.device), axis=tax)


# -- control flow ------------------------------------------------------------------------------
@handler("If")
def _if(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    cond = bool(host(xs[0]).reshape(-1)[0])
    branch = node.graphs["then_branch" if cond else "else_branch"]
    return ctx.run_graph(branch, [], ctx.env)


@handler("Dropout")
def _dropout(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    x = xs[0]
    training = False
    if len(xs) > 2 and xs[2] is not None:
        training = bool(host(xs[2]).reshape(-1)[0])
    ratio = 0.5
    if len(xs) > 1 and xs[1] is not None:
        ratio = float(host(xs[1]).reshape(-1)[0])
    elif node.attr("ratio") is not None:
        ratio = node.attr("ratio")
    if training and ratio > 0:
        raise unsupported(node, "Dropout in training mode (its random mask cannot match another runtime's)")
    mask = em.ones(x.shape, dtype="bool", device=x.device)
    return [x, mask]

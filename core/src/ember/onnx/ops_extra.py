"""ONNX handlers: integer and quantized products, Col2Im, CenterCropPad, Unique, BitCast,
NonMaxSuppression, the preview training ops, sequences, Loop, Scan, SequenceMap, optionals and
a few recent ops (SwiGLU, TensorScatter, DynamicQuantizeLinear, CausalConvWithState, MaxUnpool).

Ops whose output shape depends on the data (Unique, NonMaxSuppression) compute their indices
on the host and return tensors on the model's device, as NonZero does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

import ember as em

from ..tensor import Tensor
from .ops_nn import _conv
from .ops_tensor import pad_tensor
from .registry import Context, OnnxNode, handler
from .util import bad, dtype_of, host, ints, norm_axis, on, unsupported


# -- integer and quantized products --------------------------------------------------------------
def _minus_zero_point(x: Tensor, zp: Tensor | None, axis_shape: tuple[int, ...] | None = None) -> Tensor:
    xi = x.astype("int32")
    if zp is None:
        return xi
    z = zp.astype("int32")
    if axis_shape is not None and z.size > 1:
        z = z.reshape(axis_shape)
    return xi - z


@handler("MatMulInteger")
def _matmul_integer(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    xs = xs + [None] * (4 - len(xs))
    a, b, az, bz = xs
    a32 = _minus_zero_point(a, az, (-1, 1) if az is not None and az.size > 1 else None)
    b32 = _minus_zero_point(b, bz)
    return em.matmul(a32, b32)


@handler("ConvInteger")
def _conv_integer(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    # the float convolution (ops_nn._conv) computes the exact integer sums here

    xs = xs + [None] * (4 - len(xs))
    x, w, xz, wz = xs
    xf = _minus_zero_point(x, xz).astype("float64")
    wf = _minus_zero_point(w, wz, (-1,) + (1,) * (w.ndim - 1) if wz is not None and wz.size > 1 else None)
    y = _conv(ctx, node, [xf, wf.astype("float64")])
    return em.round(y).astype("int32")


def _requant(y: Tensor, scale: Tensor, zp: Tensor, axis_shape: tuple[int, ...] | None = None) -> Tensor:
    s = scale.astype("float32")
    z = zp.astype("float32")
    if axis_shape is not None:
        s = s.reshape(axis_shape) if s.size > 1 else s
        z = z.reshape(axis_shape) if z.size > 1 else z
    q = em.round(y / s) + z
    info = np.iinfo(zp.dtype.numpy)
    return em.clip(q, float(info.min), float(info.max)).astype(zp.dtype)


def _dequant(x: Tensor, scale: Tensor, zp: Tensor, axis_shape: tuple[int, ...] | None = None) -> Tensor:
    s = scale.astype("float32")
    z = zp.astype("float32")
    if axis_shape is not None:
        s = s.reshape(axis_shape) if s.size > 1 else s
        z = z.reshape(axis_shape) if z.size > 1 else z
    return (x.astype("float32") - z) * s


@handler("QLinearMatMul")
def _qlinear_matmul(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    a, a_s, a_z, b, b_s, b_z, y_s, y_z = xs
    af = _dequant(a, a_s, a_z, (-1, 1) if a_s.size > 1 else None)
    bf = _dequant(b, b_s, b_z, (1, -1) if b_s.size > 1 else None)
    if a.dtype.name != "uint8" and a.dtype.name != "int8":
        raise unsupported(node, f"QLinearMatMul on {a.dtype}")
    return _requant(em.matmul(af.astype("float64"), bf.astype("float64")).astype("float32"), y_s, y_z)


@handler("QLinearConv")
def _qlinear_conv(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:

    x, x_s, x_z, w, w_s, w_z, y_s, y_z = xs[:8]
    bias = xs[8] if len(xs) > 8 else None
    xf = (x.astype("float64") - x_z.astype("float64")) * x_s.astype("float64")
    wshape = (-1,) + (1,) * (w.ndim - 1)
    wz = w_z.astype("float64").reshape(wshape) if w_z.size > 1 else w_z.astype("float64")
    ws = w_s.astype("float64").reshape(wshape) if w_s.size > 1 else w_s.astype("float64")
    wf = (w.astype("float64") - wz) * ws
    bf = None
    if bias is not None:
        bf = bias.astype("float64") * (x_s.astype("float64") * w_s.astype("float64"))
    y = _conv(ctx, node, [xf, wf] + ([bf] if bf is not None else []))
    return _requant(y.astype("float32"), y_s, y_z)


# -- Col2Im, CenterCropPad -------------------------------------------------------------------------
@handler("Col2Im")
def _col2im(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, image, block = xs
    image, block = ints(image), ints(block)
    nd = len(block)
    if nd != 2:
        raise unsupported(node, f"Col2Im over {nd} spatial dims (ember folds 2)")
    pads = node.attr("pads") or [0] * (2 * nd)
    if pads[:nd] != pads[nd:]:
        raise unsupported(node, "Col2Im with asymmetric pads")
    return em.fold(
        x,
        tuple(image),
        tuple(block),
        stride=tuple(node.attr("strides") or [1] * nd),
        padding=tuple(pads[:nd]),
        dilation=tuple(node.attr("dilations") or [1] * nd),
    )


@handler("CenterCropPad")
def _center_crop_pad(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, shape_t = xs
    target = ints(shape_t)
    axes = node.attr("axes") or list(range(x.ndim))
    axes = [norm_axis(a, x.ndim, node) for a in axes]
    lo = [0] * x.ndim
    hi = [0] * x.ndim
    for a, t in zip(axes, target):
        diff = t - x.shape[a]
        if diff >= 0:  # pad: the extra element goes to the end
            lo[a], hi[a] = diff // 2, diff - diff // 2
        else:  # crop: the extra element is cut from the end
            cut = -diff
            lo[a], hi[a] = -(cut // 2), -(cut - cut // 2)
    return pad_tensor(x, lo + hi, 0, "constant", None, node)


# -- host-computed shapes --------------------------------------------------------------------------
@handler("Unique")
def _unique(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    x = host(xs[0])
    axis = node.attr("axis")
    sort = bool(node.attr("sorted", 1))
    if axis is not None:
        axis = norm_axis(axis, x.ndim, node)
    values, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True, return_counts=True, axis=axis)
    if not sort:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts = first[order], counts[order]
        inverse = rank[inverse.reshape(-1)]
    dev = ctx.device
    i64 = np.int64
    return [
        on(values, dev),
        on(first.astype(i64), dev),
        on(inverse.reshape(-1).astype(i64), dev),
        on(counts.astype(i64), dev),
    ]


@handler("BitCast")
def _bitcast(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = host(xs[0])
    to = dtype_of(node.attr("to"), node).numpy
    src = x.dtype
    if to.itemsize == src.itemsize:
        return on(np.array(x, copy=True).view(to), ctx.device)
    raise unsupported(node, f"BitCast between sizes ({src} -> {to})")


@handler("NonMaxSuppression")
def _nms(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    xs = xs + [None] * (5 - len(xs))
    boxes, scores = host(xs[0]).astype(np.float64), host(xs[1]).astype(np.float64)
    max_out = int(host(xs[2]).reshape(-1)[0]) if xs[2] is not None and xs[2].size else 0
    iou_t = float(host(xs[3]).reshape(-1)[0]) if xs[3] is not None and xs[3].size else 0.0
    score_t = float(host(xs[4]).reshape(-1)[0]) if xs[4] is not None and xs[4].size else None
    center = bool(node.attr("center_point_box", 0))
    if center:
        cx, cy, w, h = boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3]
        boxes = np.stack([cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2], axis=-1)
    y1 = np.minimum(boxes[..., 0], boxes[..., 2])
    y2 = np.maximum(boxes[..., 0], boxes[..., 2])
    x1 = np.minimum(boxes[..., 1], boxes[..., 3])
    x2 = np.maximum(boxes[..., 1], boxes[..., 3])
    picked = []
    for b in range(scores.shape[0]):
        area = (y2[b] - y1[b]) * (x2[b] - x1[b])
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = [i for i in np.argsort(-s, kind="stable") if score_t is None or s[i] > score_t]
            keep: list[int] = []
            for i in order:
                if len(keep) >= max_out:
                    break
                ok = True
                for j in keep:
                    ih = max(0.0, min(y2[b, i], y2[b, j]) - max(y1[b, i], y1[b, j]))
                    iw = max(0.0, min(x2[b, i], x2[b, j]) - max(x1[b, i], x1[b, j]))
                    inter = ih * iw
                    union = area[i] + area[j] - inter
                    if union > 0 and inter / union > iou_t:
                        ok = False
                        break
                if ok:
                    keep.append(i)
            picked += [(b, c, i) for i in keep]
    return on(np.asarray(picked, dtype=np.int64).reshape(-1, 3), ctx.device)


# -- preview training ops ------------------------------------------------------------------------
_TRAINING = "ai.onnx.preview.training"


@handler("Momentum", domain=_TRAINING)
def _momentum(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    r, t = xs[0], xs[1]
    rest = xs[2:]
    n = len(rest) // 3
    alpha, beta = node.attr("alpha"), node.attr("beta")
    decay, nesterov = node.attr("norm_coefficient"), node.attr("mode", "standard") == "nesterov"
    first = int(host(t).reshape(-1)[0]) == 0
    news, vs = [], []
    for x, g, v in zip(rest[:n], rest[n : 2 * n], rest[2 * n :]):
        g = g + x * decay
        b = 1.0 if first else beta
        v2 = v * alpha + g * b
        x2 = x - (g + v2 * alpha) * r if nesterov else x - v2 * r
        news.append(x2)
        vs.append(v2)
    return news + vs


@handler("Adagrad", domain=_TRAINING)
def _adagrad(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    r, t = xs[0], xs[1]
    rest = xs[2:]
    n = len(rest) // 3
    decay_f, eps, decay = node.attr("decay_factor", 0.0), node.attr("epsilon", 0.0), node.attr("norm_coefficient", 0.0)
    step = float(host(t).reshape(-1)[0])
    lr = r / (1.0 + step * decay_f)
    news, hs = [], []
    for x, g, h in zip(rest[:n], rest[n : 2 * n], rest[2 * n :]):
        g = g + x * decay
        h2 = h + g * g
        news.append(x - lr * g / (em.sqrt(h2) + eps))
        hs.append(h2)
    return news + hs


@handler("Adam", domain=_TRAINING)
def _adam(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    r, t = xs[0], xs[1]
    rest = xs[2:]
    n = len(rest) // 4
    alpha, beta = node.attr("alpha", 0.9), node.attr("beta", 0.999)
    eps, decay = node.attr("epsilon", 0.0), node.attr("norm_coefficient", 0.0)
    post = node.attr("norm_coefficient_post", 0.0)
    step = float(host(t).reshape(-1)[0])
    news, vs, hs = [], [], []
    for x, g, v, h in zip(rest[:n], rest[n : 2 * n], rest[2 * n : 3 * n], rest[3 * n :]):
        g = g + x * decay
        v2 = v * alpha + g * (1 - alpha)
        h2 = h * beta + g * g * (1 - beta)
        if step > 0:
            lr = r * (math.sqrt(1 - beta**step) / (1 - alpha**step))
        else:
            lr = r
        x2 = x - lr * v2 / (em.sqrt(h2) + eps)
        news.append(x2 * (1 - post) if post else x2)
        vs.append(v2)
        hs.append(h2)
    return news + vs + hs


# -- sequences, Loop and Scan ----------------------------------------------------------------------
@handler("SequenceConstruct")
def _seq_construct(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    return [list(xs)]


@handler("SequenceEmpty")
def _seq_empty(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    return [[]]


def _position(seq: list[Any], t: Tensor | None, default: int, node: OnnxNode) -> int:
    if t is None:
        return default
    i = int(host(t).reshape(-1)[0])
    if not -len(seq) - (default == len(seq)) <= i <= len(seq):
        raise bad(node, f"position {i} is out of range for a sequence of {len(seq)}")
    return i + len(seq) if i < 0 else i


@handler("SequenceAt")
def _seq_at(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    seq = xs[0]
    return seq[_position(seq, xs[1], 0, node)]


@handler("SequenceInsert")
def _seq_insert(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    seq = list(xs[0])
    pos = _position(seq, xs[2] if len(xs) > 2 else None, len(seq), node)
    seq.insert(pos, xs[1])
    return [seq]


@handler("SequenceErase")
def _seq_erase(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    seq = list(xs[0])
    pos = _position(seq, xs[1] if len(xs) > 1 else None, len(seq) - 1, node)
    del seq[pos]
    return [seq]


@handler("SequenceLength")
def _seq_length(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return on(np.asarray(len(xs[0]), dtype=np.int64), ctx.device)


@handler("ConcatFromSequence")
def _concat_from_sequence(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    seq = xs[0]
    axis = node.attr("axis")
    if node.attr("new_axis", 0):
        return em.stack(seq, axis=norm_axis(axis, seq[0].ndim + 1, node))
    return em.concat(seq, axis=norm_axis(axis, seq[0].ndim, node))


@handler("SplitToSequence")
def _split_to_sequence(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    x = xs[0]
    axis = norm_axis(node.attr("axis", 0), x.ndim, node)
    n = x.shape[axis]
    split = xs[1] if len(xs) > 1 else None
    if split is None:
        parts = [x[(slice(None),) * axis + (slice(i, i + 1),)] for i in range(n)]
        if not node.attr("keepdims", 1):
            parts = [em.squeeze(p, axis=axis) for p in parts]
        return [parts]
    sizes = ints(split)
    if split.ndim == 0:
        step = sizes[0]
        sizes = [min(step, n - i) for i in range(0, n, step)]
    out, start = [], 0
    for s in sizes:
        out.append(x[(slice(None),) * axis + (slice(start, start + s),)])
        start += s
    return [out]


@handler("Loop")
def _loop(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    body = node.graphs["body"]
    trip = int(host(xs[0]).reshape(-1)[0]) if xs[0] is not None else None
    cond = bool(host(xs[1]).reshape(-1)[0]) if len(xs) > 1 and xs[1] is not None else True
    state = list(xs[2:])
    n_state = len(state)
    scans: list[list[Tensor]] = []
    i = 0
    limit = trip if trip is not None else 10**7
    while cond and i < limit:
        it = on(np.asarray(i, dtype=np.int64), ctx.device)
        c = on(np.asarray(cond), ctx.device)
        outs = ctx.run_graph(body, [it, c] + state, ctx.env)
        cond = bool(host(outs[0]).reshape(-1)[0])
        state = outs[1 : 1 + n_state]
        extra = outs[1 + n_state :]
        if not scans:
            scans = [[] for _ in extra]
        for acc, v in zip(scans, extra):
            acc.append(v)
        i += 1
    stacked = [em.stack(acc, axis=0) if acc else acc for acc in scans]
    return state + stacked


@handler("Scan", since=9)
def _scan(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    body = node.graphs["body"]
    n_scan = node.attr("num_scan_inputs")
    state = list(xs[: len(xs) - n_scan])
    seqs = xs[len(xs) - n_scan :]
    in_axes = node.attr("scan_input_axes") or [0] * n_scan
    in_dirs = node.attr("scan_input_directions") or [0] * n_scan
    seqs = [em.moveaxis(s, norm_axis(a, s.ndim, node), 0) for s, a in zip(seqs, in_axes)]
    steps = seqs[0].shape[0]
    n_out = len(body.outputs) - len(state)
    out_axes = node.attr("scan_output_axes") or [0] * n_out
    out_dirs = node.attr("scan_output_directions") or [0] * n_out
    acc: list[list[Tensor]] = [[] for _ in range(n_out)]
    for t in range(steps):
        items = [s[steps - 1 - t] if d else s[t] for s, d in zip(seqs, in_dirs)]
        outs = ctx.run_graph(body, state + items, ctx.env)
        state = outs[: len(state)]
        for a, v in zip(acc, outs[len(state) :]):
            a.append(v)
    result = list(state)
    for a, axis, d in zip(acc, out_axes, out_dirs):
        if d:
            a = a[::-1]
        y = em.stack(a, axis=0)
        result.append(em.moveaxis(y, 0, norm_axis(axis, y.ndim, node)))
    return result


# -- small recent ops ----------------------------------------------------------------------------
@handler("SwiGLU")
def _swiglu(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    a, b = xs[0], xs[1]
    return a * em.sigmoid(a * node.attr("alpha", 1.0)) * b


@handler("TensorScatter")
def _tensor_scatter(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    cache, update = xs[0], xs[1]
    starts = ints(xs[2]) if len(xs) > 2 and xs[2] is not None else [0] * cache.shape[0]
    axis = norm_axis(node.attr("axis", -2), cache.ndim, node)
    if axis == 0:
        raise bad(node, "axis may not be the batch axis 0")
    mode = node.attr("mode", "linear")
    total, n = cache.shape[axis], update.shape[axis]
    # where each update row goes along `axis`, per batch entry
    pos = np.asarray([[(s + k) % total if mode == "circular" else s + k for k in range(n)] for s in starts])
    if (pos >= total).any() or (pos < 0).any():
        raise bad(node, f"write_indices {starts} put updates past the cache length {total}")
    shape = [1] * cache.ndim
    shape[0], shape[axis] = cache.shape[0], n
    index = np.broadcast_to(pos.reshape(shape), update.shape).astype(np.int64)
    grids = []
    for a in range(cache.ndim):
        if a == axis:
            grids.append(on(np.array(index), ctx.device))
        else:
            g = np.arange(update.shape[a]).reshape([-1 if i == a else 1 for i in range(cache.ndim)])
            grids.append(on(np.array(np.broadcast_to(g, update.shape), dtype=np.int64), ctx.device))
    return em.index_put(cache, tuple(grids), update)


@handler("DynamicQuantizeLinear")
def _dynamic_quantize(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    x = xs[0]
    hi = em.maximum(em.max(x), 0.0)
    lo = em.minimum(em.min(x), 0.0)
    span = hi - lo
    scale = em.where(span == 0, em.ones_like(span), span) / 255.0
    zp = em.round(em.clip(0.0 - lo / scale, 0.0, 255.0))
    y = em.clip(em.round(x / scale) + zp, 0.0, 255.0)
    return [y.astype("uint8"), scale.astype(x.dtype), zp.astype("uint8")]


@handler("CausalConvWithState")
def _causal_conv_with_state(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Tensor]:
    xs = xs + [None] * (4 - len(xs))
    x, w, bias, past = xs[:4]
    act = node.attr("activation", "none")
    if act not in ("none", "silu", "swish"):
        raise bad(node, f"activation must be none, silu or swish, got {act!r}")
    n, c, _ = x.shape
    k = w.shape[2]
    if past is None:
        past = em.zeros((n, c, k - 1), dtype=x.dtype, device=x.device)
    padded = em.concat([past, x], axis=2)
    y = em.conv(padded, w, bias, groups=c)
    if act != "none":
        y = (y.astype("float32") * em.sigmoid(y.astype("float32"))).astype(x.dtype)
    total = padded.shape[2]
    return [y, padded[:, :, total - (k - 1) :]]


@handler("MaxUnpool")
def _max_unpool(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, index = xs[0], xs[1]
    kernel = node.attr("kernel_shape")
    nd = len(kernel)
    strides = node.attr("strides") or [1] * nd
    pads = node.attr("pads") or [0] * (2 * nd)
    inferred = list(x.shape[:2]) + [
        (x.shape[2 + i] - 1) * strides[i] - (pads[i] + pads[nd + i]) + kernel[i] for i in range(nd)
    ]
    total = int(np.prod(inferred))
    flat = em.zeros((total,), dtype=x.dtype, device=x.device)
    y = em.index_put(flat, (index.reshape((-1,)).astype("int64"),), x.reshape((-1,))).reshape(tuple(inferred))
    if len(xs) > 2 and xs[2] is not None:
        shape = ints(xs[2])
        widths = [0] * len(shape) + [s - i for s, i in zip(shape, inferred)]
        return pad_tensor(y, widths, 0, "constant", None, node)
    return y


@handler("SequenceMap")
def _sequence_map(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    body = node.graphs["body"]
    first = xs[0]
    outs: list[list[Any]] = [[] for _ in body.outputs]
    for i in range(len(first)):
        args = [x[i] if isinstance(x, list) else x for x in xs]
        for acc, value in zip(outs, ctx.run_graph(body, args, ctx.env)):
            acc.append(value)
    return outs


# -- optionals: an empty optional is None -------------------------------------------------------
@handler("Optional")
def _optional(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    return [xs[0] if xs else None]


@handler("OptionalHasElement")
def _optional_has(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    present = bool(xs) and xs[0] is not None
    return on(np.asarray(present), ctx.device)


@handler("OptionalGetElement")
def _optional_get(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    if not xs or xs[0] is None:
        raise bad(node, "the optional is empty")
    return [xs[0]]

"""ONNX handlers: elementwise math, comparisons, casts, reductions, matrix products."""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

import numpy as np

import ember as em

from ..tensor import Tensor
from .registry import Context, OnnxNode, handler
from .util import bad, checked_shape, const, dtype_of, ints, norm_axis, unsupported

# -- elementwise unary -------------------------------------------------------------------------
_UNARY = {
    "Abs": em.abs,
    "Neg": em.negative,
    "Exp": em.exp,
    "Log": em.log,
    "Sqrt": em.sqrt,
    "Reciprocal": em.reciprocal,
    "Floor": em.floor,
    "Ceil": em.ceil,
    "Round": em.round,
    "Sign": em.sign,
    "Sin": em.sin,
    "Cos": em.cos,
    "Tan": em.tan,
    "Asin": em.asin,
    "Acos": em.acos,
    "Atan": em.atan,
    "Sinh": em.sinh,
    "Cosh": em.cosh,
    "Asinh": em.asinh,
    "Acosh": em.acosh,
    "Atanh": em.atanh,
    "Tanh": em.tanh,
    "Erf": em.erf,
    "Sigmoid": em.sigmoid,
    "Relu": em.relu,
    "IsNaN": em.isnan,
    "Not": em.logical_not,
    "BitwiseNot": em.bitwise_invert,
    "Mish": em.mish,
}


def _unary(fn: Any) -> Any:
    def run(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
        return fn(xs[0])

    return run


for _name, _fn in _UNARY.items():
    handler(_name)(_unary(_fn))


@handler("Identity")
def _identity(ctx: Context, node: OnnxNode, xs: list[Any]) -> list[Any]:
    return [xs[0]]  # one output, which may be a sequence (a list)


@handler("Softsign")
def _softsign(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return x / (em.abs(x) + 1.0)


@handler("Softplus")
def _softplus(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return em.softplus(xs[0])


@handler("Elu")
def _elu(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return em.elu(xs[0], node.attr("alpha", 1.0))


@handler("Selu")
def _selu(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    alpha = node.attr("alpha", 1.67326319217681884765625)
    gamma = node.attr("gamma", 1.05070102214813232421875)
    return em.where(x > 0, x * gamma, (em.exp(x) - 1.0) * (alpha * gamma))


@handler("Celu")
def _celu(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    alpha = node.attr("alpha", 1.0)
    return em.maximum(x, 0.0) + em.minimum((em.exp(x / alpha) - 1.0) * alpha, 0.0)


@handler("LeakyRelu")
def _leaky(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return em.where(x >= 0, x, x * node.attr("alpha", 0.01))


@handler("ThresholdedRelu")
def _thresholded(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return em.where(x > node.attr("alpha", 1.0), x, em.zeros_like(x))


@handler("HardSigmoid")
def _hardsigmoid(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return em.clip(x * node.attr("alpha", 0.2) + node.attr("beta", 0.5), 0.0, 1.0)


@handler("HardSwish")
def _hardswish(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return x * em.clip(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)


@handler("Shrink")
def _shrink(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    lambd, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)
    zero = em.zeros_like(x)
    return em.where(x < -lambd, x + bias, em.where(x > lambd, x - bias, zero))


@handler("Gelu")
def _gelu(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return em.gelu(xs[0], approximate=node.attr("approximate", "none"))


@handler("Swish")
def _swish(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    return x * em.sigmoid(x * node.attr("alpha", 1.0))


@handler("IsInf")
def _isinf(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)
    inf = em.isinf(x)
    if pos and neg:
        return inf
    if pos:
        return em.logical_and(inf, x > 0)
    if neg:
        return em.logical_and(inf, x < 0)
    return em.zeros_like(inf)


@handler("PRelu")
def _prelu(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, slope = xs
    return em.where(x < 0, x * slope, x)


# -- elementwise binary ------------------------------------------------------------------------
_BINARY = {
    "Add": em.add,
    "Sub": em.subtract,
    "Mul": em.multiply,
    "And": em.logical_and,
    "Or": em.logical_or,
    "Xor": em.logical_xor,
    "BitwiseAnd": em.bitwise_and,
    "BitwiseOr": em.bitwise_or,
    "BitwiseXor": em.bitwise_xor,
    "Equal": em.equal,
    "Less": em.less,
    "Greater": em.greater,
    "LessOrEqual": em.less_equal,
    "GreaterOrEqual": em.greater_equal,
}


def _binary(fn: Any) -> Any:
    def run(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
        return fn(xs[0], xs[1])

    return run


for _name, _fn in _BINARY.items():
    handler(_name)(_binary(_fn))


def trunc_div(a: Tensor, b: Tensor) -> Tensor:
    """Integer division rounding toward zero (C semantics, as ONNX Div on integers)."""
    if a.dtype.kind == "u":
        return em.floor_divide(a, b)
    q = em.floor_divide(a, b)
    r = a - q * b
    fix = em.logical_and(r != 0, (a < 0) != (b < 0))
    return em.where(fix, q + 1, q)


@handler("Div")
def _div(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    a, b = xs
    if a.dtype.is_integer:
        return trunc_div(a, b)
    return a / b


@handler("Pow")
def _pow(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    a, b = xs
    if b.dtype is not a.dtype:
        b = b.astype(a.dtype)
    return em.pow(a, b)


@handler("Mod")
def _mod(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    a, b = xs
    if node.attr("fmod", 0):
        if a.dtype.is_floating:
            return a - em.trunc(a / b) * b
        return a - trunc_div(a, b) * b
    return em.remainder(a, b)


@handler("BitShift")
def _bitshift(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    a, b = xs
    direction = node.attr("direction", "")
    if direction == "LEFT":
        return em.bitwise_left_shift(a, b)
    if direction == "RIGHT":
        return em.bitwise_right_shift(a, b)
    raise bad(node, f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")


def _variadic(fn: Any) -> Any:
    def run(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
        return reduce(fn, [x for x in xs if x is not None])

    return run


handler("Max")(_variadic(em.maximum))
handler("Min")(_variadic(em.minimum))
handler("Sum")(_variadic(em.add))


@handler("Mean")
def _mean(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    ts = [x for x in xs if x is not None]
    return reduce(em.add, ts) / float(len(ts))


@handler("Where")
def _where(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return em.where(xs[0], xs[1], xs[2])


@handler("Clip", since=1)
def _clip_attr(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return em.clip(xs[0], node.attr("min", -math.inf), node.attr("max", math.inf))


@handler("Clip", since=11)
def _clip(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    lo = xs[1] if len(xs) > 1 else None
    hi = xs[2] if len(xs) > 2 else None
    if lo is not None:
        x = em.maximum(x, lo.reshape(()))
    if hi is not None:
        x = em.minimum(x, hi.reshape(()))
    return x


# -- casts -------------------------------------------------------------------------------------
@handler("Cast")
def _cast(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    to = node.attr("to")
    if to is None:
        raise bad(node, "the 'to' attribute is missing")
    return xs[0].astype(dtype_of(to, node))


@handler("CastLike")
def _castlike(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return xs[0].astype(xs[1].dtype)


# -- reductions --------------------------------------------------------------------------------
def _axes(ctx: Context, node: OnnxNode, xs: list[Any], input_from: int) -> list[int] | None:
    """The reduction axes: the ``axes`` attribute before opset ``input_from``, else input 1."""
    if ctx.opset >= input_from:
        return ints(xs[1]) if len(xs) > 1 and xs[1] is not None else None
    return node.attr("axes")


def _reducer(kind: str, input_from: int) -> Any:
    def run(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
        x = xs[0]
        axes = _axes(ctx, node, xs, input_from)
        keep = bool(node.attr("keepdims", 1))
        if not axes:
            if node.attr("noop_with_empty_axes", 0):
                return _elementwise_of(kind, x)
            axes = list(range(x.ndim))
        ax = tuple(sorted({norm_axis(a, x.ndim, node) for a in axes}))
        if x.dtype.name == "bool" and kind in ("Max", "Min"):
            return reduce_over(kind, x.astype("uint8"), ax, keep).astype("bool")
        return reduce_over(kind, x, ax, keep)

    return run


def _elementwise_of(kind: str, x: Tensor) -> Tensor:
    if kind == "L1":
        return em.abs(x)
    if kind in ("L2",):
        return em.abs(x)
    if kind == "SumSquare":
        return x * x
    if kind == "LogSum":
        return em.log(x)
    return x


def reduce_over(kind: str, x: Tensor, ax: tuple[int, ...], keep: bool) -> Tensor:
    """ONNX Reduce<kind> over axes ``ax`` (empty inputs give the identity, as ONNX says)."""
    empty = any(x.shape[a] == 0 for a in ax)
    if empty and kind in ("Max", "Min", "LogSumExp"):
        shape = tuple(1 if i in ax else d for i, d in enumerate(x.shape))
        if not keep:
            shape = tuple(d for i, d in enumerate(x.shape) if i not in ax)
        if x.dtype.is_floating:
            value: Any = -math.inf if kind in ("Max", "LogSumExp") else math.inf
        else:
            info = np.iinfo(x.dtype.numpy)
            value = int(info.min if kind == "Max" else info.max)
        return em.full(shape, value, dtype=x.dtype, device=x.device)
    if kind == "Sum":
        return em.sum(x, axis=ax, keepdims=keep)
    if kind == "Mean":
        return em.mean(x, axis=ax, keepdims=keep)
    if kind == "Max":
        return em.max(x, axis=ax, keepdims=keep)
    if kind == "Min":
        return em.min(x, axis=ax, keepdims=keep)
    if kind == "Prod":
        return em.prod(x, axis=ax, keepdims=keep)
    if kind == "L1":
        return em.sum(em.abs(x), axis=ax, keepdims=keep)
    if kind == "L2":
        if x.dtype.is_floating:
            return em.sqrt(em.sum(x * x, axis=ax, keepdims=keep))
        s = em.sum(x * x, axis=ax, keepdims=keep).astype("float64")
        return em.round(em.sqrt(s)).astype(x.dtype)
    if kind == "SumSquare":
        return em.sum(x * x, axis=ax, keepdims=keep)
    if kind == "LogSum":
        return em.log(em.sum(x, axis=ax, keepdims=keep))
    if kind == "LogSumExp":
        return em.logsumexp(x, axis=ax, keepdims=keep)
    raise AssertionError(kind)  # pragma: no cover - the table below names every kind


for _kind in ("Sum", "Mean", "Max", "Min", "Prod", "L1", "L2", "SumSquare", "LogSum", "LogSumExp"):
    handler(f"Reduce{_kind}")(_reducer(_kind, 13 if _kind == "Sum" else 18))


def _arg(fn: Any, ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    axis = norm_axis(node.attr("axis", 0), x.ndim, node)
    keep = bool(node.attr("keepdims", 1))
    if node.attr("select_last_index", 0):
        n = x.shape[axis]
        idx = fn(em.flip(x, axis=axis), axis=axis, keepdims=keep)
        return (n - 1) - idx
    return fn(x, axis=axis, keepdims=keep)


@handler("ArgMax")
def _argmax(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return _arg(em.argmax, ctx, node, xs)


@handler("ArgMin")
def _argmin(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return _arg(em.argmin, ctx, node, xs)


def _cumulative(fn: Any) -> Any:
    def run(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
        x, axis_t = xs[0], xs[1]
        axis = norm_axis(ints(axis_t)[0], x.ndim, node)
        if node.attr("reverse", 0):
            x = em.flip(x, axis=axis)
        dt = x.dtype
        if fn is em.cumulative_prod and not dt.is_floating:
            y = em.round(fn(x.astype("float64"), axis=axis)).astype(dt)
        else:
            y = fn(x, axis=axis).astype(dt)
        if node.attr("exclusive", 0):
            y = _shift_one(y, axis, fn is em.cumulative_prod)
        if node.attr("reverse", 0):
            y = em.flip(y, axis=axis)
        return y

    return run


def _shift_one(y: Tensor, axis: int, prod: bool) -> Tensor:
    n = y.shape[axis]
    head = [slice(None)] * y.ndim
    head[axis] = slice(0, max(n - 1, 0))
    fill_shape = list(y.shape)
    fill_shape[axis] = 1
    fill = em.full(tuple(fill_shape), 1 if prod else 0, dtype=y.dtype, device=y.device)
    return em.concat([fill, y[tuple(head)]], axis=axis)


handler("CumSum")(_cumulative(em.cumulative_sum))
handler("CumProd")(_cumulative(em.cumulative_prod))


# -- softmax family ----------------------------------------------------------------------------
def _coerced(fn: Any) -> Any:
    """Before opset 13, softmax ops flatten to 2-D at ``axis`` (default 1)."""

    def run(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
        x = xs[0]
        axis = norm_axis(node.attr("axis", 1), x.ndim, node)
        n = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = x.reshape((n, -1) if x.size else (n, int(np.prod(x.shape[axis:], dtype=np.int64))))
        return fn(flat, 1).reshape(x.shape)

    return run


def _on_axis(fn: Any) -> Any:
    def run(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
        x = xs[0]
        return fn(x, norm_axis(node.attr("axis", -1), x.ndim, node))

    return run


def _hardmax(x: Tensor, axis: int) -> Tensor:
    idx = em.argmax(x, axis=axis, keepdims=True)
    pos = em.arange(x.shape[axis], device=x.device).reshape(tuple(-1 if i == axis else 1 for i in range(x.ndim)))
    return (pos == idx).astype(x.dtype)


for _name, _fn in (
    ("Softmax", lambda x, a: em.softmax(x, axis=a)),
    ("LogSoftmax", lambda x, a: em.log_softmax(x, axis=a)),
    ("Hardmax", _hardmax),
):
    handler(_name, since=1)(_coerced(_fn))
    handler(_name, since=13)(_on_axis(_fn))


# -- matrix products ---------------------------------------------------------------------------
@handler("MatMul")
def _matmul(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    return em.matmul(xs[0], xs[1])


@handler("Gemm")
def _gemm(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    a, b = xs[0], xs[1]
    c = xs[2] if len(xs) > 2 else None
    if node.attr("transA", 0):
        a = a.mT
    if node.attr("transB", 0):
        b = b.mT
    y = em.matmul(a, b)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c * beta if beta != 1.0 else c)
    return y


@handler("Einsum")
def _einsum(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    eq = node.attr("equation", "").replace(" ", "")
    if "..." in eq:
        eq = _expand_ellipsis(eq, [x.ndim for x in xs], node)
    return em.einsum(eq, *xs)


def _expand_ellipsis(eq: str, ranks: list[int], node: OnnxNode) -> str:
    """``eq`` with each ``...`` replaced by letters the equation does not use (ember names every axis)."""
    lhs, arrow, rhs = eq.partition("->")
    specs = lhs.split(",")
    if len(specs) != len(ranks):
        raise bad(node, f"equation {eq!r} names {len(specs)} operands, the node has {len(ranks)}")
    free = [ch for ch in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ" if ch not in eq]
    width = max((r - (len(sp) - 3) for sp, r in zip(specs, ranks) if "..." in sp), default=0)
    letters = "".join(free[:width])
    out = []
    for sp, r in zip(specs, ranks):
        if "..." in sp:
            n = r - (len(sp) - 3)
            sp = sp.replace("...", letters[width - n :] if n else "")
        out.append(sp)
    if arrow:
        rhs = rhs.replace("...", letters)
    else:  # implicit output: the broadcast axes, then the letters used once, sorted
        once = sorted(ch for ch in set("".join(out)) if "".join(out).count(ch) == 1 and ch not in letters)
        rhs = letters + "".join(once)
    return ",".join(out) + "->" + rhs


@handler("Det")
def _det(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x = xs[0]
    if not x.dtype.is_floating:
        raise unsupported(node, f"Det of {x.dtype}")
    # ember has no determinant op yet (ember-linalg is planned): LU on the host, in float64
    value = np.linalg.det(np.asarray(x.numpy(), dtype=np.float64))
    return const(value, x)


def _quant_shape(scale: Tensor, x: Tensor, node: OnnxNode) -> Tensor:
    if scale.ndim == 0 or scale.size == 1:
        return scale.reshape(())
    axis = norm_axis(node.attr("axis", 1), x.ndim, node)
    block = node.attr("block_size", 0)
    if block:
        return em.repeat(scale, block, axis=axis)[tuple(slice(0, d) for d in x.shape)]
    return scale.reshape(tuple(-1 if i == axis else 1 for i in range(x.ndim)))


@handler("QuantizeLinear")
def _quantize(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, scale = xs[0], xs[1]
    zp = xs[2] if len(xs) > 2 else None
    out = zp.dtype if zp is not None else dtype_of(node.attr("output_dtype", 2) or 2, node)
    if not out.is_integer:
        raise unsupported(node, f"quantization to {out}")
    s = _quant_shape(scale, x, node).astype(x.dtype)
    y = em.round(x / s)
    if zp is not None:
        y = y + _quant_shape(zp, x, node).astype(x.dtype)
    info = np.iinfo(out.numpy)
    return em.clip(y, float(info.min), float(info.max)).astype(out)


@handler("DequantizeLinear")
def _dequantize(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    x, scale = xs[0], xs[1]
    zp = xs[2] if len(xs) > 2 else None
    if not x.dtype.is_integer:
        raise unsupported(node, f"dequantization of {x.dtype}")
    s = _quant_shape(scale, x, node)
    xf = x.astype(s.dtype)
    if zp is not None:
        xf = xf - _quant_shape(zp, x, node).astype(s.dtype)
    return xf * s


@handler("Range")
def _range(ctx: Context, node: OnnxNode, xs: list[Any]) -> Tensor:
    start, limit, delta = (x.numpy().reshape(()).item() for x in xs)
    if delta == 0:
        raise bad(node, "delta is 0")
    n = max(int(math.ceil((limit - start) / delta)), 0)
    checked_shape((n,), node)
    return em.arange(n, device=xs[0].device).astype(xs[0].dtype) * const(delta, xs[0]) + const(start, xs[0])

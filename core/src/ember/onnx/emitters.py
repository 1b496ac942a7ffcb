"""Emitters: each traced ember op (as the op table names it) written as ONNX nodes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import TensorProto

from .emit import NP_TO_ONNX, Builder, CannotExpress, Emitter, emits, np_dtype
from .trace import Call, Value

# -- elementwise ---------------------------------------------------------------------------------
_SIMPLE_UNARY = {
    "abs": "Abs",
    "neg": "Neg",
    "exp": "Exp",
    "log": "Log",
    "sqrt": "Sqrt",
    "sin": "Sin",
    "cos": "Cos",
    "tan": "Tan",
    "asin": "Asin",
    "acos": "Acos",
    "atan": "Atan",
    "sinh": "Sinh",
    "cosh": "Cosh",
    "asinh": "Asinh",
    "acosh": "Acosh",
    "atanh": "Atanh",
    "tanh": "Tanh",
    "erf": "Erf",
    "floor": "Floor",
    "ceil": "Ceil",
    "round": "Round",
    "reciprocal": "Reciprocal",
    "sign": "Sign",
    "isnan": "IsNaN",
    "isinf": "IsInf",
    "logical_not": "Not",
    "relu": "Relu",
    "sigmoid": "Sigmoid",
    "softplus": "Softplus",
    "clone": "Identity",
    "to_device": "Identity",
}


def _unary(op_type: str) -> Emitter:
    def emit(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
        return b.node(op_type, [xs[0]])

    return emit


for _name, _op_type in _SIMPLE_UNARY.items():
    emits(_name)(_unary(_op_type))


def _scalar(b: Builder, value: float, like: Value) -> str:
    return b.const(np.asarray(value, dtype=np_dtype(like.dtype)))


@emits("rsqrt")
def _rsqrt(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Reciprocal", [b.node("Sqrt", [xs[0]])])


@emits("square")
def _square(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Mul", [xs[0], xs[0]])


@emits("silu")
def _silu(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Mul", [xs[0], b.node("Sigmoid", [xs[0]])])


@emits("gelu", "gelu_tanh")
def _gelu(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    x = xs[0]
    approx = call.op.name == "gelu_tanh"
    if b.opset >= 20:
        return b.node("Gelu", [x], approximate="tanh" if approx else "none")
    half = _scalar(b, 0.5, out)
    one = _scalar(b, 1.0, out)
    if approx:
        c = _scalar(b, math.sqrt(2 / math.pi), out)
        k = _scalar(b, 0.044715, out)
        cube = b.node("Mul", [b.node("Mul", [x, x]), x])
        inner = b.node("Mul", [c, b.node("Add", [x, b.node("Mul", [k, cube])])])
        t = b.node("Tanh", [inner])
    else:
        t = b.node("Erf", [b.node("Mul", [x, _scalar(b, 1 / math.sqrt(2), out)])])
    return b.node("Mul", [b.node("Mul", [x, half]), b.node("Add", [one, t])])


@emits("trunc")
def _trunc(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    x = xs[0]
    neg = b.node("Less", [x, _scalar(b, 0.0, out)])
    return b.node("Where", [neg, b.node("Ceil", [x]), b.node("Floor", [x])])


@emits("exp2")
def _exp2(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Pow", [_scalar(b, 2.0, out), xs[0]])


@emits("expm1")
def _expm1(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Sub", [b.node("Exp", [xs[0]]), _scalar(b, 1.0, out)])


@emits("log1p")
def _log1p(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Log", [b.node("Add", [xs[0], _scalar(b, 1.0, out)])])


@emits("log2", "log10")
def _log_base(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    base = 2.0 if call.op.name == "log2" else 10.0
    return b.node("Div", [b.node("Log", [xs[0]]), _scalar(b, math.log(base), out)])


@emits("isfinite")
def _isfinite(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    bad = b.node("Or", [b.node("IsNaN", [xs[0]]), b.node("IsInf", [xs[0]])])
    return b.node("Not", [bad])


@emits("bitwise_not")
def _bitwise_not(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    if b.opset < 18:
        raise CannotExpress("BitwiseNot needs opset 18")
    return b.node("BitwiseNot", [xs[0]])


@emits("cast")
def _cast(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Cast", [xs[0]], to=NP_TO_ONNX[p["dtype"].name])


_SIMPLE_BINARY = {
    "add": "Add",
    "sub": "Sub",
    "mul": "Mul",
    "pow": "Pow",
    "maximum": "Max",
    "minimum": "Min",
    "eq": "Equal",
    "lt": "Less",
    "le": "LessOrEqual",
    "gt": "Greater",
    "ge": "GreaterOrEqual",
    "logical_and": "And",
    "logical_or": "Or",
    "logical_xor": "Xor",
    "bitwise_and": "BitwiseAnd",
    "bitwise_or": "BitwiseOr",
    "bitwise_xor": "BitwiseXor",
}


def _binary(op_type: str) -> Emitter:
    def emit(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
        if op_type.startswith("Bitwise") and b.opset < 18:
            raise CannotExpress(f"{op_type} needs opset 18")
        return b.node(op_type, [xs[0], xs[1]])

    return emit


for _name, _op_type in _SIMPLE_BINARY.items():
    emits(_name)(_binary(_op_type))


@emits("ne")
def _ne(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Not", [b.node("Equal", [xs[0], xs[1]])])


@emits("div")
def _div(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    if not out.dtype.is_floating:
        raise CannotExpress("integer true division")
    return b.node("Div", [xs[0], xs[1]])


@emits("floordiv")
def _floordiv(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    if out.dtype.is_floating:
        return b.node("Floor", [b.node("Div", [xs[0], xs[1]])])
    q = b.node("Div", [xs[0], xs[1]])  # toward zero
    r = b.node("Mod", [xs[0], xs[1]], fmod=1)
    zero = _scalar(b, 0, out)
    inexact = b.node("Not", [b.node("Equal", [r, zero])])
    signs = b.node("Xor", [b.node("Less", [xs[0], zero]), b.node("Less", [xs[1], zero])])
    fix = b.node("Cast", [b.node("And", [inexact, signs])], to=NP_TO_ONNX[out.dtype.name])
    return b.node("Sub", [q, fix])


@emits("remainder")
def _remainder(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    if out.dtype.is_floating:
        q = b.node("Floor", [b.node("Div", [xs[0], xs[1]])])
        return b.node("Sub", [xs[0], b.node("Mul", [q, xs[1]])])
    return b.node("Mod", [xs[0], xs[1]], fmod=0)


@emits("hypot")
def _hypot(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Sqrt", [b.node("Add", [b.node("Mul", [xs[0], xs[0]]), b.node("Mul", [xs[1], xs[1]])])])


@emits("logaddexp")
def _logaddexp(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    m = b.node("Max", [xs[0], xs[1]])
    d = b.node("Neg", [b.node("Abs", [b.node("Sub", [xs[0], xs[1]])])])
    return b.node("Add", [m, b.node("Log", [b.node("Add", [_scalar(b, 1.0, out), b.node("Exp", [d])])])])


@emits("where")
def _where(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Where", xs[:3])


# -- reductions ----------------------------------------------------------------------------------
def _axes(p: dict[str, Any]) -> list[int]:
    axes = p.get("axes")
    return list(axes) if axes is not None else []


def _reduce(b: Builder, op_type: str, x: str, axes: list[int], keep: bool) -> str:
    if op_type == "ReduceSum" or b.opset >= 18:
        inputs = [x, b.ints(axes)] if axes else [x]
        return b.node(op_type, inputs, keepdims=int(keep))
    if axes:
        return b.node(op_type, [x], axes=axes, keepdims=int(keep))
    return b.node(op_type, [x], keepdims=int(keep))


_REDUCE = {"sum": "ReduceSum", "prod": "ReduceProd", "max": "ReduceMax", "min": "ReduceMin", "mean": "ReduceMean"}


def _reducer(op_type: str) -> Emitter:
    def emit(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
        return _reduce(b, op_type, xs[0], _axes(p), bool(p.get("keepdims", False)))

    return emit


for _name, _op_type in _REDUCE.items():
    emits(_name)(_reducer(_op_type))


@emits("logsumexp")
def _logsumexp(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return _reduce(b, "ReduceLogSumExp", xs[0], _axes(p), bool(p.get("keepdims", False)))


@emits("l2_norm")
def _l2(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return _reduce(b, "ReduceL2", xs[0], _axes(p), bool(p.get("keepdims", False)))


@emits("any", "all")
def _any_all(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    as_int = b.node("Cast", [xs[0]], to=TensorProto.INT32)
    op_type = "ReduceMax" if call.op.name == "any" else "ReduceMin"
    r = _reduce(b, op_type, as_int, _axes(p), bool(p.get("keepdims", False)))
    return b.node("Cast", [r], to=TensorProto.BOOL)


@emits("var")
def _var(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    x = xs[0]
    axes = _axes(p)
    keep = bool(p.get("keepdims", False))
    shape = call.inputs[0].shape
    n = int(np.prod([shape[a] for a in axes])) if axes else int(np.prod(shape))
    mu = _reduce(b, "ReduceMean", x, axes, True)
    d = b.node("Sub", [x, mu])
    m = _reduce(b, "ReduceMean", b.node("Mul", [d, d]), axes, keep)
    corr = float(p.get("correction", 0.0))
    if corr:
        m = b.node("Mul", [m, _scalar(b, n / max(n - corr, 1e-30), out)])
    return m


@emits("argmax", "argmin")
def _argmax(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    op_type = "ArgMax" if call.op.name == "argmax" else "ArgMin"
    axis = p.get("axis")
    x = xs[0]
    if axis is None:
        x = b.node("Reshape", [x, b.ints([-1])])
        axis = 0
    return b.node(op_type, [x], axis=int(axis), keepdims=int(bool(p.get("keepdims", False))))


@emits("softmax", "log_softmax")
def _softmax(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Softmax" if call.op.name == "softmax" else "LogSoftmax", [xs[0]], axis=int(p["axis"]))


@emits("cumsum")
def _cumsum(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("CumSum", [xs[0], b.const(np.asarray(p["axis"], dtype=np.int64))])


# -- movement ------------------------------------------------------------------------------------
@emits("reshape")
def _reshape(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    target = list(out.shape)
    src = call.inputs[0]
    dyn = b.dynamic.get(src.id, {})
    if dyn:
        # keep dynamic axes dynamic: copy a dim that stays in place (0), infer one other (-1)
        for i in dyn:
            if i < len(target) and i < len(src.shape) and target[i] == src.shape[i]:
                target[i] = 0
        if all(t != 0 for t in target) and target:
            target[0] = -1
    return b.node("Reshape", [xs[0], b.ints(target)])


@emits("permute")
def _permute(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Transpose", [xs[0]], perm=[int(a) for a in p["axes"]])


@emits("expand")
def _expand(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Expand", [xs[0], b.ints(out.shape)])


@emits("slice")
def _slice(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    starts, stops, steps = list(p["starts"]), list(p["stops"]), list(p["steps"])
    axes = list(range(len(starts)))
    return b.node("Slice", [xs[0], b.ints(starts), b.ints(stops), b.ints(axes), b.ints(steps)])


@emits("flip")
def _flip(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    axes = [int(a) for a in p["axes"]]
    big = np.iinfo(np.int64)
    n = len(axes)
    return b.node("Slice", [xs[0], b.ints([-1] * n), b.ints([big.min] * n), b.ints(axes), b.ints([-1] * n)])


@emits("pad")
def _pad(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    pads = [lo for lo, _ in p["pads"]] + [hi for _, hi in p["pads"]]
    value = p.get("value", 0)
    return b.node("Pad", [xs[0], b.ints(pads), _scalar(b, value, out)], mode="constant")


@emits("concat")
def _concat(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Concat", xs, axis=int(p["axis"]))


@emits("gather")
def _gather(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("GatherElements", [xs[0], xs[1]], axis=int(p["axis"]))


@emits("take")
def _take(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("Gather", [xs[0], xs[1]], axis=int(p["axis"]))


@emits("scatter_add")
def _scatter_add(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("ScatterElements", [xs[0], xs[1], xs[2]], axis=int(p["axis"]), reduction="add")


@emits("index_put")
def _index_put(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    # dispatch hands over int64 indices already wrapped and broadcast to one shape
    if not xs[2:]:
        raise CannotExpress("index_put without index tensors")
    axis = b.ints([-1])
    parts = [b.node("Unsqueeze", [i, axis]) for i in xs[2:]]
    index = b.node("Concat", parts, axis=-1) if len(parts) > 1 else parts[0]
    if p.get("accumulate"):
        if b.opset < 16:
            raise CannotExpress("index_put with accumulate=True needs opset 16")
        return b.node("ScatterND", [xs[0], index, xs[1]], reduction="add")
    return b.node("ScatterND", [xs[0], index, xs[1]])


@emits("sort", "argsort")
def _sort(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    axis = int(p["axis"])
    n = call.inputs[0].shape[axis]
    values, indices = b.node(
        "TopK", [xs[0], b.ints([n])], n_out=2, axis=axis, largest=int(bool(p["descending"])), sorted=1
    )
    return values if call.op.name == "sort" else indices


# -- contractions and nn -------------------------------------------------------------------------
@emits("matmul")
def _matmul(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node("MatMul", [xs[0], xs[1]])


@emits("linear")
def _linear(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    if len(call.inputs[0].shape) == 2:
        return b.node("Gemm", xs, transB=1)
    y = b.node("MatMul", [xs[0], b.node("Transpose", [xs[1]], perm=[1, 0])])
    return b.node("Add", [y, xs[2]]) if len(xs) > 2 else y


def _flat_pads(padding: Sequence[Sequence[int]]) -> list[int]:
    return [int(lo) for lo, _ in padding] + [int(hi) for _, hi in padding]


@emits("conv")
def _conv(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node(
        "Conv",
        xs,
        strides=list(p["stride"]),
        pads=_flat_pads(p["padding"]),
        dilations=list(p["dilation"]),
        group=int(p["groups"]),
    )


@emits("conv_transpose")
def _conv_transpose(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    x, w = call.inputs[0], call.inputs[1]
    lo, hi, outpad = [], [], []
    for n, k, s, d, (plo, _), size in zip(
        x.shape[2:], w.shape[2:], p["stride"], p["dilation"], p["padding"], p["size"]
    ):
        full = s * (n - 1) + (k - 1) * d + 1
        extra = full - plo - size
        lo.append(int(plo))
        hi.append(max(int(extra), 0))
        outpad.append(max(-int(extra), 0))
    return b.node(
        "ConvTranspose",
        xs,
        strides=list(p["stride"]),
        pads=lo + hi,
        dilations=list(p["dilation"]),
        group=int(p["groups"]),
        output_padding=outpad,
    )


@emits("max_pool")
def _max_pool(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.node(
        "MaxPool",
        [xs[0]],
        kernel_shape=list(p["kernel"]),
        strides=list(p["stride"]),
        pads=_flat_pads(p["padding"]),
        dilations=list(p["dilation"]),
    )


@emits("avg_pool")
def _avg_pool(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    kernel, stride, pads = list(p["kernel"]), list(p["stride"]), p["padding"]
    sizes = call.inputs[0].shape[2:]
    full = all(all(c == k for c in counts) for counts, k in zip(p["divisor"], kernel))
    excluded = True
    for counts, n, k, s, (lo, _) in zip(p["divisor"], sizes, kernel, stride, pads):
        for i, c in enumerate(counts):
            start = i * s - lo
            if c != min(start + k, n) - max(start, 0):
                excluded = False
    if not (full or excluded):
        raise CannotExpress(f"avg_pool with divisors {p['divisor']}")
    return b.node(
        "AveragePool",
        [xs[0]],
        kernel_shape=kernel,
        strides=stride,
        pads=_flat_pads(pads),
        count_include_pad=int(full and not excluded),
    )


@emits("adaptive_avg_pool", "adaptive_max_pool")
def _adaptive(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    sizes = call.inputs[0].shape[2:]
    size = list(p["size"])
    is_avg = call.op.name == "adaptive_avg_pool"
    if all(o == 1 for o in size):
        return b.node("GlobalAveragePool" if is_avg else "GlobalMaxPool", [xs[0]])
    if any(n % o for n, o in zip(sizes, size)):
        raise CannotExpress(f"adaptive pooling from {tuple(sizes)} to {tuple(size)} (sizes must divide)")
    kernel = [n // o for n, o in zip(sizes, size)]
    return b.node("AveragePool" if is_avg else "MaxPool", [xs[0]], kernel_shape=kernel, strides=kernel)


@emits("layer_norm")
def _layer_norm(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    nd = len(call.inputs[1].shape)
    axis = len(call.inputs[0].shape) - nd
    return b.node("LayerNormalization", xs[:3], axis=axis, epsilon=float(p["eps"]))


@emits("rms_norm")
def _rms_norm(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    nd = len(call.inputs[1].shape)
    rank = len(call.inputs[0].shape)
    axes = list(range(rank - nd, rank))
    if b.opset >= 23:
        return b.node("RMSNormalization", xs[:2], axis=rank - nd, epsilon=float(p["eps"]))
    ms = _reduce(b, "ReduceMean", b.node("Mul", [xs[0], xs[0]]), axes, True)
    inv = b.node("Reciprocal", [b.node("Sqrt", [b.node("Add", [ms, _scalar(b, float(p["eps"]), out)])])])
    return b.node("Mul", [b.node("Mul", [xs[0], inv]), xs[1]])


@emits("batch_norm")
def _batch_norm(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    rank = len(call.inputs[0].shape)
    axes = [0] + list(range(2, rank))
    shape = [1, -1] + [1] * (rank - 2)
    x = xs[0]
    mu = _reduce(b, "ReduceMean", x, axes, True)
    d = b.node("Sub", [x, mu])
    v = _reduce(b, "ReduceMean", b.node("Mul", [d, d]), axes, True)
    inv = b.node("Reciprocal", [b.node("Sqrt", [b.node("Add", [v, _scalar(b, float(p["eps"]), out)])])])
    w = b.node("Reshape", [xs[1], b.ints(shape)])
    bias = b.node("Reshape", [xs[2], b.ints(shape)])
    return b.node("Add", [b.node("Mul", [b.node("Mul", [d, inv]), w]), bias])


@emits("scaled_dot_product_attention")
def _sdpa(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    q, k, v = xs[:3]
    qv, kv = call.inputs[0], call.inputs[1]
    rank = len(qv.shape)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    scale = p.get("scale")
    scale = 1.0 / math.sqrt(qv.shape[-1]) if scale is None else float(scale)
    s = b.node("Mul", [b.node("MatMul", [q, b.node("Transpose", [k], perm=perm)]), _scalar(b, scale, out)])
    lq, lk = qv.shape[-2], kv.shape[-2]
    if p.get("is_causal"):
        allowed = np.tril(np.ones((lq, lk), dtype=bool))
        s = b.node("Where", [b.const(allowed), s, _scalar(b, -np.inf, out)])
    if len(xs) > 3:
        m = call.inputs[3]
        if m.dtype.name == "bool":
            s = b.node("Where", [xs[3], s, _scalar(b, -np.inf, out)])
        else:
            s = b.node("Add", [s, xs[3]])
    return b.node("MatMul", [b.node("Softmax", [s], axis=-1), v])


@emits("interpolate")
def _interpolate(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    sizes = list(call.inputs[0].shape[:2]) + list(p["size"])
    if p["mode"] == "nearest":
        if any(s is not None for s in p["scales"]):
            raise CannotExpress("nearest interpolate with a scale factor that is not the size ratio")
        attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}
    else:
        ctm = "align_corners" if p["align_corners"] else "half_pixel"
        if not p["align_corners"] and any(s is not None for s in p["scales"]):
            raise CannotExpress("linear interpolate with a scale factor that is not the size ratio")
        attrs = {"mode": "linear", "coordinate_transformation_mode": ctm}
    return b.node("Resize", [xs[0], "", "", b.ints(sizes)], **attrs)


@emits("cross_entropy")
def _cross_entropy(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    if p.get("label_smoothing"):
        raise CannotExpress("cross_entropy with label_smoothing")
    return b.node("SoftmaxCrossEntropyLoss", xs[:2], reduction="none", ignore_index=int(p["ignore_index"]))


@emits("full")
def _full(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.const(out.data, hint="full")


@emits("arange", "from_numpy")
def _constant(b: Builder, xs: list[Any], p: dict[str, Any], out: Value, call: Call) -> str:
    return b.const(out.data, hint=call.op.name)

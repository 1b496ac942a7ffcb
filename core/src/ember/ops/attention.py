"""Attention: scaled dot-product attention, its composite over batch slices (no score tensor larger
than the largest operand) and the packed backward op a backend may implement natively."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..amp import LOW
from ..autodiff.mode import is_grad_enabled
from ..creation import arange
from ..dispatch import apply, define
from ..errors import ShapeError
from ..shapes import broadcast_shapes
from .elementwise import _tensor_arg, where
from .linalg import matmul, matrix_transpose
from .movement import broadcast_to, concat, slice_tensor
from .nn import _float_arg, _has_native, dropout, softmax, softmax_backward

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ..tensor import Tensor

__all__ = ["scaled_dot_product_attention", "attention_backward", "attention_backward_from_output"]


def _scores(q: Tensor, k: Tensor, mask: Sequence[Tensor], is_causal: bool, scale: float) -> Tensor:
    s = matmul(q, matrix_transpose(k)) * scale
    if is_causal:
        n, m = q._shape[-2], k._shape[-2]
        causal = arange(m, device=q._device).reshape((1, m)) <= arange(n, device=q._device).reshape((n, 1)) + (m - n)
        s = where(causal, s, float("-inf"))
    if mask:
        mk = mask[0]
        s = where(mk, s, float("-inf")) if mk._dtype.kind == "b" else s + mk
    return s


def _attention_whole(q: Tensor, k: Tensor, v: Tensor, mask: Sequence[Tensor], is_causal: bool, scale: float) -> Tensor:
    return matmul(softmax(_scores(q, k, mask, is_causal, scale), axis=-1), v)


def _attention(q: Tensor, k: Tensor, v: Tensor, *mask: Tensor, is_causal: bool, scale: float) -> Tensor:
    parts = _by_batch(lambda q, k, v, g, m: (_attention_whole(q, k, v, m, is_causal, scale),), q, k, v, None, mask)
    return parts[0]


def _attention_grads(
    g: Tensor, q: Tensor, k: Tensor, v: Tensor, mask: Sequence[Tensor], is_causal: bool, scale: float, need: Any
) -> tuple[Any, ...]:
    """(gq, gk, gv, gmask...) where ``need`` says which are wanted (the caller's inputs' flags: a
    slice taken in backward records nothing, so its own flag says nothing)."""
    p = softmax(_scores(q, k, mask, is_causal, scale), axis=-1)
    if mask or (is_causal and q._shape[-2] > k._shape[-2]):  # only then can a row see no key (NaN)
        p = where(p.isnan(), 0.0, p)
    gv = matmul(matrix_transpose(p), g) if need[2] else None
    gp = matmul(g, matrix_transpose(v))
    gs = softmax_backward(p, gp, -1)
    del p, gp  # the (..., L, S) temporaries go as soon as they are read
    gq = matmul(gs, k) * scale if need[0] else None
    gk = matmul(matrix_transpose(gs), q) * scale if need[1] else None
    gm = (gs,) if mask and need[3] else tuple(None for _ in mask)
    return (gq, gk, gv) + gm


def _attention_vjp(
    g: Tensor, out: Tensor, q: Tensor, k: Tensor, v: Tensor, *mask: Tensor, is_causal: bool, scale: float
) -> tuple[Any, ...]:
    need = (q._rg, k._rg, v._rg, bool(mask) and mask[0]._rg)
    if need[3]:  # the mask's gradient sums over broadcast batches: computed whole
        return _attention_grads(g, q, k, v, mask, is_causal, scale, need)
    if (
        not is_grad_enabled()  # the packed op records no graph: not under create_graph
        and g._shape == packed_shapes(q._shape, k._shape, v._shape)[0][:-1] + v._shape[-1:]
    ):
        if _has_native(q, ATTENTION_BACKWARD_FROM_OUTPUT.name):  # the forward's output (and what it kept)
            packed = attention_backward_from_output(g, q, k, v, out, *mask, is_causal=is_causal, scale=scale)
            return _unpack_grads(packed, q, k, v) + (None,) * len(mask)
        if _has_native(q, ATTENTION_BACKWARD.name):
            # the backend's one kernel for all three (cpu: five products per block of heads)
            packed = attention_backward(g, q, k, v, *mask, is_causal=is_causal, scale=scale)
            return _unpack_grads(packed, q, k, v) + (None,) * len(mask)
    grads = _by_batch(
        lambda q, k, v, g, m: _attention_grads(g, q, k, v, m, is_causal, scale, need)[:3], q, k, v, g, mask
    )
    return grads + tuple(None for _ in mask)


def _by_batch(fn: Any, q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, mask: Sequence[Tensor]) -> tuple[Any, ...]:
    """``fn(q, k, v, g, mask)`` run on slices of a batch axis and concatenated, so that no (..., L, S)
    score-sized temporary is larger than the largest operand (the whole score tensor of a long
    sequence is many times q; the flash kernels never hold it, the composite holds one slice)."""
    limit = 0
    for t in (q, k, v, g):
        if t is not None:
            limit = t.size if t.size > limit else limit  # (the builtin max is ember's reduction here)
    return _split(fn, q, k, v, g, tuple(mask), limit)


def _split(
    fn: Any, q: Tensor, k: Tensor, v: Tensor, g: Tensor | None, mask: tuple[Tensor, ...], limit: int
) -> tuple[Any, ...]:
    operands = [t for t in (q, k, v, g) if t is not None]
    batch = broadcast_shapes(*(t._shape[:-2] for t in (q, k, v)), op="attention")
    score = math.prod(batch) * q._shape[-2] * k._shape[-2]
    axis = next(
        (a for a, n in enumerate(batch) if n > 1 and all(t.ndim == q.ndim and t._shape[a] == n for t in operands)),
        None,
    )
    if score <= limit or axis is None:
        return fn(q, k, v, g, mask)
    n = batch[axis]
    step = -(-n // -(-score // limit))  # pieces of at most limit score elements, where n allows

    def cut(t: Tensor, start: int) -> Tensor:
        a = axis - (q.ndim - t.ndim)  # a mask aligns with the trailing axes
        if a < 0 or t._shape[a] != n:
            return t  # broadcast along this axis: every piece reads all of it
        stops = tuple(min(start + step, n) if i == a else d for i, d in enumerate(t._shape))
        return slice_tensor(t, tuple(start if i == a else 0 for i in range(t.ndim)), stops, (1,) * t.ndim)

    pieces = [
        list(
            _split(
                fn,
                cut(q, s),
                cut(k, s),
                cut(v, s),
                None if g is None else cut(g, s),
                tuple(cut(m, s) for m in mask),
                limit,
            )
        )
        for s in range(0, n, step)
    ]
    out = []
    for i in range(len(pieces[0])):
        parts = [p[i] for p in pieces]
        out.append(None if parts[0] is None else concat(parts, axis=axis) if len(parts) > 1 else parts[0])
        for p in pieces:  # each piece's result goes as soon as it is joined
            p[i] = None
    return tuple(out)


def _unpack_grads(packed: Tensor, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """gq, gk, gv from :func:`attention_backward`'s packed result (views on most backends)."""
    out = []
    start = 0
    for shape in packed_shapes(q._shape, k._shape, v._shape):
        n = math.prod(shape)
        out.append(slice_tensor(packed, (start,), (start + n,), (1,)).reshape(shape))
        start += n
    return out[0], out[1], out[2]


def packed_shapes(q: tuple[int, ...], k: tuple[int, ...], v: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The shapes of gq, gk, gv in :func:`attention_backward`'s result: each over the batch
    shape q, k and v broadcast to."""
    batch = broadcast_shapes(q[:-2], k[:-2], v[:-2], op="attention")
    return batch + q[-2:], batch + k[-2:], batch + v[-2:]


def _attention_backward(
    g: Tensor, q: Tensor, k: Tensor, v: Tensor, *mask: Tensor, is_causal: bool, scale: float
) -> Tensor:
    need = (True, True, True, False)
    grads = _by_batch(
        lambda q, k, v, g, m: _attention_grads(g, q, k, v, m, is_causal, scale, need)[:3], q, k, v, g, mask
    )
    shapes = packed_shapes(q._shape, k._shape, v._shape)
    return concat([broadcast_to(t, s).reshape((-1,)) for t, s in zip(grads, shapes)], axis=0)


#: attention's gradients with respect to q, k and v in one op, flattened and concatenated (a
#: kernel computes them together from one recomputation of the probabilities); rows that see no
#: key get zero gradients, as the composite rule gives
ATTENTION_BACKWARD = define(
    "scaled_dot_product_attention_backward",
    kind="contraction",
    native="scaled_dot_product_attention_backward(g, q, k, v[, mask], *, is_causal, scale) -> handle  # gq, gk, gv "
    "flattened and concatenated",
    autocast=LOW,
    composite=_attention_backward,
    differentiable=False,
)


def _backward_args(
    name: str, g: Any, q: Any, k: Any, v: Any, mask: tuple[Any, ...], is_causal: bool, scale: float | None
) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], dict[str, Any], int]:
    """The checked (g, q, k, v), masks, params and packed length of a backward op's call."""
    q = _float_arg(q, name)
    k, v, g = (_tensor_arg(t, name, q) for t in (k, v, g))
    masks = tuple(_tensor_arg(m, name, q) for m in mask[:1])
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q._shape[-1] != k._shape[-1] or k._shape[-2] != v._shape[-2]:
        raise ShapeError(f"{name}: q {q._shape}, k {k._shape}, v {v._shape} do not fit")
    shapes = packed_shapes(q._shape, k._shape, v._shape)
    if g._shape != shapes[0][:-1] + v._shape[-1:]:
        raise ShapeError(f"{name}: g has shape {g._shape}, expected {shapes[0][:-1] + v._shape[-1:]}")
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(q._shape[-1])
    n = math.prod(shapes[0]) + math.prod(shapes[1]) + math.prod(shapes[2])  # (sum is ember's reduction here)
    return (g, q, k, v), masks, {"is_causal": bool(is_causal), "scale": sc}, n


def attention_backward(
    g: Any, q: Any, k: Any, v: Any, *mask: Any, is_causal: bool = False, scale: float | None = None
) -> Tensor:
    """The gradients of ``scaled_dot_product_attention(q, k, v, mask)`` at cotangent ``g`` with
    respect to q, k and v, flattened and concatenated (:func:`packed_shapes` gives their shapes)."""
    gqkv, masks, params, n = _backward_args("attention_backward", g, q, k, v, mask, is_causal, scale)
    return apply(ATTENTION_BACKWARD, gqkv + masks, params, (n,), gqkv[1]._dtype)


def _attention_backward_from_output(
    g: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, *mask: Tensor, is_causal: bool, scale: float
) -> Tensor:
    return _attention_backward(g, q, k, v, *mask, is_causal=is_causal, scale=scale)


#: :data:`ATTENTION_BACKWARD` given the forward's output too: a flash backward needs each query row's
#: log-sum-exp and ``delta = g . out``; a backend whose forward kept the former beside its output
#: (the handle it returned) reads both from there instead of recomputing the forward (ember-opencl:
#: a pass as long as a third of the forward's). ``out`` must be the forward's result for these q, k, v
ATTENTION_BACKWARD_FROM_OUTPUT = define(
    "scaled_dot_product_attention_backward_from_output",
    kind="contraction",
    native="scaled_dot_product_attention_backward_from_output(g, q, k, v, out[, mask], *, is_causal, scale) -> "
    "handle  # as scaled_dot_product_attention_backward; out: the forward's result",
    autocast=LOW,
    composite=_attention_backward_from_output,
    differentiable=False,
)


def attention_backward_from_output(
    g: Any, q: Any, k: Any, v: Any, out: Any, *mask: Any, is_causal: bool = False, scale: float | None = None
) -> Tensor:
    """:func:`attention_backward` given ``out = scaled_dot_product_attention(q, k, v, mask, ...)``,
    the forward's result for the same operands: a backend may read what its forward kept with it."""
    name = "attention_backward_from_output"
    gqkv, masks, params, n = _backward_args(name, g, q, k, v, mask, is_causal, scale)
    o = _tensor_arg(out, name, gqkv[1])
    if o._shape != gqkv[0]._shape:
        raise ShapeError(f"{name}: out has shape {o._shape}, expected g's {gqkv[0]._shape} (the forward's result)")
    return apply(ATTENTION_BACKWARD_FROM_OUTPUT, gqkv + (o,) + masks, params, (n,), gqkv[1]._dtype)


ATTENTION = define(
    "scaled_dot_product_attention",
    kind="contraction",
    native="scaled_dot_product_attention(q, k, v[, mask], *, is_causal, scale) -> handle",
    autocast=LOW,
    composite=_attention,
    vjp=_attention_vjp,
)


def scaled_dot_product_attention(
    q: Any,
    k: Any,
    v: Any,
    attn_mask: Any = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
) -> Tensor:
    """softmax(q k^T * scale + mask) v over (..., L, E) queries and (..., S, E) keys.

    ``attn_mask`` is boolean (True = attend) or additive float; ``is_causal`` masks the future.
    """
    q = _float_arg(q, "scaled_dot_product_attention")
    k = _tensor_arg(k, "scaled_dot_product_attention", q)
    v = _tensor_arg(v, "scaled_dot_product_attention", q)
    if q.ndim < 2 or k.ndim < 2 or v.ndim < 2:
        raise ShapeError("scaled_dot_product_attention: q, k, v need at least 2 dimensions (..., L, E)")
    if q._shape[-1] != k._shape[-1] or k._shape[-2] != v._shape[-2]:
        raise ShapeError(
            f"scaled_dot_product_attention: q {q._shape}, k {k._shape}, v {v._shape} do not fit: q and k "
            f"need the same embedding size, k and v the same length"
        )
    sc = float(scale) if scale is not None else 1.0 / math.sqrt(q._shape[-1])
    inputs: tuple[Tensor, ...] = (q, k, v)
    if attn_mask is not None:
        inputs += (_tensor_arg(attn_mask, "scaled_dot_product_attention", q),)
    if dropout_p:
        s = _scores(q, k, inputs[3:], is_causal, sc)
        return matmul(dropout(softmax(s, axis=-1), dropout_p), v)
    shape = q._shape[:-1] + (v._shape[-1],)

    shape = broadcast_shapes(q._shape[:-2], k._shape[:-2], op="attention") + shape[-2:]
    return apply(ATTENTION, inputs, {"is_causal": bool(is_causal), "scale": sc}, shape, q._dtype)

"""How an elementwise op is defined: its dtype rule (kept in :data:`RULES`), its registration with
:mod:`ember.dispatch`, and the argument helpers every elementwise module shares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import dispatch as _dispatch
from ...creation import asarray, full_like
from ...dispatch import Op, apply, define, is_tensor, operand_message, swaps
from ...dtypes import DType, bool_, category_error, real_dtype
from ...errors import DTypeError, InvalidArgumentError, ShapeError

if TYPE_CHECKING:  # annotations only: ember.tensor is a layer above (.importlinter)
    from ...tensor import Tensor

__all__ = ["RULES", "unary_op", "binary_op", "ones_like_scalar", "full_like_int"]

#: op name -> (accepted dtypes, result is bool): the elementwise dtype rules, as held by each Op
RULES: dict[str, tuple[frozenset[DType], bool]] = {}


def _needs(t: Any) -> bool:
    """Whether ``t`` is a tensor whose gradient is wanted."""
    return type(t) is _dispatch._TENSOR and t._rg


_reject = category_error


def _tensor_arg(x: Any, op: str, like: Tensor | None = None) -> Tensor:
    if type(x) is _dispatch._TENSOR:  # is_tensor, inline: every op's arguments come this way
        return x
    try:
        return asarray(x, device=None if like is None else like._device)
    except (DTypeError, ShapeError, InvalidArgumentError) as exc:
        raise type(exc)(operand_message(op, x, exc)) from None


# -- unary -------------------------------------------------------------------------------


def unary_op(
    name: str,
    accepts: frozenset[DType],
    *,
    vjp: Any = None,
    composite: Any = None,
    bool_out: bool = False,
    differentiable: bool = True,
) -> Op:
    """Define an elementwise unary op with its dtype rule."""
    return _elementwise(
        name, "elementwise_unary", "(a) -> handle", accepts, vjp, composite, bool_out, differentiable and not bool_out
    )


def _elementwise(
    name: str,
    kind: str,
    signature: str,
    accepts: frozenset[DType],
    vjp: Any,
    composite: Any,
    bool_out: bool,
    differentiable: bool,
) -> Op:
    """Register an elementwise op: a primitive without a composite, else a composite a backend may
    implement natively with ``name`` + ``signature``; its dtype rule is kept in :data:`RULES` too."""
    op = define(
        name,
        kind=kind,
        native=None if composite is None else name + signature,
        primitive=composite is None,
        composite=composite,
        vjp=vjp,
        differentiable=differentiable,
        accepts=accepts,
        bool_out=bool_out,
    )
    RULES[name] = (accepts, bool_out)
    return op


def _unary(op: Op, x: Any) -> Tensor:
    if not is_tensor(x):
        x = _tensor_arg(x, op.name)
    dt = x._dtype
    if dt not in op.accepts:
        raise _reject(op.name, op.accepts, dt)
    out = bool_ if op.bool_out else real_dtype(dt) if op.name in _REAL_RESULT else dt
    return apply(op, (x,), {}, x._shape, out)


#: unary ops whose result is real for a complex input (``abs``, ``real``, ``imag``, ``angle``)
_REAL_RESULT = frozenset(("abs", "real", "imag", "angle"))


def _zero_grad(g: Tensor, y: Tensor, x: Tensor) -> tuple[Any]:
    return (g * 0.0,)  # piecewise constant: zero almost everywhere (PyTorch gives zeros too)


def ones_like_scalar(x: Tensor, value: float) -> Tensor:
    """A tensor of ``x``'s shape, dtype and device filled with ``value``."""
    return full_like(x, value)


def full_like_int(x: Tensor, value: int) -> Tensor:
    return full_like(x, value)


# -- binary ------------------------------------------------------------------------------

#: ops whose operands may be swapped, and the op to use when they are
_SWAPPED = {
    "add": "add", "mul": "mul", "maximum": "maximum", "minimum": "minimum", "eq": "eq",
    "ne": "ne", "lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "logical_and": "logical_and",
    "logical_or": "logical_or", "logical_xor": "logical_xor", "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
}  # fmt: skip


def binary_op(
    name: str,
    accepts: frozenset[DType],
    *,
    vjp: Any = None,
    composite: Any = None,
    bool_out: bool = False,
    differentiable: bool = True,
) -> Op:
    """Define an elementwise binary op with its dtype rule."""
    differentiable = differentiable and (vjp is not None or (composite is not None and not bool_out))
    signature = "(a, b) -> handle  # b may be a Python scalar"
    op = _elementwise(name, "elementwise_binary", signature, accepts, vjp, composite, bool_out, differentiable)
    swapped = _SWAPPED.get(name)
    if swapped is not None:
        swaps(name, swapped)
    return op

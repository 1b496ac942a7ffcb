"""Dispatch: op name -> implementation, native first, composite second; records autodiff.

Every op is an :class:`Op` in :data:`OPS`. Calling one goes through :func:`apply`:

1. find the one device of all inputs (a clear error if they differ);
2. if the device's backend implements the op natively, call it on the input handles;
   otherwise call the op's composite, written in ember Tensor ops;
3. when an input requires grad and grad mode is on, attach a graph node holding the op's
   vjp rule. An op with no vjp rule is differentiated through its composite definition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .autodiff.graph import Node
from .autodiff.mode import _STATE as _GRAD
from .device import common_device
from .errors import InvalidArgumentError, NotImplementedOpError

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = ["Op", "OPS", "KERNELS", "define", "apply", "lookup"]


class Op:
    """An operation: its name, composite definition, vjp rule and whether it is a primitive."""

    __slots__ = ("name", "primitive", "composite", "vjp", "differentiable")

    def __init__(
        self,
        name: str,
        *,
        primitive: bool = False,
        composite: Callable[..., Tensor] | None = None,
        vjp: Callable[..., tuple[Any, ...]] | None = None,
        differentiable: bool = True,
    ) -> None:
        self.name = name
        self.primitive = primitive
        self.composite = composite
        self.vjp = vjp
        self.differentiable = differentiable

    def __repr__(self) -> str:
        kind = "primitive" if self.primitive else "composite"
        return f"<Op {self.name} ({kind})>"


OPS: dict[str, Op] = {}

#: (op name, device kind) -> native kernel ``fn(backend, *handles, **params)`` added by
#: extensions (``@op.kernel("cpu")``); consulted before the backend's own methods
KERNELS: dict[tuple[str, str], Callable[..., Any]] = {}


def define(
    name: str,
    *,
    primitive: bool = False,
    composite: Callable[..., Tensor] | None = None,
    vjp: Callable[..., tuple[Any, ...]] | None = None,
    differentiable: bool = True,
) -> Op:
    """Register an op. A non-primitive op needs a composite so every backend can run it."""
    if name in OPS:
        raise InvalidArgumentError(f"op {name!r} is defined twice")
    if not primitive and composite is None:
        raise InvalidArgumentError(f"op {name!r}: a non-primitive op needs a composite definition")
    op = Op(name, primitive=primitive, composite=composite, vjp=vjp, differentiable=differentiable)
    OPS[name] = op
    return op


def lookup(name: str) -> Op:
    try:
        return OPS[name]
    except KeyError:
        raise NotImplementedOpError(f"no op named {name!r} is registered with ember") from None


def apply(op: Op, inputs: tuple[Tensor, ...], params: dict[str, Any], shape: Any, dtype: Any) -> Tensor:
    """Run ``op`` on tensor ``inputs``; ``shape``/``dtype`` describe the result."""
    first = inputs[0]
    dev = first._device
    record = False
    for t in inputs:
        if t._device is not dev:
            dev = common_device(op.name, [x._device for x in inputs])
            break
    if op.differentiable and _GRAD.enabled and dtype.kind == "f":
        for t in inputs:
            if t._rg:
                record = True
                break
    impl = dev._impls[op.name]
    if impl is None or (record and op.vjp is None):
        composite = op.composite
        if composite is None:
            dev.primitive(op.name)  # raises the missing-primitive error
        if not (record and op.vjp is not None):
            return composite(*inputs, **params)
        _GRAD.enabled = False
        try:
            out = composite(*inputs, **params)
        finally:
            _GRAD.enabled = True
        out = make_tensor(out._data, out._shape, out._dtype, dev)
    else:
        out = make_tensor(impl(*[t._data for t in inputs], **params), shape, dtype, dev)
    if record:
        out._node = Node(op, inputs, params)
        out._rg = True
    return out


from .tensor import make_tensor  # noqa: E402  (tensor imports dispatch lazily)

"""Moving tensors between devices and dtypes, copies, and in-place replacement."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import dispatch as _dispatch
from .autodiff.mode import _STATE as _GRAD
from .creation import full
from .device import Device, check_dtype
from .dispatch import apply, define, make_tensor, transfer
from .dtypes import DType, as_dtype
from .errors import ArgumentTypeError, AutodiffError, DTypeError
from .lazy.jit import set_data
from .ops.elementwise import astype_op
from .shapes import broadcast_shapes

if TYPE_CHECKING:  # annotations only: ember.tensor imports this module (a runtime import is a cycle)
    from .tensor import Tensor

__all__ = ["to", "astype", "clone", "copy_"]


def astype(x: Tensor, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """``x`` converted to ``dtype`` (float -> int truncates toward zero), on ``device`` if given."""
    dt = as_dtype(dtype)
    if device is not None:
        target = Device(device)
        if not target.same_hardware(x._device):
            return astype(to(x, target), dt, copy=False)
    if x._dtype is dt:
        return clone(x) if copy else x
    check_dtype(x._device, dt, "astype")
    return astype_op(x, dt)


CLONE = define(
    "clone",
    kind="elementwise_unary",
    native="clone(a) -> handle  # a copy",
    composite=lambda x: make_tensor(x._data, x._shape, x._dtype, x._device),
    vjp=lambda g, out, x: (g,),
)


def clone(x: Tensor) -> Tensor:
    """A new tensor with the same values (recorded in the graph as identity)."""
    return apply(CLONE, (x,), {}, x._shape, x._dtype)


def _to_device_vjp(g: Tensor, out: Tensor, x: Tensor, source: Device) -> tuple[Any]:
    return (to(g, source),)


TO_DEVICE = define(
    "to_device",
    kind="transfer",
    native="(none: dispatch.transfer copies through the host; the op is the graph node of a move)",
    composite=lambda x, source: x,
    vjp=_to_device_vjp,
)


def _parse_target(target: Any, dtype: Any) -> tuple[Device | None, DType | None]:
    dev = None
    dt = as_dtype(dtype) if dtype is not None else None
    if target is None:
        return dev, dt
    if isinstance(target, Device):
        return target, dt
    if isinstance(target, DType):
        if dt is not None:
            raise ArgumentTypeError("to: a dtype was given twice")
        return None, target
    if isinstance(target, str):
        try:
            found = as_dtype(target)
        except DTypeError:
            return Device(target), dt
        if dt is not None:
            raise ArgumentTypeError("to: a dtype was given twice")
        return None, found
    return None, as_dtype(target)


def to(x: Tensor, target: Any = None, dtype: Any = None) -> Tensor:
    """Move ``x`` to a device and/or dtype; gradients flow back across the move."""
    dev, dt = _parse_target(target, dtype)
    out = x
    if dev is not None and not dev.same_hardware(x._device):
        if not dev.autodiff_enabled and x._rg:
            dev = dev.autodiff()
        check_dtype(dev, x._dtype, "to")
        out = transfer(TO_DEVICE, x, dev)
    elif dev is not None and dev is not x._device:
        out = x._with_device(dev) if not x._rg else x
    if dt is not None and out._dtype is not dt:
        out = astype(out, dt)
    return out


def copy_(x: Tensor, value: Any) -> Tensor:
    """Replace ``x``'s values with ``value`` (broadcast and cast to ``x``); not differentiable."""
    if _GRAD.enabled and x._rg:
        raise AutodiffError(
            "copy_: in-place update of a tensor that requires grad would corrupt the graph; "
            "do it inside `with ember.no_grad():` (as optimizers do)"
        )
    if type(value) is _dispatch._TENSOR:  # is_tensor(value), inline: an update per parameter comes this way
        src = value if value._device._state is x._device._state else to(value.detach(), x._device)
        if src._dtype is not x._dtype:
            src = astype(src, x._dtype)
        if src._shape != x._shape:
            broadcast_shapes(src._shape, x._shape, op="copy_")
            src = src.broadcast_to(x._shape)
        data = src._data
    else:
        data = full(x._shape, value, dtype=x._dtype, device=x._device)._data
    set_data(x, data)
    return x

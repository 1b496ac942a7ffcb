"""Gradient clipping: by the total norm of all gradients, or by value.

``clip_grad_norm_`` keeps everything on the devices: the total norm is a 0-d tensor and the
scale factor ``min(1, max_norm / (norm + 1e-6))`` multiplies every gradient without a host
round trip, so it costs no synchronisation (one when ``error_if_nonfinite=True``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from ..autodiff.mode import no_grad
from ..creation import zeros
from ..device import Device
from ..dtypes import DType, float32, float64
from ..errors import ArgumentTypeError, EmberError, InvalidArgumentError
from ..lazy.jit import set_grad
from ..tensor import Tensor
from .optimizer import _as_tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_", "NonFiniteGradientError"]


class NonFiniteGradientError(EmberError, RuntimeError):
    """The total gradient norm is inf or NaN and ``error_if_nonfinite=True`` was asked for."""


def _params(parameters: Tensor | Iterable[Any], where: str) -> list[Tensor]:
    if isinstance(parameters, Tensor):
        return [_as_tensor(parameters, where)]
    return [_as_tensor(p, where) for p in parameters]


def _partial(g: Tensor, p: float, acc: DType) -> Tensor | None:
    """This gradient's contribution to the total norm (a 0-d tensor of dtype ``acc``)."""
    if g._dtype is not acc:
        g = g.astype(acc)
    if p == 2.0:
        return g.square().sum()
    if math.isinf(p):
        if g.size == 0:
            return None
        a = g.abs()
        return a.max() if p > 0 else a.min()
    if p == 1.0:
        return g.abs().sum()
    if p == 0.0:
        return (g != 0).astype(acc).sum()
    return (g.abs() ** p).sum()


def _number(value: Any, op: str, argument: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{op}: {argument} must be a number, got {value!r} ({type(value).__name__})")
    return float(value)


def clip_grad_norm_(
    parameters: Tensor | Iterable[Any],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
) -> Tensor:
    """Scale all gradients so that their joint ``norm_type``-norm is at most ``max_norm``.

    Returns the total norm before clipping, a 0-d tensor on the first gradient's device
    (float32, or float64 when a gradient is float64). Parameters without a gradient are skipped.

    >>> import ember as em
    >>> w = em.tensor([3.0, 4.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    >>> w.grad = em.tensor([3.0, 4.0])
    >>> em.optim.clip_grad_norm_([w], max_norm=1.0).item()
    5.0
    >>> [round(x, 4) for x in w.grad.tolist()]
    [0.6, 0.8]
    """
    params = [p for p in _params(parameters, "clip_grad_norm_") if p._grad is not None]
    max_norm = _number(max_norm, "clip_grad_norm_", "max_norm")
    p = _number(norm_type, "clip_grad_norm_", "norm_type")
    if not max_norm >= 0:
        raise InvalidArgumentError(f"clip_grad_norm_: max_norm must be >= 0, got {max_norm!r}")
    if not p > 0:
        raise InvalidArgumentError(
            f"clip_grad_norm_: norm_type must be > 0 (2 for the L2 norm, inf for max), got {p!r}"
        )
    if not params:
        return zeros(())
    acc = float64 if any(q._grad._dtype is float64 for q in params) else float32
    with no_grad():
        per_device: dict[Device, Tensor] = {}
        for q in params:
            part = _partial(q._grad.detach(), p, acc)
            if part is None:
                continue
            dev = part._device.without_autodiff()
            prev = per_device.get(dev)
            per_device[dev] = part if prev is None else _combine(prev, part, p)
        home = params[0]._grad._device.without_autodiff()
        total: Tensor | None = None
        for part in per_device.values():
            part = part if part._device.same_hardware(home) else part.to(home)
            total = part if total is None else _combine(total, part, p)
        if total is None:  # only empty gradients with an inf norm
            total = zeros((), dtype=acc, device=home)
        elif p == 2.0:
            total = total.sqrt()
        elif not math.isinf(p) and p not in (0.0, 1.0):
            total = total ** (1.0 / p)
        if error_if_nonfinite and not bool(total.isfinite()):
            raise NonFiniteGradientError(
                f"clip_grad_norm_: the total {p}-norm of the gradients is {total.item()}, so they cannot be "
                f"clipped; pass error_if_nonfinite=False to skip this check (or use a GradScaler with float16)"
            )
        coef = ((total + 1e-6).reciprocal() * max_norm).clip(max=1.0)
        cache: dict[tuple[Any, DType], Tensor] = {}
        for q in params:
            g = q._grad
            key = (g._device._state, g._dtype)
            c = cache.get(key)
            if c is None:
                c = coef if coef._device.same_hardware(g._device) else coef.to(g._device.without_autodiff())
                if c._dtype is not g._dtype:
                    c = c.astype(g._dtype)
                cache[key] = c
            set_grad(q, g.detach() * c)
    return total


def _combine(a: Tensor, b: Tensor, p: float) -> Tensor:
    if math.isinf(p):
        return a.maximum(b) if p > 0 else a.minimum(b)
    return a + b


def clip_grad_value_(parameters: Tensor | Iterable[Any], clip_value: float) -> None:
    """Clamp every gradient elementwise into ``[-clip_value, clip_value]``.

    >>> import ember as em
    >>> w = em.tensor([0.0, 0.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    >>> w.grad = em.tensor([-3.0, 0.5])
    >>> em.optim.clip_grad_value_([w], 1.0)
    >>> w.grad.tolist()
    [-1.0, 0.5]
    """
    v = _number(clip_value, "clip_grad_value_", "clip_value")
    if not v >= 0:
        raise InvalidArgumentError(f"clip_grad_value_: clip_value must be >= 0, got {v!r}")
    with no_grad():
        for q in _params(parameters, "clip_grad_value_"):
            if q._grad is not None:
                set_grad(q, q._grad.detach().clip(-v, v))

"""Adam (Kingma & Ba, 2015), its AMSGrad variant (Reddi et al., 2018) and AdamW (Loshchilov &
Hutter, 2019: weight decay decoupled from the gradient)."""

from __future__ import annotations

import math
from typing import Any

from ..creation import full
from ..dtypes import float32
from ..errors import InvalidArgumentError
from ..lazy.jit import capturing, note_state_created
from ..ops.elementwise import maximum
from .optimizer import Optimizer, ParamsT, _own, _running_average, _store, _unit

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam as in PyTorch::

        g = grad (+ weight_decay * p unless decoupled)      (negated first when maximize)
        p = p * (1 - lr * weight_decay)                     (decoupled: AdamW)
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        vmax = max(vmax, v); v = vmax                       (amsgrad)
        p = p - lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps)

    The last line is evaluated as ``p - m / (sqrt(v) * c1 + c2)`` with the Python scalars
    ``c1 = 1 / (sqrt(1 - beta2**t) * step_size)`` and ``c2 = eps / step_size``: the same
    quantity with one dispatched op fewer per parameter.

    >>> import ember as em
    >>> w = em.tensor([1.0, -1.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    >>> opt = em.optim.Adam([w], lr=0.1)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> [round(x, 6) for x in w.tolist()]
    [0.9, -0.9]
    """

    state_keys = frozenset({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"})
    nonnegative = ("lr", "eps", "weight_decay")

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        decoupled_weight_decay: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "betas": tuple(betas),
            "eps": eps,
            "weight_decay": weight_decay,
            "amsgrad": amsgrad,
            "maximize": maximize,
            "decoupled_weight_decay": decoupled_weight_decay,
        }
        super().__init__(params, defaults)
        self._device_steps = {}

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        betas = group["betas"]
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise InvalidArgumentError(f"{type(self).__name__}: betas must be a pair (beta1, beta2), got {betas!r}")
        _unit(self, betas[0], "beta1 (betas[0])")
        _unit(self, betas[1], "beta2 (betas[1])")

    #: per parameter, the step count on the device that em.jit captures advance (see _captured_update)
    _device_steps: dict[Any, Any]

    def state_dict(self) -> dict[str, Any]:
        """As :meth:`Optimizer.state_dict`, with ``step`` read from the device counter of
        parameters whose steps em.jit replayed."""
        for p, ts in self._device_steps.items():
            state = self.state.get(p)
            if state is not None:
                state["step"] = int(ts.item())
        return super().state_dict()

    def load_state_dict(self, state_dict: Any) -> None:
        super().load_state_dict(state_dict)
        for p, ts in self._device_steps.items():
            ts.copy_(float(self.state.get(p, {}).get("step", 0)))

    def _step_group(self, group: dict[str, Any]) -> None:
        lr = float(group["lr"])
        beta1, beta2 = (float(b) for b in group["betas"])
        eps = float(group["eps"])
        wd = float(group["weight_decay"])
        amsgrad = bool(group["amsgrad"])
        decoupled = bool(group["decoupled_weight_decay"])
        for p, g in self._grads(group, decay=not decoupled):
            state = self._state(p)
            t = state.get("step", 0) + 1
            state["step"] = t
            base = p * (1.0 - lr * wd) if wd and decoupled else p
            m = _running_average(state, "exp_avg", g, beta1)
            v = _running_average(state, "exp_avg_sq", g.square(), beta2)
            if amsgrad:
                vmax = state.get("max_exp_avg_sq")
                if vmax is None:
                    vmax = state["max_exp_avg_sq"] = _own(v)
                else:
                    vmax.copy_(maximum(vmax, v))
                v = vmax
            if capturing():  # the step count must live on the device, or replays would reuse t
                if lr != 0.0:
                    _captured_update(self._device_steps, p, base, m, v, t, lr, beta1, beta2, eps)
                elif base is not p:
                    p.copy_(base)
                continue
            step_size = lr / (1.0 - beta1**t)
            if step_size == 0.0:
                if base is not p:
                    p.copy_(base)
                continue
            c1 = 1.0 / (math.sqrt(1.0 - beta2**t) * step_size)
            _store(p, base - m / (v.sqrt() * c1 + eps / step_size))


def _captured_update(
    steps: dict[Any, Any], p: Any, base: Any, m: Any, v: Any, t: int, lr: float, beta1: float, beta2: float, eps: float
) -> None:
    """Adam's update with the bias corrections computed from a device step counter (float32,
    one per parameter), as an ``em.jit`` capture needs: a replay advances it."""
    ts = steps.get(p)
    if ts is None:
        ts = steps[p] = full((), float(t - 1), dtype=float32, device=p.device.without_autodiff())
        note_state_created("Adam device step")
    ts.copy_(ts + 1.0)
    step_size = lr / (1.0 - beta1**ts)
    c1 = 1.0 / ((1.0 - beta2**ts).sqrt() * step_size)
    if p.dtype is not float32:
        step_size, c1 = step_size.astype(p.dtype), c1.astype(p.dtype)
    p.copy_(base - m / (v.sqrt() * c1 + eps / step_size))


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p = p * (1 - lr * weight_decay)`` before the Adam
    update, instead of adding ``weight_decay * p`` to the gradient.

    >>> import ember as em
    >>> w = em.tensor([1.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    >>> opt = em.optim.AdamW([w], lr=0.1, weight_decay=0.5)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> round(w.item(), 6)
    0.85
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, maximize=maximize, decoupled_weight_decay=True)

"""Adagrad (Duchi, Hazan & Singer, 2011)."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from ..lazy.jit import capturing
from .optimizer import Optimizer, ParamsT

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """Adagrad as in PyTorch::

        g = grad (+ weight_decay * p)                     (negated first when maximize)
        clr = lr / (1 + (t - 1) * lr_decay)
        s = s + g * g                                     (s starts at initial_accumulator_value)
        p = p - clr * g / (sqrt(s) + eps)

    >>> import ember as em
    >>> w = em.tensor([1.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    >>> opt = em.optim.Adagrad([w], lr=0.1, eps=0.0)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> round(w.item(), 6)
    0.9
    """

    state_keys = frozenset({"step", "sum"})
    nonnegative = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        lr_decay: float = 0.0,
        weight_decay: float = 0.0,
        initial_accumulator_value: float = 0.0,
        eps: float = 1e-10,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "lr_decay": lr_decay,
            "weight_decay": weight_decay,
            "initial_accumulator_value": initial_accumulator_value,
            "eps": eps,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _step_group(self, group: dict[str, Any]) -> None:
        lr = float(group["lr"])
        lr_decay = float(group["lr_decay"])
        init = float(group["initial_accumulator_value"])
        eps = float(group["eps"])
        for p, g in self._grads(group):
            state = self._state(p)
            t = state.get("step", 0) + 1
            state["step"] = t
            if lr_decay and capturing():
                raise InvalidArgumentError(
                    "Adagrad(lr_decay=...) inside em.jit: the decayed rate depends on the step count on "
                    "the host, which a replay does not advance; use lr_decay=0 (or a scheduler outside)"
                )
            clr = lr / (1.0 + (t - 1) * lr_decay)
            s = state.get("sum")  # updated in place, so that em.jit replays update it too
            gg = g.square()
            if s is None:
                s = state["sum"] = gg + init if init else gg
            else:
                s.copy_(s + gg)
            p.copy_(p - g / (s.sqrt() + eps) * clr)

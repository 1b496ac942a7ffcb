"""Adagrad (Duchi, Hazan & Singer, 2011)."""

from __future__ import annotations

from typing import Any

from .optimizer import Optimizer, ParamsT, _grad, _nonnegative

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

    def _check_group(self, group: dict[str, Any]) -> None:
        for key in ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"):
            _nonnegative(self, group, key)

    def _step_group(self, group: dict[str, Any]) -> None:
        lr = float(group["lr"])
        lr_decay = float(group["lr_decay"])
        wd = float(group["weight_decay"])
        init = float(group["initial_accumulator_value"])
        eps = float(group["eps"])
        maximize = bool(group["maximize"])
        for p in group["params"]:
            g = _grad(p)
            if g is None:
                continue
            if maximize:
                g = -g
            if wd:
                g = g + p * wd
            state = self._state(p)
            t = state.get("step", 0) + 1
            state["step"] = t
            clr = lr / (1.0 + (t - 1) * lr_decay)
            s = state.get("sum")
            gg = g.square()
            if s is None:
                s = gg + init if init else gg
            else:
                s = s + gg
            state["sum"] = s
            p.copy_(p - g / (s.sqrt() + eps) * clr)

"""RMSprop (Hinton's lecture 6e; centered variant of Graves, 2013)."""

from __future__ import annotations

from typing import Any

from .optimizer import Optimizer, ParamsT, _running_average

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """RMSprop as in PyTorch::

        g = grad (+ weight_decay * p)                     (negated first when maximize)
        s = alpha * s + (1 - alpha) * g * g
        a = alpha * a + (1 - alpha) * g;  d = sqrt(s - a * a) + eps     (centered)
        d = sqrt(s) + eps                                               (otherwise)
        buf = momentum * buf + g / d;  p = p - lr * buf                 (momentum > 0)
        p = p - lr * g / d                                              (otherwise)

    >>> import ember as em
    >>> w = em.tensor([1.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    >>> opt = em.optim.RMSprop([w], lr=0.01, alpha=0.99, eps=0.0)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> round(w.item(), 6)
    0.9
    """

    state_keys = frozenset({"step", "square_avg", "grad_avg", "momentum_buffer"})
    nonnegative = ("lr", "alpha", "eps", "weight_decay", "momentum")

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        momentum: float = 0.0,
        centered: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "alpha": alpha,
            "eps": eps,
            "weight_decay": weight_decay,
            "momentum": momentum,
            "centered": centered,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _step_group(self, group: dict[str, Any]) -> None:
        lr = float(group["lr"])
        alpha = float(group["alpha"])
        eps = float(group["eps"])
        momentum = float(group["momentum"])
        centered = bool(group["centered"])
        for p, g in self._grads(group):
            state = self._state(p)
            state["step"] = state.get("step", 0) + 1
            s = _running_average(state, "square_avg", g.square(), alpha)
            if centered:
                s = s - _running_average(state, "grad_avg", g, alpha).square()
            d = s.sqrt() + eps
            if momentum > 0:
                buf = state.get("momentum_buffer")
                q = g / d
                if buf is None:
                    buf = state["momentum_buffer"] = q
                else:
                    buf.copy_(buf * momentum + q)
                p.copy_(p - buf * lr)
            else:
                p.copy_(p - g / d * lr)

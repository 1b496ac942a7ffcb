"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgumentError
from .optimizer import Optimizer, ParamsT, _grad, _own, _store

__all__ = ["SGD"]


class SGD(Optimizer):
    """SGD as in PyTorch (Sutskever et al. momentum)::

        g = grad (+ weight_decay * p)            (negated first when maximize)
        buf = g on the first step, else momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf        (when momentum != 0)
        p = p - lr * g

    >>> import ember as em
    >>> w = em.tensor([1.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    >>> opt = em.optim.SGD([w], lr=0.1, momentum=0.9)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> round(w.item(), 6)
    0.8
    """

    state_keys = frozenset({"momentum_buffer"})
    nonnegative = ("lr", "momentum", "weight_decay")

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
    ) -> None:
        defaults = {
            "lr": lr,
            "momentum": momentum,
            "dampening": dampening,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "maximize": maximize,
        }
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        super()._check_group(group)
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise InvalidArgumentError("SGD: nesterov momentum needs momentum > 0 and dampening = 0")

    def _step_group(self, group: dict[str, Any]) -> None:
        lr = float(group["lr"])
        momentum = float(group["momentum"])
        keep = 1.0 - float(group["dampening"])
        nesterov = bool(group["nesterov"])
        if not momentum and not group["weight_decay"] and not group["maximize"]:
            for p in group["params"]:  # plain SGD: one expression per parameter, stored without copy_'s checks
                g = _grad(p)
                if g is not None:
                    _store(p, p - g * lr)
            return
        for p, g in self._grads(group):
            if momentum:
                state = self._state(p)
                buf = state.get("momentum_buffer")  # updated in place, so that em.jit replays update it
                if buf is None:
                    buf = state["momentum_buffer"] = _own(g)
                elif keep != 1.0:
                    _store(buf, buf * momentum + g * keep)
                else:
                    _store(buf, buf * momentum + g)
                g = g + buf * momentum if nesterov else buf
            _store(p, p - g * lr)

"""Learning-rate schedules with PyTorch's semantics.

A scheduler writes ``group["lr"]`` of its optimizer's parameter groups. Creating one records
``group["initial_lr"]`` (the base learning rates) and performs step 0; each ``step()`` after
an epoch (or batch) advances ``last_epoch`` by one. Schedules are computed the way PyTorch
computes them, from the current ``group["lr"]`` (so that several schedulers can be chained)
with the closed form used where PyTorch uses it (a ``SequentialLR`` milestone). State is a
dict of plain numbers and lists, ready for JSON.

>>> import ember as em
>>> w = em.zeros((1,), device=em.Device.cpu().autodiff(), requires_grad=True)
>>> opt = em.optim.SGD([w], lr=1.0)
>>> sched = em.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
>>> lrs = []
>>> for _ in range(5):
...     opt.step()
...     sched.step()
...     lrs.append(sched.get_last_lr()[0])
>>> lrs
[1.0, 0.5, 0.5, 0.25, 0.25]
"""

from __future__ import annotations

import math
import types
from bisect import bisect_right
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import ArgumentTypeError, EmberKeyError, InvalidArgumentError, MissingMethodError
from ..shapes import as_ints
from .optimizer import Optimizer

__all__ = [
    "LRScheduler",
    "LambdaLR",
    "StepLR",
    "MultiStepLR",
    "ExponentialLR",
    "CosineAnnealingLR",
    "LinearLR",
    "OneCycleLR",
    "SequentialLR",
    "ChainedScheduler",
]


def _lrs(optimizer: Optimizer) -> list[float]:
    return [group["lr"] for group in optimizer.param_groups]


def _per_group(name: str, optimizer: Optimizer, value: Any) -> list[Any]:
    """A setting given once or once per parameter group, as a list per group."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise InvalidArgumentError(
                f"OneCycleLR: {name} needs {n} value(s) (one per parameter group), "
                f"got {len(value)}; pass one number for every group, or a list of {n}"
            )
        return list(value)
    return [value] * n


def _gamma(gamma: Any, where: str) -> float:
    """A decay factor: a number > 0 (a negative one would flip the learning rate's sign)."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not gamma > 0:
        raise InvalidArgumentError(f"{where}: gamma must be a number > 0 (e.g. 0.1 or 0.95), got {gamma!r}")
    return gamma


class LRScheduler:
    """Base class: subclasses implement ``get_lr()`` (and ``_closed_form_lr()`` where one exists)."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        if not isinstance(optimizer, Optimizer):
            raise ArgumentTypeError(
                f"{type(self).__name__}: expected an ember Optimizer, got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise EmberKeyError(
                        f"{type(self).__name__}: param_groups[{i}] has no 'initial_lr', which resuming with "
                        f"last_epoch={last_epoch} needs; load the optimizer's state_dict first, or start with "
                        f"last_epoch=-1"
                    )
        self.base_lrs: list[float] = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list[float]:
        """The learning rates for the current ``last_epoch`` (called by ``step``)."""
        raise MissingMethodError(f"{type(self).__name__} does not implement get_lr")

    def get_last_lr(self) -> list[float]:
        """The learning rates the last ``step()`` set, one per parameter group."""
        return list(self._last_lr)

    def step(self) -> None:
        """Advance one epoch (or batch) and write the new learning rates into the optimizer."""
        self._step_count += 1
        self._update_lr(None)

    def _update_lr(self, epoch: int | None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed = getattr(self, "_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)

    def state_dict(self) -> dict[str, Any]:
        """Every attribute but the optimizer (plain numbers and lists)."""
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.__dict__.update(state_dict)


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)``; one function, or one per parameter group.

    Only callable objects' ``__dict__`` is saved in ``state_dict`` (functions and lambdas are
    code, not state).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        lr_lambda: Callable[[int], float] | Sequence[Callable[[int], float]],
        last_epoch: int = -1,
    ) -> None:
        self.optimizer = optimizer
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != len(optimizer.param_groups):
                raise InvalidArgumentError(
                    f"LambdaLR: expected {len(optimizer.param_groups)} lr_lambdas (one per parameter group), "
                    f"got {len(lr_lambda)}"
                )
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * len(optimizer.param_groups)
        for f in self.lr_lambdas:
            if not callable(f):
                raise ArgumentTypeError(
                    f"LambdaLR: lr_lambda must be a function of the epoch (or one per parameter group), got {f!r}"
                )
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        return [base * fn(self.last_epoch) for fn, base in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self) -> dict[str, Any]:
        state = {k: v for k, v in super().state_dict().items() if k != "lr_lambdas"}
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else dict(vars(fn)) for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        saved = state.pop("lr_lambdas", [])
        super().load_state_dict(state)
        for fn, attrs in zip(self.lr_lambdas, saved):
            if attrs is not None:
                vars(fn).update(attrs)


class StepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every ``step_size`` epochs:
    ``initial_lr * gamma ** (epoch // step_size)``."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        if isinstance(step_size, bool) or not hasattr(step_size, "__index__") or int(step_size) < 1:
            raise InvalidArgumentError(f"StepLR: step_size must be a positive integer, got {step_size!r}")
        self.step_size = int(step_size)
        self.gamma = _gamma(gamma, "StepLR")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` at each milestone epoch:
    ``initial_lr * gamma ** (number of milestones <= epoch)``."""

    def __init__(
        self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1
    ) -> None:
        self.milestones = sorted(as_ints(milestones, "MultiStepLR", "milestones"))  # repeats apply gamma again
        if any(m < 0 for m in self.milestones):
            raise InvalidArgumentError(f"MultiStepLR: milestones must be epochs >= 0, got {milestones!r}")
        self.gamma = _gamma(gamma, "MultiStepLR")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        hits = self.milestones.count(self.last_epoch)
        if not hits:
            return _lrs(self.optimizer)
        return [lr * self.gamma**hits for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** bisect_right(self.milestones, self.last_epoch) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiply the learning rate by ``gamma`` every epoch: ``initial_lr * gamma ** epoch``."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = _gamma(gamma, "ExponentialLR")
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        if self._is_initial:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self) -> list[float]:
        return [base * self.gamma**self.last_epoch for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from ``initial_lr`` to ``eta_min`` over ``T_max`` epochs (SGDR without
    restarts): ``eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``.

    As in PyTorch the recursive form is used, so past ``T_max`` the schedule rises again."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        if T_max <= 0:
            raise InvalidArgumentError(f"CosineAnnealingLR: T_max must be positive, got {T_max!r}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t, n, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return _lrs(self.optimizer)
        if self._step_count == 1 and t > 0:
            return [lo + (base - lo) * (1 + math.cos(t * math.pi / n)) / 2 for base in self.base_lrs]
        if (t - 1 - n) % (2 * n) == 0:
            return [
                lr + (base - lo) * (1 - math.cos(math.pi / n)) / 2
                for base, lr in zip(self.base_lrs, _lrs(self.optimizer))
            ]
        ratio = (1 + math.cos(math.pi * t / n)) / (1 + math.cos(math.pi * (t - 1) / n))
        return [ratio * (lr - lo) + lo for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self) -> list[float]:
        t, n, lo = self.last_epoch, self.T_max, self.eta_min
        return [lo + (base - lo) * (1 + math.cos(math.pi * t / n)) / 2 for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Scale the learning rate linearly from ``start_factor`` to ``end_factor`` of ``initial_lr``
    over ``total_iters`` epochs (linear warmup), then keep it."""

    def __init__(
        self,
        optimizer: Optimizer,
        start_factor: float = 1.0 / 3,
        end_factor: float = 1.0,
        total_iters: int = 5,
        last_epoch: int = -1,
    ) -> None:
        if not 0.0 < start_factor <= 1.0:
            raise InvalidArgumentError(f"LinearLR: start_factor must be in (0, 1], got {start_factor!r}")
        if not 0.0 <= end_factor <= 1.0:
            raise InvalidArgumentError(f"LinearLR: end_factor must be in [0, 1], got {end_factor!r}")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t = self.last_epoch
        if t == 0:
            return [lr * self.start_factor for lr in _lrs(self.optimizer)]
        if self._is_initial or t > self.total_iters:
            return _lrs(self.optimizer)
        d = self.end_factor - self.start_factor
        factor = 1.0 + d / (self.total_iters * self.start_factor + (t - 1) * d)
        return [lr * factor for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self) -> list[float]:
        d = self.end_factor - self.start_factor
        frac = min(self.total_iters, self.last_epoch) / self.total_iters
        return [base * (self.start_factor + d * frac) for base in self.base_lrs]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin, 2017): warm up from ``max_lr / div_factor`` to
    ``max_lr`` over ``pct_start`` of ``total_steps``, then anneal to
    ``max_lr / div_factor / final_div_factor``; momentum (or Adam's beta1) cycles inversely
    between ``max_momentum`` and ``base_momentum``. ``three_phase`` anneals back to the initial
    rate before the final descent. Step it once per batch.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float | Sequence[float],
        total_steps: int | None = None,
        epochs: int | None = None,
        steps_per_epoch: int | None = None,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        cycle_momentum: bool = True,
        base_momentum: float | Sequence[float] = 0.85,
        max_momentum: float | Sequence[float] = 0.95,
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
        three_phase: bool = False,
        last_epoch: int = -1,
    ) -> None:
        if not isinstance(optimizer, Optimizer):
            raise ArgumentTypeError(f"OneCycleLR: expected an ember Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        if total_steps is not None:
            if not isinstance(total_steps, int) or total_steps <= 0:
                raise InvalidArgumentError(f"OneCycleLR: total_steps must be a positive integer, got {total_steps!r}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            for name, v in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
                if not isinstance(v, int) or v <= 0:
                    raise InvalidArgumentError(f"OneCycleLR: {name} must be a positive integer, got {v!r}")
            self.total_steps = epochs * steps_per_epoch
        else:
            raise InvalidArgumentError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
        if not isinstance(pct_start, float) or not 0.0 <= pct_start <= 1.0:
            raise InvalidArgumentError(f"OneCycleLR: pct_start must be a float in [0, 1], got {pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise InvalidArgumentError(
                f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}"
            )
        self.anneal_strategy = anneal_strategy
        n = self.total_steps
        warm = float(pct_start * n) - 1
        if three_phase:
            self._phases = [
                [warm, "initial_lr", "max_lr", "max_momentum", "base_momentum"],
                [float(2 * pct_start * n) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"],
                [n - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum"],
            ]
        else:
            self._phases = [
                [warm, "initial_lr", "max_lr", "max_momentum", "base_momentum"],
                [n - 1, "max_lr", "min_lr", "base_momentum", "max_momentum"],
            ]
        max_lrs = _per_group("max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for top, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise InvalidArgumentError(
                    f"OneCycleLR: cycle_momentum=True needs an optimizer with momentum or betas; "
                    f"{type(optimizer).__name__} has neither (pass cycle_momentum=False)"
                )
            self.use_beta1 = "betas" in optimizer.defaults
            tops = _per_group("max_momentum", optimizer, max_momentum)
            bases = _per_group("base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for top, base, group in zip(tops, bases, optimizer.param_groups):
                    self._set_momentum(group, top)
                    group["max_momentum"] = top
                    group["base_momentum"] = base
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group: dict[str, Any], value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self) -> list[float]:
        t = self.last_epoch
        if t > self.total_steps:
            raise InvalidArgumentError(
                f"OneCycleLR: stepped {t} times but total_steps is {self.total_steps}; make total_steps "
                f"(or epochs * steps_per_epoch) cover every scheduler.step()"
            )
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if t <= end or i == len(self._phases) - 1:
                    pct = (t - start) / (end - start)
                    lrs.append(self._anneal(group[lr0], group[lr1], pct))
                    if self.cycle_momentum:
                        self._set_momentum(group, self._anneal(group[m0], group[m1], pct))
                    break
                start = end
        return lrs


class _Composed(LRScheduler):
    """A scheduler made of schedulers: its state holds theirs."""

    _schedulers: list[LRScheduler]

    def state_dict(self) -> dict[str, Any]:
        state = {k: v for k, v in super().state_dict().items() if k != "_schedulers"}
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        inner = state.pop("_schedulers")
        if len(inner) != len(self._schedulers):
            raise InvalidArgumentError(
                f"{type(self).__name__}.load_state_dict: the state holds {len(inner)} scheduler(s), "
                f"this one has {len(self._schedulers)}"
            )
        super().load_state_dict(state)
        for s, saved in zip(self._schedulers, inner):
            s.load_state_dict(saved)


class SequentialLR(_Composed):
    """Run ``schedulers`` one after another, switching at the epochs in ``milestones``.

    >>> import ember as em
    >>> from ember.optim import lr_scheduler as ls
    >>> opt = em.optim.SGD([em.zeros((1,))], lr=1.0)
    >>> warm = ls.LinearLR(opt, start_factor=0.5, total_iters=2)
    >>> decay = ls.ExponentialLR(opt, gamma=0.5)
    >>> sched = ls.SequentialLR(opt, [warm, decay], milestones=[2])
    >>> lrs = [sched.get_last_lr()[0]]
    >>> for _ in range(4):
    ...     sched.step()
    ...     lrs.append(sched.get_last_lr()[0])
    >>> lrs
    [0.5, 0.75, 1.0, 0.5, 0.25]
    """

    def __init__(
        self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int], last_epoch: int = -1
    ) -> None:
        if len(schedulers) < 1:
            raise InvalidArgumentError("SequentialLR: expects at least one scheduler")
        for i, s in enumerate(schedulers):
            if getattr(s, "optimizer", None) is not optimizer:
                raise InvalidArgumentError(
                    f"SequentialLR: scheduler {i} ({type(s).__name__}) belongs to another optimizer"
                )
        if len(milestones) != len(schedulers) - 1:
            raise InvalidArgumentError(
                f"SequentialLR: expects one milestone fewer than schedulers, got {len(schedulers)} scheduler(s) "
                f"and {len(milestones)} milestone(s)"
            )
        self._schedulers = list(schedulers)
        self._milestones = list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for group in optimizer.param_groups:  # undo the steps the schedulers' constructors took
            group["lr"] = group["initial_lr"]
        self._undo(self)
        first = self._schedulers[bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def _undo(self, sched: Any) -> None:
        inner = getattr(sched, "_schedulers", None)
        if inner is not None:
            for s in inner:
                self._undo(s)
        elif hasattr(sched, "last_epoch"):
            sched.last_epoch -= 1

    def step(self) -> None:
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            sched._update_lr(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()


class ChainedScheduler(_Composed):
    """Step several schedulers together: each multiplies into the learning rate the one before
    it set (e.g. warmup with ``LinearLR`` chained with ``ExponentialLR`` decay)."""

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Optimizer | None = None) -> None:
        if len(schedulers) < 1:
            raise InvalidArgumentError("ChainedScheduler: expects at least one scheduler")
        optimizer = optimizer or schedulers[0].optimizer
        for i, s in enumerate(schedulers):
            if getattr(s, "optimizer", None) is not optimizer:
                raise InvalidArgumentError(
                    f"ChainedScheduler: scheduler {i} ({type(s).__name__}) belongs to another optimizer"
                )
        self._schedulers = list(schedulers)
        self.optimizer = optimizer
        self._last_lr = _lrs(optimizer)

    def step(self) -> None:
        for s in self._schedulers:
            s.step()
        self._last_lr = _lrs(self.optimizer)

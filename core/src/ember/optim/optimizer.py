"""The Optimizer base class: parameter groups, per-parameter state, ``state_dict``.

An optimizer holds ``param_groups`` (dicts with ``"params"`` and the hyperparameters of
that group) and ``state`` (one dict per parameter: momentum buffers, moment estimates,
step counts). ``step()`` reads ``p.grad`` of every parameter and replaces the parameter's
values with ``p.copy_(...)`` under ``no_grad``: tensors are values, so an update rebinds the
parameter's data and never mutates a buffer another tensor shares.

Subclasses implement ``_step_group(group)`` (iterating ``_grads(group)``), name their
per-parameter state keys in ``state_keys`` and the hyperparameters that must be >= 0 in
``nonnegative``. Hyperparameters are read once per group as Python floats, so an update
creates no tensors besides its results.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

import numpy as np

from ..autodiff.mode import enable_grad, no_grad
from ..creation import asarray, zeros_like
from ..errors import ArgumentTypeError, CheckpointError, InvalidArgumentError, MissingMethodError
from ..lazy.jit import note_state_created, set_data, set_grad
from ..tensor import Tensor

__all__ = ["Optimizer", "OptimizerStateError", "ParamsT"]

#: what an optimizer accepts: tensors, or dicts ``{"params": [...], "lr": ...}``
ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]]


class OptimizerStateError(CheckpointError):
    """An optimizer state dict does not fit this optimizer (groups, parameters, state keys)."""


def _as_tensor(p: Any, where: str) -> Tensor:
    """``p`` as a parameter tensor (an ``nn.Parameter`` wrapper is unwrapped)."""
    if type(p) is not Tensor:
        inner = getattr(p, "tensor", None)
        if type(inner) is not Tensor:
            raise ArgumentTypeError(f"{where}: parameters must be ember Tensors, got {type(p).__name__}")
        p = inner
    if not p._dtype.is_floating:
        raise ArgumentTypeError(f"{where}: only floating-point tensors can be optimized, got a {p._dtype} tensor")
    if p._node is not None:
        raise InvalidArgumentError(
            f"{where}: a tensor computed by {p._node.op.name!r} is not a leaf and cannot be optimized; "
            f"pass the leaf tensors (model.parameters())"
        )
    return p


def _param_list(params: Any, where: str) -> list[Tensor]:
    if isinstance(params, Tensor):
        return [_as_tensor(params, where)]
    if isinstance(params, (set, frozenset)):
        raise ArgumentTypeError(f"{where}: parameters must be an ordered collection (a list), not a set")
    try:
        items = list(params)
    except TypeError:
        raise ArgumentTypeError(f"{where}: expected an iterable of Tensors, got {type(params).__name__}") from None
    return [_as_tensor(p, where) for p in items]


def _resolve_param_groups(items: list[Any], where: str, defaults: dict[str, Any]) -> list[dict[str, Any]]:
    """``nn.ParamGroup`` entries (and dicts) as optimizer group dicts.

    ParamGroups are routed in order, first match wins: a parameter an earlier group took is
    left out of later groups, so ``[ParamGroup("*.bias", weight_decay=0), ParamGroup("*")]``
    gives the biases one setting and everything else another.
    """
    taken: set[int] = set()
    out = []
    for i, item in enumerate(items):
        if isinstance(item, dict):
            group = dict(item)
            taken.update(id(p) for p in _param_list(group.get("params", ()), f"{where} group {i}"))
        elif hasattr(item, "optimizer_group"):
            group = item.optimizer_group(f"{where} group {i}")
            unknown = sorted(k for k in group if k != "params" and k not in defaults)
            if unknown:
                raise InvalidArgumentError(
                    f"{where}: group {i} {item!r} sets {', '.join(unknown)}, which {where} does not take; "
                    f"its settings are {', '.join(sorted(defaults))}"
                )
            group["params"] = [p for p in group["params"] if id(p) not in taken]
            if not group["params"]:
                raise InvalidArgumentError(
                    f"{where}: group {i} {item!r} selects no trainable parameter that an earlier group did not "
                    f"take; check its patterns against model.named_parameters() and that they require grad"
                )
            taken.update(id(p) for p in group["params"])
        else:
            raise ArgumentTypeError(
                f"{where}: group {i} is a {type(item).__name__}; give every group as an nn.ParamGroup or a dict "
                f"{{'params': [...], ...}}, not a mix with bare tensors"
            )
        out.append(group)
    return out


class Optimizer:
    """Base class of optimizers.

    ``params`` is an iterable of tensors, or of dicts ``{"params": [...], **settings}`` or of
    bound ``nn.ParamGroup`` selections (first match wins); settings a group does not give
    come from ``defaults``.

    >>> import ember as em
    >>> dev = em.Device.cpu().autodiff()
    >>> w = em.tensor([1.0, 2.0], device=dev, requires_grad=True)
    >>> opt = em.optim.SGD([w], lr=0.5)
    >>> (w * w).sum().backward()
    >>> opt.step()
    >>> w.tolist()
    [0.0, 0.0]
    """

    #: the per-parameter state entries this optimizer keeps (checked by load_state_dict)
    state_keys: ClassVar[frozenset[str]] = frozenset()
    #: the hyperparameters that must be numbers >= 0 (checked for every group)
    nonnegative: ClassVar[tuple[str, ...]] = ("lr",)

    def __init__(self, params: ParamsT, defaults: dict[str, Any]) -> None:
        self.defaults = dict(defaults)
        self.param_groups: list[dict[str, Any]] = []
        self.state: dict[Tensor, dict[str, Any]] = {}  # Tensor hashes by identity
        name = type(self).__name__
        if isinstance(params, Tensor):
            params = [params]
        if isinstance(params, (set, frozenset)):
            raise ArgumentTypeError(f"{name}: parameters must be an ordered collection (a list), not a set")
        items = list(params) if not isinstance(params, dict) else [params]
        if not items:
            raise InvalidArgumentError(
                f"{name}: params is an empty parameter list; pass model.parameters() of a model with "
                f"trainable parameters (one made on an autodiff device, e.g. Device('cpu').autodiff())"
            )
        if any(hasattr(item, "optimizer_group") for item in items):
            items = _resolve_param_groups(items, name, self.defaults)
        groups = items if isinstance(items[0], dict) else [{"params": items}]
        for group in groups:
            self.add_param_group(group)

    # -- groups ----------------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own settings (missing ones come from defaults)."""
        name = type(self).__name__
        if not isinstance(param_group, dict):
            raise ArgumentTypeError(f"{name}: a parameter group must be a dict, got {type(param_group).__name__}")
        if "params" not in param_group:
            raise InvalidArgumentError(f"{name}: a parameter group needs a 'params' entry")
        group = dict(param_group)
        group["params"] = _param_list(group["params"], f"{name} group {len(self.param_groups)}")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in group["params"]:
            if id(p) in seen:
                raise InvalidArgumentError(
                    f"{name}: a parameter of shape {p.shape} appears twice (in one group or in two groups); "
                    f"each parameter may be listed once"
                )
            seen.add(id(p))
        for key, value in self.defaults.items():
            group.setdefault(key, value)
        self._check_group(group)
        self.param_groups.append(group)

    def _check_group(self, group: dict[str, Any]) -> None:
        """Raise ValueError for an invalid hyperparameter of ``group`` (subclasses extend)."""
        for key in self.nonnegative:
            _nonnegative(self, group, key)

    # -- the update --------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; returns ``closure()`` when one is given."""
        loss = None
        if closure is not None and not callable(closure):
            raise ArgumentTypeError(
                f"{type(self).__name__}.step: closure must be a function returning the loss (or None), got {closure!r}"
            )
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                self._step_group(group)
        return loss

    def _step_group(self, group: dict[str, Any]) -> None:
        raise MissingMethodError(f"{type(self).__name__} does not implement _step_group")

    def _grads(self, group: dict[str, Any], *, decay: bool = True) -> Iterator[tuple[Tensor, Tensor]]:
        """(parameter, gradient) for the parameters of ``group`` that have one: the gradient negated
        under ``maximize`` and, with ``decay``, plus ``weight_decay * p`` (L2, coupled)."""
        maximize = bool(group.get("maximize", False))
        wd = float(group.get("weight_decay", 0.0)) if decay else 0.0
        for p in group["params"]:
            g = _grad(p)
            if g is None:
                continue
            if maximize:
                g = -g
            if wd:
                g = g + p * wd
            yield p, g

    def _state(self, p: Tensor) -> dict[str, Any]:
        state = self.state.get(p)
        if state is None:
            state = self.state[p] = {}
            note_state_created(f"{type(self).__name__} state")
        return state

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients of all parameters (``None``, or zeros with ``set_to_none=False``)."""
        for group in self.param_groups:
            for p in group["params"]:
                g = p._grad
                if g is None:
                    continue
                if set_to_none:
                    set_grad(p, None)
                else:
                    set_grad(p, zeros_like(g))

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {name: Tensor | number}}, "param_groups": [{..., "params": [index]}]}``.

        Parameters are numbered in group order, as in PyTorch; the tensors are values, so the
        dict is a snapshot that later steps do not change.
        """
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: (list(v) if isinstance(v, list) else v) for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                index.setdefault(id(p), len(index))
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                s = self.state.get(p)
                if s:  # new Tensor objects over the current handles: later in-place steps rebind the old ones
                    state[index[id(p)]] = {k: (v.detach() if isinstance(v, Tensor) else v) for k, v in s.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore settings and state saved by :meth:`state_dict` (keys may be JSON strings)."""
        name = type(self).__name__
        if not isinstance(state_dict, Mapping) or "param_groups" not in state_dict:
            raise OptimizerStateError(
                f"{name}.load_state_dict: expected a dict with 'state' and 'param_groups' "
                f"(the output of state_dict()), got {type(state_dict).__name__}"
            )
        saved_groups = list(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise OptimizerStateError(
                f"{name}.load_state_dict: the saved state has {len(saved_groups)} parameter group(s) but this "
                f"optimizer has {len(self.param_groups)}; build the optimizer with the same groups"
            )
        by_index: dict[int, Tensor] = {}
        for i, (saved, group) in enumerate(zip(saved_groups, self.param_groups)):
            ids = list(saved.get("params", ()))
            if len(ids) != len(group["params"]):
                raise OptimizerStateError(
                    f"{name}.load_state_dict: parameter group {i} has {len(ids)} parameter(s) in the saved state "
                    f"but {len(group['params'])} in this optimizer"
                )
            for k, p in zip(ids, group["params"]):
                by_index[int(k)] = p
        state: dict[Tensor, dict[str, Any]] = {}
        for key, entries in dict(state_dict.get("state", {})).items():
            try:
                p = by_index[int(key)]
            except (KeyError, ValueError):
                raise OptimizerStateError(
                    f"{name}.load_state_dict: the saved state has an entry for parameter {key!r}, which no "
                    f"parameter group lists"
                ) from None
            state[p] = {k: self._load_entry(p, int(key), k, v) for k, v in entries.items() if v is not None}
        for saved, group in zip(saved_groups, self.param_groups):
            params = group["params"]
            group.clear()
            for k, v in saved.items():
                if k != "params":
                    group[k] = tuple(v) if isinstance(v, list) and isinstance(self.defaults.get(k), tuple) else v
            group["params"] = params
            for k, v in self.defaults.items():
                group.setdefault(k, v)
        self.state = state

    def _load_entry(self, p: Tensor, index: int, key: str, value: Any) -> Any:
        name = type(self).__name__
        if self.state_keys and key not in self.state_keys:
            raise OptimizerStateError(
                f"{name}.load_state_dict: state entry {key!r} of parameter {index} is not one {name} keeps "
                f"({', '.join(sorted(self.state_keys))}); was the state saved from another optimizer?"
            )
        if key == "step":  # a count; PyTorch saves it as a float tensor
            n = float(value.item() if hasattr(value, "item") else value)
            return int(n) if n.is_integer() else n
        if isinstance(value, np.ndarray) and value.ndim == 0:
            value = value.item()
        if isinstance(value, (bool, int, float)):
            return value
        if not isinstance(value, Tensor):
            value = asarray(np.asarray(value), device=p._device.without_autodiff())
        if value._shape != p._shape:
            raise OptimizerStateError(
                f"{name}.load_state_dict: state {key!r} of parameter {index} has shape {value._shape} but the "
                f"parameter has shape {p._shape}"
            )
        with no_grad():
            value = value.detach()
            if not value._device.same_hardware(p._device):
                value = value.to(p._device.without_autodiff())
            if value._dtype is not p._dtype:
                value = value.astype(p._dtype)
        return value

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)


# -- hyperparameter checks shared by the optimizers ---------------------------------------
def _nonnegative(opt: Optimizer, group: dict[str, Any], key: str) -> None:
    value = group[key]
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0.0:
        raise InvalidArgumentError(
            f"{type(opt).__name__}: {key} must be a number >= 0, got {value!r}; pass e.g. {key}=0.01"
        )


def _unit(opt: Optimizer, value: Any, what: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
        raise InvalidArgumentError(
            f"{type(opt).__name__}: {what} must be a number in [0, 1), got {value!r}; typical values are 0.9 to 0.999"
        )


def _running_average(state: dict[str, Any], key: str, x: Tensor, decay: float) -> Tensor:
    """``state[key] = decay * state[key] + (1 - decay) * x`` (``(1 - decay) * x`` at first), updated
    in place so that em.jit replays update it too; returns the average."""
    keep = 1.0 - decay
    avg = state.get(key)
    if avg is None:
        avg = state[key] = x * keep
    else:
        _store(avg, avg * decay + x * keep)
    return avg


def _own(t: Tensor) -> Tensor:
    """``t``'s values in a buffer of their own (``clone`` may share it): state that is later
    updated in place must not alias the gradient it started from, or em.jit cannot tell them apart."""
    return t * 1.0


def _store(p: Tensor, value: Tensor) -> None:
    """``p.copy_(value)``, for an update computed from ``p`` itself: its shape, dtype and device are
    ``p``'s, so the new handle is stored directly (as copy_ does, seen by em.jit)."""
    if value._shape == p._shape and value._dtype is p._dtype and value._device is p._device:
        set_data(p, value._data)
    else:
        p.copy_(value)


def _grad(p: Tensor) -> Tensor | None:
    """``p.grad`` cut from any graph (``backward(create_graph=True)`` leaves one)."""
    g = p._grad
    if g is not None and g._node is not None:
        g = g.detach()
    return g

"""ParamGroup: one named selection of a model's parameters, and the settings that go with it.

The same group drives freezing, adapters (:mod:`ember.nn.lora`), quantization
(:mod:`ember.quant`), what is saved, and per-group optimizer settings. A parameter is in the
group when any selector picks it and no ``exclude`` pattern matches its path:

- ``*patterns``: shell-style globs over dotted parameter paths (``"encoder.*.weight"``); a
  glob that matches a module's path selects that module's own parameters;
- ``regex``: a regular expression that must match the whole path (``re.fullmatch``);
- ``types``: module classes (``nn.Linear``); every parameter those modules own directly;
- ``params``: an explicit list of parameter paths or tensors.

>>> import ember as em
>>> from ember import nn
>>> dev = em.Device.cpu().autodiff()
>>> model = nn.Sequential(nn.Linear(4, 8, device=dev), nn.ReLU(), nn.Linear(8, 2, device=dev))
>>> list(nn.ParamGroup("*.bias").select(model))
['0.bias', '2.bias']
>>> opt = em.optim.AdamW([nn.ParamGroup("*.bias", weight_decay=0.0).bind(model),
...                       nn.ParamGroup("*", lr=1e-2).bind(model)])
>>> [(len(g["params"]), g["weight_decay"]) for g in opt.param_groups]
[(2, 0.0), (2, 0.01)]
"""

from __future__ import annotations

import fnmatch
import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import ArgumentTypeError, InvalidArgumentError
from ..tensor import Tensor
from .module import Module

__all__ = ["ParamGroup", "as_param_group"]


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    try:
        items = tuple(value)
    except TypeError:
        raise ArgumentTypeError(f"ParamGroup: {what} must be a string or a list of strings, got {value!r}") from None
    for item in items:
        if not isinstance(item, str):
            raise ArgumentTypeError(f"ParamGroup: every entry of {what} must be a string, got {item!r}")
    return items


class ParamGroup:
    """A selection of parameters by glob, regex, module type or explicit list, with settings.

    ``options`` are the group's settings (``lr``, ``weight_decay``, ``betas``...): an
    optimizer given this group uses them over its defaults. ``bind(model)`` attaches the
    model the group selects from, which an optimizer needs; ``select(model)`` returns the
    chosen ``{path: tensor}``. ``trainable_only`` (the default for optimizers) leaves out
    parameters that do not require grad, such as a frozen base under LoRA adapters.
    """

    def __init__(
        self,
        *patterns: str,
        regex: str | None = None,
        types: type | Iterable[type] | None = None,
        params: Iterable[str | Tensor] | None = None,
        exclude: str | Iterable[str] | None = None,
        model: Module | None = None,
        name: str | None = None,
        **options: Any,
    ) -> None:
        self.patterns = _strings(patterns, "patterns")
        self.exclude = _strings(exclude, "exclude")
        if regex is not None and not isinstance(regex, str):
            raise ArgumentTypeError(f"ParamGroup: regex must be a string, got {regex!r}")
        try:
            self.regex = None if regex is None else re.compile(regex)
        except re.error as exc:
            raise InvalidArgumentError(
                f"ParamGroup: regex {regex!r} does not compile ({exc}); fix the pattern"
            ) from None
        if types is None:
            self.types: tuple[type, ...] = ()
        elif isinstance(types, type):
            self.types = (types,)
        else:
            self.types = tuple(types)
        for t in self.types:
            if not (isinstance(t, type) and issubclass(t, Module)):
                raise ArgumentTypeError(f"ParamGroup: types must be Module classes (e.g. nn.Linear), got {t!r}")
        self.names: tuple[str, ...] = ()
        self.tensors: tuple[Tensor, ...] = ()
        for item in params or ():
            if isinstance(item, str):
                self.names += (item,)
            elif isinstance(item, Tensor):
                self.tensors += (item,)
            else:
                raise ArgumentTypeError(
                    f"ParamGroup: params must list parameter paths (str) or tensors, got {type(item).__name__}"
                )
        if not (self.patterns or self.regex or self.types or self.names or self.tensors):
            raise InvalidArgumentError(
                "ParamGroup: give at least one selector: a glob ('*.weight'), regex=, types= or params="
            )
        if model is not None and not isinstance(model, Module):
            raise ArgumentTypeError(f"ParamGroup: model must be an nn.Module, got {type(model).__name__}")
        self.model = model
        self.name = name
        self.options = dict(options)

    # -- selection ---------------------------------------------------------------------------
    def _picks_module(self, path: str, module: Module) -> bool:
        if self.types and isinstance(module, self.types):
            return True
        if path and any(fnmatch.fnmatchcase(path, p) for p in self.patterns):
            return True
        return bool(path and self.regex is not None and self.regex.fullmatch(path))

    def _picks(self, path: str, tensor: Tensor, owner_path: str, owner: Module) -> bool:
        if any(fnmatch.fnmatchcase(path, p) for p in self.exclude):
            return False
        if path in self.names or any(tensor is t for t in self.tensors):
            return True
        if any(fnmatch.fnmatchcase(path, p) for p in self.patterns):
            return True
        if self.regex is not None and self.regex.fullmatch(path):
            return True
        return self._picks_module(owner_path, owner)

    def _model(self, model: Module | None, where: str) -> Module:
        model = self.model if model is None else model
        if model is None:
            raise InvalidArgumentError(
                f"{where}: {self!r} is not bound to a model; pass the model, or bind it: ParamGroup(...).bind(model)"
            )
        if not isinstance(model, Module):
            raise ArgumentTypeError(f"{where}: model must be an nn.Module, got {type(model).__name__}")
        return model

    def _walk(self, model: Module) -> Iterator[tuple[str, Tensor, str, Module]]:
        seen: set[int] = set()
        for mod_path, mod in model.named_modules():
            for pname, t in mod._parameters.items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (f"{mod_path}.{pname}" if mod_path else pname), t, mod_path, mod

    def select(self, model: Module | None = None, *, trainable_only: bool = False) -> OrderedDict[str, Tensor]:
        """``{path: tensor}`` of the parameters of ``model`` (or the bound one) in this group."""
        model = self._model(model, "ParamGroup.select")
        out: OrderedDict[str, Tensor] = OrderedDict()
        for path, t, owner_path, owner in self._walk(model):
            if trainable_only and not t.requires_grad:
                continue
            if self._picks(path, t, owner_path, owner):
                out[path] = t
        missing = [n for n in self.names if n not in out and not trainable_only]
        if missing:
            raise InvalidArgumentError(
                f"ParamGroup: {type(model).__name__} has no parameter {missing[0]!r} (params= lists paths such as "
                f"{next(iter(dict(model.named_parameters())), '<none>')!r})"
            )
        return out

    def select_modules(self, model: Module | None = None) -> list[tuple[str, Module]]:
        """``(path, module)`` of every module this group picks: its path or type matches, or a
        parameter it owns directly is selected (what adapters and quantization act on)."""
        model = self._model(model, "ParamGroup.select_modules")
        chosen = {id(t) for t in self.select(model).values()}
        out = []
        for path, mod in model.named_modules():
            if any(fnmatch.fnmatchcase(path, p) for p in self.exclude):
                continue
            own = [t for t in mod._parameters.values() if t is not None]
            if self._picks_module(path, mod) or any(id(t) in chosen for t in own):
                out.append((path, mod))
        return out

    def bind(self, model: Module) -> ParamGroup:
        """This group attached to ``model`` (a copy; the original stays unbound)."""
        if not isinstance(model, Module):
            raise ArgumentTypeError(f"ParamGroup.bind: model must be an nn.Module, got {type(model).__name__}")
        clone = object.__new__(ParamGroup)
        clone.__dict__.update(self.__dict__)
        clone.options = dict(self.options)
        clone.model = model
        return clone

    # -- what the group drives -----------------------------------------------------------------
    def freeze(self, model: Module | None = None) -> list[str]:
        """Stop the selected parameters from requiring grad; returns their paths."""
        model = self._model(model, "ParamGroup.freeze")
        picked = {id(t) for t in self.select(model).values()}
        names = []
        for mod_path, mod in model.named_modules():
            for pname, t in mod._parameters.items():
                if t is not None and id(t) in picked:
                    mod._frozen.add(pname)
                    t.requires_grad_(False)
                    names.append(f"{mod_path}.{pname}" if mod_path else pname)
        return names

    def unfreeze(self, model: Module | None = None) -> list[str]:
        """Let the selected floating parameters require grad again (on an autodiff device)."""
        model = self._model(model, "ParamGroup.unfreeze")
        picked = {id(t) for t in self.select(model).values()}
        names = []
        for mod_path, mod in model.named_modules():
            for pname, t in mod._parameters.items():
                if t is not None and id(t) in picked:
                    mod._frozen.discard(pname)
                    if t.device.autodiff_enabled and t.dtype.is_floating:
                        t.requires_grad_()
                    names.append(f"{mod_path}.{pname}" if mod_path else pname)
        return names

    def state_dict(self, model: Module | None = None) -> OrderedDict[str, Tensor]:
        """The selected parameters as detached snapshots (load with ``load_state_dict(strict=False)``)."""
        return OrderedDict((k, t.detach()) for k, t in self.select(model).items())

    def optimizer_group(self, where: str = "optimizer") -> dict[str, Any]:
        """``{"params": [...], **options}`` for an optimizer: the bound model's trainable selection."""
        if self.model is None and not (self.patterns or self.regex or self.types or self.names):
            params = [t for t in self.tensors if t.requires_grad]
        else:
            params = list(self.select(self._model(None, where), trainable_only=True).values())
        return {"params": params, **self.options}

    def __repr__(self) -> str:
        parts = [repr(p) for p in self.patterns]
        if self.regex is not None:
            parts.append(f"regex={self.regex.pattern!r}")
        if self.types:
            parts.append("types=(" + ", ".join(t.__name__ for t in self.types) + ")")
        if self.names or self.tensors:
            parts.append(f"params=<{len(self.names) + len(self.tensors)}>")
        if self.exclude:
            parts.append(f"exclude={list(self.exclude)!r}")
        parts += [f"{k}={v!r}" for k, v in self.options.items()]
        return "ParamGroup(" + ", ".join(parts) + ")"


def as_param_group(targets: Any, where: str) -> ParamGroup:
    """``targets`` as a ParamGroup: a group, a glob string, or a list of globs."""
    if isinstance(targets, ParamGroup):
        return targets
    if isinstance(targets, str):
        return ParamGroup(targets)
    if isinstance(targets, (list, tuple)) and targets and all(isinstance(t, str) for t in targets):
        return ParamGroup(*targets)
    raise ArgumentTypeError(f"{where}: targets must be a ParamGroup, a glob string or a list of globs, got {targets!r}")

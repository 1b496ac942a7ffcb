"""Module: the base class of layers and models, and the Parameter marker.

A module registers what it is given on attribute assignment: ``nn.Parameter(t)`` becomes a
parameter (the attribute then holds the plain Tensor), a Module becomes a child, and
``register_buffer`` adds state that is saved but never trained (BatchNorm's running stats).

Autodiff is a property of the device (Burn): parameters made on ``dev.autodiff()`` require
grad; on a plain device the model is inference-only.

>>> import ember as em
>>> from ember import nn
>>> class Net(nn.Module):
...     def __init__(self, device=None):
...         super().__init__()
...         self.fc = nn.Linear(4, 2, device=device)
...     def forward(self, x):
...         return self.fc(x).relu()
>>> net = Net(em.Device.cpu().autodiff())
>>> [name for name, _ in net.named_parameters()]
['fc.weight', 'fc.bias']
"""

from __future__ import annotations

import copy
import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np

from ..autodiff.mode import no_grad
from ..creation import tensor as new_tensor
from ..device import Device, device_arg
from ..dtypes import DType, as_dtype
from ..errors import ArgumentTypeError, CheckpointError, EmberAttributeError, EmberKeyError, MissingMethodError
from ..tensor import Tensor, make_tensor

if TYPE_CHECKING:  # annotations only: each of nn.config and nn.module names the other
    from .config import Config

__all__ = ["Module", "Parameter", "StateDictError", "LoadResult"]


class Parameter:
    """Marks a tensor as a trainable parameter when assigned to a Module attribute.

    ``Tensor`` cannot be subclassed, so this is a wrapper that ``Module.__setattr__`` unwraps:
    the attribute then holds the plain Tensor. On an autodiff device it requires grad (unless
    ``requires_grad=False``); on a plain device it is inference-only.
    """

    __slots__ = ("tensor", "requires_grad")

    def __init__(self, tensor: Tensor, requires_grad: bool = True) -> None:
        if not isinstance(tensor, Tensor):
            raise ArgumentTypeError(f"nn.Parameter: expected an ember Tensor, got {type(tensor).__name__}")
        self.tensor = tensor
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        return f"Parameter({self.tensor!r})"


class StateDictError(CheckpointError):
    """A state dict does not fit the module (missing, unexpected or mis-shaped entries)."""


class LoadResult(NamedTuple):
    """What ``load_state_dict(strict=False)`` could not match."""

    missing_keys: list[str]
    unexpected_keys: list[str]


def _as_leaf(t: Tensor, trainable: bool) -> Tensor:
    """``t`` as a graph leaf; requiring grad when trainable and its device has autodiff."""
    if t._node is not None:
        t = t.detach()
    if trainable and t._device.autodiff_enabled and t._dtype.is_floating:
        t.requires_grad_()
    elif t._rg:
        t.requires_grad_(False)
    return t


class Module:
    """Base class of every layer and model: subclass it, assign layers and parameters in
    ``__init__`` (after ``super().__init__()``) and define ``forward``."""

    #: the ``...Config`` dataclass that builds this layer (its fields are constructor arguments)
    config_class: ClassVar[type[Config] | None] = None

    training: bool
    _parameters: dict[str, Tensor | None]
    _buffers: dict[str, Tensor | None]
    _modules: dict[str, Module | None]
    _non_persistent: set[str]
    _frozen: set[str]

    def __init__(self) -> None:
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = {}
        d["_buffers"] = {}
        d["_modules"] = {}
        d["_non_persistent"] = set()
        d["_frozen"] = set()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cfg = cls.__dict__.get("config_class")
        if cfg is not None:
            cfg.module_class = cls

    def config(self) -> Config:
        """The config that rebuilds this layer (its hyperparameters, not its weights)."""
        cfg = self.__dict__.get("_config")
        if cfg is None:
            raise ArgumentTypeError(
                f"{type(self).__name__} has no config: layers built from a Config dataclass keep it in self._config"
            )
        return dataclasses.replace(cfg)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise MissingMethodError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # -- registration --------------------------------------------------------------------
    def _check_init(self, name: str) -> None:
        if "_parameters" not in self.__dict__:
            raise EmberAttributeError(
                f"cannot assign {name!r} before Module.__init__() ran: call super().__init__() "
                f"first in {type(self).__name__}.__init__"
            )

    def _discard(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        self._non_persistent.discard(name)
        self._frozen.discard(name)
        self.__dict__.pop(name, None)

    def register_parameter(self, name: str, param: Parameter | Tensor | None) -> None:
        """Add a parameter (a Parameter, a Tensor, or None for an absent optional one)."""
        self._check_init(name)
        if not isinstance(name, str) or not name or "." in name:
            raise EmberKeyError(
                f"{type(self).__name__}.register_parameter: name must be a non-empty string without '.', got {name!r}"
            )
        trainable = True
        if isinstance(param, Parameter):
            trainable = param.requires_grad
            param = param.tensor
        elif param is not None and not isinstance(param, Tensor):
            raise ArgumentTypeError(
                f"{type(self).__name__}.register_parameter: cannot register {type(param).__name__} as parameter "
                f"{name!r}; expected a Tensor, a Parameter or None"
            )
        self._discard(name)
        if param is not None:
            param = _as_leaf(param, trainable)
        if not trainable:
            self._frozen.add(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Add state that is saved in ``state_dict`` (if persistent) but never requires grad."""
        self._check_init(name)
        if not isinstance(name, str) or not name or "." in name:
            raise EmberKeyError(
                f"{type(self).__name__}.register_buffer: name must be a non-empty string without '.', got {name!r}"
            )
        if tensor is not None and not isinstance(tensor, Tensor):
            raise ArgumentTypeError(
                f"{type(self).__name__}.register_buffer: cannot register {type(tensor).__name__} as buffer "
                f"{name!r}; expected a Tensor or None"
            )
        self._discard(name)
        self._buffers[name] = None if tensor is None else _as_leaf(tensor, False)
        if not persistent:
            self._non_persistent.add(name)

    def register_module(self, name: str, module: Module | None) -> None:
        """Add a child module (what assigning a Module attribute does)."""
        self._check_init(name)
        if not isinstance(name, str) or not name or "." in name:
            raise EmberKeyError(
                f"{type(self).__name__}.register_module: name must be a non-empty string without '.', got {name!r}"
            )
        if module is not None and not isinstance(module, Module):
            raise ArgumentTypeError(
                f"{type(self).__name__}.register_module: cannot register {type(module).__name__} as child module "
                f"{name!r}; expected a Module or None"
            )
        self._discard(name)
        self._modules[name] = module

    add_module = register_module

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Parameter):
            self.register_parameter(name, value)
        elif isinstance(value, Module):
            self.register_module(name, value)
        elif "_parameters" in self.__dict__ and name in self._parameters:
            if value is not None:
                raise ArgumentTypeError(
                    f"{type(self).__name__}.{name} is a parameter; assign nn.Parameter(tensor) (or None) to "
                    f"replace it, or change its values with `with em.no_grad(): m.{name}.copy_(t)`"
                )
            self._parameters[name] = None
        elif "_buffers" in self.__dict__ and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise ArgumentTypeError(f"{type(self).__name__}.{name} is a buffer; assign a Tensor or None")
            self._buffers[name] = None if value is None else _as_leaf(value, False)
        elif "_modules" in self.__dict__ and name in self._modules:
            if value is not None:
                raise ArgumentTypeError(f"{type(self).__name__}.{name} is a child module; assign a Module or None")
            self._modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            entries = d.get(table)
            if entries is not None and name in entries:
                return entries[name]
        raise EmberAttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        if name in self._parameters or name in self._buffers or name in self._modules:
            self._discard(name)
        else:
            object.__delattr__(self, name)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules))

    # -- traversal -----------------------------------------------------------------------
    def named_modules(self, prefix: str = "", memo: set[int] | None = None) -> Iterator[tuple[str, Module]]:
        """This module and every descendant, each once, with dotted names."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for name, child in self._modules.items():
            if child is not None:
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def _named_tensors(self, table: str, prefix: str, recurse: bool) -> Iterator[tuple[str, Tensor]]:
        seen: set[int] = set()
        modules = self.named_modules(prefix) if recurse else iter([(prefix, self)])
        for mod_name, mod in modules:
            for name, t in getattr(mod, table).items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (f"{mod_name}.{name}" if mod_name else name), t

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        """(dotted name, tensor) of every parameter; a tensor shared by two layers appears once."""
        return self._named_tensors("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, t in self.named_parameters(recurse=recurse):
            yield t

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[tuple[str, Tensor]]:
        return self._named_tensors("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, t in self.named_buffers(recurse=recurse):
            yield t

    def num_parameters(self, trainable_only: bool = False) -> int:
        """Total number of parameter elements (only those requiring grad if ``trainable_only``)."""
        return sum(p.size for p in self.parameters() if p.requires_grad or not trainable_only)

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every descendant and then on this module; returns self."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def get_submodule(self, target: str) -> Module:
        mod: Module = self
        for part in target.split(".") if target else []:
            child = mod._modules.get(part)
            if child is None:
                raise EmberAttributeError(f"{type(mod).__name__} has no child module {part!r} (looking up {target!r})")
            mod = child
        return mod

    # -- state ---------------------------------------------------------------------------
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> OrderedDict[str, Tensor]:
        """Name -> tensor of every parameter and persistent buffer, in registration order.

        The tensors are detached snapshots: later updates of the model do not change them.
        """
        out: OrderedDict[str, Tensor] = OrderedDict()
        for mod_name, mod in self.named_modules(prefix):
            base = f"{mod_name}." if mod_name else ""
            for name, t in mod._parameters.items():
                if t is not None:
                    out[base + name] = t if keep_vars else t.detach()
            for name, t in mod._buffers.items():
                if t is not None and name not in mod._non_persistent:
                    out[base + name] = t if keep_vars else t.detach()
        return out

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> LoadResult:
        """Copy values from ``state_dict`` into this module's tensors (keeping their device).

        Values may be Tensors or numpy arrays. With ``strict`` any missing or unexpected key is
        an error; a shape mismatch always is. One error lists every problem.
        """
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        mismatched = []
        values = {}
        for key, target in own.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                value = np.asarray(value)
            shape = tuple(value.shape)
            if shape != target.shape:
                mismatched.append(f"{key}: checkpoint {shape}, model {target.shape}")
            values[key] = value
        if mismatched or (strict and (missing or unexpected)):
            lines = [f"load_state_dict: the state dict does not fit {type(self).__name__}:"]
            if missing:
                lines.append(f"  missing keys ({len(missing)}): {', '.join(missing)}")
            if unexpected:
                lines.append(f"  unexpected keys ({len(unexpected)}): {', '.join(unexpected)}")
            if mismatched:
                lines.append(f"  shape mismatches ({len(mismatched)}): {'; '.join(mismatched)}")
            if not mismatched:
                lines.append("  Pass strict=False to load the matching keys only.")
            raise StateDictError("\n".join(lines))
        with no_grad():
            for key, value in values.items():
                target = own[key]
                if not isinstance(value, Tensor):
                    value = new_tensor(value, dtype=target.dtype, device=target.device.without_autodiff())
                target.copy_(value)
        return LoadResult(missing, unexpected)

    # -- devices, dtypes, modes ----------------------------------------------------------
    @property
    def device(self) -> Device | None:
        """The device of the first parameter or buffer (None for a module without any)."""
        for t in self.parameters():
            return t.device
        for t in self.buffers():
            return t.device
        return None

    def _autodiff_now(self) -> bool:
        return any(t.device.autodiff_enabled for t in self.parameters())

    def to(self, target: Any = None, dtype: Any = None, *, autodiff: bool | None = None) -> Module:
        """Move parameters and buffers to a device and/or cast floating ones to a dtype; returns self.

        The model keeps its autodiff choice: a trainable model moved to ``Device.cuda()`` is
        trainable there (on its autodiff variant). ``to(dev.autodiff())`` or ``autodiff=True``
        makes it trainable; ``autodiff=False`` gives an inference-only model. Tensors already in
        place are kept; moved ones are new tensors (build optimizers after moving the model).
        """
        dev: Device | None = None
        dt: DType | None = as_dtype(dtype) if dtype is not None else None
        if isinstance(target, DType):
            dt = target
        elif target is not None:
            if isinstance(target, str):
                try:
                    dt = as_dtype(target)
                except (TypeError, ValueError):
                    dev = device_arg(target)
            else:
                dev = device_arg(target)
        if dev is None and autodiff is None and dt is None:
            return self
        if autodiff is None:
            autodiff = (dev is not None and dev.autodiff_enabled) or self._autodiff_now()
        memo: dict[int, Tensor] = {}

        def move(t: Tensor, trainable: bool) -> Tensor:
            if id(t) in memo:
                return memo[id(t)]
            place = t.device if dev is None else dev
            place = place.autodiff() if autodiff else place.without_autodiff()
            cast = dt is not None and t.dtype.is_floating and t.dtype is not dt
            if t.device is place and not cast:  # already there: keep the tensor (and its .grad)
                memo[id(t)] = t
                return t
            out = t.detach()
            if cast:
                out = out.astype(dt)
            out = out.to(place)
            out = make_tensor(out._data, out._shape, out._dtype, place)
            memo[id(t)] = _as_leaf(out, trainable)
            return memo[id(t)]

        for mod in self.modules():
            for name, t in mod._parameters.items():
                if t is not None:
                    frozen = name in mod._frozen or (t.device.autodiff_enabled and not t.requires_grad)
                    if frozen:
                        mod._frozen.add(name)
                    mod._parameters[name] = move(t, not frozen)
            for name, t in mod._buffers.items():
                if t is not None:
                    mod._buffers[name] = move(t, False)
        return self

    def float(self) -> Module:
        return self.to("float32")

    def double(self) -> Module:
        return self.to("float64")

    def half(self) -> Module:
        return self.to("float16")

    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active, batch norm uses batch statistics) recursively."""
        for mod in self.modules():
            mod.__dict__["training"] = bool(mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode recursively (same as ``train(False)``)."""
        return self.train(False)

    def freeze(self) -> Module:
        """Stop every parameter from requiring grad (they stay out of training until unfreeze)."""
        for mod in self.modules():
            for name, t in mod._parameters.items():
                if t is not None:
                    mod._frozen.add(name)
                    t.requires_grad_(False)
        return self

    def unfreeze(self) -> Module:
        """Let parameters require grad again (on an autodiff device; a plain one stays inference-only)."""
        for mod in self.modules():
            mod._frozen.clear()
            for t in mod._parameters.values():
                if t is not None and t.device.autodiff_enabled and t.dtype.is_floating:
                    t.requires_grad_()
        return self

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """PyTorch spelling of :meth:`unfreeze` / :meth:`freeze`."""
        return self.unfreeze() if requires_grad else self.freeze()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear ``.grad`` of every parameter (to None, or to zeros with ``set_to_none=False``)."""
        for t in self.parameters():
            if set_to_none or t.grad is None:
                t.grad = None
            else:
                t.grad = t.grad * 0.0

    # -- copying and printing ------------------------------------------------------------
    def __deepcopy__(self, memo: dict[int, Any]) -> Module:
        """A copy with its own tensors (handles are shared: tensors are values)."""
        for t in list(self.parameters()) + list(self.buffers()):
            if id(t) not in memo:
                twin = make_tensor(t._data, t._shape, t._dtype, t._device)
                memo[id(t)] = twin.requires_grad_() if t.requires_grad else twin
        cls = type(self)
        clone = cls.__new__(cls)
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            clone.__dict__[key] = copy.deepcopy(value, memo)
        return clone

    def extra_repr(self) -> str:
        """The text inside the parentheses of this module's repr line (default: the config fields)."""
        cfg = self.__dict__.get("_config")
        if cfg is None:
            return ""
        return ", ".join(f"{f.name}={getattr(cfg, f.name)!r}" for f in dataclasses.fields(cfg))

    def __repr__(self) -> str:
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        for name, child in self._modules.items():
            body = repr(child).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        if not self._modules:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines) + "\n)"

"""Containers: Sequential, ModuleList, ModuleDict."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ArgumentTypeError, EmberIndexError, EmberKeyError
from .config import Config, from_typed_dict, typed_dict
from .module import Module

__all__ = ["Sequential", "SequentialConfig", "ModuleList", "ModuleDict"]


def _position(index: Any, n: int, where: str) -> int:
    """``index`` as a position in a container of ``n`` modules (negative counts from the end)."""
    if isinstance(index, bool) or not hasattr(index, "__index__"):
        raise ArgumentTypeError(f"{where}: index must be an int or a slice, got {index!r} ({type(index).__name__})")
    i = int(index)
    if not -n <= i < n:
        raise EmberIndexError(f"{where}: index {i} is out of range for {n} module(s) (valid: {-n}..{n - 1})")
    return i % n


@dataclass
class SequentialConfig(Config):
    """Layers applied in order; ``layers`` holds the configs of the layers."""

    layers: list[Config] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.layers = [from_typed_dict(c) if isinstance(c, dict) else c for c in self.layers]  # type: ignore[arg-type]

    def init(self, device: Any = None, dtype: Any = None) -> Sequential:
        return Sequential(*[c.init(device, dtype) for c in self.layers])

    def to_dict(self) -> dict[str, Any]:
        """``{"layers": [{"type": "LinearConfig", ...}, ...]}`` (the types are needed to rebuild)."""
        return {"layers": [typed_dict(c) for c in self.layers]}


def _check_module(value: Any, where: str) -> Module:
    if not isinstance(value, Module):
        raise ArgumentTypeError(f"{where}: expected an nn.Module, got {type(value).__name__}")
    return value


class Sequential(Module):
    """Applies its layers in order: ``Sequential(Linear(4, 8), ReLU(), Linear(8, 2))``."""

    config_class = SequentialConfig

    def __init__(self, *layers: Module | Mapping[str, Module]) -> None:
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], Mapping):
            for name, layer in layers[0].items():
                self.register_module(name, _check_module(layer, "Sequential"))
        else:
            for i, layer in enumerate(layers):
                self.register_module(str(i), _check_module(layer, "Sequential"))

    def forward(self, x: Any) -> Any:
        for layer in self._modules.values():
            if layer is not None:
                x = layer(x)
        return x

    def config(self) -> SequentialConfig:
        return SequentialConfig([m.config() for m in self._modules.values() if m is not None])

    def append(self, layer: Module) -> Sequential:
        self.register_module(str(len(self._modules)), _check_module(layer, "Sequential.append"))
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(m for m in self._modules.values() if m is not None)

    def __getitem__(self, index: int | slice) -> Any:
        items = list(self._modules.items())
        if isinstance(index, slice):
            return Sequential(OrderedDict(items[index]))
        return items[_position(index, len(items), "Sequential")][1]


class ModuleList(Module):
    """A list of modules whose parameters are registered (names ``0``, ``1``, ...)."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        self.register_module(str(len(self._modules)), _check_module(module, "ModuleList.append"))
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())  # type: ignore[arg-type]

    def __getitem__(self, index: int | slice) -> Any:
        values = list(self._modules.values())
        if isinstance(index, slice):
            return ModuleList(values[index])  # type: ignore[arg-type]
        return values[_position(index, len(values), "ModuleList")]

    def __setitem__(self, index: int, module: Module) -> None:
        name = list(self._modules)[index]
        self._modules[name] = _check_module(module, "ModuleList")


class ModuleDict(Module):
    """A dict of modules whose parameters are registered under their keys."""

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        for name, m in (modules or {}).items():
            self[name] = m

    def __getitem__(self, name: str) -> Module:
        if name not in self._modules:
            raise EmberKeyError(f"ModuleDict: no module named {name!r}; the keys are {list(self._modules)}")
        return self._modules[name]  # type: ignore[return-value]

    def __setitem__(self, name: str, module: Module) -> None:
        self.register_module(name, _check_module(module, "ModuleDict"))

    def __contains__(self, name: object) -> bool:
        return name in self._modules

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def keys(self) -> Iterable[str]:
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        return self.named_children()

    def values(self) -> Iterable[Module]:
        return self.children()

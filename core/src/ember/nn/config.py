"""Burn-style layer configs: a dataclass of hyperparameters with ``.init(device)``.

Every layer ``X`` has an ``XConfig`` whose fields are ``X``'s constructor arguments (without
``device``/``dtype``), so ``XConfig(...).init(dev)`` and ``X(..., device=dev)`` build the same
layer, and ``layer.config()`` gives the config back. Configs hold only numbers, strings,
booleans, tuples and other configs, so ``json.dumps(dataclasses.asdict(cfg))`` works and
``XConfig.from_dict(d)`` rebuilds one (checkpoints store the model config that way).

>>> import ember as em
>>> from ember import nn
>>> cfg = nn.LinearConfig(4, 2)
>>> cfg.to_dict()
{'in_features': 4, 'out_features': 2, 'bias': True}
>>> cfg.init(em.Device.cpu()).weight.shape
(2, 4)
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING, Any, ClassVar

from ..errors import ArgumentTypeError, EmberKeyError

if TYPE_CHECKING:  # annotations only: each of nn.config and nn.module names the other
    from .module import Module

__all__ = ["Config", "config_from_dict"]

_REGISTRY: dict[str, type[Config]] = {}


class Config:
    """Base class of layer configs (subclasses are dataclasses)."""

    #: the layer this config builds; set when the layer class names this config
    module_class: ClassVar[type[Module] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls

    def kwargs(self) -> dict[str, Any]:
        """The constructor arguments of the layer (the fields, by name)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def init(self, device: Any = None, dtype: Any = None) -> Module:
        """Build the layer on ``device`` (default: ``Device.default()``) with ``dtype`` parameters."""
        cls = type(self).module_class
        if cls is None:
            raise ArgumentTypeError(f"{type(self).__name__} is not attached to a layer class")
        params = inspect.signature(cls.__init__).parameters
        extra = {"device": device, "dtype": dtype} if "device" in params else {}
        return cls(**self.kwargs(), **extra)

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON-ready values (nested configs become dicts)."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        """Rebuild a config from :meth:`to_dict`'s output (after a JSON round trip too: lists
        become tuples again)."""
        return cls(**{k: _tuples(v) for k, v in data.items()})


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def config_from_dict(name: str, data: dict[str, Any]) -> Config:
    """Rebuild a config from its class name and ``to_dict()`` output."""
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise EmberKeyError(
            f"config_from_dict: no layer config named {name!r} is defined; known: {', '.join(sorted(_REGISTRY))}"
        ) from None
    return cls.from_dict(data)


def typed_dict(config: Config) -> dict[str, Any]:
    """``{"type": class name, **to_dict()}``: enough to rebuild a config of unknown class."""
    return {"type": type(config).__name__, **config.to_dict()}


def from_typed_dict(data: dict[str, Any]) -> Config:
    body = dict(data)
    return config_from_dict(body.pop("type"), body)


def as_config(value: Any, cls: type[Config]) -> Any:
    """``value`` as a ``cls`` instance when it is a dict from ``to_dict`` (nested configs)."""
    if isinstance(value, dict):
        return cls.from_dict(value)
    return value

"""Which strategy each device's pools follow, and which pools each device has: ember.memory's own
state, in a module of its own so that :class:`~ember.memory.pool.BufferPool` records itself at
construction through a module-level import (ember.memory imports the pool, not the other way)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from .. import config
from .strategies import _check_strategy

if TYPE_CHECKING:  # annotations only: .pool imports this module (a cycle)
    from .pool import BufferPool

__all__ = ["set_device_strategy", "device_strategy", "device_pools"]

_DEVICE_STRATEGY: dict[str, str] = {}
_DEVICE_POOLS: dict[str, weakref.WeakSet[BufferPool[Any]]] = {}


def _add_pool(device: str, pool: BufferPool[Any]) -> None:
    """Record a new pool of ``device`` (BufferPool does, when it is made with ``device=``)."""
    _DEVICE_POOLS.setdefault(device, weakref.WeakSet()).add(pool)


def device_pools(device: str) -> list[BufferPool[Any]]:
    """The live pools made for ``device`` (a label such as ``"opencl:0"``)."""
    return list(_DEVICE_POOLS.get(device, ()))


def set_device_strategy(device: str, strategy: str) -> None:
    """Use ``strategy`` for the pools of ``device`` (a label such as ``"opencl:0"``): those made
    from now on, and those that exist (their cached buffers are released first)."""
    name = _check_strategy(strategy, "memory")
    _DEVICE_STRATEGY[device] = name
    for pool in device_pools(device):
        pool.set_strategy(name)


def device_strategy(device: str) -> str:
    """The strategy the pools of ``device`` use: the one set for it, else ``EMBER_MEMORY``."""
    return _DEVICE_STRATEGY.get(device) or config.memory_strategy()

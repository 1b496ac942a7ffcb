"""In-process devices the suite registers itself, through ``get_registry().register(...)``.

``fake_device()``: a second device (kind ``conformancefake``, a tiny numpy backend holding only
what the cross-device tests use), so device rules can be checked with one real device.

``primitives_only(device)``: the same hardware with every native fast path hidden (kind
``<kind>-primitives``), so each composite runs through ember's core definition on the
backend's required primitives, as it would on a backend that implements nothing else
(``--ember-primitives-only``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as em
from ember.backend import REQUIRED_PRIMITIVES, Backend, native
from ember.plugins import BackendSpec, get_registry

__all__ = ["FAKE_KIND", "FakeBackend", "fake_device", "primitives_only"]

FAKE_KIND = "conformancefake"


class FakeBackend(Backend):
    """numpy arrays as handles; a handful of ops (transfers, arithmetic, sum, reshape, expand)."""

    name = "conformance-fake"

    @native
    def from_numpy(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, copy=True)

    @native
    def to_numpy(self, a: np.ndarray) -> np.ndarray:
        return np.asarray(a)

    @native
    def full(self, *, shape: tuple[int, ...], value: Any, dtype: Any) -> np.ndarray:
        return np.full(shape, value, dtype=dtype.numpy)

    @native
    def add(self, a: np.ndarray, b: Any) -> np.ndarray:
        return np.asarray(np.add(a, b)).astype(a.dtype, copy=False)

    @native
    def mul(self, a: np.ndarray, b: Any) -> np.ndarray:
        return np.asarray(np.multiply(a, b)).astype(a.dtype, copy=False)

    @native
    def sum(self, a: np.ndarray, *, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return np.asarray(np.sum(a, axis=axes, keepdims=keepdims)).astype(a.dtype, copy=False)

    @native
    def reshape(self, a: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
        return a.reshape(shape)

    @native
    def expand(self, a: np.ndarray, *, shape: tuple[int, ...]) -> np.ndarray:
        return np.broadcast_to(a, shape)

    @native
    def cast(self, a: np.ndarray, *, dtype: Any) -> np.ndarray:
        return a.astype(dtype.numpy)


class _FakePlugin:
    """The plugin object registered directly with the registry (no entry point)."""

    @em.hookimpl
    def ember_register_backends(self, registry: Any) -> None:
        registry.add_backend(BackendSpec(name="conformance-fake", kinds=(FAKE_KIND,), loader=lambda: FakeBackend))


def fake_device() -> em.Device:
    """The fake second device, registering its plugin on first use."""
    registry = get_registry()
    if not registry.specs.get(FAKE_KIND):
        registry.register(_FakePlugin(), name="ember-conformance-fake")
    return em.Device(FAKE_KIND, 0)


def _primitives_only_class(base: type[Backend]) -> type[Backend]:
    class PrimitivesOnly(base):  # type: ignore[misc, valid-type]
        """``base`` with only the required primitives visible to dispatch."""

        name = f"{base.name}-primitives"

        def implementation(self, op: str) -> Any:
            return super().implementation(op) if op in REQUIRED_PRIMITIVES else None

    PrimitivesOnly.__name__ = PrimitivesOnly.__qualname__ = f"PrimitivesOnly{base.__name__}"
    return PrimitivesOnly


class _PrimitivesPlugin:
    def __init__(self, kind: str, backend: type[Backend]) -> None:
        self.kind = kind
        self.backend = backend

    @em.hookimpl
    def ember_register_backends(self, registry: Any) -> None:
        backend = self.backend
        registry.add_backend(BackendSpec(name=backend.name, kinds=(self.kind,), loader=lambda: backend))


def primitives_only(device: em.Device) -> em.Device:
    """``device`` with its backend's native fast paths hidden (registered on first use)."""
    kind = f"{device.kind}-primitives"
    registry = get_registry()
    if not registry.specs.get(kind):
        plugin = _PrimitivesPlugin(kind, _primitives_only_class(type(device.backend)))
        registry.register(plugin, name=f"ember-conformance-{kind}")
    return em.Device(kind, device.index)

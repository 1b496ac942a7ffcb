"""The implementations a workload runs on: ember on the chosen device, and the peers numpy,
PyTorch and CuPy, each imported only when asked for. A peer that cannot be imported is
reported as "not installed", never dropped."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .harness import Case, Unavailable, median_seconds, no_sync

__all__ = [
    "PEERS",
    "Impl",
    "ember_impl",
    "ember_jit_impl",
    "ember_unfused_impl",
    "peer_impl",
    "torch_sync",
    "cupy_seconds",
    "cupy_sync",
    "import_peer",
]

#: the peers in table order; numpy runs on the host, cupy on the GPU, torch on either
PEERS = ("numpy", "torch", "cupy")


@dataclass(frozen=True)
class Impl:
    """One implementation: ``build(module, size)`` calls that workload module's builder."""

    name: str
    label: str
    build: Callable[[ModuleType, dict[str, int]], Case]
    #: the workload module's builder this implementation calls (its name, unless it is a variant)
    builder: str = ""

    @property
    def builds(self) -> str:
        return self.builder or self.name


def import_peer(name: str) -> ModuleType:
    """Import a peer's library; ``ImportError`` with "not installed" if it is absent."""
    if importlib.util.find_spec(name) is None:
        raise ImportError("not installed")
    module = importlib.import_module(name)
    if name == "torch":
        # float32 stays float32 on CUDA: no TF32 in matmul or convolution (shared/GPU-NOTES.md)
        module.backends.cuda.matmul.allow_tf32 = False
        module.backends.cudnn.allow_tf32 = False
    return module


def _builder(module: ModuleType, name: str) -> Callable[..., Case]:
    fn = getattr(module, name, None)
    if fn is None:
        raise Unavailable(f"{module.ID} has no {name} version")
    return fn


def ember_impl(device: Any) -> Impl:
    """Ember on ``device``; training workloads get its autodiff variant."""
    return Impl("ember", f"ember {device}", lambda m, size: _builder(m, "ember")(device, size))


def ember_unfused_impl(device: Any) -> Impl:
    """Ember on ``device`` with the lazy layer off (every op its own kernel): the fused run's
    baseline, on devices that fuse."""

    def build(m: ModuleType, size: dict[str, int]) -> Case:
        import ember as em

        with em.lazy.fusion(False, device):  # inputs and parameters made eagerly too
            case = _builder(m, "ember")(device, size)

        def step() -> Any:
            with em.lazy.fusion(False, device):
                return case.step()

        return Case(step, case.sync, case.result)

    return Impl("ember-unfused", f"ember {device} (EMBER_FUSION=0)", build, builder="ember")


def ember_jit_impl(device: Any) -> Impl:
    """Ember on ``device`` with the step under ``em.jit`` (captured once, then replayed); only
    workloads with an ``ember_jit`` builder have this row."""
    return Impl("ember_jit", f"ember {device} em.jit", lambda m, size: _builder(m, "ember_jit")(device, size))


def peer_impl(name: str, torch_device: str) -> Impl:
    """A peer by name; torch runs on ``torch_device`` ('cpu', 'cuda', 'cuda:1')."""
    if name == "numpy":
        return Impl("numpy", "numpy", lambda m, size: _builder(m, "numpy")(size))
    if name == "cupy":
        return Impl("cupy", "cupy", lambda m, size: _builder(m, "cupy")(size))
    if name == "torch":

        def build(m: ModuleType, size: dict[str, int]) -> Case:
            th = import_peer("torch")
            device = th.device(torch_device)
            if device.type == "cuda" and not th.cuda.is_available():
                raise Unavailable("torch sees no CUDA device (pass --torch-device cpu to compare on the host)")
            return _builder(m, "torch")(device, size)

        return Impl("torch", f"torch {torch_device}", build)
    raise ValueError(f"unknown peer {name!r}; the peers are {', '.join(PEERS)}")


def torch_sync(device: Any) -> Callable[[], None]:
    """Wait for a torch device: ``torch.cuda.synchronize`` on CUDA, nothing on the CPU."""
    if device.type != "cuda":
        return no_sync
    import torch

    return lambda: torch.cuda.synchronize(device)


def cupy_seconds(dev: Any, upload, call, iters: int, warmup: int = 3) -> float | None:
    """Median seconds of ``call(cupy, data)`` on the GPU of a cuda device, ``data = upload(cupy)``;
    None off cuda or without CuPy (the peer column of benchmarks.fft and benchmarks.linalg)."""
    if dev.kind != "cuda":
        return None
    try:
        import cupy as cp
    except ImportError:
        return None
    with cp.cuda.Device(dev.index):
        data = upload(cp)
        cp.cuda.Device().synchronize()
        return median_seconds(lambda: call(cp, data), warmup, iters)


def cupy_sync() -> Callable[[], None]:
    """Wait for CuPy's current device."""
    import cupy

    return cupy.cuda.Device().synchronize

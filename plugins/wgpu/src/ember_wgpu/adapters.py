"""WebGPU adapters: a stable, numbered list, their description, and opening a device on one.

``Device.wgpu(i)`` (or ``EMBER_WGPU_ADAPTER=i``) picks entry ``i`` of :func:`adapters`. The
list starts with the adapter wgpu chooses for ``power_preference="high-performance"``, then
the rest ordered by type (discrete, integrated, virtual, CPU), backend (Vulkan, Metal and
D3D12 before OpenGL) and name, so indices do not change between runs on one machine.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

__all__ = ["adapters", "describe", "open_device", "cache_identity", "WANTED_LIMITS", "summary"]

_TYPE_RANK = {"DiscreteGPU": 0, "IntegratedGPU": 1, "VirtualGPU": 2, "CPU": 3}
_BACKEND_RANK = {"Vulkan": 0, "Metal": 0, "D3D12": 0, "OpenGL": 2, "GL": 2}

#: limits requested at the adapter's maximum (or minimum, for alignments): the defaults of
#: WebGPU (128 MiB bindings, 8 storage buffers, 256-byte offsets) are far below what GPUs do
WANTED_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-storage-buffers-per-shader-stage",
    "max-uniform-buffer-binding-size",
    "max-dynamic-uniform-buffers-per-pipeline-layout",
    "max-bindings-per-bind-group",
    "max-compute-workgroup-storage-size",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-workgroup-size-z",
    "max-compute-workgroups-per-dimension",
    "min-uniform-buffer-offset-alignment",
    "min-storage-buffer-offset-alignment",
)

#: features ember-wgpu uses when the adapter has them
WANTED_FEATURES = ("shader-f16",)

#: features that matter for compute, shown by ``ember devices`` when the adapter has them
_SHOWN_FEATURES = (
    "shader-f16",
    "shader-f64",
    "shader-int64",
    "shader-float32-atomic",
    "subgroup",
    "timestamp-query",
)

#: limits shown by ``ember devices``
_SHOWN_LIMITS = (
    "max-buffer-size",
    "max-storage-buffer-binding-size",
    "max-storage-buffers-per-shader-stage",
    "max-compute-workgroup-size-x",
    "max-compute-workgroup-size-y",
    "max-compute-workgroup-size-z",
    "max-compute-invocations-per-workgroup",
    "max-compute-workgroup-storage-size",
    "max-compute-workgroups-per-dimension",
)


def _wgpu() -> Any:
    # wgpu-native prints "XDG_RUNTIME_DIR is invalid" through the GL loader on headless
    # machines; it is harmless for compute, so give it a value when there is none
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    import wgpu  # configures its own "wgpu" logger class: ask for the logger only afterwards

    logging.getLogger("wgpu").setLevel(logging.ERROR)
    return wgpu


def _info(adapter: Any) -> dict[str, Any]:
    info = adapter.info
    return {k: info[k] for k in info}


def _key(adapter: Any) -> tuple[str, str]:
    info = adapter.info
    return (info.get("device", ""), info.get("backend_type", ""))


@functools.lru_cache(maxsize=1)
def adapters() -> tuple[Any, ...]:
    """Every adapter wgpu finds, in ember's stable order (index = ``Device.wgpu(index)``)."""
    wgpu = _wgpu()
    found = list(wgpu.gpu.enumerate_adapters_sync())
    try:
        preferred = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except Exception:  # no adapter at all
        preferred = None
    pkey = _key(preferred) if preferred is not None else None

    def rank(a: Any) -> tuple:
        info = a.info
        return (
            0 if _key(a) == pkey else 1,
            _TYPE_RANK.get(info.get("adapter_type", ""), 4),
            _BACKEND_RANK.get(info.get("backend_type", ""), 1),
            info.get("device", ""),
            info.get("backend_type", ""),
        )

    unique: dict[tuple[str, str], Any] = {}
    for a in sorted(found, key=rank):
        unique.setdefault(_key(a), a)
    return tuple(unique.values())


def describe(index: int) -> dict[str, Any]:
    """Name, backend, features and key limits of adapter ``index``."""
    found = adapters()
    if not 0 <= index < len(found):
        return {"name": f"no adapter {index}", "adapters": len(found)}
    a = found[index]
    info = _info(a)
    limits = a.limits
    return {
        "name": info.get("device", "?"),
        "vendor": info.get("vendor", "") or "?",
        "backend": info.get("backend_type", "?"),
        "adapter_type": info.get("adapter_type", "?"),
        "driver": info.get("description", ""),
        "features": [f for f in _SHOWN_FEATURES if f in a.features],
        "limits": {k: limits[k] for k in _SHOWN_LIMITS if k in limits},
        "fp16": "shader-f16" in a.features,
        "fp64": False,
        "int64": "emulated (vec2<u32>)",
    }


def summary() -> list[str]:
    """One line per adapter: index, name, backend, type (for scripts choosing an index)."""
    lines = []
    for i, a in enumerate(adapters()):
        info = a.info
        kind = f"{info.get('backend_type', '?')}, {info.get('adapter_type', '?')}"
        lines.append(f"{i}: {info.get('device', '?')} [{kind}]")
    return lines


def open_device(index: int, extra_features: tuple[str, ...] = ()) -> tuple[Any, Any]:
    """(adapter, device) for adapter ``index``, with its maximum limits and useful features
    (``extra_features`` too where the adapter has them: the timed recorder's ``timestamp-query``)."""
    found = adapters()
    adapter = found[index]
    limits = {k: adapter.limits[k] for k in WANTED_LIMITS if k in adapter.limits}
    features = [f for f in (*WANTED_FEATURES, *extra_features) if f in adapter.features]
    device = adapter.request_device_sync(
        label=f"ember wgpu:{index}", required_features=features, required_limits=limits
    )
    return adapter, device


def cache_identity(adapter: Any) -> tuple[str, str]:
    """(device, driver) naming ``adapter`` for the kernel cache: a new driver, wgpu-native or
    wgpu-py (whose WGSL compiler, naga, and validation change with it) starts a fresh folder."""
    import wgpu
    from wgpu.backends import wgpu_native

    info = adapter.info
    device = (
        f"{info.get('backend_type', '?')} {info.get('adapter_type', '?')} {info.get('device', '?')} "
        f"[{info.get('vendor_id', 0):04x}:{info.get('device_id', 0):04x}]"
    )
    driver = f"{info.get('description', '')}; wgpu-native {wgpu_native.__version__}; wgpu-py {wgpu.__version__}"
    return device, driver


if __name__ == "__main__":  # python -m ember_wgpu.adapters: list the adapters with their indices
    print("\n".join(summary()))

"""Shader modules compiled without naga's runtime checks, where wgpu-native offers it.

By default naga rewrites every array access of a WGSL kernel into a clamped one and counts every
loop's iterations (so a buggy shader cannot read outside its buffers or hang the GPU). ember's
generated kernels guard their own indices, and the checks cost the tiled GEMM's inner loop (its
shared-tile reads are all clamped). wgpu-native exports ``wgpuDeviceCreateShaderModuleTrusted``
for this; wgpu-py does not wrap it, so it is reached through wgpu-py's own cffi binding, and
:func:`module` answers None wherever that binding or the entry point is missing (another wgpu-py
or wgpu-native), leaving the caller to the checked ``create_shader_module``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

__all__ = ["module", "MADE"]

#: modules made without checks (tests read it to see this path ran)
MADE: Counter[str] = Counter()

_NO_CHECKS = 0  # WGPUShaderRuntimeChecks_None: no bounds clamps, no forced loop bounding


def _binding() -> Any:
    try:
        from wgpu.backends.wgpu_native import _api  # noqa: PLC0415  (wgpu-native only)
    except ImportError:
        return None
    needed = ("new_struct_p", "to_c_string_view", "GPUShaderModule", "libf", "lib", "ffi")
    if not all(hasattr(_api, n) for n in needed) or not hasattr(_api.lib, "wgpuDeviceCreateShaderModuleTrusted"):
        return None
    return _api


def module(device: Any, label: str, source: str) -> Any:
    """``source`` (WGSL) as a shader module of ``device`` without runtime checks, or None where
    this wgpu-py / wgpu-native cannot make one (errors in the WGSL raise as from
    ``create_shader_module``)."""
    api = _binding()
    internal = getattr(device, "_internal", None)
    if api is None or internal is None:
        return None
    ffi, lib = api.ffi, api.lib
    wgsl = api.new_struct_p("WGPUShaderSourceWGSL *", code=api.to_c_string_view(source))
    wgsl[0].chain.next = ffi.NULL
    wgsl[0].chain.sType = lib.WGPUSType_ShaderSourceWGSL
    descriptor = api.new_struct_p(
        "WGPUShaderModuleDescriptor *",
        nextInChain=ffi.cast("WGPUChainedStruct *", wgsl),
        label=api.to_c_string_view(label),
    )
    handle = api.libf.wgpuDeviceCreateShaderModuleTrusted(internal, descriptor, _NO_CHECKS)
    if handle == ffi.NULL:
        raise RuntimeError(f"wgpu-native made no shader module of {label!r}")
    MADE["modules"] += 1
    return api.GPUShaderModule(label, handle, device)

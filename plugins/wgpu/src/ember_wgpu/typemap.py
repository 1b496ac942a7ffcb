"""How each ember dtype lives in WGSL: storage type in buffers, compute class, host bytes.

WGSL has f32, f16 (with the ``shader-f16`` feature), i32, u32 and bool, nothing wider. So:

| ember dtype            | buffer element          | computed as          | class |
|------------------------|-------------------------|----------------------|-------|
| float32                | f32                     | f32                  | f     |
| float16                | f16 (or f32, rounded)   | f32, rounded on store| f     |
| bfloat16               | f32, rounded on store   | f32                  | f     |
| int8 / int16 / int32   | i32 (widened)           | i32, wrapped         | i     |
| uint8 / uint16 / uint32| u32 (widened)           | u32, wrapped         | u     |
| bool                   | u32 (0 or 1)            | bool                 | b     |
| int64                  | vec2<u32> (lo, hi)      | emulated 64-bit      | l     |
| uint64                 | vec2<u32> (lo, hi)      | emulated 64-bit      | L     |
| complex64              | vec2<f32> (re, im)      | vec2<f32> pairs      | c     |

A vec2<u32> element has numpy int64's little-endian bytes, so 64-bit integers upload and read
back without conversion; a vec2<f32> is numpy complex64's bytes (see :mod:`.codegen.complex_lib`).
float64 and complex128 are not supported: WGSL has no 64-bit floats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.dtypes import ALL_DTYPES, DType, complex64

__all__ = ["WType", "TypeMap", "COMPUTE_TYPE", "CLASS_OF", "UNSUPPORTED"]

#: compute class -> WGSL type of values while computing
COMPUTE_TYPE = {"f": "f32", "i": "i32", "u": "u32", "b": "bool", "l": "vec2<u32>", "L": "vec2<u32>", "c": "vec2<f32>"}

CLASS_OF = {
    "float32": "f", "float16": "f", "bfloat16": "f",
    "int8": "i", "int16": "i", "int32": "i",
    "uint8": "u", "uint16": "u", "uint32": "u",
    "bool": "b", "int64": "l", "uint64": "L", "complex64": "c",
}  # fmt: skip

UNSUPPORTED = {
    "float64": "WGSL has no 64-bit floats",
    "complex128": "WGSL has no 64-bit floats, so no complex128",
}

_WRAP = {
    "int8": "((({e}) << 24u) >> 24u)",
    "int16": "((({e}) << 16u) >> 16u)",
    "uint8": "(({e}) & 0xffu)",
    "uint16": "(({e}) & 0xffffu)",
}


@dataclass(frozen=True)
class WType:
    """One dtype's WGSL representation."""

    dtype: DType
    cls: str
    storage: str
    host: np.dtype

    @property
    def name(self) -> str:
        return self.dtype.name

    @property
    def compute(self) -> str:
        return COMPUTE_TYPE[self.cls]

    @property
    def itemsize(self) -> int:
        """Bytes per element in a buffer."""
        return self.host.itemsize

    @property
    def narrow(self) -> bool:
        """A narrow integer stored widened: results wrap to its width."""
        return self.dtype.name in _WRAP

    def wrap(self, expr: str) -> str:
        """``expr`` wrapped to the dtype's width (identity for dtypes that fill their type)."""
        pattern = _WRAP.get(self.dtype.name)
        return pattern.format(e=expr) if pattern else expr

    def load(self, expr: str) -> str:
        """A stored element turned into its compute value."""
        if self.cls == "b":
            return f"({expr} != 0u)"
        if self.storage == "f16":
            return f"f32({expr})"
        return expr

    def store(self, expr: str) -> str:
        """A compute value turned into the stored element."""
        if self.cls == "b":
            return f"select(0u, 1u, {expr})"
        if self.dtype.name == "float16":
            return f"to_f16({expr})" if self.storage == "f16" else f"round_f16({expr})"
        if self.dtype.name == "bfloat16":
            return f"round_bf16({expr})"
        return expr


class TypeMap(dict):  # type: ignore[type-arg]
    """The WGSL types of every supported dtype on one device (float16 depends on a feature), looked
    up by dtype or by name: a dict holding both keys, so ``types[dtype]`` on every launch runs no
    Python code."""

    def __init__(self, f16_native: bool) -> None:
        super().__init__()
        self.f16_native = f16_native
        for dt in (*ALL_DTYPES, complex64):
            cls = CLASS_OF.get(dt.name)
            if cls is None:
                continue
            if cls == "c":
                storage, host = "vec2<f32>", np.dtype(np.complex64)
            elif cls in "lL":
                storage, host = "vec2<u32>", np.dtype(dt.name)
            elif cls == "b":
                storage, host = "u32", np.dtype(np.uint32)
            elif cls == "i":
                storage, host = "i32", np.dtype(np.int32)
            elif cls == "u":
                storage, host = "u32", np.dtype(np.uint32)
            elif dt.name == "float16" and f16_native:
                storage, host = "f16", np.dtype(np.float16)
            else:
                storage, host = "f32", np.dtype(np.float32)
            self[dt.name] = self[dt] = WType(dt, cls, storage, host)

    def __missing__(self, dtype: DType | str) -> WType:
        """A dtype object other than ember's own (looked up by its name), else KeyError."""
        name = getattr(dtype, "name", None)
        if isinstance(name, str) and dict.__contains__(self, name):
            return dict.__getitem__(self, name)
        raise KeyError(dtype)

    def __contains__(self, dtype: object) -> bool:
        name = dtype if isinstance(dtype, str) else getattr(dtype, "name", None)
        return dict.__contains__(self, name)

    def supported(self) -> frozenset[DType]:
        return frozenset(t.dtype for t in self.values())

    def uses_f16(self, *dtypes: DType | str) -> bool:
        """Whether a kernel touching these dtypes needs ``enable f16;``."""
        if self.f16_native:
            for d in dtypes:
                if (d if isinstance(d, str) else d.name) == "float16":
                    return True
        return False

    # -- host conversion ----------------------------------------------------------------
    def to_device_bytes(self, array: np.ndarray, dtype: DType) -> np.ndarray:
        """A C-contiguous array holding ``array``'s values in the buffer's element format."""
        host = self[dtype].host
        if array.dtype == host:
            return np.ascontiguousarray(array)
        return np.ascontiguousarray(array.astype(host))

    def from_device_bytes(self, raw: np.ndarray, dtype: DType) -> np.ndarray:
        """Buffer elements (of the storage host type) turned into ``dtype``'s numpy type."""
        target = dtype.numpy
        if raw.dtype == target:
            return raw
        if dtype.name == "bool":
            return raw != 0
        return raw.astype(target)

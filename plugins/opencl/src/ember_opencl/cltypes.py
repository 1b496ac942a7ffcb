"""How each ember dtype lives in OpenCL C: the storage type, the compute type, loads and stores.

complex64 / complex128 are ``float2`` / ``double2`` pairs (see :mod:`.complex`).
float16 is stored as ``half`` and read with ``vload_half`` / written with ``vstore_half_rte``
(core OpenCL, no extension needed); bcomplex64 / complex128 are ``float2`` / ``double2`` pairs (see :mod:`.complex`).
float16 is stored as ``ushort`` and widened by a shift.
Both compute in ``float``, as ember's CPU backend does. bool is a ``uchar`` holding 0 or 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ember.dtypes import DType, as_dtype

__all__ = ["CType", "ctype", "literal", "PREAMBLE_BF16", "np_scalar", "NP_OF_C", "type_min", "type_max"]

#: numpy dtype of each OpenCL C scalar type (for kernel scalar arguments and raw buffers)
NP_OF_C: dict[str, np.dtype] = {
    "uchar": np.dtype(np.uint8),
    "char": np.dtype(np.int8),
    "short": np.dtype(np.int16),
    "ushort": np.dtype(np.uint16),
    "int": np.dtype(np.int32),
    "uint": np.dtype(np.uint32),
    "long": np.dtype(np.int64),
    "ulong": np.dtype(np.uint64),
    "float": np.dtype(np.float32),
    "double": np.dtype(np.float64),
    "half": np.dtype(np.float16),
    "float2": np.dtype(np.complex64),  # complex: (real, imaginary) pairs, numpy's layout
    "double2": np.dtype(np.complex128),
}

_TYPES = {
    # name: (storage, compute)
    "bool": ("uchar", "uchar"),
    "int8": ("char", "char"),
    "int16": ("short", "short"),
    "int32": ("int", "int"),
    "int64": ("long", "long"),
    "uint8": ("uchar", "uchar"),
    "uint16": ("ushort", "ushort"),
    "uint32": ("uint", "uint"),
    "uint64": ("ulong", "ulong"),
    "float16": ("half", "float"),
    "bfloat16": ("ushort", "float"),
    "float32": ("float", "float"),
    "float64": ("double", "double"),
    "complex64": ("float2", "float2"),
    "complex128": ("double2", "double2"),
}

PREAMBLE_BF16 = """
inline ushort ember_f2bf(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}
"""


@dataclass(frozen=True)
class CType:
    """One ember dtype as OpenCL C sees it. ``name``, ``kind``, ``np_storage``, ``np_compute`` and
    ``itemsize`` are plain attributes set once (every launch reads some of them)."""

    dtype: DType
    storage: str
    compute: str
    #: the dtype's name and kind
    name: str = field(init=False, compare=False)
    kind: str = field(init=False, compare=False)
    #: numpy dtype of the buffer's raw elements (bfloat16: uint16) and of the compute type
    np_storage: np.dtype = field(init=False, compare=False)
    np_compute: np.dtype = field(init=False, compare=False)
    itemsize: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        name = self.dtype.name
        storage = np.dtype(np.uint16) if name == "bfloat16" else NP_OF_C[self.storage]
        for attr, value in (("name", name), ("kind", self.dtype.kind), ("np_storage", storage),
                            ("np_compute", NP_OF_C[self.compute]), ("itemsize", storage.itemsize)):  # fmt: skip
            object.__setattr__(self, attr, value)

    @property
    def is_wide_float(self) -> bool:
        """Stored in 16 bits, computed in float."""
        return self.name in ("float16", "bfloat16")

    def load(self, ptr: str, idx: str) -> str:
        if self.name == "float16":
            return f"vload_half({idx}, {ptr})"
        if self.name == "bfloat16":
            return f"as_float(((uint){ptr}[{idx}]) << 16)"
        return f"{ptr}[{idx}]"

    def store(self, ptr: str, idx: str, value: str) -> str:
        if self.name == "float16":
            return f"vstore_half_rte({value}, {idx}, {ptr});"
        if self.name == "bfloat16":
            return f"{ptr}[{idx}] = ember_f2bf({value});"
        return f"{ptr}[{idx}] = ({self.storage})({value});"


#: by dtype name and by DType object (one lookup on the hot path)
_CACHE: dict[DType | str, CType] = {}


def ctype(dtype: DType | str) -> CType:
    """The :class:`CType` of an ember dtype (or its name)."""
    found = _CACHE.get(dtype)
    if found is None:
        name = dtype if isinstance(dtype, str) else dtype.name
        storage, compute = _TYPES[name]
        found = _CACHE.get(name) or CType(as_dtype(name), storage, compute)
        _CACHE[name] = _CACHE[dtype] = found
    return found


def type_min(c: CType) -> str:
    """The smallest value of ``c``'s compute type, as OpenCL C."""
    if c.kind == "f":
        return "(-INFINITY)"
    return {"uchar": "0", "char": "CHAR_MIN", "short": "SHRT_MIN", "ushort": "0", "int": "INT_MIN",
            "uint": "0u", "long": "LONG_MIN", "ulong": "0ul"}[c.compute]  # fmt: skip


def type_max(c: CType) -> str:
    """The largest value of ``c``'s compute type, as OpenCL C."""
    if c.kind == "f":
        return "INFINITY"
    if c.kind == "b":
        return "1"
    return {"uchar": "UCHAR_MAX", "char": "CHAR_MAX", "short": "SHRT_MAX", "ushort": "USHRT_MAX",
            "int": "INT_MAX", "uint": "UINT_MAX", "long": "LONG_MAX", "ulong": "ULONG_MAX"}[c.compute]  # fmt: skip


def literal(value: bool | int | float | complex, c: CType) -> str:
    """``value`` as an OpenCL C literal of ``c``'s compute type."""
    if c.kind == "c":
        part = ctype("float32" if c.name == "complex64" else "float64")
        z = complex(value)
        return f"(({c.compute})({literal(z.real, part)}, {literal(z.imag, part)}))"
    if c.kind == "f":
        v = float(value)
        if math.isnan(v):
            return "NAN" if c.compute == "float" else "(double)NAN"
        if math.isinf(v):
            inf = "INFINITY" if c.compute == "float" else "(double)INFINITY"
            return inf if v > 0 else f"(-{inf})"
        text = repr(v)
        if "e" not in text and "." not in text:
            text += ".0"
        return f"{text}f" if c.compute == "float" else text
    v = int(value)
    if c.compute == "long":
        return "LONG_MIN" if v == -(2**63) else f"({v}L)"
    if c.compute == "ulong":
        return f"({v}UL)"
    if c.compute in ("uint",):
        return f"({v}u)"
    return f"(({c.compute}){v})"


#: np_scalar's results for nonzero Python ints and floats (a step passes the same few: lr, 1/n, ...)
_SCALARS: dict[tuple[str, type, Any], np.generic] = {}


def np_scalar(value: bool | int | float | complex, c: CType) -> np.generic:
    """``value`` rounded to ``c``'s dtype, then held in its compute type (a kernel argument)."""
    kind = type(value)
    if (kind is float or kind is int) and value:  # (not 0.0: -0.0 would find it; NaN never finds itself)
        key = (c.name, kind, value)
        found = _SCALARS.get(key)
        if found is None:
            if len(_SCALARS) >= 1024:
                _SCALARS.clear()
            found = _SCALARS[key] = _np_scalar(value, c)
        return found
    return _np_scalar(value, c)


def _np_scalar(value: bool | int | float | complex, c: CType) -> np.generic:
    if c.name == "bfloat16":
        import ml_dtypes

        return np.float32(np.asarray(value, dtype=ml_dtypes.bfloat16))
    if c.kind in "fc":
        return c.np_compute.type(np.asarray(value, dtype=c.dtype.numpy))
    if c.kind == "b":
        return np.uint8(bool(value))
    return c.np_compute.type(value)

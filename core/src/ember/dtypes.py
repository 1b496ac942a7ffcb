"""Data types and type promotion (Python Array API rules, Python scalars weakly typed).

Promotion between two tensors follows the Array API table. Mixed kinds (bool with numbers,
integers with floats) and ``uint64`` with a signed integer are left undefined by the
standard; ember raises :class:`~ember.errors.DTypeError` for them and says how to cast.
``bfloat16`` is not in the standard; it promotes like PyTorch (with ``float16`` to
``float32``).

``complex64`` and ``complex128`` are the standard's complex dtypes. They are not in
:data:`ALL_DTYPES` (the dtypes every backend is expected to hold unless it says otherwise) but in
:data:`COMPLEX_DTYPES`; :data:`EVERY_DTYPE` is both. A complex dtype promotes with a real float
to the complex dtype whose parts hold both (``complex64`` with ``float64`` is ``complex128``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import DTypeError

__all__ = [
    "DType",
    "BOOL",
    "INT",
    "FLOAT",
    "NUMERIC",
    "INT_OR_BOOL",
    "ANY",
    "category_error",
    "bool_",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "ALL_DTYPES",
    "COMPLEX_DTYPES",
    "EVERY_DTYPE",
    "complex64",
    "complex128",
    "COMPLEX",
    "FLOAT_OR_COMPLEX",
    "NUMERIC_OR_COMPLEX",
    "ANY_OR_COMPLEX",
    "default_complex",
    "real_dtype",
    "complex_dtype",
    "as_dtype",
    "result_type",
    "promote_types",
    "scalar_dtype",
    "finfo",
    "iinfo",
    "is_floating",
    "is_integer",
    "can_cast",
    "default_float",
    "default_int",
    "isdtype",
]


class DType:
    """One element type. Compare with ``is`` or ``==``; ``str(dt)`` is its name."""

    __slots__ = ("name", "kind", "bits", "_np")

    def __init__(self, name: str, kind: str, bits: int) -> None:
        self.name = name
        self.kind = kind  # "b" bool, "i" signed int, "u" unsigned int, "f" float, "c" complex
        self.bits = bits
        self._np: Any = None

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return max(1, self.bits // 8)

    @property
    def is_floating(self) -> bool:
        return self.kind == "f"

    @property
    def is_integer(self) -> bool:
        return self.kind in "iu"

    @property
    def is_complex(self) -> bool:
        return self.kind == "c"

    @property
    def is_signed(self) -> bool:
        return self.kind in "ifc"

    @property
    def numpy(self) -> np.dtype:
        """The numpy dtype that holds this type (bfloat16 through ``ml_dtypes``)."""
        if self._np is None:
            if self.name == "bfloat16":
                try:
                    import ml_dtypes  # optional: only bfloat16 needs it, so `import ember` does not load it
                except ImportError:
                    raise DTypeError("bfloat16 on numpy needs the ml_dtypes package: pip install ml_dtypes") from None
                self._np = np.dtype(ml_dtypes.bfloat16)
            else:
                self._np = np.dtype("bool" if self.name == "bool" else self.name)
        return self._np

    def __repr__(self) -> str:
        return f"ember.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self) -> str:
        return self.name if self.name != "bool" else "bool_"


bool_ = DType("bool", "b", 8)
int8 = DType("int8", "i", 8)
int16 = DType("int16", "i", 16)
int32 = DType("int32", "i", 32)
int64 = DType("int64", "i", 64)
uint8 = DType("uint8", "u", 8)
uint16 = DType("uint16", "u", 16)
uint32 = DType("uint32", "u", 32)
uint64 = DType("uint64", "u", 64)
float16 = DType("float16", "f", 16)
bfloat16 = DType("bfloat16", "f", 16)
float32 = DType("float32", "f", 32)
float64 = DType("float64", "f", 64)

complex64 = DType("complex64", "c", 64)
complex128 = DType("complex128", "c", 128)

ALL_DTYPES: tuple[DType, ...] = (
    bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64,
    float16, bfloat16, float32, float64,
)  # fmt: skip
COMPLEX_DTYPES: tuple[DType, ...] = (complex64, complex128)
EVERY_DTYPE: tuple[DType, ...] = ALL_DTYPES + COMPLEX_DTYPES

_BY_NAME = {dt.name: dt for dt in EVERY_DTYPE}
_BY_NAME["bool_"] = bool_
_SIGNED = {8: int8, 16: int16, 32: int32, 64: int64}
_UNSIGNED = {8: uint8, 16: uint16, 32: uint32, 64: uint64}


def default_float() -> DType:
    """The dtype of float tensors made without an explicit dtype."""
    return float32


def default_int() -> DType:
    """The dtype of integer tensors made without an explicit dtype."""
    return int64


def default_complex() -> DType:
    """The dtype of complex tensors made without an explicit dtype (the complex of default_float)."""
    return complex64


def real_dtype(dtype: DType) -> DType:
    """The real dtype of a complex dtype's parts (``complex64`` -> ``float32``); others unchanged."""
    return {"complex64": float32, "complex128": float64}.get(dtype.name, dtype)


def complex_dtype(dtype: DType) -> DType:
    """The complex dtype whose parts hold ``dtype`` (``float32`` -> ``complex64``)."""
    if dtype.kind == "c":
        return dtype
    return complex128 if dtype.bits > 32 else complex64


def as_dtype(value: Any, argument: str = "dtype") -> DType:
    """Turn a DType, a name (``"float32"``), a numpy dtype or a Python type into a DType."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        found = _BY_NAME.get(value)
        if found is not None:
            return found
    elif value is bool:
        return bool_
    elif value is int:
        return default_int()
    elif value is float:
        return default_float()
    elif value is complex:
        return default_complex()
    else:
        try:
            npdt = np.dtype(value)
        except TypeError:
            npdt = None
        if npdt is not None:
            name = "bool" if npdt == np.bool_ else npdt.name
            found = _BY_NAME.get(name)
            if found is not None:
                return found
    names = ", ".join(dt.name for dt in EVERY_DTYPE)
    raise DTypeError(f"{argument}={value!r} is not an ember dtype; expected one of: {names}")


def _promote(a: DType, b: DType) -> DType | None:
    if a is b:
        return a
    ka, kb = a.kind, b.kind
    if ka == "b" or kb == "b":
        return None
    if ka == "c" or kb == "c":
        if ka not in "fc" or kb not in "fc":
            return None  # integers with complex: undefined, like integers with floats
        return complex128 if max(real_dtype(a).bits, real_dtype(b).bits) > 32 else complex64
    if ka == "f" and kb == "f":
        if a.bits == b.bits:  # float16 with bfloat16
            return float32
        return a if a.bits > b.bits else b
    if ka == "f" or kb == "f":
        return None
    if ka == kb:
        return a if a.bits >= b.bits else b
    u, s = (a, b) if ka == "u" else (b, a)
    if s.bits > u.bits:
        return s
    if u.bits == 64:
        return None
    return _SIGNED[u.bits * 2]


_PROMOTE: dict[tuple[DType, DType], DType | None] = {(a, b): _promote(a, b) for a in EVERY_DTYPE for b in EVERY_DTYPE}


def _why_undefined(a: DType, b: DType) -> str:
    if a.kind == "b" or b.kind == "b":
        return "booleans combine only with booleans"
    if "c" in (a.kind, b.kind):
        return "integer and complex tensors do not mix"
    if "f" in (a.kind, b.kind):
        return "integer and floating-point tensors do not mix"
    return "uint64 has no signed type wide enough to hold both"


def promote_types(a: DType, b: DType, op: str = "op") -> DType:
    """The Array API result dtype of two tensor dtypes; raise for undefined pairs."""
    found = _PROMOTE[a, b]
    if found is None:
        target = b if a.kind in "bi" and b.kind == "f" else a if b.kind in "bi" else b
        raise DTypeError(
            f"{op}: cannot combine {a} and {b} tensors: {_why_undefined(a, b)} under the "
            f"Array API promotion rules. Cast one explicitly, e.g. x.astype(ember.{target})."
        )
    return found


def scalar_dtype(tensor_dtype: DType, value: Any, op: str = "op") -> DType:
    """Dtype that results from ``tensor op scalar`` with a weakly typed Python scalar.

    A Python complex with a real floating tensor gives the complex dtype of its precision.
    """
    kind = tensor_dtype.kind
    if isinstance(value, bool):
        if kind == "b" or kind in "iufc":
            return tensor_dtype
    elif isinstance(value, int):
        if kind in "iufc":
            return tensor_dtype
    elif isinstance(value, float):
        if kind in "fc":
            return tensor_dtype
    elif isinstance(value, complex):
        if kind in "fc":
            return complex_dtype(tensor_dtype)
    else:
        raise DTypeError(f"{op}: expected a Tensor or a Python scalar, got {type(value).__name__}")
    hint = {float: "x.astype(ember.float32)", complex: "x.astype(ember.complex64)"}.get(
        type(value), "x.astype(ember.int64)"
    )
    raise DTypeError(
        f"{op}: cannot combine a {tensor_dtype} tensor with the Python "
        f"{type(value).__name__} {value!r}; the Array API leaves this mix undefined. "
        f"Cast explicitly, e.g. {hint}."
    )


def result_type(*args: Any) -> DType:
    """Array API ``result_type`` over dtypes, tensors (anything with ``.dtype``) and Python scalars.

    Python scalars are weakly typed: they take the dtype the other arguments promote to, and
    need at least one dtype or tensor beside them.
    """
    scalars = [a for a in args if isinstance(a, (bool, int, float, complex))]
    dts = [
        a if isinstance(a, DType) else as_dtype(getattr(a, "dtype", a), "result_type argument")
        for a in args
        if not isinstance(a, (bool, int, float, complex))
    ]
    if not dts:
        raise DTypeError(
            "result_type: at least one dtype or tensor is required (Python scalars alone have no "
            "Array API dtype); pass e.g. result_type(ember.float32, 1.0)"
        )
    out = dts[0]
    for dt in dts[1:]:
        out = promote_types(out, dt, "result_type")
    for value in scalars:
        out = scalar_dtype(out, value, "result_type")
    return out


# -- dtype categories, as in the Array API --------------------------------------------------
BOOL = frozenset([bool_])
INT = frozenset(d for d in ALL_DTYPES if d.kind in "iu")
FLOAT = frozenset(d for d in ALL_DTYPES if d.kind == "f")
NUMERIC = INT | FLOAT
INT_OR_BOOL = INT | BOOL
ANY = frozenset(ALL_DTYPES)
COMPLEX = frozenset(COMPLEX_DTYPES)
FLOAT_OR_COMPLEX = FLOAT | COMPLEX
NUMERIC_OR_COMPLEX = NUMERIC | COMPLEX
ANY_OR_COMPLEX = ANY | COMPLEX
_CATEGORY_NAMES = {BOOL: "boolean", INT: "integer", FLOAT: "floating-point", NUMERIC: "numeric",
                   INT_OR_BOOL: "integer or boolean", ANY: "any", COMPLEX: "complex",
                   FLOAT_OR_COMPLEX: "floating-point or complex", NUMERIC_OR_COMPLEX: "numeric or complex",
                   ANY_OR_COMPLEX: "any"}  # fmt: skip


def category_error(op: str, accepts: frozenset[DType], dtype: DType) -> DTypeError:
    """The error for ``op`` given a ``dtype`` outside the category ``accepts``, with the fix."""
    hint = ""
    if accepts in (FLOAT, FLOAT_OR_COMPLEX) and dtype.kind in "iub":
        hint = " Cast first, e.g. x.astype(ember.float32)."
    elif dtype.kind == "c" and not accepts & COMPLEX:
        hint = " It is not defined for complex numbers; take ember.real(x), ember.imag(x) or ember.abs(x) first."
    name = _CATEGORY_NAMES.get(accepts, "supported")
    return DTypeError(f"{op}: expected a {name} tensor, got {dtype}.{hint}")


def is_floating(dtype: DType) -> bool:
    return dtype.kind == "f"


def is_integer(dtype: DType) -> bool:
    return dtype.kind in "iu"


def can_cast(from_: DType, to: DType) -> bool:
    """Whether promotion alone would turn ``from_`` into ``to`` (Array API ``can_cast``)."""
    from_ = as_dtype(getattr(from_, "dtype", from_), "from_")
    to = as_dtype(to, "to")
    return _PROMOTE.get((from_, to)) is to


class finfo:
    """Machine limits of a floating-point dtype (``bits, eps, max, min, smallest_normal``)."""

    def __init__(self, dtype: Any) -> None:
        dt = as_dtype(getattr(dtype, "dtype", dtype))
        if dt.kind not in "fc":
            raise DTypeError(f"finfo: expected a floating-point or complex dtype, got {dt}")
        dt = real_dtype(dt)  # a complex dtype's limits are those of its parts (Array API)
        if dt.name == "bfloat16":  # numpy's finfo does not know ml_dtypes' bfloat16
            import ml_dtypes  # optional: only bfloat16 needs it

            info = ml_dtypes.finfo(dt.numpy)
        else:
            info = np.finfo(dt.numpy)
        self.dtype = dt
        self.bits = dt.bits
        self.eps = float(info.eps)
        self.max = float(info.max)
        self.min = float(info.min)
        self.smallest_normal = float(info.smallest_normal)
        self.tiny = self.smallest_normal

    def __repr__(self) -> str:
        return f"finfo(dtype={self.dtype}, eps={self.eps}, max={self.max})"


class iinfo:
    """Machine limits of an integer dtype (``bits, max, min``)."""

    def __init__(self, dtype: Any) -> None:
        dt = as_dtype(getattr(dtype, "dtype", dtype))
        if dt.kind not in "iu":
            raise DTypeError(f"iinfo: expected an integer dtype, got {dt}")
        info = np.iinfo(dt.numpy)
        self.dtype = dt
        self.bits = dt.bits
        self.max = int(info.max)
        self.min = int(info.min)

    def __repr__(self) -> str:
        return f"iinfo(dtype={self.dtype}, min={self.min}, max={self.max})"


#: the dtype kinds of the Array API's ``isdtype``, as a test on a DType
_ISDTYPE_KINDS = {
    "bool": lambda dt: dt.kind == "b",
    "signed integer": lambda dt: dt.kind == "i",
    "unsigned integer": lambda dt: dt.kind == "u",
    "integral": lambda dt: dt.kind in "iu",
    "real floating": lambda dt: dt.kind == "f",
    "complex floating": lambda dt: dt.kind == "c",
    "numeric": lambda dt: dt.kind in "iufc",
}


def isdtype(dtype: Any, kind: Any) -> bool:
    """Whether ``dtype`` is of ``kind``: a dtype, a kind name (``"real floating"``...) or a tuple of them.

    >>> import ember as em
    >>> em.isdtype(em.float32, ("integral", "real floating"))
    True
    """
    if not isinstance(dtype, DType):
        raise DTypeError(f"isdtype: dtype must be an ember dtype such as ember.float32, got {dtype!r}")
    if isinstance(kind, tuple):
        return any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, DType):
        return dtype is kind
    test = _ISDTYPE_KINDS.get(kind) if isinstance(kind, str) else None
    if test is None:
        raise DTypeError(
            f"isdtype: kind={kind!r} is not a dtype, a kind name or a tuple of them; "
            f"the kind names are {', '.join(repr(k) for k in _ISDTYPE_KINDS)}"
        )
    return test(dtype)

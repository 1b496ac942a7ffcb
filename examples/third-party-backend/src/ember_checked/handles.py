"""The checked backend's handles, and the checks every primitive runs on its arguments.

A handle is a :class:`CheckedArray`: a read-only numpy array plus the backend instance that
made it. Read-only means an accidental in-place write anywhere (in ember's core, in a
composite, in this backend) raises at once instead of corrupting another tensor.

A failed check raises :class:`ContractError`. It derives from ``AssertionError`` on purpose:
it reports a bug in the caller (ember's core broke the backend contract), and it must not be
caught by a test that expects the ``TypeError``/``ValueError`` a user mistake raises.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "ContractError",
    "CheckedArray",
    "BOOL",
    "INT",
    "FLOAT",
    "NUMERIC",
    "INT_OR_BOOL",
    "ANY",
    "check_int",
    "check_bool",
    "check_axis",
    "check_axes",
    "check_shape",
    "check_scalar",
]

# dtype categories as numpy kind letters (Array API categories)
BOOL = "b"
INT = "iu"
FLOAT = "f"
NUMERIC = "iuf"
INT_OR_BOOL = "biu"
ANY = "biuf"
_CATEGORY = {BOOL: "boolean", INT: "integer", FLOAT: "floating-point", NUMERIC: "numeric",
             INT_OR_BOOL: "integer or boolean", ANY: "any"}  # fmt: skip


class ContractError(AssertionError):
    """ember's core called the checked backend in a way the backend contract does not allow."""

    def __init__(self, op: str, message: str) -> None:
        super().__init__(f"checked backend, {op}: {message} (this is a bug in the caller, not in user code)")
        self.op = op


class CheckedArray:
    """A handle: a read-only numpy array and the backend instance (device) that owns it."""

    __slots__ = ("array", "owner")

    array: np.ndarray
    owner: Any

    def __init__(self, array: np.ndarray, owner: Any) -> None:
        array.flags.writeable = False
        object.__setattr__(self, "array", array)
        object.__setattr__(self, "owner", owner)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"CheckedArray is immutable: cannot set {name!r}")

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise ContractError("__array__", "a handle was read with numpy directly; go through backend.to_numpy(handle)")

    def __repr__(self) -> str:
        return f"CheckedArray(shape={self.array.shape}, dtype={self.array.dtype}, owner={self.owner!r})"


def _is_int(value: Any) -> bool:
    return type(value) is int  # not bool, not numpy integers: the contract says Python ints


def check_int(op: str, name: str, value: Any, minimum: int | None = None) -> int:
    """``value`` is a Python int (at least ``minimum``)."""
    if not _is_int(value):
        raise ContractError(op, f"{name} must be a Python int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ContractError(op, f"{name} must be >= {minimum}, got {value}")
    return value


def check_bool(op: str, name: str, value: Any) -> bool:
    """``value`` is a Python bool."""
    if type(value) is not bool:
        raise ContractError(op, f"{name} must be a Python bool, got {type(value).__name__} {value!r}")
    return value


def check_axis(op: str, axis: Any, ndim: int, name: str = "axis") -> int:
    """``axis`` is a Python int in ``0..ndim-1`` (the core normalises negative axes)."""
    check_int(op, name, axis)
    if not 0 <= axis < ndim:
        raise ContractError(op, f"{name}={axis} is not a normalised axis of a {ndim}-d array")
    return axis


def check_axes(op: str, axes: Any, ndim: int) -> tuple[int, ...]:
    """``axes`` is a tuple of distinct, sorted, normalised axes."""
    if type(axes) is not tuple:
        raise ContractError(op, f"axes must be a tuple of ints, got {type(axes).__name__} {axes!r}")
    for axis in axes:
        check_axis(op, axis, ndim, "axes entry")
    if list(axes) != sorted(set(axes)):
        raise ContractError(op, f"axes={axes} must be sorted and distinct")
    return axes


def check_shape(op: str, shape: Any, name: str = "shape") -> tuple[int, ...]:
    """``shape`` is a tuple of Python ints >= 0."""
    if type(shape) is not tuple or not all(_is_int(d) and d >= 0 for d in shape):
        raise ContractError(op, f"{name} must be a tuple of ints >= 0, got {shape!r}")
    return shape


def check_scalar(op: str, name: str, value: Any, dtype: np.dtype | None = None) -> Any:
    """``value`` is a Python scalar; with ``dtype``, of the Python type that dtype's kind implies."""
    kinds = {bool: "b", int: "iu", float: "f"}
    expected = kinds.get(type(value))
    if expected is None:
        raise ContractError(op, f"{name} must be a Python bool, int or float, got {type(value).__name__} {value!r}")
    if dtype is not None and dtype.kind not in expected:
        want = {"b": "bool", "i": "int", "u": "int", "f": "float"}[dtype.kind]
        raise ContractError(op, f"{name}={value!r} ({type(value).__name__}) with a {dtype} array: expected a {want}")
    if dtype is not None and dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise ContractError(op, f"{name}={value} does not fit in {dtype}")
    return value


def category(kinds: str) -> str:
    """Human name of a dtype category."""
    return _CATEGORY.get(kinds, kinds)

"""CheckedBackend: the required primitives and nothing else, each checking its arguments.

Every primitive
- checks that each handle is a :class:`CheckedArray` owned by this device, and that its dtype
  is one the op accepts (and, for ops on several arrays, the one the others imply);
- checks that parameters have the documented types (axes: sorted tuples of normalised ints,
  shapes: tuples of ints, flags: bools, scalars: the Python type of the array's dtype);
- computes with numpy and returns a fresh handle of the dtype the contract promises.

Nothing beyond ``ember.backend.REQUIRED_PRIMITIVES`` is implemented: softmax, mean, conv,
layer_norm... all run through ember's composites, which is what this backend demonstrates.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ember import Backend
from ember.backend import native
from ember.dtypes import ALL_DTYPES, DType, bfloat16

from . import settings
from .handles import (
    ANY,
    BOOL,
    FLOAT,
    INT,
    INT_OR_BOOL,
    NUMERIC,
    CheckedArray,
    ContractError,
    category,
    check_axes,
    check_axis,
    check_bool,
    check_int,
    check_scalar,
    check_shape,
)
from .philox import stream

__all__ = ["CheckedBackend"]

_BOOL = np.dtype(bool)
_INT64 = np.dtype(np.int64)
_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


def _unary(op: str, kinds: str, fn: Callable[[np.ndarray], Any], *, to_bool: bool = False) -> Callable[..., Any]:
    """A unary primitive: ``fn`` on the array, result of the input's dtype (or bool)."""

    def method(self: CheckedBackend, a: CheckedArray) -> CheckedArray:
        x = self._arg(op, "a", a, kinds)
        with np.errstate(all="ignore"):
            result = fn(x)
        return self._out(op, result, _BOOL if to_bool else x.dtype)

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"{op}(a) -> handle; a: {category(kinds)}"
    return method


def _binary(op: str, kinds: str, fn: Callable[[np.ndarray, np.ndarray], Any], *, to_bool: bool = False) -> Callable:
    """A binary primitive: ``a`` and ``b`` share a dtype and broadcast; ``b`` may be a Python scalar."""

    def method(self: CheckedBackend, a: CheckedArray, b: Any) -> CheckedArray:
        x = self._arg(op, "a", a, kinds)
        if type(b) is CheckedArray:
            y = self._arg(op, "b", b, kinds, like=x)
        else:
            y = np.asarray(check_scalar(op, "b", b, x.dtype), dtype=x.dtype)
        with np.errstate(all="ignore"):
            result = fn(x, y)
        return self._out(op, result, _BOOL if to_bool else x.dtype)

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"{op}(a, b) -> handle; a, b: {category(kinds)}, one dtype"
    return method


def _reduction(op: str, kinds: str, fn: Callable[..., Any], *, to_bool: bool = False) -> Callable[..., Any]:
    """A reduction over sorted, normalised ``axes``, keeping them as size 1 when ``keepdims``."""

    def method(self: CheckedBackend, a: CheckedArray, *, axes: Any, keepdims: Any) -> CheckedArray:
        x = self._arg(op, "a", a, kinds)
        check_axes(op, axes, x.ndim)
        check_bool(op, "keepdims", keepdims)
        with np.errstate(all="ignore"):
            result = fn(x, axis=axes, keepdims=keepdims)
        return self._out(op, result, _BOOL if to_bool else x.dtype)

    method.__name__ = method.__qualname__ = op
    method.__doc__ = f"{op}(a, *, axes, keepdims) -> handle; a: {category(kinds)}"
    return method


def _wide(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Compute float16 in float32 and let ``_out`` round back (numpy's float16 loops are slow)."""

    def wrapped(x: np.ndarray, *rest: np.ndarray, **kw: Any) -> Any:
        if x.dtype.kind == "f" and x.dtype.itemsize == 2:
            return fn(x.astype(_F32), *(r.astype(_F32) for r in rest), **kw)
        return fn(x, *rest, **kw)

    return wrapped


def _integral_identity(fn: Callable[[np.ndarray], Any]) -> Callable[[np.ndarray], Any]:
    """floor/ceil/round/trunc leave integers unchanged (numpy would turn them into float64)."""
    return lambda x: x if x.dtype.kind in "iu" else fn(x)


_erf = np.frompyfunc(math.erf, 1, 1)  # math.erf elementwise: exact to double precision, slow


class CheckedBackend(Backend):
    """numpy behind read-only handles, with the backend contract checked on every call."""

    name = "checked"
    supported_dtypes = frozenset(dt for dt in ALL_DTYPES if dt is not bfloat16)
    unsupported_dtype_reasons = {
        "bfloat16": "numpy has no bfloat16; ember-checked keeps to numpy's own dtypes",
        "complex64": "ember-checked checks the real-valued contract only; it declares no complex dtypes",
        "complex128": "ember-checked checks the real-valued contract only; it declares no complex dtypes",
    }

    def __init__(self, device: Any) -> None:
        super().__init__(device)
        self._numpy_dtypes = {dt.numpy: dt for dt in self.supported_dtypes}

    @classmethod
    def device_count(cls) -> int:
        # two by default (EMBER_CHECKED_DEVICES), so device-mismatch paths can be exercised without hardware
        return settings.devices()

    @classmethod
    def describe(cls, index: int) -> dict[str, Any]:
        return {"name": f"checked numpy device {index}", "vendor": "ember-checked", "numpy": np.__version__}

    def __repr__(self) -> str:
        return f"<CheckedBackend {self.device.kind}:{self.device.index}>"

    # -- argument checks -----------------------------------------------------------------
    def _arg(self, op: str, name: str, h: Any, kinds: str = ANY, like: np.ndarray | None = None) -> np.ndarray:
        """The array of handle ``h`` after checking owner and dtype (``like``: the same dtype)."""
        if type(h) is not CheckedArray:
            raise ContractError(op, f"{name} must be a handle of this backend, got {type(h).__name__}")
        if h.owner is not self:
            raise ContractError(op, f"{name} belongs to {h.owner!r}, not to {self!r}")
        x = h.array
        if x.dtype.kind not in kinds:
            raise ContractError(op, f"{name} must be a {category(kinds)} array, got {x.dtype}")
        if like is not None and x.dtype != like.dtype:
            raise ContractError(op, f"{name} has dtype {x.dtype} but the other operand has {like.dtype}")
        return x

    def _dtype(self, op: str, dtype: Any) -> np.dtype:
        if not isinstance(dtype, DType):
            raise ContractError(op, f"dtype must be an ember DType, got {type(dtype).__name__} {dtype!r}")
        if dtype not in self.supported_dtypes:
            raise ContractError(op, f"dtype {dtype} is not supported; ember should have refused it earlier")
        return dtype.numpy

    def _index(self, op: str, name: str, h: Any, bound: int) -> np.ndarray:
        """An int64 index array whose values lie in ``0..bound-1`` (the core wraps negatives)."""
        idx = self._arg(op, name, h, INT)
        if idx.dtype != _INT64:
            raise ContractError(op, f"{name} must be int64, got {idx.dtype}")
        if idx.size and (idx.min() < 0 or idx.max() >= bound):
            raise ContractError(op, f"{name} holds values outside 0..{bound - 1}: {idx.min()}..{idx.max()}")
        return idx

    def _out(self, op: str, result: Any, dtype: np.dtype) -> CheckedArray:
        """A fresh handle of ``dtype`` (numpy may have computed in a wider type)."""
        arr = np.asarray(result)
        if arr.dtype != dtype:
            with np.errstate(all="ignore"):
                arr = arr.astype(dtype)
        return CheckedArray(arr, self)

    # -- transfer and creation -------------------------------------------------------------
    @native
    def from_numpy(self, array: Any) -> CheckedArray:
        if type(array) is not np.ndarray:
            raise ContractError("from_numpy", f"expected a numpy array, got {type(array).__name__}")
        if not array.flags.c_contiguous:
            raise ContractError("from_numpy", "the array must be C-contiguous")
        if array.dtype not in self._numpy_dtypes:
            raise ContractError("from_numpy", f"dtype {array.dtype} is not supported")
        return CheckedArray(np.array(array, copy=True), self)

    @native
    def to_numpy(self, a: CheckedArray) -> np.ndarray:
        return self._arg("to_numpy", "a", a)  # read-only: a caller that writes into it fails loudly

    def dlpack(self, a: CheckedArray) -> np.ndarray:
        return np.array(self._arg("dlpack", "a", a), copy=True)  # DLPack consumers may want a writable buffer

    @native
    def full(self, *, shape: Any, value: Any, dtype: Any) -> CheckedArray:
        dt = self._dtype("full", dtype)
        check_shape("full", shape)
        check_scalar("full", "value", value, dt)
        return self._out("full", np.full(shape, value, dtype=dt), dt)

    @native
    def arange(self, *, start: Any, step: Any, size: Any, dtype: Any) -> CheckedArray:
        dt = self._dtype("arange", dtype)
        check_scalar("arange", "start", start, dt)
        check_scalar("arange", "step", step, dt)
        check_int("arange", "size", size, minimum=0)
        wide = _F64 if dt.kind == "f" else _INT64
        return self._out("arange", np.arange(size, dtype=wide) * step + start, dt)

    @native
    def random_bits(self, *, key: Any, counter: Any, size: Any) -> CheckedArray:
        if type(key) is not tuple or len(key) != 2:
            raise ContractError("random_bits", f"key must be a tuple of two ints, got {key!r}")
        for k in key:
            check_int("random_bits", "key word", k, minimum=0)
            if k >= 2**32:
                raise ContractError("random_bits", f"key words are 32-bit, got {k:#x}")
        check_int("random_bits", "counter", counter, minimum=0)
        check_int("random_bits", "size", size, minimum=0)
        return self._out("random_bits", stream(key, counter, size), np.dtype(np.uint32))

    # -- elementwise unary -----------------------------------------------------------------
    neg = native(_unary("neg", NUMERIC, np.negative))
    abs = native(_unary("abs", NUMERIC, np.abs))
    sign = native(_unary("sign", NUMERIC, np.sign))
    exp = native(_unary("exp", FLOAT, _wide(np.exp)))
    log = native(_unary("log", FLOAT, _wide(np.log)))
    sqrt = native(_unary("sqrt", FLOAT, _wide(np.sqrt)))
    rsqrt = native(_unary("rsqrt", FLOAT, _wide(lambda x: 1.0 / np.sqrt(x))))
    sin = native(_unary("sin", FLOAT, _wide(np.sin)))
    cos = native(_unary("cos", FLOAT, _wide(np.cos)))
    tanh = native(_unary("tanh", FLOAT, _wide(np.tanh)))
    erf = native(_unary("erf", FLOAT, lambda x: _erf(x.astype(_F64))))
    floor = native(_unary("floor", NUMERIC, _integral_identity(np.floor)))
    ceil = native(_unary("ceil", NUMERIC, _integral_identity(np.ceil)))
    round = native(_unary("round", NUMERIC, _integral_identity(np.round)))  # half to even
    trunc = native(_unary("trunc", NUMERIC, _integral_identity(np.trunc)))
    reciprocal = native(_unary("reciprocal", FLOAT, _wide(lambda x: 1.0 / x)))
    isnan = native(_unary("isnan", NUMERIC, np.isnan, to_bool=True))
    isinf = native(_unary("isinf", NUMERIC, np.isinf, to_bool=True))
    logical_not = native(_unary("logical_not", BOOL, np.logical_not, to_bool=True))
    bitwise_not = native(_unary("bitwise_not", INT_OR_BOOL, np.invert))

    # -- elementwise binary ----------------------------------------------------------------
    add = native(_binary("add", NUMERIC, np.add))
    sub = native(_binary("sub", NUMERIC, np.subtract))
    mul = native(_binary("mul", NUMERIC, np.multiply))
    div = native(_binary("div", FLOAT, np.true_divide))
    floordiv = native(_binary("floordiv", NUMERIC, np.floor_divide))
    remainder = native(_binary("remainder", NUMERIC, np.remainder))
    pow = native(_binary("pow", NUMERIC, _wide(np.power)))
    maximum = native(_binary("maximum", NUMERIC, np.maximum))
    minimum = native(_binary("minimum", NUMERIC, np.minimum))
    atan2 = native(_binary("atan2", FLOAT, _wide(np.arctan2)))
    eq = native(_binary("eq", ANY, np.equal, to_bool=True))
    ne = native(_binary("ne", ANY, np.not_equal, to_bool=True))
    lt = native(_binary("lt", NUMERIC, np.less, to_bool=True))
    le = native(_binary("le", NUMERIC, np.less_equal, to_bool=True))
    gt = native(_binary("gt", NUMERIC, np.greater, to_bool=True))
    ge = native(_binary("ge", NUMERIC, np.greater_equal, to_bool=True))
    logical_and = native(_binary("logical_and", BOOL, np.logical_and, to_bool=True))
    logical_or = native(_binary("logical_or", BOOL, np.logical_or, to_bool=True))
    logical_xor = native(_binary("logical_xor", BOOL, np.logical_xor, to_bool=True))
    bitwise_and = native(_binary("bitwise_and", INT_OR_BOOL, np.bitwise_and))
    bitwise_or = native(_binary("bitwise_or", INT_OR_BOOL, np.bitwise_or))
    bitwise_xor = native(_binary("bitwise_xor", INT_OR_BOOL, np.bitwise_xor))

    @native
    def where(self, cond: CheckedArray, a: CheckedArray, b: CheckedArray) -> CheckedArray:
        c = self._arg("where", "cond", cond, BOOL)
        x = self._arg("where", "a", a)
        y = self._arg("where", "b", b, like=x)
        return self._out("where", np.where(c, x, y), x.dtype)

    @native
    def cast(self, a: CheckedArray, *, dtype: Any) -> CheckedArray:
        x = self._arg("cast", "a", a)
        dt = self._dtype("cast", dtype)
        with np.errstate(all="ignore"):
            if dt.kind in "iu" and x.dtype.kind == "f":
                x = np.trunc(x)  # float -> int truncates toward zero
            return self._out("cast", x.astype(dt), dt)

    # -- reductions ------------------------------------------------------------------------
    sum = native(_reduction("sum", NUMERIC, _wide(np.sum)))
    prod = native(_reduction("prod", NUMERIC, _wide(np.prod)))
    max = native(_reduction("max", NUMERIC, np.max))
    min = native(_reduction("min", NUMERIC, np.min))
    any = native(_reduction("any", BOOL, np.any, to_bool=True))
    all = native(_reduction("all", BOOL, np.all, to_bool=True))

    @native
    def argmax(self, a: CheckedArray, *, axis: Any, keepdims: Any) -> CheckedArray:
        return self._arg_extreme("argmax", np.argmax, a, axis, keepdims)

    @native
    def argmin(self, a: CheckedArray, *, axis: Any, keepdims: Any) -> CheckedArray:
        return self._arg_extreme("argmin", np.argmin, a, axis, keepdims)

    def _arg_extreme(self, op: str, fn: Callable[..., Any], a: CheckedArray, axis: Any, keepdims: Any) -> CheckedArray:
        x = self._arg(op, "a", a, NUMERIC)
        check_axis(op, axis, x.ndim)
        check_bool(op, "keepdims", keepdims)
        if x.shape[axis] == 0:
            raise ContractError(op, f"axis {axis} is empty; ember should have refused it earlier")
        return self._out(op, fn(x, axis=axis, keepdims=keepdims), _INT64)

    @native
    def cumsum(self, a: CheckedArray, *, axis: Any) -> CheckedArray:
        x = self._arg("cumsum", "a", a, NUMERIC)
        check_axis("cumsum", axis, x.ndim)
        with np.errstate(all="ignore"):
            return self._out("cumsum", _wide(np.cumsum)(x, axis=axis), x.dtype)

    # -- movement --------------------------------------------------------------------------
    @native
    def reshape(self, a: CheckedArray, *, shape: Any) -> CheckedArray:
        x = self._arg("reshape", "a", a)
        check_shape("reshape", shape)
        if math.prod(shape) != x.size:
            raise ContractError("reshape", f"cannot reshape {x.shape} ({x.size} elements) to {shape}")
        return self._out("reshape", x.reshape(shape), x.dtype)

    @native
    def permute(self, a: CheckedArray, *, axes: Any) -> CheckedArray:
        x = self._arg("permute", "a", a)
        if type(axes) is not tuple or sorted(axes) != list(range(x.ndim)) or not all(type(i) is int for i in axes):
            raise ContractError("permute", f"axes must be a tuple permuting 0..{x.ndim - 1}, got {axes!r}")
        return self._out("permute", x.transpose(axes), x.dtype)

    @native
    def expand(self, a: CheckedArray, *, shape: Any) -> CheckedArray:
        x = self._arg("expand", "a", a)
        check_shape("expand", shape)
        return self._out("expand", np.broadcast_to(x, shape), x.dtype)

    @native
    def slice(self, a: CheckedArray, *, starts: Any, stops: Any, steps: Any) -> CheckedArray:
        x = self._arg("slice", "a", a)
        for name, values in (("starts", starts), ("stops", stops), ("steps", steps)):
            if type(values) is not tuple or len(values) != x.ndim or not all(type(v) is int for v in values):
                raise ContractError("slice", f"{name} must be a tuple of {x.ndim} ints, got {values!r}")
        for d, (start, stop, step) in enumerate(zip(starts, stops, steps)):
            if step < 1 or not 0 <= start <= x.shape[d] or not 0 <= stop <= x.shape[d]:
                raise ContractError("slice", f"axis {d}: {start}:{stop}:{step} is not normalised for size {x.shape[d]}")
        index = tuple(slice(start, stop, step) for start, stop, step in zip(starts, stops, steps))
        return self._out("slice", x[index], x.dtype)

    @native
    def pad(self, a: CheckedArray, *, pads: Any, value: Any) -> CheckedArray:
        x = self._arg("pad", "a", a)
        ok = type(pads) is tuple and len(pads) == x.ndim
        ok = ok and all(type(p) is tuple and len(p) == 2 and all(type(v) is int and v >= 0 for v in p) for p in pads)
        if not ok:
            raise ContractError("pad", f"pads must be one (lo, hi) pair of ints >= 0 per axis, got {pads!r}")
        check_scalar("pad", "value", value)
        fill = np.asarray(value).astype(x.dtype)
        return self._out("pad", np.pad(x, pads, mode="constant", constant_values=fill), x.dtype)

    @native
    def flip(self, a: CheckedArray, *, axes: Any) -> CheckedArray:
        x = self._arg("flip", "a", a)
        check_axes("flip", axes, x.ndim)
        return self._out("flip", np.flip(x, axis=axes), x.dtype)

    @native
    def concat(self, *arrays: CheckedArray, axis: Any) -> CheckedArray:
        if not arrays:
            raise ContractError("concat", "needs at least one array")
        first = self._arg("concat", "arrays[0]", arrays[0])
        xs = [first] + [self._arg("concat", f"arrays[{i}]", h, like=first) for i, h in enumerate(arrays[1:], 1)]
        check_axis("concat", axis, first.ndim)
        return self._out("concat", np.concatenate(xs, axis=axis), first.dtype)

    # -- indexing --------------------------------------------------------------------------
    @native
    def gather(self, a: CheckedArray, index: CheckedArray, *, axis: Any) -> CheckedArray:
        x = self._arg("gather", "a", a)
        check_axis("gather", axis, x.ndim)
        idx = self._index("gather", "index", index, x.shape[axis])
        if idx.ndim != x.ndim:
            raise ContractError("gather", f"index has {idx.ndim} dims, a has {x.ndim}")
        return self._out("gather", np.take_along_axis(x, idx, axis=axis), x.dtype)

    @native
    def scatter_add(self, a: CheckedArray, index: CheckedArray, values: CheckedArray, *, axis: Any) -> CheckedArray:
        x = self._arg("scatter_add", "a", a, NUMERIC)
        check_axis("scatter_add", axis, x.ndim)
        idx = self._index("scatter_add", "index", index, x.shape[axis])
        vals = self._arg("scatter_add", "values", values, like=x)
        if vals.shape != idx.shape or idx.ndim != x.ndim:
            raise ContractError("scatter_add", f"index {idx.shape} and values {vals.shape} must match, ndim {x.ndim}")
        acc = x.astype(_F32) if x.dtype.itemsize == 2 and x.dtype.kind == "f" else x.copy()
        grid = list(np.ogrid[tuple(slice(0, n) for n in idx.shape)])
        grid[axis] = idx
        np.add.at(acc, tuple(grid), vals.astype(acc.dtype))
        return self._out("scatter_add", acc, x.dtype)

    @native
    def index_put(self, a: CheckedArray, values: CheckedArray, *indices: CheckedArray, accumulate: Any) -> CheckedArray:
        x = self._arg("index_put", "a", a)
        vals = self._arg("index_put", "values", values, like=x)
        check_bool("index_put", "accumulate", accumulate)
        if len(indices) > x.ndim:
            raise ContractError("index_put", f"{len(indices)} index arrays for a {x.ndim}-d array")
        idx = tuple(self._index("index_put", f"indices[{k}]", h, x.shape[k]) for k, h in enumerate(indices))
        if len({i.shape for i in idx}) > 1:
            raise ContractError("index_put", f"index arrays must share one shape, got {[i.shape for i in idx]}")
        target = (idx[0].shape if idx else ()) + x.shape[len(idx) :]
        if vals.shape != target:
            raise ContractError("index_put", f"values have shape {vals.shape}, expected {target}")
        out = x.copy()
        if accumulate:
            np.add.at(out, idx, vals)
        else:
            out[idx] = vals
        return self._out("index_put", out, x.dtype)

    # -- linear algebra and sorting ----------------------------------------------------------
    @native
    def matmul(self, a: CheckedArray, b: CheckedArray) -> CheckedArray:
        x = self._arg("matmul", "a", a, NUMERIC)
        y = self._arg("matmul", "b", b, NUMERIC, like=x)
        if x.ndim < 1 or y.ndim < 1:
            raise ContractError("matmul", "operands must have at least one dimension")
        with np.errstate(all="ignore"):
            return self._out("matmul", _wide(np.matmul)(x, y), x.dtype)

    @native
    def sort(self, a: CheckedArray, *, axis: Any, descending: Any) -> CheckedArray:
        x = self._arg("sort", "a", a, NUMERIC)
        check_axis("sort", axis, x.ndim)
        check_bool("sort", "descending", descending)
        out = np.sort(x, axis=axis, kind="stable")  # NaN last
        return self._out("sort", np.flip(out, axis=axis) if descending else out, x.dtype)

    @native
    def argsort(self, a: CheckedArray, *, axis: Any, descending: Any) -> CheckedArray:
        x = self._arg("argsort", "a", a, NUMERIC)
        check_axis("argsort", axis, x.ndim)
        check_bool("argsort", "descending", descending)
        if not descending:
            return self._out("argsort", np.argsort(x, axis=axis, kind="stable"), _INT64)
        # stable descending: sort the reversed array, map positions back, reverse again
        n = x.shape[axis]
        order = np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable")
        return self._out("argsort", np.flip(n - 1 - order, axis=axis), _INT64)

    # -- housekeeping ------------------------------------------------------------------------
    def handle_meta(self, a: CheckedArray) -> tuple[tuple[int, ...], str]:
        x = self._arg("handle_meta", "a", a)
        return x.shape, self._numpy_dtypes[x.dtype].name

"""Tracing through the dispatch layer: every op a function runs, as ember's op table names it.

While a trace runs, the device's lazy seam (``ember.device.set_defer``) points at the tracer,
and the device's implementation table answers "native" for every op, so that dispatch hands
each op to the tracer at the level the op table defines it (``conv``, ``layer_norm``,
``softmax``...), before any composite would break it into primitives. The tracer records the
op and computes its real value: the backend's native kernel where there is one, else the op's
composite, run with recording suspended. Outputs are therefore exactly the eager ones.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..autodiff.mode import no_grad
from ..creation import from_numpy
from ..device import Device, set_tracer
from ..dispatch import Op, make_tensor
from ..dtypes import DType, as_dtype
from ..errors import InvalidArgumentError
from ..lazy import materialize
from ..tensor import Tensor

__all__ = ["Value", "Call", "Trace", "trace"]

_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Value:
    """A traced value: its shape and dtype, and (for constants) its host data."""

    id: int
    shape: tuple[int, ...]
    dtype: DType
    data: np.ndarray | None = None
    name: str | None = None


@dataclass
class Call:
    """One recorded op: its inputs (values, or Python scalars), parameters, output, call site."""

    op: Op
    inputs: list[Any]
    params: dict[str, Any]
    output: Value
    where: str


@dataclass
class Trace:
    """What a traced function did: calls in order, the graph inputs and the named constants."""

    calls: list[Call] = field(default_factory=list)
    inputs: list[Value] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    named: dict[str, Value] = field(default_factory=dict)
    constants: list[Value] = field(default_factory=list)


def _call_site() -> str:
    """``file:line in function`` of the innermost frame outside ember's core package."""
    frame = sys._getframe(2)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_EMBER_DIR + os.sep) or os.sep + "tests" + os.sep in path:
            return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return "<unknown>"


class _Tracer:
    """The hook ``dispatch`` calls for every op while tracing."""

    def __init__(self, device: Device, real: Any, to_numpy: Any) -> None:
        self.device = device
        self.real = real
        self.to_numpy = to_numpy
        self.values: dict[int, tuple[Any, Value]] = {}  # id(handle) -> (handle kept alive, value)
        self.trace = Trace()
        self.depth = 0
        self.count = 0

    def value_of(self, handle: Any, *, register_constant: bool = True) -> Value:
        found = self.values.get(id(handle))
        if found is not None and found[0] is handle:
            return found[1]
        arr = np.asarray(self.to_numpy(handle))
        v = self.new_value(handle, tuple(arr.shape), as_dtype(arr.dtype))
        v.data = np.array(arr, copy=True)
        if register_constant:
            self.trace.constants.append(v)
        return v

    def new_value(self, handle: Any, shape: tuple[int, ...], dtype: DType) -> Value:
        self.count += 1
        v = Value(self.count, tuple(shape), dtype)
        self.values[id(handle)] = (handle, v)
        return v

    def register(self, t: Tensor, name: str | None) -> Value:
        v = self.new_value(t._data, t._shape, t._dtype)
        v.name = name
        return v

    def __call__(self, op: Op, handles: list[Any], params: dict[str, Any], shape: Any, dtype: Any) -> Any:
        handles = [materialize(h) for h in handles]  # values deferred before the trace began
        record = self.depth == 0
        if record:
            inputs = [h if type(h) in (int, float, bool) else self.value_of(h) for h in handles]
            if op.kind in ("creation", "random"):
                inputs = []
        out = self.compute(op, handles, params, shape, dtype)
        if record:
            v = self.new_value(out, tuple(shape), dtype)
            if op.kind == "creation":
                v.data = np.array(np.asarray(self.to_numpy(out)), copy=True)
            self.trace.calls.append(Call(op, inputs, dict(params), v, _call_site()))
        else:
            self.new_value(out, tuple(shape), dtype)
        return out

    def compute(self, op: Op, handles: list[Any], params: dict[str, Any], shape: Any, dtype: Any) -> Any:
        impl = self.real(op.name)
        if impl is not None:
            out = impl(*handles, **params)
            if out is not NotImplemented:
                return out
            # the kernel declined these operands (ember.dispatch): the composite computes them, as below
        if op.composite is None:
            raise InvalidArgumentError(f"onnx.export: op {op.name!r} has neither a native kernel nor a composite")
        tensors = []
        for h in handles:
            if type(h) in (int, float, bool):
                tensors.append(h)
                continue
            v = self.value_of(h, register_constant=False)
            tensors.append(make_tensor(h, v.shape, v.dtype, self.device))
        self.depth += 1
        try:
            out = op.composite(*tensors, **params)
        finally:
            self.depth -= 1
        return out._data


def _unshare(named: dict[str, Tensor]) -> None:
    """Give each distinct named tensor its own storage handle.

    The tracer knows a value by its backend handle, and a deep copy shares its source's handle
    (``TransformerEncoder`` copies one layer ``num_layers`` times): without this, every copy
    would be recorded as the last one's initializer, and the file would bind all the layers to
    one set of weights. The same tensor under two names (tied weights) stays one handle."""
    owner: dict[int, Tensor] = {}
    for t in named.values():
        first = owner.setdefault(id(t._data), t)
        if first is not t:
            with no_grad():  # same values, a handle of its own (clone may keep the handle)
                t.copy_(from_numpy(np.array(t.numpy(), copy=True), device=t.device))
            owner[id(t._data)] = t


def trace(fn: Any, args: list[Tensor], named: dict[str, Tensor], device: Device) -> tuple[Trace, Any]:
    """Run ``fn(*args)`` on ``device`` with every op recorded; ``named`` tensors (parameters and
    buffers) are graph initializers under their names. Returns the trace and ``fn``'s result."""
    for t in (*named.values(), *args):  # the tracer knows values by their backend handles
        t._data = materialize(t._data)
    _unshare(named)
    tracer = _Tracer(device, None, None)
    real = set_tracer(device, tracer)
    try:
        tracer.real = real
        tracer.to_numpy = to_numpy = real("to_numpy")
        for name, t in named.items():
            v = tracer.register(t, name)
            v.data = np.array(np.asarray(to_numpy(t._data)), copy=True)
            tracer.trace.named[name] = v
        for i, t in enumerate(args):
            tracer.trace.inputs.append(tracer.register(t, f"input_{i}"))
        with no_grad():
            result = fn(*args)
    finally:
        set_tracer(device, None)
    for t in _flatten(result):
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(
                f"onnx.export: the function returned a {type(t).__name__}; return a Tensor or a tuple of Tensors"
            )
        tracer.trace.outputs.append(tracer.value_of(t._data))
    return tracer.trace, result


def _flatten(result: Any) -> list[Any]:
    """A function's outputs, nested tuples and lists flattened in order (LSTM's ``(y, (h, c))``)."""
    if isinstance(result, (tuple, list)):
        return [t for part in result for t in _flatten(part)]
    return [result]

"""The pieces export lowers ops with: a graph builder, the emitter table and its decorator.

An emitter ``fn(builder, input_names, params, output_value, call) -> output_name`` writes the
ONNX nodes for one traced op (:mod:`ember.onnx.emitters` holds them, by family); one that meets
parameters ONNX cannot express raises :class:`CannotExpress`, and export reports every such op
with where it was called.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..dtypes import DType
from .trace import Call, Value

__all__ = ["Builder", "CannotExpress", "EMITTERS", "Emitter", "emits", "np_dtype", "NP_TO_ONNX"]

NP_TO_ONNX = {
    "float32": TensorProto.FLOAT,
    "float64": TensorProto.DOUBLE,
    "float16": TensorProto.FLOAT16,
    "bfloat16": TensorProto.BFLOAT16,
    "int8": TensorProto.INT8,
    "int16": TensorProto.INT16,
    "int32": TensorProto.INT32,
    "int64": TensorProto.INT64,
    "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16,
    "uint32": TensorProto.UINT32,
    "uint64": TensorProto.UINT64,
    "bool": TensorProto.BOOL,
}


class CannotExpress(Exception):
    """Raised by an emitter for parameters ONNX cannot express (collected, then reported)."""


class Builder:
    """Collects nodes and initializers; hands out fresh names."""

    def __init__(self, opset: int, dynamic: dict[int, dict[int, str]]) -> None:
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.count = 0
        self.dynamic = dynamic

    def fresh(self, hint: str) -> str:
        self.count += 1
        return f"{hint}_{self.count}"

    def node(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> Any:
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=self.fresh(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, value: Any, dtype: Any = None, hint: str = "const") -> str:
        arr = np.asarray(value, dtype=dtype)
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(arr, name))
        return name

    def ints(self, values: Sequence[int]) -> str:
        return self.const(np.asarray(list(values), dtype=np.int64), hint="ints")


Emitter = Callable[[Builder, list[Any], dict[str, Any], Value, Call], str]
EMITTERS: dict[str, Emitter] = {}


def emits(*names: str) -> Callable[[Emitter], Emitter]:
    def register(fn: Emitter) -> Emitter:
        for name in names:
            EMITTERS[name] = fn
        return fn

    return register


def np_dtype(dt: DType) -> Any:
    return dt.numpy

"""ember as an ONNX backend (``onnx.backend.base.Backend``), so the official backend tests
shipped in the ``onnx`` package run against any ember device.

>>> from ember.onnx.backend import EmberBackend
>>> EmberBackend.supports_device("CPU")
True
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend, BackendRep

from ..device import Device
from ..errors import OnnxModelError
from .graph import OnnxModule

__all__ = ["EmberBackend", "EmberRep", "backend_for"]


class EmberRep(BackendRep):
    """A prepared model: ``run(inputs)`` returns its outputs as numpy arrays."""

    def __init__(self, module: OnnxModule) -> None:
        self.module = module

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            out = self.module(**inputs)
        elif isinstance(inputs, (list, tuple)):
            out = self.module(*inputs)
        else:
            out = self.module(inputs)
        outs = out if isinstance(out, tuple) else (out,)
        return tuple(_host(t) for t in outs)


def _host(value: Any) -> Any:
    if value is None:  # an empty optional
        return None
    if isinstance(value, list):  # an ONNX sequence
        return [_host(v) for v in value]
    return np.asarray(value.numpy())


class EmberBackend(Backend):
    """Runs ONNX models on :attr:`device` (``cpu`` here; :func:`backend_for` makes others)."""

    device = "cpu"

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return True

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> EmberRep:
        if not cls.supports_device(device):
            raise OnnxModelError(f"EmberBackend: device {device!r} is not served; use 'CPU'")
        return EmberRep(OnnxModule(model, Device(cls.device)))

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU", outputs_info: Any = None, **kwargs: Any
    ) -> tuple[Any, ...]:
        names = [f"input_{i}" for i in range(len(inputs))]
        node = onnx.NodeProto.FromString(node.SerializeToString())
        graph = onnx.helper.make_graph(
            [node],
            "node",
            [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.input],
            [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None) for n in node.output],
        )
        model = onnx.helper.make_model(graph)
        feeds = dict(zip(node.input, inputs))
        del names
        return cls.prepare(model, device, **kwargs).run(feeds)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        # the ONNX test runner asks for "CPU" (and "CUDA"); one ember device serves "CPU"
        return str(device).upper().startswith("CPU")


def backend_for(device: str) -> type[EmberBackend]:
    """An :class:`EmberBackend` subclass that runs on ember device ``device`` ('opencl:0', ...)."""
    Device(device)  # parse early: a bad spec is an error here, not in every test
    return type(f"EmberBackend_{device.replace(':', '_')}", (EmberBackend,), {"device": device})

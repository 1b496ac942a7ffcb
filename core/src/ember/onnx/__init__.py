"""ember.onnx: import ONNX models as modules, export ember models to ONNX.

Needs the ``onnx`` package (``pip install "ember[onnx]"``). ``ember.onnx.load`` returns an
``nn.Module`` that runs on any ember device; ``ember.onnx.export`` traces a module or function
through ember's dispatch layer and writes a checked ONNX model.

>>> import ember as em
>>> "Conv" in em.onnx.supported_ops()
True
"""

from __future__ import annotations

from . import ops_attention, ops_extra, ops_math, ops_nn, ops_rnn, ops_signal, ops_tensor  # noqa: F401  (registers the op handlers)
from .export import export, to_model
from .graph import OnnxModule, from_model, load
from .proto import MAX_MODEL_BYTES, parse_model, read_model
from .registry import supported_ops

__all__ = [
    "OnnxModule",
    "load",
    "export",
    "to_model",
    "from_model",
    "read_model",
    "parse_model",
    "supported_ops",
    "MAX_MODEL_BYTES",
]

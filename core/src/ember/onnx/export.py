"""Export: an ember module or function, traced through dispatch, written as an ONNX model.

Each op of the trace (:mod:`ember.onnx.trace`) is lowered by the emitter registered for its
name in :data:`EMITTERS`; an op with no emitter, or with parameters ONNX cannot express, is
reported with the place it was called, all such ops in one error. Parameters and buffers become
initializers under their ``state_dict`` names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..creation import asarray
from ..device import Device
from ..errors import InvalidArgumentError, UnsupportedOnnxOpError
from ..nn.module import Module
from ..tensor import Tensor
from . import emitters  # noqa: F401  (registers the emitters)
from .emit import EMITTERS, NP_TO_ONNX, Builder, CannotExpress, np_dtype
from .trace import Trace, Value, trace

__all__ = ["export", "to_model", "EMITTERS", "DEFAULT_OPSET"]

DEFAULT_OPSET = 17
MIN_OPSET = 13


# -- the driver ----------------------------------------------------------------------------------
def _value_info(name: str, v: Value, dyn: dict[int, str] | None) -> onnx.ValueInfoProto:
    shape: list[Any] = list(v.shape)
    for axis, label in (dyn or {}).items():
        if axis < len(shape):
            shape[axis] = label
    return helper.make_tensor_value_info(name, NP_TO_ONNX[v.dtype.name], shape)


def to_model(
    tr: Trace,
    opset: int = DEFAULT_OPSET,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    dynamic_axes: dict[str, Any] | None = None,
) -> onnx.ModelProto:
    """The ONNX model of a trace (see :func:`export`)."""
    if not isinstance(opset, int) or not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise InvalidArgumentError(
            f"onnx.export: opset={opset!r} must be an int from {MIN_OPSET} to {onnx.defs.onnx_opset_version()}"
        )
    in_names = list(input_names) if input_names is not None else [f"input_{i}" for i in range(len(tr.inputs))]
    out_names = list(output_names) if output_names is not None else [f"output_{i}" for i in range(len(tr.outputs))]
    if len(in_names) != len(tr.inputs):
        raise InvalidArgumentError(
            f"onnx.export: input_names has {len(in_names)} names for {len(tr.inputs)} inputs; give one per input"
        )
    if len(out_names) != len(tr.outputs):
        raise InvalidArgumentError(
            f"onnx.export: output_names has {len(out_names)} names for {len(tr.outputs)} outputs; give one per output"
        )
    dyn_by_name: dict[str, dict[int, str]] = {}
    for name, axes in (dynamic_axes or {}).items():
        if name not in in_names and name not in out_names:
            raise InvalidArgumentError(
                f"onnx.export: dynamic_axes names {name!r}, which is not among the inputs {in_names} "
                f"or outputs {out_names}"
            )
        if isinstance(axes, dict):
            dyn_by_name[name] = {int(a): str(label) for a, label in axes.items()}
        else:
            dyn_by_name[name] = {int(a): f"{name}_dim{a}" for a in axes}
    # dynamic axes follow values through shape-preserving ops (for Reshape's target)
    dynamic: dict[int, dict[int, str]] = {}
    for v, name in zip(tr.inputs, in_names):
        if name in dyn_by_name:
            dynamic[v.id] = dyn_by_name[name]
    b = Builder(opset, dynamic)
    names: dict[int, str] = {}
    for v, name in zip(tr.inputs, in_names):
        names[v.id] = name
    for key, v in tr.named.items():
        names[v.id] = key
        b.initializers.append(numpy_helper.from_array(np.asarray(v.data), key))
    for v in tr.constants:
        names[v.id] = b.const(v.data, hint="constant")
    problems: list[str] = []
    for call in tr.calls:
        emitter = EMITTERS.get(call.op.name)
        if emitter is None:
            problems.append(f"{call.op.name} (called at {call.where})")
            continue
        args = []
        like = call.output
        for x in call.inputs:
            if isinstance(x, Value):
                args.append(names[x.id])
            else:
                ref = call.inputs[0] if isinstance(call.inputs[0], Value) else like
                args.append(b.const(np.asarray(x, dtype=np_dtype(ref.dtype))))
        if call.op.kind in ("elementwise_unary", "elementwise_binary", "reduction", "other", "contraction"):
            src = next((x for x in call.inputs if isinstance(x, Value)), None)
            if src is not None and src.id in dynamic and call.op.name not in ("reshape",):
                dynamic[like.id] = dynamic[src.id]
        try:
            names[like.id] = emitter(b, args, call.params, like, call)
        except CannotExpress as exc:
            problems.append(f"{call.op.name}: {exc} (called at {call.where})")
    if problems:
        raise UnsupportedOnnxOpError(
            f"onnx.export: {len(problems)} op(s) cannot be expressed in ONNX opset {opset}: " + "; ".join(problems)
        )
    outputs = []
    for v, name in zip(tr.outputs, out_names):
        src = names.get(v.id)
        if src is None:  # an input or a constant returned as is
            src = b.const(v.data) if v.data is not None else names[v.id]
        b.nodes.append(helper.make_node("Identity", [src], [name], name=b.fresh("output")))
        outputs.append(_value_info(name, v, dyn_by_name.get(name) or dynamic.get(v.id)))
    inputs = [_value_info(name, v, dyn_by_name.get(name)) for v, name in zip(tr.inputs, in_names)]
    graph = helper.make_graph(b.nodes, "ember", inputs, outputs, initializer=b.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="ember")
    model.ir_version = min(model.ir_version, 10)
    return model


def export(
    module_or_fn: Any,
    example_inputs: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    opset: int = DEFAULT_OPSET,
    dynamic_axes: dict[str, Any] | None = None,
    input_names: Sequence[str] | None = None,
    output_names: Sequence[str] | None = None,
    check: bool = True,
) -> onnx.ModelProto:
    """Trace ``module_or_fn(*example_inputs)`` and write it to ``path`` as an ONNX model.

    Parameters and buffers of a module become initializers named as in its ``state_dict``;
    ``dynamic_axes`` maps an input or output name to the axes left symbolic (a list, or a dict
    of axis -> label). The model is checked with ``onnx.checker.check_model(full_check=True)``.

    >>> import ember as em
    >>> from ember import nn
    >>> net = nn.Linear(4, 2)
    >>> model = em.onnx.export(net, (em.ones((1, 4)),), None)
    >>> [n.op_type for n in model.graph.node]
    ['Gemm', 'Identity']
    """
    if isinstance(example_inputs, Tensor) or not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    args = [x if isinstance(x, Tensor) else asarray(x) for x in example_inputs]
    if not args:
        raise InvalidArgumentError("onnx.export: example_inputs is empty; give one example tensor per input")
    named: dict[str, Tensor] = {}
    if isinstance(module_or_fn, Module):
        was_training = module_or_fn.training
        module_or_fn.eval()
        named = {k: v for k, v in module_or_fn.state_dict(keep_vars=True).items() if isinstance(v, Tensor)}
        fn = module_or_fn
    elif callable(module_or_fn):
        was_training = None
        fn = module_or_fn
    else:
        raise InvalidArgumentError(
            f"onnx.export: module_or_fn must be an nn.Module or a function, got {type(module_or_fn).__name__}"
        )
    device: Device = args[0].device.without_autodiff()
    try:
        tr, _ = trace(fn, args, named, device)
    finally:
        if was_training:
            module_or_fn.train()
    model = to_model(tr, opset, input_names, output_names, dynamic_axes)
    if check:
        onnx.checker.check_model(model, full_check=True)
    if path is not None:
        onnx.save(model, os.fspath(path))
    return model

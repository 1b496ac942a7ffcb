"""Import option ``layers=True``: ONNX nodes whose weight is an initializer become ember layers.

``Gemm`` and ``MatMul`` with a 2-D initializer weight (or a Transpose of one, as ember's own
exporter writes Linear) become :class:`~ember.nn.Linear`, and
``Conv`` over 1 or 2 spatial dims with an initializer weight becomes ``Conv1d``/``Conv2d``, and
``Gather`` on axis 0 of a 2-D initializer becomes :class:`~ember.nn.Embedding`, as child modules
of the imported model. The graph still runs node by node; a lifted node calls its
layer instead of its handler. So :func:`ember.nn.lora.apply_lora`, ``ParamGroup`` and anything
else that looks for Linear and Conv modules finds them in an imported model.

A node is lifted only when its layer computes exactly what the node does: Gemm with
``alpha = beta = 1``, no ``transA`` and a 1-D bias (or none); Conv with explicit symmetric pads
(or ``auto_pad=VALID``); the weight read by no other node and not a graph output. A bias read
by several nodes (directly or through an Identity) stays one Parameter that they all read.
Anything else stays a handler over plain parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..creation import from_numpy
from ..nn.conv import Conv1d, Conv2d
from ..nn.linear import Embedding, Linear
from ..nn.module import Module, Parameter
from .registry import DEFAULT_DOMAINS, OnnxNode

__all__ = ["Lifted", "lift_layers"]


@dataclass
class Lifted:
    """A node replaced by ``module`` (a child named ``path``), called with one of its inputs."""

    path: str
    module: Module
    #: ONNX initializer name -> (parameter path, whether ember's layout is its transpose)
    params: dict[str, tuple[str, bool]]
    #: which of the node's inputs the layer is called with
    feed: int = 0


def _uses(graph: Any) -> dict[str, int]:
    """How many times each name is read, by nodes, subgraphs (their free names) and outputs."""
    count: dict[str, int] = {}
    for node, subs in graph.nodes:
        for name in node.inputs:
            if name:
                count[name] = count.get(name, 0) + 1
        for sub in subs.values():
            for s in sub if isinstance(sub, list) else [sub]:
                for name in s.free:
                    count[name] = count.get(name, 0) + 1
    for name in graph.outputs:
        count[name] = count.get(name, 0) + 1
    return count


def _layer_name(node: OnnxNode, taken: set[str]) -> str:
    """A child-module name from the node's name: ``/encoder/layer.0/query/MatMul`` -> ``encoder_layer_0_query``."""
    raw = node.name.strip("/")
    if raw.endswith("/" + node.op_type):
        raw = raw[: -len(node.op_type) - 1]
    base = re.sub(r"[^0-9A-Za-z_]", "_", raw).strip("_") or node.op_type.lower()
    if base[0].isdigit():
        base = "l_" + base
    out, k = base, 1
    while out in taken:
        k += 1
        out = f"{base}_{k}"
    taken.add(out)
    return out


def _set(param: Parameter, value: np.ndarray, device: Any) -> Parameter:
    t = from_numpy(np.ascontiguousarray(value, dtype=value.dtype), device=device)
    return Parameter(t)


def _linear(
    node: OnnxNode, inits: dict[str, np.ndarray], alias: dict[str, str], device: Any, transposed: dict[str, str]
) -> tuple[Module, dict] | None:
    w_name = node.inputs[1] if len(node.inputs) > 1 else ""
    via_transpose = node.op_type == "MatMul" and w_name in transposed
    if via_transpose:  # MatMul(x, Transpose(W)): W is already (out, in), as ember's exporter writes Linear
        w_name = transposed[w_name]
    w = inits.get(w_name)
    if w is None or w.ndim != 2 or w.dtype.kind != "f":
        return None
    bias_name = ""
    if node.op_type == "Gemm":
        if node.attr("transA", 0) or node.attr("alpha", 1.0) != 1.0:
            return None
        trans_b = bool(node.attr("transB", 0))
        if len(node.inputs) > 2 and node.inputs[2]:
            bias_name = alias.get(node.inputs[2], node.inputs[2])
            b = inits.get(bias_name)
            if b is None or node.attr("beta", 1.0) != 1.0 or b.dtype != w.dtype:
                return None
    else:
        trans_b = via_transpose
    weight = w if trans_b else w.T  # ember's Linear holds (out, in)
    out_f, in_f = weight.shape
    if bias_name and inits[bias_name].shape != (out_f,):
        return None
    layer = Linear(in_f, out_f, bias=bool(bias_name), device=device, dtype=str(w.dtype))
    layer.weight = _set(layer.weight, weight, device)
    params = {w_name: ("weight", not trans_b)}
    if bias_name:
        layer.bias = _set(layer.bias, inits[bias_name], device)
        params[bias_name] = ("bias", False)
    return layer, params


def _conv(
    node: OnnxNode, inits: dict[str, np.ndarray], alias: dict[str, str], device: Any, transposed: dict[str, str]
) -> tuple[Module, dict] | None:
    w_name = node.inputs[1] if len(node.inputs) > 1 else ""
    w = inits.get(w_name)
    if w is None or w.ndim not in (3, 4) or w.dtype.kind != "f":
        return None
    nd = w.ndim - 2
    kernel = list(node.attr("kernel_shape") or w.shape[2:])
    if kernel != list(w.shape[2:]):
        return None
    auto_pad = node.attr("auto_pad", "NOTSET")
    pads = node.attr("pads") or [0] * (2 * nd)
    if auto_pad == "VALID":
        pads = [0] * (2 * nd)
    elif auto_pad not in ("NOTSET", ""):
        return None
    if len(pads) != 2 * nd or pads[:nd] != pads[nd:]:
        return None
    bias_name = alias.get(node.inputs[2], node.inputs[2]) if len(node.inputs) > 2 else ""
    if bias_name and (bias_name not in inits or inits[bias_name].shape != (w.shape[0],)):
        return None
    groups = int(node.attr("group", 1))
    cls = Conv1d if nd == 1 else Conv2d
    layer = cls(
        w.shape[1] * groups,
        w.shape[0],
        tuple(kernel),
        stride=tuple(node.attr("strides") or [1] * nd),
        padding=tuple(pads[:nd]),
        dilation=tuple(node.attr("dilations") or [1] * nd),
        groups=groups,
        bias=bool(bias_name),
        device=device,
        dtype=str(w.dtype),
    )
    layer.weight = _set(layer.weight, w, device)
    params = {w_name: ("weight", False)}
    if bias_name:
        layer.bias = _set(layer.bias, inits[bias_name], device)
        params[bias_name] = ("bias", False)
    return layer, params


def _embedding(
    node: OnnxNode, inits: dict[str, np.ndarray], alias: dict[str, str], device: Any, transposed: dict[str, str]
) -> tuple[Module, dict] | None:
    w_name = node.inputs[0]
    w = inits.get(w_name)
    if w is None or w.ndim != 2 or w.dtype.kind != "f" or node.attr("axis", 0) not in (0, -2):
        return None
    layer = Embedding(w.shape[0], w.shape[1], device=device, dtype=str(w.dtype))
    layer.weight = _set(layer.weight, w, device)
    return layer, {w_name: ("weight", False)}


_MAKERS = {"Gemm": _linear, "MatMul": _linear, "Conv": _conv, "Gather": _embedding}
#: which of the node's inputs is the layer's input (the rest are its weights)
_FEED = {"Gemm": 0, "MatMul": 0, "Conv": 0, "Gather": 1}


def _aliases(graph: Any) -> dict[str, str]:
    """Identity nodes of the main graph that rename an initializer: ``output -> initializer``.

    Exporters write equal constants once and the rest as Identity of the first (the zero biases
    of a fresh model), so a bias may reach its node under another name."""
    out: dict[str, str] = {}
    for node, _subs in graph.nodes:
        if node.op_type == "Identity" and node.domain in DEFAULT_DOMAINS and len(node.inputs) == 1:
            src = out.get(node.inputs[0], node.inputs[0])
            if src in graph.initializers and node.outputs and node.outputs[0]:
                out[node.outputs[0]] = src
    return out


def _transposes(graph: Any) -> dict[str, str]:
    """Transpose nodes that swap the two axes of a 2-D initializer: ``output -> initializer``."""
    out: dict[str, str] = {}
    for node, _subs in graph.nodes:
        if node.op_type != "Transpose" or node.domain not in DEFAULT_DOMAINS or len(node.inputs) != 1:
            continue
        w = graph.initializers.get(node.inputs[0])
        if w is not None and w.ndim == 2 and list(node.attr("perm") or [1, 0]) == [1, 0] and node.outputs:
            out[node.outputs[0]] = node.inputs[0]
    return out


def lift_layers(graph: Any, device: Any, taken: set[str]) -> dict[int, Lifted]:
    """The main graph's liftable nodes (keyed by ``id(node)``) with their new layers.

    A weight read anywhere else keeps its node a handler (tied embeddings stay one parameter).
    A bias may be read by several nodes: every lifted layer that reads it holds the same
    Parameter, and the other readers get that Parameter too.
    """
    uses = _uses(graph)
    alias, transposed = _aliases(graph), _transposes(graph)
    out: dict[int, Lifted] = {}
    shared: dict[str, Parameter] = {}
    for node, _subs in graph.nodes:
        make = _MAKERS.get(node.op_type) if node.domain in DEFAULT_DOMAINS else None
        if make is None or len(node.inputs) < 2 or not all(node.inputs[:2]):
            continue
        weight_in = node.inputs[1 - _FEED[node.op_type]]
        if uses.get(weight_in, 0) != 1 or uses.get(transposed.get(weight_in, ""), 1) != 1:
            continue  # the weight (or the initializer a Transpose reads) is read elsewhere too
        got = make(node, graph.initializers, alias, device, transposed)
        if got is None:
            continue
        layer, params = got
        path = _layer_name(node, taken)
        mine = {}
        for name, (p, flipped) in params.items():
            if p == "bias" and name in shared:
                layer.register_parameter("bias", shared[name])
                continue
            if p == "bias":
                shared[name] = layer.bias
            mine[name] = (f"{path}.{p}", flipped)
        out[id(node)] = Lifted(path, layer, mine, _FEED[node.op_type])
    return out

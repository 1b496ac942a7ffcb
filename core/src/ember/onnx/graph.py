"""Import: an ONNX model as an ``nn.Module`` that runs on any ember device.

The graph is checked once at load (every name defined before use, no cycles, every op known to
the importer at the model's opset; all unknown ops reported in one error) and interpreted in
``forward``: each node's handler (:mod:`ember.onnx.registry`) runs ember ops, so autodiff,
autocast and every backend work as for a hand-written model. Floating initializers become
trainable parameters; integer ones become buffers.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto

from ..creation import from_numpy
from ..device import Device, device_arg
from ..errors import ArgumentTypeError, EmberError, OnnxModelError, UnsupportedOnnxOpError
from ..nn.module import Module, Parameter
from ..tensor import Tensor
from . import proto
from .layers import lift_layers
from .registry import DEFAULT_DOMAINS, Context, OnnxNode, find

__all__ = ["OnnxModule", "load", "from_model", "decode_graph"]

#: the most nodes a graph (with its subgraphs) may hold
MAX_NODES = 1_000_000


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def _attr_value(a: AttributeProto, base_dir: str | None, node: str) -> Any:
    t = a.type
    if t == AttributeProto.FLOAT:
        return float(a.f)
    if t == AttributeProto.INT:
        return int(a.i)
    if t == AttributeProto.STRING:
        return _text(a.s)
    if t == AttributeProto.TENSOR:
        return proto.to_numpy(a.t, base_dir)
    if t == AttributeProto.FLOATS:
        return [float(v) for v in a.floats]
    if t == AttributeProto.INTS:
        return [int(v) for v in a.ints]
    if t == AttributeProto.STRINGS:
        return [_text(v) for v in a.strings]
    if t == AttributeProto.TENSORS:
        return [proto.to_numpy(v, base_dir) for v in a.tensors]
    if t == AttributeProto.GRAPH:
        return a.g
    if t in (AttributeProto.TYPE_PROTO, AttributeProto.TYPE_PROTOS):
        return None  # type declarations (Optional's element type): values carry their own types
    kind = AttributeProto.AttributeType.Name(t) if t in AttributeProto.AttributeType.values() else t
    raise OnnxModelError(f"onnx: {node}: attribute {a.name!r} has type {kind}, which ember does not read")


class Graph:
    """A decoded (sub)graph: nodes in run order, its inputs, outputs and constant values."""

    def __init__(self, g: onnx.GraphProto, base_dir: str | None, outer: set[str], opsets: dict[str, int]) -> None:
        self.name = g.name
        self.initializers: dict[str, np.ndarray] = {}
        for t in g.initializer:
            if not t.name:
                raise OnnxModelError(f"onnx: graph {g.name!r} has an initializer without a name")
            self.initializers[t.name] = proto.to_numpy(t, base_dir)
        if len(g.sparse_initializer):
            raise OnnxModelError(f"onnx: graph {g.name!r} has sparse initializers, which ember does not read")
        self.inputs = [v.name for v in g.input if v.name not in self.initializers]
        self.input_types = {v.name: v.type for v in g.input}
        self.outputs = [v.name for v in g.output]
        if len(g.node) > MAX_NODES:
            raise OnnxModelError(f"onnx: graph {g.name!r} has {len(g.node)} nodes, over ember's limit of {MAX_NODES}")
        nodes = []
        for i, n in enumerate(g.node):
            node = OnnxNode(n.name or f"{n.op_type}_{i}", n.op_type, n.domain, list(n.input), list(n.output))
            where = node.where()
            for a in n.attribute:
                if a.ref_attr_name:
                    raise OnnxModelError(f"onnx: {where}: attribute {a.name!r} refers to a function attribute")
                if a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS):
                    node.graphs[a.name] = a.g if a.type == AttributeProto.GRAPH else list(a.graphs)
                else:
                    node.attrs[a.name] = _attr_value(a, base_dir, where)
            nodes.append(node)
        known = set(outer) | set(self.initializers) | set(self.inputs)
        # subgraphs first, so their free names count as inputs of their node
        self.subgraphs: dict[int, dict[str, Graph | list[Graph]]] = {}
        for i, node in enumerate(nodes):
            for key, sub in node.graphs.items():
                scope = known | {o for n in nodes for o in n.outputs}
                if isinstance(sub, list):
                    self.subgraphs.setdefault(i, {})[key] = [Graph(s, base_dir, scope, opsets) for s in sub]
                else:
                    self.subgraphs.setdefault(i, {})[key] = Graph(sub, base_dir, scope, opsets)
        self.nodes = self._order(nodes, known)
        self.opsets = opsets
        self.free = self._free_names(outer)

    def _free_names(self, outer: set[str]) -> set[str]:
        defined = set(self.initializers) | set(self.inputs)
        free = set()
        for node, subs in self.nodes:
            for name in node.inputs:
                if name and name not in defined:
                    free.add(name)
            for sub in subs.values():
                for s in sub if isinstance(sub, list) else [sub]:
                    free |= {n for n in s.free if n not in defined}
            defined.update(node.outputs)
        for name in self.outputs:
            if name not in defined:
                free.add(name)
        return free & outer

    def _order(self, nodes: list[OnnxNode], known: set[str]) -> list[tuple[OnnxNode, dict[str, Any]]]:
        """The nodes in an order where every input is computed first (Kahn's algorithm)."""
        producer: dict[str, int] = {}
        for i, node in enumerate(nodes):
            for o in node.outputs:
                if not o:
                    continue
                if o in producer or o in self.initializers or o in self.inputs:
                    raise OnnxModelError(f"onnx: {node.where()}: output {o!r} is defined twice in graph {self.name!r}")
                producer[o] = i
        needs: list[set[int]] = []
        users: list[list[int]] = [[] for _ in nodes]
        for i, node in enumerate(nodes):
            names = [n for n in node.inputs if n]
            for sub in self.subgraphs.get(i, {}).values():
                for s in sub if isinstance(sub, list) else [sub]:
                    names += sorted(s.free)
            deps = set()
            for name in names:
                if name in producer:
                    deps.add(producer[name])
                elif name not in known:
                    raise OnnxModelError(
                        f"onnx: {node.where()} reads {name!r}, which no node, input or initializer of "
                        f"graph {self.name!r} defines"
                    )
            deps.discard(-1)
            if i in deps:
                raise OnnxModelError(f"onnx: {node.where()} reads its own output: the graph has a cycle")
            needs.append(deps)
            for d in deps:
                users[d].append(i)
        ready = [i for i, d in enumerate(needs) if not d]
        order = []
        remaining = [len(d) for d in needs]
        while ready:
            i = ready.pop(0) if len(ready) < 2 else ready.pop(ready.index(min(ready)))
            order.append(i)
            for u in users[i]:
                remaining[u] -= 1
                if remaining[u] == 0:
                    ready.append(u)
        if len(order) != len(nodes):
            stuck = [nodes[i].where() for i in range(len(nodes)) if remaining[i] > 0][:5]
            raise OnnxModelError(f"onnx: graph {self.name!r} has a cycle through {', '.join(stuck)}")
        for name in self.outputs:
            if name not in producer and name not in known:
                raise OnnxModelError(f"onnx: graph {self.name!r} output {name!r} is never computed")
        return [(nodes[i], self.subgraphs.get(i, {})) for i in order]

    def unsupported(self) -> list[str]:
        """``'name (OpType)'`` of every node (subgraphs included) the importer has no handler for."""
        missing = []
        for node, subs in self.nodes:
            opset = self.opsets.get("" if node.domain in DEFAULT_DOMAINS else node.domain)
            if opset is not None and node.domain in DEFAULT_DOMAINS:
                _check_arity(node, opset)
            if opset is None or find(node.domain, node.op_type, opset) is None:
                dom = f"{node.domain}." if node.domain not in DEFAULT_DOMAINS else ""
                at = f" at opset {opset}" if opset is not None else " (its domain is not in opset_import)"
                missing.append(f"{node.name!r} ({dom}{node.op_type}{at})")
            for sub in subs.values():
                for s in sub if isinstance(sub, list) else [sub]:
                    missing += s.unsupported()
        return missing


def _check_arity(node: OnnxNode, opset: int) -> None:
    """The node's input and output counts fit its ONNX schema at ``opset``."""
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except (onnx.defs.SchemaError, TypeError, ValueError):
        return  # not a standard op: the handler lookup reports it
    n_in, n_out = len(node.inputs), len(node.outputs)
    if not schema.min_input <= n_in <= schema.max_input:
        raise OnnxModelError(
            f"onnx: {node.where()} has {n_in} input(s); {node.op_type} at opset {opset} takes "
            f"{schema.min_input} to {schema.max_input}"
        )
    if not schema.min_output <= n_out <= schema.max_output:
        raise OnnxModelError(
            f"onnx: {node.where()} has {n_out} output(s); {node.op_type} at opset {opset} gives "
            f"{schema.min_output} to {schema.max_output}"
        )


def decode_graph(model: onnx.ModelProto, base_dir: str | None) -> tuple[Graph, dict[str, int]]:
    """The model's main graph, checked, and its opsets by domain."""
    opsets: dict[str, int] = {}
    for imp in model.opset_import:
        dom = "" if imp.domain in DEFAULT_DOMAINS else imp.domain
        if not 1 <= imp.version <= 1000:
            raise OnnxModelError(
                f"onnx: opset_import gives domain {imp.domain!r} version {imp.version}; expected 1 to 1000"
            )
        opsets[dom] = int(imp.version)
    if not opsets:
        opsets[""] = 1  # IR version 1-2 models had no opset_import
    if len(model.functions):
        raise UnsupportedOnnxOpError(
            f"onnx: the model defines {len(model.functions)} local function(s) "
            f"({', '.join(f.name for f in model.functions)}); inline them first (onnx.inliner.inline_local_functions)"
        )
    graph = Graph(model.graph, base_dir, set(), opsets)
    missing = graph.unsupported()
    if missing:
        raise UnsupportedOnnxOpError(
            f"onnx: ember cannot import {len(missing)} node(s) of this model: {'; '.join(missing)}. "
            f"`ember onnx ops` lists the ops ember imports"
        )
    return graph, opsets


def _param_name(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^0-9A-Za-z_]", "_", name) or "param"
    if base[0].isdigit():
        base = "p_" + base
    out, k = base, 1
    while out in taken:
        k += 1
        out = f"{base}_{k}"
    taken.add(out)
    return out


class OnnxModule(Module):
    """An imported ONNX graph: call it with the graph's inputs, in order (or by name).

    Returns one tensor, or a tuple when the graph has several outputs. With ``layers=True``,
    Gemm, MatMul, Conv and Gather nodes with initializer weights run as child ``nn.Linear``,
    ``nn.Conv1d``/``Conv2d`` and ``nn.Embedding`` modules (:mod:`ember.onnx.layers`), which LoRA
    can adapt.
    """

    def __init__(
        self, model: onnx.ModelProto, device: Any = None, base_dir: str | None = None, *, layers: bool = False
    ) -> None:
        super().__init__()
        dev = device_arg(device)
        graph, opsets = decode_graph(model, base_dir)
        self.__dict__["_graph"] = graph
        self.__dict__["_device"] = dev
        self.__dict__["opsets"] = opsets
        self.__dict__["input_names"] = list(graph.inputs)
        self.__dict__["output_names"] = list(graph.outputs)
        names: dict[str, str] = {}
        taken: set[str] = set()
        lifted = lift_layers(graph, dev, taken) if layers else {}
        self.__dict__["_lifted"] = lifted
        transposed: set[str] = set()
        held: dict[str, tuple[Module, str]] = {}  # ONNX name -> (its layer, attribute), for other readers
        for item in lifted.values():
            self.register_module(item.path, item.module)
            for k, (path, t) in item.params.items():
                names[k] = path
                if t:
                    transposed.add(k)
                else:
                    held[k] = (item.module, path.rsplit(".", 1)[1])
        self.__dict__["transposed_initializers"] = transposed
        self.__dict__["_held"] = held
        for onnx_name, arr in graph.initializers.items():
            if onnx_name in names:
                continue
            key = _param_name(onnx_name, taken)
            names[onnx_name] = key
            t = from_numpy(np.asarray(arr, order="C"), device=dev)
            if arr.dtype.kind == "f":
                self.register_parameter(key, Parameter(t))
            else:
                self.register_buffer(key, t)
        self.__dict__["parameter_names"] = names
        self.__dict__["_consts"] = {}

    @property
    def device(self) -> Device:
        return self._device

    def _initial_env(self) -> dict[str, Any]:
        env: dict[str, Any] = {}
        for onnx_name, key in self.parameter_names.items():
            if onnx_name in self.transposed_initializers:
                continue  # a lifted layer's weight in ember's layout: only its node reads it, through the layer
            if onnx_name in self._held:  # a lifted layer's bias or weight, the same Parameter
                layer, attr = self._held[onnx_name]
                env[onnx_name] = getattr(layer, attr)
                continue
            t = self._parameters.get(key)
            env[onnx_name] = t if t is not None else self._buffers.get(key)
        return env

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        names = self.input_names
        if len(args) > len(names):
            raise OnnxModelError(f"OnnxModule: the model takes {len(names)} input(s) {names}, got {len(args)}")
        feed = dict(zip(names, args))
        for k, v in kwargs.items():
            if k not in names:
                raise OnnxModelError(f"OnnxModule: no input named {k!r}; the inputs are {names}")
            feed[k] = v
        env = self._initial_env()
        for name in names:
            if name not in feed:
                raise OnnxModelError(f"OnnxModule: input {name!r} is missing; the inputs are {names}")
            env[name] = self._as_tensor(feed[name], name)
        outs = self._run(self._graph, env)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _as_tensor(self, value: Any, name: str) -> Any:
        if value is None:  # an empty ONNX optional
            return None
        if isinstance(value, list):  # an ONNX sequence
            return [self._as_tensor(v, name) for v in value]
        if isinstance(value, Tensor):
            return value if value.device == self._device else value.to(self._device)
        arr = np.asarray(value)
        if arr.dtype not in proto.ONNX_TO_NUMPY.values() and arr.dtype.name != "bfloat16":
            raise OnnxModelError(f"OnnxModule: input {name!r} has dtype {arr.dtype}, which ember cannot hold")
        return from_numpy(np.asarray(arr, order="C"), device=self._device)

    def _run(self, graph: Graph, env: dict[str, Any]) -> list[Any]:
        dev = self._device
        for name, arr in graph.initializers.items():
            if name not in env:
                env[name] = from_numpy(np.asarray(arr, order="C"), device=dev)
        opset_of = graph.opsets
        for node, subs in graph.nodes:
            opset = opset_of["" if node.domain in DEFAULT_DOMAINS else node.domain]
            fn = find(node.domain, node.op_type, opset)
            if fn is None:  # pragma: no cover - decode_graph refused the model
                raise UnsupportedOnnxOpError(f"onnx: no handler for {node.where()}")
            lifted = self._lifted.get(id(node)) if graph is self._graph else None
            if lifted:
                xs = [env[node.inputs[lifted.feed]]]
            else:
                xs = [env[n] if n else None for n in node.inputs]
            ctx = Context(dev, opset, self._run_sub, env, self.training)
            node.graphs = subs
            try:
                out = getattr(self, lifted.path)(xs[0]) if lifted else fn(ctx, node, xs)
            except EmberError:
                raise
            except Exception as exc:  # a malformed node the checks above let through; name it
                raise OnnxModelError(
                    f"onnx: {node.where()} cannot run on its inputs ({type(exc).__name__}: {exc}); "
                    f"the model is malformed or uses the op in a way ember does not import"
                ) from exc
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            for name, value in zip(node.outputs, outs):
                if name:
                    env[name] = value
            for name in node.outputs[len(outs) :]:
                if name:
                    raise UnsupportedOnnxOpError(
                        f"onnx: {node.where()}: ember computes {len(outs)} output(s) of {node.op_type}, "
                        f"the model asks for {len(node.outputs)}"
                    )
        return [env[n] for n in graph.outputs]

    def _run_sub(self, graph: Graph, inputs: list[Any], outer: dict[str, Any]) -> list[Any]:
        env = dict(outer)
        for name, value in zip(graph.inputs, inputs):
            env[name] = value
        return self._run(graph, env)


def from_model(
    model: onnx.ModelProto,
    device: Any = None,
    base_dir: str | os.PathLike[str] | None = None,
    *,
    layers: bool = False,
) -> OnnxModule:
    """An :class:`OnnxModule` from a ModelProto already in memory."""
    if not isinstance(model, onnx.ModelProto):
        raise OnnxModelError(f"onnx.from_model: expected an onnx.ModelProto, got {type(model).__name__}")
    if not isinstance(layers, bool):
        raise ArgumentTypeError(f"onnx.from_model: layers must be True or False, got {layers!r}")
    return OnnxModule(model, device, None if base_dir is None else str(base_dir), layers=layers)


def load(
    path: str | os.PathLike[str],
    device: Any = None,
    *,
    max_bytes: int = proto.MAX_MODEL_BYTES,
    layers: bool = False,
) -> OnnxModule:
    """Load an ONNX model as a module on ``device`` (default: ``EMBER_DEVICE`` or cpu).

    Initializers become parameters: trainable when ``device`` has autodiff on. ``layers=True``
    makes Gemm/MatMul/Conv/Gather nodes with initializer weights into ``nn.Linear``/``nn.Conv``/
    ``nn.Embedding`` child modules (for LoRA and ``ParamGroup`` selection; :mod:`ember.onnx.layers`).

    >>> import ember as em
    >>> model = em.onnx.load("model.onnx", device="cpu")  # doctest: +SKIP
    """
    if not isinstance(layers, bool):
        raise ArgumentTypeError(f"onnx.load: layers must be True or False, got {layers!r}")
    model = proto.read_model(path, max_bytes)
    return OnnxModule(model, device, str(Path(path).resolve().parent), layers=layers)

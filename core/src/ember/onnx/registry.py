"""The table of ONNX op handlers: ``(domain, op_type)`` -> handlers by the opset they start at.

A handler is ``fn(ctx, node, inputs) -> Tensor | sequence of Tensor``, written in ember ops, so
an imported model runs on every ember device. ``@handler("Softmax", since=13)`` registers one;
the importer picks, for each node, the handler with the largest ``since`` not above the model's
opset for the node's domain (``opset_import``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["OnnxNode", "Context", "HANDLERS", "handler", "find", "supported_ops"]

DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass
class OnnxNode:
    """One decoded ONNX node: attributes as Python values, tensors as numpy arrays."""

    name: str
    op_type: str
    domain: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    #: subgraph attributes (If/Loop/Scan bodies), decoded lazily by the graph
    graphs: dict[str, Any] = field(default_factory=dict)

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def where(self) -> str:
        return f"node {self.name!r} ({self.op_type})" if self.name else f"a {self.op_type} node"


@dataclass
class Context:
    """What a handler may need besides its inputs: the device, the opset, subgraph running."""

    device: Any
    opset: int
    #: run a subgraph: ``run_graph(graph, inputs, outer_env) -> list of outputs``
    run_graph: Callable[..., list[Any]]
    env: dict[str, Any]
    #: whether the model runs in training mode (Dropout's default)
    training: bool = False


Handler = Callable[[Context, OnnxNode, list[Any]], Any]
HANDLERS: dict[tuple[str, str], list[tuple[int, Handler]]] = {}


def handler(*op_types: str, since: int = 1, domain: str = "") -> Callable[[Handler], Handler]:
    """Register ``fn`` for ``op_types`` from opset ``since`` on."""

    def register(fn: Handler) -> Handler:
        for op_type in op_types:
            versions = HANDLERS.setdefault((domain, op_type), [])
            versions.append((since, fn))
            versions.sort(key=lambda v: v[0])
        return fn

    return register


def find(domain: str, op_type: str, opset: int) -> Handler | None:
    """The handler for ``op_type`` at ``opset`` (None when ember has none)."""
    key = ("" if domain in DEFAULT_DOMAINS else domain, op_type)
    versions = HANDLERS.get(key)
    if not versions:
        return None
    chosen = None
    for since, fn in versions:
        if since <= opset:
            chosen = fn
    return chosen


def supported_ops() -> list[str]:
    """Every op type the importer handles, sorted (``domain.op`` outside the default domain)."""
    return sorted(op if not dom else f"{dom}.{op}" for dom, op in HANDLERS)

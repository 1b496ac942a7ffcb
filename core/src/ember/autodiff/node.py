"""The graph node: one recorded op application (a leaf type; only dispatch creates nodes)."""

from __future__ import annotations

from typing import Any

__all__ = ["Node"]


class Node:
    """An op applied to input tensors with parameters; ``datas`` are the inputs' handles at
    record time, so the backward walk can tell an input that was changed in place since."""

    __slots__ = ("op", "inputs", "datas", "params")

    def __init__(self, op: Any, inputs: tuple[Any, ...], params: dict[str, Any]) -> None:
        self.op = op
        self.inputs: tuple[Any, ...] | None = inputs
        self.datas = tuple(t._data for t in inputs)
        self.params = params

    def __repr__(self) -> str:
        return f"<Node {self.op.name}>"

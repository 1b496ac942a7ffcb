"""The graph node: one recorded op application (a leaf type; only dispatch creates nodes).

A node keeps what its op's vjp rule reads and no more (PyTorch's saved tensors): an input whose
value the rule never reads, itself computed by an op whose rule never reads its output, is kept
as a *stand-in* (the tensor's shape, dtype, device and graph node, no data). So the bias add
after a matmul does not keep the matmul's product alive until backward, nor a reshape its input.
The tables below say which rules read what; an op missing from them keeps everything.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["Node", "INPUTS_UNREAD", "OUTPUT_UNREAD", "READ_FOR", "for_backward"]

#: ops whose vjp rule reads no input's value: only shapes, dtypes, devices and which need a gradient
#: (the unary ones whose derivative is written with the output, as PyTorch saves their result)
INPUTS_UNREAD = frozenset(
    {
        "add", "sub", "neg", "cast", "relu", "avg_pool",
        "reshape", "permute", "expand", "slice", "pad", "flip", "concat", "sum",
        "exp", "exp2", "expm1", "sqrt", "rsqrt", "reciprocal", "tanh", "tan", "sigmoid",
        "softmax", "log_softmax",
    }
)  # fmt: skip

#: ops whose vjp rule never reads the op's output
OUTPUT_UNREAD = frozenset(
    {
        "add", "sub", "neg", "mul", "div", "cast", "where", "matmul", "conv", "gelu", "avg_pool", "max_pool",
        "layer_norm", "cross_entropy",
        "reshape", "permute", "expand", "slice", "pad", "flip", "concat", "sum",
        "log", "log1p", "log2", "log10", "erf", "square", "sin", "cos", "sinh", "cosh",
        "asin", "acos", "atan", "asinh", "acosh", "atanh", "silu", "softplus", "gelu_tanh",
        "rms_norm", "layer_norm_backward", "softmax_backward",
    }
)  # fmt: skip

#: ops whose rule reads an input's value only for the gradient of other inputs: per input, the
#: positions whose needing a gradient makes it read (mul's ``a`` only for ``b``'s gradient); an
#: input past the tuple is always read, a missing position (a Python scalar operand) never needs one
READ_FOR: dict[str, tuple[tuple[int, ...], ...]] = {
    "mul": ((1,), (0,)),
    "div": ((1,), (0, 1)),
    "matmul": ((1,), (0,)),
    "conv": ((1,), (0,), ()),
}

_new = object.__new__
_weakref = weakref.ref


class Node:
    """An op applied to input tensors with parameters; ``datas`` are the inputs' handles at
    record time, so the backward walk can tell an input that was changed in place since (a
    stand-in's is None: its value does not enter the gradient)."""

    __slots__ = ("op", "inputs", "datas", "params", "_stand_in")

    def __init__(self, op: Any, inputs: tuple[Any, ...], params: dict[str, Any]) -> None:
        self.op = op
        name = op.name
        # a stand-in for each input the rule does not read (INPUTS_UNREAD: none is; READ_FOR: per input)
        # that an op whose rule skips its output computed; _stand_in, inline (every recorded op comes here)
        reads = READ_FOR.get(name) if name not in INPUTS_UNREAD else ()
        if reads is not None:
            n = len(inputs)
            stood = []
            changed = False
            for i, t in enumerate(inputs):
                node = t._node
                if node is not None and node.op.name in OUTPUT_UNREAD:
                    if reads:  # READ_FOR: t is kept where a wanted gradient reads it (past the tuple: always)
                        if i >= len(reads):
                            stood.append(t)
                            continue
                        wanted = False
                        for j in reads[i]:
                            if j < n and inputs[j]._rg:
                                wanted = True
                                break
                        if wanted:
                            stood.append(t)
                            continue
                    ref = node._stand_in
                    stub = ref() if ref is not None else None
                    t = stub if stub is not None else _new_stand_in(t, node)  # the first consumer makes it
                    changed = True
                stood.append(t)
            if changed or type(inputs) is not tuple:
                inputs = tuple(stood)
        self.inputs: tuple[Any, ...] | None = inputs
        n = len(inputs)
        self.datas = (
            (inputs[0]._data,)
            if n == 1
            else (inputs[0]._data, inputs[1]._data)
            if n == 2
            else tuple([t._data for t in inputs])
        )
        self.params = params
        self._stand_in: weakref.ref[Any] | None = None  # of this node's output, while consumers hold it

    def __repr__(self) -> str:
        return f"<Node {self.op.name}>"


def _stand_in(t: Any) -> Any:
    """``t`` without its data, for a consumer whose rule reads only its metadata; ``t`` itself where
    ``t``'s own rule reads it (its output) or it is a leaf. One stand-in per tensor, shared by
    every consumer, so the backward walk meets one vertex (it keys gradients by node)."""
    node = t._node
    if node is None or node.op.name not in OUTPUT_UNREAD:
        return t
    ref = node._stand_in
    stub = ref() if ref is not None else None
    return stub if stub is not None else _new_stand_in(t, node)


def _new_stand_in(t: Any, node: Node) -> Any:
    """A tensor of ``t``'s metadata and node without its data, kept by ``node`` weakly (no cycle
    between node and stand-in)."""
    stub = _new(type(t))
    stub._data = None
    stub._shape = t._shape
    stub._dtype = t._dtype
    stub._device = t._device
    stub._node = node
    stub._rg = t._rg
    stub._grad = None
    node._stand_in = _weakref(stub)
    return stub


#: What the backward walk keeps of a computed tensor until its node's turn: the tensor when its
#: op's rule reads the output, else a stand-in (so a forward output nobody else holds dies as soon
#: as the last consumer that reads it has run its rule). The same function as :func:`_stand_in`
#: (one frame less on every node of every backward walk).
for_backward = _stand_in

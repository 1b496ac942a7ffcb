"""Reverse-mode accumulation over the recorded graph (the backward walk, above dispatch).

A tensor produced by a recorded op holds a :class:`~ember.autodiff.node.Node` (built only by
:mod:`ember.dispatch`): the op, its input tensors (and their handles at record time, to catch
in-place changes) and its parameters. Backward walks
the nodes in reverse topological order and calls each op's vjp rule
``vjp(g, out, *inputs, **params) -> one gradient (or None) per input``. Gradients that
broadcasting widened are summed back to the input's shape here, once, for every op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..amp import _STATE as _AMP
from ..dispatch import OUTPUT_UNREAD, for_backward
from ..errors import AutodiffError
from ..ops.elementwise import real
from ..ops.movement import concat, pad, reshape
from ..ops.reduction import sum as _sum
from .mode import _STATE as _GRAD
from .mode import set_grad_enabled

if TYPE_CHECKING:  # annotations only: ember.tensor imports this module through autodiff.api (a cycle)
    from ..tensor import Tensor

__all__ = ["run_backward", "saved_tensors"]


def _vertex(t: Tensor) -> int:
    """The key of ``t``'s vertex: its node for a computed tensor (which consumers may hold as a
    stand-in, ember.autodiff.node), itself for a leaf."""
    node = t._node
    return id(node) if node is not None else id(t)


def _topological(roots: list[Tensor]) -> list[Tensor]:
    """Tensors with a node reachable from ``roots``, each after all its inputs (a stand-in where its
    op's rule does not read the output: the walk's list holds no data a rule will not read)."""
    order: list[Tensor] = []
    seen: set[int] = set()
    for root in roots:
        node = root._node
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.inputs is None:
            raise _freed(node)
        path = [root]  # the tensors being visited, and per tensor the iterator over its node's inputs
        rest = [iter(node.inputs)]
        while rest:
            for child in rest[-1]:  # resumes where the tensor's last visit stopped
                node = child._node
                if node is not None and id(node) not in seen:
                    seen.add(id(node))
                    if node.inputs is None:
                        raise _freed(node)
                    path.append(child)
                    rest.append(iter(node.inputs))
                    break
            else:  # for_backward(t), with the stand-in its consumers made looked up here
                rest.pop()
                t = path.pop()
                node = t._node
                if node.op.name in OUTPUT_UNREAD:
                    ref = node._stand_in
                    stub = ref() if ref is not None else None
                    t = stub if stub is not None else for_backward(t)
                order.append(t)
    return order


def _freed(node: Any) -> AutodiffError:
    """The error of a backward through ``node`` after a backward freed its inputs."""
    return AutodiffError(
        f"backward through {node.op.name!r} a second time: the graph was freed "
        f"by the first backward. Pass retain_graph=True to the first call."
    )


def saved_tensors(root: Tensor) -> list[tuple[str, int, Tensor]]:
    """(op, input position, tensor) for every input with data that the graph behind ``root`` keeps
    for backward (what the recorded nodes hold); empty once backward has freed the graph."""
    out: list[tuple[str, int, Tensor]] = []
    seen: set[int] = set()
    stack = [root._node] if root._node is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen or node.inputs is None:
            continue
        seen.add(id(node))
        for i, t in enumerate(node.inputs):
            if t._data is not None:
                out.append((node.op.name, i, t))
            if t._node is not None:
                stack.append(t._node)
    return out


class _Slices:
    """Gradients of unit-step slices of one tensor, kept apart until the tensor's turn in the walk
    (and a full-size gradient beside them, if any): slices that tile it along one axis (``em.split``)
    then become one concat instead of a zero-padded full-size tensor each, summed (PyTorch's split
    backward is a cat as well)."""

    __slots__ = ("shape", "parts", "full")

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.parts: list[tuple[tuple[int, ...], tuple[int, ...], Tensor]] = []
        self.full: Tensor | None = None

    def add(self, g: Tensor) -> _Slices:
        self.full = g if self.full is None else self.full + g
        return self

    def assemble(self) -> Tensor:
        """The whole gradient: one concat where the slices tile one axis, else their padded sum."""
        parts, self.parts = self.parts, []
        g = _tile(parts, self.shape)
        if g is None:
            for starts, stops, gi in parts:
                gi = pad(gi, tuple((st, dim - sp) for st, sp, dim in zip(starts, stops, self.shape)))
                g = gi if g is None else g + gi
        del parts
        if self.full is not None:
            g = self.full if g is None else g + self.full
            self.full = None
        return g


def _tile(parts: list[tuple[tuple[int, ...], tuple[int, ...], Tensor]], shape: tuple[int, ...]) -> Tensor | None:
    """The concat of ``parts`` along the one axis they cut, when they cover it exactly once; else None."""
    axes = {
        i for starts, stops, _ in parts for i, (st, sp, d) in enumerate(zip(starts, stops, shape)) if (st, sp) != (0, d)
    }
    if len(axes) > 1 or len(parts) < 2:
        return None
    axis = axes.pop() if axes else 0
    ordered = sorted(parts, key=lambda p: p[0][axis])
    at = 0
    for starts, stops, _ in ordered:
        if starts[axis] != at:
            return None
        at = stops[axis]
    if at != shape[axis]:
        return None
    return concat([gi for _, _, gi in ordered], axis=axis)


def _sum_to(g: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum ``g`` over the axes that broadcasting added or stretched to reach ``shape``."""
    if g._shape == shape:
        return g
    lead = len(g._shape) - len(shape)
    stretched = tuple(lead + i for i, d in enumerate(shape) if d == 1 and g._shape[lead + i] != 1)
    if not stretched and lead:  # only added leading axes (a bias): one sum, no reshape
        return _sum(g, axis=tuple(range(lead)))  # the op, not the method: a frame less per bias gradient
    axes = tuple(range(lead)) + stretched
    if axes:
        g = _sum(g, axis=axes, keepdims=True)
    return reshape(g, shape)


def _as_input_dtype(g: Tensor, inp: Tensor) -> Tensor:
    """``g`` in ``inp``'s dtype: a complex gradient reaching a real input keeps its real part
    (the real input moved only along the real axis; PyTorch does the same)."""
    if g._dtype.kind == "c" and inp._dtype.kind != "c":
        g = real(g)
    return g if g._dtype is inp._dtype else g.astype(inp._dtype)


def _keeps_slices(node: Any, inp: Tensor, targets: dict[int, Tensor] | None) -> bool:
    """Whether a slice's gradient can wait for its input's turn: unit steps, an input computed by a
    recorded op (a leaf's gradient is summed at once) that is not one of ``wrt``."""
    return (
        inp._rg
        and inp._node is not None
        and all(s == 1 for s in node.params["steps"])
        and (targets is None or _vertex(inp) not in targets)
    )


def run_backward(
    roots: list[Tensor],
    seeds: list[Tensor],
    *,
    wrt: list[Tensor] | None = None,
    create_graph: bool = False,
    retain_graph: bool | None = None,
) -> dict[int, tuple[Tensor, Tensor]]:
    """Propagate ``seeds`` from ``roots``; return id(t) -> (t, gradient) for leaves (or ``wrt``)."""
    if retain_graph is None:
        retain_graph = create_graph
    # gradients are keyed by vertex (_vertex); results by id of the leaf, or of the wrt tensor
    targets = {_vertex(t): t for t in wrt} if wrt is not None else None
    grads: dict[int, Tensor] = {}
    for root, seed in zip(roots, seeds):
        prev = grads.get(_vertex(root))
        grads[_vertex(root)] = seed if prev is None else prev + seed
    results: dict[int, tuple[Tensor, Tensor]] = {}
    # gradients are computed in the dtypes the forward ops used: outside autocast (set_grad_enabled and
    # autocast(enabled=False), the state set and restored here)
    if type(create_graph) is not bool:
        set_grad_enabled(create_graph)  # refuses what is no bool, with its message
    previous = (_GRAD.enabled, _AMP.dtype)
    _GRAD.enabled = bool(create_graph)
    _AMP.dtype = None
    try:
        if targets is not None:
            for root in roots:
                if _vertex(root) in targets:
                    results[id(targets[_vertex(root)])] = (targets[_vertex(root)], grads[_vertex(root)])
        order: list[Tensor | None] = _topological(roots)
        pop = grads.pop
        for i in range(len(order) - 1, -1, -1):
            # the walk lets go of each tensor as it passes it: a tensor nobody else holds (an
            # intermediate) dies with its node as soon as its inputs' gradients are made
            t, order[i] = order[i], None
            if t is None:  # each entry is visited once, walking down: a None means the order was corrupted
                raise AutodiffError(f"backward: the graph walk reached entry {i} twice; report this as a bug")
            node = t._node
            g = pop(id(node), None)
            if g is None:
                continue
            if type(g) is _Slices:
                g = g.assemble()
            inputs = node.inputs
            for inp, data in zip(inputs, node.datas):
                if inp._data is not data:
                    raise AutodiffError(
                        f"a tensor used by {node.op.name!r} was modified in place after the "
                        f"graph was recorded; its gradient would be wrong. Assign to a copy "
                        f"(x = x.clone()) before modifying it."
                    )
            op = node.op
            vjp = op.vjp
            if vjp is None:
                raise AutodiffError(f"op {op.name!r} has no vjp rule and no composite to differentiate")
            if op.name == "slice" and not create_graph and _keeps_slices(node, inputs[0], targets):
                # the slice's gradient waits beside its siblings' for the sliced tensor's turn
                key = _vertex(inputs[0])
                held = grads.get(key)
                if type(held) is not _Slices:
                    held = _Slices(inputs[0]._shape) if held is None else _Slices(inputs[0]._shape).add(held)
                    grads[key] = held
                held.parts.append((node.params["starts"], node.params["stops"], g))
                if not retain_graph:
                    node.inputs = None
                    node.datas = ()
                del g, t, node, inputs, held
                continue
            in_grads = vjp(g, t, *inputs, **node.params)
            del g, t
            if not retain_graph:
                # what the node saved goes now, not when the walk ends (PyTorch frees saved tensors as it goes)
                node.inputs = None
                node.datas = ()
            # and before the gradients are summed: from here on a computed input is only its metadata
            # (for_backward, inline: the stand-in the node's consumers made is looked up here)
            stood = []
            for x in inputs:
                xn = x._node
                if xn is not None and x._data is not None and xn.op.name in OUTPUT_UNREAD:  # (a stand-in has no data)
                    ref = xn._stand_in
                    stub = ref() if ref is not None else None
                    x = stub if stub is not None else for_backward(x)
                stood.append(x)
            inputs = stood
            x = xn = stub = stood = None
            for inp, gi in zip(inputs, in_grads):
                if gi is None or not inp._rg:
                    continue
                shape = inp._shape
                if gi._shape != shape:
                    gi = _sum_to(gi, shape)
                if gi._dtype is not inp._dtype:
                    gi = _as_input_dtype(gi, inp)
                inode = inp._node
                if targets is None:
                    if inode is None:  # a leaf: its gradient is a result
                        prev = results.get(id(inp))
                        results[id(inp)] = (inp, gi if prev is None else prev[1] + gi)
                        continue
                    key = id(inode)
                else:
                    key = id(inode) if inode is not None else id(inp)
                    if key in targets:
                        wanted = targets[key]
                        prev = results.get(id(wanted))
                        results[id(wanted)] = (wanted, gi if prev is None else prev[1] + gi)
                    if inode is None:
                        continue
                prev = grads.get(key)
                grads[key] = gi if prev is None else prev.add(gi) if type(prev) is _Slices else prev + gi
                prev = None  # the summed operands go with the sum's inputs, not at the next input
            # nothing of this node outlives its step: the next vjp runs without its gradients' temporaries
            del node, inputs, in_grads
            inp = gi = prev = wanted = None
    finally:
        _GRAD.enabled, _AMP.dtype = previous
    return results

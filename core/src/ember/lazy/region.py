"""A lazy value and the region it belongs to: :class:`LazyBuffer` nodes, the walk that collects
an unrealized region, and the reference counts that say which of its values something outside
still holds (written out by the region's kernel), which outlive it unrealized, and which operand
the kernel may overwrite (:func:`_donor`).

A node is held by the nodes that read it (``uses``), by the region lists being built, and by
anything else: a tensor the user kept, an autodiff node's saved input. ``sys.getrefcount`` less
the references this module's own loops and lists add (calibrated at import, as interpreter
versions differ) tells the last kind from the first two. :mod:`.graph` builds and runs regions
from these.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .graph import Lazy
    from .program import FusedProgram

__all__ = ["LazyBuffer", "materialize"]


class LazyBuffer:
    """A value not computed yet: an op over other lazy values, backend handles and scalars.

    ``real`` is the backend handle once realized; the core stores this object as a tensor's
    handle, and everything that hands handles to a backend unwraps it (:func:`materialize`).
    """

    # num: the node's value in the program being built (Lazy._program), written before it is read
    __slots__ = ("owner", "op", "dtype", "shape", "args", "real", "uses", "size", "num", "__weakref__")

    def __init__(self, owner: Lazy, op: str, dtype: str, shape: tuple[int, ...], args: tuple[Any, ...], size: int):
        self.owner = owner
        self.op = op  # an elementwise op name, "cast", "full", or a reduction (args: source, axes, keepdims)
        self.dtype = dtype  # dtype name of the result
        self.shape = shape
        self.args = args  # LazyBuffer | backend handle | Python scalar; None once realized
        self.real: Any = None
        self.uses = 0  # how many unrealized nodes hold this one among their args
        self.size = size  # values in this node's region (an upper bound: shared values count twice); _REDUCED

    def realize(self) -> Any:
        """The backend handle of this value, computing its region now if needed."""
        if self.real is None:
            self.owner.realize(self)
        return self.real

    def __repr__(self) -> str:
        state = "realized" if self.real is not None else f"pending, region <= {self.size}"
        return f"<LazyBuffer {self.op} {self.dtype}{list(self.shape)} {state}>"


def materialize(data: Any) -> Any:
    """``data`` as a backend handle: a lazy value is realized, anything else returned as is."""
    if type(data) is LazyBuffer:
        if data.real is None:
            data.owner.realize(data)
        return data.real
    return data


def _donor(
    order: list[LazyBuffer],
    operands: list[Any],
    program: FusedProgram,
    target: LazyBuffer,
    meta: Any,
    outputs: list[LazyBuffer],
) -> Any:
    """A tensor operand of the region that the target can be written into: of its dtype and
    shape, and held by nothing but the region's nodes (directly, or as the ``real`` of realized
    nodes only they hold) and ``operands``: a tensor, a saved input, a view's base or another
    region holding it adds a reference. The region's nodes must die with it too: one that a
    pending node outside still holds (and is not written out) is recomputed later from its
    arguments, so none of those may read the operand. None if there is none."""
    wanted = (target.dtype, "tensor")
    inputs = program.inputs
    kept: list[LazyBuffer] | None = None  # found when a candidate first needs it (most regions offer none)
    for j in range(len(operands)):
        if inputs[j] != wanted:
            continue
        h = operands[j]
        # _readers, inline: how often the region's nodes read h, and the realized nodes whose value is h
        # that they read, with how often
        uses = 0
        wrappers: list[LazyBuffer] = []
        counts: list[int] = []
        for node in order:
            for a in node.args:
                if a is h:
                    uses += 1
                elif type(a) is LazyBuffer and a.real is h:
                    for k in range(len(wrappers)):
                        if wrappers[k] is a:
                            counts[k] += 1
                            break
                    else:
                        wrappers.append(a)
                        counts.append(1)
        a = node = None  # the loops' variables hold no reference while they are counted
        if not uses and not wrappers:
            continue
        if kept is None:
            kept = _outliving(order, outputs)
        if kept and _reads(kept, h):
            continue
        # references to h: operands, the local h, each wrapper's real, the region's args
        if _getrefcount(h) - _DIRECT_REFS - 2 - len(wrappers) - uses != 0:
            continue
        # references to a wrapper: the list and the region's args
        for k in range(len(wrappers)):
            if _getrefcount(wrappers[k]) - _DIRECT_REFS - 1 - counts[k] != 0:
                break
        else:
            if tuple(meta(h)[0]) == target.shape:
                return h
    return None


def _outliving(order: list[LazyBuffer], outputs: list[LazyBuffer]) -> list[LazyBuffer]:
    """The region's nodes that outlive its kernel unrealized: held by something besides ``order``
    and the region's own arguments (a pending node of a later region), and every node they read
    in turn, short of the outputs (whose arguments the kernel drops). Such a node is recomputed
    from its arguments where it is used, so they must keep their values."""
    inside: dict[int, int] = {}
    for n in order:
        for a in n.args:
            if type(a) is LazyBuffer:
                inside[id(a)] = inside.get(id(a), 0) + 1
    n = a = None  # the loop's variables hold no reference while nodes are counted
    written = {id(o) for o in outputs}
    base = _LOOP_BASE
    ids = []
    for n in order:  # counted before any list of ours holds a node
        if n.op != "full" and id(n) not in written and _getrefcount(n) - base > inside.get(id(n), 0):
            ids.append(id(n))
    n = None
    if not ids:
        return []
    by_id = {id(n): n for n in order}
    seen = set(ids)
    stack = [by_id[i] for i in ids]
    kept = []
    while stack:
        node = stack.pop()
        kept.append(node)
        for a in node.args:
            if type(a) is LazyBuffer and id(a) in by_id and id(a) not in seen and id(a) not in written:
                seen.add(id(a))
                stack.append(a)
    return kept


def _reads(nodes: list[LazyBuffer], h: Any) -> bool:
    """Whether one of ``nodes`` reads the handle ``h``, directly or as a realized node's value."""
    for node in nodes:
        for a in node.args:
            if a is h or (type(a) is LazyBuffer and a.real is h):
                return True
    return False


_getrefcount = sys.getrefcount


def _calibrate_direct() -> int:
    """References ``sys.getrefcount`` itself adds to the count of an object (its argument)."""
    probe = object()
    return _getrefcount(probe) - 1


_DIRECT_REFS = _calibrate_direct()


def _without_other_shapes(node: LazyBuffer, order: list[LazyBuffer]) -> list[LazyBuffer]:
    """``node``'s region once the held values of another shape in it are computed on their own: a
    kernel writes out only values of its iteration shape (else every later use would recompute
    them, and a parameter's updates would chain)."""
    others = [n for n in order if n.op != "full" and n.shape != node.shape]
    if not others:
        return order
    for held in _held(others, extra=1):
        if held.real is None:
            held.realize()
    del others, order
    return _walk(node)[0]


def _walk(node: LazyBuffer) -> tuple[list[LazyBuffer], bool]:
    """The unrealized nodes of ``node``'s region in topological order (depth first, post-order,
    ``node`` last), and whether a value of another shape than ``node``'s is among them; without
    recursion (one call per region, not one per node)."""
    shape = node.shape
    order: list[LazyBuffer] = []
    other = False
    seen = {id(node)}
    path = [node]  # the nodes being visited, and per node the iterator over its arguments
    rest = [iter(node.args)]
    while rest:
        for a in rest[-1]:  # resumes where the node's last visit stopped
            if type(a) is LazyBuffer and a.real is None and id(a) not in seen:
                seen.add(id(a))
                path.append(a)
                rest.append(iter(a.args))
                break
        else:
            rest.pop()
            done = path.pop()
            if not other and done.shape != shape and done.op != "full":
                other = True
            order.append(done)
    return order, other


def _held(nodes: list[LazyBuffer], extra: int = 0) -> list[LazyBuffer]:
    """The nodes that something besides unrealized lazy nodes holds (a tensor, a saved input).

    Counts references: the list and the loop variable are :data:`_BASE` together with
    getrefcount's own argument; ``extra`` more lists of the caller's; each unrealized consumer
    adds one (``uses``).
    """
    base = _BASE + extra
    return [n for n in nodes if sys.getrefcount(n) - base > n.uses]


def _recount_uses(live: list[LazyBuffer]) -> None:
    """Set each node's ``uses`` to the unrealized nodes in ``live`` (every one still alive) that
    hold it. A consumer that died unrealized (the loss's ``sum``, which backward never reads)
    never gave its use back, so its operand looked held by nothing but the graph: it stayed
    pending through a sync, keeping its region's inputs (whole activations) alive into the next
    step, where the device pool's step plan counted them as memory outside the step."""
    for n in live:
        n.uses = 0
    for n in live:
        for a in n.args:
            if type(a) is LazyBuffer and a.real is None:
                a.uses += 1


def _calibrate() -> int:
    probe = [object()]
    return [sys.getrefcount(n) for n in probe][0]


#: references :func:`_held` sees to a node nothing else holds (interpreter versions differ)
_BASE = _calibrate()


def _calibrate_loop() -> int:
    probe = [object()]
    for n in probe:
        return _getrefcount(n)
    return 0  # pragma: no cover - the list holds one object


#: references a ``for n in order`` loop of a function sees to a node only ``order`` holds
#: (:meth:`Lazy.realize`'s outputs, inline)
_LOOP_BASE = _calibrate_loop()


def _release(node: LazyBuffer) -> None:
    """Drop a realized node's arguments (their handles may be freed) and its uses of them."""
    for a in node.args or ():
        if type(a) is LazyBuffer and a.uses > 0:
            a.uses -= 1
    node.args = None

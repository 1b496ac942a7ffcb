"""The lazy layer: elementwise ops deferred into a graph, realized as one fused kernel.

On a device whose backend sets ``fusion`` (and with ``EMBER_FUSION`` on), dispatch hands every
op to a :class:`Lazy` hook (the ``Device._defer`` seam). An elementwise op the backend's
generator can express, or a ``full`` of a Python number, becomes a :class:`LazyBuffer` node and
no kernel runs. A node is realized, its whole unrealized region compiled into one
:class:`~ember.lazy.program.FusedProgram` and run by ``Backend.run_fused``, when:

- a non-fusable op (a reduction, a matmul, a movement...) takes it as an input,
- it is read back (``to_numpy``, DLPack, a move to another device) or ``Tensor.realize()``,
- ``Device.synchronize()`` runs (every node a tensor still holds is realized first),
- its region would grow past :data:`MAX_REGION` values (kernel size and argument limits).

A reduction (``sum``, ``prod``, ``max``, ``min``, ``mean``) that reads a deferred value, on a
backend that lists it in ``Backend.fusion_reductions``, is deferred too: a node of the reduced
shape whose region is its input's. Realized, it runs as ONE kernel, the region's program with a
trailing :class:`~ember.lazy.program.Reduce`, so ``(x * a + b).exp().sum(-1)`` never writes the
full-size ``exp`` to memory. A deferred reduction's value is an input of later regions, never
part of one (its iteration shape is another).

A backend whose fused kernels pay off only on large regions (cpu: numba's parallel loops) sets
``fusion_min_elements``: an op with a smaller result and no deferred operand then runs at once.

On a backend that sets ``Backend.fusion_outs``, a region's target is offered one of its tensor
operands to be written into when nothing but the region holds that operand any more and it has
the target's shape and dtype: ``p.copy_(p - lr * g)`` leaves the old buffer of ``p`` held only by
the region, and the update runs in place as torch's ``sub_`` does (an elementwise kernel reads
each element before it stores it; the backend checks the operand is contiguous).

Values inside a region are computed in registers. A value of the region that something else
still holds (a tensor the user kept, an autodiff node's saved input) and that has the region's
shape is written out by the same kernel, so a later use does not recompute it. The nodes, the
region walk and those reference counts live in :mod:`.region`; this module holds the hook, the
realization of regions into interned programs, and the switches.
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any

from .. import config
from ..device import RUN_FUSED, on_backend_load, set_defer
from ..dtypes import as_dtype
from ..errors import InvalidArgumentError
from .program import REDUCE_OPS, FusedProgram, Reduce
from .region import (
    _LOOP_BASE,
    LazyBuffer,
    _donor,
    _getrefcount,
    _held,
    _recount_uses,
    _release,
    _walk,
    _without_other_shapes,
    materialize,
)

if TYPE_CHECKING:
    from ..backend import Backend
    from ..device import Device

__all__ = ["LazyBuffer", "Lazy", "MAX_REGION", "materialize", "realize_all", "fusion", "fusion_enabled", "stats"]

#: the most values (instructions and inputs) one fused region holds before it is realized
MAX_REGION = 48

#: pending references kept before the dead ones are dropped (doubles while live ones stay)
_COMPACT_AT = 4096

#: region structure (inputs, instructions, outputs) -> its program, so a repeated region builds
#: no new one and backends' caches keyed by the program hit by identity
_PROGRAMS: dict[tuple[Any, ...], FusedProgram] = {}
_MAX_PROGRAMS = 4096
#: the interned programs that read a complex operand (no generator compiles those)
_COMPLEX: set[int] = set()
#: a region's signature (:meth:`Lazy._program`) -> its interned program; emptied with _PROGRAMS
_SIGNATURES: dict[tuple[Any, ...], FusedProgram] = {}
#: (id of a region's program, the values written, a trailing reduction's fields) -> (that program,
#: the interned program writing them) (:func:`_variant`); emptied with _PROGRAMS
_VARIANTS: dict[tuple[Any, ...], tuple[FusedProgram, FusedProgram]] = {}

_SCALARS = (bool, int, float)
_COMPLEX_DTYPES = ("complex64", "complex128")
#: dtypes a deferred reduction never reads (its operand computed, it runs as the unfused one)
_UNREDUCED = frozenset({"bool", *_COMPLEX_DTYPES})

_new = object.__new__
_weakref = weakref.ref

#: the region size a deferred reduction reports: anything that takes it as an operand realizes it
_REDUCED = 1 << 30

#: numpy computes these scalar powers by the unary op (``pow(-inf, 0.5)`` is NaN, as sqrt's)
_FAST_POW = {2.0: "square", 0.5: "sqrt", -1.0: "reciprocal"}


class Lazy:
    """The defer hook of one device: builds lazy nodes, realizes regions through the backend."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.state = device._state
        backend = device.backend
        self.backend: Backend = backend
        self.ops: frozenset[str] = frozenset(backend.fusion_ops())
        #: ops with fewer result elements and no deferred operand run at once (Backend.fusion_min_elements)
        self.least: int = config.fusion_min_elements(backend.fusion_min_elements)
        #: reductions the backend computes at the end of a fused program (Backend.fusion_reductions)
        self.reductions: frozenset[str] = (
            frozenset(backend.fusion_reductions) & REDUCE_OPS if config.fuse_reductions_enabled() else frozenset()
        )
        self.fusable: dict[str, bool] = {}  # op name -> an elementwise op the generator compiles
        self.meta = backend.handle_meta
        #: run_fused takes outs= (Backend.fusion_outs): a dead operand can take the target
        self.donate: bool = bool(getattr(backend, "fusion_outs", False))
        self.pending: list[weakref.ref[LazyBuffer]] = []
        self._compact_at = _COMPACT_AT  # pending's length that triggers dropping dead references
        #: ops deferred; fused kernels run; the instructions they computed; regions of one op run by
        #: its own kernel; fused kernels that also reduced (a trailing reduction, counted in kernels too)
        #: (and kernels that wrote their target into a dead operand: Backend.fusion_outs)
        self.counts = {"deferred": 0, "kernels": 0, "fused_values": 0, "single": 0, "reductions": 0, "in_place": 0}

    # -- the seam: dispatch calls this for every op on the device -------------------------------
    def __call__(self, op: Any, datas: list[Any], params: dict[str, Any], shape: Any, dtype: Any) -> Any:
        name = op.name
        if shape is not None and dtype.kind != "c":
            fusable = self.fusable.get(name)
            if fusable is None:
                fusable = self.fusable[name] = name in self.ops and op.kind.startswith("elementwise")
            if fusable and (not params or name == "cast"):
                least = self.least
                if least and math.prod(shape) < least:
                    for i, d in enumerate(
                        datas
                    ):  # a small op after a deferred one joins its region (a large region's tail)
                        if type(d) is LazyBuffer:
                            if d.real is None and d.size < _REDUCED:
                                break
                            if d.real is None:  # a (deferred) reduction's value
                                d.owner.realize(d)
                            datas[i] = d.real
                    else:
                        return self.state.impls[name](*datas, **params)
                if name == "pow" and dtype.kind == "f" and type(datas[1]) is float:
                    fast = _FAST_POW.get(datas[1])
                    if fast in self.ops:
                        name, datas = fast, datas[:1]  # numpy's scalar-exponent paths
                # a lazy node for the elementwise op (operand dtypes are looked at when it is realized),
                # built here: every deferred op comes this way
                args = None
                n = len(datas)
                if n == 2:  # a binary op (most deferred ops): a region within its bound, unrolled
                    a, b = datas
                    la = type(a) is LazyBuffer and a.real is None
                    lb = type(b) is LazyBuffer and b.real is None
                    size = 1 + (a.size if la else 1) + (b.size if lb else 1)
                    if size <= MAX_REGION:
                        if la:
                            a.uses += 1
                        if lb:
                            b.uses += 1
                        args = (a, b)
                elif n == 1:  # a unary op or a cast
                    a = datas[0]
                    if type(a) is not LazyBuffer or a.real is not None:
                        size = 2
                        args = (a,)
                    elif a.size < MAX_REGION:
                        size = 1 + a.size
                        a.uses += 1
                        args = (a,)
                if args is None:  # any other case
                    size = 1
                    for d in datas:  # a handle or a scalar is one input (kernel argument) each
                        size += d.size if type(d) is LazyBuffer and d.real is None else 1
                    args = tuple(datas)
                    if size >= _REDUCED:  # a deferred reduction's value: computed now, an input of this region
                        for i, d in enumerate(datas):
                            if type(d) is LazyBuffer and d.real is None and d.size >= _REDUCED:
                                d.owner.realize(d)
                                datas[i] = d.real
                        size = 1
                        for d in datas:
                            size += d.size if type(d) is LazyBuffer and d.real is None else 1
                        args = tuple(datas)
                    if size > MAX_REGION:  # close the regions below this op: it starts a new one
                        args = tuple([d.realize() if type(d) is LazyBuffer else d for d in datas])
                        size = 1 + len(args)
                    for d in args:
                        if type(d) is LazyBuffer and d.real is None:
                            d.uses += 1
                self.counts["deferred"] += 1
                node = _new(LazyBuffer)  # LazyBuffer(...), tracked in pending, inline: every deferred op comes this way
                node.owner = self
                node.op = name
                node.dtype = params["dtype"].name if name == "cast" else dtype.name
                node.shape = shape if type(shape) is tuple else tuple(shape)
                node.args = args
                node.real = None
                node.uses = 0
                node.size = size
                pending = self.pending
                pending.append(_weakref(node))
                if len(pending) > self._compact_at:
                    self._compact()
                return node
            elif (
                name == "full"
                and type(params["value"]) in _SCALARS
                and not (self.least and math.prod(shape) < self.least)
            ):
                self.counts["deferred"] += 1
                node = _new(LazyBuffer)  # LazyBuffer(self, "full", ...), tracked in pending, inline
                node.owner = self
                node.op = "full"
                node.dtype = dtype.name
                node.shape = shape if type(shape) is tuple else tuple(shape)
                node.args = (params["value"],)
                node.real = None
                node.uses = 0
                node.size = 1
                pending = self.pending
                pending.append(_weakref(node))
                if len(pending) > self._compact_at:
                    self._compact()
                return node
            elif name in self.reductions:
                node = self._reduction(name, datas, params, shape, dtype.name)
                if node is not None:
                    return node
        for i, d in enumerate(datas):
            if type(d) is LazyBuffer:
                if d.real is None:
                    d.owner.realize(d)
                datas[i] = d.real
        return self.state.impls[name](*datas, **params)

    def _reduction(
        self, name: str, datas: list[Any], params: dict[str, Any], shape: Any, dtype: str
    ) -> LazyBuffer | None:
        """A deferred reduction of a deferred region (one kernel when realized), or None when
        the reduction runs as today: its operand is computed, a constant, empty or boolean."""
        if len(datas) != 1:
            return None
        source = datas[0]
        if type(source) is not LazyBuffer or source.real is not None or source.size >= _REDUCED:
            return None
        axes = params.get("axes")
        if source.op == "full" or not axes or len(params) != 2 or source.dtype in _UNREDUCED:
            return None
        if source.dtype != dtype or not math.prod(source.shape):
            return None
        source.uses += 1
        self.counts["deferred"] += 1
        node = _new(LazyBuffer)  # LazyBuffer(self, name, dtype, shape, args, _REDUCED), tracked, inline
        node.owner = self
        node.op = name
        node.dtype = dtype
        node.shape = tuple(shape)
        node.args = (source, tuple(sorted(set(axes))), bool(params["keepdims"]))
        node.real = None
        node.uses = 0
        node.size = _REDUCED
        pending = self.pending
        pending.append(_weakref(node))
        if len(pending) > self._compact_at:
            self._compact()
        return node

    def _compact(self) -> None:
        """Drop the dead and realized from ``pending``; grow the bound with what stays."""
        self.pending = pending = [r for r in self.pending if (n := r()) is not None and n.real is None]
        self._compact_at = max(_COMPACT_AT, 2 * len(pending))

    # -- realization ---------------------------------------------------------------------------
    def realize(self, target: LazyBuffer) -> None:
        """Compute ``target`` and the values of its region that something else still holds."""
        if target.op == "full":  # a lone constant: the backend's own fill
            target.real = self.state.impls["full"](shape=target.shape, value=target.args[0], dtype=_dtype(target.dtype))
            target.args = None
            return
        if target.size >= _REDUCED:
            self._realize_reduction(target)
            return
        shape = target.shape
        order, other = _walk(target)
        if len(order) == 1:  # one op alone: its own kernel, as eager (nothing to fuse, no program to build)
            self.counts["single"] += 1
            args = []  # _run_eagerly of the target alone, inline
            for a in target.args:
                args.append(a.real if type(a) is LazyBuffer else a)
            params = {"dtype": _dtype(target.dtype)} if target.op == "cast" else {}
            target.real = self.state.impls[target.op](*args, **params)
            for a in target.args:  # _release, inline
                if type(a) is LazyBuffer and a.uses > 0:
                    a.uses -= 1
            target.args = None
            return
        if other:
            order = _without_other_shapes(target, order)
        program, operands = self._program(order)
        if id(program) in _COMPLEX:
            del program, operands
            self._run_eagerly(order)  # a complex operand (abs or real of a complex tensor): no generator has those
            return
        # the outputs: the target, then the region's values of its shape something outside holds
        # (references: ``order``, the loop variable and getrefcount's argument, _LOOP_BASE; each
        # unrealized consumer adds one, ``uses``)
        outputs = [target]
        base = _LOOP_BASE
        for n in order:
            if n is not target and n.shape == shape and n.op != "full" and _getrefcount(n) - base > n.uses:
                outputs.append(n)
        n = None
        if len(outputs) > 1:
            last = len(program.inputs) - 1  # instruction j (num -1 - j) is value last + 1 + j
            written = []
            for o in outputs:
                written.append(last - o.num)
            o = None  # the loop's variable holds no reference while nodes are counted (_donor)
            program = _variant(program, tuple(written))
        impls = self.state.impls
        donor = None
        if self.donate and not hasattr(impls, "real"):  # not while em.jit records or a trace runs
            donor = _donor(order, operands, program, target, self.meta, outputs)
        if donor is None:
            results = impls[RUN_FUSED](program, operands, shape=target.shape)
        else:
            outs = [donor] + [None] * (len(outputs) - 1)
            del donor
            results = impls[RUN_FUSED](program, operands, shape=target.shape, outs=outs)
            if results[0] is outs[0]:  # an offer the backend may leave (a region it runs op by op)
                self.counts["in_place"] += 1
            del outs
        counts = self.counts
        counts["kernels"] += 1
        counts["fused_values"] += len(program.instructions)
        for node, handle in zip(outputs, results):
            node.real = handle
            for a in node.args:  # _release, inline
                if type(a) is LazyBuffer and a.uses > 0:
                    a.uses -= 1
            node.args = None

    def _realize_reduction(self, target: LazyBuffer) -> None:
        """Compute a deferred reduction and its source region as one kernel: the region's program
        with a trailing :class:`Reduce`; the region's values something still holds come out of it
        too, at full size."""
        impls = self.state.impls
        op, (source, axes, keepdims) = target.op, target.args
        if source.real is not None:  # the region ran meanwhile (it was read): reduce its result
            del source
            target.real = impls[op](target.args[0].real, axes=axes, keepdims=keepdims)
            _release(target)
            return
        shape = source.shape
        order, other = _walk(source)
        if other:
            order = _without_other_shapes(source, order)
        del source  # from here on only ``order`` and the reduction hold it (references are counted below)
        program, operands = self._program(order)
        if id(program) in _COMPLEX:
            del program, operands
            self._run_eagerly(order)
            target.real = impls[op](target.args[0].real, axes=axes, keepdims=keepdims)
            _release(target)
            return
        value = program.outputs[0]
        # _held, inline (as realize's outputs): the region's values of its shape that something outside
        # holds (references: ``order``, the loop variable and getrefcount's argument, _LOOP_BASE; each
        # unrealized consumer adds one, ``uses``: the reduction's for the source)
        full = []
        base = _LOOP_BASE
        for n in order:
            if n.op != "full" and n.shape == shape and _getrefcount(n) - base > n.uses:
                full.append(n)
        n = None
        last = len(program.inputs) - 1  # instruction j (num -1 - j) is value last + 1 + j
        outputs = tuple([last - n.num for n in full])
        program = _variant(program, outputs, (op, value, axes, keepdims))
        results = impls[RUN_FUSED](program, operands, shape=shape)
        self.counts["kernels"] += 1
        self.counts["reductions"] += 1
        self.counts["fused_values"] += len(program.instructions)
        for node, handle in zip(full, results):
            node.real = handle
            for a in node.args:  # _release, inline
                if type(a) is LazyBuffer and a.uses > 0:
                    a.uses -= 1
            node.args = None
        target.real = results[len(full)]
        source = target.args[0]  # _release(target), inline: its one node argument, the region's source
        if source.uses > 0:
            source.uses -= 1
        target.args = None

    def _program(self, order: list[LazyBuffer]) -> tuple[FusedProgram, list[Any]]:
        """The region ``order`` (topological, target last) as a program writing the target, and
        its operands. The program is looked up by the region's signature, a flat tuple that says
        all the program does (:func:`_decode` reads it): cheaper to build and hash than the
        program's nested tuples, so a region seen before builds none of them."""
        # the signature, record by record: an instruction is its op, its dtype, then one item per
        # argument: an int, a value already numbered (an input k >= 0, instruction j as -1 - j), or
        # a (dtype, kind) pair, a new input (the next input number); a constant is "full", dtype. A node's
        # number is its ``num`` (a slot: a dict keyed by id() costs more)
        sig: list[Any] = []
        operands: list[Any] = []
        handles: dict[int, int] = {}  # id(handle) -> input number: a handle read twice is one input
        dtypes: list[str] = []  # the inputs' dtypes (a scalar takes its tensor operand's)
        j = 0  # instructions so far
        meta = self.meta
        append = sig.append
        for node in order:
            args = node.args
            op = node.op
            if op == "full":  # a broadcast constant: a scalar input, not an instruction
                node.num = len(operands)  # its input number
                append("full")
                append(node.dtype)
                dtypes.append(node.dtype)
                operands.append(args[0])
                continue
            append(op)
            append(node.dtype)
            for a in args:
                ta = type(a)
                if ta is LazyBuffer:
                    if a.real is None:
                        append(a.num)  # numbered above: order is topological
                        continue
                    # a value computed already: its handle is an input, of the dtype the node says
                    h = a.real
                    index = handles.get(id(h))
                    if index is None:
                        handles[id(h)] = len(operands)
                        append((a.dtype, "tensor"))
                        dtypes.append(a.dtype)
                        operands.append(h)
                    else:
                        append(index)
                    continue
                if ta in _SCALARS:
                    # _scalar_dtype, inline: the dtype of the node's first tensor operand (a handle's, if
                    # already an input of the program, without another handle_meta)
                    sdt = None
                    if op != "cast":
                        for b in args:
                            tb = type(b)
                            if tb is LazyBuffer:
                                sdt = b.dtype
                                break
                            if tb not in _SCALARS:
                                k = handles.get(id(b))
                                if k is not None:
                                    sdt = dtypes[k]
                                break
                    if sdt is None:
                        sdt = _scalar_dtype(node, 0)
                    append((sdt, "scalar"))
                    dtypes.append(sdt)
                    operands.append(a)
                    continue
                index = handles.get(id(a))
                if index is None:
                    handles[id(a)] = len(operands)
                    dt = meta(a)[1]
                    append((dt, "tensor"))
                    dtypes.append(dt)
                    operands.append(a)
                else:
                    append(index)
            node.num = -1 - j
            j += 1
        a = b = node = None
        key = tuple(sig)
        program = _SIGNATURES.get(key)
        if program is None:
            if len(_SIGNATURES) >= _MAX_PROGRAMS:  # several signatures may name one program: bounded too
                _SIGNATURES.clear()
            program = _SIGNATURES[key] = _decode(key)
        return program, operands

    def _run_eagerly(self, order: list[LazyBuffer]) -> None:
        """Compute the region op by op with the backend's own kernels, in topological order."""
        impls = self.state.impls
        for node in order:
            if node.op == "full":
                node.real = impls["full"](shape=node.shape, value=node.args[0], dtype=_dtype(node.dtype))
                node.args = None
                continue
            args = []
            for a in node.args:
                args.append(a.real if type(a) is LazyBuffer else a)
            params = {"dtype": _dtype(node.dtype)} if node.op == "cast" else {}
            node.real = impls[node.op](*args, **params)
            for a in node.args:  # _release, inline: the node's uses of its arguments go
                if type(a) is LazyBuffer and a.uses > 0:
                    a.uses -= 1
            node.args = None
            a = args = None

    def realize_pending(self) -> None:
        """Realize every pending value that something outside the lazy graph still holds."""
        live = [n for r in self.pending if (n := r()) is not None and n.real is None]
        self.pending = []
        _recount_uses(live)
        held = _held(live)
        del live
        for node in reversed(held):  # the latest first: earlier ones join its kernel as outputs
            if node.real is None:
                self.realize(node)  # node.realize(): pending holds this hook's nodes only


def _interned(
    inputs: tuple[Any, ...], body: tuple[Any, ...], outputs: tuple[int, ...], reduce: Reduce | None = None
) -> FusedProgram:
    """The one program object of this structure (made on first sight)."""
    key = (inputs, body, outputs, reduce)
    program = _PROGRAMS.get(key)
    if program is None:
        if len(_PROGRAMS) >= _MAX_PROGRAMS:
            _PROGRAMS.clear()
            _COMPLEX.clear()
            _SIGNATURES.clear()  # they hold interned programs: one kept would miss its _COMPLEX mark
            _VARIANTS.clear()
        program = _PROGRAMS[key] = FusedProgram(inputs, body, outputs, reduce)
        if any(dt.startswith("complex") for dt, _ in inputs):
            _COMPLEX.add(id(program))
    return program


def _variant(program: FusedProgram, outputs: tuple[int, ...], reduce: tuple[Any, ...] | None = None) -> FusedProgram:
    """``program`` writing the values ``outputs`` instead (and ending with ``Reduce(*reduce)``),
    interned; found by the program's identity, so a repeated region hashes no nested tuples."""
    key = (id(program), outputs, reduce)
    entry = _VARIANTS.get(key)
    if entry is None:
        made = _interned(program.inputs, program.instructions, outputs, None if reduce is None else Reduce(*reduce))
        if len(_VARIANTS) >= _MAX_PROGRAMS:
            _VARIANTS.clear()
        entry = _VARIANTS[key] = (program, made)  # the entry holds the program: its id names no other
    return entry[1]


def _decode(sig: tuple[Any, ...]) -> FusedProgram:
    """The interned program of a region's signature (:meth:`Lazy._program` writes it): inputs
    numbered in order of first appearance, instruction ``j`` as value ``n + j``, the last written."""
    inputs: list[tuple[str, str]] = []
    body: list[tuple[str, str, list[int]]] = []
    i, end = 0, len(sig)
    while i < end:
        op, dt = sig[i], sig[i + 1]
        i += 2
        if op == "full":
            inputs.append((dt, "scalar"))
            continue
        refs: list[int] = []
        while i < end and type(sig[i]) is not str:
            item = sig[i]
            if type(item) is tuple:  # a new input
                refs.append(len(inputs))
                inputs.append(item)
            else:
                refs.append(item)
            i += 1
        body.append((op, dt, refs))
    n = len(inputs)
    instructions = tuple([(op, dt, tuple([r if r >= 0 else n - 1 - r for r in refs])) for op, dt, refs in body])
    return _interned(tuple(inputs), instructions, (n + len(instructions) - 1,))


def _scalar_dtype(node: LazyBuffer, k: int) -> str:
    """The dtype a Python scalar argument of ``node`` takes: that of its tensor operand."""
    if node.op == "cast":
        raise InvalidArgumentError("cast of a Python scalar cannot be deferred")
    for a in node.args:
        if type(a) is LazyBuffer:
            return a.dtype
        if type(a) not in _SCALARS:
            return node.owner.meta(a)[1]
    return node.dtype  # pragma: no cover - dispatch never defers an op of scalars only


def _dtype(name: str) -> Any:
    return as_dtype(name)


# -- installation -----------------------------------------------------------------------------
_OVERRIDE: bool | None = None


def fusion_enabled() -> bool:
    """Whether fusing backends defer elementwise ops (``EMBER_FUSION``, or :func:`fusion`)."""
    return config.fusion_enabled() if _OVERRIDE is None else _OVERRIDE


def _install(device: Device) -> None:
    """Called when a device's backend loads: put the lazy hook on the seam if it fuses."""
    if device.backend.fusion and fusion_enabled() and device._state.defer is None:
        set_defer(device, Lazy(device))


on_backend_load(_install)


class fusion:
    """``with ember.lazy.fusion(False):`` runs ops eagerly on devices loaded inside the block
    and on ``device`` if given; ``fusion(True, device)`` turns deferral (back) on for it."""

    def __init__(self, enabled: bool, device: Device | None = None) -> None:
        self.enabled = bool(enabled)
        self.device = device
        self._saved: tuple[bool | None, Any] = (None, None)

    def __enter__(self) -> fusion:
        global _OVERRIDE
        previous = self.device._state.defer if self.device is not None else None
        self._saved = (_OVERRIDE, previous)
        _OVERRIDE = self.enabled
        if self.device is not None:
            _switch(self.device, self.enabled)
        return self

    def __exit__(self, *exc: Any) -> None:
        global _OVERRIDE
        _OVERRIDE, previous = self._saved
        if self.device is not None:
            if isinstance(self.device._state.defer, Lazy):
                self.device._state.defer.realize_pending()
            set_defer(self.device, previous)


def _switch(device: Device, enabled: bool) -> None:
    current = device._state.defer
    if isinstance(current, Lazy):
        current.realize_pending()
    if enabled and device.backend.fusion:
        if not isinstance(current, Lazy):
            set_defer(device, Lazy(device))
    elif isinstance(current, Lazy):
        set_defer(device, None)


def realize_all(device: Device) -> None:
    """Realize every pending value on ``device`` that a tensor still holds (before a sync)."""
    hook = device._state.defer
    if isinstance(hook, Lazy):
        hook.realize_pending()


def stats(device: Device) -> dict[str, int]:
    """Counters of ``device``'s lazy layer: ops deferred, fused kernels run, values they computed,
    regions of a single op (run by that op's own kernel, no program built), and fused kernels
    that ended with a reduction (``Backend.fusion_reductions``; also counted in ``kernels``), and
    fused kernels that wrote their target into an operand nothing else held (``in_place``)."""
    hook = device._state.defer
    if isinstance(hook, Lazy):
        return dict(hook.counts)
    return {"deferred": 0, "kernels": 0, "fused_values": 0, "single": 0, "reductions": 0, "in_place": 0}

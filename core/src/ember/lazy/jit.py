"""Capture and replay, the machinery of ``em.jit``: every backend call of one run of a function,
recorded below dispatch as a list of steps, then replayed by calling the kernels directly.

While a :class:`Recorder` is active, every loaded device's implementation table is wrapped
(:func:`ember.device.set_recorder`), so each kernel call (a primitive, an extension kernel, or
a fused program through :data:`~ember.device.RUN_FUSED`) is noted as ``(kernel, arguments,
keyword params, result slots)``; handles become numbered slots. A handle read but not made
during the capture is an input: an argument, a tensor's state (a parameter, a gradient, an
optimizer moment: a *location* whose current handle a replay reads), or a constant.

In-place updates reach tensors through :func:`set_data` and :func:`set_grad` (``copy_``,
``x[k] = v``, ``backward``, ``zero_grad``): the recorder sees which tensors were updated and
a replay gives them the handles it produced. With no capture running they are a plain store.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

from ..config import jit_native_enabled
from ..device import RUN_FUSED, Device, set_recorder
from ..dtypes import DType
from ..errors import InvalidArgumentError
from .graph import realize_all
from .program import Const, FusedProgram
from .region import LazyBuffer, materialize

__all__ = [
    "Program",
    "Recorder",
    "Step",
    "capturing",
    "note_state_created",
    "set_data",
    "set_grad",
]

#: the recorder of the capture now running (at most one: captures do not nest)
_ACTIVE: list[Recorder] = []

#: kernels that copy device memory to the host: a replay cannot hand their result to Python
READBACKS = frozenset({"to_numpy"})

_CONSTS = (bool, int, float, complex, str, type(None), slice, DType, FusedProgram, Const)


def capturing() -> bool:
    """Whether an ``em.jit`` capture is running (Python code now runs once, not per replay)."""
    return bool(_ACTIVE)


def set_data(t: Any, data: Any) -> None:
    """``t._data = data`` for an in-place update, seen by a running capture."""
    if _ACTIVE:
        _ACTIVE[0].assigned(t, "_data")
    t._data = data


def set_grad(t: Any, grad: Any) -> None:
    """``t._grad = grad`` (a Tensor or None), seen by a running capture."""
    if _ACTIVE:
        _ACTIVE[0].assigned(t, "_grad")
    t._grad = grad


def note_state_created(what: str) -> None:
    """Say that state a later step reads (an optimizer's moments) was just made: a capture
    that made it records a first step, not a steady one, and is taken again on the next call."""
    if _ACTIVE:
        _ACTIVE[0].state_created.append(what)


class _Slot:
    """A handle's place in a replay's value list (inside a nested argument)."""

    __slots__ = ("n",)

    def __init__(self, n: int) -> None:
        self.n = n


class Step:
    """One recorded kernel call: ``kernel(*args, **params)`` with slots filled in, its result
    stored in ``outs`` (one slot, or a tuple of slots for a list result)."""

    __slots__ = ("device", "name", "kernel", "args", "holes", "nested", "params", "outs", "drops")

    def __init__(self, device: Device, name: str, kernel: Callable[..., Any], args: list[Any], params: dict[str, Any]):
        self.device = device
        self.name = name
        self.kernel = kernel
        self.args = args  # constants, with None where ``holes`` put a slot's value
        self.holes: tuple[tuple[int, int], ...] = ()  # (argument position, slot)
        self.nested: tuple[tuple[int, type, list[Any]], ...] = ()  # a list/tuple argument holding slots
        self.params = params
        self.outs: Any = None
        self.drops: tuple[int, ...] = ()  # slots no later step reads: freed after this one

    def __repr__(self) -> str:
        return f"<Step {self.name} on {self.device.kind}:{self.device.index}>"


class Recorder:
    """Notes every kernel call while a function runs once (use it as a context manager)."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.slot: dict[int, int] = {}  # id(handle) -> slot
        self.kept: list[Any] = []  # every handle seen, so that ids stay unique while capturing
        self.external: dict[int, Any] = {}  # slot -> handle read but not made here
        self.external_ids: dict[int, int] = {}  # id(handle) -> its slot as an input (kept if remapped)
        self.n = 0
        self.locations: dict[tuple[int, str], tuple[Any, str, Any]] = {}  # (tensor, attr, handle before)
        self.readbacks: list[str] = []
        self.state_created: list[str] = []
        self.devices: list[Device] = []

    # -- recording ----------------------------------------------------------------------------
    def __enter__(self) -> Recorder:
        if _ACTIVE:
            raise InvalidArgumentError("em.jit: a capture is already running; captures do not nest")
        for dev in _loaded():
            realize_all(dev)  # work deferred before the capture is not part of it
        try:
            self.devices = set_recorder(self.wrap)
        except BaseException:
            set_recorder(None)
            raise
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        _ACTIVE.clear()
        set_recorder(None)

    def finish(self) -> None:
        """Compute, inside the capture, every deferred value a tensor still holds."""
        for dev in self.devices:
            realize_all(dev)

    def input(self, handle: Any) -> int:
        """The slot of a handle the capture reads (an argument's, registered before the run)."""
        key = id(handle)
        found = self.slot.get(key)
        if found is not None:
            return found
        n = self.slot[key] = self.n
        self.n += 1
        self.kept.append(handle)
        self.external[n] = handle
        self.external_ids[key] = n
        return n

    def wrap(self, device: Device, name: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
        """The table entry a capture installs for ``kernel``: run it, note the call."""
        if name in READBACKS:

            def readback(*args: Any, **params: Any) -> Any:
                self.readbacks.append(name)
                return kernel(*args, **params)

            return readback

        def recorded(*args: Any, **params: Any) -> Any:
            out = kernel(*args, **params)
            if out is not NotImplemented:  # (declined: dispatch runs the composite, whose kernels are noted)
                self._note(device, name, kernel, args, params, out)
            return out

        return recorded

    def _note(self, device: Device, name: str, kernel: Any, args: tuple[Any, ...], params: dict[str, Any], out: Any):
        template = list(args)
        holes = []
        nested = []
        for i, a in enumerate(args):
            t = type(a)
            if t in _CONSTS:
                continue
            if t is list or t is tuple:
                inner = [self._spec(x) for x in a]
                if any(type(x) is _Slot for x in inner):
                    nested.append((i, t, inner))
                continue
            holes.append((i, self.input(a)))
            template[i] = None
        kw = dict(params)
        for k, v in params.items():
            if not _constant(v):
                raise InvalidArgumentError(
                    f"em.jit: {name}'s keyword {k!r} is a {type(v).__name__}; a captured kernel takes handles "
                    f"only as positional arguments"
                )
        step = Step(device, name, kernel, template, kw)
        step.holes = tuple(holes)
        step.nested = tuple(nested)
        if type(out) is list or type(out) is tuple:
            step.outs = tuple(self._made(h) for h in out)
        else:
            step.outs = self._made(out)
        self.steps.append(step)

    def _spec(self, x: Any) -> Any:
        if type(x) in _CONSTS:
            return x
        return _Slot(self.input(x))

    def _made(self, handle: Any) -> int:
        n = self.slot[id(handle)] = self.n
        self.n += 1
        self.kept.append(handle)
        return n

    def assigned(self, t: Any, attr: str) -> None:
        """``t.<attr>`` is about to change: remember the handle it held first."""
        key = (id(t), attr)
        if key not in self.locations:
            self.locations[key] = (t, attr, _handle_of(t, attr))

    # -- the result ---------------------------------------------------------------------------
    def slot_of(self, handle: Any) -> int:
        """The slot a handle (a tensor's, after the run) has: made here, or read."""
        return self.input(materialize(handle))


def _constant(v: Any) -> bool:
    """Whether a keyword parameter holds no handle (numbers, names, dtypes, nested tuples)."""
    if type(v) in _CONSTS:
        return True
    return (type(v) is tuple or type(v) is list) and all(_constant(x) for x in v)


def _handle_of(t: Any, attr: str) -> Any:
    """The real handle ``t.<attr>`` holds now (``_grad``: its tensor's), or None."""
    value = getattr(t, attr)
    if attr == "_grad":
        if value is None:
            return None
        value = value._data
    if type(value) is LazyBuffer:
        return value.real  # unrealized: made inside the capture, not a state read
    return value


def _loaded() -> list[Device]:
    from ..device import _STATES  # noqa: PLC0415 - the registry of device states

    return [Device(kind, index) for (kind, index), state in list(_STATES.items()) if state._backend is not None]


class Program:
    """A finished capture: its steps, where each input slot is read from, what it writes back.

    ``args``: the slot of each argument handle; ``reads``: (slot, tensor, attr) state a replay
    reads now; ``consts``: (slot, handle) read as captured; ``writes``: (tensor or argument
    number, attr, slot or None, like) the replay stores; ``keep``: slots the caller reads after.
    """

    def __init__(self, rec: Recorder, args: list[int], arg_objects: list[Any], keep: list[int]) -> None:
        by_id = {id(a): i for i, a in enumerate(arg_objects)}
        arg_slots = set(args)
        reads: dict[int, tuple[Any, str]] = {}
        writes = []
        # a handle two locations held before (a gradient and state made from it) is read from
        # the tensor's data rather than the gradient, which zero_grad usually clears first
        for t, attr, before in sorted(rec.locations.values(), key=lambda loc: loc[1] != "_data"):
            if before is not None:
                slot = rec.external_ids.get(id(before))
                if slot is not None and slot not in arg_slots and slot not in reads:
                    reads[slot] = (t, attr)
            like = None  # a gradient's (shape, dtype, device): what a replay's new grad tensor has
            if attr == "_data":
                value = rec.slot_of(t._data)
            else:
                g = t._grad
                value = None if g is None else rec.slot_of(g._data)
                like = None if g is None else (g._shape, g._dtype, g._device)
            target = ("arg", by_id[id(t)]) if id(t) in by_id else t
            writes.append((target, attr, value, like))
        self.steps = rec.steps
        self.n = rec.n
        self.args = args
        self.readbacks = list(rec.readbacks)
        self.reads = [(slot, t, attr) for slot, (t, attr) in reads.items()]
        self.sample = dict(rec.external)  # slot -> the handle an input had at capture (shapes for a native replay)
        self.consts = [(slot, h) for slot, h in rec.external.items() if slot not in arg_slots and slot not in reads]
        self.writes = writes
        self.keep = keep
        self._plan_drops(self.needed())
        self.native: Callable[[list[Any]], None] | None = None
        self.native_backend = ""
        self.native_note = ""  # why a backend's native replay was not used, if it said
        self._plan = plan(self.steps)

    def dynamic(self) -> list[int]:
        """The input slots a replay fills anew each time (arguments and state reads)."""
        return [*dict.fromkeys(self.args), *(s for s, _, _ in self.reads)]

    def needed(self) -> list[int]:
        """The slots a replay's caller reads after the steps (results and written state)."""
        return list(dict.fromkeys([*self.keep, *(w[2] for w in self.writes if w[2] is not None)]))

    def compile(self) -> None:
        """Ask the backend for a native replay (``Backend.compile_replay``) when one device ran
        every step; without one (None) the step list is replayed in Python."""
        self._plan = plan(self.steps)
        devices = {s.device for s in self.steps}
        if len(devices) != 1:
            self.sample = {}
            return
        backend = next(iter(devices)).backend
        compile_replay = getattr(backend, "compile_replay", None)  # Backend's default: None
        if compile_replay is not None and not jit_native_enabled():
            compile_replay = None
            self.native_note = "EMBER_JIT_NATIVE=0"
        self.native = compile_replay(self) if compile_replay is not None else None
        self.native_backend = backend.name if self.native is not None else ""
        self.sample = {}  # capture-time buffers of arguments and state: not kept past compiling

    def _plan_drops(self, needed: list[int]) -> None:
        """After each step, the slots no later step (nor the caller) reads: freed early."""
        last: dict[int, int] = {}
        for j, step in enumerate(self.steps):
            for _, s in step.holes:
                last[s] = j
            for _, _, inner in step.nested:
                for x in inner:
                    if type(x) is _Slot:
                        last[x.n] = j
        for s in needed:
            last.pop(s, None)
        drops: dict[int, list[int]] = collections.defaultdict(list)
        for s, j in last.items():
            drops[j].append(s)
        for j, step in enumerate(self.steps):
            step.drops = tuple(drops.get(j, ()))

    # -- replay -------------------------------------------------------------------------------
    def inputs(self, handles: list[Any]) -> list[Any]:
        """The value list a replay starts from: arguments, state read now, constants."""
        vals: list[Any] = [None] * self.n
        for s, h in zip(self.args, handles):
            vals[s] = h
        for s, h in self.consts:
            vals[s] = h
        for s, t, attr in self.reads:
            if attr == "_data":
                h = materialize(t._data)
            else:
                g = t._grad
                h = None if g is None else materialize(g._data)
            if h is None:
                raise InvalidArgumentError(
                    f"em.jit replay: a tensor's {attr[1:]} was set at capture and is None now (was "
                    f"zero_grad() called outside the jitted function?); clear it inside the function, "
                    f"or call the function's .reset() to capture again"
                )
            vals[s] = h
        return vals

    def run(self, vals: list[Any]) -> None:
        """Every step, in order, calling the kernels directly (or the backend's native replay)."""
        if self.native is not None:
            self.native(vals)
            return
        run_plan(self._plan, vals)

    def store(self, vals: list[Any], args: list[Any], make: Callable[[Any, Any], Any]) -> None:
        """Give the updated tensors the handles this replay produced."""
        for target, attr, s, like in self.writes:
            t = args[target[1]] if type(target) is tuple else target
            if attr == "_data":
                t._data = vals[s]
            else:
                t._grad = None if s is None else make(vals[s], like)

    def counts(self) -> dict[str, int]:
        """Kernel calls by op name (``run_fused``: fused programs)."""
        return dict(collections.Counter(s.name for s in self.steps))

    def describe(self) -> str:
        """A few lines for debugging: kernels by op, inputs, state written, replay mode."""
        counts = self.counts()
        fused = counts.get(RUN_FUSED, 0)
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        mode = f"native ({self.native_backend})" if self.native is not None else "step list"
        if self.native_note:
            mode += f" ({self.native_note})"
        lines = [
            f"{len(self.steps)} kernels ({fused} fused programs), replay: {mode}",
            f"inputs: {len(self.args)} arguments, {len(self.reads)} state reads, {len(self.consts)} constants; "
            f"writes back {len(self.writes)} tensors",
            f"kernels: {ops}" if ops else "kernels: none",
        ]
        if self.readbacks:
            lines.append(f"read back at capture only: {', '.join(self.readbacks)}")
        return "\n".join(lines)


def run_steps(steps: list[Step], vals: list[Any]) -> None:
    """The generic replay: each step's kernel with its slots filled from ``vals``."""
    for step in steps:
        _run_one(step, vals)


def _run_one(step: Step, vals: list[Any]) -> None:
    args = step.args
    if step.holes or step.nested:
        args = list(args)
        for i, s in step.holes:
            args[i] = vals[s]
        for i, kind, inner in step.nested:
            filled = [vals[x.n] if type(x) is _Slot else x for x in inner]
            args[i] = filled if kind is list else tuple(filled)
    out = step.kernel(*args, **step.params)
    outs = step.outs
    if type(outs) is int:
        vals[outs] = out
    else:
        for s, h in zip(outs, out):
            vals[s] = h
    for s in step.drops:
        vals[s] = None


def plan(steps: list[Step]) -> list[tuple[Any, ...]]:
    """The steps as tuples the replay loop unpacks: kind 1 and 2 are kernels of one or two
    slot arguments and no params (most elementwise ops), kind 0 anything else."""
    out: list[tuple[Any, ...]] = []
    for step in steps:
        simple = not step.params and not step.nested and type(step.outs) is int
        if simple and len(step.holes) == len(step.args) and len(step.args) in (1, 2):
            slots = [s for _, s in sorted(step.holes)]
            if len(slots) == 1:
                out.append((1, step.kernel, slots[0], 0, step.outs, step.drops))
            else:
                out.append((2, step.kernel, slots[0], slots[1], step.outs, step.drops))
        else:
            out.append((0, step, 0, 0, 0, ()))
    return out


def run_plan(steps: list[tuple[Any, ...]], vals: list[Any]) -> None:
    """:func:`run_steps` over :func:`plan`'s tuples: the loop a cpu replay spends its time in."""
    for kind, kernel, a, b, o, drops in steps:
        if kind == 2:
            vals[o] = kernel(vals[a], vals[b])
        elif kind == 1:
            vals[o] = kernel(vals[a])
        else:
            _run_one(kernel, vals)
            continue
        for s in drops:
            vals[s] = None

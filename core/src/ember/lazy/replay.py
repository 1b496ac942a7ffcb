"""Native ``em.jit`` replays over fixed buffers: the part the OpenCL and WebGPU backends share.

A backend builds its replay of a capture (:class:`~ember.lazy.jit.Program`) by running the
steps once with its launch path in *recording mode*: each kernel launch is noted as the
backend's own launch record (a kernel object with its arguments bound, a pipeline with its
bind group) instead of being queued, and every buffer the launches touch is fixed for the
life of the replay:

* the arguments and state a replay reads (``Program.dynamic()``) get buffers of the replay's
  own, which each replay fills by copying the current handles in first;
* every buffer the steps make comes from a pool of the replay's own (reused between steps
  as the device's queue order allows, never handed to anyone else), so the recorded launches
  find them again; buffers filled from the host (uploads: constants) are held, never reused;
* the results and updated state (``Program.needed()``) are copied out of those buffers into
  new ones after each replay, because the next replay overwrites them (as cuda's graphs do).

The steps may not read device memory back to the host: a readback (or anything else the
backend's recording refuses, :class:`ReplayRefused`) ends the compile, and ember replays the
step list instead, with ``program.native_note`` saying why. A backend subclasses
:class:`Replayer` (its API-specific part) and returns ``compile_fixed(program, replayer)``
from ``Backend.compile_replay``.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, NoReturn

from .jit import run_steps

__all__ = ["ReplayRefused", "Recording", "ReplayPools", "Replayer", "FixedPlan", "FixedReplay", "compile_fixed"]


class ReplayRefused(Exception):
    """A step did something a fixed replay cannot repeat (a host readback)."""


class ReplayPools:
    """The private pools of a device's live native replays, named ``jit1``, ``jit2``... for
    ``memory_stats``: a replay's buffers count as the device's memory until the replay dies."""

    def __init__(self) -> None:
        self._pools: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._ids = itertools.count(1)

    def add(self, pool: Any) -> None:
        self._pools[f"jit{next(self._ids)}"] = pool

    def named(self) -> dict[str, Any]:
        """Name -> pool of the replays alive now."""
        return dict(self._pools.items())


class Recording:
    """What a backend's launch path noted in recording mode: its launch records, in order; the
    private pools the steps' buffers came from (``pools``, owned by the replay from then on);
    blocks that must keep their contents (``held``: uploaded constants)."""

    __slots__ = ("launches", "pools", "held")

    def __init__(self) -> None:
        self.launches: list[Any] = []
        self.pools: list[Any] = []
        self.held: list[Any] = []

    def owns(self, block: Any) -> bool:
        """Whether ``block`` came from one of the recording's pools."""
        pool = block.pool
        return any(pool is p for p in self.pools)

    def refuse(self, what: str) -> NoReturn:
        """End the compile: ``what`` (e.g. "a host readback (to_numpy)") cannot be replayed."""
        raise ReplayRefused(what)

    def swap_pool(self, rt: Any, pool: Any) -> Any:
        """Make ``pool`` (the replay's own) ``rt.pool`` while recording, one of ``pools`` and of
        ``rt.replay_pools`` (``memory_stats``); returns the device's pool it replaces, which the
        backend puts back when recording ends."""
        shared, rt.pool = rt.pool, pool
        self.pools.append(pool)
        rt.replay_pools.add(pool)
        return shared

    def held_upload(
        self, rt: Any, shared: Any, upload: Callable[[Any, Any], Any], block_of: Callable[[Any], Any]
    ) -> Callable[[Any, Any], Any]:
        """``upload(array, dtype)`` (``rt``'s own) as recording mode runs it: still at once, since
        what it writes is a constant, but into a buffer of the device's pool ``shared`` that no
        recorded launch ever wrote or will (one of the private ``rt.pool`` may have been a step's
        before), held in ``held`` for the replay's life; ``block_of(handle)`` is its block or None."""
        held = self.held

        def upload_held(array: Any, dtype: Any) -> Any:
            private, rt.pool = rt.pool, shared
            try:
                out = upload(array, dtype)
            finally:
                rt.pool = private
            block = block_of(out)
            if block is not None:
                held.append(block)
            return out

        return upload_held


class FixedPlan:
    """A recorded program's fixed buffers: ``inputs`` (slot, fixed handle) copied in before the
    launches, ``outputs`` (fixed block, [(slot, handle over it)]) copied out after, ``constants``
    (slot, handle) results that are views of constants or empty, ``launches`` the backend's
    records, ``pools`` and ``held`` the buffers the steps made."""

    __slots__ = ("inputs", "outputs", "constants", "launches", "pools", "held")

    def __init__(
        self,
        inputs: list[tuple[int, Any]],
        outputs: list[tuple[Any, list[tuple[int, Any]]]],
        constants: list[tuple[int, Any]],
        rec: Recording,
    ) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.constants = constants
        self.launches = rec.launches
        self.pools = rec.pools
        self.held = rec.held


class Replayer:
    """A backend's part of a fixed replay: its recording mode, copies and launch loop."""

    #: what ``program.native_note`` calls this replay when it is refused ("OpenCL enqueue list")
    what = "native replay"

    def recording(self, rec: Recording) -> AbstractContextManager[None]:
        """Recording mode while the steps run once: launches go to ``rec.launches`` (not queued),
        buffers come from a private pool added to ``rec.pools``, uploaded blocks go to
        ``rec.held``, a host readback calls ``rec.refuse``."""
        raise NotImplementedError

    def fixed_copy(self, handle: Any) -> Any:
        """A new contiguous handle holding ``handle``'s values (queued now, not recorded)."""
        raise NotImplementedError

    def block_of(self, handle: Any) -> Any:
        """The pool block under ``handle`` (None for an empty tensor)."""
        raise NotImplementedError

    def new_block(self, block: Any) -> Any:
        """A new pool block at least as large as ``block``: where a replay copies an output."""
        raise NotImplementedError

    def rebase(self, handle: Any, block: Any) -> Any:
        """``handle``'s view (shape, strides, offset, dtype) over ``block`` instead."""
        raise NotImplementedError

    def build(self, plan: FixedPlan) -> Callable[[list[tuple[Any, Any]], list[Any]], None]:
        """The replay loop: ``run(ins, news)`` copies each (source handle, fixed handle) of
        ``ins`` in, queues ``plan.launches``, and copies each fixed block of ``plan.outputs``
        into the block of ``news`` at the same place."""
        raise NotImplementedError


class FixedReplay:
    """A capture compiled over fixed buffers: ``replay(vals)`` fills ``vals`` as the step list
    would (the results and written state at least). ``replays`` and ``launched`` count its runs
    and the kernels they queued, so tests can see that it ran."""

    def __init__(self, plan: FixedPlan, run: Callable[[list[tuple[Any, Any]], list[Any]], None], replayer: Replayer):
        self.plan = plan  # holds the fixed buffers as long as the replay lives
        self._run = run
        self._inputs = plan.inputs
        self._outputs = plan.outputs
        self._constants = plan.constants
        self._new = replayer.new_block
        self._rebase = replayer.rebase
        self.kernels = len(plan.launches)
        self.replays = 0
        self.launched = 0

    def __call__(self, vals: list[Any]) -> None:
        ins = [(vals[s], fixed) for s, fixed in self._inputs]
        news = [self._new(block) for block, _ in self._outputs]
        self._run(ins, news)
        rebase = self._rebase
        for new, (_, views) in zip(news, self._outputs):
            for s, h in views:
                vals[s] = rebase(h, new)
        for s, h in self._constants:
            vals[s] = h
        self.replays += 1
        self.launched += self.kernels


def compile_fixed(program: Any, replayer: Replayer) -> FixedReplay | None:
    """``program`` (every step on ``replayer``'s device) as a :class:`FixedReplay`, or None
    with ``program.native_note`` set when its steps cannot run over fixed buffers."""
    try:
        dynamic = program.dynamic()
        fixed = {s: replayer.fixed_copy(program.sample[s]) for s in dynamic}
        vals: list[Any] = [None] * program.n
        for s, h in program.consts:
            vals[s] = h
        for s, h in fixed.items():
            vals[s] = h
        rec = Recording()
        with replayer.recording(rec):
            run_steps(program.steps, vals)
    except ReplayRefused as exc:
        program.native_note = f"no {replayer.what}: {exc}"
        return None
    except Exception as exc:  # not recordable: the step list replays instead, and describe() says why
        program.native_note = f"no {replayer.what}: {type(exc).__name__}: {exc}"
        return None
    inputs = set(dynamic) | {s for s, _ in program.consts}
    fixed_blocks = {id(replayer.block_of(h)) for h in fixed.values()}
    outputs: dict[int, tuple[Any, list[tuple[int, Any]]]] = {}
    constants = []
    for s in program.needed():
        if s in inputs:
            continue  # the caller's own handle, already in the replay's value list
        h = vals[s]
        block = replayer.block_of(h)
        if block is None or not (rec.owns(block) or id(block) in fixed_blocks):
            constants.append((s, h))  # empty, or a view of a constant: the recorded handle is right every time
            continue
        outputs.setdefault(id(block), (block, []))[1].append((s, h))
    plan = FixedPlan(list(fixed.items()), list(outputs.values()), constants, rec)
    try:
        run = replayer.build(plan)
    except Exception as exc:
        program.native_note = f"no {replayer.what}: {type(exc).__name__}: {exc}"
        return None
    return FixedReplay(plan, run, replayer)

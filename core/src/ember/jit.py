"""``em.jit(fn)``: run ``fn`` once per input signature while recording its kernels, then
replay the recording on later calls without Python dispatch, autodiff or Tensor objects.

The capture and replay machinery lives in :mod:`ember.lazy.jit`; this module is the
user-facing wrapper: signatures (shapes, dtypes, devices, grad mode), the cache of captures,
argument and result trees. See docs/jit.md for the semantics and limits.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from .autodiff.mode import is_grad_enabled
from .dispatch import is_tensor, make_tensor
from .errors import ArgumentTypeError, InvalidArgumentError
from .lazy.jit import Program, Recorder, capturing
from .lazy.region import materialize

__all__ = ["jit", "Jitted", "Capture", "JitReadbackWarning"]


class JitReadbackWarning(UserWarning):
    """A jitted function read device values back to the host while it was captured."""


def jit(fn: Callable[..., Any] | None = None, *, warmup: int = 0) -> Any:
    """Capture ``fn``'s kernels on its first call for each input signature and replay them after.

    ``warmup`` eager calls run first for each new signature (for state a first step creates).

    >>> import ember as em
    >>> @em.jit
    ... def f(x):
    ...     return (x * 2.0 + 1.0).sum()
    >>> [f(em.tensor([1.0, 2.0])).item() for _ in range(3)]
    [8.0, 8.0, 8.0]
    >>> len(f.captures)
    1
    """
    if fn is None:
        return functools.partial(jit, warmup=warmup)
    if not callable(fn):
        raise ArgumentTypeError(f"jit(fn): fn must be callable, got {type(fn).__name__}")
    if not isinstance(warmup, int) or warmup < 0:
        raise InvalidArgumentError(f"jit(warmup={warmup!r}): warmup must be an int >= 0")
    return Jitted(fn, warmup)


class Capture:
    """One signature's recording: the program, the argument order, and the result's shape."""

    def __init__(self, signature: Any, program: Program, result: Any) -> None:
        self.signature = signature
        self.program = program
        self.result = result  # the result tree, tensors replaced by ("slot", n, shape, dtype, device)
        self.replays = 0

    @property
    def steps(self) -> list[Any]:
        return self.program.steps

    def counts(self) -> dict[str, int]:
        """Kernel calls by op name (``run_fused``: fused elementwise programs)."""
        return self.program.counts()

    def describe(self) -> str:
        sig = ", ".join(_show(s) for s in self.signature[0]) or "no tensors"
        return f"({sig}) grad={self.signature[1]}, replayed {self.replays}x\n  " + self.program.describe().replace(
            "\n", "\n  "
        )

    def __repr__(self) -> str:
        return f"<Capture {len(self.program.steps)} kernels, replayed {self.replays}x>"


def _show(entry: Any) -> str:
    if entry[0] == "T":
        return f"{entry[2]}{list(entry[1])}@{entry[3]}"
    return repr(entry[1])


class Jitted:
    """A function wrapped by :func:`jit`: calls replay the capture of their input signature."""

    def __init__(self, fn: Callable[..., Any], warmup: int) -> None:
        self.fn = fn
        self.warmup = warmup
        self._captures: dict[Any, Capture] = {}
        self._calls: dict[Any, int] = {}
        functools.update_wrapper(self, fn)

    @property
    def captures(self) -> list[Capture]:
        """The captures made so far, one per input signature."""
        return list(self._captures.values())

    def describe(self) -> str:
        """Each capture: its signature, kernels by op, inputs and state it writes back."""
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        if not self._captures:
            return f"em.jit({name}): no captures yet"
        parts = [f"em.jit({name}): {len(self._captures)} capture(s)"]
        parts += [f"[{i}] {c.describe()}" for i, c in enumerate(self._captures.values())]
        return "\n".join(parts)

    def reset(self) -> None:
        """Forget every capture: the next call captures again."""
        self._captures.clear()
        self._calls.clear()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if capturing():  # inside another capture: run through, so that it records these ops
            return self.fn(*args, **kwargs)
        tensors: list[Any] = []
        key = (tuple(_signature((args, kwargs), tensors)), is_grad_enabled())
        found = self._captures.get(key)
        if found is not None:
            return self._replay(found, tensors)
        calls = self._calls.get(key, 0)
        self._calls[key] = calls + 1
        if calls < self.warmup:
            return self.fn(*args, **kwargs)
        return self._capture(key, tensors, args, kwargs)

    def _capture(self, key: Any, tensors: list[Any], args: Any, kwargs: Any) -> Any:
        rec = Recorder()
        with rec:
            handles = [materialize(t._data) for t in tensors]
            for t, h in zip(tensors, handles):
                t._data = h
            arg_slots = [rec.input(h) for h in handles]
            result = self.fn(*args, **kwargs)
            rec.finish()
            tree = _result_tree(result, rec, tensors)
            program = Program(rec, arg_slots, tensors, [n for n in _tree_slots(tree)])
        if rec.readbacks:
            warnings.warn(
                f"em.jit({getattr(self.fn, '__qualname__', self.fn)!r}): the function read values back to "
                f"the host while captured ({', '.join(sorted(set(rec.readbacks)))}); replays do not read "
                f"back: Python values computed from them keep their capture-time values",
                JitReadbackWarning,
                stacklevel=3,
            )
        if rec.state_created:  # a first step: its state now exists, so the next call captures
            return result
        program.compile()
        self._captures[key] = Capture(key, program, tree)
        return result

    def _replay(self, capture: Capture, tensors: list[Any]) -> Any:
        program = capture.program
        vals = program.inputs([materialize(t._data) for t in tensors])
        program.run(vals)
        program.store(vals, tensors, _like)
        capture.replays += 1
        return _rebuild(capture.result, vals, tensors)


def _like(handle: Any, like: tuple[Any, Any, Any]) -> Any:
    return make_tensor(handle, *like)


def _signature(obj: Any, tensors: list[Any]) -> list[Any]:
    """The cache key of an argument tree (tensors by shape, dtype and device; other leaves by
    value, or identity if unhashable), collecting its tensors in order."""
    out: list[Any] = []
    stack = [obj]
    while stack:
        x = stack.pop()
        if is_tensor(x):
            tensors.append(x)
            out.append(("T", x._shape, x._dtype.name, str(x._device), x._rg))
        elif type(x) in (list, tuple):
            out.append(("(", type(x).__name__, len(x)))
            stack.extend(reversed(x))
        elif type(x) is dict:
            out.append(("{", tuple(x)))
            stack.extend(reversed(list(x.values())))
        else:
            try:
                hash(x)
                out.append(("v", x))
            except TypeError:
                out.append(("id", id(x)))
    return out


def _result_tree(result: Any, rec: Recorder, tensors: list[Any]) -> Any:
    """``result`` with each tensor replaced by where a replay finds it."""
    if is_tensor(result):
        for i, t in enumerate(tensors):
            if result is t:
                return ("arg", i)
        return ("slot", rec.slot_of(result._data), result._shape, result._dtype, result._device)
    if type(result) in (list, tuple):
        return (type(result), [_result_tree(x, rec, tensors) for x in result])
    if type(result) is dict:
        return (dict, {k: _result_tree(v, rec, tensors) for k, v in result.items()})
    return ("value", result)


def _tree_slots(tree: Any) -> list[int]:
    kind = tree[0]
    if kind == "slot":
        return [tree[1]]
    if kind in (list, tuple):
        return [n for x in tree[1] for n in _tree_slots(x)]
    if kind is dict:
        return [n for x in tree[1].values() for n in _tree_slots(x)]
    return []


def _rebuild(tree: Any, vals: list[Any], tensors: list[Any]) -> Any:
    kind = tree[0]
    if kind == "slot":
        _, n, shape, dtype, device = tree
        return make_tensor(vals[n], shape, dtype, device)
    if kind == "arg":
        return tensors[tree[1]]
    if kind in (list, tuple):
        return kind(_rebuild(x, vals, tensors) for x in tree[1])
    if kind is dict:
        return {k: _rebuild(v, vals, tensors) for k, v in tree[1].items()}
    return tree[1]

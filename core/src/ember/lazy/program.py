"""The fused-program form: one small SSA program that a backend compiles to one kernel.

A :class:`FusedProgram` is what the lazy layer hands a fusing backend (``Backend.run_fused``)
and what every backend's kernel generator (OpenCL C, WGSL, CUDA C) reads; an unfused
elementwise op is the one-instruction case of the same form, so fused and unfused kernels
share one generator and one cache.

- ``inputs``: ``(dtype name, "tensor" | "scalar")``. Tensors are backend handles that
  broadcast to the iteration shape (their layout comes from the handle); scalars are
  Python numbers passed as kernel arguments, so a new value compiles nothing new.
- ``instructions``: ``(op, dtype name, args)``. ``op`` is an ember elementwise op name
  (``add``, ``exp``, ``where``...), ``cast`` (convert to ``dtype``) or ``copy``; each arg is
  an SSA value number or a :class:`Const` literal. Inputs are values ``0..n-1``; instruction
  ``j`` defines value ``n + j``.
- ``outputs``: the values written out, each to a new contiguous buffer of the iteration shape.

The program holds no shapes: shapes and strides are launch arguments, so one compiled kernel
serves every shape of the same rank and layout class (the program is its own cache key).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

__all__ = ["Const", "FusedProgram", "Arg"]


@dataclass(frozen=True)
class Const:
    """A literal argument of an instruction, of dtype ``dtype`` (compiled into the kernel)."""

    value: bool | int | float
    dtype: str


Arg = int | Const


@dataclass(frozen=True)
class FusedProgram:
    """Inputs ``(dtype, "tensor" | "scalar")``, instructions ``(op, dtype, args)``, outputs."""

    inputs: tuple[tuple[str, str], ...]
    instructions: tuple[tuple[str, str, tuple[Arg, ...]], ...]
    outputs: tuple[int, ...]

    def __hash__(self) -> int:
        # backends key their kernel and launch-plan caches by the program on every launch (and the
        # lazy layer hands the same object for the same region): hash the nested tuples once
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash((self.inputs, self.instructions, self.outputs))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict[str, object]:
        # the cached hash stays behind: string hashes differ from process to process
        return {"inputs": self.inputs, "instructions": self.instructions, "outputs": self.outputs}

    def value_dtypes(self) -> list[str]:
        """The dtype name of every SSA value (inputs first); computed once, not to be modified."""
        return self._value_dtypes

    @cached_property
    def _value_dtypes(self) -> list[str]:
        return [dt for dt, _ in self.inputs] + [dt for _, dt, _ in self.instructions]

    @cached_property
    def tensor_inputs(self) -> list[int]:
        """Positions of the tensor inputs (the handles a launch reads); computed once."""
        return [i for i, (_, kind) in enumerate(self.inputs) if kind == "tensor"]

    def check(self) -> None:
        """Raise ValueError if a reference points forward or out of range, or a kind is unknown."""
        for dt, kind in self.inputs:
            if kind not in ("tensor", "scalar"):
                raise ValueError(f"an input of dtype {dt} has kind {kind!r}; expected 'tensor' or 'scalar'")
        n = len(self.inputs)
        for j, (op, _, args) in enumerate(self.instructions):
            for a in args:
                if isinstance(a, int) and not 0 <= a < n + j:
                    raise ValueError(f"instruction {j} ({op}) refers to value {a}, which is not defined before it")
        total = n + len(self.instructions)
        for o in self.outputs:
            if not 0 <= o < total:
                raise ValueError(f"output refers to undefined value {o}")

    def describe(self) -> str:
        """The program as text, one value per line (``ember`` shows captured programs this way)."""
        lines = []
        for i, (dt, kind) in enumerate(self.inputs):
            lines.append(f"%{i} = {kind} {dt}")
        n = len(self.inputs)
        for j, (op, dt, args) in enumerate(self.instructions):
            shown = ", ".join(f"%{a}" if isinstance(a, int) else repr(a.value) for a in args)
            lines.append(f"%{n + j} = {op}({shown}) : {dt}")
        lines.append("out " + ", ".join(f"%{o}" for o in self.outputs))
        return "\n".join(lines)

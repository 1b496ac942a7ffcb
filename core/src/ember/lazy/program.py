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
- ``outputs``: the values written out, each to a new contiguous buffer of the iteration shape
  (the full-size results: values something besides the kernel still holds).
- ``reduce``: None, or a trailing :class:`Reduce` of one value over axes of the iteration
  shape. The kernel then also writes that value reduced, as its last result, and the
  full-size value need not exist anywhere (``(x * a + b).exp().sum(-1)`` reads ``x``, ``a``,
  ``b`` once and writes one value per row). A launch returns ``len(outputs)`` full-size
  buffers, then the reduced one.

The program holds no shapes: shapes and strides are launch arguments, so one compiled kernel
serves every shape of the same rank and layout class (the program is its own cache key). A
reduction's axes are part of the program (they shape the kernel's loops), its extents are not.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

__all__ = ["Const", "FusedProgram", "Arg", "Reduce", "REDUCE_OPS"]

#: the reductions a program may end with (``mean``: the sum divided by the reduced count)
REDUCE_OPS = frozenset({"sum", "prod", "max", "min", "mean"})


@dataclass(frozen=True)
class Const:
    """A literal argument of an instruction, of dtype ``dtype`` (compiled into the kernel)."""

    value: bool | int | float
    dtype: str


Arg = int | Const


@dataclass(frozen=True)
class Reduce:
    """A program's trailing reduction: ``op`` of SSA value ``value`` over ``axes`` of the iteration
    shape (sorted, distinct, non-empty), keeping them as size-1 axes when ``keepdims``.

    The result has the value's dtype. 16-bit floats accumulate in float32 (:meth:`accumulator`),
    as the unfused reductions do; integers accumulate, and wrap, in their own dtype (the core
    casts them to int64 before a sum, and that cast is an instruction of the program).
    """

    op: str
    value: int
    axes: tuple[int, ...]
    keepdims: bool = False

    def accumulator(self, dtype: str) -> str:
        """The dtype a value of ``dtype`` accumulates in: float32 for 16-bit floats, else itself."""
        return "float32" if dtype in ("float16", "bfloat16") else dtype

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The reduced result's shape for iteration ``shape`` (ValueError if an axis is out of range)."""
        if self.axes and self.axes[-1] >= len(shape):
            raise ValueError(f"reduce axes {self.axes} are out of range for an iteration shape of rank {len(shape)}")
        if self.keepdims:
            return tuple(1 if d in self.axes else n for d, n in enumerate(shape))
        return tuple(n for d, n in enumerate(shape) if d not in self.axes)


@dataclass(frozen=True)
class FusedProgram:
    """Inputs ``(dtype, "tensor" | "scalar")``, instructions ``(op, dtype, args)``, full-size
    outputs, and an optional trailing :class:`Reduce` (its result comes after the outputs)."""

    inputs: tuple[tuple[str, str], ...]
    instructions: tuple[tuple[str, str, tuple[Arg, ...]], ...]
    outputs: tuple[int, ...]
    reduce: Reduce | None = None

    def __hash__(self) -> int:
        # backends key their kernel and launch-plan caches by the program on every launch (and the
        # lazy layer hands the same object for the same region): hash the nested tuples once
        h = self.__dict__.get("_hash")
        if h is None:
            key = (self.inputs, self.instructions, self.outputs)
            h = hash(key if self.reduce is None else (*key, self.reduce))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> dict[str, object]:
        # the cached hash stays behind: string hashes differ from process to process
        return {
            "inputs": self.inputs,
            "instructions": self.instructions,
            "outputs": self.outputs,
            "reduce": self.reduce,
        }

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

    def result_dtypes(self) -> list[str]:
        """The dtype of every buffer a launch returns: the outputs', then the reduced value's."""
        dts = self.value_dtypes()
        out = [dts[o] for o in self.outputs]
        if self.reduce is not None:
            out.append(dts[self.reduce.value])
        return out

    def check(self) -> None:
        """Raise ValueError if a reference points forward or out of range, a kind or reduction
        is unknown, or the program returns nothing."""
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
        r = self.reduce
        if r is None:
            if not self.outputs:
                raise ValueError("the program has no outputs and no reduction: it would compute nothing")
            return
        if r.op not in REDUCE_OPS:
            raise ValueError(f"reduce op {r.op!r} is not one of {sorted(REDUCE_OPS)}")
        if not 0 <= r.value < total:
            raise ValueError(f"the reduction refers to undefined value {r.value}")
        if not r.axes or any(a < 0 for a in r.axes) or list(r.axes) != sorted(set(r.axes)):
            raise ValueError(f"reduce axes {r.axes} must be non-empty, sorted, distinct and non-negative")
        dt = self.value_dtypes()[r.value]
        if dt == "bool" or dt.startswith("complex"):
            raise ValueError(f"a fused {r.op} reduces numbers, not {dt} values")

    def describe(self) -> str:
        """The program as text, one value per line (``ember`` shows captured programs this way)."""
        lines = []
        for i, (dt, kind) in enumerate(self.inputs):
            lines.append(f"%{i} = {kind} {dt}")
        n = len(self.inputs)
        for j, (op, dt, args) in enumerate(self.instructions):
            shown = ", ".join(f"%{a}" if isinstance(a, int) else repr(a.value) for a in args)
            lines.append(f"%{n + j} = {op}({shown}) : {dt}")
        if self.outputs or self.reduce is None:
            lines.append("out " + ", ".join(f"%{o}" for o in self.outputs))
        r = self.reduce
        if r is not None:
            dt = self.value_dtypes()[r.value]
            keep = ", keepdims" if r.keepdims else ""
            lines.append(f"reduce {r.op}(%{r.value}, axes={r.axes}{keep}) : {dt}")
        return "\n".join(lines)

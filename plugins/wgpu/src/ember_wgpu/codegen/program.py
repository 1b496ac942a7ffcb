"""The elementwise program: a small SSA form that one generated kernel computes.

A :class:`Program` runs over one iteration shape. It reads tensor :class:`Operand` s (each a
strided view: element strides over the iteration shape, 0 where broadcast), run-time scalar
:class:`Const` s, computes :class:`Instr` s in order, and writes :class:`Out` puts (contiguous,
or strided views into a fresh buffer). Values are named by :data:`Ref` s: ``("in", i)``,
``("const", i)`` or ``("v", j)`` for the result of instruction ``j``.

Every unfused op is a one-instruction program; the fusion step (DESIGN.md section 7) hands
whole elementwise chains in the same form. Shapes, strides, offsets and scalar values are
run-time parameters, so a kernel compiled once serves every shape of the same rank and layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ember.dtypes import DType
from ember.views import contiguous_strides

__all__ = ["Ref", "Operand", "Const", "Instr", "Out", "Program", "layout_of"]

Ref = tuple[str, int]


def layout_of(shape: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """``c``: contiguous over ``shape``; ``s``: one element broadcast; ``g``: general strides."""
    if strides == contiguous_strides(shape) and any(d != 1 for d in shape):
        return "c"
    if all(s == 0 or d == 1 for d, s in zip(shape, strides)):
        return "s"
    step = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1 and s != step:
            return "g"
        step *= d
    return "c"


@dataclass(frozen=True, slots=True)
class Operand:
    """A tensor read by the program: dtype, element strides over the iteration shape, offset."""

    dtype: DType
    strides: tuple[int, ...]
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Const:
    """A scalar passed at run time (its value is not part of the compiled kernel)."""

    dtype: DType
    value: Any


@dataclass(frozen=True, slots=True)
class Instr:
    """``op`` applied to ``args``, giving a value of ``dtype`` (``cast`` converts to it)."""

    op: str
    dtype: DType
    args: tuple[Ref, ...]


@dataclass(frozen=True, slots=True)
class Out:
    """A value written to an output buffer; ``strides`` None means contiguous."""

    dtype: DType
    value: Ref
    strides: tuple[int, ...] | None = None
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Program:
    """An elementwise computation over ``shape``."""

    shape: tuple[int, ...]
    inputs: tuple[Operand, ...] = ()
    consts: tuple[Const, ...] = ()
    instrs: tuple[Instr, ...] = ()
    outputs: tuple[Out, ...] = ()
    name: str = field(default="elementwise", compare=False)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def dtype_of(self, ref: Ref) -> DType:
        kind, i = ref
        if kind == "in":
            return self.inputs[i].dtype
        if kind == "const":
            return self.consts[i].dtype
        return self.instrs[i].dtype

    def layouts(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Layout class of every input and output (see :func:`layout_of`)."""
        ins = tuple(layout_of(self.shape, op.strides) for op in self.inputs)
        outs = tuple("c" if o.strides is None or layout_of(self.shape, o.strides) == "c" else "g" for o in self.outputs)
        return ins, outs

    def check(self) -> None:
        """Raise ValueError if a ref points forward or outside, or a stride tuple has the wrong rank."""
        rank = len(self.shape)
        for op in self.inputs:
            if len(op.strides) != rank:
                raise ValueError(f"operand strides {op.strides} do not match the program rank {rank}")
        for j, ins in enumerate(self.instrs):
            for kind, i in ins.args:
                limit = {"in": len(self.inputs), "const": len(self.consts), "v": j}.get(kind)
                if limit is None or not 0 <= i < limit:
                    raise ValueError(
                        f"instruction {j} ({ins.op}) refers to {(kind, i)}, which is not defined before it"
                    )
        for o in self.outputs:
            kind, i = o.value
            limit = {"in": len(self.inputs), "const": len(self.consts), "v": len(self.instrs)}.get(kind)
            if limit is None or not 0 <= i < limit:
                raise ValueError(f"an output refers to {o.value}, which the program does not define")
            if o.strides is not None and len(o.strides) != rank:
                raise ValueError(f"output strides {o.strides} do not match the program rank {rank}")

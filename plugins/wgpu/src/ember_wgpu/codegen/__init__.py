"""WGSL code generation: the elementwise program form, its generator, the op table, helpers."""

from .elementwise import Kernel, generate, pack, signature, vec_width
from .program import Const, Instr, Operand, Out, Program

__all__ = ["Program", "Operand", "Const", "Instr", "Out", "Kernel", "generate", "pack", "signature", "vec_width"]

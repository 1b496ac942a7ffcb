"""WGSL code generation: the elementwise generator (it reads core's FusedProgram), the op table, helpers."""

from .elementwise import Kernel, generate, layouts, pack, vec_width

__all__ = ["Kernel", "generate", "layouts", "pack", "vec_width"]

"""Complex64 matmul composed from the real kernel: four real products over the parts.

A complex handle's real and imaginary planes are float32 views of its buffer (doubled
strides, offset ``2k`` or ``2k + 1``), so the parts cost no copy; ``(ar + i ai)(br + i bi)``
is ``ar br - ai bi + i (ar bi + ai br)``, combined by one generated elementwise kernel. Four
products, not Gauss's three: the three-product form loses digits to cancellation.
"""

from __future__ import annotations

import functools

from ember.dtypes import real_dtype
from ember.lazy.program import FusedProgram

from ..handle import WgpuArray
from ..runtime import Runtime
from . import elementwise as ew
from . import matmul as real_matmul

__all__ = ["matmul", "part"]


def part(a: WgpuArray, imag: bool) -> WgpuArray:
    """The real (or imaginary) plane of complex ``a`` as a strided float32 view."""
    strides = tuple(2 * s for s in a.strides)
    return WgpuArray(a.storage, a.shape, real_dtype(a.dtype), strides, 2 * a.offset + int(imag))


@functools.cache
def _combine(real: str, cplx: str) -> FusedProgram:
    """(rr, ii, ri, ir) -> (rr - ii) + i (ri + ir)."""
    t = (real, "tensor")
    return FusedProgram(
        (t, t, t, t),
        (("sub", real, (0, 1)), ("add", real, (2, 3)), ("make_complex", cplx, (4, 5))),
        (6,),
    )


def matmul(rt: Runtime, a: WgpuArray, b: WgpuArray) -> WgpuArray:
    """``a @ b`` for complex ``a`` (..., M, K) and ``b`` (..., K, N)."""
    ar, ai, br, bi = part(a, False), part(a, True), part(b, False), part(b, True)
    products = [real_matmul.matmul(rt, x, y) for x, y in ((ar, br), (ai, bi), (ar, bi), (ai, br))]
    prog = _combine(real_dtype(a.dtype).name, a.dtype.name)
    return ew.run_program(rt, prog, products, products[0].shape)[0]

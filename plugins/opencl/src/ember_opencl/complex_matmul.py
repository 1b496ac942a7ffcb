"""Complex matmul composed from the real kernel: four real products over the parts.

A complex handle's real and imaginary planes are float views of its buffer (doubled strides,
offset ``2k`` or ``2k + 1``), so the parts cost no copy; ``(ar + i ai)(br + i bi)`` is
``ar br - ai bi + i (ar bi + ai br)``, combined by one generated elementwise kernel. Four
products, not Gauss's three: the three-product form loses digits to cancellation.
"""

from __future__ import annotations

import functools

from ember.dtypes import as_dtype, real_dtype

from . import matmul as real_matmul
from .array import CLArray
from .codegen import FusedProgram
from .elementwise import run_program
from .runtime import Runtime

__all__ = ["matmul", "part"]


def part(a: CLArray, imag: bool) -> CLArray:
    """The real (or imaginary) plane of complex ``a`` as a strided view of real elements."""
    return CLArray(a.block, a.shape, tuple(2 * s for s in a.strides), 2 * a.offset + int(imag), real_dtype(a.dtype))


@functools.cache
def _combine(real: str, cplx: str) -> FusedProgram:
    """(rr, ii, ri, ir) -> (rr - ii) + i (ri + ir)."""
    t = (real, "tensor")
    return FusedProgram(
        (t, t, t, t),
        (("sub", real, (0, 1)), ("add", real, (2, 3)), ("make_complex", cplx, (4, 5))),
        (6,),
    )


def matmul(rt: Runtime, a: CLArray, b: CLArray) -> CLArray:
    """``a @ b`` for complex ``a`` (..., M, K) and ``b`` (..., K, N)."""
    ar, ai, br, bi = part(a, False), part(a, True), part(b, False), part(b, True)
    products = [real_matmul.matmul(rt, x, y) for x, y in ((ar, br), (ai, bi), (ar, bi), (ai, br))]
    shape = products[0].shape
    prog = _combine(real_dtype(a.dtype).name, a.dtype.name)
    if not products[0].size:
        return rt.empty(shape, as_dtype(a.dtype.name))
    return run_program(rt, prog, products, shape)[0]

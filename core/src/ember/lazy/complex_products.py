"""Complex matmul composed from a backend's real matmul: four real products over the parts.

A complex handle's real and imaginary planes are real views of its buffer (doubled strides,
offset ``2k`` or ``2k + 1``), so the parts cost no copy; ``(ar + i ai)(br + i bi)`` is
``ar br - ai bi + i (ar bi + ai br)``, combined by one fused elementwise program. Four
products, not Gauss's three: the three-product form loses digits to cancellation.

A backend supplies only what is specific to its API (how a handle is viewed, its real matmul,
how it runs a fused program); the OpenCL and WebGPU backends share the rest from here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ember.dtypes import DType, real_dtype

from .program import FusedProgram

__all__ = ["combine_program", "matmul", "part"]

#: ``view(a, strides, offset, dtype)``: a handle over ``a``'s buffer, of ``a.shape``, in that layout
View = Callable[[Any, tuple[int, ...], int, DType], Any]


def part(a: Any, imag: bool, view: View) -> Any:
    """The real (or imaginary) plane of complex handle ``a`` as a strided view of real elements."""
    return view(a, tuple(2 * s for s in a.strides), 2 * a.offset + int(imag), real_dtype(a.dtype))


@functools.cache
def combine_program(real: str, cplx: str) -> FusedProgram:
    """(rr, ii, ri, ir) -> (rr - ii) + i (ri + ir), in dtypes ``real`` and ``cplx`` (names)."""
    t = (real, "tensor")
    return FusedProgram(
        (t, t, t, t),
        (("sub", real, (0, 1)), ("add", real, (2, 3)), ("make_complex", cplx, (4, 5))),
        (6,),
    )


def matmul(
    a: Any,
    b: Any,
    view: View,
    real_matmul: Callable[[Any, Any], Any],
    run_program: Callable[[FusedProgram, Sequence[Any], tuple[int, ...]], Sequence[Any]],
) -> Any:
    """``a @ b`` for complex ``a`` (..., M, K) and ``b`` (..., K, N): ``real_matmul`` of the four
    pairs of parts (``view`` makes a part), then :func:`combine_program` over the products by the
    backend's ``run_program(program, operands, shape)`` (its fused-program launch)."""
    ar, ai, br, bi = part(a, False, view), part(a, True, view), part(b, False, view), part(b, True, view)
    products = [real_matmul(x, y) for x, y in ((ar, br), (ai, bi), (ar, bi), (ai, br))]
    return run_program(combine_program(real_dtype(a.dtype).name, a.dtype.name), products, products[0].shape)[0]

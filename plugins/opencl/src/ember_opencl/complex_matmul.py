"""Complex matmul as four real matmuls over float views of the parts (``ember.lazy.complex_products``
holds the algorithm and the combining program); this module holds OpenCL's views and launches."""

from __future__ import annotations

from collections.abc import Sequence

from ember.dtypes import DType, as_dtype
from ember.lazy import complex_products
from ember.lazy.program import FusedProgram

from . import matmul as real_matmul
from .array import CLArray
from .elementwise import run_program
from .runtime import Runtime

__all__ = ["matmul"]


def _view(a: CLArray, strides: tuple[int, ...], offset: int, dtype: DType) -> CLArray:
    return CLArray(a.block, a.shape, strides, offset, dtype)


def matmul(rt: Runtime, a: CLArray, b: CLArray) -> CLArray:
    """``a @ b`` for complex ``a`` (..., M, K) and ``b`` (..., K, N)."""

    def combine(prog: FusedProgram, products: Sequence[CLArray]) -> CLArray:
        shape = products[0].shape
        if not products[0].size:
            return rt.empty(shape, as_dtype(a.dtype.name))
        return run_program(rt, prog, products, shape)[0]

    return complex_products.matmul(a, b, _view, lambda x, y: real_matmul.matmul(rt, x, y), combine)

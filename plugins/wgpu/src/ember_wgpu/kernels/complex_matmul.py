"""Complex64 matmul as four real matmuls over float32 views of the parts (``ember.lazy.complex_products``
holds the algorithm and the combining program); this module holds WebGPU's views and launches."""

from __future__ import annotations

from collections.abc import Sequence

from ember.dtypes import DType
from ember.lazy import complex_products
from ember.lazy.program import FusedProgram

from ..handle import WgpuArray
from ..runtime import Runtime
from . import elementwise as ew
from . import matmul as real_matmul

__all__ = ["matmul"]


def _view(a: WgpuArray, strides: tuple[int, ...], offset: int, dtype: DType) -> WgpuArray:
    return WgpuArray(a.storage, a.shape, dtype, strides, offset)


def matmul(rt: Runtime, a: WgpuArray, b: WgpuArray) -> WgpuArray:
    """``a @ b`` for complex ``a`` (..., M, K) and ``b`` (..., K, N)."""

    def combine(prog: FusedProgram, products: Sequence[WgpuArray]) -> WgpuArray:
        return ew.run_program(rt, prog, products, products[0].shape)[0]

    return complex_products.matmul(a, b, _view, lambda x, y: real_matmul.matmul(rt, x, y), combine)

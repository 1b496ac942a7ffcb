"""ember-linalg: linear algebra for ember, seen as ``em.linalg``.

Factorizations and solvers are ``@backend_extension`` ops: a reference in ember Tensor ops runs on
every backend, native kernels run where they exist (LAPACK through numpy/scipy on cpu, cuSOLVER
through CuPy on cuda, generated Jacobi-SVD and LU kernels on opencl and wgpu), and each has its
gradient rule. Importing the package registers them.
"""

from __future__ import annotations

from . import kernels_cpu, kernels_cuda, kernels_opencl, kernels_wgpu
from .api import (
    EighResult,
    LstsqResult,
    LUFactorResult,
    LUResult,
    QRResult,
    SlogdetResult,
    SVDResult,
    cholesky,
    cross,
    det,
    eig,
    eigh,
    eigvals,
    eigvalsh,
    inv,
    lstsq,
    lu,
    lu_factor,
    lu_solve,
    matrix_norm,
    matrix_power,
    matrix_rank,
    norm,
    pinv,
    qr,
    slogdet,
    solve,
    solve_triangular,
    svd,
    svdvals,
)
from .core_ops import diagonal, matmul, matrix_transpose, outer, tensordot, trace, vecdot, vector_norm
from .errors import LinAlgError
from .factorizations import EXTENSION_OPS

__version__ = "0.1.0"

kernels_cpu.register("cpu")
kernels_cuda.register("cuda")
kernels_opencl.register("opencl")
kernels_wgpu.register("wgpu")

__all__ = [
    "EXTENSION_OPS", "LinAlgError",
    "EighResult", "LstsqResult", "LUFactorResult", "LUResult", "QRResult", "SlogdetResult", "SVDResult",
    "cholesky", "cross", "det", "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "inv", "lstsq", "lu", "lu_factor",
    "lu_solve",
    "matmul", "matrix_norm", "matrix_power", "matrix_rank", "matrix_transpose", "norm", "outer", "pinv", "qr",
    "slogdet", "solve", "solve_triangular", "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm",
]  # fmt: skip

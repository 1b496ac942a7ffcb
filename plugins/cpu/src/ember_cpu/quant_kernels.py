"""Native ``dequant_matmul`` for the CPU backend: the codes decoded with one table lookup in
numpy, then one GEMM (the core's composite takes about ten dispatched ops for NF4).

``CALLS`` counts the calls, so tests can check this kernel ran rather than the composite.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from ember.ops.quant import NF4_LEVELS

from .gemm import product

__all__ = ["dequant_matmul", "dequantize", "dequantize_op", "CALLS"]

#: calls per op name (tests read it; nothing else depends on it)
CALLS: Counter[str] = Counter()

_LEVELS = np.array(NF4_LEVELS, dtype=np.float32)
# the 256 byte values -> their two levels (high nibble first); as complex64, one take per byte
# yields both float32 levels, in order: decoding is one gather and one in-place scale
_PAIRS = np.stack([_LEVELS[np.arange(256) >> 4], _LEVELS[np.arange(256) & 15]], axis=1)
_PAIRS_C64 = np.ascontiguousarray(_PAIRS).view(np.complex64).reshape(256)


def dequantize(qweight: np.ndarray, scales: np.ndarray, format: str, shape: tuple[int, int], block_size: int,
               dtype: np.dtype) -> np.ndarray:  # fmt: skip
    """The ``(out, in)`` weight in ``dtype`` (float32 or float64)."""
    out, inp = shape
    if format == "int8":
        w = qweight.astype(dtype)
        w *= scales.astype(dtype)[:, None]
        return w
    if dtype == np.float32:
        values = np.take(_PAIRS_C64, qweight).view(np.float32)
    else:
        values = np.take(_PAIRS.astype(dtype), qweight, axis=0).reshape(-1)
    blocks = values.reshape(-1, block_size)
    blocks *= scales.astype(dtype)[:, None]
    return values[: out * inp].reshape(out, inp)


def dequantize_op(
    qweight: np.ndarray, scales: np.ndarray, *, format: str, shape: tuple[int, int], block_size: int, dtype: Any
) -> np.ndarray:
    """The ``dequantize`` op: the weight in ``dtype`` (16-bit floats computed in float32)."""
    CALLS["dequantize"] += 1
    target = np.dtype(dtype.numpy)
    compute = np.dtype(np.float64) if target == np.float64 else np.dtype(np.float32)
    w = dequantize(qweight, scales, format, shape, block_size, compute)
    return np.ascontiguousarray(w.astype(target, copy=False))


def dequant_matmul(
    x: np.ndarray, qweight: np.ndarray, scales: np.ndarray, *, format: str, shape: tuple[int, int], block_size: int
) -> np.ndarray:
    CALLS["dequant_matmul"] += 1
    dt = x.dtype
    compute = np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, shape[1]).astype(compute, copy=False)
    if format == "int8":  # the per-row scale commutes with the product: scale the (N, out) result
        y = product(x2, qweight.astype(compute).T)
        y *= scales.astype(compute)
    else:
        y = product(x2, dequantize(qweight, scales, format, shape, block_size, compute).T)
    return np.ascontiguousarray(y.reshape(lead + (shape[0],)).astype(dt, copy=False))

"""The WGPU dequant_matmul kernel ran (its launch counter moved), and matches the core's
composite and the CPU kernel, for int8, NF4 and the 16-bit floats."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.dispatch import OPS
from ember.quant import dequant_matmul, dequantize_numpy, quantize_int8, quantize_nf4
from ember_wgpu import quant


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("fmt", ["int8", "nf4"])
def test_kernel_runs_and_matches_composite(dev, fmt, dtype):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((37, 100)).astype(np.float32)
    qw = quantize_int8(w) if fmt == "int8" else quantize_nf4(w, 64, double_quant=True)
    x = rng.standard_normal((3, 5, 100)).astype(dtype)
    q, s = em.tensor(qw.qweight, device=dev), em.tensor(qw.absmax(), device=dev)
    xd = em.tensor(x, device=dev)
    before = quant.CALLS["dequant_matmul"]
    got = dequant_matmul(xd, q, s, format=qw.format, shape=qw.shape, block_size=qw.block_size or 64)
    assert quant.CALLS["dequant_matmul"] == before + 1
    composite = OPS["dequant_matmul"].composite(xd, q, s, format=qw.format, shape=qw.shape, block_size=qw.block_size)
    assert quant.CALLS["dequant_matmul"] == before + 1
    expected = x.astype(np.float64) @ dequantize_numpy(qw).T
    tol = 2e-2 if dtype == "float16" else 5e-5
    np.testing.assert_allclose(got.numpy().astype(np.float64), expected, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(got.numpy().astype(np.float64), composite.numpy(), rtol=tol, atol=tol * 10)

"""Skinny GEMMs (N <= 16 columns, a large A): the rows kernel (A's K contiguous or any layout) and
the cols kernel (A's M contiguous, slices of K summed), against numpy float64."""

from __future__ import annotations

import numpy as np
import pytest

from ember import dtypes as D
from ember_wgpu.kernels import matmul, skinny

RNG = np.random.default_rng(23)


@pytest.fixture
def gpu(rt, monkeypatch):
    """The runtime with plans of this test's own, told it is a GPU adapter (where split-K would
    otherwise take these products: the skinny kernels must come first)."""
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")
    monkeypatch.setattr(matmul, "_on_gpu", lambda rt: True)
    monkeypatch.setattr(rt, "plans", {})
    return rt


def _operand(rt, x: np.ndarray, transposed: bool, offset: int = 0):
    """``x`` on the device: C order, or a transposed view of its transpose; ``offset`` elements in."""
    stored = np.ascontiguousarray(x.T) if transposed else x
    flat = np.concatenate([RNG.standard_normal(offset).astype(np.float32), stored.ravel()])
    h = rt.upload(flat, D.float32)
    if transposed:
        r, c = x.shape
        return h.with_layout((r, c), (1, r), offset)
    return h.with_layout(x.shape, (x.shape[1], 1), offset)


@pytest.mark.parametrize("n", [1, 3, 10, 16])
@pytest.mark.parametrize("layout", ["kfast", "mfast"])
def test_skinny_products_match_numpy(gpu, n, layout):
    m, k = 333, 517  # neither a multiple of the workgroup, the rows per group nor a slice
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    A = _operand(gpu, a, transposed=layout == "mfast", offset=5)
    B = _operand(gpu, b, transposed=n % 2 == 1, offset=3)
    before = dict(skinny.CALLS)
    for _ in range(2):  # the second from the kept plan
        got = gpu.read([matmul.matmul(gpu, A, B)])[0]
        np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=2e-4)
    kind = "cols" if layout == "mfast" else "rows"
    assert skinny.CALLS[kind] == before.get(kind, 0) + 2, f"the {kind} kernel ran: {skinny.CALLS}"


def test_the_cols_kernel_splits_k_and_sums_the_slices(gpu):
    m, k, n = 96, 4096, 10  # few rows: K is cut into slices, summed by a reduction
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    A, B = _operand(gpu, a, transposed=True), _operand(gpu, b, transposed=False)
    p = skinny.plan(gpu, A, B)
    assert p.kind == "cols" and p.slices > 1
    got = gpu.read([matmul.matmul(gpu, A, B)])[0]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    ("shape_a", "n", "dtype"),
    [((300, 400), 17, np.float32), ((300, 400), 10, np.int32), ((20, 30), 10, np.float32)],
    ids=["wider-than-16", "int32", "small"],
)
def test_other_products_keep_the_tiled_kernel(gpu, shape_a, n, dtype):
    a = RNG.integers(-3, 4, shape_a).astype(dtype)
    b = RNG.integers(-3, 4, (shape_a[1], n)).astype(dtype)
    A, B = gpu.upload(a, D.as_dtype(a.dtype.name)), gpu.upload(b, D.as_dtype(b.dtype.name))
    before = sum(skinny.CALLS.values())
    got = gpu.read([matmul.matmul(gpu, A, B)])[0]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-4)
    assert sum(skinny.CALLS.values()) == before


def test_a_cpu_adapter_runs_them_too(rt, monkeypatch):
    monkeypatch.setattr(matmul, "_on_gpu", lambda rt: False)
    monkeypatch.setattr(rt, "plans", {})
    a = RNG.standard_normal((300, 400)).astype(np.float32)
    b = RNG.standard_normal((400, 10)).astype(np.float32)
    before = skinny.CALLS["rows"]
    got = rt.read([matmul.matmul(rt, rt.upload(a, D.float32), rt.upload(b, D.float32))])[0]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)
    assert skinny.CALLS["rows"] == before + 1

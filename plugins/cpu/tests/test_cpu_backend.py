"""What is specific to the CPU backend: handles, 16-bit floats, warnings, native fast paths."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import ember as em
from ember.dispatch import OPS

CPU = em.Device.cpu()


def test_handles_are_never_written_through_numpy():
    x = em.arange(6, dtype=em.float32)
    view = x.numpy()
    assert not view.flags.writeable
    with pytest.raises(ValueError):
        view[0] = 1.0


def test_ieee_results_without_numpy_warnings():
    """log(0), 1/0 and friends give IEEE results silently, as in PyTorch (checked in a fresh
    interpreter with Python's default warning filters, which pytest would override)."""
    code = (
        "import warnings, ember as em; warnings.simplefilter('default');"
        "import ember_cpu.backend;"  # the backend installs its filter on import, after the default one
        "print(em.log(em.tensor([0.0, -1.0])).tolist(), (em.tensor([1.0]) / em.tensor([0.0])).tolist())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[-inf, nan] [inf]"
    assert "Warning" not in out.stderr


def test_bfloat16_computes_in_float32_and_rounds():
    import ml_dtypes

    a = np.array([1.0, 3.0, 1e-3], dtype=ml_dtypes.bfloat16)
    got = em.exp(em.tensor(a)).numpy()
    assert got.dtype == ml_dtypes.bfloat16
    want = np.exp(a.astype(np.float32)).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))
    x = em.tensor(a)
    assert (x + 0.5).dtype is em.bfloat16 and (x * 2.0).numpy().dtype == ml_dtypes.bfloat16


def test_float16_matmul_accumulates_in_float32():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 256)).astype(np.float16)
    b = rng.standard_normal((256, 32)).astype(np.float16)
    got = (em.tensor(a) @ em.tensor(b)).numpy()
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(got, want)


def _native_ops():
    backend = CPU.backend
    return sorted(name for name, op in OPS.items() if op.composite is not None and backend.implementation(name))


NATIVE_CASES = {
    "softmax": lambda x: em.softmax(x, axis=1),
    "log_softmax": lambda x: em.log_softmax(x, axis=0),
    "logsumexp": lambda x: em.logsumexp(x, axis=1),
    "layer_norm": lambda x: em.layer_norm(x, 5),
    "rms_norm": lambda x: em.rms_norm(x, 5),
    "gelu": em.gelu,
    "sigmoid": em.sigmoid,
    "silu": em.silu,
    "softplus": em.softplus,
    "relu": em.relu,
    "expm1": em.expm1,
    "log1p": lambda x: em.log1p(x.abs()),
    "tan": em.tan,
    "atan": em.atan,
    "sinh": em.sinh,
    "cosh": em.cosh,
    "asinh": em.asinh,
    "mean": lambda x: em.mean(x, axis=0),
}


@pytest.mark.parametrize("name", sorted(NATIVE_CASES))
def test_native_fast_path_agrees_with_the_composite(name, monkeypatch):
    """The CPU's native kernel and ember's composite definition give the same numbers."""
    assert name in _native_ops(), f"{name} is no longer native on cpu; drop it from this table"
    x = em.tensor(np.random.default_rng(1).standard_normal((4, 5)), dtype=em.float64)
    native = NATIVE_CASES[name](x).numpy()
    impls = CPU._impls
    monkeypatch.setitem(impls, name, None)  # hide the native kernel: dispatch falls back to the composite
    composite = NATIVE_CASES[name](x).numpy()
    np.testing.assert_allclose(native, composite, rtol=1e-12, atol=1e-12)


def test_describe_reports_the_host():
    info = CPU.describe()
    assert info["fp64"] and info["cores"] >= 1 and info["name"]


@pytest.mark.parametrize("layout", ["merged", "transposed", "broadcast"])
def test_stacked_matmul_as_one_product_matches_float64(layout):
    """(..., M, K) @ (K, N): rows that merge into one matrix take one 2-D product (the backend's
    own matmul); a stack whose rows do not merge takes the shared kernel; both against float64."""
    gen = np.random.default_rng(7)
    if layout == "merged":
        a = gen.standard_normal((2, 3, 4, 5)).astype(np.float32)
    elif layout == "transposed":
        a = gen.standard_normal((4, 3, 5)).astype(np.float32).transpose(1, 0, 2)
    else:
        a = np.broadcast_to(gen.standard_normal(5).astype(np.float32), (3, 4, 5))
    b = gen.standard_normal((5, 6)).astype(np.float32)
    dev = em.Device("cpu")
    assert dev.backend.implementation("matmul").__wrapped__.__name__ == "matmul"
    got = (em.tensor(np.ascontiguousarray(a), device=dev) @ em.tensor(b, device=dev)).numpy()
    kernel = dev.backend.implementation("matmul")
    direct = kernel(a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(direct, want, rtol=1e-5, atol=1e-5)
    assert direct.shape == a.shape[:-1] + (6,) and direct.dtype == np.float32

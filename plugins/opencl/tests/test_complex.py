"""complex64 / complex128 as float pairs: that the generated elementwise kernels ran for the complex
ops. The values themselves (special values, casts, indexing, reductions, matmul, gradients) are the
conformance suite's (ember_conformance.test_complex, run with --ember-device=opencl:0)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em


def _random(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.uniform(-2, 2, n) + 1j * rng.uniform(-2, 2, n)).astype(np.complex64)


def _ran(dev: em.Device, op: str, dtype: str) -> bool:
    """Whether a generated elementwise kernel computing ``op`` over ``dtype`` was built."""
    for key in dev.backend.rt._kernels:
        if key[0] == "ew" and any(
            i[0] == op and dtype in (i[1], *[d for d, _ in key[1].inputs]) for i in key[1].instructions
        ):
            return True
    return False


@pytest.mark.parametrize("name, op", [("add", "add"), ("subtract", "sub"), ("multiply", "mul"), ("divide", "div"),
                                      ("pow", "pow"), ("equal", "eq"), ("not_equal", "ne")])  # fmt: skip
def test_binary_kernels_ran(dev, name, op):
    a, b = _random(8, 2), _random(8, 3)
    want = getattr(np, {"pow": "power"}.get(name, name))(a.astype(np.complex128), b.astype(np.complex128))
    got = getattr(em, name)(em.tensor(a, device=dev), em.tensor(b, device=dev)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert _ran(dev, op, "complex64")


def test_native_kernels_ran(dev):
    z = _random(8, 4)
    t = em.tensor(z, device=dev)
    np.testing.assert_allclose(em.exp(t).numpy(), np.exp(z.astype(np.complex128)), rtol=1e-5)
    np.testing.assert_array_equal(em.real(t).numpy(), z.real)
    assert _ran(dev, "exp", "complex64") and _ran(dev, "real", "complex64")

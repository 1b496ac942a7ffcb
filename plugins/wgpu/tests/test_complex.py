"""complex64 as vec2<f32> pairs: that the WGSL complex library ran, and that complex128 is refused
with its reason. The values themselves (special values, casts, indexing, reductions, matmul,
gradients) are the conformance suite's (ember_conformance.test_complex, run with --ember-device=wgpu:0)."""

from __future__ import annotations

import numpy as np

import ember as em


def _ran(dev: em.Device, helper: str) -> bool:
    """Whether a pipeline whose WGSL defines ``helper`` (a complex library function) was built."""
    return any(f"fn {helper}(" in source for source in dev.backend.rt._pipelines)


def test_native_kernels_ran(dev):
    rng = np.random.default_rng(4)
    z = (rng.uniform(-2, 2, 8) + 1j * rng.uniform(-2, 2, 8)).astype(np.complex64)
    before = dev.memory_stats()["extra"]["dispatches"]
    t = em.tensor(z, device=dev)
    z128 = z.astype(np.complex128)
    np.testing.assert_allclose(em.exp(t).numpy(), np.exp(z128), rtol=1e-5)
    np.testing.assert_allclose((t * t).numpy(), z128 * z128, rtol=1e-5)
    assert dev.memory_stats()["extra"]["dispatches"] > before
    assert _ran(dev, "c_exp") and _ran(dev, "c_mul")
    assert not dev.capabilities.supports(em.complex128)
    assert "64-bit" in dev.capabilities.unsupported_dtypes["complex128"]

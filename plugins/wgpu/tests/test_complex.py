"""complex64 as vec2<f32> pairs: that the WGSL complex library ran, and that complex128 is refused
with its reason. The values themselves (special values, casts, indexing, reductions, matmul,
gradients) are the conformance suite's (ember_conformance.test_complex, run with --ember-device=wgpu:0)."""

from __future__ import annotations

import re

import numpy as np
import pytest

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


#: a unary minus on a library function's argument or result (``-z``, ``-w.x``), not a literal's or a call's
_UNARY_MINUS = re.compile(r"(?<![\w)\]])-([zw])(\.[xy])?\b")


def _as_subtraction(match: re.Match[str]) -> str:
    """``0 - x``'s value (+0 for a zero), spelled so that no compiler folds it back into a negation
    (lavapipe's turns ``0.0 - x`` into ``-x``, allowed to ignore a zero's sign)."""
    x = match[1] + (match[2] or "")
    zero = "0.0" if match[2] else "vec2<f32>(0.0, 0.0)"
    return f"select(-{x}, {zero}, {x} == {zero})"


@pytest.mark.parametrize("name", ["asin", "acos", "asinh", "acosh", "atan", "sin", "cos", "tan"])
def test_rotations_keep_a_zeros_sign_where_negation_is_a_subtraction(dev, monkeypatch, name):
    """As ember-opencl's library (whose asin and acos failed on NVIDIA's OpenCL as a compiler giving
    -(+0) = +0 would): compiled with every unary minus on the complex helpers' values made to give +0
    for a zero, as a subtraction from zero does, the functions still match numpy on the special values:
    the rotations i z flip sign bits, they do not negate. (The helpers before that change failed
    exactly asin and acos under this rewrite.)"""
    from ember_conformance.test_complex import _GRID, _UNARY, _close
    from ember_wgpu.codegen import complex_lib, wgsl_lib

    helpers, count = dict(wgsl_lib.HELPERS), 0
    for key in complex_lib.COMPLEX_HELPERS:
        helpers[key], n = _UNARY_MINUS.subn(_as_subtraction, helpers[key])
        count += n
    assert count >= 3, "the rewrite found no negation to turn into a subtraction"
    rt = dev.backend.rt
    monkeypatch.setattr(wgsl_lib, "HELPERS", helpers)
    monkeypatch.setattr(wgsl_lib, "_DEPS", {})
    monkeypatch.setattr(rt, "kernels", {})  # (kernels and plans made with the real helpers: not reused)
    monkeypatch.setattr(rt, "plans", {})
    z = _GRID.astype(np.complex64)
    got = getattr(em, name)(em.tensor(z, device=dev)).numpy()
    with np.errstate(all="ignore"):
        want = _UNARY[name](z.astype(np.complex128))
    _close(got, want, 3e-6, f"{name} complex64")

"""complex64 / complex128 as float pairs: that the generated elementwise kernels ran for the complex
ops. The values themselves (special values, casts, indexing, reductions, matmul, gradients) are the
conformance suite's (ember_conformance.test_complex, run with --ember-device=opencl:0)."""

from __future__ import annotations

import re
from string import Template

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


#: a unary minus on a library function's argument or result (``-z``, ``-w.x``), not a literal's or a call's
_UNARY_MINUS = re.compile(r"(?<![\w)\]])-([zw])(\.[xy])?\b")


def _as_subtraction(match: re.Match[str]) -> str:
    return f"((${{T}})0 - {match[1]}{match[2]})" if match[2] else f"((${{C}})(0, 0) - {match[1]})"


@pytest.mark.parametrize("name", ["asin", "acos", "asinh", "acosh", "atan", "sin", "cos", "tan"])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_rotations_keep_a_zeros_sign_where_negation_is_a_subtraction(dev, monkeypatch, request, name, dtype):
    """NVIDIA's OpenCL (H100, driver 580.159) failed asin and acos on special values and passed asinh:
    the pattern of a compiler that turns -(+0) into +0, which sends asin's rotation i z of x + 0i
    (x > 1) to the other side of asinh's branch cut. Compiled with every unary minus on the library's
    values spelled as a subtraction from zero (which gives +0), the functions still match numpy: the
    rotations flip sign bits (copysign), they do not negate. (The library before that change failed
    exactly asin and acos, both dtypes, under this rewrite.)"""
    from ember_conformance.test_complex import _GRID, _UNARY, _close
    from ember_opencl import complex as cl_complex

    if dtype == "complex128" and not dev.backend.rt.fp64:
        pytest.skip("the device has no float64 (cl_khr_fp64): no complex128")
    text, count = _UNARY_MINUS.subn(_as_subtraction, cl_complex._LIBRARY.template)
    assert count >= 3, "the rewrite found no negation to turn into a subtraction"
    from ember_opencl import elementwise

    rt = dev.backend.rt
    monkeypatch.setattr(cl_complex, "_LIBRARY", Template(text))
    monkeypatch.setattr(rt, "_kernels", {})  # (kernels and plans made with the real library: not reused)
    monkeypatch.setattr(elementwise, "_PLANS", {})
    cl_complex.library.cache_clear()
    request.addfinalizer(cl_complex.library.cache_clear)  # (after monkeypatch restores the library)
    z = _GRID.astype(dtype)
    got = getattr(em, name)(em.tensor(z, device=dev)).numpy()
    with np.errstate(all="ignore"):
        want = _UNARY[name](z.astype(np.complex128))
    _close(got, want, 3e-6 if dtype == "complex64" else 1e-12, f"{name} {dtype}")

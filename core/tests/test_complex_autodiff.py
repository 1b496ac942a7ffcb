"""Gradients through complex tensors, in PyTorch's convention: for a real loss L of z = x + iy,
``z.grad = dL/dx + 1j * dL/dy``.

Two independent references: central finite differences in float64 that treat the real and
imaginary parts as separate real inputs (no torch), and PyTorch 2.13 on the same programs
(the ``*_torch`` tests, run by the golden-torch env). The FFT cases need ember-signal (``em.fft``).
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

DEV = em.Device.cpu().autodiff()

try:
    import ember_signal  # noqa: F401

    HAVE_FFT = True
except ImportError:  # the core env installs core and cpu only
    HAVE_FFT = False

needs_fft = pytest.mark.skipif(not HAVE_FFT, reason="em.fft needs ember-signal, which this env does not install")

_RNG = np.random.default_rng(1234)


def _c(*shape: int) -> np.ndarray:
    """Complex float64 values away from 0 and from branch cuts (|z| between 0.5 and 1.5)."""
    r = _RNG.uniform(0.5, 1.5, shape)
    phi = _RNG.uniform(-2.5, 2.5, shape)
    return r * np.exp(1j * phi)


def _r(*shape: int) -> np.ndarray:
    return _RNG.uniform(0.5, 1.5, shape)


# each case: (name, program(xp, *inputs) -> real scalar, inputs); xp is ember or torch, so one
# program runs on both; cases whose function names differ give a pair of programs instead
CASES = [
    ("add_sub_neg", lambda xp, z, w: xp.abs(z + w - (-z) * 0.5).sum(), (_c(4), _c(4))),
    ("mul", lambda xp, z, w: xp.abs(z * w).sum(), (_c(4), _c(4))),
    ("div", lambda xp, z, w: xp.real(z / w).sum() + xp.imag(w / z).sum(), (_c(4), _c(4))),
    ("reciprocal", lambda xp, z: xp.imag(xp.reciprocal(z)).sum(), (_c(5),)),
    ("exp_log", lambda xp, z: xp.real(xp.exp(z) * xp.log(z)).sum(), (_c(5),)),
    ("sqrt", lambda xp, z: xp.imag(xp.sqrt(z)).sum() + xp.real(xp.sqrt(z)).sum(), (_c(5),)),
    ("pow_scalar", lambda xp, z: xp.real(z**3).sum() + xp.imag(z**2.5).sum(), (_c(5),)),
    ("pow_tensor", lambda xp, z, w: xp.abs(z**w).sum(), (_c(4), _c(4) * 0.5)),
    ("abs_squared", lambda xp, z: (xp.abs(z) ** 2).sum(), (_c(5),)),
    ("conj", lambda xp, z, w: xp.real(z * xp.conj(w)).sum() + xp.imag(xp.conj(z) * z * w).sum(), (_c(4), _c(4))),
    ("sin_cos", lambda xp, z: xp.real(xp.sin(z)).sum() + xp.imag(xp.cos(z) * z).sum(), (_c(5),)),
    ("tanh", lambda xp, z: xp.abs(xp.tanh(z)).sum(), (_c(5) * 0.5,)),
    (
        "square_expm1_log1p_tan",
        lambda xp, z: xp.abs(xp.square(z) + xp.expm1(z) * xp.log1p(z) + xp.tan(z * 0.5)).sum(),
        (_c(2, 3),),
    ),
    (
        "sinh_cosh_log2_log10",
        lambda xp, z: xp.real(xp.sinh(z) * xp.cosh(z)).sum() + xp.imag(xp.log2(z) + xp.log10(z)).sum(),
        (_c(2, 3),),
    ),
    ("asin_acos_atan", lambda xp, z: xp.abs(xp.asin(z * 0.5) + xp.acos(z * 0.5) * xp.atan(z * 0.5)).sum(), (_c(2, 3),)),
    ("asinh_acosh_atanh", lambda xp, z: xp.real(xp.asinh(z) + xp.acosh(z + 2) + xp.atanh(z * 0.5)).sum(), (_c(2, 3),)),
    ("where_take", lambda xp, z: xp.abs(xp.where(xp.real(z) > 0, z, z * 2j)[..., [0, 2]] ** 2).sum(), (_c(2, 3),)),
    ("real_imag", lambda xp, z: (xp.real(z) * xp.imag(z) ** 2).sum(), (_c(5),)),
    ("angle", lambda xp, z, w: (xp.angle(z * w) * xp.abs(z)).sum(), (_c(5), _c(5))),
    ("sum_mean", lambda xp, z: xp.abs(z.sum(0)).sum() + xp.real(xp.mean(z, 1) ** 2).sum(), (_c(3, 4),)),
    ("prod", lambda xp, z: xp.real(xp.prod(z, 1)).sum() + xp.imag(xp.prod(z, 0)).sum(), (_c(3, 4),)),
    ("movement", lambda xp, z: xp.abs(z.reshape(4, 3)[1:, ::2].mT * z[0, :3]).sum(), (_c(3, 4),)),
    ("matmul", lambda xp, z, w: xp.real(z @ xp.conj(w).mT).sum(), (_c(3, 4), _c(2, 4))),
    ("matmul_abs", lambda xp, z, w: (xp.abs(z @ w) ** 2).sum(), (_c(2, 3, 4), _c(4, 2))),
    ("einsum", lambda xp, z, w: xp.abs(xp.einsum("ij,jk->ik", z, w)).sum(), (_c(3, 4), _c(4, 2))),
    # the real-to-complex boundary: complex(re, im) built from real tensors, and a real scale
    ("complex_from_parts", lambda xp, a, b: xp.abs((a + 1j * b) ** 2 * a).sum(), (_r(5), _r(5))),
    ("real_times_complex", lambda xp, a, z: xp.imag(a * z).sum() + xp.real(z / a).sum(), (_r(4), _c(4))),
]

FFT_CASES = [
    ("fft_power", lambda xp, z: (xp.abs(xp.fft.fft(z)) ** 2).sum(), (_c(6),)),
    ("fft_ifft", lambda xp, z, w: xp.real(xp.fft.ifft(xp.fft.fft(z) * w)).sum(), (_c(8), _c(8))),
    ("fft_n", lambda xp, z: xp.abs(xp.fft.fft(z, n=7)).sum() + xp.imag(xp.fft.ifft(z, n=3)).sum(), (_c(5),)),
    ("rfft", lambda xp, x: (xp.abs(xp.fft.rfft(x)) ** 2).sum(), (_r(6),)),
    ("rfft_odd", lambda xp, x: xp.imag(xp.fft.rfft(x) * (1 + 2j)).sum(), (_r(7),)),
    ("irfft_even", lambda xp, z: (xp.fft.irfft(z) ** 3).sum(), (_c(5),)),
    ("irfft_odd", lambda xp, z: (xp.fft.irfft(z, n=7) ** 2 * xp.arange(7.0)).sum(), (_c(4),)),
    ("rfft_irfft", lambda xp, x: (xp.fft.irfft(xp.fft.rfft(x) * xp.fft.rfft(x)) ** 2).sum(), (_r(8),)),
    ("fft2_ortho", lambda xp, z: xp.real(xp.fft.fft2(z, norm="ortho") * z).sum(), (_c(3, 4),)),
    ("hfft_ihfft", lambda xp, z, x: (xp.fft.hfft(z) ** 2).sum() + xp.real(xp.fft.ihfft(x)).sum(), (_c(4), _r(5))),
]


def _ember_inputs(values: tuple[np.ndarray, ...]) -> list[em.Tensor]:
    return [em.tensor(v, device=DEV, requires_grad=True) for v in values]


def _ember_grads(program, values: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    inputs = _ember_inputs(values)
    program(em, *inputs).backward()
    return [t.grad.numpy() for t in inputs]


def _loss(program, values: list[np.ndarray]) -> float:
    with em.no_grad():
        return float(program(em, *[em.tensor(v, device=DEV) for v in values]).numpy())


def _finite_differences(program, values: tuple[np.ndarray, ...], h: float = 1e-6) -> list[np.ndarray]:
    """dL/dx + 1j dL/dy per input element, from central differences of the real and imaginary parts."""
    out = []
    for k, v in enumerate(values):
        grad = np.zeros(v.shape, dtype=v.dtype)
        steps = (1.0, 1j) if np.iscomplexobj(v) else (1.0,)
        for idx in np.ndindex(v.shape):
            for step in steps:
                plus = [w.copy() for w in values]
                minus = [w.copy() for w in values]
                plus[k][idx] += h * step
                minus[k][idx] -= h * step
                d = (_loss(program, plus) - _loss(program, minus)) / (2 * h)
                grad[idx] += d * step
        out.append(grad)
    return out


def _ids(cases):
    return [c[0] for c in cases]


@pytest.mark.parametrize("name,program,values", CASES + [pytest.param(*c, marks=needs_fft) for c in FFT_CASES],
                         ids=_ids(CASES + FFT_CASES))  # fmt: skip
def test_gradient_matches_finite_differences(name, program, values):
    got = _ember_grads(program, values)
    want = _finite_differences(program, values)
    for g, w, v in zip(got, want, values):
        assert g.dtype == v.dtype  # a complex leaf gets a complex gradient, a real leaf a real one
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def _torch_grads(program, values: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    torch = pytest.importorskip("torch", reason="the golden comparison needs torch (the golden-torch env has it)")
    inputs = [torch.tensor(v, requires_grad=True) for v in values]
    program(torch, *inputs).backward()
    return [t.grad.resolve_conj().numpy() for t in inputs]


@pytest.mark.parametrize("name,program,values", CASES + [pytest.param(*c, marks=needs_fft) for c in FFT_CASES],
                         ids=_ids(CASES + FFT_CASES))  # fmt: skip
def test_gradient_matches_torch(name, program, values):
    want = _torch_grads(program, values)
    got = _ember_grads(program, values)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_complex64_gradient_matches_torch():
    values = (_c(3, 4).astype(np.complex64), _c(4, 2).astype(np.complex64))
    program = CASES[_ids(CASES).index("matmul_abs")][1]
    want = _torch_grads(program, values)
    got = _ember_grads(program, values)
    for g, w in zip(got, want):
        assert g.dtype == np.complex64
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


# grad of grad: the first gradient (complex) goes into a second real loss
SECOND_ORDER = [
    ("cubic", lambda xp, z, w: xp.real(z**3 * w).sum(), (_c(4), _c(4))),
    ("abs_exp", lambda xp, z, w: (xp.abs(xp.exp(z) * w) ** 2).sum() + xp.abs(z).sum(), (_c(4), _c(4))),
]


@pytest.mark.parametrize("name,program,values", SECOND_ORDER, ids=_ids(SECOND_ORDER))
def test_grad_of_grad_matches_torch(name, program, values):
    torch = pytest.importorskip("torch", reason="the golden comparison needs torch (the golden-torch env has it)")
    tz, tw = (torch.tensor(v, requires_grad=True) for v in values)
    (g,) = torch.autograd.grad(program(torch, tz, tw), tz, create_graph=True)
    (torch.abs(g) ** 2).sum().backward()
    want = [tz.grad.resolve_conj().numpy(), tw.grad.resolve_conj().numpy()]

    def first(z, w):
        return em.grad(lambda a: program(em, a, w))(z)

    z, w = _ember_inputs(values)
    (em.abs(first(z, w)) ** 2).sum().backward()
    for t, ref in zip((z, w), want):
        np.testing.assert_allclose(t.grad.numpy(), ref, rtol=1e-9, atol=1e-10)


def test_grad_of_grad_matches_finite_differences():
    # d/dz of |dL/dz|^2 with L = real(z^3 w): dL/dz = 3 conj(z^2 w), so the second loss is
    # 9 |z|^4 |w|^2, whose gradient in z is 36 |z|^2 |w|^2 z; checked by differences as well
    program = SECOND_ORDER[0][1]
    values = SECOND_ORDER[0][2]

    def second(xp, z, w):
        return (em.abs(em.grad(lambda a: program(em, a, w))(z)) ** 2).sum()

    z, w = _ember_inputs(values)
    second(em, z, w).backward()
    zv, wv = values
    np.testing.assert_allclose(z.grad.numpy(), 36 * np.abs(zv) ** 2 * np.abs(wv) ** 2 * zv, rtol=1e-9)
    np.testing.assert_allclose(w.grad.numpy(), 18 * np.abs(zv) ** 4 * wv, rtol=1e-9)


def test_complex_output_needs_an_explicit_grad():
    z = em.tensor(np.array([1 + 1j]), device=DEV, requires_grad=True)
    with pytest.raises(em.errors.AutodiffError, match="complex"):
        (z * z).sum().backward()


def test_explicit_grad_of_a_complex_output():
    # backward(grad=v) on a complex output y: the same as backward of real(sum(conj(v) * y))
    zv = _c(3)
    v = _c(3)
    z = em.tensor(zv, device=DEV, requires_grad=True)
    (z * z).backward(grad=em.tensor(v, device=DEV))
    np.testing.assert_allclose(z.grad.numpy(), v * 2 * np.conj(zv), rtol=1e-12)


def test_angle_and_abs_at_zero_have_zero_gradient():
    # PyTorch's choice at the non-differentiable point z = 0 (numbers, not NaN)
    z = em.tensor(np.array([0j, 1 + 1j]), device=DEV, requires_grad=True)
    (em.angle(z) + em.abs(z)).sum().backward()
    want = np.array([0, (1 + 1j) / 2**0.5 + 1j * (1 + 1j) / 2])
    np.testing.assert_allclose(z.grad.numpy(), want, rtol=1e-12)


def test_angle_values_match_numpy():
    v = np.concatenate([_c(6), [-1 + 0j, 1j, -1j, 0j]])
    np.testing.assert_allclose(em.angle(em.tensor(v)).numpy(), np.angle(v), rtol=1e-12)
    x = np.array([-2.0, 0.0, 3.0])
    np.testing.assert_array_equal(em.angle(em.tensor(x)).numpy(), np.angle(x))
    assert em.angle(em.tensor(v.astype(np.complex64))).dtype == em.float32


def test_integer_tensors_still_have_no_gradients():
    with pytest.raises(em.errors.AutodiffError, match="floating-point and complex"):
        em.tensor([1, 2], device=DEV).requires_grad_()

"""complex64 as vec2<f32> pairs: every op against numpy complex128, special values (C99
Annex G, as numpy follows it) included, and a check that the generated kernel ran."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

_PARTS = [0.0, -0.0, 0.5, -1.5, 3.0, np.inf, -np.inf, np.nan]
#: every pair of special parts, then ordinary values
_GRID = np.array([complex(a, b) for a in _PARTS for b in _PARTS], dtype=np.complex64)

_UNARY = {
    "negative": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "log1p": np.log1p, "log2": np.log2, "log10": np.log10, "square": np.square, "reciprocal": np.reciprocal,
    "conj": np.conj, "real": np.real, "imag": np.imag, "angle": np.angle, "isnan": np.isnan, "isinf": np.isinf,
    "isfinite": np.isfinite, "sign": np.sign, "round": np.round,
}  # fmt: skip
#: numpy's complex expm1 gives NaN for non-finite parts; the standard (and ember's cpu) take exp(z) - 1
_UNARY["expm1"] = lambda z: np.where(np.isfinite(z) & (z != 0), np.expm1(z), np.exp(z) - 1)
#: ops whose reference is ember's cpu backend: tanh(+-inf + iy) takes y's sign on the zero (the standard's
#: table; numpy keeps sin(2y)'s), and reciprocal is 1 / z (numpy's reciprocal(0j) is NaN, 1 / 0j is inf + nanj)
_CPU_OWN = {"tanh", "reciprocal"}


def _random(n: int, seed: int, scale: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.uniform(-scale, scale, n) + 1j * rng.uniform(-scale, scale, n)).astype(np.complex64)


def _close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> None:
    """Same NaN places, same infinities (with their signs), finite values within ``rtol``."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, what
    if want.dtype.kind == "b":
        np.testing.assert_array_equal(got, want, err_msg=what)
        return
    for part in (np.real, np.imag) if want.dtype.kind == "c" else (np.real,):
        g, w = part(got).astype(np.float64), part(want).astype(np.float64)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True, err_msg=f"{what}, {part.__name__}")


def _ran(dev: em.Device, helper: str) -> bool:
    """Whether a pipeline whose WGSL defines ``helper`` (a complex library function) was built."""
    return any(f"fn {helper}(" in source for source in dev.backend.rt._pipelines)


@pytest.mark.parametrize("name", sorted(_UNARY))
def test_unary_special_values_match_numpy(dev, name):
    z = np.concatenate([_GRID, _random(16, 1)])
    fn = getattr(em, name)
    got = fn(em.tensor(z, device=dev)).numpy()
    want = fn(em.tensor(z, device="cpu")).numpy() if name in _CPU_OWN else _UNARY[name](z.astype(np.complex128))
    _close(got, want, 3e-6, f"{name} complex64")


@pytest.mark.parametrize("name, ref", [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                                       ("divide", np.divide), ("pow", np.power), ("equal", np.equal),
                                       ("not_equal", np.not_equal)])  # fmt: skip
def test_binary_matches_numpy(dev, name, ref):
    a = np.concatenate([_random(12, 2), np.array([0, 1j, 2, -1.5, np.inf, complex(np.nan, 1)], np.complex64)])
    b = np.concatenate([_random(12, 3), np.array([2, 0, -3, 0.5, 1, 2], np.complex64)])
    b[1] = a[1]
    fn = getattr(em, name)
    a128, b128 = a.astype(np.complex128), b.astype(np.complex128)
    _close(fn(em.tensor(a, device=dev), em.tensor(b, device=dev)).numpy(), ref(a128, b128), 1e-5, name)
    _close(fn(em.tensor(a, device=dev), 0.5 - 2j).numpy(), ref(a128, 0.5 - 2j), 1e-5, f"{name} with a scalar")


def test_native_kernels_ran(dev):
    before = dev.memory_stats()["extra"]["dispatches"]
    z = em.tensor(_random(8, 4), device=dev)
    em.exp(z).numpy()
    (z * z).numpy()
    assert dev.memory_stats()["extra"]["dispatches"] > before
    assert _ran(dev, "c_exp") and _ran(dev, "c_mul")
    assert not dev.capabilities.supports(em.complex128)
    assert "64-bit" in dev.capabilities.unsupported_dtypes["complex128"]


def test_casts_creation_where_movement_indexing(dev):
    z = _random(6, 5)
    t = em.tensor(z, device=dev)
    assert t.dtype is em.complex64
    np.testing.assert_array_equal(t.numpy(), z)  # interleaved as numpy: the transfer is a plain copy
    np.testing.assert_array_equal(em.astype(t, em.float32).numpy(), z.real)
    np.testing.assert_array_equal(em.astype(em.tensor(z.real, device=dev), em.complex64).numpy(), z.real + 0j)
    flags = em.tensor(np.array([0j, 1j, 0], np.complex64), device=dev)
    np.testing.assert_array_equal(em.astype(flags, em.bool).numpy(), [0, 1, 0])
    np.testing.assert_array_equal(em.astype(em.tensor([3, -2], device=dev), em.complex64).numpy(), [3 + 0j, -2 + 0j])
    np.testing.assert_array_equal(em.full((3,), 2 - 1j, device=dev).numpy(), np.full(3, 2 - 1j, np.complex64))
    cond = np.array([True, False, True, False, True, False])
    got = em.where(em.tensor(cond, device=dev), t, em.conj(t)).numpy()
    np.testing.assert_array_equal(got, np.where(cond, z, np.conj(z)))
    m = z.reshape(2, 3)
    tm = em.tensor(m, device=dev)
    np.testing.assert_array_equal(tm.T.numpy(), m.T)
    np.testing.assert_array_equal(em.flip(tm, axis=1)[:, 1:].numpy(), m[:, ::-1][:, 1:])
    np.testing.assert_array_equal(em.concat([tm, tm], axis=0).numpy(), np.concatenate([m, m]))
    np.testing.assert_array_equal(em.take(tm, em.tensor([2, 0], device=dev), axis=1).numpy(), m[:, [2, 0]])
    idx = np.array([[0, 2, 0], [1, 1, 1]])
    want = m.astype(np.complex128)
    for (r, c), v in zip(np.ndindex(idx.shape), m.ravel()):
        want[r, idx[r, c]] += v
    got = em.scatter_add(tm, em.tensor(idx, device=dev), tm, axis=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)  # repeats add up (a compare-and-swap per part)
    put = em.index_put(tm, (em.tensor([1, 0], device=dev),), em.conj(tm), accumulate=True).numpy()
    np.testing.assert_allclose(put, m + np.conj(m)[::-1], rtol=1e-6)
    vals = np.array([1 + 2j, -1 + 0j, 1 - 1j, 1 + 2j, np.nan, -1 - 5j], np.complex64)
    np.testing.assert_array_equal(em.unique_values(em.tensor(vals, device=dev)).numpy(), np.unique(vals))


def test_reductions_and_matmul(dev):
    a = _random(60, 6).reshape(5, 12)
    t = em.tensor(a, device=dev)
    a = a.astype(np.complex128)
    _close(em.sum(t, axis=1).numpy(), a.sum(axis=1), 1e-5, "sum")
    _close(em.sum(t).numpy(), a.sum(), 1e-5, "sum all")
    _close(em.prod(t, axis=0).numpy(), a.prod(axis=0), 1e-5, "prod")
    _close(em.mean(t, axis=0).numpy(), a.mean(axis=0), 1e-5, "mean")
    _close(em.cumulative_sum(t, axis=1).numpy(), np.cumsum(a, axis=1), 1e-5, "cumulative_sum")
    b = _random(36, 7).reshape(12, 3)
    _close((t @ em.tensor(b, device=dev)).numpy(), a @ b.astype(np.complex128), 1e-5, "matmul")
    got = (t[:, :3] @ em.tensor(b, device=dev)[:3].T).numpy()
    _close(got, a[:, :3] @ b[:3].T.astype(np.complex128), 1e-5, "matmul of views")


# gradients (PyTorch's convention, z.grad = dL/dx + 1j dL/dy): the same programs on the cpu backend,
# whose complex gradients core/tests/test_complex_autodiff.py checks against finite differences
_GRAD_CASES = [
    ("mul_div", lambda z, w: em.abs(z * w).sum() + em.real(z / w).sum()),
    ("exp_log_sqrt", lambda z, w: em.real(em.exp(z) * em.log(w)).sum() + em.imag(em.sqrt(z)).sum()),
    ("trig", lambda z, w: em.real(em.sin(z) + em.cos(w) * em.tanh(z * 0.5)).sum()),
    ("parts", lambda z, w: (em.real(z) * em.imag(w) ** 2).sum() + (em.angle(z * w) * em.abs(z)).sum()),
    ("conj_prod", lambda z, w: em.real(z * em.conj(w)).sum() + em.imag(em.prod(z, axis=0)).sum()),
    ("matmul", lambda z, w: (em.abs(z.reshape(2, 3) @ w.reshape(3, 2)) ** 2).sum()),
]


@pytest.mark.parametrize("name, program", _GRAD_CASES, ids=[c[0] for c in _GRAD_CASES])
def test_gradients_match_cpu(dev, name, program):
    rng = np.random.default_rng(9)
    values = [(rng.uniform(0.5, 1.5, 6) * np.exp(1j * rng.uniform(-2.5, 2.5, 6))).astype(np.complex64) for _ in "zw"]
    grads = []
    for device in (dev.autodiff(), em.Device.cpu().autodiff()):
        inputs = [em.tensor(v, device=device, requires_grad=True) for v in values]
        program(*inputs).backward()
        grads.append([t.grad.numpy() for t in inputs])
    for got, want in zip(*grads):
        assert got.dtype == np.complex64
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)

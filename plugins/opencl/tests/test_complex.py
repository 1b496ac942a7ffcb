"""complex64 / complex128 as float pairs: every op against numpy complex128, special values
(C99 Annex G, as numpy follows it) included, and a check that the generated kernel ran."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

_PARTS = [0.0, -0.0, 0.5, -1.5, 3.0, np.inf, -np.inf, np.nan]
#: every pair of special parts, then ordinary values
_GRID = np.array([complex(a, b) for a in _PARTS for b in _PARTS])

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


#: ops ember_conformance's test_array_api checks in complex64 on every device that holds it
_CONFORMANCE = set("negative abs sign exp log sqrt sin cos tanh square reciprocal conj real imag angle isnan "
                   "isfinite round".split())  # fmt: skip


def _random(n: int, seed: int, scale: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-scale, scale, n) + 1j * rng.uniform(-scale, scale, n)


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


def _ran(dev: em.Device, op: str, dtype: str) -> bool:
    """Whether a generated elementwise kernel computing ``op`` over ``dtype`` was built."""
    for key in dev.backend.rt._kernels:
        if key[0] == "ew" and any(
            i[0] == op and dtype in (i[1], *[d for d, _ in key[1].inputs]) for i in key[1].instructions
        ):
            return True
    return False


@pytest.mark.parametrize("name", sorted(_UNARY))
def test_unary_special_values_match_numpy(dev, cpu, name):
    z = np.concatenate([_GRID, _random(16, 1)])
    fn = getattr(em, name)
    got = fn(em.tensor(z, device=dev)).numpy()
    want = fn(em.tensor(z, device=cpu)).numpy() if name in _CPU_OWN else _UNARY[name](z)
    _close(got, want, 1e-12, f"{name} complex128")
    if name in _CONFORMANCE:
        return  # its complex64 kernel is the conformance suite's to check (PoCL compiles each: CI time)
    small = z[np.isfinite(z)][-16:].astype(np.complex64)  # complex64: ordinary values, float precision
    _close(fn(em.tensor(small, device=dev)).numpy(), _UNARY[name](small.astype(np.complex128)), 2e-6, name)


@pytest.mark.parametrize("name, ref", [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                                       ("divide", np.divide), ("pow", np.power), ("equal", np.equal),
                                       ("not_equal", np.not_equal)])  # fmt: skip
def test_binary_matches_numpy(dev, name, ref):
    a = np.concatenate([_random(12, 2), [0, 1j, 2, -1.5 + 0j, np.inf, complex(np.nan, 1)]])
    b = np.concatenate([_random(12, 3), [2, 0, -3, 0.5 + 0j, 1, 2]])
    b[1] = a[1]
    fn = getattr(em, name)
    got = fn(em.tensor(a, device=dev), em.tensor(b, device=dev)).numpy()
    _close(got, ref(a, b), 1e-12, name)
    _close(fn(em.tensor(a, device=dev), 0.5 - 2j).numpy(), ref(a, 0.5 - 2j), 1e-12, f"{name} with a scalar")
    a64, b64 = a[:12].astype(np.complex64), b[:12].astype(np.complex64)
    got = fn(em.tensor(a64, device=dev), em.tensor(b64, device=dev)).numpy()
    _close(got, ref(a64.astype(np.complex128), b64.astype(np.complex128)), 2e-6, f"{name} complex64")
    assert _ran(dev, {"subtract": "sub", "multiply": "mul", "divide": "div", "equal": "eq",
                      "not_equal": "ne"}.get(name, name), "complex64")  # fmt: skip


def test_native_kernels_ran(dev):
    z = em.tensor(_random(8, 4).astype(np.complex64), device=dev)
    em.exp(z).numpy()
    em.real(z).numpy()
    assert _ran(dev, "exp", "complex64") and _ran(dev, "real", "complex64")


def test_casts_creation_where_and_layout(dev):
    z = _random(6, 5)
    t = em.tensor(z, device=dev)
    assert t.dtype is em.complex128
    np.testing.assert_array_equal(t.numpy(), z)  # interleaved as numpy: the transfer is a plain copy
    np.testing.assert_array_equal(em.astype(t, em.complex64).numpy(), z.astype(np.complex64))
    np.testing.assert_array_equal(em.astype(t, em.float64).numpy(), z.real)
    np.testing.assert_array_equal(em.astype(em.tensor(z.real, device=dev), em.complex128).numpy(), z.real + 0j)
    np.testing.assert_array_equal(em.astype(em.tensor([0j, 1j, 0.0], device=dev), em.bool).numpy(), [0, 1, 0])
    np.testing.assert_array_equal(em.full((3,), 2 - 1j, device=dev).numpy(), np.full(3, 2 - 1j, np.complex64))
    np.testing.assert_array_equal(em.zeros((2,), dtype=em.complex128, device=dev).numpy(), np.zeros(2, complex))
    cond = np.array([True, False, True, False, True, False])
    got = em.where(em.tensor(cond, device=dev), t, em.conj(t)).numpy()
    np.testing.assert_array_equal(got, np.where(cond, z, np.conj(z)))
    m = z.reshape(2, 3)
    tm = em.tensor(m, device=dev)
    np.testing.assert_array_equal(tm.T.numpy(), m.T)  # a strided copy by element size
    np.testing.assert_array_equal(em.flip(tm, axis=1)[:, 1:].numpy(), m[:, ::-1][:, 1:])
    np.testing.assert_array_equal(em.concat([tm, tm], axis=0).numpy(), np.concatenate([m, m]))
    np.testing.assert_array_equal(em.take(tm, em.tensor([2, 0], device=dev), axis=1).numpy(), m[:, [2, 0]])
    idx = np.array([[0, 2, 0], [1, 1, 1]])
    want = m.copy()
    for (r, c), v in zip(np.ndindex(idx.shape), m.ravel()):
        want[r, idx[r, c]] += v
    got = em.scatter_add(tm, em.tensor(idx, device=dev), tm, axis=1).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-15)  # repeats add up (the gathering kernel: no complex atomics)
    put = em.index_put(tm, (em.tensor([1, 0], device=dev),), em.conj(tm), accumulate=True).numpy()
    np.testing.assert_allclose(put, m + np.conj(m)[::-1], rtol=1e-15)


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_reductions_and_matmul(dev, dtype):
    rtol = 2e-6 if dtype == "complex64" else 1e-12
    a = _random(60, 6).reshape(5, 12).astype(dtype)
    t = em.tensor(a, device=dev)
    a = a.astype(np.complex128)
    _close(em.sum(t, axis=1).numpy(), a.sum(axis=1), rtol, "sum")
    _close(em.sum(t).numpy(), a.sum(), rtol, "sum all")
    _close(em.prod(t, axis=0).numpy(), a.prod(axis=0), 10 * rtol, "prod")
    _close(em.mean(t, axis=0).numpy(), a.mean(axis=0), rtol, "mean")
    _close(em.cumulative_sum(t, axis=1).numpy(), np.cumsum(a, axis=1), 10 * rtol, "cumulative_sum")
    b = _random(36, 7).reshape(12, 3).astype(dtype)
    _close((t @ em.tensor(b, device=dev)).numpy(), a @ b.astype(np.complex128), 10 * rtol, "matmul")
    _close((t[:, :3] @ em.tensor(b, device=dev)[:3].T).numpy(), a[:, :3] @ b[:3].T.astype(np.complex128), 10 * rtol,
           "matmul of views")  # fmt: skip


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


@pytest.mark.parametrize("dtype", ["complex128"])  # complex64 gradients: the wgpu plugin's tests
@pytest.mark.parametrize("name, program", _GRAD_CASES, ids=[c[0] for c in _GRAD_CASES])
def test_gradients_match_cpu(dev, name, program, dtype):
    rng = np.random.default_rng(9)
    values = [(rng.uniform(0.5, 1.5, 6) * np.exp(1j * rng.uniform(-2.5, 2.5, 6))).astype(dtype) for _ in "zw"]
    grads = []
    for device in (dev.autodiff(), em.Device.cpu().autodiff()):
        inputs = [em.tensor(v, device=device, requires_grad=True) for v in values]
        program(*inputs).backward()
        grads.append([t.grad.numpy() for t in inputs])
    for got, want in zip(*grads):
        assert got.dtype == dtype
        tol = 2e-5 if dtype == "complex64" else 1e-12
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)

"""complex64 / complex128 on the device: every elementwise op on C99 Annex G special values (numpy's
complex128 as reference), binary ops with special values, casts, movement, indexing, reductions,
matmul and gradients (against central differences). A device without a complex dtype skips with its
stated reason; test_array_api covers the ordinary-value subset the array API names."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ember as em

from .checks import require_dtype

#: DType values, so --ember-dtypes selects these cases as it does every other dtype-parametrized case
_COMPLEX = (em.complex64, em.complex128)
_PARTS = [0.0, -0.0, 0.5, -1.5, 3.0, np.inf, -np.inf, np.nan]
#: every pair of special parts
_GRID = np.array([complex(a, b) for a in _PARTS for b in _PARTS])


def _tanh(z: np.ndarray) -> np.ndarray:
    """tanh as the standard's table gives it: tanh(+-inf + iy) = +-1 + 0i with y's sign on the zero for finite y."""
    out = np.tanh(z)
    edge = np.isinf(z.real) & np.isfinite(z.imag)
    out[edge] = np.copysign(1.0, z.real[edge]) + 1j * np.copysign(0.0, z.imag[edge])
    return out


_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "negative": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin,
    "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh, "tanh": _tanh, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "log1p": np.log1p, "log2": np.log2, "log10": np.log10, "square": np.square, "conj": np.conj, "real": np.real,
    "imag": np.imag, "angle": np.angle, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
    "sign": np.sign, "round": np.round,
    # numpy's reciprocal(0j) is NaN; the standard's 1 / z is inf + nanj
    "reciprocal": lambda z: 1 / z,
    # numpy's complex expm1 gives NaN for non-finite parts; the standard takes exp(z) - 1
    "expm1": lambda z: np.where(np.isfinite(z) & (z != 0), np.expm1(z), np.exp(z) - 1),
}  # fmt: skip

_BINARY = [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide),
           ("pow", np.power), ("equal", np.equal), ("not_equal", np.not_equal)]  # fmt: skip


def _dtype(device: em.Device, name: str) -> em.DType:
    dt = em.dtypes.as_dtype(name)
    require_dtype(device, dt)
    return dt


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


@pytest.mark.parametrize("dtype", _COMPLEX, ids=str)
@pytest.mark.parametrize("name", sorted(_UNARY))
def test_complex_unary_special_values(device, dtype, name):
    dt = _dtype(device, dtype)
    z = np.concatenate([_GRID, _random(16, 1)]).astype(dt.numpy)
    got = getattr(em, name)(em.tensor(z, device=device)).numpy()
    with np.errstate(all="ignore"):
        want = _UNARY[name](z.astype(np.complex128))
    _close(got, want, 3e-6 if dtype == em.complex64 else 1e-12, f"{name} {dtype}")


@pytest.mark.parametrize("dtype", _COMPLEX, ids=str)
@pytest.mark.parametrize("name, ref", _BINARY, ids=[b[0] for b in _BINARY])
def test_complex_binary_special_values(device, dtype, name, ref):
    dt = _dtype(device, dtype)
    a = np.concatenate([_random(12, 2), [0, 1j, 2, -1.5 + 0j, np.inf, complex(np.nan, 1)]]).astype(dt.numpy)
    b = np.concatenate([_random(12, 3), [2, 0, -3, 0.5 + 0j, 1, 2]]).astype(dt.numpy)
    b[1] = a[1]
    fn = getattr(em, name)
    rtol = 1e-5 if dtype == em.complex64 else 1e-12
    a128, b128 = a.astype(np.complex128), b.astype(np.complex128)
    with np.errstate(all="ignore"):
        want, want_scalar = ref(a128, b128), ref(a128, 0.5 - 2j)
    _close(fn(em.tensor(a, device=device), em.tensor(b, device=device)).numpy(), want, rtol, name)
    _close(fn(em.tensor(a, device=device), 0.5 - 2j).numpy(), want_scalar, rtol, f"{name} with a scalar")


@pytest.mark.parametrize("dtype", _COMPLEX, ids=str)
def test_complex_casts_creation_where_movement_indexing(device, dtype):
    dt = _dtype(device, dtype)
    real = em.dtypes.real_dtype(dt)
    z = _random(6, 5).astype(dt.numpy)
    t = em.tensor(z, device=device)
    assert t.dtype is dt
    np.testing.assert_array_equal(t.numpy(), z)  # interleaved as numpy: the transfer is a plain copy
    np.testing.assert_array_equal(em.astype(t, real).numpy(), z.real)
    np.testing.assert_array_equal(em.astype(em.tensor(z.real, device=device), dt).numpy(), z.real + 0j)
    other = em.complex64 if dt is em.complex128 else em.complex128
    if device.capabilities.supports(other):
        np.testing.assert_array_equal(em.astype(t, other).numpy(), z.astype(other.numpy))
    flags = em.tensor(np.array([0j, 1j, 0], dt.numpy), device=device)
    np.testing.assert_array_equal(em.astype(flags, em.bool).numpy(), [0, 1, 0])
    np.testing.assert_array_equal(em.astype(em.tensor([3, -2], device=device), dt).numpy(), [3 + 0j, -2 + 0j])
    np.testing.assert_array_equal(em.full((3,), 2 - 1j, dtype=dt, device=device).numpy(), np.full(3, 2 - 1j, dt.numpy))
    np.testing.assert_array_equal(em.zeros((2,), dtype=dt, device=device).numpy(), np.zeros(2, dt.numpy))
    cond = np.array([True, False, True, False, True, False])
    got = em.where(em.tensor(cond, device=device), t, em.conj(t)).numpy()
    np.testing.assert_array_equal(got, np.where(cond, z, np.conj(z)))
    m = z.reshape(2, 3)
    tm = em.tensor(m, device=device)
    np.testing.assert_array_equal(tm.T.numpy(), m.T)  # a strided copy by element size
    np.testing.assert_array_equal(em.flip(tm, axis=1)[:, 1:].numpy(), m[:, ::-1][:, 1:])
    np.testing.assert_array_equal(em.concat([tm, tm], axis=0).numpy(), np.concatenate([m, m]))
    np.testing.assert_array_equal(em.take(tm, em.tensor([2, 0], device=device), axis=1).numpy(), m[:, [2, 0]])
    idx = np.array([[0, 2, 0], [1, 1, 1]])
    want = m.astype(np.complex128)
    for (r, c), v in zip(np.ndindex(idx.shape), m.ravel()):
        want[r, idx[r, c]] += v
    rtol = 1e-6 if dtype == em.complex64 else 1e-15
    got = em.scatter_add(tm, em.tensor(idx, device=device), tm, axis=1).numpy()
    np.testing.assert_allclose(got, want, rtol=rtol)  # repeats add up
    put = em.index_put(tm, (em.tensor([1, 0], device=device),), em.conj(tm), accumulate=True).numpy()
    np.testing.assert_allclose(put, m + np.conj(m)[::-1], rtol=rtol)
    vals = np.array([1 + 2j, -1 + 0j, 1 - 1j, 1 + 2j, np.nan, -1 - 5j], dt.numpy)
    np.testing.assert_array_equal(em.unique_values(em.tensor(vals, device=device)).numpy(), np.unique(vals))


@pytest.mark.parametrize("dtype", _COMPLEX, ids=str)
def test_complex_reductions_and_matmul(device, dtype):
    dt = _dtype(device, dtype)
    rtol = 1e-5 if dtype == em.complex64 else 1e-11
    a = _random(60, 6).reshape(5, 12).astype(dt.numpy)
    t = em.tensor(a, device=device)
    a = a.astype(np.complex128)
    _close(em.sum(t, axis=1).numpy(), a.sum(axis=1), rtol, "sum")
    _close(em.sum(t).numpy(), a.sum(), rtol, "sum all")
    _close(em.prod(t, axis=0).numpy(), a.prod(axis=0), rtol, "prod")
    _close(em.mean(t, axis=0).numpy(), a.mean(axis=0), rtol, "mean")
    _close(em.cumulative_sum(t, axis=1).numpy(), np.cumsum(a, axis=1), rtol, "cumulative_sum")
    b = _random(36, 7).reshape(12, 3).astype(dt.numpy)
    _close((t @ em.tensor(b, device=device)).numpy(), a @ b.astype(np.complex128), rtol, "matmul")
    got = (t[:, :3] @ em.tensor(b, device=device)[:3].T).numpy()
    _close(got, a[:, :3] @ b[:3].T.astype(np.complex128), rtol, "matmul of views")


# gradients in PyTorch's convention, z.grad = dL/dx + 1j dL/dy, against central differences of the
# same program run in complex128 on the cpu backend
_GRAD_CASES = [
    ("mul_div", lambda z, w: em.abs(z * w).sum() + em.real(z / w).sum()),
    ("exp_log_sqrt", lambda z, w: em.real(em.exp(z) * em.log(w)).sum() + em.imag(em.sqrt(z)).sum()),
    ("trig", lambda z, w: em.real(em.sin(z) + em.cos(w) * em.tanh(z * 0.5)).sum()),
    ("parts", lambda z, w: (em.real(z) * em.imag(w) ** 2).sum() + (em.angle(z * w) * em.abs(z)).sum()),
    ("conj_prod", lambda z, w: em.real(z * em.conj(w)).sum() + em.imag(em.prod(z, axis=0)).sum()),
    ("matmul", lambda z, w: (em.abs(z.reshape(2, 3) @ w.reshape(3, 2)) ** 2).sum()),
]


def _central_differences(program: Callable[..., em.Tensor], values: list[np.ndarray], h: float = 1e-6) -> list:
    cpu = em.Device.cpu().without_autodiff()

    def loss(vals: list[np.ndarray]) -> float:
        return float(program(*[em.tensor(v, device=cpu) for v in vals]).item())

    grads = []
    for k, v in enumerate(values):
        g = np.zeros(v.shape, np.complex128)
        for j in range(v.size):
            for step, unit in ((h, 1.0), (1j * h, 1j)):
                up, down = [x.copy() for x in values], [x.copy() for x in values]
                up[k][j] += step
                down[k][j] -= step
                g[j] += unit * (loss(up) - loss(down)) / (2 * h)
        grads.append(g)
    return grads


@pytest.mark.parametrize("dtype", _COMPLEX, ids=str)
@pytest.mark.parametrize("name, program", _GRAD_CASES, ids=[c[0] for c in _GRAD_CASES])
def test_complex_gradients_match_central_differences(ad_device, dtype, name, program):
    dt = _dtype(ad_device, dtype)
    rng = np.random.default_rng(9)
    values = [rng.uniform(0.5, 1.5, 6) * np.exp(1j * rng.uniform(-2.5, 2.5, 6)) for _ in "zw"]
    values = [v.astype(dt.numpy).astype(np.complex128) for v in values]  # the points the device sees
    inputs = [em.tensor(v.astype(dt.numpy), device=ad_device, requires_grad=True) for v in values]
    program(*inputs).backward()
    tol = 2e-5 if dtype == em.complex64 else 1e-6
    for t, want in zip(inputs, _central_differences(program, values)):
        got = t.grad.numpy()
        assert got.dtype == dt.numpy, f"{name}: gradient dtype {got.dtype}"
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)

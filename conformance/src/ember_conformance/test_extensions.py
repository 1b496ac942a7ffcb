"""The extension mechanism on the device, and every registered extension op checked automatically.

- An op made with ``@backend_extension`` with a native kernel for this device kind agrees with its
  reference, the kernel is seen to run (its calls are counted), and it differentiates through the
  reference.
- Every extension registered in this process (by installed plugins through ``ember_register_extensions``)
  that declares a ``sample``: each native kernel for this device kind against the op's reference,
  with a count of the kernel's calls, and the op's gradient (its ``vjp``, else through the reference)
  against central differences of the op itself on this device.

Extensions' own tests arrive through the ``ember_conformance_modules`` plugin hook.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

import ember as em
from ember.backend import EXTENSION_KERNELS
from ember.device import invalidate
from ember.extension import EXTENSIONS
from ember.plugins import get_registry

from .checks import GRAD_TOLERANCES, assert_close, numeric_gradient, widest_float

NAME = "conformance_axpy"


@contextmanager
def counting(name: str, kind: str) -> Iterator[list[int]]:
    """Wrap the native kernel of ``name`` for ``kind`` so its calls are counted (a one-item list)."""
    original = EXTENSION_KERNELS[(name, kind)]
    calls = [0]

    def counted(*args: Any, **params: Any) -> Any:
        calls[0] += 1
        return original(*args, **params)

    EXTENSION_KERNELS[(name, kind)] = counted
    invalidate(kind, name)
    try:
        yield calls
    finally:
        EXTENSION_KERNELS[(name, kind)] = original
        invalidate(kind, name)


def _extension(kind: str):
    ext = EXTENSIONS.get(NAME)
    if ext is None:

        @em.backend_extension(NAME, elementwise=True)
        def ext(x, y, a=2.0):
            return x * a + y

    # a kernel built from the backend's own primitives, registered for the kind under test; they are
    # reached through the contract (backend.implementation), as generated ops need not be attributes
    ext.kernel(kind)(_axpy_kernel)
    return ext


def _axpy_kernel(backend, x, y, a=2.0):
    add, mul = backend.implementation("add"), backend.implementation("mul")
    return add(mul(x, a), y)


def test_extension_kernel(device, ad_device):
    ext = _extension(device.kind)
    host_x = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    host_y = np.arange(6.0).reshape(2, 3)
    x = em.tensor(host_x, dtype="float32", device=device)
    y = em.tensor(host_y, dtype="float32", device=device)
    with counting(NAME, device.kind) as calls:
        assert_close(ext(x, y, a=3.0), host_x * 3.0 + host_y, em.float32, what="kernel")
    assert calls[0] == 1, f"the native kernel ran {calls[0]} times, expected once"
    xg = em.tensor(host_x, dtype=widest_float(ad_device), device=ad_device, requires_grad=True)
    ext(xg, em.tensor(host_y, dtype=widest_float(ad_device), device=ad_device), a=3.0).sum().backward()
    assert_close(xg.grad, np.full((2, 3), 3.0), widest_float(ad_device), what="gradient through the reference")


def test_extension_checks(device):
    """Declared dtypes and checks run before dispatch and raise ember errors naming the op."""
    name = "conformance_checked_scale"
    ext = EXTENSIONS.get(name)
    if ext is None:

        def square_only(x, **params):
            if x.ndim != 2 or x.shape[0] != x.shape[1]:
                raise em.errors.ShapeError(f"{name}: x must be square, got shape {tuple(x.shape)}")

        ext = em.backend_extension(name, dtypes=("float32",), check=square_only)(lambda x: x * 2.0)
    with pytest.raises(em.errors.ShapeError, match="square"):
        ext(em.ones((2, 3), device=device))
    with pytest.raises(em.errors.DTypeError, match=name):
        ext(em.ones((2, 2), dtype="int32", device=device))
    assert_close(ext(em.ones((2, 2), device=device)), np.full((2, 2), 2.0), em.float32)


def _registered() -> list[Any]:
    """Extension ops with samples, after every installed plugin registered its own."""
    get_registry().discover()
    found = sorted(name for name, ext in EXTENSIONS.items() if ext.sample is not None)
    why = "no installed extension plugin registers an op with a sample (ember-linalg does)"
    return found or [pytest.param(None, marks=pytest.mark.skip(reason=why))]


def _samples(ext: Any, dtype: em.DType) -> list[tuple[tuple[np.ndarray, ...], dict[str, Any]]]:
    cases = ext.sample(np.random.default_rng(0), dtype.name)
    return [(tuple(np.asarray(a, dtype=np.float64).astype(dtype.numpy) for a in args), dict(p)) for args, p in cases]


def _ops_dtype(ext: Any, device: em.Device) -> em.DType:
    dtype = widest_float(device)
    if ext.dtypes is not None and dtype not in ext.dtypes:
        dtype = em.float32
    return dtype


@pytest.mark.parametrize("op", _registered())
def test_registered_extension_kernels(op: str, device: em.Device) -> None:
    ext = EXTENSIONS[op]
    if device.kind not in ext.kernels:
        pytest.skip(f"{op} has no native kernel for {device.kind} (kernels: {', '.join(ext.kernels) or 'none'}); "
                    "the reference runs there, and the gradient test checks it")  # fmt: skip
    dtype = _ops_dtype(ext, device)
    for args, params in _samples(ext, dtype):
        tensors = [em.tensor(a, dtype=dtype, device=device) for a in args]
        want = ext.reference(*tensors, **params)
        with counting(op, device.kind) as calls:
            got = ext(*tensors, **params)
        assert calls[0] >= 1, f"{op}: the {device.kind} kernel did not run (the call went elsewhere)"
        assert_close(got, np.asarray(want.numpy()), dtype, scale=ext.tolerance, what=f"{op} kernel vs reference")


@pytest.mark.parametrize("op", _registered())
def test_registered_extension_gradient(op: str, ad_device: em.Device) -> None:
    ext = EXTENSIONS[op]
    dtype = _ops_dtype(ext, ad_device)
    if dtype.kind != "f":
        pytest.skip(f"{op} takes no floating-point inputs: nothing to differentiate")
    plain = ad_device.without_autodiff()
    rng = np.random.default_rng(1)
    step = 1e-6 if dtype is em.float64 else 3e-3
    rtol, atol = GRAD_TOLERANCES.get(dtype.name, GRAD_TOLERANCES["float32"])
    scale = ext.tolerance if dtype is em.float64 else 4.0 * ext.tolerance
    for args, params in _samples(ext, dtype):
        leaves = [em.tensor(a, dtype=dtype, device=ad_device, requires_grad=True) for a in args]
        out = ext(*leaves, **params)
        w = rng.uniform(-1.0, 1.0, size=tuple(out.shape))
        (out * em.tensor(w, dtype=dtype, device=ad_device)).sum().backward()

        def loss(values: list[np.ndarray], params: dict[str, Any] = params, w: np.ndarray = w) -> float:
            tensors = [em.tensor(np.asarray(v, dtype=dtype.numpy), dtype=dtype, device=plain) for v in values]
            return float(np.sum(np.asarray(ext(*tensors, **params).numpy(), dtype=np.float64) * w))

        for i, leaf in enumerate(leaves):
            want = numeric_gradient(loss, [a.astype(np.float64) for a in args], i, rel_step=step)
            have = np.zeros_like(want) if leaf.grad is None else np.asarray(leaf.grad.numpy(), dtype=np.float64)
            bound = scale * (atol * max(1.0, float(np.abs(want).max())) + rtol * np.abs(want))
            bad = ~(np.abs(have - want) <= bound)
            if bad.any():
                idx = tuple(np.argwhere(bad)[0])
                pytest.fail(
                    f"{op} {params}: input {i}: {int(bad.sum())} of {want.size} gradient values differ from central "
                    f"differences on {ad_device.kind}; first at {idx}: ember {have[idx]!r}, numeric {want[idx]!r}"
                )

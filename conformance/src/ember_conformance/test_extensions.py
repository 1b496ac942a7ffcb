"""The extension mechanism on the device: an op made with ``@backend_extension`` with a native
kernel for this device kind agrees with its reference and differentiates through it.
Extensions' own tests arrive through the ``ember_conformance_modules`` plugin hook."""

from __future__ import annotations

import numpy as np

import ember as em
from ember.extension import EXTENSIONS

from .checks import assert_close, widest_float

NAME = "conformance_axpy"


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
    assert_close(ext(x, y, a=3.0), host_x * 3.0 + host_y, em.float32, what="kernel")
    xg = em.tensor(host_x, dtype=widest_float(ad_device), device=ad_device, requires_grad=True)
    ext(xg, em.tensor(host_y, dtype=widest_float(ad_device), device=ad_device), a=3.0).sum().backward()
    assert_close(xg.grad, np.full((2, 3), 3.0), widest_float(ad_device), what="gradient through the reference")

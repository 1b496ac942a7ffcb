"""Moving tensors between the device under test and an in-process second device."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

from .checks import assert_close, require_dtype
from .fakes import fake_device


@pytest.mark.parametrize("dtype", (em.bool_, em.int64, em.uint8, em.float32, em.float64), ids=str)
def test_round_trip(dtype, device):
    require_dtype(device, dtype)
    host = (np.arange(12).reshape(3, 4) % 3).astype(dtype.numpy)
    x = em.tensor(host, device=device)
    there = x.to(fake_device())
    assert there.device == fake_device() and there.dtype is dtype
    back = there.to(device)
    assert back.device == device
    assert_close(back, host.astype(np.float64) if dtype.kind == "f" else host, dtype)
    assert_close(x.mT.to(fake_device()).to(device), host.T.astype(np.float64) if dtype.kind == "f" else host.T, dtype)


@pytest.mark.parametrize("dtype", (em.float32, em.float64), ids=str)
def test_grad_across_devices(dtype, ad_device):
    """Gradients flow back across .to(): the to_device op's rule moves them home."""
    require_dtype(ad_device, dtype)
    x = em.tensor([1.0, -2.0, 3.0], dtype=dtype, device=ad_device, requires_grad=True)
    y = x.to(fake_device())
    assert y.requires_grad and y.grad_fn == "to_device"
    (y * y).sum().backward()
    assert x.grad.device.same_hardware(ad_device)
    assert_close(x.grad, np.array([2.0, -4.0, 6.0]), dtype)

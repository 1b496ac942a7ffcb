"""Devices: parsing, interning, the autodiff flag, defaults and cross-device rules."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em


def test_specs_parse_and_intern():
    assert em.Device("cpu") is em.Device.cpu() is em.Device("CPU:0") is em.Device("cpu", 0)
    assert em.Device("cpu").autodiff() is em.Device("cpu", autodiff=True)
    assert em.Device("cpu").autodiff().without_autodiff() is em.Device.cpu()
    assert em.Device(em.Device.cpu()) is em.Device.cpu()


@pytest.mark.parametrize("spec", ["", "cpu:x", "cpu:-1", "c p u"])
def test_bad_specs_are_value_errors(spec):
    with pytest.raises(ValueError):
        em.Device(spec)


def test_default_device_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("EMBER_DEVICE", "cpu:0")
    assert em.Device.default() is em.Device.cpu()
    monkeypatch.setenv("EMBER_DEVICE", "twin")
    assert em.Device.default() is em.Device("twin:0")
    monkeypatch.delenv("EMBER_DEVICE")
    assert em.Device.default() is em.Device.cpu()


def test_missing_device_index_is_explained():
    with pytest.raises(em.DeviceUnavailableError, match="cpu:3 does not exist"):
        em.zeros(2, device="cpu:3")


def test_cross_device_op_names_both_devices(twin):
    a = em.ones(3)
    b = em.ones(3, device=twin)
    with pytest.raises(em.DeviceMismatchError) as err:
        a + b
    msg = str(err.value)
    assert "cpu:0" in msg and "twin:0" in msg and ".to(" in msg
    with pytest.raises(em.DeviceMismatchError):
        em.matmul(em.ones((2, 2)), em.ones((2, 2), device=twin))
    with pytest.raises(em.DeviceMismatchError):
        em.where(em.ones(3) > 0, a, b)


def test_transfer_between_devices_keeps_values_and_gradients(twin):
    x = em.tensor([1.0, 2.0, 3.0], device=em.Device.cpu().autodiff(), requires_grad=True)
    y = x.to(twin)
    assert y.device.same_hardware(twin) and y.device.autodiff_enabled
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])
    assert x.grad.device.same_hardware(em.Device.cpu())


def test_autodiff_and_plain_variants_mix():
    plain = em.ones(2)
    tracked = em.ones(2, device=em.Device.cpu().autodiff(), requires_grad=True)
    out = plain * tracked
    assert out.device is em.Device.cpu().autodiff()
    assert out.requires_grad


def test_capabilities_list_dtypes_and_native_ops():
    caps = em.Device.cpu().capabilities
    assert em.float64 in caps.dtypes and em.bfloat16 in caps.dtypes
    assert "matmul" in caps.native_ops and "softmax" in caps.native_ops
    from ember_cpu.backend import NO_FUSION  # why cpu does not fuse (numba missing), or None

    assert caps.fusion is (NO_FUSION is None)
    assert caps.fusion_min_elements == (em.Device.cpu().backend.fusion_min_elements)


def test_memory_stats_and_synchronize_answer():
    dev = em.Device.cpu()
    dev.synchronize()
    assert isinstance(dev.memory_stats(), dict)


def test_available_lists_cpu():
    assert em.Device.cpu() in em.Device.available()

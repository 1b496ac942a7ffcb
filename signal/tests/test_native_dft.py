"""The generated ``signal_dft`` kernels of opencl (PoCL here) and wgpu (lavapipe here): against
numpy.fft in float64 on lengths beyond the conformance samples (every stage pattern, the direct
and Bluestein paths, batches, strided input), one launch per Stockham stage, and registration."""

from __future__ import annotations

import importlib.util

import ember_signal as sig
import numpy as np
import pytest
from ember_signal import _dft_native, kernels_opencl, kernels_wgpu
from ember_signal.transform import signal_dft

import ember as em

KINDS = [
    pytest.param(
        kind,
        marks=pytest.mark.skipif(
            importlib.util.find_spec(f"ember_{kind}") is None, reason=f"ember-{kind} is not installed"
        ),
    )  # fmt: skip
    for kind in ("opencl", "wgpu")
]
CALLS = {"opencl": kernels_opencl.CALLS, "wgpu": kernels_wgpu.CALLS}


def _device(kind: str) -> em.Device:
    try:
        return em.Device(f"{kind}:0")
    except em.errors.DeviceUnavailableError as exc:  # no driver (no PoCL / lavapipe): say which
        pytest.skip(f"{kind}:0 is not available: {exc}")


def _want(z: np.ndarray, inverse: bool, scale: float) -> np.ndarray:
    c = z[..., 0] + 1j * z[..., 1]
    out = (np.fft.ifft(c, axis=-1, norm="forward") if inverse else np.fft.fft(c, axis=-1)) * scale
    return np.stack([out.real, out.imag], axis=-1)


def _check(got: np.ndarray, want: np.ndarray, dtype: em.DType, n: int) -> None:
    # float32 rounding grows like log2(n) times the magnitude of the spectrum (about sqrt(n) here)
    eps = 1e-6 if dtype is em.float32 else 1e-14
    bound = 8.0 * eps * max(1.0, np.log2(max(n, 2))) * np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=bound)


def test_registered_for_both_kinds():
    for kind in ("opencl", "wgpu"):
        assert (kind in signal_dft.kernels) == (importlib.util.find_spec(f"ember_{kind}") is not None)
    assert signal_dft.sample is not None  # so the conformance suite compares every kernel with the reference


def test_stage_plan():
    assert _dft_native.stages(2) == [2]
    assert _dft_native.stages(16) == [4, 4]
    assert _dft_native.stages(2**11) == [4] * 5 + [2]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "shape", [(3, 1), (2, 2), (4, 4), (2, 32), (3, 512), (1, 4096), (2, 2048), (2, 3), (5, 60), (2, 65), (1, 1000)]
)
@pytest.mark.parametrize("inverse", [False, True])
def test_against_numpy(kind, shape, inverse):
    device = _device(kind)
    dtype = em.float64 if device.capabilities.supports(em.float64) else em.float32
    z = np.random.default_rng(sum(shape)).standard_normal(shape + (2,))
    got = signal_dft(em.tensor(z, dtype=dtype, device=device), inverse=inverse, scale=0.5).numpy()
    _check(np.asarray(got, np.float64), _want(z, inverse, 0.5), dtype, shape[-1])


@pytest.mark.parametrize("kind", KINDS)
def test_float32_batch_of_strided_rows(kind):
    """float32 on every kind, a leading batch, and input that is a transposed view."""
    device = _device(kind)
    z = np.random.default_rng(7).standard_normal((2, 256, 3, 2))
    x = em.moveaxis(em.tensor(z, dtype=em.float32, device=device), 1, 2)  # (2, 3, 256, 2), strided
    got = np.asarray(signal_dft(x).numpy(), np.float64)
    _check(got, _want(np.moveaxis(z, 1, 2), False, 1.0), em.float32, 256)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [64, 128, 100])
def test_one_launch_per_stage(kind, n):
    device = _device(kind)
    calls = CALLS[kind]
    x = em.tensor(np.ones((2, n, 2)), dtype=em.float32, device=device)
    calls.clear()
    signal_dft(x).numpy()
    if n == 100:  # Bluestein: chirp, FFT of 256, spectrum, inverse FFT, chirp
        stages = 2 * len(_dft_native.stages(256))
        chirps = 3
    else:
        stages, chirps = len(_dft_native.stages(n)), 0
    assert sum(v for k, v in calls.items() if k.endswith(("r2", "r4"))) == stages, dict(calls)
    assert sum(v for k, v in calls.items() if k.endswith("chirp")) == chirps, dict(calls)


@pytest.mark.parametrize("kind", KINDS)
def test_rfft_through_the_kernel(kind):
    """The public pairs API reaches the kernel (rfft of a real signal)."""
    device = _device(kind)
    x = np.random.default_rng(3).standard_normal((2, 200))
    CALLS[kind].clear()
    got = np.asarray(sig.pairs.rfft(em.tensor(x, dtype=em.float32, device=device)).numpy(), np.float64)
    assert sum(CALLS[kind].values()) > 0
    want = np.fft.rfft(x)
    _check(got, np.stack([want.real, want.imag], axis=-1), em.float32, 200)


@pytest.mark.parametrize("kind", KINDS)
def test_half_precision_computed_in_float32(kind):
    """float16 input is cast to float32, transformed and cast back: the result is float16 and off
    numpy by about the rounding of its values (a few float16 ulps of the spectrum's size)."""
    device = _device(kind)
    if not device.capabilities.supports(em.float16):
        pytest.skip(f"{kind}:0 holds no float16")
    z = np.random.default_rng(5).standard_normal((2, 64, 2))
    out = signal_dft(em.tensor(z, dtype=em.float16, device=device), inverse=True, scale=0.5)
    assert out.dtype is em.float16
    want = _want(z.astype(np.float16).astype(np.float64), True, 0.5)
    np.testing.assert_allclose(np.asarray(out.numpy(), np.float64), want, rtol=0, atol=4e-3 * np.abs(want).max())

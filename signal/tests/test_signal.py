"""What is specific to ember-signal on cpu: how it plugs in, that the native kernels run, and
that bad arguments raise ember errors naming the argument. (Numerical cases: conformance.py.)"""

from __future__ import annotations

import ember_signal as sig
import numpy as np
import pytest

import ember as em
from ember.backend import EXTENSION_KERNELS
from ember.errors import AxisError, DTypeError, InvalidArgumentError, ShapeError
from ember.plugins import get_registry


def test_namespaces():
    assert em.signal is sig
    assert em.fft is sig.fft
    assert "ember_signal.conformance" in get_registry().conformance_modules()


@pytest.mark.parametrize("name", ["signal_dft", "signal_lfilter"])
def test_cpu_kernel_runs(monkeypatch, name):
    calls = []
    kernel = EXTENSION_KERNELS[(name, "cpu")]

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    # the device caches its implementation table: re-registering through the public API invalidates it
    getattr(sig, name).kernel("cpu")(counted)
    try:
        x = em.tensor(np.arange(8.0))
        if name == "signal_dft":
            sig.pairs.rfft(x)
        else:
            sig.lfilter([1.0], [1.0, -0.5], x)
    finally:
        getattr(sig, name).kernel("cpu")(kernel)
    assert calls, f"the cpu kernel of {name} did not run"


def test_complex_results_where_the_device_has_them():
    out = em.fft.rfft(em.tensor(np.arange(6.0), dtype="float32"))
    assert out.dtype is em.complex64
    np.testing.assert_allclose(out.numpy(), np.fft.rfft(np.arange(6.0)), rtol=1e-5, atol=1e-5)
    assert em.fft.fft(em.tensor(np.ones(4), dtype="float64")).dtype is em.complex128


def test_bad_arguments():
    x = em.tensor(np.ones((3, 4)))
    with pytest.raises(InvalidArgumentError, match="norm"):
        em.fft.fft(x, norm="unitary")
    with pytest.raises(InvalidArgumentError, match="n must be"):
        em.fft.fft(x, n=0)
    with pytest.raises(AxisError, match="axis 2"):
        em.fft.fft(x, axis=2)
    with pytest.raises(DTypeError, match="real floating"):
        em.fft.rfft(em.tensor([1 + 1j]))
    with pytest.raises(DTypeError, match="floating-point or complex"):
        em.fft.fft(em.tensor([1, 2, 3]))
    with pytest.raises(ShapeError, match="pairs"):
        sig.pairs.fft(x)
    with pytest.raises(InvalidArgumentError, match="axes must be unique"):
        em.fft.fftn(x, axes=(0, 0))
    with pytest.raises(InvalidArgumentError, match="M must be"):
        sig.hann(-1)
    with pytest.raises(InvalidArgumentError, match="win_length"):
        sig.stft(em.tensor(np.ones(32)), 8, win_length=9)
    with pytest.raises(InvalidArgumentError, match="NOLA"):
        sig.istft(sig.stft(em.tensor(np.ones(32)), 8, hop_length=8, center=False), 8, hop_length=8, center=False)
    with pytest.raises(InvalidArgumentError, match="mode"):
        sig.convolve(x[0], x[0], mode="circular")
    with pytest.raises(InvalidArgumentError, match=r"a\[0\]"):
        sig.lfilter([1.0], [0.0, 1.0], x)
    with pytest.raises(InvalidArgumentError, match="num"):
        sig.resample(x, 0)
    with pytest.raises(InvalidArgumentError, match="mel_scale"):
        sig.mel_filterbank(5, 2, 1000.0, mel_scale="bark")


def test_keyword_only_array_api_signatures():
    with pytest.raises(TypeError):
        em.fft.fft(em.tensor(np.ones(4)), 4)  # n is keyword-only in the standard


@pytest.mark.parametrize(
    "wrong,message",
    [
        (lambda x: x[:, :3], r"em.fft.fft of complex128: shape \(4, 3\), numpy \(4, 6\)"),
        (lambda x: em.real(x), "em.fft.fft of complex128: result is float64; numpy's is complex128"),
    ],
    ids=["shape", "dtype"],
)
def test_conformance_case_fails_on_a_wrong_result(monkeypatch, wrong, message):
    """The conformance case's checks fail (pytest's failure, naming what differs) on a wrong fft:
    not bare asserts, so they also run under python -O."""
    from ember_signal import conformance

    monkeypatch.setattr(sig.fft, "fft", lambda x, norm=None: wrong(x))
    with pytest.raises(pytest.fail.Exception, match=message):
        conformance.test_complex_namespace(em.Device.cpu(), "fft")

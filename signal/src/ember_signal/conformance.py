"""ember-signal's cases of the conformance suite (added through ``ember_conformance_modules``):
every op on the device under test against numpy.fft / scipy.signal in float64, and gradients
against central differences of those references. Transforms run as (real, imag) pairs so the
cases run on every device; the complex ``ember.fft`` surface is checked where the device holds
complex64. Tolerances are the suite's, times ``SCALE`` (an FFT sums n terms)."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest

import ember as em
import ember_signal as sig
from ember_conformance.checks import assert_close, check, check_gradients, widest_float
from ember_signal import pairs
from ember_signal.filtering import signal_lfilter
from ember_signal.transform import signal_dft

EMBER_CONFORMANCE = True
#: tolerance multiplier for transform results (error grows with log n and the magnitude of sums)
SCALE = 100.0

scipy_signal = pytest.importorskip("scipy.signal", reason="scipy is the reference of the signal cases")


def _rng(*parts: object) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32("/".join(map(str, parts)).encode()))


def _pairs_np(z: np.ndarray) -> np.ndarray:
    return np.stack([np.real(z), np.imag(z)], axis=-1)


def _complex_np(p: np.ndarray) -> np.ndarray:
    return p[..., 0] + 1j * p[..., 1]


def _t(a: np.ndarray, device: Any, dtype: Any, requires_grad: bool = False) -> Any:
    return em.tensor(a, dtype=dtype, device=device, requires_grad=requires_grad)


# -- the DFT primitive: the Tensor-op reference and the dispatched op (numpy.fft, cuFFT, generated kernels) --

#: powers of two: Stockham (16, 64: radix 4 only; 2, 8, 128: with a radix-2 stage); other n <= 64: direct DFT;
#: others: Bluestein
SIZES = [1, 2, 8, 16, 64, 128, 12, 100, 127]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("inverse", [False, True])
def test_dft_reference(device, n, inverse):
    dt = widest_float(device)
    z = _rng("dft", n).standard_normal((3, n, 2))
    want = _pairs_np((np.fft.ifft(_complex_np(z), norm="forward") if inverse else np.fft.fft(_complex_np(z))) * 0.5)
    assert_close(signal_dft.reference(_t(z, device, dt), inverse=inverse, scale=0.5), want, dt, scale=SCALE)
    assert_close(signal_dft(_t(z, device, dt), inverse=inverse, scale=0.5), want, dt, scale=SCALE, what="op")


# -- the FFT family on pairs -----------------------------------------------------------------------------

C2C = {"fft": np.fft.fft, "ifft": np.fft.ifft, "hfft": np.fft.hfft}
R2C = {"rfft": np.fft.rfft, "ihfft": np.fft.ihfft}


@pytest.mark.parametrize("norm", ["backward", "ortho", "forward"])
@pytest.mark.parametrize("n", [None, 6, 20])
@pytest.mark.parametrize("op", ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
def test_fft_1d(device, op, n, norm):
    dt = widest_float(device)
    rng = _rng(op, n, norm)
    if op in ("rfft", "ihfft"):
        x = rng.standard_normal((2, 9))
        got = getattr(pairs, op)(_t(x, device, dt), n=n, axis=0 if op == "rfft" else -1, norm=norm)
        want = _pairs_np(R2C[op](x, n=n, axis=0 if op == "rfft" else -1, norm=norm))
    else:
        z = rng.standard_normal((2, 9, 2))
        ref = np.fft.irfft if op == "irfft" else C2C[op]
        got = getattr(pairs, op)(_t(z, device, dt), n=n, norm=norm)
        want = ref(_complex_np(z), n=n, norm=norm)
        want = want if op in ("irfft", "hfft") else _pairs_np(want)
    assert_close(got, want, dt, scale=SCALE)


@pytest.mark.parametrize("case", ["fftn", "ifftn", "rfftn", "irfftn", "fft2-s", "irfftn-s-axes"])
def test_fft_nd(device, case):
    dt = widest_float(device)
    rng = _rng(case)
    z = rng.standard_normal((3, 4, 6, 2))
    x = rng.standard_normal((3, 4, 6))
    if case == "rfftn":
        got, want = pairs.rfftn(_t(x, device, dt)), _pairs_np(np.fft.rfftn(x))
    elif case == "fft2-s":
        got, want = (
            pairs.fftn(_t(z, device, dt), s=(5, 3), axes=(-2, -1)),
            _pairs_np(np.fft.fft2(_complex_np(z), s=(5, 3))),
        )
    elif case == "irfftn-s-axes":
        got = pairs.irfftn(_t(z, device, dt), s=(3, 7), axes=(0, 2))
        want = np.fft.irfftn(_complex_np(z), s=(3, 7), axes=(0, 2))
    elif case == "irfftn":
        got, want = pairs.irfftn(_t(z, device, dt)), np.fft.irfftn(_complex_np(z), axes=(0, 1, 2))
    else:
        got, want = getattr(pairs, case)(_t(z, device, dt)), _pairs_np(getattr(np.fft, case)(_complex_np(z)))
    assert_close(got, want, dt, scale=SCALE)


#: (ember pairs function, numpy reference on pairs/real arrays, input kind) for the gradient checks
GRAD_CASES = {
    "fft": (lambda p: pairs.fft(p, n=6), lambda p: _pairs_np(np.fft.fft(_complex_np(p), n=6)), "pairs"),
    "ifft-ortho": (
        lambda p: pairs.ifft(p, norm="ortho"),
        lambda p: _pairs_np(np.fft.ifft(_complex_np(p), norm="ortho")),
        "pairs",
    ),
    "rfft": (lambda x: pairs.rfft(x), lambda x: _pairs_np(np.fft.rfft(x)), "real"),
    "irfft": (lambda p: pairs.irfft(p, n=9), lambda p: np.fft.irfft(_complex_np(p), n=9), "pairs"),
    "hfft": (lambda p: pairs.hfft(p), lambda p: np.fft.hfft(_complex_np(p)), "pairs"),
    "ihfft": (lambda x: pairs.ihfft(x), lambda x: _pairs_np(np.fft.ihfft(x)), "real"),
    "fftn": (lambda p: pairs.fftn(p), lambda p: _pairs_np(np.fft.fftn(_complex_np(p))), "pairs"),
    "rfftn": (lambda x: pairs.rfftn(x), lambda x: _pairs_np(np.fft.rfftn(x)), "real"),
    "irfftn": (
        lambda p: pairs.irfftn(p, s=(4, 6)),
        lambda p: np.fft.irfftn(_complex_np(p), s=(4, 6), axes=(-2, -1)),
        "pairs",
    ),
    "bluestein": (lambda p: pairs.fft(p, n=70), lambda p: _pairs_np(np.fft.fft(_complex_np(p), n=70)), "pairs"),
}


@pytest.mark.parametrize("case", sorted(GRAD_CASES))
def test_fft_gradients(ad_device, case):
    fn, ref, kind = GRAD_CASES[case]
    dt = widest_float(ad_device)
    rng = _rng("grad", case)
    shape = (4, 5, 2) if kind == "pairs" else (4, 5)
    if case == "bluestein":
        shape = (1, 67, 2)
    a = rng.standard_normal(shape)
    check_gradients(fn, ref, [_t(a, ad_device, dt, True)], [a], [0], {}, rng, scale=10.0)


# -- the complex surface (ember.fft) where the device holds complex64 ----------------------------------------


def _need_complex(device: Any) -> None:
    if not device.capabilities.supports(em.complex64):
        pytest.skip(
            f"{device.kind} holds no complex64 ({device.capabilities.why_not(em.complex64)}); pairs cases cover it"
        )


@pytest.mark.parametrize(
    "name", ["fft", "ifft", "fftn", "ifftn", "fft2", "ifft2", "rfft", "rfftn", "rfft2", "ihfft", "irfft", "irfftn",
             "irfft2", "hfft"],
)  # fmt: skip
def test_complex_namespace(device, name):
    _need_complex(device)
    rng = _rng("complex", name)
    real_in = name.startswith("rfft") or name == "ihfft"
    x = rng.standard_normal((4, 6)) if real_in else rng.standard_normal((4, 6)) + 1j * rng.standard_normal((4, 6))
    dt = em.float64 if real_in else em.complex128
    if not device.capabilities.supports(dt):
        dt = em.float32 if real_in else em.complex64
    got = getattr(em.fft, name)(em.tensor(x, dtype=dt, device=device), norm="ortho")
    want = getattr(np.fft, name)(x, norm="ortho")
    got_np = np.asarray(got.numpy())
    kind = "c" if np.iscomplexobj(want) else "f"
    check(got_np.shape == want.shape, f"em.fft.{name} of {dt}: shape {got_np.shape}, numpy {want.shape}")
    check(got.dtype.kind == kind, f"em.fft.{name} of {dt}: result is {got.dtype}; numpy's is {want.dtype}")
    tol = 1e-10 if dt in (em.float64, em.complex128) else 1e-4
    np.testing.assert_allclose(got_np, want, rtol=tol, atol=tol)


def test_freqs_and_shifts(device):
    dt = widest_float(device)
    assert_close(em.fft.fftfreq(7, d=0.5, dtype=dt, device=device), np.fft.fftfreq(7, 0.5), dt)
    assert_close(em.fft.rfftfreq(8, d=2.0, dtype=dt, device=device), np.fft.rfftfreq(8, 2.0), dt)
    x = np.arange(30.0).reshape(5, 6)
    assert_close(em.fft.fftshift(_t(x, device, dt)), np.fft.fftshift(x), dt)
    assert_close(em.fft.ifftshift(_t(x, device, dt), axes=1), np.fft.ifftshift(x, axes=1), dt)


# -- windows ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("name", ["hann", "hamming", "blackman", "bartlett", "kaiser"])
def test_windows(device, name, sym):
    dt = widest_float(device)
    for m in (0, 1, 2, 9, 16):
        args = (m, 6.0) if name == "kaiser" else (m,)
        got = getattr(sig, name)(*args, sym=sym, dtype=dt, device=device)
        assert_close(got, getattr(scipy_signal.windows, name)(*args, sym=sym), dt, what=f"{name}({m})")


# -- STFT family -----------------------------------------------------------------------------------------


def _np_stft(x: np.ndarray, n_fft: int, hop: int, window: np.ndarray, center: bool) -> np.ndarray:
    if center:
        x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(n_fft // 2, n_fft // 2)], mode="reflect")
    count = 1 + (x.shape[-1] - n_fft) // hop
    frames = np.stack([x[..., t * hop : t * hop + n_fft] * window for t in range(count)], axis=-2)
    return np.swapaxes(np.fft.rfft(frames, axis=-1), -1, -2)


STFT_CASES = {
    "center-hann": (16, 4, None, True),
    "no-center-hamming": (12, 3, "hamming", False),
    "win8-hop5": (16, 5, 8, True),
}


def _stft_window(spec: Any, n_fft: int) -> tuple[Any, np.ndarray]:
    if spec is None:
        w = scipy_signal.windows.hann(n_fft, sym=False)
        return None, w
    if spec == "hamming":
        w = scipy_signal.windows.hamming(n_fft, sym=False)
        return w, w
    w = scipy_signal.windows.hann(spec, sym=False)
    left = (n_fft - spec) // 2
    return w, np.pad(w, (left, n_fft - spec - left))


@pytest.mark.parametrize("case", sorted(STFT_CASES))
def test_stft_istft(device, case):
    n_fft, hop, win, center = STFT_CASES[case]
    dt = widest_float(device)
    x = _rng("stft", case).standard_normal((2, 70))
    w_arg, w_full = _stft_window(win, n_fft)
    window = None if w_arg is None else _t(w_arg, device, dt)
    win_length = len(w_arg) if w_arg is not None else None
    spec = sig.stft_pairs(_t(x, device, dt), n_fft, hop, win_length, window, center)
    assert_close(spec, _pairs_np(_np_stft(x, n_fft, hop, w_full, center)), dt, scale=SCALE)
    back = sig.istft_pairs(spec, n_fft, hop, win_length, window, center, length=70 if center else None)
    keep = back.shape[-1]
    assert_close(back, x[..., :keep], dt, scale=SCALE, what="istft(stft(x))")
    if device.capabilities.supports(em.complex64):
        c = sig.stft(_t(x, device, dt), n_fft, hop, win_length, window, center)
        np.testing.assert_allclose(np.asarray(c.numpy()), _np_stft(x, n_fft, hop, w_full, center), rtol=1e-4, atol=1e-4)
        assert_close(sig.istft(c, n_fft, hop, win_length, window, center, length=70 if center else None),
                     x[..., :keep], dt, scale=SCALE, what="complex istft")  # fmt: skip


def _np_mel(n_freqs: int, n_mels: int, sr: float, f_min: float, f_max: float) -> np.ndarray:
    """HTK triangular filters, one band at a time (a different formulation from the package's)."""
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)
    hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    edges = hz(np.linspace(mel(f_min), mel(f_max), n_mels + 2))
    freqs = np.linspace(0, sr / 2, n_freqs)
    fb = np.zeros((n_freqs, n_mels))
    for j in range(n_mels):
        lo, mid, hi = edges[j], edges[j + 1], edges[j + 2]
        for i, f in enumerate(freqs):
            if lo <= f <= mid:
                fb[i, j] = (f - lo) / (mid - lo)
            elif mid < f <= hi:
                fb[i, j] = (hi - f) / (hi - mid)
    return fb


def test_spectrogram_and_mel(device):
    dt = widest_float(device)
    x = _rng("mel").standard_normal((2, 64))
    w = scipy_signal.windows.hann(32, sym=False)
    power = np.abs(_np_stft(x, 32, 8, w, True)) ** 2
    assert_close(sig.spectrogram(_t(x, device, dt), 32, 8), power, dt, scale=SCALE)
    assert_close(sig.spectrogram(_t(x, device, dt), 32, 8, power=1.0), np.sqrt(power), dt, scale=SCALE)
    fb = _np_mel(17, 6, 8000.0, 100.0, 3500.0)
    assert_close(sig.mel_filterbank(17, 6, 8000.0, 100.0, 3500.0, dtype=dt, device=device), fb, dt)
    got = sig.mel_spectrogram(_t(x, device, dt), 8000.0, n_fft=32, hop_length=8, n_mels=6, f_min=100.0, f_max=3500.0)
    assert_close(got, np.swapaxes(np.swapaxes(power, -1, -2) @ fb, -1, -2), dt, scale=SCALE)


def test_stft_family_gradients(ad_device):
    dt = widest_float(ad_device)
    rng = _rng("stft-grad")
    x = rng.standard_normal((1, 24))
    w = scipy_signal.windows.hann(8, sym=False)
    fb = _np_mel(5, 3, 1000.0, 0.0, 500.0)
    cases = [
        (lambda t: sig.stft_pairs(t, 8, 2), lambda a: _pairs_np(_np_stft(a, 8, 2, w, True))),
        (lambda t: sig.spectrogram(t, 8, 2), lambda a: np.abs(_np_stft(a, 8, 2, w, True)) ** 2),
        (
            lambda t: sig.mel_spectrogram(t, 1000.0, n_fft=8, hop_length=2, n_mels=3),
            lambda a: np.swapaxes(np.swapaxes(np.abs(_np_stft(a, 8, 2, w, True)) ** 2, -1, -2) @ fb, -1, -2),
        ),
    ]
    for fn, ref in cases:
        check_gradients(fn, ref, [_t(x, ad_device, dt, True)], [x], [0], {}, rng, scale=10.0)
    spec = _pairs_np(_np_stft(x, 8, 2, w, True))

    def np_istft(p: np.ndarray) -> np.ndarray:
        frames = np.fft.irfft(np.swapaxes(_complex_np(p), -1, -2), 8, axis=-1) * w
        count = frames.shape[-2]
        y, env = np.zeros(frames.shape[:-2] + (8 + 2 * (count - 1),)), np.zeros(8 + 2 * (count - 1))
        for t in range(count):
            y[..., 2 * t : 2 * t + 8] += frames[..., t, :]
            env[2 * t : 2 * t + 8] += w**2
        return (y / env)[..., 4:-4]

    check_gradients(lambda p: sig.istft_pairs(p, 8, 2), np_istft, [_t(spec, ad_device, dt, True)], [spec], [0], {}, rng,
                    scale=10.0)  # fmt: skip


# -- filters ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_convolutions(device, mode):
    dt = widest_float(device)
    rng = _rng("conv", mode)
    a, v = rng.standard_normal(20), rng.standard_normal(5)
    assert_close(sig.convolve(_t(a, device, dt), _t(v, device, dt), mode), np.convolve(a, v, mode), dt, scale=SCALE)
    assert_close(sig.convolve(_t(v, device, dt), _t(a, device, dt), mode), np.convolve(v, a, mode), dt, scale=SCALE)
    i1, i2 = rng.standard_normal((6, 7)), rng.standard_normal((3, 4))
    got = sig.fftconvolve(_t(i1, device, dt), _t(i2, device, dt), mode)
    assert_close(got, scipy_signal.fftconvolve(i1, i2, mode), dt, scale=SCALE, what="fftconvolve")
    got = sig.fftconvolve(_t(i1, device, dt), _t(i2[:1], device, dt), mode, axes=1)
    assert_close(got, scipy_signal.fftconvolve(i1, i2[:1], mode, axes=1), dt, scale=SCALE, what="fftconvolve axes")


LFILTERS = {
    "fir": ([0.5, -0.25, 0.125], [1.0]),
    "iir": ([0.2, 0.3, 0.1], [1.5, -0.5, 0.2]),
    "one-pole": ([1.0], [1.0, -0.9]),
}


@pytest.mark.parametrize("case", sorted(LFILTERS))
def test_lfilter(device, case):
    b, a = LFILTERS[case]
    dt = widest_float(device)
    x = _rng("lfilter", case).standard_normal((2, 40))
    assert_close(sig.lfilter(b, a, _t(x, device, dt)), scipy_signal.lfilter(b, a, x), dt, scale=SCALE)
    assert_close(sig.lfilter(b, a, _t(x.T, device, dt), axis=0), scipy_signal.lfilter(b, a, x.T, axis=0), dt,
                 scale=SCALE, what="axis=0")  # fmt: skip
    bn, an = np.asarray(b) / a[0], np.asarray(a) / a[0]
    ref = signal_lfilter.reference(_t(x, device, dt), _t(bn, device, dt), _t(an, device, dt))
    assert_close(ref, scipy_signal.lfilter(b, a, x), dt, scale=SCALE, what="Tensor-op reference")


@pytest.mark.parametrize("num,nx", [(25, 50), (32, 49), (64, 50), (77, 49)])
def test_resample(device, num, nx):
    dt = widest_float(device)
    x = _rng("resample", num, nx).standard_normal((2, nx))
    assert_close(sig.resample(_t(x, device, dt), num), scipy_signal.resample(x, num, axis=-1), dt, scale=SCALE)


def test_filter_gradients(ad_device):
    dt = widest_float(ad_device)
    rng = _rng("filter-grad")
    x, v = rng.standard_normal((2, 12)), rng.standard_normal(4)
    b, a = np.array([0.3, 0.2, -0.1]), np.array([1.2, -0.4, 0.1])
    cases = [
        (lambda s, k: sig.convolve(s, k, "same"),
         lambda s, k: np.stack([np.convolve(r, k, "same") for r in s]), [x, v]),
        (lambda s, k: sig.fftconvolve(s, k[None], "full", axes=1),
         lambda s, k: scipy_signal.fftconvolve(s, k[None], "full", axes=1), [x, v]),
        (lambda s, bb, aa: sig.lfilter(bb, aa, s), lambda s, bb, aa: scipy_signal.lfilter(bb, aa, s), [x, b, a]),
        (lambda s: sig.resample(s, 17), lambda s: scipy_signal.resample(s, 17, axis=-1), [x]),
        (lambda s: sig.resample(s, 6), lambda s: scipy_signal.resample(s, 6, axis=-1), [x]),
    ]  # fmt: skip
    for fn, ref, args in cases:
        leaves = [_t(arg, ad_device, dt, True) for arg in args]
        check_gradients(fn, ref, leaves, args, list(range(len(args))), {}, rng, scale=10.0)

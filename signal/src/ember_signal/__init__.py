"""ember-signal: the FFT family, windows, STFT, mel features and filters for ember, seen as
``ember.signal`` (and the Array API ``fft`` extension as ``ember.fft``).

Every op has a reference in ember Tensor ops (so it runs on every backend) and gradients;
complex results come as complex tensors from :mod:`ember_signal.fft` where the device holds
complex dtypes, and as (real, imag) pairs from :mod:`ember_signal.pairs` (and the ``*_pairs``
functions) everywhere.
"""

from __future__ import annotations

from . import fft, pairs
from .filtering import convolve, fftconvolve, lfilter, resample, signal_lfilter
from .spectral import istft, istft_pairs, mel_filterbank, mel_spectrogram, spectrogram, stft, stft_pairs
from .transform import signal_dft
from .windows import bartlett, blackman, get_window, hamming, hann, kaiser

__all__ = [
    "fft",
    "pairs",
    "hann",
    "hamming",
    "blackman",
    "kaiser",
    "bartlett",
    "get_window",
    "stft",
    "stft_pairs",
    "istft",
    "istft_pairs",
    "spectrogram",
    "mel_filterbank",
    "mel_spectrogram",
    "convolve",
    "fftconvolve",
    "lfilter",
    "resample",
    "signal_dft",
    "signal_lfilter",
]

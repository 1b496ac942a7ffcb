"""Short-time Fourier analysis: ``stft``/``istft`` (torch.stft's layout: (..., freq, frames)),
``spectrogram``, ``mel_filterbank`` (torchaudio's melscale_fbanks layout) and ``mel_spectrogram``.

Frames are gathered with ``take`` and overlapped-added with shifted sums, so everything is
Tensor ops on pairs and differentiates on every backend.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as em
from ember.errors import InvalidArgumentError, ShapeError

from . import fft as cfft
from . import pairs
from .windows import hann

__all__ = ["stft", "istft", "spectrogram", "mel_filterbank", "mel_spectrogram"]


def _positive(value: Any, name: str, op: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgumentError(f"{op}: {name} must be a positive int, got {value!r}")
    return value


def _window(window: Any, n_fft: int, win_length: int, like: Any, op: str) -> Any:
    """The analysis window as a tensor of length n_fft (a shorter one is centred, zero padded)."""
    if window is None:
        window = hann(win_length, sym=False, dtype=like.dtype, device=like.device)
    elif not isinstance(window, em.Tensor):
        raise InvalidArgumentError(f"{op}: window must be an ember Tensor or None, got {type(window).__name__}")
    if window.ndim != 1 or window.shape[0] != win_length:
        raise ShapeError(f"{op}: window must be 1-D of length win_length={win_length}, got shape {window.shape}")
    left = (n_fft - win_length) // 2
    return em.pad(window, ((left, n_fft - win_length - left),)) if win_length < n_fft else window


def _lengths(n_fft: Any, hop_length: Any, win_length: Any, op: str) -> tuple[int, int, int]:
    n_fft = _positive(n_fft, "n_fft", op)
    hop = n_fft // 4 if hop_length is None else _positive(hop_length, "hop_length", op)
    win = n_fft if win_length is None else _positive(win_length, "win_length", op)
    if win > n_fft:
        raise InvalidArgumentError(f"{op}: win_length={win} must be at most n_fft={n_fft}")
    return n_fft, max(hop, 1), win


def _reflect(x: Any, p: int, op: str) -> Any:
    length = x.shape[-1]
    if p >= length:
        raise ShapeError(f"{op}: reflect padding of {p} needs a signal longer than {p} samples, got {length}")
    left = em.flip(x[..., 1 : p + 1], axis=-1)
    right = em.flip(x[..., length - p - 1 : length - 1], axis=-1)
    return em.concat([left, x, right], axis=-1)


def stft_pairs(
    x: Any,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Any = None,
    center: bool = True,
    pad_mode: str = "reflect",
    normalized: bool = False,
    onesided: bool = True,
) -> Any:
    """:func:`stft` as (real, imag) pairs: shape (..., freq, frames, 2), on every device."""
    x = pairs.check_real(x, "stft")
    n_fft, hop, win = _lengths(n_fft, hop_length, win_length, "stft")
    w = _window(window, n_fft, win, x, "stft")
    if center:
        p = n_fft // 2
        if pad_mode == "reflect":
            x = _reflect(x, p, "stft")
        elif pad_mode == "constant":
            x = em.pad(x, ((0, 0),) * (x.ndim - 1) + ((p, p),))
        else:
            raise InvalidArgumentError(f"stft: pad_mode must be 'reflect' or 'constant', got {pad_mode!r}")
    length = x.shape[-1]
    if length < n_fft:
        raise ShapeError(f"stft: the (padded) signal has {length} samples, fewer than n_fft={n_fft}")
    count = 1 + (length - n_fft) // hop
    index = (np.arange(count)[:, None] * hop + np.arange(n_fft)[None, :]).reshape(-1)
    frames = x.take(em.tensor(index, dtype="int64", device=x.device), axis=-1)
    frames = frames.reshape(tuple(x.shape[:-1]) + (count, n_fft)) * w
    norm = "ortho" if normalized else "backward"
    spec = pairs.rfft(frames, axis=-1, norm=norm) if onesided else pairs.fft(pairs.from_real(frames), norm=norm)
    return em.moveaxis(spec, -2, -3)


def stft(
    x: Any,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Any = None,
    center: bool = True,
    pad_mode: str = "reflect",
    normalized: bool = False,
    onesided: bool = True,
) -> Any:
    """Short-time Fourier transform of real ``x`` (..., time): complex (..., freq, frames).

    Defaults as torch.stft's except ``window``: a periodic Hann window of ``win_length``
    (torch's default is rectangular). ``normalized`` scales by 1/sqrt(n_fft).
    """
    spec = stft_pairs(x, n_fft, hop_length, win_length, window, center, pad_mode, normalized, onesided)
    return cfft.from_pairs(spec, "stft", "ember_signal.stft_pairs")


def _overlap_add(frames: Any, hop: int) -> Any:
    """Sum frames (..., T, N) placed ``hop`` apart: (..., N + hop*(T-1))."""
    count, n = frames.shape[-2], frames.shape[-1]
    chunks = -(-n // hop)
    lead = tuple(frames.shape[:-2])
    if chunks * hop != n:
        frames = em.pad(frames, ((0, 0),) * (frames.ndim - 1) + ((0, chunks * hop - n),))
    parts = frames.reshape(lead + (count, chunks, hop))
    total = None
    for j in range(chunks):
        part = em.pad(parts[..., j, :], ((0, 0),) * len(lead) + ((j, chunks - 1 - j), (0, 0)))
        total = part if total is None else total + part
    out = total.reshape(lead + ((count + chunks - 1) * hop,))
    return out[..., : n + hop * (count - 1)]


def istft_pairs(
    spec: Any,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Any = None,
    center: bool = True,
    normalized: bool = False,
    onesided: bool = True,
    length: int | None = None,
) -> Any:
    """:func:`istft` of (real, imag) pairs (..., freq, frames, 2)."""
    spec = pairs.check_pairs(spec, "istft")
    if spec.ndim < 3:
        raise ShapeError(f"istft: expected pairs of shape (..., freq, frames, 2), got {spec.shape}")
    n_fft, hop, win = _lengths(n_fft, hop_length, win_length, "istft")
    freqs = n_fft // 2 + 1 if onesided else n_fft
    if spec.shape[-3] != freqs:
        raise ShapeError(f"istft: expected {freqs} frequencies for n_fft={n_fft}, got {spec.shape[-3]}")
    w = _window(window, n_fft, win, spec, "istft")
    spec = em.moveaxis(spec, -3, -2)
    norm = "ortho" if normalized else "backward"
    frames = pairs.irfft(spec, n_fft, norm=norm) if onesided else pairs.ifft(spec, norm=norm)[..., 0]
    count = frames.shape[-2]
    y = _overlap_add(frames * w, hop)
    w_host = np.asarray(w.numpy(), dtype=np.float64)
    envelope = np.zeros(n_fft + hop * (count - 1))
    for t in range(count):
        envelope[t * hop : t * hop + n_fft] += w_host**2
    start = n_fft // 2 if center else 0
    stop = len(envelope) - (n_fft // 2 if center else 0) if length is None else start + length
    stop = min(stop, len(envelope))
    kept = envelope[start:stop]
    if np.any(kept < 1e-11):
        raise InvalidArgumentError(
            "istft: the window's overlap-add is zero somewhere in the output (the NOLA condition fails); "
            "use a hop_length that overlaps the windows or another window"
        )
    y = y[..., start:stop] / em.tensor(kept, dtype=y.dtype, device=y.device)
    if length is not None and y.shape[-1] < length:
        y = em.pad(y, ((0, 0),) * (y.ndim - 1) + ((0, length - y.shape[-1]),))
    return y


def istft(
    spec: Any,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Any = None,
    center: bool = True,
    normalized: bool = False,
    onesided: bool = True,
    length: int | None = None,
) -> Any:
    """Inverse of :func:`stft` (window-envelope-normalised overlap-add): the real signal."""
    return istft_pairs(
        cfft.to_pairs(spec, "istft"), n_fft, hop_length, win_length, window, center, normalized, onesided, length
    )


def _power(spec: Any, power: float) -> Any:
    mag2 = pairs.abs2(spec)
    if power == 2.0:
        return mag2
    if power == 1.0:
        return em.sqrt(mag2)
    return mag2 ** (power / 2.0)


def spectrogram(
    x: Any,
    n_fft: int,
    hop_length: int | None = None,
    win_length: int | None = None,
    window: Any = None,
    center: bool = True,
    pad_mode: str = "reflect",
    normalized: bool = False,
    power: float = 2.0,
) -> Any:
    """|stft(x)|**power, real (..., n_fft//2 + 1, frames)."""
    if not isinstance(power, (int, float)) or isinstance(power, bool) or power <= 0:
        raise InvalidArgumentError(f"spectrogram: power must be a positive number, got {power!r}")
    return _power(stft_pairs(x, n_fft, hop_length, win_length, window, center, pad_mode, normalized), float(power))


def _hz_to_mel(f: np.ndarray, scale: str) -> np.ndarray:
    if scale == "htk":
        return 2595.0 * np.log10(1.0 + f / 700.0)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz) / logstep, f / f_sp)


def _mel_to_hz(m: np.ndarray, scale: str) -> np.ndarray:
    if scale == "htk":
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0
    return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)), f_sp * m)


def mel_filterbank(
    n_freqs: int,
    n_mels: int,
    sample_rate: float,
    f_min: float = 0.0,
    f_max: float | None = None,
    norm: str | None = None,
    mel_scale: str = "htk",
    *,
    dtype: Any = None,
    device: Any = None,
) -> Any:
    """Triangular mel filters as an (n_freqs, n_mels) matrix (torchaudio.functional.melscale_fbanks'
    definition): ``spec.mT @ fb`` maps a power spectrum to mel bands. ``norm="slaney"`` scales
    each filter to unit area; ``mel_scale`` is ``"htk"`` or ``"slaney"``."""
    _positive(n_freqs, "n_freqs", "mel_filterbank")
    _positive(n_mels, "n_mels", "mel_filterbank")
    if mel_scale not in ("htk", "slaney"):
        raise InvalidArgumentError(f"mel_filterbank: mel_scale must be 'htk' or 'slaney', got {mel_scale!r}")
    if norm not in (None, "slaney"):
        raise InvalidArgumentError(f"mel_filterbank: norm must be None or 'slaney', got {norm!r}")
    f_max = sample_rate / 2.0 if f_max is None else f_max
    if not 0.0 <= f_min < f_max:
        raise InvalidArgumentError(f"mel_filterbank: need 0 <= f_min < f_max, got f_min={f_min}, f_max={f_max}")
    freqs = np.linspace(0.0, sample_rate / 2.0, n_freqs)
    mels = np.linspace(_hz_to_mel(np.float64(f_min), mel_scale), _hz_to_mel(np.float64(f_max), mel_scale), n_mels + 2)
    points = _mel_to_hz(mels, mel_scale)
    diff = np.diff(points)
    slopes = points[None, :] - freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    fb = np.maximum(0.0, np.minimum(down, up))
    if norm == "slaney":
        fb = fb * (2.0 / (points[2 : n_mels + 2] - points[:n_mels]))[None, :]
    return em.tensor(fb, dtype=dtype or em.float32, device=device)


def mel_spectrogram(
    x: Any,
    sample_rate: float,
    n_fft: int = 400,
    hop_length: int | None = None,
    win_length: int | None = None,
    n_mels: int = 128,
    f_min: float = 0.0,
    f_max: float | None = None,
    window: Any = None,
    center: bool = True,
    pad_mode: str = "reflect",
    power: float = 2.0,
    norm: str | None = None,
    mel_scale: str = "htk",
) -> Any:
    """The mel-band power spectrogram of ``x``: (..., n_mels, frames)."""
    spec = spectrogram(x, n_fft, hop_length, win_length, window, center, pad_mode, False, power)
    fb = mel_filterbank(
        n_fft // 2 + 1, n_mels, sample_rate, f_min, f_max, norm, mel_scale, dtype=spec.dtype, device=spec.device
    )
    return em.matmul(fb.mT, spec)

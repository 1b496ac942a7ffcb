"""Window functions (scipy.signal.windows' definitions): ``sym=True`` gives the symmetric
window for filter design, ``sym=False`` the periodic one for spectral analysis (STFT).

Windows are constants computed on the host in float64 and placed on ``device`` in ``dtype``;
they have no tensor inputs and so nothing to differentiate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import ember as em
from ember.errors import InvalidArgumentError

__all__ = ["hann", "hamming", "blackman", "kaiser", "bartlett", "get_window"]


def _points(m: Any, sym: bool, op: str) -> tuple[np.ndarray, int]:
    if not isinstance(m, int) or isinstance(m, bool) or m < 0:
        raise InvalidArgumentError(f"{op}: M must be a non-negative int, got {m!r}")
    size = m if sym else m + 1
    return np.arange(size, dtype=np.float64), size


def _finish(w: np.ndarray, m: int, sym: bool, dtype: Any, device: Any) -> Any:
    if not sym:
        w = w[:m]
    return em.tensor(w, dtype=dtype or em.float32, device=device)


def _cosine_sum(m: int, coeffs: tuple[float, ...], sym: bool, dtype: Any, device: Any, op: str) -> Any:
    n, size = _points(m, sym, op)
    if m <= 1:
        return _finish(np.ones(m), m, True, dtype, device)
    phase = 2.0 * np.pi * n / (size - 1)
    w = sum(((-1) ** k) * a * np.cos(k * phase) for k, a in enumerate(coeffs))
    return _finish(np.asarray(w), m, sym, dtype, device)


def hann(M: int, *, sym: bool = True, dtype: Any = None, device: Any = None) -> Any:
    """The Hann window, 0.5 - 0.5 cos(2 pi n / (M - 1)).

    >>> hann(5)
    tensor([0. , 0.5, 1. , 0.5, 0. ], dtype=float32, device=cpu:0)
    """
    return _cosine_sum(M, (0.5, 0.5), sym, dtype, device, "hann")


def hamming(M: int, *, sym: bool = True, dtype: Any = None, device: Any = None) -> Any:
    """The Hamming window, 0.54 - 0.46 cos(2 pi n / (M - 1))."""
    return _cosine_sum(M, (0.54, 0.46), sym, dtype, device, "hamming")


def blackman(M: int, *, sym: bool = True, dtype: Any = None, device: Any = None) -> Any:
    """The Blackman window, 0.42 - 0.5 cos(2 pi n / (M - 1)) + 0.08 cos(4 pi n / (M - 1))."""
    return _cosine_sum(M, (0.42, 0.5, 0.08), sym, dtype, device, "blackman")


def bartlett(M: int, *, sym: bool = True, dtype: Any = None, device: Any = None) -> Any:
    """The Bartlett (triangular, zero at both ends) window."""
    n, size = _points(M, sym, "bartlett")
    if M <= 1:
        return _finish(np.ones(M), M, True, dtype, device)
    half = (size - 1) / 2.0
    return _finish(1.0 - np.abs(n - half) / half, M, sym, dtype, device)


def kaiser(M: int, beta: float, *, sym: bool = True, dtype: Any = None, device: Any = None) -> Any:
    """The Kaiser window, I0(beta sqrt(1 - (2n/(M-1) - 1)^2)) / I0(beta)."""
    if not isinstance(beta, (int, float)) or isinstance(beta, bool):
        raise InvalidArgumentError(f"kaiser: beta must be a real number, got {beta!r}")
    n, size = _points(M, sym, "kaiser")
    if M <= 1:
        return _finish(np.ones(M), M, True, dtype, device)
    alpha = (size - 1) / 2.0
    w = np.i0(beta * np.sqrt(np.clip(1.0 - ((n - alpha) / alpha) ** 2, 0.0, None))) / np.i0(float(beta))
    return _finish(w, M, sym, dtype, device)


_BY_NAME = {"hann": hann, "hamming": hamming, "blackman": blackman, "bartlett": bartlett}


def get_window(window: Any, M: int, *, sym: bool = False, dtype: Any = None, device: Any = None) -> Any:
    """A window by name (``"hann"``, ``("kaiser", beta)``...), periodic by default as scipy's."""
    if isinstance(window, tuple) and len(window) == 2 and window[0] == "kaiser":
        return kaiser(M, window[1], sym=sym, dtype=dtype, device=device)
    fn = _BY_NAME.get(window) if isinstance(window, str) else None
    if fn is None:
        raise InvalidArgumentError(
            f"get_window: window must be one of {sorted(_BY_NAME)} or ('kaiser', beta), got {window!r}"
        )
    return fn(M, sym=sym, dtype=dtype, device=device)

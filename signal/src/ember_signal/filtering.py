"""Filters: ``convolve`` (numpy.convolve's modes, direct), ``fftconvolve`` (scipy.signal's, by
FFT), ``lfilter`` (an IIR/FIR filter, scipy.signal.lfilter with zero initial state) and
``resample`` (scipy.signal.resample's Fourier method, real signals).

``lfilter`` is the extension op ``signal_lfilter``: its reference is Tensor ops (the truncated
impulse response of 1/a by Newton's iteration on power series, log2(N) polynomial products,
then two convolutions), its cpu kernel scipy.signal.lfilter, and its vjp the adjoint filter
run backwards in time.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import numpy as np

import ember as em
from ember.errors import InvalidArgumentError, ShapeError
from ember.nn import functional as F

from . import pairs

__all__ = ["convolve", "fftconvolve", "lfilter", "resample", "signal_lfilter"]

_MODES = ("full", "same", "valid")


def _mode(mode: str, op: str) -> str:
    if mode not in _MODES:
        raise InvalidArgumentError(f"{op}: mode must be one of {', '.join(map(repr, _MODES))}, got {mode!r}")
    return mode


def _full_convolve(x: Any, v: Any) -> Any:
    """The full linear convolution of x (..., N) with the 1-D kernel v (K): (..., N + K - 1)."""
    lead, n, k = tuple(x.shape[:-1]), x.shape[-1], v.shape[0]
    flat = x.reshape((-1, 1, n))
    out = F.conv1d(flat, em.flip(v, axis=0).reshape((1, 1, k)), padding=k - 1)
    return out.reshape(lead + (n + k - 1,))


def convolve(a: Any, v: Any, mode: str = "full") -> Any:
    """The discrete linear convolution of 1-D ``a`` and ``v`` (numpy.convolve), by direct sums;
    ``a`` may carry leading batch axes."""
    _mode(mode, "convolve")
    a, v = pairs.check_real(a, "convolve"), pairs.check_real(v, "convolve")
    if v.ndim != 1:
        raise ShapeError(f"convolve: v must be 1-D, got shape {v.shape}")
    n, k = a.shape[-1], v.shape[0]
    if n == 0 or k == 0:
        raise ShapeError("convolve: a and v must not be empty")
    full = _full_convolve(a, v)
    big, small = max(n, k), min(n, k)
    if mode == "full":
        return full
    if mode == "same":
        start = (small - 1) // 2
        return full[..., start : start + big]
    return full[..., small - 1 : big]


def _centered(x: Any, axes: Sequence[int], sizes: Sequence[int]) -> Any:
    index = [slice(None)] * x.ndim
    for ax, size in zip(axes, sizes):
        start = (x.shape[ax] - size) // 2
        index[ax] = slice(start, start + size)
    return x[tuple(index)]


def fftconvolve(in1: Any, in2: Any, mode: str = "full", axes: int | Sequence[int] | None = None) -> Any:
    """N-dimensional convolution by FFT (scipy.signal.fftconvolve): ``axes`` (all by default) are
    convolved, the others broadcast."""
    _mode(mode, "fftconvolve")
    in1, in2 = pairs.check_real(in1, "fftconvolve"), pairs.check_real(in2, "fftconvolve")
    if in1.ndim != in2.ndim:
        raise ShapeError(f"fftconvolve: in1 and in2 must have the same number of axes, got {in1.shape} and {in2.shape}")
    if axes is None:
        axes = list(range(in1.ndim))
    elif isinstance(axes, int):
        axes = [axes]
    axes = [pairs.norm_axis(a, in1.ndim, "fftconvolve") for a in axes]
    s1 = [in1.shape[a] for a in axes]
    s2 = [in2.shape[a] for a in axes]
    if mode == "valid" and not (all(a >= b for a, b in zip(s1, s2)) or all(a <= b for a, b in zip(s1, s2))):
        raise ShapeError("fftconvolve: mode='valid' needs in1 at least as large as in2 in every axis, or the reverse")
    if mode == "valid" and not all(a >= b for a, b in zip(s1, s2)):
        in1, in2, s1, s2 = in2, in1, s2, s1
    shape = [a + b - 1 for a, b in zip(s1, s2)]
    spec = pairs.multiply(pairs.rfftn(in1, shape, axes), pairs.rfftn(in2, shape, axes))
    out = pairs.irfftn(spec, shape, axes)
    if mode == "full":
        return out
    if mode == "same":
        return _centered(out, axes, s1)
    return _centered(out, axes, [a - b + 1 for a, b in zip(s1, s2)])


def _poly_mul(p: Any, q: Any, length: int) -> Any:
    """(p * q) mod z^length for 1-D coefficient tensors."""
    return pairs.resize(_full_convolve(p, q), 0, length)


def _inverse_series(a: Any, length: int) -> Any:
    """The first ``length`` coefficients of 1/a(z), a[0] = 1: Newton's h <- h (2 - a h)."""
    h = em.ones((1,), dtype=a.dtype, device=a.device)
    size = 1
    while size < length:
        size = min(2 * size, length)
        ah = _poly_mul(a[:size], h, size)
        two_minus = -ah + em.tensor(np.eye(1, size, 0).reshape(-1) * 2.0, dtype=a.dtype, device=a.device)
        h = _poly_mul(h, two_minus, size)
    return h


@em.backend_extension("signal_lfilter")
def signal_lfilter(x: Any, b: Any, a: Any) -> Any:
    """y = (b / a) x along the last axis of x, a[0] == 1, zero initial state."""
    n = x.shape[-1]
    h = _inverse_series(a, n) if a.shape[0] > 1 else None
    y = _full_convolve(x, b)[..., :n]
    return y if h is None else _full_convolve(y, h)[..., :n]


def _correlate(w: Any, z: Any, taps: int) -> Any:
    """c[k] = sum over batch and n of w[..., n] z[..., n - k], k < taps."""
    n = w.shape[-1]
    terms = [(w[..., k:] * z[..., : n - k]).sum() if k < n else (w[..., :0]).sum() for k in range(taps)]
    return em.stack(terms)


@signal_lfilter.vjp
def _signal_lfilter_vjp(ctx: Any, grad: Any) -> Any:
    x, b, a = ctx.inputs
    one = em.ones((1,), dtype=grad.dtype, device=grad.device)
    w = em.flip(signal_lfilter(em.flip(grad, axis=-1), one, a), axis=-1)  # the all-pole part, adjoint
    gx = em.flip(signal_lfilter(em.flip(grad, axis=-1), b, a), axis=-1)
    return gx, _correlate(w, x, b.shape[0]), -_correlate(w, ctx.output, a.shape[0])


# scipy's C loop on cpu (ember-cpu installs scipy; without it cpu runs the reference)
if importlib.util.find_spec("scipy") is not None:

    @signal_lfilter.kernel("cpu")
    def _signal_lfilter_cpu(backend: Any, x: Any, b: Any, a: Any) -> Any:
        # imported here: scipy.signal takes over a second to import, and every device's first use
        # imports the installed extensions (this module among them)
        from scipy.signal import lfilter as scipy_lfilter  # noqa: PLC0415

        xs = np.asarray(backend.to_numpy(x))
        out = scipy_lfilter(np.asarray(backend.to_numpy(b)), np.asarray(backend.to_numpy(a)), xs, axis=-1)
        return backend.from_numpy(np.ascontiguousarray(out.astype(xs.dtype, copy=False)))


def lfilter(b: Any, a: Any, x: Any, axis: int = -1) -> Any:
    """Filter ``x`` along ``axis`` by the rational transfer function b(z)/a(z) (scipy.signal.lfilter
    with zero initial conditions); differentiable in ``b``, ``a`` and ``x``."""
    x = pairs.check_real(x, "lfilter")
    b = em.asarray(b, dtype=x.dtype, device=x.device)
    a = em.asarray(a, dtype=x.dtype, device=x.device)
    if b.ndim != 1 or a.ndim != 1 or b.shape[0] == 0 or a.shape[0] == 0:
        raise ShapeError(f"lfilter: b and a must be non-empty 1-D, got shapes {b.shape} and {a.shape}")
    if float(a[0].item()) == 0.0:
        raise InvalidArgumentError("lfilter: a[0] must be non-zero (it normalises the filter)")
    ax = pairs.norm_axis(axis, x.ndim, "lfilter")
    last = x.ndim - 1
    xt = em.moveaxis(x, ax, last) if ax != last else x
    y = signal_lfilter(xt, b / a[0], a / a[0])
    return em.moveaxis(y, last, ax) if ax != last else y


def resample(x: Any, num: int, axis: int = -1) -> Any:
    """Resample real ``x`` to ``num`` samples along ``axis`` by the Fourier method
    (scipy.signal.resample, no window): the spectrum is cropped or zero-padded, the Nyquist
    bin split or folded as scipy does."""
    x = pairs.check_real(x, "resample")
    if not isinstance(num, int) or isinstance(num, bool) or num < 1:
        raise InvalidArgumentError(f"resample: num must be a positive int, got {num!r}")
    ax = pairs.norm_axis(axis, x.ndim, "resample")
    nx = x.shape[ax]
    spec = pairs.rfft(x, axis=ax)
    m = min(num, nx)
    spec = pairs.resize(pairs.resize(spec, ax, m // 2 + 1), ax, num // 2 + 1)
    if m % 2 == 0 and num != nx:
        factor = np.ones(num // 2 + 1)
        factor[m // 2] = 2.0 if num < nx else 0.5
        shape = [1] * (x.ndim + 1)
        shape[ax] = num // 2 + 1
        spec = spec * em.tensor(factor.reshape(shape), dtype=x.dtype, device=x.device)
    return pairs.irfft(spec, num, axis=ax) * (num / nx)

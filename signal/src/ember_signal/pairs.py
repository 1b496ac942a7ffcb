"""The FFT family on (real, imag) pairs: a complex array of shape S is a real tensor of shape
S + (2,). These run and differentiate on every backend (OpenCL and WGPU hold no complex
dtypes; the core's autodiff records real results only); :mod:`ember_signal.fft` wraps them
for complex tensors. ``axis``/``axes`` count over S, as for the complex array.

>>> import ember as em
>>> from ember_signal import pairs
>>> pairs.rfft(em.tensor([1.0, 2.0, 3.0, 4.0]))
tensor([[10.,  0.],
        [-2.,  2.],
        [-2.,  0.]], dtype=float32, device=cpu:0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ember as em
from ember.errors import AxisError, DTypeError, InvalidArgumentError, ShapeError

from .transform import dft_pairs

__all__ = [
    "fft",
    "ifft",
    "rfft",
    "irfft",
    "hfft",
    "ihfft",
    "fftn",
    "ifftn",
    "rfftn",
    "irfftn",
    "conj",
    "from_real",
    "abs2",
    "multiply",
]

_NORMS = ("backward", "ortho", "forward")


def scale_for(norm: str, n: int, inverse: bool, op: str) -> float:
    """The factor a transform of length ``n`` is multiplied by under ``norm``."""
    if norm not in _NORMS:
        raise InvalidArgumentError(f"{op}: norm must be one of {', '.join(map(repr, _NORMS))}, got {norm!r}")
    if norm == "ortho":
        return 1.0 / math.sqrt(n)
    return 1.0 / n if (norm == "forward") != inverse else 1.0


def swap_norm(norm: str) -> str:
    return {"backward": "forward", "forward": "backward"}.get(norm, norm)


def check_pairs(p: Any, op: str) -> Any:
    if not isinstance(p, em.Tensor):
        raise DTypeError(f"{op}: x must be an ember Tensor of (real, imag) pairs, got {type(p).__name__}")
    if p.ndim < 2 or p.shape[-1] != 2:
        raise ShapeError(f"{op}: x must hold (real, imag) pairs on a last axis of size 2, got shape {p.shape}")
    if p.dtype.kind != "f":
        raise DTypeError(f"{op}: x must be a real floating-point tensor of pairs, got {p.dtype}")
    return p


def check_real(x: Any, op: str) -> Any:
    if not isinstance(x, em.Tensor):
        raise DTypeError(f"{op}: x must be an ember Tensor, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise DTypeError(f"{op}: x must be a real floating-point tensor, got {x.dtype}")
    if x.ndim < 1:
        raise ShapeError(f"{op}: x must have at least one axis, got a 0-d tensor")
    return x


def norm_axis(axis: int, ndim: int, op: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise InvalidArgumentError(f"{op}: axis must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise AxisError(f"{op}: axis {axis} is out of range for an array of {ndim} dimensions")
    return axis % ndim


def check_n(n: Any, op: str) -> None:
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < 1):
        raise InvalidArgumentError(f"{op}: n must be a positive int or None, got {n!r}")


def resize(p: Any, axis: int, n: int) -> Any:
    """Crop or zero-pad axis ``axis`` of ``p`` to length ``n`` (the standard's ``n`` argument)."""
    size = p.shape[axis]
    if n == size:
        return p
    if n < size:
        index = [slice(None)] * p.ndim
        index[axis] = slice(0, n)
        return p[tuple(index)]
    widths = [(0, 0)] * p.ndim
    widths[axis] = (0, n - size)
    return em.pad(p, tuple(widths))


def from_real(x: Any) -> Any:
    """Pairs with ``x`` as the real part and zero imaginary part."""
    return em.stack([x, em.zeros_like(x)], axis=-1)


def conj(p: Any) -> Any:
    """The complex conjugate of pairs."""
    return em.stack([p[..., 0], -p[..., 1]], axis=-1)


def abs2(p: Any) -> Any:
    """|z|^2 of pairs (a real tensor of the complex shape)."""
    return p[..., 0] * p[..., 0] + p[..., 1] * p[..., 1]


def multiply(p: Any, q: Any) -> Any:
    """The complex product of pairs (broadcasting over the complex shape)."""
    pr, pi, qr, qi = p[..., 0], p[..., 1], q[..., 0], q[..., 1]
    return em.stack([pr * qr - pi * qi, pr * qi + pi * qr], axis=-1)


def _c2c(p: Any, n: int | None, axis: int, norm: str, inverse: bool, op: str) -> Any:
    p = check_pairs(p, op)
    check_n(n, op)
    ax = norm_axis(axis, p.ndim - 1, op)
    if p.shape[ax] == 0 and n is None:
        raise ShapeError(f"{op}: the transform axis {axis} is empty; give n >= 1")
    n = p.shape[ax] if n is None else n
    p = resize(p, ax, n)
    return dft_pairs(p, ax, inverse, scale_for(norm, n, inverse, op))


def fft(p: Any, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The 1-D discrete Fourier transform of pairs along ``axis``."""
    return _c2c(p, n, axis, norm, False, "fft")


def ifft(p: Any, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The 1-D inverse discrete Fourier transform of pairs along ``axis``."""
    return _c2c(p, n, axis, norm, True, "ifft")


def rfft(x: Any, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The 1-D DFT of the real tensor ``x``: the n//2 + 1 non-negative frequencies, as pairs."""
    x = check_real(x, "rfft")
    check_n(n, "rfft")
    ax = norm_axis(axis, x.ndim, "rfft")
    n = x.shape[ax] if n is None else n
    out = _c2c(from_real(resize(x, ax, n)), None, ax, norm, False, "rfft")
    return resize(out, ax, n // 2 + 1)


def irfft(p: Any, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The inverse of :func:`rfft`: a real tensor of length ``n`` (default 2*(m-1)) along ``axis``."""
    p = check_pairs(p, "irfft")
    check_n(n, "irfft")
    ax = norm_axis(axis, p.ndim - 1, "irfft")
    n = 2 * (p.shape[ax] - 1) if n is None else n
    if n < 1:
        raise ShapeError(f"irfft: an axis of length {p.shape[ax]} gives n={n}; give n >= 1")
    half = resize(p, ax, n // 2 + 1)
    index = [slice(None)] * p.ndim
    index[ax] = slice(1, n - n // 2)
    mirror = em.flip(conj(half[tuple(index)]), axis=ax)
    full = em.concat([half, mirror], axis=ax) if mirror.shape[ax] else half
    out = dft_pairs(full, ax, True, scale_for(norm, n, True, "irfft"))
    return out[..., 0]


def hfft(p: Any, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The DFT of a Hermitian-symmetric signal given by its first half: a real result."""
    return irfft(conj(check_pairs(p, "hfft")), n, axis, swap_norm(norm))


def ihfft(x: Any, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """The inverse of :func:`hfft`: pairs of the first n//2 + 1 frequencies."""
    return conj(rfft(x, n, axis, swap_norm(norm)))


def plan_axes(ndim: int, s: Sequence[int] | None, axes: Sequence[int] | None, op: str) -> tuple[list[int], list[Any]]:
    """The standard's (s, axes) as a list of axes and a list of lengths (None = keep)."""
    if axes is None:
        axes = list(range(ndim)) if s is None else list(range(ndim - len(s), ndim))
    axes = [norm_axis(a, ndim, op) for a in axes]
    if len(set(axes)) != len(axes):
        raise InvalidArgumentError(f"{op}: axes must be unique, got {axes}")
    if s is None:
        return axes, [None] * len(axes)
    s = list(s)
    if len(s) != len(axes):
        raise InvalidArgumentError(f"{op}: s and axes must have the same length, got s={s} and axes={axes}")
    for v in s:
        check_n(None if v == -1 else v, op)
    return axes, [None if v == -1 else v for v in s]


def fftn(p: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str = "backward") -> Any:
    """The n-D DFT of pairs over ``axes`` (all by default)."""
    axes, sizes = plan_axes(check_pairs(p, "fftn").ndim - 1, s, axes, "fftn")
    for ax, n in zip(axes, sizes):
        p = _c2c(p, n, ax, norm, False, "fftn")
    return p


def ifftn(p: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str = "backward") -> Any:
    """The n-D inverse DFT of pairs over ``axes`` (all by default)."""
    axes, sizes = plan_axes(check_pairs(p, "ifftn").ndim - 1, s, axes, "ifftn")
    for ax, n in zip(axes, sizes):
        p = _c2c(p, n, ax, norm, True, "ifftn")
    return p


def rfftn(x: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str = "backward") -> Any:
    """The n-D DFT of a real tensor: rfft over the last of ``axes``, fft over the others."""
    axes, sizes = plan_axes(check_real(x, "rfftn").ndim, s, axes, "rfftn")
    p = rfft(x, sizes[-1], axes[-1], norm)
    for ax, n in zip(axes[:-1], sizes[:-1]):
        p = _c2c(p, n, ax, norm, False, "rfftn")
    return p


def irfftn(p: Any, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str = "backward") -> Any:
    """The inverse of :func:`rfftn`: ifft over all but the last of ``axes``, irfft over that one."""
    axes, sizes = plan_axes(check_pairs(p, "irfftn").ndim - 1, s, axes, "irfftn")
    for ax, n in zip(axes[:-1], sizes[:-1]):
        p = _c2c(p, n, ax, norm, True, "irfftn")
    return irfft(p, sizes[-1], axes[-1], norm)

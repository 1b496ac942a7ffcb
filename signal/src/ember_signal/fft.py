"""The Array API ``fft`` extension (seen as ``ember.fft``): the standard's functions on complex
tensors, with its ``n``, ``axis``/``axes``, ``s`` and ``norm`` arguments.

Complex tensors exist where the device holds complex dtypes (cpu); every transform is
:mod:`ember_signal.pairs` underneath, which works on every device and differentiates.

>>> import ember as em
>>> em.fft.fft(em.tensor([1.0, 0.0, 0.0, 0.0], dtype="complex64"))
tensor([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j], dtype=complex64, device=cpu:0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import ember as em
from ember.errors import DTypeError, InvalidArgumentError

from . import pairs
from .pairs import norm_axis

__all__ = [
    "fft",
    "ifft",
    "fftn",
    "ifftn",
    "rfft",
    "irfft",
    "rfftn",
    "irfftn",
    "hfft",
    "ihfft",
    "fft2",
    "ifft2",
    "rfft2",
    "irfft2",
    "fftfreq",
    "rfftfreq",
    "fftshift",
    "ifftshift",
    "to_pairs",
    "from_pairs",
]

_COMPLEX_OF = {"float32": "complex64", "float64": "complex128", "float16": "complex64", "bfloat16": "complex64"}


def _tensor(x: Any, op: str) -> Any:
    if not isinstance(x, em.Tensor):
        raise DTypeError(f"{op}: x must be an ember Tensor, got {type(x).__name__}")
    return x


def to_pairs(x: Any, op: str = "to_pairs") -> Any:
    """A complex (or real floating) tensor as (real, imag) pairs on a new last axis."""
    x = _tensor(x, op)
    if x.dtype.kind == "c":
        return em.stack([em.real(x), em.imag(x)], axis=-1)
    if x.dtype.kind == "f":
        return pairs.from_real(x)
    raise DTypeError(f"{op}: x must be a floating-point or complex tensor, got {x.dtype}")


def from_pairs(p: Any, op: str = "from_pairs", instead: str | None = None) -> Any:
    """(real, imag) pairs as a complex tensor; where the device holds no complex dtype this
    raises, and the pairs API (:mod:`ember_signal.pairs`) is the way."""
    p = pairs.check_pairs(p, op)
    target = em.dtypes.as_dtype(_COMPLEX_OF[p.dtype.name])
    if not p.device.capabilities.supports(target):
        raise DTypeError(
            f"{op}: {p.device} holds no {target} ({p.device.capabilities.why_not(target)}); use "
            f"{instead or 'ember_signal.pairs.' + op}, which returns (real, imag) pairs on every device"
        )
    return p[..., 0].astype(target) + p[..., 1].astype(target) * 1j


def _real_input(x: Any, op: str) -> Any:
    x = _tensor(x, op)
    if x.dtype.kind != "f":
        raise DTypeError(f"{op}: x must be a real floating-point tensor, got {x.dtype}")
    return x


def fft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """One-dimensional DFT along ``axis``."""
    return from_pairs(pairs.fft(to_pairs(x, "fft"), n, axis, norm), "fft")


def ifft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """One-dimensional inverse DFT along ``axis``."""
    return from_pairs(pairs.ifft(to_pairs(x, "ifft"), n, axis, norm), "ifft")


def fftn(
    x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str = "backward"
) -> Any:
    """n-dimensional DFT over ``axes``."""
    return from_pairs(pairs.fftn(to_pairs(x, "fftn"), s, axes, norm), "fftn")


def ifftn(
    x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str = "backward"
) -> Any:
    """n-dimensional inverse DFT over ``axes``."""
    return from_pairs(pairs.ifftn(to_pairs(x, "ifftn"), s, axes, norm), "ifftn")


def rfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """DFT of a real tensor: the non-negative frequencies."""
    return from_pairs(pairs.rfft(_real_input(x, "rfft"), n, axis, norm), "rfft")


def irfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """Inverse of :func:`rfft`: a real tensor."""
    return pairs.irfft(to_pairs(x, "irfft"), n, axis, norm)


def rfftn(
    x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str = "backward"
) -> Any:
    """n-dimensional DFT of a real tensor."""
    return from_pairs(pairs.rfftn(_real_input(x, "rfftn"), s, axes, norm), "rfftn")


def irfftn(
    x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] | None = None, norm: str = "backward"
) -> Any:
    """Inverse of :func:`rfftn`: a real tensor."""
    return pairs.irfftn(to_pairs(x, "irfftn"), s, axes, norm)


def hfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """DFT of a Hermitian-symmetric signal given by its first half: a real tensor."""
    return pairs.hfft(to_pairs(x, "hfft"), n, axis, norm)


def ihfft(x: Any, /, *, n: int | None = None, axis: int = -1, norm: str = "backward") -> Any:
    """Inverse of :func:`hfft`."""
    return from_pairs(pairs.ihfft(_real_input(x, "ihfft"), n, axis, norm), "ihfft")


def fft2(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1), norm: str = "backward") -> Any:
    """Two-dimensional DFT."""
    return fftn(x, s=s, axes=axes, norm=norm)


def ifft2(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1), norm: str = "backward") -> Any:
    """Two-dimensional inverse DFT."""
    return ifftn(x, s=s, axes=axes, norm=norm)


def rfft2(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1), norm: str = "backward") -> Any:
    """Two-dimensional DFT of a real tensor."""
    return rfftn(x, s=s, axes=axes, norm=norm)


def irfft2(x: Any, /, *, s: Sequence[int] | None = None, axes: Sequence[int] = (-2, -1), norm: str = "backward") -> Any:
    """Inverse of :func:`rfft2`."""
    return irfftn(x, s=s, axes=axes, norm=norm)


def _freq_args(n: Any, d: Any, op: str) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidArgumentError(f"{op}: n must be a positive int, got {n!r}")
    if not isinstance(d, (int, float)) or isinstance(d, bool) or d == 0:
        raise InvalidArgumentError(f"{op}: d must be a non-zero number, got {d!r}")


def fftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Any:
    """The sample frequencies of an n-point DFT with sample spacing ``d``."""
    _freq_args(n, d, "fftfreq")
    return em.tensor(np.fft.fftfreq(n, d), dtype=dtype or em.float32, device=device)


def rfftfreq(n: int, /, *, d: float = 1.0, dtype: Any = None, device: Any = None) -> Any:
    """The sample frequencies of :func:`rfft` of n points with sample spacing ``d``."""
    _freq_args(n, d, "rfftfreq")
    return em.tensor(np.fft.rfftfreq(n, d), dtype=dtype or em.float32, device=device)


def _shift(x: Any, axes: Any, inverse: bool, op: str) -> Any:
    x = _tensor(x, op)
    if axes is None:
        axes = list(range(x.ndim))
    elif isinstance(axes, int):
        axes = [axes]
    axes = [norm_axis(a, x.ndim, op) for a in axes]
    shifts = [(-(x.shape[a] // 2)) if inverse else x.shape[a] // 2 for a in axes]
    return em.roll(x, tuple(shifts), axis=tuple(axes)) if axes else x


def fftshift(x: Any, /, *, axes: int | Sequence[int] | None = None) -> Any:
    """Move the zero-frequency term to the centre of ``axes`` (all by default)."""
    return _shift(x, axes, False, "fftshift")


def ifftshift(x: Any, /, *, axes: int | Sequence[int] | None = None) -> Any:
    """The inverse of :func:`fftshift`."""
    return _shift(x, axes, True, "ifftshift")

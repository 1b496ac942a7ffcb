"""The one FFT primitive every transform here is built on: ``signal_dft``, a DFT along axis -2
of a real tensor of (real, imag) pairs (shape ``(..., n, 2)``).

Pairs rather than complex tensors because OpenCL and WGPU hold no complex dtypes and the core's
autodiff records real results only: on pairs the op runs, and differentiates, everywhere. The
reference is written in ember Tensor ops: a Stockham radix-4 FFT (log4(n) vectorised stages,
one radix-2 stage for odd powers) for powers of two, a direct DFT by matmul for short other
lengths, and Bluestein's chirp-z algorithm (three power-of-two FFTs, one of them precomputed)
for long ones. The cpu kernel calls numpy.fft, the cuda one cupy.fft (cuFFT); opencl and wgpu
run generated kernels of the same algorithms (kernels_opencl.py, kernels_wgpu.py). The gradient
of a DFT is the DFT of the opposite sign with the same scale.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

import ember as em

__all__ = ["signal_dft", "dft_pairs", "DIRECT_MAX"]

#: lengths up to this that are not powers of two use a direct DFT (matmul) in the reference
DIRECT_MAX = 64


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


@functools.lru_cache(maxsize=256)
def _twiddles(c: int, sign: int) -> tuple[np.ndarray, np.ndarray]:
    angle = sign * np.pi * np.arange(c, dtype=np.float64) / c
    return np.cos(angle), np.sin(angle)


@functools.lru_cache(maxsize=256)
def _twiddles4(c: int, h: int, sign: int) -> tuple[np.ndarray, np.ndarray]:
    """w^(h k), k < c, w = exp(sign 2 pi i / 4c): subsequence h's twiddles in a radix-4 stage."""
    angle = sign * 2.0 * np.pi * ((h * np.arange(c, dtype=np.int64)) % (4 * c)) / (4 * c)
    return np.cos(angle), np.sin(angle)


@functools.lru_cache(maxsize=64)
def _dft_matrix(n: int, sign: int) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(n, dtype=np.int64)
    angle = sign * 2.0 * np.pi * (np.outer(k, k) % n) / n
    return np.cos(angle), np.sin(angle)


@functools.lru_cache(maxsize=64)
def _bluestein_constants(n: int, sign: int) -> tuple[int, np.ndarray, np.ndarray]:
    """The size m of the power-of-two convolution, the chirp w_j = exp(sign*pi*i*j^2/n) and
    the FFT of the conjugate chirp laid out circularly (both complex128)."""
    m = 1 << (2 * n - 2).bit_length()
    j = np.arange(n, dtype=np.int64)
    chirp = np.exp(sign * 1j * np.pi * ((j * j) % (2 * n)) / n)
    b = np.zeros(m, dtype=np.complex128)
    b[:n] = np.conj(chirp)
    b[m - n + 1 :] = np.conj(chirp[1:])[::-1]
    return m, chirp, np.fft.fft(b)


def _const(values: np.ndarray, like: Any) -> Any:
    return em.tensor(values, dtype=like.dtype, device=like.device)


def _cmul(ar: Any, ai: Any, br: Any, bi: Any) -> tuple[Any, Any]:
    return ar * br - ai * bi, ar * bi + ai * br


def _radix2(re: Any, im: Any, b: int, h: int, c: int, sign: int) -> tuple[Any, Any]:
    """Merge pairs of length-c DFTs (B, 2h, c) into length-2c ones (B, h, 2c)."""
    re, im = re.reshape((b, 2, h, c)), im.reshape((b, 2, h, c))
    cr, ci = _twiddles(c, sign)
    tr, ti = _cmul(re[:, 1], im[:, 1], _const(cr, re), _const(ci, re))
    er, ei = re[:, 0], im[:, 0]
    return em.concat([er + tr, er - tr], axis=-1), em.concat([ei + ti, ei - ti], axis=-1)


def _radix4(re: Any, im: Any, b: int, q: int, c: int, sign: int) -> tuple[Any, Any]:
    """Merge fours of length-c DFTs (B, 4q, c) into length-4c ones (B, q, 4c): twiddle
    subsequences 1..3 by w^(h k), w = exp(sign 2 pi i / 4c), then a 4-point DFT whose
    roots are 1, sign*i, -1, -sign*i."""
    re, im = re.reshape((b, 4, q, c)), im.reshape((b, 4, q, c))
    parts = [(re[:, 0], im[:, 0])]
    for h in (1, 2, 3):
        cr, ci = _twiddles4(c, h, sign)
        parts.append(_cmul(re[:, h], im[:, h], _const(cr, re), _const(ci, re)))
    (t0r, t0i), (t1r, t1i), (t2r, t2i), (t3r, t3i) = parts
    ar, ai = t0r + t2r, t0i + t2i  # T0 + T2
    br, bi = t0r - t2r, t0i - t2i  # T0 - T2
    cr_, ci_ = t1r + t3r, t1i + t3i  # T1 + T3
    dr, di = t1r - t3r, t1i - t3i  # T1 - T3; sign*i*(T1 - T3) = (-sign*di, sign*dr)
    ys = [
        (ar + cr_, ai + ci_),
        (br - sign * di, bi + sign * dr),
        (ar - cr_, ai - ci_),
        (br + sign * di, bi - sign * dr),
    ]
    return em.concat([y[0] for y in ys], axis=-1), em.concat([y[1] for y in ys], axis=-1)


def _stockham(re: Any, im: Any, sign: int) -> tuple[Any, Any]:
    """Stockham autosort FFT of (B, n) parts, n a power of two: the state after each stage is
    the length-c DFTs of the r = n/c decimated subsequences, (B, r, c); radix-4 stages merge
    four of them at a time (log4(n) stages), one radix-2 stage when log2(n) is odd."""
    b, n = re.shape
    r, c = n, 1
    re, im = re.reshape((b, n, 1)), im.reshape((b, n, 1))
    while r > 1:
        if r % 4 == 0:
            re, im = _radix4(re, im, b, r // 4, c, sign)
            r, c = r // 4, 4 * c
        else:
            re, im = _radix2(re, im, b, r // 2, c, sign)
            r, c = r // 2, 2 * c
    return re.reshape((b, n)), im.reshape((b, n))


def _direct(re: Any, im: Any, sign: int) -> tuple[Any, Any]:
    wr, wi = _dft_matrix(re.shape[-1], sign)
    wr, wi = _const(wr, re), _const(wi, re)
    return re @ wr - im @ wi, re @ wi + im @ wr


def _bluestein(re: Any, im: Any, sign: int) -> tuple[Any, Any]:
    b, n = re.shape
    m, chirp, bhat = _bluestein_constants(n, sign)
    wr, wi = _const(chirp.real, re), _const(chirp.imag, re)
    ar, ai = _cmul(re, im, wr, wi)
    ar, ai = em.pad(ar, ((0, 0), (0, m - n))), em.pad(ai, ((0, 0), (0, m - n)))
    fr, fi = _stockham(ar, ai, -1)
    fr, fi = _cmul(fr, fi, _const(bhat.real / m, re), _const(bhat.imag / m, re))
    cr, ci = _stockham(fr, fi, 1)
    return _cmul(cr[:, :n], ci[:, :n], wr, wi)


def _transform(re: Any, im: Any, sign: int) -> tuple[Any, Any]:
    n = re.shape[-1]
    if n == 1:
        return re, im
    if _is_pow2(n):
        return _stockham(re, im, sign)
    if n <= DIRECT_MAX:
        return _direct(re, im, sign)
    return _bluestein(re, im, sign)


def _sample(rng: np.random.Generator, dtype: str) -> list[tuple[tuple[np.ndarray, ...], dict[str, Any]]]:
    """Inputs the conformance suite runs every native kernel (and the gradient) on: each path of the
    reference (n = 1, radix-4 only, radix 4 and 2, direct, Bluestein), both signs, a scale."""
    shapes = [((2, 1, 2), False, 1.0), ((2, 16, 2), False, 1.0), ((3, 8, 2), True, 0.5), ((2, 12, 2), True, 1.0),
              ((1, 100, 2), False, 0.25)]  # fmt: skip
    return [((rng.standard_normal(s),), {"inverse": inv, "scale": sc}) for s, inv, sc in shapes]


@em.backend_extension("signal_dft", sample=_sample, tolerance=100.0)
def signal_dft(x: Any, inverse: bool = False, scale: float = 1.0) -> Any:
    """DFT along axis -2 of (real, imag) pairs ``x`` of shape (..., n, 2), times ``scale``;
    ``inverse`` flips the sign of the exponent (no 1/n: the caller's ``scale`` says it)."""
    lead, n = tuple(x.shape[:-2]), x.shape[-2]
    flat = x.reshape((-1, n, 2))
    re, im = _transform(flat[:, :, 0], flat[:, :, 1], 1 if inverse else -1)
    out = em.stack([re, im], axis=-1)
    if scale != 1.0:
        out = out * scale
    return out.reshape(lead + (n, 2))


@signal_dft.vjp
def _signal_dft_vjp(ctx: Any, grad: Any) -> Any:
    # y = s F x is linear with adjoint s F^H, and F^H is the DFT of the opposite sign
    return signal_dft(grad, inverse=not ctx.params.get("inverse", False), scale=ctx.params.get("scale", 1.0))


@signal_dft.kernel("cpu")
def _signal_dft_cpu(backend: Any, x: Any, inverse: bool = False, scale: float = 1.0) -> Any:
    a = np.asarray(backend.to_numpy(x))
    z = a[..., 0] + 1j * a[..., 1]
    if a.dtype == np.float32:
        z = z.astype(np.complex64)
    out = np.fft.ifft(z, axis=-1, norm="forward") if inverse else np.fft.fft(z, axis=-1)
    if scale != 1.0:
        out *= scale
    res = np.empty(a.shape, dtype=a.dtype)
    res[..., 0], res[..., 1] = out.real, out.imag
    return backend.from_numpy(res)


@signal_dft.kernel("cuda")
def _signal_dft_cuda(backend: Any, x: Any, inverse: bool = False, scale: float = 1.0) -> Any:
    """cuFFT through CuPy (cuda handles are CuPy arrays). Written but not run here: the
    development machine has no GPU; the conformance suite checks it against the reference."""
    cp = backend.cp
    z = (x[..., 0] + 1j * x[..., 1]).astype(cp.complex64 if x.dtype == cp.float32 else cp.complex128)
    out = cp.fft.ifft(z, axis=-1, norm="forward") if inverse else cp.fft.fft(z, axis=-1)
    if scale != 1.0:
        out *= scale
    return cp.ascontiguousarray(cp.stack([out.real, out.imag], axis=-1).astype(x.dtype))


def dft_pairs(p: Any, axis: int, inverse: bool, scale: float) -> Any:
    """``signal_dft`` of pairs ``p`` (shape (..., 2)) along ``axis`` of the complex shape."""
    last = p.ndim - 2
    if axis != last:
        p = em.moveaxis(p, axis, last)
    out = signal_dft(p, inverse=inverse, scale=float(scale))
    return em.moveaxis(out, last, axis) if axis != last else out


# the generated kernels of opencl and wgpu, registered where those backends are installed (they import
# neither pyopencl nor wgpu until a kernel runs)
from . import kernels_opencl, kernels_wgpu  # noqa: E402

kernels_opencl.register(signal_dft)
kernels_wgpu.register(signal_dft)

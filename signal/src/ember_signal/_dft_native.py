"""The plan shared by the generated ``signal_dft`` kernels of opencl and wgpu: which launches a
length-n DFT of a batch of rows takes, and the small constant tables they read (computed in
float64 on the host, uploaded once per device, dtype and size).

A backend supplies five primitives (:class:`Launcher`): ``empty``, ``upload`` and three kernels,
``stage`` (one Stockham radix-2 or radix-4 stage), ``chirp`` (rows times a table, with zero
padding or cropping: Bluestein's chirps and its convolution spectrum) and ``direct`` (an O(n^2)
DFT for short lengths that are not powers of two). Bluestein is built from the same stages.
"""

from __future__ import annotations

import functools
import importlib.util
import weakref
from collections import OrderedDict
from typing import Any, Protocol

import numpy as np

from .transform import DIRECT_MAX, _bluestein_constants, _is_pow2

__all__ = ["Launcher", "register_when_installed", "run_pairs", "transform", "stages", "tables_for"]

#: tables kept per device (least recently used dropped first)
_TABLES_PER_DEVICE = 32
_TABLES: weakref.WeakKeyDictionary[Any, OrderedDict[Any, Any]] = weakref.WeakKeyDictionary()


class Launcher(Protocol):
    """What a backend provides; a buffer reference is (handle, element offset)."""

    rt: Any

    def empty(self, count: int) -> Any: ...
    def upload(self, pairs: np.ndarray) -> Any: ...
    def stage(
        self, radix: int, src: Any, dst: Any, tw: Any, rows: int, n: int, c: int, sign: int, scale: float
    ) -> None: ...
    def chirp(
        self, src: Any, dst: Any, tab: Any, rows: int, stride: int, n_in: int, n_out: int, scale: float
    ) -> None: ...
    def direct(self, src: Any, dst: Any, tw: Any, rows: int, n: int, sign: int, scale: float) -> None: ...


def stages(n: int) -> list[int]:
    """The radices of a Stockham FFT of power-of-two ``n``: radix 4 while it divides, then one radix 2
    (the reference's order, so both round alike)."""
    out, r = [], n
    while r > 1:
        out.append(4 if r % 4 == 0 else 2)
        r //= out[-1]
    return out


@functools.lru_cache(maxsize=64)
def _roots(n: int) -> np.ndarray:
    """exp(2 pi i j / n), j < n, as (re, im) pairs; kernels flip the imaginary part for sign -1."""
    angle = 2.0 * np.pi * np.arange(n, dtype=np.float64) / n
    return np.stack([np.cos(angle), np.sin(angle)], axis=-1)


def _pairs(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


def tables_for(launcher: Launcher, key: Any, make: Any) -> Any:
    """The uploaded table ``key`` of this device (``make()`` gives its float64 pairs on a miss)."""
    cache = _TABLES.setdefault(launcher.rt, OrderedDict())
    found = cache.get(key)
    if found is None:
        found = launcher.upload(make())
        cache[key] = found
        while len(cache) > _TABLES_PER_DEVICE:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return found


def _fft(k: Launcher, src: Any, dst: Any, rows: int, n: int, sign: int, scale: float, dtype: str) -> None:
    """Stockham FFT of power-of-two ``n`` from ``src`` into ``dst`` (ping-pong through one scratch
    buffer; the last stage writes ``dst`` and applies ``scale``)."""
    plan = stages(n)
    tw = tables_for(k, ("roots", dtype, n), lambda: _roots(n))
    scratch = (k.empty(rows * n), 0) if len(plan) > 1 else None
    # targets from the last stage backwards: dst, scratch, dst, ...
    targets = [dst if (len(plan) - 1 - i) % 2 == 0 else scratch for i in range(len(plan))]
    c = 1
    for i, radix in enumerate(plan):
        last = i == len(plan) - 1
        k.stage(radix, src, targets[i], tw, rows, n, c, sign, scale if last else 1.0)
        src, c = targets[i], c * radix


def transform(k: Launcher, src: Any, dst: Any, rows: int, n: int, inverse: bool, scale: float, dtype: str) -> None:
    """``dst`` = DFT of the ``rows`` rows of ``n`` pairs at ``src`` (the sign of ``inverse``), times ``scale``."""
    sign = 1 if inverse else -1
    if n == 1:
        one = tables_for(k, ("one", dtype), lambda: np.array([[1.0, 0.0]]))
        k.chirp(src, dst, one, rows, 1, 1, 1, scale)
    elif _is_pow2(n):
        _fft(k, src, dst, rows, n, sign, scale, dtype)
    elif n <= DIRECT_MAX:
        k.direct(src, dst, tables_for(k, ("roots", dtype, n), lambda: _roots(n)), rows, n, sign, scale)
    else:  # Bluestein: chirp, FFT of size m, times the chirp's spectrum, inverse FFT, chirp
        m, chirp, bhat = _bluestein_constants(n, sign)
        w = tables_for(k, ("chirp", dtype, n, sign), lambda: _pairs(chirp))
        spec = tables_for(k, ("bhat", dtype, n, sign), lambda: _pairs(bhat / m))
        a, b = (k.empty(rows * m), 0), (k.empty(rows * m), 0)
        k.chirp(src, a, w, rows, n, n, m, 1.0)
        _fft(k, a, b, rows, m, -1, 1.0, dtype)
        k.chirp(b, a, spec, rows, m, m, m, 1.0)
        _fft(k, a, b, rows, m, 1, 1.0, dtype)
        k.chirp(b, dst, w, rows, m, n, n, scale)


def run_pairs(backend: Any, x: Any, work: Any, launcher: Launcher, inverse: bool, scale: float) -> Any:
    """The body both backends' ``signal_dft`` kernels share: ``x`` (..., n, 2) in the working
    dtype ``work`` (cast there and back when it differs), contiguous, transformed row by row."""
    cast = backend.implementation("cast")
    src = backend.make_contiguous(x if x.dtype == work else cast(x, dtype=work))
    out = backend.rt.empty(tuple(src.shape), work)
    n = src.shape[-2]
    rows = int(np.prod(src.shape[:-2], dtype=np.int64))
    if rows and n:
        transform(launcher, (src, src.offset), (out, 0), rows, n, inverse, scale, work.name)
    return out if x.dtype == work else cast(out, dtype=x.dtype)


def register_when_installed(op: Any, kind: str, distribution: str, kernel: Any) -> bool:
    """Register ``kernel`` as ``op``'s native kernel for ``kind`` when the backend's package
    ``distribution`` is installed (it is not imported here); whether it was."""
    if importlib.util.find_spec(distribution) is None:
        return False
    op.kernel(kind)(kernel)
    return True

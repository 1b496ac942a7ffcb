"""The ``signal_dft`` kernel for ``opencl`` devices: Stockham radix-4/2 stages, a direct DFT for
short lengths and Bluestein for the rest, in OpenCL C compiled and launched through ember-opencl's
runtime (``backend.rt``: its program and kernel caches, buffer pool and queue). float32, and float64
where the device has cl_khr_fp64; other float dtypes run in float32. Registered only when
ember-opencl is installed; nothing here imports pyopencl. ``CALLS`` counts launches by kernel.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from . import _dft_native

__all__ = ["register", "CALLS"]

#: launches of each kernel (tests and benchmarks read it)
CALLS: Counter[str] = Counter()
_CTYPE = {"float32": ("float", np.float32), "float64": ("double", np.float64)}

# every kernel walks its items with a grid-stride loop (one item per work item on CPUs, a capped grid
# on GPUs: the runtime's rt.grid); src/dst are (re, im) pairs, ``os`` the source's element offset
_SOURCE = """{pragma}#define T {ctype}
#define GRID(total) for (long g = get_global_id(0); g < (total); g += get_global_size(0))
/* (vr, vi) = src[a] * w^j, the root's imaginary part times sg */
#define TWID(vr, vi, a, j) const T vr##_ = src[a], vi##_ = src[(a) + 1], vr##w = tw[j], vi##w = sg * tw[(j) + 1]; \
    const T vr = vr##_ * vr##w - vi##_ * vi##w, vi = vr##_ * vi##w + vi##_ * vr##w;

/* one radix-2 stage: pairs of length-c DFTs at i and i + n/2 merge into one of length 2c */
__kernel void sig_dft_r2(__global T* restrict dst, __global const T* restrict src, const long os,
                         __global const T* restrict tw, const long total, const int ln, const int lc,
                         const int ts, const T sg, const T scale) {{
    const int h = 1 << (ln - 1), c = 1 << lc;
    GRID(total) {{
        const long base = (g >> (ln - 1)) << ln;
        const int i = (int)(g & (h - 1)), k = i & (c - 1);
        const long e = os + 2 * (base + i), o = e + 2 * (long)h;
        const long j = 2 * (long)(k * ts);
        const T wr = tw[j], wi = sg * tw[j + 1];
        const T orr = src[o], oi = src[o + 1];
        const T tr = orr * wr - oi * wi, ti = orr * wi + oi * wr;
        const T er = src[e], ei = src[e + 1];
        const long y = 2 * (base + ((long)(i >> lc) << (lc + 1)) + k);
        dst[y] = (er + tr) * scale; dst[y + 1] = (ei + ti) * scale;
        dst[y + 2 * c] = (er - tr) * scale; dst[y + 2 * c + 1] = (ei - ti) * scale;
    }}
}}

/* one radix-4 stage: fours of length-c DFTs at i + h n/4 (h < 4) merge into one of length 4c */
__kernel void sig_dft_r4(__global T* restrict dst, __global const T* restrict src, const long os,
                         __global const T* restrict tw, const long total, const int ln, const int lc,
                         const int ts, const T sg, const T scale) {{
    const int q = 1 << (ln - 2), c = 1 << lc;
    GRID(total) {{
        const long base = (g >> (ln - 2)) << ln;
        const int i = (int)(g & (q - 1)), k = i & (c - 1);
        const long x = os + 2 * (base + i);
        const long s1 = 2 * (long)q, j1 = 2 * (long)(k * ts);
        const T r0 = src[x], m0 = src[x + 1];
        TWID(r1, m1, x + s1, j1) TWID(r2, m2, x + 2 * s1, 2 * j1) TWID(r3, m3, x + 3 * s1, 3 * j1)
        const T ar = r0 + r2, ai = m0 + m2, br = r0 - r2, bi = m0 - m2;
        const T cr = r1 + r3, ci = m1 + m3, dr = r1 - r3, di = m1 - m3;
        const long y = 2 * (base + ((long)(i >> lc) << (lc + 2)) + k), s = 2 * (long)c;
        dst[y] = (ar + cr) * scale;              dst[y + 1] = (ai + ci) * scale;
        dst[y + s] = (br - sg * di) * scale;     dst[y + s + 1] = (bi + sg * dr) * scale;
        dst[y + 2 * s] = (ar - cr) * scale;      dst[y + 2 * s + 1] = (ai - ci) * scale;
        dst[y + 3 * s] = (br + sg * di) * scale; dst[y + 3 * s + 1] = (bi - sg * dr) * scale;
    }}
}}

/* dst[row, j] = src[row, j] * tab[j] * scale for j < n_in, 0 beyond (n_out may pad or crop) */
__kernel void sig_dft_chirp(__global T* restrict dst, __global const T* restrict src, const long os,
                            __global const T* restrict tab, const long total, const long stride,
                            const long n_in, const long n_out, const T scale) {{
    GRID(total) {{
        const long row = g / n_out, j = g - row * n_out;
        T vr = 0, vi = 0;
        if (j < n_in) {{
            const long a = os + 2 * (row * stride + j);
            const T xr = src[a], xi = src[a + 1], wr = tab[2 * j], wi = tab[2 * j + 1];
            vr = (xr * wr - xi * wi) * scale; vi = (xr * wi + xi * wr) * scale;
        }}
        dst[2 * g] = vr; dst[2 * g + 1] = vi;
    }}
}}

/* a direct DFT, one output per work item: sum_j x_j w^(jk mod n) */
__kernel void sig_dft_direct(__global T* restrict dst, __global const T* restrict src, const long os,
                             __global const T* restrict tw, const long total, const int n,
                             const T sg, const T scale) {{
    GRID(total) {{
        const long row = g / n;
        const int k = (int)(g - row * n);
        __global const T* x = src + os + 2 * row * n;
        T sr = 0, si = 0;
        int p = 0;
        for (int j = 0; j < n; ++j) {{
            const T wr = tw[2 * p], wi = sg * tw[2 * p + 1], xr = x[2 * j], xi = x[2 * j + 1];
            sr += xr * wr - xi * wi; si += xr * wi + xi * wr;
            p += k; if (p >= n) p -= n;
        }}
        dst[2 * g] = sr * scale; dst[2 * g + 1] = si * scale;
    }}
}}
"""

_NAMES = ("sig_dft_r2", "sig_dft_r4", "sig_dft_chirp", "sig_dft_direct")


class _Launcher:
    """The primitives of :mod:`ember_signal._dft_native` on one OpenCL runtime and dtype."""

    def __init__(self, backend: Any, dtype: Any) -> None:
        self.rt, self.dtype = backend.rt, dtype
        self.ctype, self.host = _CTYPE[dtype.name]
        self.name = dtype.name

    def _kernel(self, name: str) -> tuple[Any, int]:
        h, i, L = self.host, np.int32, np.int64
        argtypes = {
            "sig_dft_r2": [None, None, L, None, L, i, i, i, h, h],
            "sig_dft_r4": [None, None, L, None, L, i, i, i, h, h],
            "sig_dft_chirp": [None, None, L, None, L, L, L, L, h],
            "sig_dft_direct": [None, None, L, None, L, i, h, h],
        }[name]
        pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if self.ctype == "double" else ""
        source = _SOURCE.format(pragma=pragma, ctype=self.ctype)
        return self.rt.kernel(("ember_signal", name, self.ctype), lambda: (source, name, argtypes))

    def _run(self, name: str, total: int, args: list[Any]) -> None:
        knl, wg = self._kernel(name)
        gsize, lsize = self.rt.grid(total, wg)
        CALLS[name] += 1
        self.rt.launch(knl, gsize, lsize, args)

    def empty(self, count: int) -> Any:
        return self.rt.empty((count, 2), self.dtype)

    def upload(self, pairs: np.ndarray) -> Any:
        return (self.rt.upload(np.ascontiguousarray(pairs, dtype=self.host), self.dtype), 0)

    def stage(
        self, radix: int, src: Any, dst: Any, tw: Any, rows: int, n: int, c: int, sign: int, scale: float
    ) -> None:
        ln, lc = n.bit_length() - 1, c.bit_length() - 1
        h = self.host
        args = [
            dst[0].buf,
            src[0].buf,
            src[1],
            tw[0].buf,
            rows * n // radix,
            ln,
            lc,
            n // (radix * c),
            h(sign),
            h(scale),
        ]
        self._run("sig_dft_r4" if radix == 4 else "sig_dft_r2", rows * n // radix, args)

    def chirp(self, src: Any, dst: Any, tab: Any, rows: int, stride: int, n_in: int, n_out: int, scale: float) -> None:
        args = [dst[0].buf, src[0].buf, src[1], tab[0].buf, rows * n_out, stride, n_in, n_out, self.host(scale)]
        self._run("sig_dft_chirp", rows * n_out, args)

    def direct(self, src: Any, dst: Any, tw: Any, rows: int, n: int, sign: int, scale: float) -> None:
        h = self.host
        args = [dst[0].buf, src[0].buf, src[1], tw[0].buf, rows * n, n, h(sign), h(scale)]
        self._run("sig_dft_direct", rows * n, args)


def _signal_dft_opencl(backend: Any, x: Any, inverse: bool = False, scale: float = 1.0) -> Any:
    """``signal_dft`` of the pairs ``x`` (..., n, 2) in generated kernels (float64 kept where the
    device has it; float16/bfloat16 computed in float32 and cast back)."""
    import ember as em

    work = em.float64 if x.dtype.name == "float64" and backend.rt.fp64 else em.float32
    return _dft_native.run_pairs(backend, x, work, _Launcher(backend, work), inverse, scale)


def register(op: Any, kind: str = "opencl") -> bool:
    """Register the kernel for ``kind`` when ember-opencl is installed; whether it was."""
    return _dft_native.register_when_installed(op, kind, "ember_opencl", _signal_dft_opencl)

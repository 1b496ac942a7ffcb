"""Native ``linalg_svd``, ``linalg_lu``, ``linalg_solve`` and ``linalg_slogdet`` kernels for
``opencl`` devices: the launches of :mod:`ember_linalg._native` (one-sided Jacobi with round-robin
pairs, one work-group per pair; LU with partial pivoting, two launches per column) in OpenCL C,
compiled and launched through ember-opencl's runtime (``backend.rt``). float32, and float64 where
the device has cl_khr_fp64 (complex tensors do not exist there). Registered only when ember-opencl
is installed; nothing here imports pyopencl. ``CALLS`` counts launches by kernel.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from . import _native

__all__ = ["register", "CALLS"]

#: launches of each kernel (tests and benchmarks read it)
CALLS: Counter[str] = Counter()
_CTYPE = {"float32": ("float", np.float32), "float64": ("double", np.float64)}

# element kernels walk their items with a grid-stride loop (rt.grid); reduction kernels run one
# work-group of WG items per matrix, column pair or column
_SOURCE = """{pragma}#define T {ctype}
#define WG {wg}
#define GRID(total) for (long g = get_global_id(0); g < (total); g += get_global_size(0))
#define SUM3(x, y, z) x[t] = x##v; y[t] = y##v; z[t] = z##v; barrier(CLK_LOCAL_MEM_FENCE); \\
    for (int h = WG / 2; h > 0; h >>= 1) {{ \\
        if (t < h) {{ x[t] += x[t + h]; y[t] += y[t + h]; z[t] += z[t + h]; }} \\
        barrier(CLK_LOCAL_MEM_FENCE); }}

/* the largest |x[i * step]| over lo <= i < hi, first index on ties, into (bv[0], bi[0]) */
#define ARGMAX(x, step, lo, hi) {{ T best = -1; int ix = lo; \\
    for (int i = lo + t; i < (hi); i += WG) {{ \\
        const T v = fabs((x)[(long)i * (step)]); if (v > best) {{ best = v; ix = i; }} }} \\
    bv[t] = best; bi[t] = ix; barrier(CLK_LOCAL_MEM_FENCE); \\
    for (int h = WG / 2; h > 0; h >>= 1) {{ \\
        if (t < h && (bv[t + h] > bv[t] || (bv[t + h] == bv[t] && bi[t + h] < bi[t]))) {{ \\
            bv[t] = bv[t + h]; bi[t] = bi[t + h]; }} \\
        barrier(CLK_LOCAL_MEM_FENCE); }} }}

/* at (batch, nc, la) <- the columns to rotate (tall: A's columns; wide: A's rows); vt <- I */
__kernel void la_svd_init(__global T* restrict at, __global T* restrict vt, __global const T* restrict a,
                          const long ao, const long total, const int m, const int n, const int nc, const int la,
                          const int wide) {{
    const long cols = (long)nc * la, per = cols + (long)nc * nc;
    GRID(total) {{
        const long b = g / per, r = g - b * per;
        if (r < cols) {{
            const long j = r / la, i = r - j * la;
            at[b * cols + r] = a[ao + b * m * (long)n + (wide ? j * n + i : i * n + j)];
        }} else {{
            const long q = r - cols, j = q / nc;
            vt[b * nc * (long)nc + q] = (q - j * nc == j) ? (T)1 : (T)0;
        }}
    }}
}}

/* one round: group (b, k) rotates columns p, q of matrix b (rows p, q of at and of vt) */
__kernel void la_jacobi(__global T* restrict at, __global T* restrict vt, __global const int* restrict pairs,
                        __global T* restrict conv, const int rnd, const int hp, const int nc, const int la,
                        const T tol) {{
    __local T sa[WG], sb[WG], sg[WG];
    const int grp = get_group_id(0), t = get_local_id(0);
    const int b = grp / hp, k = grp - b * hp;
    const int p = pairs[2 * (rnd * hp + k)], q = pairs[2 * (rnd * hp + k) + 1];
    /* a padding pair (q == nc) still reaches the barriers: PoCL cannot tell that the whole group
       leaves together and corrupted memory when it returned before them */
    const int live = q < nc;
    __global T* x = at + ((long)b * nc + (live ? p : 0)) * la;
    __global T* y = at + ((long)b * nc + (live ? q : 0)) * la;
    T sav = 0, sbv = 0, sgv = 0;
    for (int i = t; live && i < la; i += WG) {{ const T u = x[i], v = y[i]; sav += u * u; sbv += v * v; sgv += u * v; }}
    SUM3(sa, sb, sg)
    if (!live) {{ if (rnd == 0 && t == 0) conv[grp] = 0; return; }}
    const T al = sa[0], be = sb[0], ga = sg[0];
    const T norm = sqrt(al) * sqrt(be);
    const T mu = norm > 0 ? fabs(ga) / norm : (T)0;
    if (t == 0) conv[grp] = rnd == 0 ? mu : fmax(conv[grp], mu);
    if (!(mu > tol)) return;
    const T zeta = (be - al) / (2 * ga);
    const T tn = (zeta < 0 ? (T)-1 : (T)1) / (fabs(zeta) + sqrt(1 + zeta * zeta));
    const T c = 1 / sqrt(1 + tn * tn), s = c * tn;
    for (int i = t; i < la; i += WG) {{ const T u = x[i], v = y[i]; x[i] = c * u - s * v; y[i] = s * u + c * v; }}
    __global T* vx = vt + ((long)b * nc + p) * nc;
    __global T* vy = vt + ((long)b * nc + q) * nc;
    for (int i = t; i < nc; i += WG) {{ const T u = vx[i], v = vy[i]; vx[i] = c * u - s * v; vy[i] = s * u + c * v; }}
}}

/* s[row] = the 2-norm of row ``row`` of at */
__kernel void la_col_norms(__global const T* restrict at, __global T* restrict s, const int la) {{
    __local T sa[WG], sb[WG], sg[WG];
    const int grp = get_group_id(0), t = get_local_id(0);
    __global const T* x = at + (long)grp * la;
    T sav = 0, sbv = 0, sgv = 0;
    for (int i = t; i < la; i += WG) sav += x[i] * x[i];
    SUM3(sa, sb, sg)
    if (t == 0) s[grp] = sqrt(sa[0]);
}}

/* group (b, kk): column kk of U, S[kk] and row kk of Vh from sorted column order[b, kk], the sign
   making U's largest-magnitude entry positive; tall: U from at / s and Vh from vt, wide: the reverse */
__kernel void la_svd_finish(__global const T* restrict at, __global const T* restrict vt,
                            __global const T* restrict s, __global const int* restrict order,
                            __global T* restrict out, const int m, const int n, const int nc, const int la,
                            const int wide) {{
    __local T bv[WG]; __local int bi[WG];
    const int grp = get_group_id(0), t = get_local_id(0);
    const int b = grp / nc, kk = grp - b * nc, src = order[grp];
    const T sv = s[b * nc + src], sd = sv == 0 ? (T)1 : sv;
    __global const T* ra = at + ((long)b * nc + src) * la;
    __global const T* rv = vt + ((long)b * nc + src) * nc;
    __global const T* x = wide ? rv : ra;
    __global const T* y = wide ? ra : rv;
    const T dx = wide ? (T)1 : sd, dy = wide ? sd : (T)1;
    ARGMAX(x, 1, 0, m)
    const T sign = x[bi[0]] < 0 ? (T)-1 : (T)1;
    __global T* o = out + (long)b * ((long)m * nc + nc + (long)nc * n);
    for (int i = t; i < m; i += WG) o[(long)i * nc + kk] = sign * (x[i] / dx);
    if (t == 0) o[(long)m * nc + kk] = sv;
    for (int j = t; j < n; j += WG) o[(long)m * nc + nc + (long)kk * n + j] = sign * (y[j] / dy);
}}

/* w (batch, m, n + r) <- [A | B], perm <- identity, sgn <- 1 */
__kernel void la_lu_init(__global T* restrict w, __global int* restrict perm, __global T* restrict sgn,
                         __global const T* restrict a, const long ao, __global const T* restrict rhs, const long bo,
                         const long total, const int m, const int n, const int r) {{
    const long wd = n + r, per = m * wd;
    GRID(total) {{
        const long b = g / per, q = g - b * per, i = q / wd, c = q - i * wd;
        w[g] = c < n ? a[ao + (b * m + i) * n + c] : rhs[bo + (b * m + i) * r + (c - n)];
        if (c == 0) perm[b * m + i] = (int)i;
        if (q == 0) sgn[b] = 1;
    }}
}}

/* column j of matrix (group) b: pivot search below the diagonal, row swap, scaling below the pivot */
__kernel void la_lu_pivot(__global T* restrict w, __global int* restrict perm, __global T* restrict sgn,
                          const int j, const int m, const int wd) {{
    __local T bv[WG]; __local int bi[WG];
    const int b = get_group_id(0), t = get_local_id(0);
    __global T* x = w + (long)b * m * wd;
    ARGMAX(x + j, wd, j, m)
    const int p = bi[0];
    if (p != j) {{
        for (int c = t; c < wd; c += WG) {{
            const T u = x[(long)j * wd + c]; x[(long)j * wd + c] = x[(long)p * wd + c]; x[(long)p * wd + c] = u;
        }}
        if (t == 0) {{
            const int e = perm[b * m + j]; perm[b * m + j] = perm[b * m + p]; perm[b * m + p] = e; sgn[b] = -sgn[b];
        }}
    }}
    barrier(CLK_GLOBAL_MEM_FENCE);
    const T pivot = x[(long)j * wd + j], safe = pivot == 0 ? (T)1 : pivot;
    for (int i = j + 1 + t; i < m; i += WG) x[(long)i * wd + j] /= safe;
}}

/* the trailing rank-1 update after column j: w[i, c] -= w[i, j] w[j, c] for i, c > j */
__kernel void la_lu_update(__global T* restrict w, const long total, const int j, const int m, const int wd) {{
    const long rows = m - j - 1, cols = wd - j - 1, per = rows * cols;
    GRID(total) {{
        const long b = g / per, q = g - b * per, i = j + 1 + q / cols, c = j + 1 + q % cols;
        __global T* x = w + b * m * wd;
        x[i * wd + c] -= x[i * wd + j] * x[(long)j * wd + c];
    }}
}}

/* out (batch, m*m + m*k + k*n) <- P, L, U from the factored w */
__kernel void la_lu_pack(__global const T* restrict w, __global const int* restrict perm, __global T* restrict out,
                         const long total, const int m, const int n, const int wd) {{
    const long k = min(m, n), per = (long)m * m + m * k + k * n;
    GRID(total) {{
        const long b = g / per, q = g - b * per;
        __global const T* x = w + b * m * wd;
        T v;
        if (q < (long)m * m) {{
            const long i = q / m, c = q - i * m;
            v = perm[b * m + c] == i ? (T)1 : (T)0;
        }} else if (q < (long)m * m + m * k) {{
            const long e = q - (long)m * m, i = e / k, c = e - i * k;
            v = i > c ? x[i * wd + c] : (i == c ? (T)1 : (T)0);
        }} else {{
            const long e = q - (long)m * m - m * k, i = e / n, c = e - i * n;
            v = c >= i ? x[i * wd + c] : (T)0;
        }}
        out[g] = v;
    }}
}}

/* w (batch, n, n + r) <- [A | B], or [A^T | B^T] (tr: B is (r, n)), for a triangular solve */
__kernel void la_tri_init(__global T* restrict w, __global const T* restrict a, const long ao,
                          __global const T* restrict rhs, const long bo, const long total, const int n, const int r,
                          const int tr) {{
    const long wd = n + r, per = n * wd;
    GRID(total) {{
        const long b = g / per, q = g - b * per, i = q / wd, c = q - i * wd;
        w[g] = c < n ? a[ao + b * n * (long)n + (tr ? c * n + i : i * n + c)]
                     : rhs[bo + b * n * (long)r + (tr ? (c - n) * n + i : i * r + (c - n))];
    }}
}}

/* substitution, column j of the triangle: y[i] -= t[i, j] y[j] / t[j, j] for i < j (upper) or i > j
   (lower), y being w's last r columns; t[j, j] taken as 1 when unit */
__kernel void la_back(__global T* restrict w, const long total, const int j, const int n, const int r,
                      const int lower, const int unit) {{
    const long wd = n + r, per = (long)(lower ? n - 1 - j : j) * r, i0 = lower ? j + 1 : 0;
    GRID(total) {{
        const long b = g / per, q = g - b * per, i = i0 + q / r, c = q - (q / r) * r;
        __global T* x = w + b * n * wd;
        const T d = unit ? (T)1 : x[(long)j * wd + j];
        x[i * wd + n + c] -= x[i * wd + j] * (x[(long)j * wd + n + c] / d);
    }}
}}

/* out (batch, n, r), or (batch, r, n) when tr, <- y[i] / t[i, i] (1 when unit) */
__kernel void la_back_finish(__global const T* restrict w, __global T* restrict out, const long total, const int n,
                             const int r, const int unit, const int tr) {{
    const long wd = n + r, per = (long)n * r;
    GRID(total) {{
        const long b = g / per, q = g - b * per, i = q / r, c = q - i * r;
        __global const T* x = w + b * n * wd;
        out[tr ? b * per + c * n + i : g] = x[i * wd + n + c] / (unit ? (T)1 : x[i * wd + i]);
    }}
}}

/* out (batch, 2) <- (sign, log|det|) from U's diagonal and the permutation's sign */
__kernel void la_logdet(__global const T* restrict w, __global const T* restrict sgn, __global T* restrict out,
                        const long total, const int n) {{
    GRID(total) {{
        __global const T* x = w + g * n * (long)n;
        T sign = sgn[g], acc = 0;
        int zero = 0;
        for (int i = 0; i < n; ++i) {{
            const T d = x[(long)i * n + i];
            if (d < 0) sign = -sign;
            if (d == 0) zero = 1;
            acc += log(fabs(d));
        }}
        out[2 * g] = zero ? (T)0 : sign; out[2 * g + 1] = acc;
    }}
}}
"""


class _Launcher:
    """The primitives of :mod:`ember_linalg._native` on one OpenCL runtime and dtype."""

    def __init__(self, backend: Any, dtype: Any) -> None:
        import ember as em

        self.rt, self.dtype, self.int32 = backend.rt, dtype, em.int32
        self.ctype, self.host = _CTYPE[dtype.name]
        self.wg = 64 if self.rt.is_cpu else 256

    def _kernel(self, name: str) -> Any:
        h, i, L = self.host, np.int32, np.int64
        argtypes = {
            "la_svd_init": [None, None, None, L, L, i, i, i, i, i],
            "la_jacobi": [None, None, None, None, i, i, i, i, h],
            "la_col_norms": [None, None, i],
            "la_svd_finish": [None, None, None, None, None, i, i, i, i, i],
            "la_lu_init": [None, None, None, None, L, None, L, L, i, i, i],
            "la_lu_pivot": [None, None, None, i, i, i],
            "la_lu_update": [None, L, i, i, i],
            "la_lu_pack": [None, None, None, L, i, i, i],
            "la_tri_init": [None, None, L, None, L, L, i, i, i],
            "la_back": [None, L, i, i, i, i, i],
            "la_back_finish": [None, None, L, i, i, i, i],
            "la_logdet": [None, None, None, L, i],
        }[name]
        pragma = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" if self.ctype == "double" else ""
        source = _SOURCE.format(pragma=pragma, ctype=self.ctype, wg=self.wg)
        key = ("ember_linalg", name, self.ctype, self.wg)
        return self.rt.kernel(key, lambda: (source, name, argtypes))[0]

    def _grid(self, name: str, total: int, args: list[Any]) -> None:
        """An element kernel over ``total`` items (the first argument after the buffers)."""
        if total <= 0:
            return
        knl = self._kernel(name)
        gsize, lsize = self.rt.grid(total, self.wg)
        CALLS[name] += 1
        self.rt.launch(knl, gsize, lsize, args)

    def _groups(self, name: str, groups: int, args: list[Any]) -> None:
        """A reduction kernel, one work-group of ``wg`` items per group."""
        if groups <= 0:
            return
        knl = self._kernel(name)
        CALLS[name] += 1
        self.rt.launch(knl, (groups * self.wg,), (self.wg,), args)

    def empty(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        return self.rt.empty(shape, self.int32 if dtype == "int32" else self.dtype)

    def upload_int(self, values: np.ndarray) -> Any:
        return self.rt.upload(np.ascontiguousarray(values, dtype=np.int32), self.int32)

    def upload(self, values: np.ndarray) -> Any:
        return self.rt.upload(np.ascontiguousarray(values, dtype=self.host), self.dtype)

    def download(self, h: Any) -> np.ndarray:
        return self.rt.download(h)

    def svd_init(self, a: Any, at: Any, vt: Any, batch: int, m: int, n: int, wide: bool) -> None:
        nc, la = (m, n) if wide else (n, m)
        total = batch * (nc * la + nc * nc)
        self._grid("la_svd_init", total, [at.buf, vt.buf, a.buf, a.offset, total, m, n, nc, la, int(wide)])

    def jacobi_round(
        self, at: Any, vt: Any, pairs: Any, conv: Any, batch: int, nc: int, la: int, half: int, rnd: int, tol: float
    ) -> None:
        args = [at.buf, vt.buf, pairs.buf, conv.buf, rnd, half, nc, la, self.host(tol)]
        self._groups("la_jacobi", batch * half, args)

    def col_norms(self, at: Any, s: Any, rows: int, la: int) -> None:
        self._groups("la_col_norms", rows, [at.buf, s.buf, la])

    def svd_finish(
        self, at: Any, vt: Any, s: Any, order: Any, out: Any, batch: int, m: int, n: int, wide: bool
    ) -> None:
        nc, la = (m, n) if wide else (n, m)
        args = [at.buf, vt.buf, s.buf, order.buf, out.buf, m, n, nc, la, int(wide)]
        self._groups("la_svd_finish", batch * nc, args)

    def lu_init(self, a: Any, b: Any, w: Any, perm: Any, sgn: Any, batch: int, m: int, n: int, r: int) -> None:
        total = batch * m * (n + r)
        args = [w.buf, perm.buf, sgn.buf, a.buf, a.offset, b.buf, b.offset, total, m, n, r]
        self._grid("la_lu_init", total, args)

    def lu_pivot(self, w: Any, perm: Any, sgn: Any, batch: int, m: int, wd: int, j: int) -> None:
        self._groups("la_lu_pivot", batch, [w.buf, perm.buf, sgn.buf, j, m, wd])

    def lu_update(self, w: Any, batch: int, m: int, wd: int, j: int) -> None:
        total = batch * (m - j - 1) * (wd - j - 1)
        self._grid("la_lu_update", total, [w.buf, total, j, m, wd])

    def lu_pack(self, w: Any, perm: Any, out: Any, batch: int, m: int, n: int, wd: int) -> None:
        k = min(m, n)
        total = batch * (m * m + m * k + k * n)
        self._grid("la_lu_pack", total, [w.buf, perm.buf, out.buf, total, m, n, wd])

    def tri_init(self, a: Any, b: Any, w: Any, batch: int, n: int, r: int, tr: bool) -> None:
        total = batch * n * (n + r)
        self._grid("la_tri_init", total, [w.buf, a.buf, a.offset, b.buf, b.offset, total, n, r, int(tr)])

    def back_step(self, w: Any, batch: int, n: int, r: int, j: int, lower: bool = False, unit: bool = False) -> None:
        total = batch * (n - 1 - j if lower else j) * r
        self._grid("la_back", total, [w.buf, total, j, n, r, int(lower), int(unit)])

    def back_finish(self, w: Any, out: Any, batch: int, n: int, r: int, unit: bool = False, tr: bool = False) -> None:
        total = batch * n * r
        self._grid("la_back_finish", total, [w.buf, out.buf, total, n, r, int(unit), int(tr)])

    def logdet(self, w: Any, sgn: Any, out: Any, batch: int, n: int) -> None:
        self._grid("la_logdet", batch, [w.buf, sgn.buf, out.buf, batch, n])


def register(kind: str = "opencl") -> bool:
    """Register the kernels for ``kind`` when ember-opencl is installed; whether they were."""
    return _native.register_when_installed(_native.kernel_table(kind, _Launcher), kind, "ember_opencl")

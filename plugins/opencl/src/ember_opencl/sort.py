"""Stable sort / argsort per row: a bitonic network over (key, original index) pairs.

Ordering by (key, index) makes every pair distinct, so the network's result is the stable
order. Ascending puts NaN last; ``descending`` puts NaN first, larger keys before smaller,
and equal keys in their original order (the flip of an ascending stable sort for values,
stable-descending for indices). Rows are padded to a power of two with entries that sort
after everything. Short rows sort in one work-group in local memory; longer rows run the
network as one launch per stage over global memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyopencl as cl

from ember.dtypes import as_dtype
from ember.shapes import numel
from ember.views import collapse

from .array import CLArray
from .cltypes import ctype
from .codegen import preamble, unravel
from .runtime import Runtime

__all__ = ["sort"]


def _before(desc: bool, is_float: bool) -> str:
    nan = "isnan(xk)" if is_float else "0"
    nan_y = "isnan(yk)" if is_float else "0"
    cmp = ">" if desc else "<"
    return f"""
inline int ember_before(KT xk, IT xi, KT yk, IT yi, IT n) {{
    if (xi >= n) return 0;
    if (yi >= n) return 1;
    const int xn = {nan}, yn = {nan_y};
    if (xn != yn) return {"xn" if desc else "yn"};
    if (!xn && xk != yk) return xk {cmp} yk;
    return xi < yi;
}}
"""


def _before_complex(desc: bool) -> str:
    """numpy's complex order: lexicographic (real, then imaginary) among NaN-free values, then
    NaN only in the imaginary part (by real part), NaN only in the real part (by imaginary
    part), then NaN in both; ``desc`` reverses it all but the index tie-break."""
    cmp = ">" if desc else "<"
    return f"""
inline int ember_nan_class(KT k) {{ return (isnan(k.x) ? 2 : 0) + (isnan(k.y) ? 1 : 0); }}
inline int ember_before(KT xk, IT xi, KT yk, IT yi, IT n) {{
    if (xi >= n) return 0;
    if (yi >= n) return 1;
    const int xc = ember_nan_class(xk), yc = ember_nan_class(yk);
    if (xc != yc) return xc {cmp} yc;
    if (xc == 0 || xc == 1) {{ if (xk.x != yk.x) return xk.x {cmp} yk.x; }}
    if (xc == 0 || xc == 2) {{ if (xk.y != yk.y) return xk.y {cmp} yk.y; }}
    return xi < yi;
}}
"""


#: bytes of each key type (KT) in local memory
_KT_BYTES = {"char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "long": 8, "ulong": 8}
_KT_BYTES |= {"float": 4, "double": 8, "float2": 8, "double2": 16}


def _key_type(src: str) -> str:
    """The OpenCL type keys of dtype ``src`` sort as (half-width floats as float)."""
    c = ctype(src)
    return "float" if c.is_wide_float else c.compute


def _common(src: str, desc: bool, it: str) -> tuple[str, str]:
    c = ctype(src)
    kt = _key_type(src)
    before = _before_complex(desc) if c.kind == "c" else _before(desc, c.kind == "f")
    head = preamble({src}) + f"#define KT {kt}\n#define IT {it}\n" + before
    return head, kt


def _swap_step(i: str, l_: str, keys: str, idx: str) -> list[str]:
    return [
        f"const KT ka = {keys}[{i}], kb = {keys}[{l_}];",
        f"const IT ia = {idx}[{i}], ib = {idx}[{l_}];",
        "const int lf = ember_before(kb, ib, ka, ia, n);",
        f"if (((({i}) & kk) == 0) ? lf : !lf) {{",
        f"  {keys}[{i}] = kb; {keys}[{l_}] = ka; {idx}[{i}] = ib; {idx}[{l_}] = ia;",
        "}",
    ]


def _local_source(src: str, out: str, values: bool, desc: bool, ro: int) -> tuple[str, list[Any]]:
    """One work-group of ``p / 2`` items a row, ``p`` (the padded row, a power of two) an argument and
    the pairs in local memory the launch sizes: one program for every row length that fits."""
    head, kt = _common(src, desc, "int")
    c, co = ctype(src), ctype(out)
    params = ["const long M", "const int n", "const int p", f"__global {co.storage}* restrict out"]
    params += [f"__global const {c.storage}* restrict in", "const long in_off", "const long ist"]
    params += [f"const long osh{d}" for d in range(ro)] + [f"const long ost{d}" for d in range(ro)]
    params += ["__local KT* restrict sk", "__local int* restrict si"]
    types: list[Any] = [np.int64, np.int32, np.int32, None, None, np.int64, np.int64] + [np.int64] * (2 * ro)
    types += [None, None]
    half = "(p >> 1)"
    write = co.store("out", "row * n + j", "sk[j]") if values else "out[row * n + j] = (long)si[j];"
    lines = [
        head,
        "__kernel void ember_sort_local(" + ", ".join(params) + ") {",
        "  const long row = get_group_id(0);",
        "  const int lid = get_local_id(0);",
        *("  " + s for s in unravel("row", ro, "osh", "long", "o")),
        "  const long base = in_off + " + " + ".join(f"o{d} * ost{d}" for d in range(ro)) + ";",
        f"  for (int j = lid; j < p; j += {half}) {{",
        f"    si[j] = j; sk[j] = j < n ? (KT){c.load('in', 'base + j * ist')} : (KT)0;",
        "  }",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "  for (int kk = 2; kk <= p; kk <<= 1) {",
        "    for (int j = kk >> 1; j > 0; j >>= 1) {",
        "      const int i = (lid / j) * 2 * j + (lid % j);",
        "      const int l = i + j;",
        *("      " + s for s in _swap_step("i", "l", "sk", "si")),
        "      barrier(CLK_LOCAL_MEM_FENCE);",
        "    }",
        "  }",
        f"  for (int j = lid; j < n; j += {half}) {{ {write} }}",
        "}",
    ]
    return "\n".join(lines) + "\n", types


def _global_source(src: str, out: str, values: bool, desc: bool, ro: int, it: str) -> tuple[str, dict[str, list[Any]]]:
    head, kt = _common(src, desc, it)
    c, co = ctype(src), ctype(out)
    npit = np.dtype(np.int32 if it == "int" else np.int64)
    init_params = [
        "const long M",
        "const long P",
        "const IT n",
        "__global KT* restrict keys",
        "__global IT* restrict idx",
    ]
    init_params += [f"__global const {c.storage}* restrict in", "const long in_off", "const long ist"]
    init_params += [f"const long osh{d}" for d in range(ro)] + [f"const long ost{d}" for d in range(ro)]
    write = co.store("out", "t", "keys[row * P + j]") if values else "out[t] = (long)idx[row * P + j];"
    lines = [
        head,
        "__kernel void ember_sort_init(" + ", ".join(init_params) + ") {",
        "  const long t = get_global_id(0);",
        "  if (t >= M * P) return;",
        "  const long row = t / P; const IT j = (IT)(t % P);",
        *("  " + s for s in unravel("row", ro, "osh", "long", "o")),
        "  const long base = in_off + " + " + ".join(f"o{d} * ost{d}" for d in range(ro)) + ";",
        f"  idx[t] = j; keys[t] = j < n ? (KT){c.load('in', 'base + j * ist')} : (KT)0;",
        "}",
        "__kernel void ember_sort_step(const long M, const long P, const IT n, __global KT* restrict keys, "
        "__global IT* restrict idx, const long kk, const long j) {",
        "  const long t = get_global_id(0);",
        "  const long halfp = P / 2;",
        "  if (t >= M * halfp) return;",
        "  const long row = t / halfp, q = t % halfp;",
        "  const long i = (q / j) * 2 * j + (q % j), l = i + j;",
        "  __global KT* k_ = keys + row * P; __global IT* x_ = idx + row * P;",
        *("  " + s for s in _swap_step("i", "l", "k_", "x_")),
        "}",
        f"__kernel void ember_sort_finish(const long M, const long P, const IT n, __global {co.storage}* restrict out, "
        "__global const KT* restrict keys, __global const IT* restrict idx) {",
        "  const long t = get_global_id(0);",
        "  if (t >= M * n) return;",
        "  const long row = t / n, j = t % n;",
        f"  {write}",
        "}",
    ]
    types = {
        "ember_sort_init": [np.int64, np.int64, npit, None, None, None, np.int64, np.int64] + [np.int64] * (2 * ro),
        "ember_sort_step": [np.int64, np.int64, npit, None, None, np.int64, np.int64],
        "ember_sort_finish": [np.int64, np.int64, npit, None, None, None],
    }
    return "\n".join(lines) + "\n", types


def _launch_1d(rt: Runtime, knl: Any, wg: int, n: int, args: list[Any]) -> None:
    local = min(wg, 64 if rt.is_cpu else 256)
    rt.launch(knl, (-(-n // local) * local,), (local,), args)


def sort(rt: Runtime, a: CLArray, axis: int, descending: bool, want: str) -> CLArray:
    """Sorted values (``want="values"``) or int64 indices (``"indices"``) along ``axis``."""
    order = [i for i in range(a.ndim) if i != axis] + [axis]
    moved = a.permute(order)
    out_dt = a.dtype if want == "values" else as_dtype("int64")
    out = rt.empty(moved.shape, out_dt)
    n = moved.shape[-1]
    if out.size:
        osh, (ost,) = collapse(moved.shape[:-1], [moved.strides[:-1]])
        M = numel(osh)
        p = 2
        while p < n:
            p *= 2
        src, dst = a.dtype.name, out_dt.name
        kbytes = _KT_BYTES[_key_type(src)]
        fits_local = p // 2 <= min(rt.max_wg, 256) and p * (kbytes + 4) <= rt.local_mem // 2
        geometry = [moved.buf, moved.offset, moved.strides[-1], *osh, *ost]
        if fits_local:
            key = ("sort_local", src, want, descending, len(osh))

            def make() -> tuple[str, str, list[Any]]:
                s, t = _local_source(src, dst, want == "values", descending, len(osh))
                return s, "ember_sort_local", t

            knl, _ = rt.kernel(key, make)
            pairs = [cl.LocalMemory(p * kbytes), cl.LocalMemory(p * 4)]
            rt.launch(knl, (M * (p // 2),), (p // 2,), [M, n, p, out.buf, *geometry, *pairs])
        else:
            _global_sort(rt, src, dst, want == "values", descending, len(osh), M, n, p, out, geometry)
    inverse = [0] * a.ndim
    for i, q in enumerate(order):
        inverse[q] = i
    return out.permute(inverse)


def _global_sort(
    rt: Runtime,
    src: str,
    dst: str,
    values: bool,
    desc: bool,
    ro: int,
    M: int,
    n: int,
    p: int,
    out: CLArray,
    geometry: list[Any],
) -> None:
    it = "int" if p < 2**31 else "long"
    kdt = "float32" if src in ("float16", "bfloat16") else src
    keys = rt.empty((M * p,), as_dtype(kdt))
    idx = rt.empty((M * p,), as_dtype("int32" if it == "int" else "int64"))

    def kernel(name: str) -> tuple[Any, int]:
        def make() -> tuple[str, str, list[Any]]:
            s, types = _global_source(src, dst, values, desc, ro, it)
            return s, name, types[name]

        return rt.kernel(("sort_global", name, src, values, desc, ro, it), make)

    knl, wg = kernel("ember_sort_init")
    _launch_1d(rt, knl, wg, M * p, [M, p, n, keys.buf, idx.buf, *geometry])
    knl, wg = kernel("ember_sort_step")
    kk = 2
    while kk <= p:
        j = kk // 2
        while j > 0:
            _launch_1d(rt, knl, wg, M * p // 2, [M, p, n, keys.buf, idx.buf, kk, j])
            j //= 2
        kk *= 2
    knl, wg = kernel("ember_sort_finish")
    _launch_1d(rt, knl, wg, M * n, [M, p, n, out.buf, keys.buf, idx.buf])

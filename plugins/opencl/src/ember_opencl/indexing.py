"""gather (take_along_axis), scatter_add and index_put.

scatter_add and accumulating index_put add with atomics where the device has them for the
dtype (32-bit integers natively, 64-bit integers with cl_khr_int64_base_atomics, float and
double through compare-and-swap loops); the order of float additions then varies between
runs. Other dtypes (8/16-bit, half, bfloat16) take a deterministic path: every output
element loops over the entries that can land on it. Plain index_put resolves repeated
indices as numpy does, the last write wins: a first pass records the largest source position
per target with ``atomic_max``, the second writes only that one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ember.dtypes import as_dtype
from ember.shapes import numel
from ember.views import contiguous_strides

from .array import CLArray
from .cltypes import ctype
from .codegen import offset_expr, preamble, unravel
from .elementwise import contiguous, copy_into, run_program, unary_program
from .runtime import Runtime

__all__ = ["gather", "scatter_add", "index_put"]

L = np.dtype(np.int64)


def _atomic_add(dt: str, rt: Runtime) -> str | None:
    """Helper source defining ``ember_atomic_add(p, v)`` for ``dt``, or None if unavailable."""
    c = ctype(dt)
    T = c.storage
    if c.compute in ("int", "uint"):
        return f"inline void ember_atomic_add(volatile __global {T}* p, {T} v) {{ atomic_add(p, v); }}\n"
    if c.compute in ("long", "ulong") and rt.atomics64:
        return f"inline void ember_atomic_add(volatile __global {T}* p, {T} v) {{ atom_add(p, v); }}\n"
    if c.compute == "float" and T == "float":
        return """
inline void ember_atomic_add(volatile __global float* p, float v) {
    union { uint u; float f; } old, upd;
    do { old.f = *p; upd.f = old.f + v; }
    while (atomic_cmpxchg((volatile __global uint*)p, old.u, upd.u) != old.u);
}
"""
    if c.compute == "double" and rt.atomics64:
        return """
inline void ember_atomic_add(volatile __global double* p, double v) {
    ulong old, upd;
    do { old = as_ulong(*p); upd = as_ulong(as_double(old) + v); }
    while (atom_cmpxchg((volatile __global ulong*)p, old, upd) != old);
}
"""
    return None


def _launch(rt: Runtime, knl: Any, wg: int, n: int, args: list[Any]) -> None:
    local = min(wg, 64 if rt.is_cpu else 256)
    rt.launch(knl, (-(-n // local) * local,), (local,), args)


#: clamps an index into [0, n): out-of-range indices (not range-checked on GPUs, where the check
#: would read the indices back) read or write the nearest element instead of faulting
_CLAMP = "ember_clamp"
_CLAMP_SOURCE = "#define ember_clamp(j, n) ((j) < 0 ? 0 : ((j) >= (n) ? (n) - 1 : (j)))"


# -- gather ------------------------------------------------------------------------------
def _gather_source(dt: str, rank: int) -> tuple[str, list[Any]]:
    """``out[i] = a[c with c[axis] = ix[c]]``; the axis is an argument: ``a_s`` has 0 at the axis and
    ``a_sax`` its stride (one program for every axis of a rank)."""
    c = ctype(dt)
    params = ["const long n", f"__global {c.storage}* restrict out"]
    params += [f"const long sh{d}" for d in range(rank)]
    params += [f"__global const {c.storage}* restrict a", "const long a_off"] + [
        f"const long a_s{d}" for d in range(rank)
    ]
    params += ["__global const long* restrict ix", "const long ix_off"] + [f"const long ix_s{d}" for d in range(rank)]
    params.append("const long na")  # a's extent along axis: indices are clamped into it
    params.append("const long a_sax")  # a's stride along axis
    types: list[Any] = [L, None] + [L] * rank + [None, L] + [L] * rank + [None, L] + [L] * rank + [L, L]
    terms = ["a_off"] + [f"c{d} * a_s{d}" for d in range(rank)] + ["j * a_sax"]
    lines = [
        preamble({dt}),
        _CLAMP_SOURCE,
        "__kernel void ember_gather(" + ", ".join(params) + ") {",
        "  const long i = get_global_id(0);",
        "  if (i >= n) return;",
        *("  " + s for s in unravel("i", rank, "sh", "long")),
        f"  const long j = {_CLAMP}(ix[{offset_expr('ix', rank)}], na);",
        "  " + c.store("out", "i", c.load("a", " + ".join(terms))),
        "}",
    ]
    return "\n".join(lines) + "\n", types


def gather(rt: Runtime, a: CLArray, index: CLArray, axis: int) -> CLArray:
    """numpy ``take_along_axis``: ``index`` has ``a``'s rank and shape outside ``axis``."""
    out = rt.empty(index.shape, a.dtype)
    if out.size == 0:
        return out
    rank = a.ndim
    dt = a.dtype.name

    def make() -> tuple[str, str, list[Any]]:
        s, t = _gather_source(dt, rank)
        return s, "ember_gather", t

    knl, wg = rt.kernel(("gather", dt, rank), make)
    a_s = [0 if d == axis else st for d, st in enumerate(a.strides)]
    args = [out.size, out.buf, *index.shape, a.buf, a.offset, *a_s, index.buf, index.offset, *index.strides]
    _launch(rt, knl, wg, out.size, [*args, a.shape[axis], a.strides[axis]])
    return out


# -- scatter_add -------------------------------------------------------------------------
def _scatter_source(dt: str, rank: int, axis: int, helper: str | None) -> tuple[str, list[Any]]:
    """Atomic version (helper given): one item per source entry, the axis an argument (``o_s`` has 0
    at the axis, ``o_sax`` its stride: one program for every axis); else one item per output."""
    c = ctype(dt)
    params = ["const long n", f"__global {c.storage}* out"]
    params += [f"const long sh{d}" for d in range(rank)]  # atomic: index shape; deterministic: out shape
    params += [f"const long o_s{d}" for d in range(rank)]
    params += ["__global const long* restrict ix", "const long ix_off"] + [f"const long ix_s{d}" for d in range(rank)]
    params += [f"__global const {c.storage}* restrict v", "const long v_off"] + [
        f"const long v_s{d}" for d in range(rank)
    ]
    types: list[Any] = [L, None] + [L] * (2 * rank) + [None, L] + [L] * rank + [None, L] + [L] * rank
    lines = [preamble({dt}, atomics64=c.compute in ("long", "ulong", "double")), _CLAMP_SOURCE, helper or ""]
    if helper is not None:
        params.append("const long na")  # out's extent along axis: indices are clamped into it
        params.append("const long o_sax")  # out's stride along axis
        types += [L, L]
        target = " + ".join([f"c{d} * o_s{d}" for d in range(rank)] + ["j * o_sax"])
        lines += [
            "__kernel void ember_scatter(" + ", ".join(params) + ") {",
            "  const long i = get_global_id(0);",
            "  if (i >= n) return;",
            *("  " + s for s in unravel("i", rank, "sh", "long")),
            f"  const long j = {_CLAMP}(ix[{offset_expr('ix', rank)}], na);",
            f"  ember_atomic_add(out + {target}, {c.load('v', offset_expr('v', rank))});",
            "}",
        ]
    else:
        params.append("const long kn")
        types.append(L)
        A = c.compute
        lines += [
            "__kernel void ember_scatter(" + ", ".join(params) + ") {",
            "  const long i = get_global_id(0);",
            "  if (i >= n) return;",
            *("  " + s for s in unravel("i", rank, "sh", "long")),
            f"  {A} acc = {c.load('out', 'i')};",
            f"  const long own = c{axis};",
            "  for (long k = 0; k < kn; k++) {",
            f"    c{axis} = k;",
            f"    if (ix[{offset_expr('ix', rank)}] == own) acc += {c.load('v', offset_expr('v', rank))};",
            "  }",
            "  " + c.store("out", "i", "acc"),
            "}",
        ]
    return "\n".join(lines) + "\n", types


def scatter_add(rt: Runtime, a: CLArray, index: CLArray, values: CLArray, axis: int) -> CLArray:
    out = rt.empty(a.shape, a.dtype)
    if out.size:
        copy_into(rt, out, a)
    if index.size == 0 or out.size == 0:
        return out
    rank = a.ndim
    dt = a.dtype.name
    helper = _atomic_add(dt, rt) if dt != "bool" else None
    values = values.expand(index.shape)

    def make() -> tuple[str, str, list[Any]]:
        s, t = _scatter_source(dt, rank, -1 if helper is not None else axis, helper)
        return s, "ember_scatter", t

    knl, wg = rt.kernel(("scatter", dt, rank, -1 if helper is not None else axis, helper is not None), make)
    geo = [index.buf, index.offset, *index.strides, values.buf, values.offset, *values.strides]
    if helper is not None:
        o_s = [0 if d == axis else st for d, st in enumerate(out.strides)]
        args = [index.size, out.buf, *index.shape, *o_s, *geo, out.shape[axis], out.strides[axis]]
        _launch(rt, knl, wg, index.size, args)
    else:
        args = [out.size, out.buf, *out.shape, *out.strides, *geo, index.shape[axis]]
        _launch(rt, knl, wg, out.size, args)
    return out


# -- index_put ----------------------------------------------------------------------------
def _put_source(
    dt: str, k: int, mode: str, helper: str | None, name: str = "ember_put", head: bool = True
) -> tuple[str, list[Any]]:
    """mode: "claim" (pass 1), "write" (pass 2), "add" (atomic), "serial" (one work item); kernel
    ``name``, ``head=False``: without the pragmas and helpers (a second kernel of one program)."""
    c = ctype(dt)
    params = ["const long B", "const long R", f"__global {c.storage}* out", "__global int* win"]
    params += [f"__global const long* restrict ix{d}" for d in range(k)]
    params += [f"const long ixo{d}" for d in range(k)]
    params += [f"const long ts{d}" for d in range(k)]
    params += [f"__global const {c.storage}* restrict v", "const long v_off"]
    params += [f"const long td{d}" for d in range(k)]  # the indexed extents: indices are clamped into them
    types: list[Any] = [L, L, None, None] + [None] * k + [L] * (2 * k) + [None, L] + [L] * k
    target = " + ".join(f"{_CLAMP}(ix{d}[ixo{d} + p], td{d}) * ts{d}" for d in range(k)) if k else "0"
    lines = [preamble({dt}, atomics64=c.compute in ("long", "ulong", "double")), _CLAMP_SOURCE, helper or ""]
    if not head:
        lines = []
    lines.append(f"__kernel void {name}(" + ", ".join(params) + ") {")
    if mode == "claim":
        lines += [
            "  const long p = get_global_id(0);",
            "  if (p >= B) return;",
            f"  atomic_max(win + ({target}), (int)p);",
        ]
    elif mode == "serial":
        lines += [
            "  if (get_global_id(0) != 0) return;",
            "  for (long i = 0; i < B * R; i++) {",
            "    const long p = i / R, r = i % R;",
            f"    const long t = ({target}) * R + r;",
            "    " + c.store("out", "t", f"{c.load('out', 't')} + {c.load('v', 'v_off + i')}"),
            "  }",
        ]
    else:
        lines += [
            "  const long i = get_global_id(0);",
            "  if (i >= B * R) return;",
            "  const long p = i / R, r = i % R;",
            f"  const long tt = {target};",
        ]
        if mode == "write":
            lines.append("  if (win[tt] == (int)p) { " + c.store("out", "tt * R + r", c.load("v", "v_off + i")) + " }")
        else:
            lines.append(f"  ember_atomic_add(out + tt * R + r, {c.load('v', 'v_off + i')});")
    lines.append("}")
    return "\n".join(lines) + "\n", types


def index_put(rt: Runtime, a: CLArray, values: CLArray, indices: Sequence[CLArray], accumulate: bool) -> CLArray:
    """A copy of ``a`` with ``a[indices] = values`` (indices broadcast; values fit the target)."""
    out = rt.empty(a.shape, a.dtype)
    if out.size:
        copy_into(rt, out, a)
    k = len(indices)
    bshape = indices[0].shape if k else ()
    rest = a.shape[k:]
    B, R = numel(bshape), numel(rest)
    if B == 0 or R == 0 or out.size == 0:
        return out
    if B >= 2**31 - 1:
        raise NotImplementedError("index_put with 2**31 or more index positions is not supported on OpenCL")
    idx = [contiguous(rt, i) for i in indices]
    vals = contiguous(rt, values.expand(bshape + rest))
    tstrides = contiguous_strides(a.shape[:k])
    dt = a.dtype.name
    helper = _atomic_add(dt, rt) if accumulate and dt != "bool" else None

    def kernel(mode: str) -> tuple[Any, int]:
        def make() -> tuple[str, str, list[Any]]:
            if mode in ("claim", "write"):  # the two passes always run together: one program
                claim, t = _put_source(dt, k, "claim", None, "ember_put_claim")
                write, t_write = _put_source(dt, k, "write", None, "ember_put_write", False)
                return claim + write, f"ember_put_{mode}", t if mode == "claim" else t_write
            s, t = _put_source(dt, k, mode, helper if mode == "add" else None)
            return s, "ember_put", t

        return rt.kernel(("put", dt, k, mode, helper is not None), make)

    win = None
    if not accumulate:
        minus = rt.upload(np.full(1, -1, dtype=np.int32), as_dtype("int32"))
        win = rt.empty((numel(a.shape[:k]),), as_dtype("int32"))
        run_program(
            rt, unary_program("copy", "int32", "int32"), [minus.with_layout(win.shape, (0,), 0)], win.shape, [win]
        )
    args = [B, R, out.buf, (win if win is not None else out).buf, *[i.buf for i in idx], *[i.offset for i in idx]]
    args += [*tstrides, vals.buf, vals.offset, *a.shape[:k]]
    if not accumulate:
        knl, wg = kernel("claim")
        _launch(rt, knl, wg, B, args)
        knl, wg = kernel("write")
        _launch(rt, knl, wg, B * R, args)
    elif helper is not None:
        knl, wg = kernel("add")
        _launch(rt, knl, wg, B * R, args)
    else:
        knl, _ = kernel("serial")
        rt.launch(knl, (1,), (1,), args)
    return out

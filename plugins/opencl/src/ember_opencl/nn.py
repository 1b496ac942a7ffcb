"""Native kernels for softmax, log_softmax, logsumexp, layer/RMS norm, cross-entropy and
attention (same signatures and numerics as the composites in ``ember.ops.nn``).

All are row kernels: the reduced axis is moved last as a view and each row is handled by
one work-group (a local-memory tree per pass) or, for many short rows, by one work item.
Attention is matmul -> masked, scaled softmax -> matmul on the generated kernels.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember.shapes import numel
from ember.views import collapse, contiguous_strides

from .array import CLArray
from .cltypes import ctype
from .codegen import preamble, unravel
from .elementwise import contiguous
from .matmul import matmul
from .runtime import Runtime

__all__ = [
    "softmax",
    "logsumexp",
    "layer_norm",
    "layer_norm_backward",
    "cross_entropy",
    "cross_entropy_backward",
    "attention",
]

L = np.dtype(np.int64)


def _row_group(rt: Runtime, M: int, C: int, unit_stride: bool = True) -> int:
    """Work-group size per row, or 0 for one work item per row (CPUs with rows for every core;
    GPUs only for short rows or rows strided along the reduced axis, which then coalesce)."""
    if C <= 32:
        return 0
    if rt.is_cpu and M >= 2 * rt.compute_units:
        return 0
    if not rt.is_cpu and M >= 16384 and not unit_stride:
        return 0
    g = 32
    while g < C and g < min(256, rt.max_wg):
        g *= 2
    return g


def _loop(group: int, var: str, n: str) -> str:
    return (
        f"for (long {var} = lid; {var} < {n}; {var} += {group})"
        if group
        else f"for (long {var} = 0; {var} < {n}; {var}++)"
    )


def _tree(group: int, A: str, var: str, op: str) -> list[str]:
    """Combine ``var`` over the work-group (``op``: "sum" or "max"); all items get the result."""
    if not group:
        return []
    comb = (
        "s[lid] + s[lid + h]" if op == "sum" else "((s[lid + h] > s[lid] || isnan(s[lid + h])) ? s[lid + h] : s[lid])"
    )
    return [
        f"s[lid] = {var};",
        "barrier(CLK_LOCAL_MEM_FENCE);",
        f"for (int h = {group // 2}; h > 0; h >>= 1) {{",
        f"  if (lid < h) s[lid] = {comb};",
        "  barrier(CLK_LOCAL_MEM_FENCE);",
        "}",
        f"{var} = s[0];",
        "barrier(CLK_LOCAL_MEM_FENCE);",
    ]


def _header(name: str, params: list[str], group: int, A: str, ro: int, bases: list[str]) -> list[str]:
    lines = ["__kernel void " + name + "(" + ", ".join(params) + ") {"]
    if group:
        lines += [
            f"  __local {A} s[{group}];",
            "  const long row = get_group_id(0);",
            "  const int lid = get_local_id(0);",
        ]
    else:
        lines += ["  const long row = get_global_id(0);", "  if (row >= M) return;"]
    lines += ["  " + s for s in unravel("row", ro, "osh", "long", "o")]
    for b in bases:
        lines.append(f"  const long {b}b = {b}_off + " + " + ".join(f"o{d} * {b}_os{d}" for d in range(ro)) + ";")
    return lines


def _launch_rows(rt: Runtime, knl: Any, wg: int, M: int, group: int, args: list[Any]) -> None:
    if group:
        rt.launch(knl, (M * group,), (group,), args)
    else:
        local = min(wg, 64 if rt.is_cpu else 128)
        rt.launch(knl, (-(-M // local) * local,), (local,), args)


# -- softmax family -------------------------------------------------------------------------
def _softmax_source(dt: str, mode: str, ro: int, group: int, mask: str, causal: bool) -> tuple[str, list[Any]]:
    """mode: "softmax", "log_softmax" or "lse"; mask: "" / "bool" / "add"."""
    c = ctype(dt)
    A = c.compute
    params = ["const long M", "const long C", f"__global {c.storage}* restrict out"]
    params += [f"__global const {c.storage}* restrict x", "const long x_off", "const long x_is"]
    params += [f"const long osh{d}" for d in range(ro)] + [f"const long x_os{d}" for d in range(ro)]
    params += [f"const {A} scale", "const long Lq"]
    types: list[Any] = [L, L, None, None, L, L] + [L] * (2 * ro) + [c.np_compute, L]
    bases = ["x"]
    if mask:
        mc = ctype("bool" if mask == "bool" else dt)
        params += [f"__global const {mc.storage}* restrict m", "const long m_off", "const long m_is"]
        params += [f"const long m_os{d}" for d in range(ro)]
        types += [None, L, L] + [L] * ro
        bases.append("m")
    score = [f"{A} v = {c.load('x', 'xb + k * x_is')} * scale;"]
    if causal:
        score.append("if (k > (row % Lq) + (C - Lq)) v = -INFINITY;")
    if mask == "bool":
        score.append("if (!m[mb + k * m_is]) v = -INFINITY;")
    elif mask == "add":
        score.append(f"v = v + {ctype(dt).load('m', 'mb + k * m_is')};")
    lines = [preamble({dt}), *_header("ember_softmax", params, group, A, ro, bases)]
    lines += [f"  {A} mx = -INFINITY;", "  " + _loop(group, "k", "C") + " {"]
    lines += ["    " + s for s in score]
    lines += ["    if (v > mx || isnan(v)) mx = v;", "  }"]
    lines += ["  " + s for s in _tree(group, A, "mx", "max")]
    lines += [f"  if (isinf(mx)) mx = ({A})0;", f"  {A} tot = 0;", "  " + _loop(group, "k", "C") + " {"]
    lines += ["    " + s for s in score]
    lines += ["    tot += exp(v - mx);", "  }"]
    lines += ["  " + s for s in _tree(group, A, "tot", "sum")]
    if mode == "lse":
        lines += ["  if (" + ("lid == 0" if group else "1") + ") { " + c.store("out", "row", "log(tot) + mx") + " }"]
    else:
        lines += ["  " + _loop(group, "k", "C") + " {"]
        lines += ["    " + s for s in score]
        value = "(v - mx) - log(tot)" if mode == "log_softmax" else "exp(v - mx) / tot"
        lines += ["    " + c.store("out", "row * C + k", value), "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n", types


def _run_softmax(
    rt: Runtime,
    x: CLArray,
    mode: str,
    scale: float = 1.0,
    mask: CLArray | None = None,
    causal_rows: int = 0,
) -> CLArray:
    """Softmax-family over the last axis of ``x``; returns a contiguous (rows..., C) handle
    (``lse``: one value per row)."""
    C = x.shape[-1]
    lead = x.shape[:-1]
    out = rt.empty(lead if mode == "lse" else x.shape, x.dtype)
    if out.size == 0 or C == 0:
        return out
    strides = [x.strides[:-1]]
    mview = None
    if mask is not None:
        mview = mask.expand(x.shape)
        strides.append(mview.strides[:-1])
    osh, ost = collapse(lead, strides) if lead else ((1,), [(0,)] * len(strides))
    M = numel(lead)
    group = _row_group(rt, M, C, abs(x.strides[-1]) == 1)
    dt = x.dtype.name
    mkind = "" if mask is None else ("bool" if mask.dtype.name == "bool" else "add")
    spec = (dt, mode, len(osh), group, mkind, bool(causal_rows))

    def make() -> tuple[str, str, list[Any]]:
        s, t = _softmax_source(*spec)
        return s, "ember_softmax", t

    knl, wg = rt.kernel(("softmax", *spec), make)
    c = ctype(dt)
    args = [M, C, out.buf, x.buf, x.offset, x.strides[-1], *osh, *ost[0], c.np_compute.type(scale), causal_rows or 1]
    if mview is not None:
        args += [mview.buf, mview.offset, mview.strides[-1], *ost[1]]
    _launch_rows(rt, knl, wg, M, group, args)
    return out


def _moved(a: CLArray, axes: list[int]) -> tuple[CLArray, list[int]]:
    order = [i for i in range(a.ndim) if i not in axes] + list(axes)
    return a.permute(order), order


def softmax(rt: Runtime, a: CLArray, axis: int, log: bool) -> CLArray:
    moved, order = _moved(a, [axis])
    out = _run_softmax(rt, moved, "log_softmax" if log else "softmax")
    inverse = [0] * a.ndim
    for i, p in enumerate(order):
        inverse[p] = i
    return out.permute(inverse)


def logsumexp(rt: Runtime, a: CLArray, axes: tuple[int, ...], keepdims: bool) -> CLArray:
    moved, _ = _moved(a, sorted(axes))
    k = len(axes)
    K = numel(moved.shape[moved.ndim - k :])
    rows = moved.shape[: moved.ndim - k]
    flat = moved.reshape(rows + (K,))
    if flat is None:
        flat = contiguous(rt, moved).reshape(rows + (K,))
    out = _run_softmax(rt, flat, "lse")  # type: ignore[arg-type]
    shape = tuple(1 if i in axes else d for i, d in enumerate(a.shape)) if keepdims else rows
    return out.reshape(shape)  # type: ignore[return-value]


# -- layer norm / RMS norm -----------------------------------------------------------------
def _norm_source(dt: str, group: int, ro: int, mode: str) -> tuple[str, list[Any]]:
    """mode "layer" (with a bias), "rms", or "backward": layer_norm's input gradient of ``g``,
    rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)). One row per work-group or work item:
    the mean and variance in two passes over x (one for rms), the backward's two sums in a
    third, the write in the last."""
    c = ctype(dt)
    A = c.compute
    params = ["const long M", "const long N", f"__global {c.storage}* restrict out"]
    params += [f"__global const {c.storage}* restrict x", "const long x_off"]
    types: list[Any] = [L, L, None, None, L]
    bases = ["x"]
    if mode == "backward":
        params += [f"__global const {c.storage}* restrict g", "const long g_off"]
        types += [None, L]
        bases.append("g")
    params += [f"const long osh{d}" for d in range(ro)]
    params += [f"const long {b}_os{d}" for b in bases for d in range(ro)]
    types += [L] * (ro * (1 + len(bases)))
    params += [f"__global const {c.storage}* restrict w", "const long w_off", "const long w_s"]
    types += [None, L, L]
    if mode == "layer":
        params += [f"__global const {c.storage}* restrict b", "const long b_off", "const long b_s"]
        types += [None, L, L]
    params.append(f"const {A} eps")
    types.append(c.np_compute)
    x, wk = c.load("x", "xb + k"), c.load("w", "w_off + k * w_s")
    name = "ember_norm_backward" if mode == "backward" else "ember_norm"
    lines = [preamble({dt}), *_header(name, params, group, A, ro, bases)]
    lines += [f"  {A} t = 0;", "  " + _loop(group, "k", "N") + " {"]
    if mode == "rms":
        lines += [f"    const {A} v = {x};", "    t += v * v;", "  }"]
        lines += ["  " + s for s in _tree(group, A, "t", "sum")]
        lines += [f"  const {A} r = ({A})1 / sqrt(t / ({A})N + eps);"]
        lines += [
            "  " + _loop(group, "k", "N") + " {",
            "    " + c.store("out", "row * N + k", f"{x} * r * {wk}"),
            "  }",
        ]
        lines.append("}")
        return "\n".join(lines) + "\n", types
    lines += [f"    t += {x};", "  }"]
    lines += ["  " + s for s in _tree(group, A, "t", "sum")]
    lines += [f"  const {A} mu = t / ({A})N;", f"  {A} q = 0;", "  " + _loop(group, "k", "N") + " {"]
    lines += [f"    const {A} d = {x} - mu;", "    q += d * d;", "  }"]
    lines += ["  " + s for s in _tree(group, A, "q", "sum")]
    lines += [f"  const {A} r = ({A})1 / sqrt(q / ({A})N + eps);"]
    if mode == "layer":
        value = f"({x} - mu) * r * {wk} + {c.load('b', 'b_off + k * b_s')}"
    else:
        gk = c.load("g", "gb + k")
        lines += [f"  {A} sg = 0;", f"  {A} sgx = 0;", "  " + _loop(group, "k", "N") + " {"]
        lines += [f"    const {A} gh = {gk} * {wk};", "    sg += gh;", f"    sgx += gh * ({x} - mu) * r;", "  }"]
        lines += ["  " + s for s in _tree(group, A, "sg", "sum")]
        lines += ["  " + s for s in _tree(group, A, "sgx", "sum")]
        lines += [f"  const {A} mg = sg / ({A})N;", f"  const {A} mgx = sgx / ({A})N;"]
        value = f"r * ({gk} * {wk} - mg - ({x} - mu) * r * mgx)"
    lines += ["  " + _loop(group, "k", "N") + " {", "    " + c.store("out", "row * N + k", value), "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n", types


#: norm launches by (runtime, mode, operand geometry, device kind): which operands are made contiguous
#: first, the kernel, its sizes and its arguments with None where the buffers go (their positions)
_NORMS: dict[Any, tuple[Any, ...]] = {}
_MAX_NORMS = 1024


def _run_norm(rt: Runtime, mode: str, x: CLArray, w: CLArray, extra: CLArray | None, eps: float) -> CLArray:
    """One norm kernel over the rows of ``w``'s trailing axes of ``x`` (rows at any stride read
    in place); ``extra`` is the bias (mode "layer") or the output gradient (mode "backward").
    Planned per geometry after the first call (the copies it makes, then one launch)."""
    e_geo = None if extra is None else (extra.shape, extra.strides, extra.offset)
    key = (rt, mode, x.dtype, x.shape, x.strides, x.offset, w.shape, w.strides, w.offset, e_geo, rt.is_cpu,
           rt.compute_units)  # fmt: skip
    out = rt.empty(x.shape, x.dtype)
    if out.size == 0:
        return out
    plan = _NORMS.get(key)
    if plan is None:
        if len(_NORMS) >= _MAX_NORMS:
            _NORMS.clear()
        plan = _NORMS[key] = _norm_plan(rt, mode, x, w, extra)
    copies, knl, gsize, lsize, template, slots = plan
    # the operands in the kernel's order (x, g; w, b), each made contiguous first where the plan says
    handles = [x, extra, w] if mode == "backward" else [x, w, extra] if mode == "layer" else [x, w]
    args = template.copy()
    args[2] = out.block.raw
    held = []  # (the copies live until the launch is queued: a dead one's buffer may be handed out again)
    for h, copy, slot in zip(handles, copies, slots):
        if copy:
            h = contiguous(rt, h)  # type: ignore[arg-type]
            held.append(h)
        args[slot] = h.block.raw  # type: ignore[union-attr]
    args[-1] = ctype(x.dtype).np_compute.type(eps)
    rt.launch(knl, gsize, lsize, args)
    return out


def _geometry_of_contiguous(a: CLArray) -> CLArray:
    """What :func:`.elementwise.contiguous` returns, as geometry only (``a``, or a C-order copy)."""
    return a if a.is_contiguous() else a.with_layout(a.shape, contiguous_strides(a.shape), 0)


def _norm_plan(rt: Runtime, mode: str, x: CLArray, w: CLArray, extra: CLArray | None) -> tuple[Any, ...]:
    """:func:`_run_norm`'s launch from the operands' geometry: for x, g (backward), w and b (layer)
    in that order, whether it is made contiguous first, and where its buffer goes in the arguments."""
    N = numel(w.shape)
    M = numel(x.shape) // N
    rows = [x, extra] if mode == "backward" else [x]
    params = [w, extra] if mode == "layer" else [w]
    copies: list[bool] = []
    views = []
    # rows whose trailing axes collapse to one unit stride are read in place, others copied (on PoCL,
    # reading 4096 rows of 512 at an element stride of 4096 in place took twice the copy and the
    # contiguous kernel together); w and b are walked with one stride, or copied
    for a in rows:
        sh, (st,) = collapse(a.shape[a.ndim - w.ndim :], [a.strides[a.ndim - w.ndim :]])  # type: ignore[union-attr]
        copies.append(len(sh) != 1 or st[0] != 1)
        views.append(_geometry_of_contiguous(a) if copies[-1] else a)  # type: ignore[arg-type]
    osh, ost = collapse(x.shape[: x.ndim - w.ndim], [v.strides[: x.ndim - w.ndim] for v in views])
    group = _row_group(rt, M, N)
    dt = x.dtype.name
    spec = (dt, group, len(osh), mode)

    def make() -> tuple[str, str, list[Any]]:
        s, t = _norm_source(*spec)
        return s, "ember_norm_backward" if mode == "backward" else "ember_norm", t

    knl, wg = rt.kernel(("norm", *spec), make)
    args: list[Any] = [M, N, None]
    slots = []
    for v in views:
        slots.append(len(args))
        args += [None, v.offset]
    args += [*osh, *(s for st in ost for s in st)]
    for p in params:
        sh, (st,) = collapse(p.shape, [p.strides])  # type: ignore[union-attr]
        copies.append(len(sh) != 1)
        pv, ps = (_geometry_of_contiguous(p), 1) if copies[-1] else (p, st[0])  # type: ignore[arg-type]
        slots.append(len(args))
        args += [None, pv.offset, ps]
    args.append(None)  # eps
    if group:
        gsize, lsize = (M * group,), (group,)
    else:
        local = min(wg, 64 if rt.is_cpu else 128)
        gsize, lsize = (-(-M // local) * local,), (local,)
    return tuple(copies), knl, gsize, lsize, args, slots


def layer_norm(rt: Runtime, x: CLArray, w: CLArray, b: CLArray | None, eps: float) -> CLArray:
    """layer_norm (``b`` given) or rms_norm (``b`` None) over ``w``'s trailing axes."""
    return _run_norm(rt, "rms" if b is None else "layer", x, w, b, eps)


def layer_norm_backward(rt: Runtime, g: CLArray, x: CLArray, w: CLArray, eps: float) -> CLArray:
    """layer_norm's input gradient over ``w``'s trailing axes (one work-group or work item a row)."""
    return _run_norm(rt, "backward", x, w, g, eps)


def _ce_source(dt: str, ro: int, group: int, smoothing: bool) -> tuple[str, list[Any]]:
    c = ctype(dt)
    A = c.compute
    params = ["const long M", "const long C", f"__global {c.storage}* restrict out"]
    params += [f"__global const {c.storage}* restrict x", "const long x_off", "const long x_is"]
    params += [f"const long osh{d}" for d in range(ro)] + [f"const long x_os{d}" for d in range(ro)]
    params += ["__global const long* restrict t", "const long t_off"] + [f"const long t_os{d}" for d in range(ro)]
    params += [f"const {A} ls", "const long ignore"]
    types: list[Any] = [L, L, None, None, L, L] + [L] * (2 * ro) + [None, L] + [L] * ro + [c.np_compute, L]
    x = c.load("x", "xb + k * x_is")
    lines = [preamble({dt}), *_header("ember_ce", params, group, A, ro, ["x", "t"])]
    lines += [f"  {A} mx = -INFINITY;", "  " + _loop(group, "k", "C") + " {", f"    const {A} v = {x};"]
    lines += ["    if (v > mx || isnan(v)) mx = v;", "  }"]
    lines += ["  " + s for s in _tree(group, A, "mx", "max")]
    lines += [f"  if (isinf(mx)) mx = ({A})0;", f"  {A} tot = 0;", f"  {A} sx = 0;"]
    lines += ["  " + _loop(group, "k", "C") + " {", f"    const {A} v = {x} - mx;", "    tot += exp(v);"]
    lines += ["    sx += v;" if smoothing else "", "  }"]
    lines += ["  " + s for s in _tree(group, A, "tot", "sum")]
    if smoothing:
        lines += ["  " + s for s in _tree(group, A, "sx", "sum")]
    lines += [
        "  if (" + ("lid == 0" if group else "1") + ") {",
        "    const long tg = t[tb];",
        "    const int valid = tg != ignore;",
        "    long k = valid ? tg : 0;",
        "    k = k < 0 ? 0 : (k >= C ? C - 1 : k);",
        f"    const {A} lt = log(tot);",
        f"    {A} loss = -(({x} - mx) - lt);",
    ]
    if smoothing:
        lines += [f"    loss = (({A})1 - ls) * loss - (ls / ({A})C) * (sx - ({A})C * lt);"]
    lines += ["    " + c.store("out", "row", f"valid ? loss : ({A})0"), "  }", "}"]
    return "\n".join(line for line in lines if line) + "\n", types


def _ce_launch(
    rt: Runtime, kind: str, make_source: Any, out: CLArray, moved: CLArray, rows: list[CLArray],
    label_smoothing: float, ignore_index: int,
) -> None:  # fmt: skip
    """Launch row kernel ``kind`` (ember_ce / ember_ce_grad) over ``moved``'s rows (the class axis last):
    the per-row operands ``rows`` (target, and g for the gradient) collapse with the rows' axes."""
    C = moved.shape[-1]
    lead = moved.shape[:-1]
    osh, (xst, *rst) = collapse(lead, [moved.strides[:-1], *[r.strides for r in rows]])
    M = numel(lead)
    group = _row_group(rt, M, C, abs(moved.strides[-1]) == 1)
    dt = moved.dtype.name
    spec = (dt, len(osh), group, bool(label_smoothing))

    def make() -> tuple[str, str, list[Any]]:
        src, types = make_source(*spec)
        return src, f"ember_{kind}", types

    knl, wg = rt.kernel((kind, *spec), make)
    args = [M, C, out.buf, moved.buf, moved.offset, moved.strides[-1], *osh, *xst]
    for r, st in zip(rows, rst):
        args += [r.buf, r.offset, *st]
    args += [ctype(dt).np_compute.type(label_smoothing), int(ignore_index)]
    _launch_rows(rt, knl, wg, M, group, args)


def cross_entropy(rt: Runtime, logits: CLArray, target: CLArray, label_smoothing: float, ignore_index: int) -> CLArray:
    """Per-sample loss (N, ...) for logits (N, C, ...) and int64 class indices (N, ...)."""
    moved, _ = _moved(logits, [1])
    out = rt.empty(target.shape, logits.dtype)
    if out.size:
        _ce_launch(rt, "ce", _ce_source, out, moved, [target], label_smoothing, ignore_index)
    return out


def _ce_grad_source(dt: str, ro: int, group: int, smoothing: bool) -> tuple[str, list[Any]]:
    """d loss / d logits of a row: g * (softmax(x) - the smoothed one-hot of t), zero where t is ignored
    (the composite's formula, one pass for the max, one for the sum, one for the write)."""
    c = ctype(dt)
    A = c.compute
    params = ["const long M", "const long C", f"__global {c.storage}* restrict out"]
    params += [f"__global const {c.storage}* restrict x", "const long x_off", "const long x_is"]
    params += [f"const long osh{d}" for d in range(ro)] + [f"const long x_os{d}" for d in range(ro)]
    params += ["__global const long* restrict t", "const long t_off"] + [f"const long t_os{d}" for d in range(ro)]
    params += [f"__global const {c.storage}* restrict g", "const long g_off"] + [
        f"const long g_os{d}" for d in range(ro)
    ]
    params += [f"const {A} ls", "const long ignore"]
    types: list[Any] = [L, L, None, None, L, L] + [L] * (2 * ro) + [None, L] + [L] * ro + [None, L] + [L] * ro
    types += [c.np_compute, L]
    x = c.load("x", "xb + k * x_is")
    lines = [preamble({dt}), *_header("ember_ce_grad", params, group, A, ro, ["x", "t", "g"])]
    lines += [f"  {A} mx = -INFINITY;", "  " + _loop(group, "k", "C") + " {", f"    const {A} v = {x};"]
    lines += ["    if (v > mx || isnan(v)) mx = v;", "  }"]
    lines += ["  " + s for s in _tree(group, A, "mx", "max")]
    lines += [f"  if (isinf(mx)) mx = ({A})0;", f"  {A} tot = 0;", "  " + _loop(group, "k", "C") + " {"]
    lines += [f"    tot += exp({x} - mx);", "  }"]
    lines += ["  " + s for s in _tree(group, A, "tot", "sum")]
    hot = f"(k == tg ? ({A})1 - ls : ({A})0) + ls / ({A})C" if smoothing else f"(k == tg ? ({A})1 : ({A})0)"
    lines += [
        "  const long tg = t[tb];",
        f"  const {A} gs = tg != ignore ? ({A}){c.load('g', 'gb')} : ({A})0;",
        "  " + _loop(group, "k", "C") + " {",
        f"    const {A} p = exp({x} - mx) / tot;",
        "    " + c.store("out", "row * C + k", f"gs * (p - ({hot}))"),
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n", types


def cross_entropy_backward(
    rt: Runtime, g: CLArray, logits: CLArray, target: CLArray, label_smoothing: float, ignore_index: int
) -> CLArray:
    """d loss / d logits (N, C, ...) of the per-sample loss at cotangent ``g`` (N, ...), one row kernel:
    the class axis is moved last (a view), the result written in that order and viewed back."""
    moved, order = _moved(logits, [1])
    out = rt.empty(moved.shape, logits.dtype)
    inverse = [0] * logits.ndim
    for i, p in enumerate(order):
        inverse[p] = i
    if out.size:
        _ce_launch(rt, "ce_grad", _ce_grad_source, out, moved, [target, g], label_smoothing, ignore_index)
    return out.permute(inverse)  # type: ignore[return-value]


# -- attention ---------------------------------------------------------------------------
def attention(
    rt: Runtime, q: CLArray, k: CLArray, v: CLArray, mask: CLArray | None, is_causal: bool, scale: float
) -> CLArray:
    """softmax(q k^T * scale + mask) v with the causal and boolean/additive masks fused into
    the softmax kernel."""
    axes = list(range(k.ndim - 2)) + [k.ndim - 1, k.ndim - 2]
    s = matmul(rt, q, k.permute(axes))
    p = _run_softmax(rt, s, "softmax", scale=scale, mask=mask, causal_rows=q.shape[-2] if is_causal else 0)
    return matmul(rt, p, v)

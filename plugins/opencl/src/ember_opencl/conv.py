"""Window kernels: implicit-GEMM conv and conv_transpose, unfold (im2col), fold (col2im),
max/avg pooling and max-pool's gradient.

Same signatures as the composites in ``ember.ops.conv``; 1-3 spatial dimensions, inputs read
through strides. ``conv`` is one tiled GEMM per (image, group) whose B operand is gathered
from the input on the fly (no im2col buffer), bias added in the store; ``conv_transpose`` (the
input gradient of conv) gathers the same way from its input, keeping only the taps a stride
lands on. Both reuse the tiled family of :mod:`.matmul`. fold and the max-pool gradient are
gathers (each output element sums what lands on it), so they are deterministic and need no
atomics; ties in max pooling route the gradient to the window's first maximum, as PyTorch does.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from ember.dtypes import as_dtype

from .array import CLArray
from .cltypes import ctype
from .codegen import preamble, unravel
from .matmul import Gather, Tiling, choose, fits, gemm_source, launch_tiled
from .runtime import Runtime

__all__ = ["conv", "conv_transpose", "unfold", "fold", "max_pool", "max_pool_backward", "avg_pool"]

Pads = tuple[tuple[int, int], ...]
L = np.dtype(np.int64)


def _blocks(size: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...], padding: Pads,
            dilation: tuple[int, ...]) -> tuple[int, ...]:  # fmt: skip
    return tuple(
        (sz + lo + hi - d * (k - 1) - 1) // s + 1
        for sz, (lo, hi), k, s, d in zip(size, padding, kernel, stride, dilation)
    )


def _geometry(nd: int) -> list[str]:
    """Kernel parameters describing the windows: sizes, blocks, kernel, stride, dilation, low pads."""
    return [f"const long {n}{d}" for n in ("sz", "bl", "kr", "st", "dl", "lo") for d in range(nd)]


def _launch(rt: Runtime, knl: Any, wg: int, n: int, args: list[Any]) -> None:
    local = min(wg, 64 if rt.is_cpu else 256)
    rt.launch(knl, (-(-n // local) * local,), (local,), args)


def _tensor(name: str, c: Any, rank: int, const: bool = True) -> list[str]:
    q = "const " if const else ""
    return [f"__global {q}{c.storage}* restrict {name}", f"const long {name}_off"] + [
        f"const long {name}_s{d}" for d in range(rank)
    ]


def _at(name: str, coords: list[str]) -> str:
    return f"{name}_off + " + " + ".join(f"({c}) * {name}_s{d}" for d, c in enumerate(coords))


def _source(kind: str, dt: str, nd: int) -> tuple[str, list[Any]]:
    """kind: unfold | fold | max_pool | avg_pool | max_pool_backward."""
    c = ctype(dt)
    A = c.compute
    params = ["const long n", f"__global {c.storage}* restrict out", "const long N", "const long C", *_geometry(nd)]
    types: list[Any] = [L, None, L, L] + [L] * (6 * nd)
    rank = 2 + nd
    if kind == "fold":
        params += _tensor("x", c, 3)
        types += [None, L] + [L] * 3
    else:
        params += _tensor("x", c, rank)
        types += [None, L] + [L] * rank
    if kind == "unfold":
        params.append(f"const {A} value")
        types.append(c.np_compute)
    if kind == "avg_pool":
        params.append(f"__global const {A}* restrict divisor")
        types.append(None)
    if kind == "max_pool_backward":
        params += _tensor("g", c, rank) + _tensor("y", c, rank)
        types += ([None, L] + [L] * rank) * 2
    kvol = " * ".join(f"kr{d}" for d in range(nd))
    bvol = " * ".join(f"bl{d}" for d in range(nd))
    body: list[str] = [f"const long K = {kvol};", f"const long Lb = {bvol};"]
    inside = " && ".join(f"p{d} >= 0 && p{d} < sz{d}" for d in range(nd))
    if kind == "unfold":
        # out (N, C*K, Lb): i -> (n, c, kk, l)
        body += [
            "const long l = i % Lb; const long row = (i / Lb) % (C * K); const long nn = i / (Lb * C * K);",
            "const long ch = row / K; const long kk = row % K;",
            *unravel("kk", nd, "kr", "long", "k"),
            *unravel("l", nd, "bl", "long", "b"),
            *[f"const long p{d} = b{d} * st{d} + k{d} * dl{d} - lo{d};" for d in range(nd)],
            f"{A} v = value;",
            f"if ({inside}) v = {c.load('x', _at('x', ['nn', 'ch'] + [f'p{d}' for d in range(nd)]))};",
            c.store("out", "i", "v"),
        ]
    elif kind in ("max_pool", "avg_pool"):
        # out (N, C, *blocks)
        first = "-INFINITY" if kind == "max_pool" else f"({A})0"
        step = "if (v > acc || isnan(v)) acc = v;" if kind == "max_pool" else "acc += v;"
        pad = "-INFINITY" if kind == "max_pool" else f"({A})0"
        body += [
            "const long l = i % Lb; const long nc = i / Lb; const long ch = nc % C; const long nn = nc / C;",
            *unravel("l", nd, "bl", "long", "b"),
            f"{A} acc = {first};",
            "for (long kk = 0; kk < K; kk++) {",
            *["  " + s for s in unravel("kk", nd, "kr", "long", "k")],
            *[f"  const long p{d} = b{d} * st{d} + k{d} * dl{d} - lo{d};" for d in range(nd)],
            f"  const {A} v = ({inside}) ? ({A}){c.load('x', _at('x', ['nn', 'ch'] + [f'p{d}' for d in range(nd)]))}"
            f" : {pad};",
            f"  {step}",
            "}",
            c.store("out", "i", "acc / divisor[l]" if kind == "avg_pool" else "acc"),
        ]
    else:
        # fold / max_pool_backward: out (N, C, *size); gather what lands on each position
        body += [
            "long rest = i;",
            *[f"const long q{d} = rest % sz{d}; rest /= sz{d};" for d in reversed(range(nd))],
            "const long ch = rest % C; const long nn = rest / C;",
            f"{A} acc = 0;",
            "for (long kk = 0; kk < K; kk++) {",
            *["  " + s for s in unravel("kk", nd, "kr", "long", "k")],
            *[f"  const long t{d} = q{d} + lo{d} - k{d} * dl{d};" for d in range(nd)],
            "  if (" + " || ".join(f"t{d} < 0 || t{d} % st{d} != 0 || t{d} / st{d} >= bl{d}" for d in range(nd)) + ")",
            "    continue;",
            *[f"  const long b{d} = t{d} / st{d};" for d in range(nd)],
            "  const long l = "
            + " + ".join(f"b{d} * " + " * ".join([f"bl{e}" for e in range(d + 1, nd)] or ["1"]) for d in range(nd))
            + ";",  # fmt: skip
        ]
        if kind == "fold":
            body += [f"  acc += ({A}){c.load('x', _at('x', ['nn', 'ch * K + kk', 'l']))};", "}"]
        else:
            bidx = ["nn", "ch"] + [f"b{d}" for d in range(nd)]
            xpos = _at("x", ["nn", "ch"] + [f"p{d}" for d in range(nd)])
            body += [
                f"  const {A} m = {c.load('y', _at('y', bidx))};",
                "  long first = -1;",
                "  for (long j = 0; j < K && first < 0; j++) {",
                *["    " + s for s in unravel("j", nd, "kr", "long", "w")],
                *[f"    const long p{d} = b{d} * st{d} + w{d} * dl{d} - lo{d};" for d in range(nd)],
                f"    const {A} v = ({inside}) ? ({A}){c.load('x', xpos)} : -INFINITY;",
                "    if (v == m) first = j;",
                "  }",
                f"  if (first == kk) acc += {c.load('g', _at('g', bidx))};",
                "}",
            ]
        body.append(c.store("out", "i", "acc"))
    lines = [preamble({dt}), f"__kernel void ember_{kind}(" + ", ".join(params) + ") {"]
    lines += ["  const long i = get_global_id(0);", "  if (i >= n) return;"] + ["  " + s for s in body] + ["}"]
    return "\n".join(lines) + "\n", types


def _kernel(rt: Runtime, kind: str, dt: str, nd: int) -> tuple[Any, int]:
    def make() -> tuple[str, str, list[Any]]:
        s, t = _source(kind, dt, nd)
        return s, f"ember_{kind}", t

    return rt.kernel(("window", kind, dt, nd), make)


def _geo(size: tuple[int, ...], blocks: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
         dilation: tuple[int, ...], padding: Pads) -> list[int]:  # fmt: skip
    return [*size, *blocks, *kernel, *stride, *dilation, *(lo for lo, _ in padding)]


def _view(a: CLArray) -> list[Any]:
    return [a.buf, a.offset, *a.strides]


def unfold(rt: Runtime, x: CLArray, kernel: Any, stride: Any, padding: Pads, dilation: Any, value: float) -> CLArray:
    n, c = x.shape[:2]
    size = x.shape[2:]
    blocks = _blocks(size, kernel, stride, padding, dilation)
    out = rt.empty((n, c * math.prod(kernel), math.prod(blocks)), x.dtype)
    if out.size and x.size:
        knl, wg = _kernel(rt, "unfold", x.dtype.name, len(kernel))
        geo = _geo(size, blocks, kernel, stride, dilation, padding)
        value_arg = ctype(x.dtype).np_compute.type(value)
        _launch(rt, knl, wg, out.size, [out.size, out.buf, n, c, *geo, *_view(x), value_arg])
    elif out.size:
        raise ValueError("unfold of an empty input with non-empty output")  # pragma: no cover
    return out


def fold(rt: Runtime, cols: CLArray, size: Any, kernel: Any, stride: Any, padding: Pads, dilation: Any) -> CLArray:
    n = cols.shape[0]
    c = cols.shape[1] // math.prod(kernel)
    size = tuple(size)
    blocks = _blocks(size, kernel, stride, padding, dilation)
    out = rt.empty((n, c) + size, cols.dtype)
    if out.size:
        knl, wg = _kernel(rt, "fold", cols.dtype.name, len(kernel))
        geo = _geo(size, blocks, kernel, stride, dilation, padding)
        _launch(rt, knl, wg, out.size, [out.size, out.buf, n, c, *geo, *_view(cols)])
    return out


def max_pool(rt: Runtime, x: CLArray, kernel: Any, stride: Any, padding: Pads, dilation: Any) -> CLArray:
    n, c = x.shape[:2]
    blocks = _blocks(x.shape[2:], kernel, stride, padding, dilation)
    out = rt.empty((n, c) + blocks, x.dtype)
    if out.size:
        knl, wg = _kernel(rt, "max_pool", x.dtype.name, len(kernel))
        geo = _geo(x.shape[2:], blocks, kernel, stride, dilation, padding)
        _launch(rt, knl, wg, out.size, [out.size, out.buf, n, c, *geo, *_view(x)])
    return out


def max_pool_backward(
    rt: Runtime, g: CLArray, x: CLArray, y: CLArray, kernel: Any, stride: Any, padding: Pads, dilation: Any
) -> CLArray:
    n, c = x.shape[:2]
    out = rt.empty(x.shape, x.dtype)
    if out.size:
        blocks = y.shape[2:]
        knl, wg = _kernel(rt, "max_pool_backward", x.dtype.name, len(kernel))
        geo = _geo(x.shape[2:], blocks, kernel, stride, dilation, padding)
        _launch(rt, knl, wg, out.size, [out.size, out.buf, n, c, *geo, *_view(x), *_view(g), *_view(y)])
    return out


def avg_pool(rt: Runtime, x: CLArray, kernel: Any, stride: Any, padding: Pads, divisor: Any) -> CLArray:
    n, c = x.shape[:2]
    ones = (1,) * len(kernel)
    blocks = _blocks(x.shape[2:], kernel, stride, padding, ones)
    out = rt.empty((n, c) + blocks, x.dtype)
    if out.size:
        full = np.ones((), dtype=np.float64)
        for d in divisor:
            full = np.multiply.outer(full, np.asarray(d, dtype=np.float64))
        comp = ctype(x.dtype).np_compute
        div = rt.upload(np.ascontiguousarray(full.reshape(-1).astype(comp)), as_dtype(comp.name))
        knl, wg = _kernel(rt, "avg_pool", x.dtype.name, len(kernel))
        geo = _geo(x.shape[2:], blocks, kernel, stride, ones, padding)
        _launch(rt, knl, wg, out.size, [out.size, out.buf, n, c, *geo, *_view(x), div.buf])
    return out


# -- implicit GEMM -----------------------------------------------------------------------
def implicit_wins(rt: Runtime) -> bool:
    """Whether conv runs as implicit GEMM here: on GPUs; on CPUs (PoCL) im2col + the vector matmul
    is ~10x faster, unless ``EMBER_OPENCL_IMPLICIT_CONV=1`` (to test these kernels on a CPU)."""
    return not rt.is_cpu or os.environ.get("EMBER_OPENCL_IMPLICIT_CONV", "").strip() == "1"


def _gather(kind: str, dt: str, nd: int, idx: str) -> Gather:
    """B of the conv GEMM: element (gk = ci * KV + tap, go = output position) read from the input.

    ``conv``: input position = out * stride + tap * dilation - pad (zero outside);
    ``transpose``: the input position b with b * stride + tap * dilation - pad = out, if any."""
    c = ctype(dt)
    acc = "float" if c.is_wide_float else c.compute
    names = ("g_sz", "g_bl", "g_kr", "g_st", "g_dl", "g_lo", "g_sx")
    params = [f"const {idx} g_kv", f"const {idx} g_cs"] + [f"const {idx} {n}{d}" for n in names for d in range(nd)]
    npi = np.dtype(np.int32 if idx == "int" else np.int64)
    code = [f"const {idx} ci = gk / g_kv, kk = gk % g_kv;", *unravel("kk", nd, "g_kr", idx, "wk")]
    if kind == "conv":  # go runs over the output blocks g_bl, the input is g_sz
        code += unravel("go", nd, "g_bl", idx, "wq")
        code += [f"const {idx} p{d} = wq{d} * g_st{d} + wk{d} * g_dl{d} - g_lo{d};" for d in range(nd)]
        inside = " && ".join(f"p{d} >= 0 && p{d} < g_sz{d}" for d in range(nd))
        pos = " + ".join(f"p{d} * g_sx{d}" for d in range(nd))
    else:  # go runs over the output size g_sz, the input (blocks) is g_bl
        code += unravel("go", nd, "g_sz", idx, "wq")
        code += [f"const {idx} t{d} = wq{d} + g_lo{d} - wk{d} * g_dl{d};" for d in range(nd)]
        inside = " && ".join(f"t{d} >= 0 && t{d} % g_st{d} == 0 && t{d} / g_st{d} < g_bl{d}" for d in range(nd))
        pos = " + ".join(f"(t{d} / g_st{d}) * g_sx{d}" for d in range(nd))
    code.append(f"if ({inside}) v = ({acc}){c.load('B', f'b_base + ci * g_cs + {pos}')};")
    return Gather(tuple(code), tuple(params), (npi,) * len(params))


def _conv_tiling(rt: Runtime, dt: str, M: int, N: int, K: int) -> Tiling:
    """Few output channels per group make short wide GEMMs: a 16- or 32-row tile wastes less."""
    t = choose(rt, dt, M, N, K)
    for rows, small in ((16, Tiling(16, 128, 16, 4, 8, vw=4, chunk=4, db=True)),
                        (32, Tiling(32, 128, 16, 4, 8, vw=4, chunk=4, db=True))):  # fmt: skip
        if M <= rows and t.tm > rows and not rt.is_cpu and fits(rt, small, dt):
            return small
    return t


def _implicit(
    rt: Runtime, kind: str, x: CLArray, wmat: CLArray, bias: CLArray | None, out: CLArray, M: int, K: int,
    geo: list[int], groups: int, tiling: Tiling | None,
) -> None:  # fmt: skip
    """Launch the conv GEMM: per (image, group) C[M, N] = A[M, K] @ gather(x)[K, N], A = wmat (G, M, K)."""
    n, cin = x.shape[:2]
    nd = x.ndim - 2
    N = math.prod(out.shape[2:])
    dt = x.dtype.name
    cg = cin // groups
    ext = max(out.size, wmat.size, x.offset + sum(abs(s) * (d - 1) for d, s in zip(x.shape, x.strides)))
    idx = "int" if ext < 2**31 - 2**20 else "long"
    t = tiling or _conv_tiling(rt, dt, M, N, K)
    va = t.vw if dt in ("float32", "float64") else 1
    gather = _gather(kind, dt, nd, idx)
    spec = (dt, t, 2, idx, True, True, va, 1, None, gather, bias is not None, f"ember_{kind}_igemm")
    args = [M, N, K, wmat.buf, wmat.offset, K, 1, x.buf, x.offset, 0, 0, out.buf]
    args += [n, groups, 0, M * K, x.strides[0], cg * x.strides[1], out.shape[1] * N, M * N]
    args += [math.prod(geo[2 * nd : 3 * nd]), x.strides[1], *geo, *x.strides[2:]]
    if bias is not None:
        args += [bias.buf, bias.offset, bias.strides[0]]
    key = ("conv_igemm", kind, *spec[:-1])
    launch_tiled(rt, t, key, lambda: gemm_source(*spec[:-1], name=spec[-1]), spec[-1], M, N, n * groups, args)


def _zero_fill(rt: Runtime, out: CLArray, bias: CLArray | None) -> CLArray:
    """An empty reduction (no input channels): the output is the bias, or zeros."""
    from .elementwise import copy_into  # noqa: PLC0415

    if bias is None:
        zero = rt.upload(np.zeros(1, dtype=out.dtype.numpy), out.dtype)
        copy_into(rt, out, zero.with_layout((), (), 0))
    else:
        nd = out.ndim - 2
        copy_into(rt, out, bias.with_layout(out.shape, (0, bias.strides[0]) + (0,) * nd, bias.offset))
    return out


def conv(
    rt: Runtime, x: CLArray, w: CLArray, bias: CLArray | None, stride: Any, padding: Pads, dilation: Any,
    groups: int, tiling: Tiling | None = None,
) -> CLArray:  # fmt: skip
    """Convolution (N, C_in, *size) x (C_out, C_in / groups, *kernel) as an implicit GEMM."""
    from .elementwise import contiguous  # noqa: PLC0415

    n, cin = x.shape[:2]
    cout = w.shape[0]
    kernel = tuple(w.shape[2:])
    blocks = _blocks(x.shape[2:], kernel, tuple(stride), tuple(padding), tuple(dilation))
    out = rt.empty((n, cout) + blocks, x.dtype)
    K = (cin // groups) * math.prod(kernel)
    if out.size == 0:
        return out
    if K == 0:
        return _zero_fill(rt, out, bias)
    geo = _geo(x.shape[2:], blocks, kernel, tuple(stride), tuple(dilation), tuple(padding))
    _implicit(rt, "conv", x, contiguous(rt, w), bias, out, cout // groups, K, geo, groups, tiling)
    return out


def conv_transpose(
    rt: Runtime, x: CLArray, w: CLArray, bias: CLArray | None, size: Any, stride: Any, padding: Pads,
    dilation: Any, groups: int, tiling: Tiling | None = None,
) -> CLArray:  # fmt: skip
    """Transposed convolution (conv's input gradient): x (N, C_in, *blocks), w (C_in, C_out / groups, *kernel)."""
    from .elementwise import contiguous  # noqa: PLC0415

    n, cin = x.shape[:2]
    cog = w.shape[1]
    kernel = tuple(w.shape[2:])
    kv = math.prod(kernel)
    size = tuple(size)
    out = rt.empty((n, cog * groups) + size, x.dtype)
    cg = cin // groups
    K = cg * kv
    if out.size == 0:
        return out
    if K == 0:
        return _zero_fill(rt, out, bias)
    # A[g][co, ci * KV + tap] = w[g * cg + ci, co, tap]: a (G, C_out/G, C_in/G, KV) copy of the weight
    wc = contiguous(rt, w)
    wt = wc.with_layout((groups, cog, cg, kv), (cg * cog * kv, kv, cog * kv, 1), wc.offset)
    geo = _geo(size, tuple(x.shape[2:]), kernel, tuple(stride), tuple(dilation), tuple(padding))
    _implicit(rt, "transpose", x, contiguous(rt, wt), bias, out, cog, K, geo, groups, tiling)
    return out

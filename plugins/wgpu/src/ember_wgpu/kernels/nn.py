"""Row kernels for the neural-network composites: softmax, log_softmax, logsumexp, layer_norm,
rms_norm, cross_entropy and its gradient, and attention built from them and the matmul kernel.

A row kernel gives each row (the reduced axes, made trailing and contiguous) one workgroup of
256 threads: passes over the row reduce into shared memory (max, then sums), a final pass
writes. Same signatures and semantics as the core composites (ember.ops.nn), including a
row whose max is infinite (shifted by 0) and fully masked attention rows (NaN).
"""

from __future__ import annotations

from typing import Any

from ember.dtypes import DType
from ember.lazy.program import Const, FusedProgram
from ember.views import collapse, contiguous_strides

from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from .common import GROUP_ID, ParamBlock, compile_kernel, grid, header, launch, prod
from .matmul import matmul

__all__ = [
    "softmax",
    "logsumexp",
    "layer_norm",
    "layer_norm_backward",
    "rms_norm",
    "cross_entropy",
    "cross_entropy_backward",
    "attention",
    "rows_last",
]

WG = 256

_PARAMS = ParamBlock(
    [("rows", "u32"), ("len", "u32"), ("eps", "f32"), ("causal", "u32"), ("lq", "u32"), ("off", "i32")]
    + [("ign_lo", "u32"), ("ign_hi", "u32"), ("smoothing", "f32")]
)

_REDUCE = """fn wg_max(t: u32, v: f32) -> f32 {
  sred[t] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s = s >> 1u) {
    if (t < s) { sred[t] = f_max(sred[t], sred[t + s]); }
    workgroupBarrier();
  }
  let r = sred[0];
  workgroupBarrier();
  return r;
}
fn wg_sum(t: u32, v: f32) -> f32 {
  sred[t] = v;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s = s >> 1u) {
    if (t < s) { sred[t] = sred[t] + sred[t + s]; }
    workgroupBarrier();
  }
  let r = sred[0];
  workgroupBarrier();
  return r;
}"""


def _head(t: WType, f16: bool, extra: str = "") -> str:
    return f"""{header(f16)}
@group(0) @binding(1) var<storage, read> X: array<{t.storage}>;
{extra}
var<workgroup> sred: array<f32, {WG}>;
{_REDUCE}"""


def _row_start() -> str:
    return f"""{GROUP_ID}
  let row = gid_lin;
  if (row >= P.rows) {{ return; }}
  let base = row * P.len;"""


# -- softmax family ------------------------------------------------------------------------
def _softmax_build(t: WType, kind: str, f16: bool):  # type: ignore[no-untyped-def]
    x = t.load("X[base + j]")
    valid = "(P.causal == 0u || i32(j) <= i32(row % P.lq) + P.off)"
    if kind == "logsumexp":
        out_decl = f"@group(0) @binding(2) var<storage, read_write> Y: array<{t.storage}>;"
        final = f"if (t == 0u) {{ Y[row] = {t.store('m_log(s) + m')}; }}"
    else:
        out_decl = f"@group(0) @binding(2) var<storage, read_write> Y: array<{t.storage}>;"
        expr = "m_exp(x - m) / s" if kind == "softmax" else "(x - m) - ls"
        final = f"""let ls = m_log(s);
  for (var j = t; j < P.len; j = j + {WG}u) {{
    var x = {x};
    if (!{valid}) {{ x = bitcast<f32>(0xff800000u); }}
    Y[base + j] = {t.store(expr)};
  }}"""
    body = f"""{_head(t, f16, out_decl)}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {_row_start()}
  var m = bitcast<f32>(0xff800000u);
  for (var j = t; j < P.len; j = j + {WG}u) {{
    if ({valid}) {{ m = f_max(m, {x}); }}
  }}
  m = wg_max(t, m);
  if (is_inf(m)) {{ m = 0.0; }}
  var acc = 0.0;
  for (var j = t; j < P.len; j = j + {WG}u) {{
    if ({valid}) {{ acc = acc + m_exp({x} - m); }}
  }}
  let s = wg_sum(t, acc);
  {final}
}}"""
    return body, _PARAMS, ("r", "w")


def rows_last(rt: Runtime, x: WgpuArray, axes: tuple[int, ...]) -> tuple[WgpuArray, list[int]]:
    """``x`` with ``axes`` moved last and made contiguous, and the permutation used."""
    nd = len(x.shape)
    order = [i for i in range(nd) if i not in axes] + list(axes)
    view = x.permute(order)
    return ew.contiguous(rt, view), order


def _unpermute(a: WgpuArray, order: list[int]) -> WgpuArray:
    inverse = [0] * len(order)
    for i, o in enumerate(order):
        inverse[o] = i
    return a.permute(inverse)


def _softmax_rows(
    rt: Runtime, c: WgpuArray, rows: int, length: int, kind: str, causal: tuple[int, int] | None = None
) -> WgpuArray:
    t = rt.types[c.dtype]
    f16 = rt.types.uses_f16(c.dtype)
    out = rt.empty((rows,) if kind == "logsumexp" else c.shape, c.dtype)
    kernel = compile_kernel(rt, ("rowsoftmax", kind, t.name), lambda: _softmax_build(t, kind, f16), kind)
    values = {"rows": rows, "len": length}
    if causal is not None:
        values.update({"causal": 1, "lq": causal[0], "off": causal[1]})
    launch(rt, kernel, values, [c.buffer, out.buffer], grid(rows), kind)
    return out


def softmax(rt: Runtime, x: WgpuArray, axis: int, log: bool) -> WgpuArray:
    """softmax or log_softmax of ``x`` along ``axis``."""
    if x.size == 0:
        return rt.empty(x.shape, x.dtype)
    c, order = rows_last(rt, x, (axis,))
    length = x.shape[axis]
    out = _softmax_rows(rt, c, c.size // length, length, "log_softmax" if log else "softmax")
    return _unpermute(out, order)


def logsumexp(rt: Runtime, x: WgpuArray, axes: tuple[int, ...], keepdims: bool) -> WgpuArray:
    """log(sum(exp(x))) over ``axes``."""
    out_shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keepdims or i not in axes)
    if prod(out_shape) == 0:
        return rt.empty(out_shape, x.dtype)
    length = prod([x.shape[i] for i in axes])
    if length == 0:
        return ew.fill(rt, out_shape, float("-inf"), x.dtype)
    c, _ = rows_last(rt, x, tuple(sorted(axes)))
    out = _softmax_rows(rt, c, c.size // length, length, "logsumexp")
    return out.with_layout(out_shape, contiguous_strides(out_shape), 0)


# -- normalisation -----------------------------------------------------------------------------
def _norm_build(t: WType, kind: str, f16: bool):  # type: ignore[no-untyped-def]
    extra = [
        f"@group(0) @binding(2) var<storage, read> W: array<{t.storage}>;",
        f"@group(0) @binding(3) var<storage, read> B: array<{t.storage}>;",
        f"@group(0) @binding(4) var<storage, read_write> Y: array<{t.storage}>;",
    ]
    x = t.load("X[base + j]")
    w = t.load("W[j]")
    b = t.load("B[j]")
    if kind == "layer_norm":
        stats = f"""var acc = 0.0;
  for (var j = t; j < P.len; j = j + {WG}u) {{ acc = acc + {x}; }}
  let mu = wg_sum(t, acc) / f32(P.len);
  var acc2 = 0.0;
  for (var j = t; j < P.len; j = j + {WG}u) {{ let d = {x} - mu; acc2 = acc2 + d * d; }}
  let r = 1.0 / sqrt(wg_sum(t, acc2) / f32(P.len) + P.eps);"""
        expr = f"({x} - mu) * r * {w} + {b}"
        bindings = ("r", "r", "r", "w")
    else:
        stats = f"""var acc = 0.0;
  for (var j = t; j < P.len; j = j + {WG}u) {{ let v = {x}; acc = acc + v * v; }}
  let r = 1.0 / sqrt(wg_sum(t, acc) / f32(P.len) + P.eps);"""
        expr = f"{x} * r * {w}"
        extra[1] = "@group(0) @binding(3) var<storage, read> B: array<u32>;"
        bindings = ("r", "r", "r", "w")
    body = f"""{_head(t, f16, chr(10).join(extra))}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {_row_start()}
  {stats}
  for (var j = t; j < P.len; j = j + {WG}u) {{
    Y[base + j] = {t.store(expr)};
  }}
}}"""
    return body, _PARAMS, bindings


def _norm(rt: Runtime, kind: str, x: WgpuArray, w: WgpuArray, b: WgpuArray | None, eps: float) -> WgpuArray:
    out = rt.empty(x.shape, x.dtype)
    if out.size == 0:
        return out
    length = w.size
    c = ew.contiguous(rt, x)
    wc = ew.contiguous(rt, w)
    bc = ew.contiguous(rt, b) if b is not None else wc
    t = rt.types[x.dtype]
    f16 = rt.types.uses_f16(x.dtype)
    kernel = compile_kernel(rt, ("norm", kind, t.name), lambda: _norm_build(t, kind, f16), kind)
    rows = x.size // length
    launch(rt, kernel, {"rows": rows, "len": length, "eps": eps}, [c.buffer, wc.buffer, bc.buffer, out.buffer],
           grid(rows), kind)  # fmt: skip
    return out


def layer_norm(rt: Runtime, x: WgpuArray, w: WgpuArray, b: WgpuArray, eps: float) -> WgpuArray:
    return _norm(rt, "layer_norm", x, w, b, eps)


def rms_norm(rt: Runtime, x: WgpuArray, w: WgpuArray, eps: float) -> WgpuArray:
    return _norm(rt, "rms_norm", x, w, None, eps)


def _norm_backward_build(t: WType, f16: bool):  # type: ignore[no-untyped-def]
    """dx of layer_norm for one row: rstd * (g*w - mean(g*w) - xhat * mean(g*w*xhat)), the row's
    statistics recomputed from x (two passes for mean and variance, one for both sums, one to write)."""
    extra = f"""@group(0) @binding(2) var<storage, read> G: array<{t.storage}>;
@group(0) @binding(3) var<storage, read> W: array<{t.storage}>;
@group(0) @binding(4) var<storage, read_write> Y: array<{t.storage}>;"""
    x, g, w = t.load("X[base + j]"), t.load("G[base + j]"), t.load("W[j]")
    body = f"""{_head(t, f16, extra)}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {_row_start()}
  let n = f32(P.len);
  var acc = 0.0;
  for (var j = t; j < P.len; j = j + {WG}u) {{ acc = acc + {x}; }}
  let mu = wg_sum(t, acc) / n;
  var acc2 = 0.0;
  for (var j = t; j < P.len; j = j + {WG}u) {{ let d = {x} - mu; acc2 = acc2 + d * d; }}
  let r = 1.0 / sqrt(wg_sum(t, acc2) / n + P.eps);
  var sg = 0.0;
  var sgx = 0.0;
  for (var j = t; j < P.len; j = j + {WG}u) {{
    let gh = {g} * {w};
    sg = sg + gh;
    sgx = sgx + gh * ({x} - mu) * r;
  }}
  let mg = wg_sum(t, sg) / n;
  let mgx = wg_sum(t, sgx) / n;
  for (var j = t; j < P.len; j = j + {WG}u) {{
    let xhat = ({x} - mu) * r;
    Y[base + j] = {t.store(f"r * ({g} * {w} - mg - xhat * mgx)")};
  }}
}}"""
    return body, _PARAMS, ("r", "r", "r", "w")


def layer_norm_backward(rt: Runtime, g: WgpuArray, x: WgpuArray, w: WgpuArray, eps: float) -> WgpuArray:
    """layer_norm's input gradient over ``w``'s trailing axes, one workgroup a row."""
    out = rt.empty(x.shape, x.dtype)
    if out.size == 0:
        return out
    length = w.size
    xc, gc, wc = (ew.contiguous(rt, a) for a in (x, g, w))
    t = rt.types[x.dtype]
    f16 = rt.types.uses_f16(x.dtype)
    kernel = compile_kernel(rt, ("norm_backward", t.name), lambda: _norm_backward_build(t, f16), "layer_norm_backward")
    rows = x.size // length
    launch(rt, kernel, {"rows": rows, "len": length, "eps": eps}, [xc.buffer, gc.buffer, wc.buffer, out.buffer],
           grid(rows), "layer_norm_backward")  # fmt: skip
    return out


# -- cross-entropy -----------------------------------------------------------------------------
#: the row kernels' block. Rows (the logits' axes but the class axis, in C order) are split as
#: ``row = r0 * inner + r1``, and each operand is read in place through its strides over (r0, r1):
#: logits X (and ``x_sc`` along the classes), targets T, the gradient's cotangent G (0 strides for a
#: broadcast g, negative for a flipped one); the gradient is written class-last and contiguous
_CE_PARAMS = ParamBlock(
    [("rows", "u32"), ("len", "u32"), ("inner", "u32"), ("ign_lo", "u32"), ("ign_hi", "u32"), ("smoothing", "f32")]
    + [("x_off", "i32"), ("x_s0", "i32"), ("x_s1", "i32"), ("x_sc", "i32")]
    + [("t_off", "i32"), ("t_s0", "i32"), ("t_s1", "i32"), ("g_off", "i32"), ("g_s0", "i32"), ("g_s1", "i32")]
)


def _ce_row(t: WType, ti: WType, f16: bool, extra: str, with_total: bool) -> str:
    """Shared WGSL of the forward and backward: header (X logits, T targets), row setup (``base``: the
    row's first element in a class-last contiguous layout; ``xb``: in X), the row's
    max ``m`` (0 if infinite) and ``s`` = sum exp(x - m) (and ``total`` = sum x when asked), and the
    target: ``ignored``, and ``cls`` its class, or ``P.len`` (no class) when out of [0, len)."""
    x = t.load("X[u32(xb + i32(j) * P.x_sc)]")
    tot = ("\n  var tot = 0.0;", " tot = tot + v;", "\n  let total = wg_sum(t, tot);") if with_total else ("", "", "")
    if ti.cls in "lL":
        target = """let ignored = tw.x == P.ign_lo && tw.y == P.ign_hi;
  let cls = select(P.len, tw.x, tw.y == 0u && tw.x < P.len);"""
    else:
        target = """let ignored = bitcast<u32>(tw) == P.ign_lo;
  let cls = select(P.len, bitcast<u32>(tw), bitcast<u32>(tw) < P.len);"""
    return f"""{_head(t, f16, f"@group(0) @binding(2) var<storage, read> T: array<{ti.storage}>;" + chr(10) + extra)}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {_row_start()}
  let r0 = i32(row / P.inner);
  let r1 = i32(row % P.inner);
  let xb = P.x_off + r0 * P.x_s0 + r1 * P.x_s1;
  var m = bitcast<f32>(0xff800000u);
  for (var j = t; j < P.len; j = j + {WG}u) {{ m = f_max(m, {x}); }}
  m = wg_max(t, m);
  if (is_inf(m)) {{ m = 0.0; }}
  var acc = 0.0;{tot[0]}
  for (var j = t; j < P.len; j = j + {WG}u) {{ let v = {x}; acc = acc + m_exp(v - m);{tot[1]} }}
  let s = wg_sum(t, acc);{tot[2]}
  let tw = T[u32(P.t_off + r0 * P.t_s0 + r1 * P.t_s1)];
  {target}"""


def _ce_build(t: WType, ti: WType, f16: bool):  # type: ignore[no-untyped-def]
    """The per-row loss: lse - x[cls], with label smoothing; 0 for ignored or out-of-range targets."""
    body = f"""{_ce_row(t, ti, f16, f"@group(0) @binding(3) var<storage, read_write> Y: array<{t.storage}>;", True)}
  if (t == 0u) {{
    let lse = m + m_log(s);
    var loss = 0.0;
    if (!ignored && cls < P.len) {{
      loss = lse - {t.load("X[u32(xb + i32(cls) * P.x_sc)]")};
      if (P.smoothing != 0.0) {{
        loss = (1.0 - P.smoothing) * loss - (P.smoothing / f32(P.len)) * (total - f32(P.len) * lse);
      }}
    }}
    Y[row] = {t.store("loss")};
  }}
}}"""
    return body, _CE_PARAMS, ("r", "r", "w")


def _ce_grad_build(t: WType, ti: WType, f16: bool):  # type: ignore[no-untyped-def]
    """d loss / d logits of a row: g * (softmax(x) - (1 - smoothing) * onehot(cls) - smoothing / len),
    g taken as 0 on an ignored row (the composite's rule: an out-of-range class has no one)."""
    extra = f"""@group(0) @binding(3) var<storage, read> G: array<{t.storage}>;
@group(0) @binding(4) var<storage, read_write> Y: array<{t.storage}>;"""
    body = f"""{_ce_row(t, ti, f16, extra, False)}
  var gs = 0.0;
  if (!ignored) {{ gs = {t.load("G[u32(P.g_off + r0 * P.g_s0 + r1 * P.g_s1)]")}; }}
  let off = P.smoothing / f32(P.len);
  let hit = 1.0 - P.smoothing;
  for (var j = t; j < P.len; j = j + {WG}u) {{
    let h = select(off, off + hit, j == cls);
    Y[base + j] = {t.store(f"gs * (m_exp({t.load('X[u32(xb + i32(j) * P.x_sc)]')} - m) / s - h)")};
  }}
}}"""
    return body, _CE_PARAMS, ("r", "r", "r", "w")


def _ce_geometry(rt: Runtime, moved: WgpuArray, per_row: list[WgpuArray]) -> tuple[WgpuArray, list[WgpuArray], Any]:
    """The logits (class axis last, a view) and the per-row operands (target, g), each read in place
    where the rows' axes collapse, jointly, to two (``inner`` and its strides), else copied C-order
    (the per-row operands first, then the logits); returns them and (inner, strides of each)."""
    lead = moved.shape[:-1]
    for attempt in range(3):
        shape, strides = collapse(lead, [moved.strides[:-1], *[a.strides for a in per_row]])
        if len(shape) <= 2:
            break
        if attempt == 0:
            per_row = [ew.contiguous(rt, a) for a in per_row]
        else:
            moved = ew.contiguous(rt, moved)
    inner = shape[1] if len(shape) == 2 else 1
    pairs = [st if len(st) == 2 else (st[0], 0) for st in strides]  # one axis (inner 1): r0 walks it
    return moved, per_row, (inner, pairs)


def _ce_launch(
    rt: Runtime, kind: str, build: Any, out: WgpuArray, logits: WgpuArray, target: WgpuArray,
    g: WgpuArray | None, label_smoothing: float, ignore_index: int,
) -> None:  # fmt: skip
    """Launch row kernel ``kind`` (``build``: forward or gradient) over the rows of ``logits`` (N, C, ...),
    one workgroup a row, logits, target (and g) read in place through their strides."""
    moved = logits.permute([0, *range(2, logits.ndim), 1])
    moved, per_row, (inner, pairs) = _ce_geometry(rt, moved, [target] if g is None else [target, g])
    t, ti = rt.types[logits.dtype], rt.types[target.dtype]
    f16 = rt.types.uses_f16(logits.dtype)
    kernel = compile_kernel(rt, (kind, t.name, ti.name), lambda: build(t, ti, f16), kind)
    rows = target.size
    ign = int(ignore_index) & 0xFFFFFFFFFFFFFFFF
    values = {
        "rows": rows, "len": logits.shape[1], "inner": inner, "ign_lo": ign & 0xFFFFFFFF, "ign_hi": ign >> 32,
        "smoothing": float(label_smoothing), "x_off": moved.offset, "x_s0": pairs[0][0], "x_s1": pairs[0][1],
        "x_sc": moved.strides[-1],
    }  # fmt: skip
    for name, a, (s0, s1) in zip("tg", per_row, pairs[1:]):
        values.update({f"{name}_off": a.offset, f"{name}_s0": s0, f"{name}_s1": s1})
    buffers = [moved.buffer, *[a.buffer for a in per_row], out.buffer]
    launch(rt, kernel, values, buffers, grid(rows), kind)


def cross_entropy(
    rt: Runtime, logits: WgpuArray, target: WgpuArray, label_smoothing: float, ignore_index: int
) -> WgpuArray:
    """Per-element softmax cross-entropy: logits (N, C, ...), integer target (N, ...)."""
    out = rt.empty(target.shape, logits.dtype)
    if out.size == 0:
        return out
    _ce_launch(rt, "cross_entropy", _ce_build, out, logits, target, None, label_smoothing, ignore_index)
    return out


def cross_entropy_backward(
    rt: Runtime, g: WgpuArray, logits: WgpuArray, target: WgpuArray, label_smoothing: float, ignore_index: int
) -> WgpuArray:
    """d loss / d logits (N, C, ...) of the per-element loss at cotangent ``g`` (N, ...), one row
    kernel: written class-last and returned as a view with the class axis back at 1."""
    order = [0, *range(2, logits.ndim), 1]
    out = rt.empty(tuple(logits.shape[i] for i in order), logits.dtype)
    if out.size:
        if g.dtype != logits.dtype:
            g = ew.apply_op(rt, "cast", (g,), dtype=logits.dtype)
        _ce_launch(rt, "cross_entropy_backward", _ce_grad_build, out, logits, target, g, label_smoothing, ignore_index)
    return _unpermute(out, order)


# -- attention -----------------------------------------------------------------------------
def attention(
    rt: Runtime, q: WgpuArray, k: WgpuArray, v: WgpuArray, mask: WgpuArray | None, is_causal: bool, scale: float
) -> WgpuArray:
    """softmax(q k^T * scale + mask) v, with a causal mask applied inside the softmax rows."""
    kt = k.permute((*range(k.ndim - 2), k.ndim - 1, k.ndim - 2))
    s = matmul(rt, q, kt)
    if s.size == 0:
        return matmul(rt, s, v)
    dt: DType = s.dtype
    shape = s.shape
    if mask is not None and len(mask.shape) > len(shape):
        shape = ew.broadcast_shape(shape, mask.shape)
    d = dt.name
    inputs: list[tuple[str, str]] = [(d, "tensor"), (d, "scalar")]
    operands: list[Any] = [s, float(scale)]
    instrs: list[tuple[str, str, tuple[Any, ...]]] = [("mul", d, (0, 1))]
    if mask is not None:
        inputs.append((mask.dtype.name, "tensor"))
        operands.append(mask)
        if mask.dtype.kind == "b":
            instrs.append(("where", d, (2, 3, Const(float("-inf"), d))))
        elif mask.dtype is not dt:
            instrs.append(("cast", d, (2,)))
            instrs.append(("add", d, (3, 4)))
        else:
            instrs.append(("add", d, (3, 2)))
    program = FusedProgram(tuple(inputs), tuple(instrs), (len(inputs) + len(instrs) - 1,))
    (scaled,) = ew.run_program(rt, program, operands, shape)
    lq, ls = shape[-2], shape[-1]
    p = _softmax_rows(rt, scaled, scaled.size // ls, ls, "softmax", (lq, ls - lq) if is_causal else None)
    return matmul(rt, p, v)

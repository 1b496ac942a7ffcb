"""Flash-style scaled-dot-product attention for ember-wgpu: tiled WGSL kernels, no score tensor.

``softmax(q k^T * scale) v`` as FlashAttention computes it (Dao et al. 2022; the design of
ember-cuda's ``attention.py``): a workgroup owns a tile of query rows, walks the keys a tile at a
time through workgroup memory with the online softmax (running row maximum and sum, the partial
output rescaled as the maximum grows), so the (L, S) scores never reach a buffer. The backward is
FlashAttention-2's (ember-cuda's ``attention_backward.py``): a stats pass (the forward compiled
with ``STATS``: each row's log-sum-exp and ``delta = dO . O``), a dK/dV kernel per key tile and a
dQ kernel per query tile, each gradient one workgroup's sum in a fixed order (no atomics).

WGSL has no warp shuffles, so a row is owned by ``H`` invocations (1, 2 or 4), each holding a
slice of the head in registers (q and o; dK, dV, k and v; q, dO and dQ); the partial dot products
of a tile meet in workgroup memory. ``H`` keeps the row vectors within 32 vec4 registers a thread;
the key (or query) tile shrinks until the workgroup memory fits the adapter's limit and 32 KiB.
Scores use q pre-scaled by ``scale * log2(e)`` (``exp2``). float32 compute; float16 (as f16 where
the adapter has ``shader-f16``) and bfloat16 are read into f32 and rounded on store. Covered: head
sizes 32/64/96/128 with v of the same size, ``is_causal`` (key n visible to query r when
``n <= r + S - L``; a row that sees no key gives NaN forward and zero gradients), batch axes that
broadcast; q, k, v and dO are read in place through their strides (W4's heads, views of one fused
projection, cost no copy). The rest (an explicit mask, other head sizes) runs the composite
forward (``nn.attention``); the backward declines it (returns ``NotImplemented``: dispatch runs
the core's composite rule). The backend takes the backward kernels only with
``EMBER_WGPU_FLASH_BACKWARD=1`` (:func:`backward_enabled`: slower than the composite on an H100);
``EMBER_WGPU_FLASH=0`` turns the forward off too.
``CALLS`` counts launches, for tests.
"""

from __future__ import annotations

from collections import Counter
from types import NotImplementedType
from typing import Any

from ember.dtypes import float32
from ember.views import collapse

from .. import settings
from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from . import nn
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, header, launch, prod

__all__ = ["CALLS", "HEAD_SIZES", "enabled", "backward_enabled", "forward", "backward", "geometry", "source"]

#: kernel launches by op (tests read it; nothing else depends on it)
CALLS: Counter[str] = Counter()
#: the head sizes the kernels are generated for (whole vec4s, sliced evenly over H invocations)
HEAD_SIZES = (32, 64, 96, 128)
_FLOATS = frozenset({"float32", "float16", "bfloat16"})
_LOG2E = 1.4426950408889634
_BUDGET = 32768  # workgroup memory a kernel takes at most, in bytes (lavapipe's limit; NVIDIA has 48 KiB)
_REGS = 32  # vec4 registers of row vectors a thread holds at most
#: the row vectors each kernel holds: forward q, o; dq q, dO, dQ; dkdv k, v, dK, dV
_VECTORS = {"forward": 2, "stats": 2, "dq": 3, "dkdv": 4}

#: batch axes the kernels decode (an operand's batch stride each, 0 where it broadcasts)
_NB = 3
#: the operands read in place through their strides (in vec4s): offset, row stride, batch strides
_OPERANDS = ("q", "k", "v", "g")
_PARAMS = ParamBlock(
    [("L", "u32"), ("S", "u32"), ("tiles", "u32"), ("groups", "u32"), ("qscale", "f32"), ("causal", "u32")]
    + [("off", "i32"), ("kscale", "f32"), ("scale", "f32"), ("gk", "u32"), ("gv", "u32")]
    + [(f"d{i}", "u32") for i in range(_NB)]
    + [(f"{x}_{f}", "u32") for x in _OPERANDS for f in ("off", "rs", *(f"b{i}" for i in range(_NB)))]
)


def enabled() -> bool:
    """Whether the flash kernels run (``EMBER_WGPU_FLASH=0``: the composite forward and autodiff's rule)."""
    return settings.flash()


def backward_enabled() -> bool:
    """Whether the flash backward runs: only when asked (``EMBER_WGPU_FLASH_BACKWARD=1``). On an H100's
    Vulkan, W4's attention (32, 16, 512, 64) took 2.73 ms forward and 15.4 ms forward + backward through
    the kernels, 4.12 and 13.2 ms through the composite (its GEMMs are the tuned ones): the flash
    forward with autodiff's composite backward is the fastest pair (plugins/cuda/logs/h100-2026-12-06-closing)."""
    return enabled() and settings.flash_backward()


#: (H invocations per row, rows per workgroup, keys or queries per tile)
Geometry = tuple[int, int, int]


def geometry(rt: Runtime, kind: str, head: int) -> Geometry | None:
    """(H invocations per row, rows per workgroup, keys or queries per tile) of kernel ``kind``
    (forward, stats, dq, dkdv) at head size ``head``; None where the adapter's limits allow none."""
    d4 = head // 4
    h = 1
    while _VECTORS[kind] * d4 > _REGS * h or d4 % h:
        h *= 2
    rows = 64 if h <= 2 else 32
    wg = rows * h
    lim = rt.limits
    if wg > int(lim.get("max-compute-invocations-per-workgroup", 256)) or wg > int(
        lim.get("max-compute-workgroup-size-x", 256)
    ):
        return None
    budget = min(rt.shared_bytes, _BUDGET)
    partials = 1 if kind in ("forward", "stats") else 2
    for bn in (32, 16, 8, 4):
        floats = 2 * bn * head + partials * wg * bn + (2 * bn if kind == "dkdv" else 0)
        if 4 * floats <= budget:
            return h, rows, bn
    return None


# -- WGSL ---------------------------------------------------------------------------------
def _vec(prefix: str, dh: int, init: str, mutable: bool = True) -> str:
    """Declarations of ``prefix0``...: a thread's slice of a row, ``init`` formatted with ``{i}``."""
    kw = "var" if mutable else "let"
    return "\n  ".join(f"{kw} {prefix}{i} = {init.format(i=i)};" for i in range(dh))


def _dot(prefix: str, arr: str, base: str, dh: int) -> str:
    """The slice's dot product with ``arr[base ...]``, summed in one fixed order."""
    return " + ".join(f"dot({prefix}{i}, {arr}[{base} + {i}u])" for i in range(dh))


def _fma(acc: str, coef: str, arr: str, base: str, dh: int) -> str:
    return "\n      ".join(f"{acc}{i} = fma(vec4<f32>({coef}), {arr}[{base} + {i}u], {acc}{i});" for i in range(dh))


def _sum(arr: str, h: int) -> str:
    """A row's total over its H partials (slot ``j * WG + row * H + x``), in one fixed order."""
    return " + ".join(f"{arr}[j * WG + row * H + {x}u]" for x in range(h))


def _prelude(t: WType, f16: bool, head: int, h: int, rows: int, bn: int, bindings: list[tuple[str, str, str]]) -> str:
    d4 = head // 4
    st = t.storage
    decl = "\n".join(
        f"@group(0) @binding({i + 1}) var<storage, {'read_write' if mode == 'w' else 'read'}> {name}: array<{elem}>;"
        for i, (name, mode, elem) in enumerate(bindings)
    )
    comps = ", ".join(t.store(f"x.{c}") for c in "xyzw")
    return f"""{header(f16)}
{decl}
const D4 = {d4}u;
const H = {h}u;
const DH = {d4 // h}u;
const ROWS = {rows}u;
const WG = {rows * h}u;
const BN = {bn}u;
fn st4(x: vec4<f32>) -> vec4<{st}> {{ return vec4<{st}>({comps}); }}
// the first vec4 of batch b of an operand: its offset plus its batch strides over the decoded axes
fn at_batch(b: u32, off: u32, s0: u32, s1: u32, s2: u32) -> u32 {{
  let c2 = b % P.d2;
  let rest = b / P.d2;
  return off + (rest / P.d1) * s0 + (rest % P.d1) * s1 + c2 * s2;
}}"""


def _start(row_count: str) -> str:
    """The workgroup's batch index ``b`` and first row ``r0``, the thread's ``row``, ``r`` and slice ``hb``."""
    return f"""{GROUP_ID}
  if (gid_lin >= P.groups) {{ return; }}
  let b = gid_lin / P.tiles;
  let r0 = (gid_lin % P.tiles) * ROWS;
  let row = t / H;
  let hb = (t % H) * DH;
  let r = r0 + row;
  let rc = min(r, {row_count} - 1u);
  let qb = at_batch(b, P.q_off, P.q_b0, P.q_b1, P.q_b2);
  let kb = at_batch(b, P.k_off, P.k_b0, P.k_b1, P.k_b2);
  let vb = at_batch(b, P.v_off, P.v_b0, P.v_b1, P.v_b2);
  let gb = at_batch(b, P.g_off, P.g_b0, P.g_b1, P.g_b2);"""


def _load_tile(a: str, b: str, src_a: str, src_b: str, rows: str, first: str, scale_a: str = "") -> str:
    """Rows [first, first + BN) of two (rows x D) operands of batch b into workgroup tiles, zeros past ``rows``."""
    x, y = src_a.lower(), src_b.lower()
    return f"""for (var i = t; i < BN * D4; i = i + WG) {{
      let n = {first} + i / D4;
      var xa = vec4<f32>(0.0);
      var xb = vec4<f32>(0.0);
      if (n < {rows}) {{
        xa = vec4<f32>({src_a}[{x}b + n * P.{x}_rs + i % D4]){scale_a};
        xb = vec4<f32>({src_b}[{y}b + n * P.{y}_rs + i % D4]);
      }}
      {a}[i] = xa;
      {b}[i] = xb;
    }}"""


_NEG_INF = "bitcast<f32>(0xff800000u)"
_POS_INF = "bitcast<f32>(0x7f800000u)"


def _forward_source(t: WType, f16: bool, head: int, h: int, rows: int, bn: int, stats: bool) -> str:
    dh = head // 4 // h
    vt = f"vec4<{t.storage}>"
    binds = [("Q", "r", vt), ("K", "r", vt), ("V", "r", vt)]
    binds += [("G", "r", vt), ("LSE", "w", "f32"), ("DELTA", "w", "f32")] if stats else [("O", "w", vt)]
    masked = "n >= P.S || (P.causal != 0u && i32(n) > i32(r) + P.off)"
    if stats:
        tail = f"""let grow = gb + rc * P.g_rs + hb;
  let part = {" + ".join(f"dot(vec4<f32>(G[grow + {i}u]), o{i})" for i in range(dh))};
  workgroupBarrier();
  Xs[t] = part;
  workgroupBarrier();
  if (r < P.L && t % H == 0u) {{
    let tot = {" + ".join(f"Xs[row * H + {x}u]" for x in range(h))};
    let seen = l > 0.0;  // a row that sees no key: lse = +inf (P = 0), delta = 0
    LSE[b * P.L + r] = select({_POS_INF}, m + log2(l), seen);
    DELTA[b * P.L + r] = select(0.0, tot / l, seen);
  }}"""
    else:
        stores = "\n    ".join(f"O[orow + {i}u] = st4(o{i} * inv);" for i in range(dh))
        tail = f"""if (r < P.L) {{
    let inv = 1.0 / l;  // no visible key: 0 / 0 = NaN, as softmax over -inf gives
    let orow = (b * P.L + r) * D4 + hb;
    {stores}
  }}"""
    return f"""{_prelude(t, f16, head, h, rows, bn, binds)}
var<workgroup> Ks: array<vec4<f32>, {bn * head // 4}>;
var<workgroup> Vs: array<vec4<f32>, {bn * head // 4}>;
var<workgroup> Xs: array<f32, {bn * rows * h}>;
@compute @workgroup_size({rows * h})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {_start("P.L")}
  let qrow = qb + rc * P.q_rs + hb;
  {_vec("q", dh, "vec4<f32>(Q[qrow + {i}u]) * P.qscale", mutable=False)}
  {_vec("o", dh, "vec4<f32>(0.0)")}
  var m = {_NEG_INF};
  var l = 0.0;
  var n_end = P.S;  // with is_causal, the tile's last row sees keys up to r0 + ROWS - 1 + off
  if (P.causal != 0u) {{ n_end = u32(clamp(i32(r0 + ROWS) + P.off, 0, i32(P.S))); }}
  for (var n0 = 0u; n0 < n_end; n0 = n0 + BN) {{
    workgroupBarrier();  // the previous tile is read
    {_load_tile("Ks", "Vs", "K", "V", "P.S", "n0")}
    workgroupBarrier();
    for (var j = 0u; j < BN; j = j + 1u) {{
      let kj = j * D4 + hb;
      Xs[j * WG + t] = {_dot("q", "Ks", "kj", dh)};
    }}
    {"workgroupBarrier();" if h > 1 else ""}
    var mx = {_NEG_INF};
    for (var j = 0u; j < BN; j = j + 1u) {{
      let n = n0 + j;
      if (!({masked})) {{ mx = max(mx, {_sum("Xs", h)}); }}
    }}
    let mnew = max(m, mx);
    let muse = select(mnew, 0.0, is_inf(mnew));  // nothing visible yet: the row stays 0
    let alpha = exp2(m - muse);
    l = l * alpha;
    {chr(10).join(f"    o{i} = o{i} * alpha;" for i in range(dh)).strip()}
    for (var j = 0u; j < BN; j = j + 1u) {{
      let n = n0 + j;
      var p = exp2({_sum("Xs", h)} - muse);
      if ({masked}) {{ p = 0.0; }}
      l = l + p;
      let vj = j * D4 + hb;
      {_fma("o", "p", "Vs", "vj", dh)}
    }}
    m = mnew;
  }}
  {tail}
}}"""


def _dq_source(t: WType, f16: bool, head: int, h: int, rows: int, bn: int) -> str:
    dh = head // 4 // h
    vt = f"vec4<{t.storage}>"
    binds = [("Q", "r", vt), ("K", "r", vt), ("V", "r", vt), ("G", "r", vt), ("LSE", "r", "f32")]
    binds += [("DELTA", "r", "f32"), ("DG", "w", vt)]
    stores = "\n    ".join(f"DG[orow + {i}u] = st4(dq{i} * P.scale);" for i in range(dh))
    return f"""{_prelude(t, f16, head, h, rows, bn, binds)}
var<workgroup> Ks: array<vec4<f32>, {bn * head // 4}>;
var<workgroup> Vs: array<vec4<f32>, {bn * head // 4}>;
var<workgroup> Xs: array<f32, {bn * rows * h}>;
var<workgroup> Ys: array<f32, {bn * rows * h}>;
@compute @workgroup_size({rows * h})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {_start("P.L")}
  let qrow = qb + rc * P.q_rs + hb;
  let grow = gb + rc * P.g_rs + hb;
  let orow = (b * P.L + rc) * D4 + hb;
  {_vec("q", dh, "vec4<f32>(Q[qrow + {i}u]) * P.qscale", mutable=False)}
  {_vec("g", dh, "vec4<f32>(G[grow + {i}u])", mutable=False)}
  {_vec("dq", dh, "vec4<f32>(0.0)")}
  let live = r < P.L;
  let lse = LSE[b * P.L + rc];
  let delta = DELTA[b * P.L + rc];
  var n_end = P.S;
  if (P.causal != 0u) {{ n_end = u32(clamp(i32(r0 + ROWS) + P.off, 0, i32(P.S))); }}
  for (var n0 = 0u; n0 < n_end; n0 = n0 + BN) {{
    workgroupBarrier();
    {_load_tile("Ks", "Vs", "K", "V", "P.S", "n0")}
    workgroupBarrier();
    for (var j = 0u; j < BN; j = j + 1u) {{
      let kj = j * D4 + hb;
      Xs[j * WG + t] = {_dot("q", "Ks", "kj", dh)};
      Ys[j * WG + t] = {_dot("g", "Vs", "kj", dh)};
    }}
    {"workgroupBarrier();" if h > 1 else ""}
    for (var j = 0u; j < BN; j = j + 1u) {{
      let n = n0 + j;
      var p = exp2({_sum("Xs", h)} - lse);
      if (!live || n >= P.S || (P.causal != 0u && i32(n) > i32(r) + P.off)) {{ p = 0.0; }}
      let ds = p * ({_sum("Ys", h)} - delta);
      let kj = j * D4 + hb;
      {_fma("dq", "ds", "Ks", "kj", dh)}
    }}
  }}
  if (live) {{
    {stores}
  }}
}}"""


def _dkdv_source(t: WType, f16: bool, head: int, h: int, rows: int, bn: int) -> str:
    dh = head // 4 // h
    vt = f"vec4<{t.storage}>"
    binds = [("Q", "r", vt), ("K", "r", vt), ("V", "r", vt), ("G", "r", vt), ("LSE", "r", "f32")]
    binds += [("DELTA", "r", "f32"), ("DG", "w", vt)]
    stores = "\n    ".join(
        f"DG[P.gk + orow + {i}u] = st4(dk{i} * P.kscale);\n    DG[P.gv + orow + {i}u] = st4(dv{i});" for i in range(dh)
    )
    return f"""{_prelude(t, f16, head, h, rows, bn, binds)}
var<workgroup> Qs: array<vec4<f32>, {bn * head // 4}>;
var<workgroup> Gs: array<vec4<f32>, {bn * head // 4}>;
var<workgroup> Xs: array<f32, {bn * rows * h}>;
var<workgroup> Ys: array<f32, {bn * rows * h}>;
var<workgroup> Ls: array<f32, {bn}>;
var<workgroup> Ds: array<f32, {bn}>;
@compute @workgroup_size({rows * h})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {_start("P.S")}
  let orow = (b * P.S + rc) * D4 + hb;
  let krow = kb + rc * P.k_rs + hb;
  let vrow = vb + rc * P.v_rs + hb;
  {_vec("k", dh, "vec4<f32>(K[krow + {i}u])", mutable=False)}
  {_vec("v", dh, "vec4<f32>(V[vrow + {i}u])", mutable=False)}
  {_vec("dk", dh, "vec4<f32>(0.0)")}
  {_vec("dv", dh, "vec4<f32>(0.0)")}
  let live = r < P.S;
  // with is_causal, query m sees key r when r <= m + off: tiles before the first query that
  // sees key r0 are skipped
  var m_begin = 0u;
  if (P.causal != 0u && i32(r0) - P.off > 0) {{ m_begin = (u32(i32(r0) - P.off) / BN) * BN; }}
  for (var m0 = m_begin; m0 < P.L; m0 = m0 + BN) {{
    workgroupBarrier();
    {_load_tile("Qs", "Gs", "Q", "G", "P.L", "m0", " * P.qscale")}
    for (var i = t; i < BN; i = i + WG) {{
      let mq = min(m0 + i, P.L - 1u);
      Ls[i] = LSE[b * P.L + mq];
      Ds[i] = DELTA[b * P.L + mq];
    }}
    workgroupBarrier();
    for (var j = 0u; j < BN; j = j + 1u) {{
      let qj = j * D4 + hb;
      Xs[j * WG + t] = {_dot("k", "Qs", "qj", dh)};
      Ys[j * WG + t] = {_dot("v", "Gs", "qj", dh)};
    }}
    {"workgroupBarrier();" if h > 1 else ""}
    for (var j = 0u; j < BN; j = j + 1u) {{
      let mq = m0 + j;
      var p = exp2({_sum("Xs", h)} - Ls[j]);
      if (!live || mq >= P.L || (P.causal != 0u && i32(r) > i32(mq) + P.off)) {{ p = 0.0; }}
      let ds = p * ({_sum("Ys", h)} - Ds[j]);
      let qj = j * D4 + hb;
      {_fma("dv", "p", "Gs", "qj", dh)}
      {_fma("dk", "ds", "Qs", "qj", dh)}
    }}
  }}
  if (live) {{
    {stores}
  }}
}}"""


def source(t: WType, f16: bool, kind: str, head: int, geo: tuple[int, int, int]) -> str:
    """The WGSL (after the parameter block) of kernel ``kind`` for dtype ``t`` and head size ``head``."""
    h, rows, bn = geo
    if kind in ("forward", "stats"):
        return _forward_source(t, f16, head, h, rows, bn, kind == "stats")
    if kind == "dq":
        return _dq_source(t, f16, head, h, rows, bn)
    return _dkdv_source(t, f16, head, h, rows, bn)


_BINDINGS = {
    "forward": ("r", "r", "r", "w"),
    "stats": ("r", "r", "r", "r", "w", "w"),
    "dq": ("r", "r", "r", "r", "r", "r", "w"),
    "dkdv": ("r", "r", "r", "r", "r", "r", "w"),
}


def _kernel(rt: Runtime, kind: str, t: WType, head: int, geo: tuple[int, int, int]) -> Any:
    f16 = rt.types.uses_f16(t.dtype)
    return compile_kernel(
        rt,
        ("flash_attention", kind, t.name, head, geo),
        lambda: (source(t, f16, kind, head, geo), _PARAMS, _BINDINGS[kind]),
        f"flash_attention_{kind}_d{head}",
    )


# -- launches -------------------------------------------------------------------------------
def _covered(rt: Runtime, handles: tuple[WgpuArray, ...], mask: WgpuArray | None) -> dict[str, Geometry] | None:
    """Each kernel's geometry where the kernels take this call (no mask, one float dtype, head
    sizes they are made for, non-empty rows and keys, tiles that fit the adapter), else None."""
    q, k, v = handles[:3]
    head = q.shape[-1]
    if not (
        enabled()
        and mask is None
        and q.dtype.name in _FLOATS
        and all(x.dtype is q.dtype for x in handles)
        and head in HEAD_SIZES
        and k.shape[-1] == head
        and v.shape[-1] == head
        and q.shape[-2] > 0
        and k.shape[-2] > 0
    ):
        return None
    geos = {kind: geometry(rt, kind, head) for kind in ("forward", "stats", "dq", "dkdv")}
    return geos if all(g is not None for g in geos.values()) else None  # type: ignore[return-value]


def _operands(rt: Runtime, xs: tuple[WgpuArray, ...], lead: tuple[int, ...]) -> tuple[list[WgpuArray], dict[str, int]]:
    """The operands as the kernels read them, and their layout parameters: each in place, through
    its strides in vec4s (a head of W4's fused projection, (B, S, H, D) viewed as (B, H, S, D), or
    a batch axis broadcast with stride 0) where the head is contiguous and every stride and the
    offset are whole non-negative vec4s, else a contiguous copy; the batch axes collapsed to at
    most :data:`_NB` (all copied where they do not collapse so far)."""

    def fits(x: WgpuArray) -> bool:
        if x.strides[-1] != 1:
            return False
        steps = [s for s, n in zip(x.strides[:-1], x.shape[:-1]) if n != 1]
        return x.offset % 4 == 0 and all(s >= 0 and s % 4 == 0 for s in steps)

    views = [x.expand(lead + x.shape[-2:]) for x in xs]
    views = [x if fits(x) else ew.contiguous(rt, x) for x in views]
    shape, strides = collapse(lead, [x.strides[:-2] for x in views])
    if len(shape) > _NB:
        views = [ew.contiguous(rt, x) for x in views]
        shape, strides = collapse(lead, [x.strides[:-2] for x in views])
    pad = _NB - len(shape)
    values = {f"d{i}": n for i, n in enumerate((1,) * pad + shape)}
    for name, x, st in zip(_OPERANDS, views, strides):
        values.update({f"{name}_off": x.offset // 4, f"{name}_rs": x.strides[-2] // 4})
        values.update({f"{name}_b{i}": s // 4 for i, s in enumerate((0,) * pad + tuple(st))})
    return views, values


def _values(
    L: int, S: int, tiles: int, batch: int, scale: float, is_causal: bool, layout: dict[str, int]
) -> dict[str, Any]:
    return {**layout,
        "L": L, "S": S, "tiles": tiles, "groups": batch * tiles, "qscale": scale * _LOG2E,
        "causal": int(bool(is_causal)), "off": S - L, "kscale": 1 / _LOG2E, "scale": scale,
    }  # fmt: skip


def forward(
    rt: Runtime, q: WgpuArray, k: WgpuArray, v: WgpuArray, mask: WgpuArray | None, is_causal: bool, scale: float
) -> WgpuArray:
    """``softmax(q k^T * scale) v``: the flash kernel where it applies, else ``nn.attention``."""
    geos = _covered(rt, (q, k, v), mask)
    if geos is None:
        return nn.attention(rt, q, k, v, mask, is_causal, scale)
    head = q.shape[-1]
    lead = ew.broadcast_shape(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    L, S = q.shape[-2], k.shape[-2]
    out = rt.empty(lead + (L, head), q.dtype)
    batch = prod(lead)
    if batch == 0:
        return out
    (qc, kc, vc), layout = _operands(rt, (q, k, v), lead)
    geo = geos["forward"]
    tiles = ceil_div(L, geo[1])
    CALLS["scaled_dot_product_attention"] += 1
    values = _values(L, S, tiles, batch, scale, is_causal, layout)
    launch(rt, _kernel(rt, "forward", rt.types[q.dtype], head, geo), values,
           [qc.buffer, kc.buffer, vc.buffer, out.buffer], grid(batch * tiles), "flash_attention")  # fmt: skip
    return out


def backward(
    rt: Runtime,
    g: WgpuArray,
    q: WgpuArray,
    k: WgpuArray,
    v: WgpuArray,
    mask: WgpuArray | None,
    is_causal: bool,
    scale: float,
) -> WgpuArray | NotImplementedType:
    """gq, gk, gv flattened and concatenated (``ember.ops.attention.packed_shapes``): the stats,
    dK/dV and dQ kernels where they apply; ``NotImplemented`` for the rest (declined: dispatch runs
    the core's composite rule)."""
    geos = _covered(rt, (q, k, v, g), mask)
    if geos is None:
        CALLS["attention_backward_declined"] += 1
        return NotImplemented
    head = q.shape[-1]
    lead = ew.broadcast_shape(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    L, S = q.shape[-2], k.shape[-2]
    batch = prod(lead)
    n_q, n_k = batch * L * head, batch * S * head
    packed = rt.empty((n_q + 2 * n_k,), q.dtype)
    if batch == 0:
        return packed
    (qc, kc, vc, gc), layout = _operands(rt, (q, k, v, g), lead)
    lse = rt.empty((batch * L,), float32)
    delta = rt.empty((batch * L,), float32)
    t = rt.types[q.dtype]
    CALLS["scaled_dot_product_attention_backward"] += 1
    geo = geos["stats"]
    tiles = ceil_div(L, geo[1])
    launch(rt, _kernel(rt, "stats", t, head, geo), _values(L, S, tiles, batch, scale, is_causal, layout),
           [qc.buffer, kc.buffer, vc.buffer, gc.buffer, lse.buffer, delta.buffer], grid(batch * tiles),
           "flash_attention_stats")  # fmt: skip
    operands = [qc.buffer, kc.buffer, vc.buffer, gc.buffer, lse.buffer, delta.buffer, packed.buffer]
    geo = geos["dkdv"]
    tiles = ceil_div(S, geo[1])
    values = _values(L, S, tiles, batch, scale, is_causal, layout)
    values.update({"gk": n_q // 4, "gv": (n_q + n_k) // 4})
    launch(rt, _kernel(rt, "dkdv", t, head, geo), values, operands, grid(batch * tiles), "flash_attention_dkdv")
    geo = geos["dq"]
    tiles = ceil_div(L, geo[1])
    launch(rt, _kernel(rt, "dq", t, head, geo), _values(L, S, tiles, batch, scale, is_causal, layout), operands,
           grid(batch * tiles), "flash_attention_dq")  # fmt: skip
    return packed

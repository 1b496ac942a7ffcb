"""Batched, broadcasting matmul: a tiled kernel staging A and B tiles in workgroup memory.

Each 16x16 workgroup computes a BM x BN tile of C; each thread a TM x TN block (rows
``ty + 16 i``, columns ``tx + 16 j``, so shared-memory reads broadcast and global stores
coalesce). Operands are read through their strides, so transposed views (``x.mT`` in the
backward pass) cost no copy; batch axes broadcast with stride 0. Accumulation is f32 for
float dtypes, exact wrapping arithmetic for integers; 64-bit integers use a plain kernel.
"""

from __future__ import annotations

from ..handle import WgpuArray
from ..runtime import Runtime
from ..typemap import WType
from . import elementwise as ew
from .common import ParamBlock, ceil_div, compile_kernel, header, launch, prod

__all__ = ["matmul", "CONFIGS"]

#: name -> (BM, BN, BK, TM, TN); the workgroup is always 16 x 16. "deep" halves the barriers
#: of "large" where the adapter has the ~17 KB of workgroup memory it needs
CONFIGS = {"deep": (128, 128, 16, 8, 8), "large": (128, 128, 8, 8, 8), "small": (64, 64, 16, 4, 4)}
_MAX_Z = 65535


def _batch_fields(nb: int) -> list[tuple[str, str]]:
    fields = []
    for k in range(nb):
        fields += [(f"d{k}", "u32"), (f"as{k}", "u32"), (f"bs{k}", "u32")]
    return fields


def _batch_decode(nb: int) -> str:
    lines = ["var rem = z;", "var aoff = P.a_off;", "var boff = P.b_off;"]
    for k in range(nb - 1, -1, -1):
        lines += [f"let c{k} = rem % P.d{k};", f"rem = rem / P.d{k};"]
        lines += [f"aoff = aoff + c{k} * P.as{k};", f"boff = boff + c{k} * P.bs{k};"]
    return "\n    ".join(lines)


def _params(nb: int) -> ParamBlock:
    base = [("m", "u32"), ("n", "u32"), ("k", "u32"), ("batch", "u32"), ("a_off", "u32"), ("b_off", "u32")]
    base += [("sam", "u32"), ("sak", "u32"), ("sbk", "u32"), ("sbn", "u32")]
    return ParamBlock(base + _batch_fields(nb))


def _tiled(t: WType, tout: WType, nb: int, config: str, f16: bool, a_mfast: bool, b_kfast: bool):  # type: ignore[no-untyped-def]
    """The tiled kernel. Shared tiles are stored k-major (``As[k][m]``, ``Bs[k][n]``) as vec4
    rows padded by 4, so a thread reads its TM rows and TN columns with TM/4 + TN/4 vec4 loads
    and tile stores hit distinct banks. ``a_mfast``/``b_kfast``: the operand is transposed in
    memory, so neighbouring threads load along M (for A) or K (for B) to keep reads coalesced."""
    bm, bn, bk, tm, tn = CONFIGS[config]
    ct = {"f": "f32", "i": "i32", "u": "u32"}[t.cls]
    vt = f"vec4<{ct}>"
    zero = {"f": "0.0", "i": "0i", "u": "0u"}[t.cls]
    params = _params(nb)
    pa, pb = bm + 4, bn + 4  # row lengths in scalars (multiples of 4)
    a_map = (f"idx % {bm}u", f"idx / {bm}u") if a_mfast else (f"idx / {bk}u", f"idx % {bk}u")
    b_map = (f"idx % {bk}u", f"idx / {bk}u") if b_kfast else (f"idx / {bn}u", f"idx % {bn}u")
    a_loads, b_loads = [], []
    for e in range(bm * bk // 256):
        a_loads.append(f"""{{
      let idx = t + {e * 256}u;
      let r = {a_map[0]};
      let c = {a_map[1]};
      let gm = m0 + r;
      let gk = k0 + c;
      var v = {zero};
      if (gm < P.m && gk < P.k) {{ v = {t.load("A[aoff + gm * P.sam + gk * P.sak]")}; }}
      let s = c * {pa}u + r;
      As[s / 4u][s % 4u] = v;
    }}""")
    for e in range(bn * bk // 256):
        b_loads.append(f"""{{
      let idx = t + {e * 256}u;
      let r = {b_map[0]};
      let c = {b_map[1]};
      let gk = k0 + r;
      let gn = n0 + c;
      var v = {zero};
      if (gk < P.k && gn < P.n) {{ v = {t.load("B[boff + gk * P.sbk + gn * P.sbn]")}; }}
      let s = r * {pb}u + c;
      Bs[s / 4u][s % 4u] = v;
    }}""")
    qa, qb = tm // 4, tn // 4
    decl_acc = "\n    ".join(f"var acc{i}_{j} = {vt}({zero});" for i in range(tm) for j in range(qb))
    inner = []
    for q in range(qa):
        inner.append(f"let a{q} = As[kk * {pa // 4}u + ly * {qa}u + {q}u];")
    for q in range(qb):
        inner.append(f"let b{q} = Bs[kk * {pb // 4}u + lx * {qb}u + {q}u];")
    lanes = "xyzw"
    for i in range(tm):
        a = f"a{i // 4}.{lanes[i % 4]}"
        for j in range(qb):
            inner.append(f"acc{i}_{j} = acc{i}_{j} + {a} * b{j};")
    stores = []
    for i in range(tm):
        row = f"m0 + ly * {tm}u + {i}u"
        for j in range(tn):
            v = f"acc{i}_{j // 4}.{lanes[j % 4]}"
            v = tout.wrap(v) if tout.narrow else v
            col = f"n0 + lx * {tn}u + {j}u"
            stores.append(f"if ({row} < P.m && {col} < P.n) {{ C[cbase + ({row}) * P.n + {col}] = {tout.store(v)}; }}")
    body = f"""{header(f16)}
@group(0) @binding(1) var<storage, read> A: array<{t.storage}>;
@group(0) @binding(2) var<storage, read> B: array<{t.storage}>;
@group(0) @binding(3) var<storage, read_write> C: array<{tout.storage}>;
var<workgroup> As: array<{vt}, {bk * pa // 4}>;
var<workgroup> Bs: array<{vt}, {bk * pb // 4}>;
@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(local_invocation_index) t: u32, @builtin(num_workgroups) nw: vec3<u32>) {{
  let m0 = wid.y * {bm}u;
  let n0 = wid.x * {bn}u;
  let lx = lid.x;
  let ly = lid.y;
  for (var z = wid.z; z < P.batch; z = z + nw.z) {{
    {_batch_decode(nb)}
    let cbase = z * P.m * P.n;
    {decl_acc}
    for (var k0 = 0u; k0 < P.k; k0 = k0 + {bk}u) {{
    {"".join(a_loads)}
    {"".join(b_loads)}
      workgroupBarrier();
      for (var kk = 0u; kk < {bk}u; kk = kk + 1u) {{
        {chr(10).join("        " + line for line in inner).strip()}
      }}
      workgroupBarrier();
    }}
    {chr(10).join("    " + s for s in stores).strip()}
  }}
}}"""
    return body, params, ("r", "r", "w")


def _plain(t: WType, nb: int):  # type: ignore[no-untyped-def]
    """One thread per output element (64-bit integers)."""
    params = _params(nb)
    add = "i64_add" if t.cls in "lL" else None
    mul = "i64_mul" if t.cls in "lL" else None
    step = f"acc = {add}(acc, {mul}(A[aoff + m * P.sam + kk * P.sak], B[boff + kk * P.sbk + n * P.sbn]));"
    body = f"""@group(0) @binding(1) var<storage, read> A: array<{t.storage}>;
@group(0) @binding(2) var<storage, read> B: array<{t.storage}>;
@group(0) @binding(3) var<storage, read_write> C: array<{t.storage}>;
@compute @workgroup_size(16, 16)
fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) nw: vec3<u32>) {{
  let n = g.x;
  let m = g.y;
  if (m >= P.m || n >= P.n) {{ return; }}
  for (var z = g.z; z < P.batch; z = z + nw.z) {{
    {_batch_decode(nb)}
    var acc = vec2<u32>(0u, 0u);
    for (var kk = 0u; kk < P.k; kk = kk + 1u) {{
      {step}
    }}
    C[z * P.m * P.n + m * P.n + n] = acc;
  }}
}}"""
    return body, params, ("r", "r", "w")


def _shared_bytes(config: str) -> int:
    bm, bn, bk = CONFIGS[config][:3]
    return bk * (bm + 4 + bn + 4) * 4


def matmul(rt: Runtime, a: WgpuArray, b: WgpuArray) -> WgpuArray:
    """``a @ b`` for (..., M, K) @ (..., K, N) with broadcast batch axes."""
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch_shape = ew.broadcast_shape(a.shape[:-2], b.shape[:-2])
    out = rt.empty(batch_shape + (m, n), a.dtype)
    if out.size == 0:
        return out
    if k == 0:
        return ew.fill(rt, out.shape, 0, a.dtype)
    nb = len(batch_shape)
    sa = a.broadcast_strides(batch_shape + (m, k))
    sb = b.broadcast_strides(batch_shape + (k, n))
    # drop batch axes of size 1; keep the rest (at least one field set for the decode)
    dims = [(d, sa[i], sb[i]) for i, d in enumerate(batch_shape) if d != 1]
    nb = len(dims)
    values = {
        "m": m, "n": n, "k": k, "batch": prod(batch_shape), "a_off": a.offset, "b_off": b.offset,
        "sam": sa[-2] & 0xFFFFFFFF, "sak": sa[-1] & 0xFFFFFFFF, "sbk": sb[-2] & 0xFFFFFFFF, "sbn": sb[-1] & 0xFFFFFFFF,
    }  # fmt: skip
    for i, (d, x, y) in enumerate(dims):
        values[f"d{i}"], values[f"as{i}"], values[f"bs{i}"] = d, x & 0xFFFFFFFF, y & 0xFFFFFFFF
    t = rt.types[a.dtype]
    batch = values["batch"]
    z = min(batch, _MAX_Z)
    if t.cls in "lL":
        kernel = compile_kernel(rt, ("matmul64", t.name, nb), lambda: _plain(t, nb), "matmul_int64")
        launch(rt, kernel, values, [a.buffer, b.buffer, out.buffer], (ceil_div(n, 16), ceil_div(m, 16), z), "matmul")
        return out
    config = "small"
    if m >= 512 and n >= 512:
        config = "deep" if rt.shared_bytes >= _shared_bytes("deep") else "large"
    bm, bn = CONFIGS[config][:2]
    f16 = rt.types.uses_f16(a.dtype)
    a_mfast = sa[-2] == 1 and sa[-1] != 1
    b_kfast = sb[-2] == 1 and sb[-1] != 1
    kernel = compile_kernel(
        rt,
        ("matmul", t.name, nb, config, a_mfast, b_kfast),
        lambda: _tiled(t, t, nb, config, f16, a_mfast, b_kfast),
        f"matmul_{config}_{t.name}",
    )
    launch(rt, kernel, values, [a.buffer, b.buffer, out.buffer], (ceil_div(n, bn), ceil_div(m, bm), z), "matmul")
    return out

"""Native ``linalg_svd``, ``linalg_lu``, ``linalg_solve`` and ``linalg_slogdet`` kernels for
``wgpu`` devices in WGSL: the launches of :mod:`ember_linalg._native` (one-sided Jacobi with
round-robin pairs, one workgroup per pair; LU with partial pivoting, two dispatches per column),
compiled once per kernel and recorded through ember-wgpu's kernel plumbing
(``ember_wgpu.kernels.common``). float32 (WGSL has no 64-bit floats). Registered only when
ember-wgpu is installed; ember_wgpu is imported inside the kernels. ``CALLS`` counts launches.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from . import _native

__all__ = ["register", "CALLS"]

#: launches of each kernel (tests and benchmarks read it)
CALLS: Counter[str] = Counter()
#: workgroup size, filled in per adapter when a kernel is built: 256 on GPUs, 64 on CPU adapters
#: (lavapipe runs a 256-wide workgroup with barriers about 4x slower than a 64-wide one)
_WG = "@WG@"

# element kernels: one invocation per item; reduction kernels: one workgroup per matrix, pair or column
_ELEMENT = f"""@compute @workgroup_size({_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {{gid}}
  let g = gid_lin * {_WG}u + t;
  if (g >= P.total) {{ return; }}"""

_GROUP = f"""@compute @workgroup_size({_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {{gid}}
  let grp = gid_lin;
  if (grp >= P.groups) {{ return; }}"""

_REDUCE3 = """
  sa[t] = av;
  sb[t] = bv;
  sg[t] = gv;
  workgroupBarrier();
  for (var h = @HALF@u; h > 0u; h = h >> 1u) {
    if (t < h) {
      sa[t] = sa[t] + sa[t + h];
      sb[t] = sb[t] + sb[t + h];
      sg[t] = sg[t] + sg[t + h];
    }
    workgroupBarrier();
  }"""

# the largest |value| of each invocation's items (best, ix) reduced to (bv[0], bi[0]), first index on ties
_ARGMAX = """
  bv[t] = best;
  bi[t] = ix;
  workgroupBarrier();
  for (var h = @HALF@u; h > 0u; h = h >> 1u) {
    if (t < h && (bv[t + h] > bv[t] || (bv[t + h] == bv[t] && bi[t + h] < bi[t]))) {
      bv[t] = bv[t + h];
      bi[t] = bi[t + h];
    }
    workgroupBarrier();
  }"""

_SUMS = "\n".join(f"var<workgroup> {v}: array<f32, {_WG}>;" for v in ("sa", "sb", "sg"))
_ARGS = f"var<workgroup> bv: array<f32, {_WG}>;\nvar<workgroup> bi: array<u32, {_WG}>;"

# name: (bindings [(var, element type, access)], params, head, body)
_KERNELS: dict[str, tuple[list[tuple[str, str, str]], list[str], str, str]] = {
    # AT (batch, nc, la) <- the columns to rotate (tall: A's columns; wide: A's rows); VT <- I
    "svd_init": ([("AT", "f32", "w"), ("VT", "f32", "w"), ("A", "f32", "r")],
                 ["total", "ao", "m", "n", "nc", "la", "wide"], _ELEMENT, """
  let cols = P.nc * P.la;
  let per = cols + P.nc * P.nc;
  let b = g / per;
  let r = g - b * per;
  if (r < cols) {
    let j = r / P.la;
    let i = r - j * P.la;
    var src = P.ao + b * P.m * P.n + i * P.n + j;
    if (P.wide != 0u) { src = P.ao + b * P.m * P.n + j * P.n + i; }
    AT[b * cols + r] = A[src];
  } else {
    let q = r - cols;
    let j = q / P.nc;
    VT[b * P.nc * P.nc + q] = select(0.0, 1.0, q - j * P.nc == j);
  }
}"""),
    # one round: workgroup (b, k) rotates columns p, q of matrix b (rows p, q of AT and of VT)
    "jacobi": ([("AT", "f32", "w"), ("VT", "f32", "w"), ("PR", "i32", "r"), ("CV", "f32", "w")],
               ["groups", "rnd", "hp", "nc", "la", ("tol", "f32")], _SUMS + "\n" + _GROUP, f"""
  let b = grp / P.hp;
  let k = grp - b * P.hp;
  let p = u32(PR[2u * (P.rnd * P.hp + k)]);
  let q = u32(PR[2u * (P.rnd * P.hp + k) + 1u]);
  let live = q < P.nc;
  let xo = (b * P.nc + p) * P.la;
  let yo = (b * P.nc + q) * P.la;
  var av = 0.0;
  var bv = 0.0;
  var gv = 0.0;
  if (live) {{
    for (var i = t; i < P.la; i = i + {_WG}u) {{
      let u = AT[xo + i];
      let v = AT[yo + i];
      av = av + u * u;
      bv = bv + v * v;
      gv = gv + u * v;
    }}
  }}{_REDUCE3}
  let al = sa[0];
  let be = sb[0];
  let ga = sg[0];
  let nrm = sqrt(al) * sqrt(be);
  var mu = 0.0;
  if (nrm > 0.0) {{ mu = abs(ga) / nrm; }}
  if (t == 0u) {{
    if (P.rnd == 0u) {{ CV[grp] = mu; }} else {{ CV[grp] = max(CV[grp], mu); }}
  }}
  if (!live || !(mu > P.tol)) {{ return; }}
  let zeta = (be - al) / (2.0 * ga);
  let tn = select(1.0, -1.0, zeta < 0.0) / (abs(zeta) + sqrt(1.0 + zeta * zeta));
  let c = 1.0 / sqrt(1.0 + tn * tn);
  let s = c * tn;
  for (var i = t; i < P.la; i = i + {_WG}u) {{
    let u = AT[xo + i];
    let v = AT[yo + i];
    AT[xo + i] = c * u - s * v;
    AT[yo + i] = s * u + c * v;
  }}
  let vx = (b * P.nc + p) * P.nc;
  let vy = (b * P.nc + q) * P.nc;
  for (var i = t; i < P.nc; i = i + {_WG}u) {{
    let u = VT[vx + i];
    let v = VT[vy + i];
    VT[vx + i] = c * u - s * v;
    VT[vy + i] = s * u + c * v;
  }}
}}"""),
    # S[row] = the 2-norm of row ``row`` of AT
    "col_norms": ([("AT", "f32", "r"), ("S", "f32", "w")], ["groups", "la"], _SUMS + "\n" + _GROUP, f"""
  var av = 0.0;
  let bv = 0.0;
  let gv = 0.0;
  for (var i = t; i < P.la; i = i + {_WG}u) {{
    let u = AT[grp * P.la + i];
    av = av + u * u;
  }}{_REDUCE3}
  if (t == 0u) {{ S[grp] = sqrt(sa[0]); }}
}}"""),
    # workgroup (b, kk): column kk of U, S[kk], row kk of Vh from the sorted column OR[b, kk], with the
    # sign making U's largest-magnitude entry positive (tall: U from AT / s, Vh from VT; wide: reversed)
    "svd_finish": ([("AT", "f32", "r"), ("VT", "f32", "r"), ("S", "f32", "r"), ("OR", "i32", "r"), ("O", "f32", "w")],
                   ["groups", "m", "n", "nc", "la", "wide"], _ARGS + """
fn xv(i: u32, ao: u32, vo: u32, sd: f32) -> f32 {
  if (P.wide != 0u) { return VT[vo + i]; }
  return AT[ao + i] / sd;
}
fn yv(j: u32, ao: u32, vo: u32, sd: f32) -> f32 {
  if (P.wide != 0u) { return AT[ao + j] / sd; }
  return VT[vo + j];
}
""" + _GROUP, f"""
  let b = grp / P.nc;
  let kk = grp - b * P.nc;
  let src = u32(OR[grp]);
  let sv = S[b * P.nc + src];
  let sd = select(sv, 1.0, sv == 0.0);
  let ao = (b * P.nc + src) * P.la;
  let vo = (b * P.nc + src) * P.nc;
  var best = -1.0;
  var ix = 0u;
  for (var i = t; i < P.m; i = i + {_WG}u) {{
    let v = abs(xv(i, ao, vo, sd));
    if (v > best) {{ best = v; ix = i; }}
  }}{_ARGMAX}
  let sign = select(1.0, -1.0, xv(bi[0], ao, vo, sd) < 0.0);
  let o = b * (P.m * P.nc + P.nc + P.nc * P.n);
  for (var i = t; i < P.m; i = i + {_WG}u) {{ O[o + i * P.nc + kk] = sign * xv(i, ao, vo, sd); }}
  if (t == 0u) {{ O[o + P.m * P.nc + kk] = sv; }}
  for (var j = t; j < P.n; j = j + {_WG}u) {{ O[o + P.m * P.nc + P.nc + kk * P.n + j] = sign * yv(j, ao, vo, sd); }}
}}"""),
    # W (batch, m, n + r) <- [A | B], PM <- identity, SG <- 1
    "lu_init": ([("W", "f32", "w"), ("PM", "i32", "w"), ("SG", "f32", "w"), ("A", "f32", "r"), ("B", "f32", "r")],
                ["total", "ao", "bo", "m", "n", "r"], _ELEMENT, """
  let wd = P.n + P.r;
  let per = P.m * wd;
  let b = g / per;
  let q = g - b * per;
  let i = q / wd;
  let c = q - i * wd;
  if (c < P.n) { W[g] = A[P.ao + (b * P.m + i) * P.n + c]; } else { W[g] = B[P.bo + (b * P.m + i) * P.r + c - P.n]; }
  if (c == 0u) { PM[b * P.m + i] = i32(i); }
  if (q == 0u) { SG[b] = 1.0; }
}"""),
    # column j of matrix (workgroup) b: pivot search below the diagonal, row swap, scaling below the pivot
    "lu_pivot": ([("W", "f32", "w"), ("PM", "i32", "w"), ("SG", "f32", "w")], ["groups", "j", "m", "wd"],
                 _ARGS + "\n" + _GROUP, f"""
  let base = grp * P.m * P.wd;
  let j = P.j;
  var best = -1.0;
  var ix = j;
  for (var i = j + t; i < P.m; i = i + {_WG}u) {{
    let v = abs(W[base + i * P.wd + j]);
    if (v > best) {{ best = v; ix = i; }}
  }}{_ARGMAX}
  let p = bi[0];
  if (p != j) {{
    for (var c = t; c < P.wd; c = c + {_WG}u) {{
      let u = W[base + j * P.wd + c];
      W[base + j * P.wd + c] = W[base + p * P.wd + c];
      W[base + p * P.wd + c] = u;
    }}
    if (t == 0u) {{
      let e = PM[grp * P.m + j];
      PM[grp * P.m + j] = PM[grp * P.m + p];
      PM[grp * P.m + p] = e;
      SG[grp] = -SG[grp];
    }}
  }}
  storageBarrier();
  let pivot = W[base + j * P.wd + j];
  let safe = select(pivot, 1.0, pivot == 0.0);
  for (var i = j + 1u + t; i < P.m; i = i + {_WG}u) {{ W[base + i * P.wd + j] = W[base + i * P.wd + j] / safe; }}
}}"""),
    # the trailing rank-1 update after column j: W[i, c] -= W[i, j] W[j, c] for i, c > j
    "lu_update": ([("W", "f32", "w")], ["total", "j", "m", "wd"], _ELEMENT, """
  let cols = P.wd - P.j - 1u;
  let per = (P.m - P.j - 1u) * cols;
  let b = g / per;
  let q = g - b * per;
  let i = P.j + 1u + q / cols;
  let c = P.j + 1u + q % cols;
  let base = b * P.m * P.wd;
  W[base + i * P.wd + c] = W[base + i * P.wd + c] - W[base + i * P.wd + P.j] * W[base + P.j * P.wd + c];
}"""),
    # O (batch, m*m + m*k + k*n) <- P, L, U from the factored W
    "lu_pack": ([("W", "f32", "r"), ("PM", "i32", "r"), ("O", "f32", "w")], ["total", "m", "n", "wd"], _ELEMENT, """
  let k = min(P.m, P.n);
  let per = P.m * P.m + P.m * k + k * P.n;
  let b = g / per;
  let q = g - b * per;
  let base = b * P.m * P.wd;
  var v = 0.0;
  if (q < P.m * P.m) {
    let i = q / P.m;
    let c = q - i * P.m;
    v = select(0.0, 1.0, u32(PM[b * P.m + c]) == i);
  } else if (q < P.m * P.m + P.m * k) {
    let e = q - P.m * P.m;
    let i = e / k;
    let c = e - i * k;
    if (i > c) { v = W[base + i * P.wd + c]; } else if (i == c) { v = 1.0; }
  } else {
    let e = q - P.m * P.m - P.m * k;
    let i = e / P.n;
    let c = e - i * P.n;
    if (c >= i) { v = W[base + i * P.wd + c]; }
  }
  O[g] = v;
}"""),
    # W (batch, n, n + r) <- [A | B], or [A^T | B^T] (tr: B is (r, n)), for a triangular solve
    "tri_init": ([("W", "f32", "w"), ("A", "f32", "r"), ("B", "f32", "r")], ["total", "ao", "bo", "n", "r", "tr"],
                 _ELEMENT, """
  let wd = P.n + P.r;
  let per = P.n * wd;
  let b = g / per;
  let q = g - b * per;
  let i = q / wd;
  let c = q - i * wd;
  if (c < P.n) {
    W[g] = A[P.ao + b * P.n * P.n + select(i * P.n + c, c * P.n + i, P.tr != 0u)];
  } else {
    W[g] = B[P.bo + b * P.n * P.r + select(i * P.r + c - P.n, (c - P.n) * P.n + i, P.tr != 0u)];
  }
}"""),
    # substitution, column j of the triangle: y[i] -= T[i, j] y[j] / T[j, j] for i < j (upper) or i > j
    # (lower), y being W's last r columns; T[j, j] taken as 1 when unit
    "back": ([("W", "f32", "w")], ["total", "j", "n", "r", "lower", "unit"], _ELEMENT, """
  let wd = P.n + P.r;
  let lower = P.lower != 0u;
  let per = select(P.j, P.n - 1u - P.j, lower) * P.r;
  let b = g / per;
  let q = g - b * per;
  let i = select(0u, P.j + 1u, lower) + q / P.r;
  let c = q % P.r;
  let base = b * P.n * wd;
  let d = select(W[base + P.j * wd + P.j], 1.0, P.unit != 0u);
  let y = W[base + P.j * wd + P.n + c] / d;
  W[base + i * wd + P.n + c] = W[base + i * wd + P.n + c] - W[base + i * wd + P.j] * y;
}"""),
    # O (batch, n, r), or (batch, r, n) when tr, <- y[i] / T[i, i] (1 when unit)
    "back_finish": ([("W", "f32", "r"), ("O", "f32", "w")], ["total", "n", "r", "unit", "tr"], _ELEMENT, """
  let wd = P.n + P.r;
  let per = P.n * P.r;
  let b = g / per;
  let q = g - b * per;
  let i = q / P.r;
  let c = q - i * P.r;
  let base = b * P.n * wd;
  let d = select(W[base + i * wd + i], 1.0, P.unit != 0u);
  O[select(g, b * per + c * P.n + i, P.tr != 0u)] = W[base + i * wd + P.n + c] / d;
}"""),
    # O (batch, 2) <- (sign, log|det|) from U's diagonal and the permutation's sign
    "logdet": ([("W", "f32", "r"), ("SG", "f32", "r"), ("O", "f32", "w")], ["total", "n"], _ELEMENT, """
  let base = g * P.n * P.n;
  var sign = SG[g];
  var acc = 0.0;
  var zero = false;
  for (var i = 0u; i < P.n; i = i + 1u) {
    let d = W[base + i * P.n + i];
    if (d < 0.0) { sign = -sign; }
    if (d == 0.0) { zero = true; } else { acc = acc + log(abs(d)); }
  }
  if (zero) { sign = 0.0; acc = -bitcast<f32>(0x7f800000u); }
  O[2u * g] = sign;
  O[2u * g + 1u] = acc;
}"""),
}  # fmt: skip


def _common() -> Any:
    from ember_wgpu.kernels import common

    return common


class _Launcher:
    """The primitives of :mod:`ember_linalg._native` on one WGPU runtime (float32)."""

    def __init__(self, backend: Any, dtype: Any) -> None:
        import ember as em

        self.c, self.rt, self.dtype, self.int32 = _common(), backend.rt, dtype, em.int32
        self.wg = 64 if self.rt.adapter.info.get("adapter_type") == "CPU" else 256

    def _build(self, name: str) -> Any:
        bindings, fields, head, body = _KERNELS[name]
        params = self.c.ParamBlock([f if isinstance(f, tuple) else (f, "u32") for f in fields])
        io = "\n".join(
            f"@group(0) @binding({i + 1}) var<storage, {'read_write' if acc == 'w' else 'read'}> {var}: array<{ty}>;"
            for i, (var, ty, acc) in enumerate(bindings)
        )
        source = io + "\n" + head.replace("{gid}", self.c.GROUP_ID) + body
        source = source.replace("@WG@", str(self.wg)).replace("@HALF@", str(self.wg // 2))
        return source, params, tuple("w" if acc == "w" else "r" for _, _, acc in bindings)

    def _run(self, name: str, items: int, per_group: int, buffers: list[Any], values: dict[str, Any]) -> None:
        if items <= 0:
            return
        c, label = self.c, f"linalg_{name}"
        kernel = c.compile_kernel(self.rt, ("ember_linalg", name, self.wg), lambda: self._build(name), label)
        CALLS[label] += 1
        groups = c.ceil_div(items, per_group)
        values.setdefault("groups", groups)
        c.launch(self.rt, kernel, values, [h.buffer for h in buffers], c.grid(groups), label)

    def _grid(self, name: str, total: int, buffers: list[Any], values: dict[str, Any]) -> None:
        values["total"] = total
        self._run(name, total, self.wg, buffers, values)

    def _groups(self, name: str, groups: int, buffers: list[Any], values: dict[str, Any]) -> None:
        self._run(name, groups, 1, buffers, values)

    def empty(self, shape: tuple[int, ...], dtype: Any = None) -> Any:
        return self.rt.empty(shape, self.int32 if dtype == "int32" else self.dtype)

    def upload_int(self, values: np.ndarray) -> Any:
        return self.rt.upload(np.ascontiguousarray(values, dtype=np.int32), self.int32)

    def upload(self, values: np.ndarray) -> Any:
        return self.rt.upload(np.ascontiguousarray(values, dtype=np.float32), self.dtype)

    def download(self, h: Any) -> np.ndarray:
        return self.rt.read([h])[0]

    def svd_init(self, a: Any, at: Any, vt: Any, batch: int, m: int, n: int, wide: bool) -> None:
        nc, la = (m, n) if wide else (n, m)
        values = {"ao": a.offset, "m": m, "n": n, "nc": nc, "la": la, "wide": int(wide)}
        self._grid("svd_init", batch * (nc * la + nc * nc), [at, vt, a], values)

    def jacobi_round(
        self, at: Any, vt: Any, pairs: Any, conv: Any, batch: int, nc: int, la: int, half: int, rnd: int, tol: float
    ) -> None:
        values = {"rnd": rnd, "hp": half, "nc": nc, "la": la, "tol": float(tol)}
        self._groups("jacobi", batch * half, [at, vt, pairs, conv], values)

    def col_norms(self, at: Any, s: Any, rows: int, la: int) -> None:
        self._groups("col_norms", rows, [at, s], {"la": la})

    def svd_finish(
        self, at: Any, vt: Any, s: Any, order: Any, out: Any, batch: int, m: int, n: int, wide: bool
    ) -> None:
        nc, la = (m, n) if wide else (n, m)
        values = {"m": m, "n": n, "nc": nc, "la": la, "wide": int(wide)}
        self._groups("svd_finish", batch * nc, [at, vt, s, order, out], values)

    def lu_init(self, a: Any, b: Any, w: Any, perm: Any, sgn: Any, batch: int, m: int, n: int, r: int) -> None:
        values = {"ao": a.offset, "bo": b.offset, "m": m, "n": n, "r": r}
        self._grid("lu_init", batch * m * (n + r), [w, perm, sgn, a, b], values)

    def lu_pivot(self, w: Any, perm: Any, sgn: Any, batch: int, m: int, wd: int, j: int) -> None:
        self._groups("lu_pivot", batch, [w, perm, sgn], {"j": j, "m": m, "wd": wd})

    def lu_update(self, w: Any, batch: int, m: int, wd: int, j: int) -> None:
        self._grid("lu_update", batch * (m - j - 1) * (wd - j - 1), [w], {"j": j, "m": m, "wd": wd})

    def lu_pack(self, w: Any, perm: Any, out: Any, batch: int, m: int, n: int, wd: int) -> None:
        k = min(m, n)
        self._grid("lu_pack", batch * (m * m + m * k + k * n), [w, perm, out], {"m": m, "n": n, "wd": wd})

    def tri_init(self, a: Any, b: Any, w: Any, batch: int, n: int, r: int, tr: bool) -> None:
        values = {"ao": a.offset, "bo": b.offset, "n": n, "r": r, "tr": int(tr)}
        self._grid("tri_init", batch * n * (n + r), [w, a, b], values)

    def back_step(self, w: Any, batch: int, n: int, r: int, j: int, lower: bool = False, unit: bool = False) -> None:
        rows = n - 1 - j if lower else j
        values = {"j": j, "n": n, "r": r, "lower": int(lower), "unit": int(unit)}
        self._grid("back", batch * rows * r, [w], values)

    def back_finish(self, w: Any, out: Any, batch: int, n: int, r: int, unit: bool = False, tr: bool = False) -> None:
        self._grid("back_finish", batch * n * r, [w, out], {"n": n, "r": r, "unit": int(unit), "tr": int(tr)})

    def logdet(self, w: Any, sgn: Any, out: Any, batch: int, n: int) -> None:
        self._grid("logdet", batch, [w, sgn, out], {"n": n})


def register(kind: str = "wgpu") -> bool:
    """Register the kernels for ``kind`` when ember-wgpu is installed; whether they were."""
    return _native.register_when_installed(_native.kernel_table(kind, _Launcher), kind, "ember_wgpu")

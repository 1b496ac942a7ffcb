"""The ``signal_dft`` kernel for ``wgpu`` devices in WGSL: the launches of
:mod:`ember_signal._dft_native` (Stockham radix-4/2 stages, a direct DFT for short lengths,
Bluestein for the rest), compiled once per key and recorded through ember-wgpu's kernel plumbing
(``ember_wgpu.kernels.common``). float32 (WGSL has no 64-bit floats; float16/bfloat16 inputs are
computed in float32 and cast back). Registered only when ember-wgpu is installed; ember_wgpu is
imported inside the kernel. ``CALLS`` counts launches by kernel.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from . import _dft_native

__all__ = ["register", "CALLS"]

CALLS: Counter[str] = Counter()
_WG = 256

_IO = """@group(0) @binding(1) var<storage, read> S: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<f32>;
@group(0) @binding(3) var<storage, read_write> D: array<f32>;"""

_HEAD = f"""@compute @workgroup_size({_WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{{{
  {{gid}}
  let g = gid_lin * {_WG}u + t;
  if (g >= P.total) {{{{ return; }}}}"""

_BODIES = {
    # one radix-2 stage: pairs of length-c DFTs at i and i + n/2 merge into one of length 2c
    "r2": """
  let h = 1u << (P.ln - 1u);
  let c = 1u << P.lc;
  let base = (g >> (P.ln - 1u)) << P.ln;
  let i = g & (h - 1u);
  let k = i & (c - 1u);
  let e = P.os + 2u * (base + i);
  let o = e + 2u * h;
  let j = 2u * k * P.ts;
  let wr = W[j];
  let wi = P.sg * W[j + 1u];
  let orr = S[o];
  let oi = S[o + 1u];
  let tr = orr * wr - oi * wi;
  let ti = orr * wi + oi * wr;
  let er = S[e];
  let ei = S[e + 1u];
  let y = 2u * (base + ((i >> P.lc) << (P.lc + 1u)) + k);
  D[y] = (er + tr) * P.scale;
  D[y + 1u] = (ei + ti) * P.scale;
  D[y + 2u * c] = (er - tr) * P.scale;
  D[y + 2u * c + 1u] = (ei - ti) * P.scale;
}""",
    # one radix-4 stage: fours of length-c DFTs at i + p n/4 (p < 4) merge into one of length 4c
    "r4": """
  let q = 1u << (P.ln - 2u);
  let c = 1u << P.lc;
  let base = (g >> (P.ln - 2u)) << P.ln;
  let i = g & (q - 1u);
  let k = i & (c - 1u);
  let x = P.os + 2u * (base + i);
  let r0 = S[x];
  let m0 = S[x + 1u];
  let j = 2u * k * P.ts;
  let x1 = x + 2u * q;
  let j1 = j;
  let r1 = S[x1] * W[j1] - S[x1 + 1u] * P.sg * W[j1 + 1u];
  let m1 = S[x1] * P.sg * W[j1 + 1u] + S[x1 + 1u] * W[j1];
  let x2 = x + 4u * q;
  let j2 = 2u * j;
  let r2 = S[x2] * W[j2] - S[x2 + 1u] * P.sg * W[j2 + 1u];
  let m2 = S[x2] * P.sg * W[j2 + 1u] + S[x2 + 1u] * W[j2];
  let x3 = x + 6u * q;
  let j3 = 3u * j;
  let r3 = S[x3] * W[j3] - S[x3 + 1u] * P.sg * W[j3 + 1u];
  let m3 = S[x3] * P.sg * W[j3 + 1u] + S[x3 + 1u] * W[j3];
  let ar = r0 + r2;
  let ai = m0 + m2;
  let br = r0 - r2;
  let bi = m0 - m2;
  let cr = r1 + r3;
  let ci = m1 + m3;
  let dr = r1 - r3;
  let di = m1 - m3;
  let y = 2u * (base + ((i >> P.lc) << (P.lc + 2u)) + k);
  let s = 2u * c;
  D[y] = (ar + cr) * P.scale;
  D[y + 1u] = (ai + ci) * P.scale;
  D[y + s] = (br - P.sg * di) * P.scale;
  D[y + s + 1u] = (bi + P.sg * dr) * P.scale;
  D[y + 2u * s] = (ar - cr) * P.scale;
  D[y + 2u * s + 1u] = (ai - ci) * P.scale;
  D[y + 3u * s] = (br + P.sg * di) * P.scale;
  D[y + 3u * s + 1u] = (bi - P.sg * dr) * P.scale;
}""",
    # D[row, j] = S[row, j] * W[j] * scale for j < n_in, 0 beyond (n_out may pad or crop)
    "chirp": """
  let row = g / P.n_out;
  let j = g - row * P.n_out;
  var vr = 0.0;
  var vi = 0.0;
  if (j < P.n_in) {
    let a = P.os + 2u * (row * P.stride + j);
    let xr = S[a];
    let xi = S[a + 1u];
    let wr = W[2u * j];
    let wi = W[2u * j + 1u];
    vr = (xr * wr - xi * wi) * P.scale;
    vi = (xr * wi + xi * wr) * P.scale;
  }
  D[2u * g] = vr;
  D[2u * g + 1u] = vi;
}""",
    # a direct DFT, one output per invocation: sum_j x_j w^(jk mod n)
    "direct": """
  let row = g / P.n;
  let k = g - row * P.n;
  let x = P.os + 2u * row * P.n;
  var sr = 0.0;
  var si = 0.0;
  var p = 0u;
  for (var j = 0u; j < P.n; j = j + 1u) {
    let wr = W[2u * p];
    let wi = P.sg * W[2u * p + 1u];
    let xr = S[x + 2u * j];
    let xi = S[x + 2u * j + 1u];
    sr = sr + xr * wr - xi * wi;
    si = si + xr * wi + xi * wr;
    p = p + k;
    if (p >= P.n) { p = p - P.n; }
  }
  D[2u * g] = sr * P.scale;
  D[2u * g + 1u] = si * P.scale;
}""",
}

_FIELDS = {
    "r2": [
        ("total", "u32"),
        ("os", "u32"),
        ("ln", "u32"),
        ("lc", "u32"),
        ("ts", "u32"),
        ("sg", "f32"),
        ("scale", "f32"),
    ],  # fmt: skip
    "chirp": [
        ("total", "u32"),
        ("os", "u32"),
        ("stride", "u32"),
        ("n_in", "u32"),
        ("n_out", "u32"),
        ("scale", "f32"),
    ],  # fmt: skip
    "direct": [("total", "u32"), ("os", "u32"), ("n", "u32"), ("sg", "f32"), ("scale", "f32")],
}
_FIELDS["r4"] = _FIELDS["r2"]


def _common() -> Any:
    from ember_wgpu.kernels import common

    return common


class _Launcher:
    """The primitives of :mod:`ember_signal._dft_native` on one WGPU runtime (float32)."""

    def __init__(self, backend: Any, dtype: Any) -> None:
        self.c, self.rt, self.dtype = _common(), backend.rt, dtype

    def _build(self, which: str) -> Any:
        c = self.c
        params = c.ParamBlock(_FIELDS[which])
        return _IO + "\n" + _HEAD.format(gid=c.GROUP_ID) + _BODIES[which], params, ("r", "r", "w")

    def _run(self, which: str, src: Any, dst: Any, tab: Any, values: dict[str, Any]) -> None:
        c, name = self.c, f"signal_dft_{which}"
        kernel = c.compile_kernel(self.rt, ("ember_signal", "dft", which), lambda: self._build(which), name)
        CALLS[name] += 1
        values["os"] = src[1]
        groups = c.grid(c.ceil_div(values["total"], _WG))
        c.launch(self.rt, kernel, values, [src[0].buffer, tab[0].buffer, dst[0].buffer], groups, name)

    def empty(self, count: int) -> Any:
        return self.rt.empty((count, 2), self.dtype)

    def upload(self, pairs: np.ndarray) -> Any:
        return (self.rt.upload(np.ascontiguousarray(pairs, dtype=np.float32), self.dtype), 0)

    def stage(
        self, radix: int, src: Any, dst: Any, tw: Any, rows: int, n: int, c: int, sign: int, scale: float
    ) -> None:
        values = {"total": rows * n // radix, "ln": n.bit_length() - 1, "lc": c.bit_length() - 1,
                  "ts": n // (radix * c), "sg": float(sign), "scale": float(scale)}  # fmt: skip
        self._run("r4" if radix == 4 else "r2", src, dst, tw, values)

    def chirp(self, src: Any, dst: Any, tab: Any, rows: int, stride: int, n_in: int, n_out: int, scale: float) -> None:
        values = {"total": rows * n_out, "stride": stride, "n_in": n_in, "n_out": n_out, "scale": float(scale)}
        self._run("chirp", src, dst, tab, values)

    def direct(self, src: Any, dst: Any, tw: Any, rows: int, n: int, sign: int, scale: float) -> None:
        self._run("direct", src, dst, tw, {"total": rows * n, "n": n, "sg": float(sign), "scale": float(scale)})


def _signal_dft_wgpu(backend: Any, x: Any, inverse: bool = False, scale: float = 1.0) -> Any:
    """``signal_dft`` of the pairs ``x`` (..., n, 2) in generated WGSL kernels, in float32."""
    import ember as em

    work = em.float32
    return _dft_native.run_pairs(backend, x, work, _Launcher(backend, work), inverse, scale)


def register(op: Any, kind: str = "wgpu") -> bool:
    """Register the kernel for ``kind`` when ember-wgpu is installed; whether it was."""
    return _dft_native.register_when_installed(op, kind, "ember_wgpu", _signal_dft_wgpu)

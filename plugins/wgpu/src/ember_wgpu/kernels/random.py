"""``random_bits``: Philox 4x32-10 in WGSL, word for word ``ember.random.philox_words``.

Thread ``b`` computes block ``counter + b`` (a 64-bit add: the carry out of the low word goes
to the high word, so streams crossing 2**32 blocks match the host), with the key schedule and
rounds of :func:`ember.random.philox4x32`; the 32x32->64-bit products come from 16-bit halves
(``mul32``), since WGSL has no 64-bit integers.
"""

from __future__ import annotations

from ember.dtypes import uint32
from ember.random import PHILOX_M, PHILOX_W

from ..handle import WgpuArray
from ..runtime import Runtime
from .common import GROUP_ID, ParamBlock, ceil_div, compile_kernel, grid, launch

__all__ = ["random_bits"]

WG = 256


def _build():  # type: ignore[no-untyped-def]
    params = ParamBlock([("n", "u32"), ("k0", "u32"), ("k1", "u32"), ("c_lo", "u32"), ("c_hi", "u32")])
    body = f"""@group(0) @binding(1) var<storage, read_write> Y: array<u32>;
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {{
  {GROUP_ID}
  let b = gid_lin * {WG}u + t;
  if (b >= (P.n + 3u) / 4u) {{ return; }}
  let lo = P.c_lo + b;
  var c0 = lo;
  var c1 = P.c_hi + select(0u, 1u, lo < P.c_lo);
  var c2 = 0u;
  var c3 = 0u;
  var k0 = P.k0;
  var k1 = P.k1;
  for (var r = 0u; r < 10u; r = r + 1u) {{
    if (r > 0u) {{
      k0 = k0 + 0x{PHILOX_W[0]:08x}u;
      k1 = k1 + 0x{PHILOX_W[1]:08x}u;
    }}
    let p0 = mul32(c0, 0x{PHILOX_M[0]:08x}u);
    let p1 = mul32(c2, 0x{PHILOX_M[1]:08x}u);
    c0 = p1.y ^ c1 ^ k0;
    c1 = p1.x;
    c2 = p0.y ^ c3 ^ k1;
    c3 = p0.x;
  }}
  let w = b * 4u;
  Y[w] = c0;
  if (w + 1u < P.n) {{ Y[w + 1u] = c1; }}
  if (w + 2u < P.n) {{ Y[w + 2u] = c2; }}
  if (w + 3u < P.n) {{ Y[w + 3u] = c3; }}
}}"""
    return body, params, ("w",)


def random_bits(rt: Runtime, key: tuple[int, int], counter: int, size: int) -> WgpuArray:
    """``size`` uint32 words of the Philox stream (key, counter)."""
    out = rt.empty((size,), uint32)
    if size == 0:
        return out
    c = counter & 0xFFFFFFFFFFFFFFFF
    kernel = compile_kernel(rt, ("philox",), _build, "philox")
    values = {"n": size, "k0": key[0] & 0xFFFFFFFF, "k1": key[1] & 0xFFFFFFFF, "c_lo": c & 0xFFFFFFFF, "c_hi": c >> 32}
    launch(rt, kernel, values, [out.buffer], grid(ceil_div(ceil_div(size, 4), WG)), "philox")
    return out

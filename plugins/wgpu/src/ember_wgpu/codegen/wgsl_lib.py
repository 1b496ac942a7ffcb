"""WGSL helper functions that generated kernels call: NaN-exact float rules, an accurate f32
math library, 16-bit float rounding, and emulated 64-bit integers on vec2<u32> (x = lo, y = hi).

Why not WGSL's builtins: drivers may implement ``exp``/``sin``/``tanh`` with large errors
(lavapipe's ``exp`` is ~15 ulp off, Vulkan allows sin/cos an absolute 2^-11), ``max``/``min``
drop NaN, and ``a != b`` is false for NaN on some drivers. The functions here follow Cephes
(expf, logf, sinf, cosf, tanhf) and Eigen's erf, so every device gives the same few-ulp
results. :func:`with_helpers` appends exactly the helpers a kernel body uses.
"""

from __future__ import annotations

import re

from .complex_lib import COMPLEX_HELPERS

__all__ = ["HELPERS", "with_helpers", "INF", "NEG_INF", "NAN"]

INF = "bitcast<f32>(0x7f800000u)"
NEG_INF = "bitcast<f32>(0xff800000u)"
NAN = "bitcast<f32>(0x7fc00000u)"

HELPERS: dict[str, str] = {
    # -- float classification and NaN-propagating rules -----------------------------------
    "is_nan": "fn is_nan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }",
    "is_inf": "fn is_inf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) == 0x7f800000u; }",
    "f_ne": "fn f_ne(a: f32, b: f32) -> bool { return !(a == b); }",
    "f_max": "fn f_max(a: f32, b: f32) -> f32 { return select(select(b, a, a > b), a, is_nan(a)); }",
    "f_min": "fn f_min(a: f32, b: f32) -> f32 { return select(select(b, a, a < b), a, is_nan(a)); }",
    "copysign": """fn copysign(x: f32, s: f32) -> f32 {
  return bitcast<f32>((bitcast<u32>(x) & 0x7fffffffu) | (bitcast<u32>(s) & 0x80000000u));
}""",
    "f_sign": """fn f_sign(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  return select(select(0.0, -1.0, x < 0.0), 1.0, x > 0.0);
}""",
    # -- 16-bit floats ---------------------------------------------------------------------
    "to_f16": """fn to_f16(x: f32) -> f16 {
  if (!is_nan(x) && abs(x) >= 65520.0) { return f16(copysign(bitcast<f32>(0x7f800000u), x)); }
  return f16(x);
}""",
    "round_f16": """fn round_f16(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  if (abs(x) >= 65520.0) { return copysign(bitcast<f32>(0x7f800000u), x); }
  return unpack2x16float(pack2x16float(vec2<f32>(x, 0.0))).x;
}""",
    "round_bf16": """fn round_bf16(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  let b = bitcast<u32>(x);
  return bitcast<f32>((b + 0x7fffu + ((b >> 16u) & 1u)) & 0xffff0000u);
}""",
    # -- math library (Cephes single precision) --------------------------------------------
    "m_exp": """fn m_exp(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  if (x > 88.72283935546875) { return bitcast<f32>(0x7f800000u); }
  if (x < -103.972084045410) { return 0.0; }
  let k = round(x * 1.44269504088896341);
  let r = x - k * 0.693359375 + k * 2.12194440e-4;
  let z = r * r;
  var p = 1.9875691500e-4;
  p = p * r + 1.3981999507e-3;
  p = p * r + 8.3334519073e-3;
  p = p * r + 4.1665795894e-2;
  p = p * r + 1.6666665459e-1;
  p = p * r + 5.0000001201e-1;
  let y = p * z + r + 1.0;
  let ki = i32(k);
  let h = ki / 2;
  return ldexp(ldexp(y, h), ki - h);
}""",
    "m_exp2": """fn m_exp2(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  if (x >= 128.0) { return bitcast<f32>(0x7f800000u); }
  if (x < -150.0) { return 0.0; }
  let k = round(x);
  let y = m_exp((x - k) * 0.693147180559945309);
  let ki = i32(k);
  let h = ki / 2;
  return ldexp(ldexp(y, h), ki - h);
}""",
    "m_log": """fn m_log(x0: f32) -> f32 {
  if (is_nan(x0)) { return x0; }
  if (x0 < 0.0) { return bitcast<f32>(0x7fc00000u); }
  if (x0 == 0.0) { return bitcast<f32>(0xff800000u); }
  if (is_inf(x0)) { return x0; }
  var xin = x0;
  var e = 0;
  if (xin < 1.17549435e-38) { xin = xin * 16777216.0; e = -24; }
  let fr = frexp(xin);
  var x = fr.fract;
  e = e + fr.exp;
  if (x < 0.707106781186547524) { e = e - 1; x = x + x - 1.0; } else { x = x - 1.0; }
  let z = x * x;
  var y = 7.0376836292e-2;
  y = y * x - 1.1514610310e-1;
  y = y * x + 1.1676998740e-1;
  y = y * x - 1.2420140846e-1;
  y = y * x + 1.4249322787e-1;
  y = y * x - 1.6668057665e-1;
  y = y * x + 2.0000714765e-1;
  y = y * x - 2.4999993993e-1;
  y = y * x + 3.3333331174e-1;
  y = y * x * z;
  let fe = f32(e);
  y = y - fe * 2.12194440e-4;
  y = y - 0.5 * z;
  return x + y + fe * 0.693359375;
}""",
    "m_log1p": """fn m_log1p(x: f32) -> f32 {
  let u = 1.0 + x;
  if (u == 1.0) { return x; }
  if (u > 3.40282347e38) { return u; }
  return m_log(u) * (x / (u - 1.0));
}""",
    "m_expm1": """fn m_expm1(x: f32) -> f32 {
  if (abs(x) >= 0.5) { return m_exp(x) - 1.0; }
  let u = m_exp(x);
  if (u == 1.0) { return x; }
  return (u - 1.0) * (x / m_log(u));
}""",
    "m_sin": """fn m_sin(x0: f32) -> f32 {
  if (is_nan(x0) || is_inf(x0)) { return bitcast<f32>(0x7fc00000u); }
  var sgn = 1.0;
  var x = x0;
  if (x < 0.0) { sgn = -1.0; x = -x; }
  if (x > 1.0e5) { return sgn * sin(x); }
  var j = u32(x * 1.27323954473516);
  var y = f32(j);
  if ((j & 1u) != 0u) { j = j + 1u; y = y + 1.0; }
  j = j & 7u;
  if (j > 3u) { sgn = -sgn; j = j - 4u; }
  x = ((x - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
  let z = x * x;
  var r: f32;
  if (j == 1u || j == 2u) {
    r = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
  } else {
    r = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * x + x;
  }
  return sgn * r;
}""",
    "m_cos": """fn m_cos(x0: f32) -> f32 {
  if (is_nan(x0) || is_inf(x0)) { return bitcast<f32>(0x7fc00000u); }
  var x = abs(x0);
  if (x > 1.0e5) { return cos(x); }
  var j = u32(x * 1.27323954473516);
  var y = f32(j);
  if ((j & 1u) != 0u) { j = j + 1u; y = y + 1.0; }
  j = j & 7u;
  var sgn = 1.0;
  if (j > 3u) { j = j - 4u; sgn = -sgn; }
  if (j > 1u) { sgn = -sgn; }
  x = ((x - y * 0.78515625) - y * 2.4187564849853515625e-4) - y * 3.77489497744594108e-8;
  let z = x * x;
  var r: f32;
  if (j == 1u || j == 2u) {
    r = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * x + x;
  } else {
    r = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z - 0.5 * z + 1.0;
  }
  return sgn * r;
}""",
    "m_tanh": """fn m_tanh(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  let a = abs(x);
  if (a > 9.5) { return copysign(1.0, x); }
  if (a >= 0.625) {
    let e = m_exp(2.0 * a);
    return copysign(1.0 - 2.0 / (e + 1.0), x);
  }
  let z = x * x;
  return ((((-5.70498872745e-3 * z + 2.06390887954e-2) * z - 5.37397155531e-2) * z + 1.33314422036e-1) * z
    - 3.33332819422e-1) * z * x + x;
}""",
    "m_erf": """fn m_erf(x0: f32) -> f32 {
  if (is_nan(x0)) { return x0; }
  let x = clamp(x0, -4.0, 4.0);
  let x2 = x * x;
  var p = -2.72614225801306e-10;
  p = p * x2 + 2.77068142495902e-08;
  p = p * x2 - 2.10102402082508e-06;
  p = p * x2 - 5.69250639462346e-05;
  p = p * x2 - 7.34990630326855e-04;
  p = p * x2 - 2.95459980854025e-03;
  p = p * x2 - 1.60960333262415e-02;
  p = p * x;
  var q = -1.45660718464996e-05;
  q = q * x2 - 2.13374055278905e-04;
  q = q * x2 - 1.68282697438203e-03;
  q = q * x2 - 7.37332916720468e-03;
  q = q * x2 - 1.42647390514189e-02;
  return clamp(p / q, -1.0, 1.0);
}""",
    "m_atan": """fn m_atan(x0: f32) -> f32 {
  if (is_nan(x0)) { return x0; }
  var x = abs(x0);
  var y = 0.0;
  if (x > 2.414213562373095) {
    y = 1.5707963267948966;
    x = -(1.0 / x);
  } else if (x > 0.4142135623730950) {
    y = 0.7853981633974483;
    x = (x - 1.0) / (x + 1.0);
  }
  let z = x * x;
  y = y + (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * x + x;
  return copysign(y, x0);
}""",
    "m_atan2": """fn m_atan2(y: f32, x: f32) -> f32 {
  if (is_nan(x) || is_nan(y)) { return x + y; }
  let xneg = (bitcast<u32>(x) & 0x80000000u) != 0u;
  if (y == 0.0) { return select(copysign(0.0, y), copysign(3.14159265358979, y), xneg); }
  if (x == 0.0) { return copysign(1.5707963267948966, y); }
  if (is_inf(x)) {
    if (is_inf(y)) { return copysign(select(0.7853981633974483, 2.356194490192345, xneg), y); }
    return select(copysign(0.0, y), copysign(3.14159265358979, y), xneg);
  }
  if (is_inf(y)) { return copysign(1.5707963267948966, y); }
  var z = m_atan(y / x);
  if (xneg) { z = z + copysign(3.14159265358979, y); }
  return z;
}""",
    "m_asin": """fn m_asin(x0: f32) -> f32 {
  let a = abs(x0);
  if (is_nan(x0) || a > 1.0) { return bitcast<f32>(0x7fc00000u); }
  if (a < 1.0e-4) { return x0; }
  var x = a;
  var z = a * a;
  let big = a > 0.5;
  if (big) { z = 0.5 * (1.0 - a); x = sqrt(z); }
  var r = ((((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z
    + 1.6666752422e-1) * z * x + x;
  if (big) { r = 1.5707963267948966 - (r + r); }
  return copysign(r, x0);
}""",
    "m_acos": """fn m_acos(x: f32) -> f32 {
  if (is_nan(x) || abs(x) > 1.0) { return bitcast<f32>(0x7fc00000u); }
  if (x < -0.5) { return 3.14159265358979 - 2.0 * m_asin(sqrt(0.5 * (1.0 + x))); }
  if (x > 0.5) { return 2.0 * m_asin(sqrt(0.5 * (1.0 - x))); }
  return 1.5707963267948966 - m_asin(x);
}""",
    "m_sigmoid": """fn m_sigmoid(x: f32) -> f32 {
  let e = m_exp(-abs(x));
  return select(e / (1.0 + e), 1.0 / (1.0 + e), x >= 0.0);
}""",
    "m_softplus": """fn m_softplus(x: f32) -> f32 {
  if (is_nan(x)) { return x; }
  return max(x, 0.0) + m_log1p(m_exp(-abs(x)));
}""",
    "m_sinh": """fn m_sinh(x: f32) -> f32 {
  let a = abs(x);
  if (a < 0.5) { return copysign(0.5 * (m_expm1(a) + m_expm1(a) / (m_expm1(a) + 1.0)), x); }
  let e = m_exp(a);
  return copysign(0.5 * (e - 1.0 / e), x);
}""",
    "m_cosh": """fn m_cosh(x: f32) -> f32 {
  let e = m_exp(abs(x));
  return 0.5 * (e + 1.0 / e);
}""",
    "m_asinh": """fn m_asinh(x: f32) -> f32 {
  let a = abs(x);
  if (a > 1.0e18) { return copysign(m_log(a) + 0.693147180559945309, x); }
  return copysign(m_log1p(a + a * a / (1.0 + sqrt(1.0 + a * a))), x);
}""",
    "m_acosh": """fn m_acosh(x: f32) -> f32 {
  if (x > 1.0e18) { return m_log(x) + 0.693147180559945309; }
  let t = x - 1.0;
  return m_log1p(t + sqrt(2.0 * t + t * t));
}""",
    "m_atanh": """fn m_atanh(x: f32) -> f32 {
  return 0.5 * m_log1p(2.0 * x / (1.0 - x));
}""",
    "m_pow": """fn m_pow(a: f32, b: f32) -> f32 {
  if (b == 0.0 || a == 1.0) { return 1.0; }
  if (is_nan(a) || is_nan(b)) { return a + b; }
  let aa = abs(a);
  if (is_inf(b)) {
    if (aa == 1.0) { return 1.0; }
    return select(0.0, bitcast<f32>(0x7f800000u), (aa > 1.0) == (b > 0.0));
  }
  let integral = trunc(b) == b;
  let odd = integral && abs(b) < 16777216.0 && (i32(b) & 1) != 0;
  let neg = (bitcast<u32>(a) & 0x80000000u) != 0u;
  if (is_inf(a)) {
    let r = select(0.0, bitcast<f32>(0x7f800000u), b > 0.0);
    return select(r, -r, neg && odd);
  }
  if (b == 1.0) { return a; }
  if (b == 2.0) { return a * a; }
  if (b == 0.5 && !(a == 0.0)) { return sqrt(a); }
  if (b == -1.0) { return 1.0 / a; }
  if (a < 0.0 && !integral) { return bitcast<f32>(0x7fc00000u); }
  var r = m_exp2(b * m_log(aa) * 1.44269504088896341);
  if (aa == 0.0) { r = select(0.0, bitcast<f32>(0x7f800000u), b < 0.0); }
  return select(r, -r, neg && odd);
}""",
    "m_logaddexp": """fn m_logaddexp(a: f32, b: f32) -> f32 {
  if (a == b) { return a + 0.693147180559945309; }
  let m = f_max(a, b);
  return m + m_log1p(m_exp(-abs(a - b)));
}""",
    "f_fmod": """fn f_fmod(a: f32, b: f32) -> f32 {
  if (is_nan(a) || is_nan(b) || is_inf(a) || b == 0.0) { return bitcast<f32>(0x7fc00000u); }
  if (is_inf(b)) { return a; }
  var x = abs(a);
  let y = abs(b);
  let fy = frexp(y);
  for (var i = 0; i < 300 && x >= y; i = i + 1) {
    let fx = frexp(x);
    var k = fx.exp - fy.exp;
    if (fy.fract > fx.fract) { k = k - 1; }
    x = x - ldexp(y, k);
  }
  return copysign(x, a);
}""",
    "f_floordiv": """fn f_floordiv(a: f32, b: f32) -> f32 {
  if (b == 0.0) { return a / b; }
  // the Array API's cases with one infinity: floor(a / b), not NaN
  if (is_inf(a) != is_inf(b) && !is_nan(a) && !is_nan(b)) { return floor(a / b); }
  let m = f_fmod(a, b);
  var d = (a - m) / b;
  if (!(m == 0.0) && ((b < 0.0) != (m < 0.0))) { d = d - 1.0; }
  if (d == 0.0) { return copysign(0.0, a / b); }
  var f = floor(d);
  if (d - f > 0.5) { f = f + 1.0; }
  return f;
}""",
    "f_rem": """fn f_rem(a: f32, b: f32) -> f32 {
  var m = f_fmod(a, b);
  if (is_nan(m)) { return m; }
  if (!(m == 0.0)) {
    if ((b < 0.0) != (m < 0.0)) { m = m + b; }
  } else {
    m = copysign(0.0, b);
  }
  return m;
}""",
    "m_hypot": """fn m_hypot(a: f32, b: f32) -> f32 {
  let x = abs(a);
  let y = abs(b);
  if (is_inf(x) || is_inf(y)) { return bitcast<f32>(0x7f800000u); }
  if (is_nan(x) || is_nan(y)) { return x + y; }
  let m = max(x, y);
  if (m == 0.0) { return 0.0; }
  let r = min(x, y) / m;
  return m * sqrt(1.0 + r * r);
}""",
    # -- 32-bit integers -------------------------------------------------------------------
    # floor division from the remainder a - q * b, not from `%`: correct whether the driver's
    # `/` truncates (the WGSL rule) or floors (seen on NVIDIA's Vulkan driver for negatives)
    "i_floordiv": """fn i_floordiv(a: i32, b: i32) -> i32 {
  if (b == 0) { return 0; }
  var q = a / b;
  let r = a - q * b;
  if (r != 0 && ((r ^ b) < 0)) { q = q - 1; }
  return q;
}""",
    "i_rem": """fn i_rem(a: i32, b: i32) -> i32 {
  if (b == 0) { return 0; }
  return a - i_floordiv(a, b) * b;
}""",
    "u_div": "fn u_div(a: u32, b: u32) -> u32 { if (b == 0u) { return 0u; } return a / b; }",
    "u_rem": "fn u_rem(a: u32, b: u32) -> u32 { if (b == 0u) { return 0u; } return a % b; }",
    "i_pow": """fn i_pow(a: i32, b: i32) -> i32 {
  if (b < 0) {
    if (a == 1) { return 1; }
    if (a == -1) { return select(1, -1, (b & 1) != 0); }
    return 0;
  }
  var r = 1;
  var base = a;
  var e = u32(b);
  loop {
    if (e == 0u) { break; }
    if ((e & 1u) != 0u) { r = r * base; }
    base = base * base;
    e = e >> 1u;
  }
  return r;
}""",
    "u_pow": """fn u_pow(a: u32, b: u32) -> u32 {
  var r = 1u;
  var base = a;
  var e = b;
  loop {
    if (e == 0u) { break; }
    if ((e & 1u) != 0u) { r = r * base; }
    base = base * base;
    e = e >> 1u;
  }
  return r;
}""",
    "f2u": "fn f2u(x: f32) -> u32 { return select(u32(x), bitcast<u32>(i32(x)), x < 0.0); }",
    # -- emulated 64-bit integers (vec2<u32>: x = low word, y = high word) ----------------
    "i64_add": """fn i64_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}""",
    "i64_sub": """fn i64_sub(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}""",
    "i64_neg": "fn i64_neg(a: vec2<u32>) -> vec2<u32> { return i64_sub(vec2<u32>(0u, 0u), a); }",
    "mul32": """fn mul32(a: u32, b: u32) -> vec2<u32> {
  let a0 = a & 0xffffu;
  let a1 = a >> 16u;
  let b0 = b & 0xffffu;
  let b1 = b >> 16u;
  let p00 = a0 * b0;
  let p01 = a0 * b1;
  let p10 = a1 * b0;
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return vec2<u32>((p00 & 0xffffu) | (mid << 16u), a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}""",
    "i64_mul": """fn i64_mul(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let p = mul32(a.x, b.x);
  return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}""",
    "i64_neg_p": "fn i64_neg_p(a: vec2<u32>) -> bool { return (a.y & 0x80000000u) != 0u; }",
    "i64_lt": """fn i64_lt(a: vec2<u32>, b: vec2<u32>) -> bool {
  let ah = bitcast<i32>(a.y);
  let bh = bitcast<i32>(b.y);
  return ah < bh || (ah == bh && a.x < b.x);
}""",
    "u64_lt": "fn u64_lt(a: vec2<u32>, b: vec2<u32>) -> bool { return a.y < b.y || (a.y == b.y && a.x < b.x); }",
    "i64_abs": "fn i64_abs(a: vec2<u32>) -> vec2<u32> { return select(a, i64_neg(a), i64_neg_p(a)); }",
    "i64_sign": """fn i64_sign(a: vec2<u32>) -> vec2<u32> {
  if (i64_neg_p(a)) { return vec2<u32>(0xffffffffu, 0xffffffffu); }
  return vec2<u32>(select(0u, 1u, a.x != 0u || a.y != 0u), 0u);
}""",
    "u64_divmod": """fn u64_divmod(n: vec2<u32>, d: vec2<u32>) -> array<vec2<u32>, 2> {
  if (d.x == 0u && d.y == 0u) { return array<vec2<u32>, 2>(vec2<u32>(0u, 0u), vec2<u32>(0u, 0u)); }
  if (n.y == 0u && d.y == 0u) {
    return array<vec2<u32>, 2>(vec2<u32>(n.x / d.x, 0u), vec2<u32>(n.x % d.x, 0u));
  }
  var q = vec2<u32>(0u, 0u);
  var r = vec2<u32>(0u, 0u);
  for (var i = 63i; i >= 0; i = i - 1) {
    r = vec2<u32>(r.x << 1u, (r.y << 1u) | (r.x >> 31u));
    let w = select(n.x, n.y, i >= 32);
    r.x = r.x | ((w >> (u32(i) & 31u)) & 1u);
    if (!u64_lt(r, d)) {
      r = i64_sub(r, d);
      if (i >= 32) { q.y = q.y | (1u << (u32(i) - 32u)); } else { q.x = q.x | (1u << u32(i)); }
    }
  }
  return array<vec2<u32>, 2>(q, r);
}""",
    "u64_div": "fn u64_div(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return u64_divmod(a, b)[0]; }",
    "u64_rem": "fn u64_rem(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return u64_divmod(a, b)[1]; }",
    "i64_floordiv": """fn i64_floordiv(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  if (b.x == 0u && b.y == 0u) { return vec2<u32>(0u, 0u); }
  let qr = u64_divmod(i64_abs(a), i64_abs(b));
  var q = qr[0];
  if (i64_neg_p(a) != i64_neg_p(b)) {
    q = i64_neg(q);
    if (qr[1].x != 0u || qr[1].y != 0u) { q = i64_sub(q, vec2<u32>(1u, 0u)); }
  }
  return q;
}""",
    "i64_rem": """fn i64_rem(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  if (b.x == 0u && b.y == 0u) { return vec2<u32>(0u, 0u); }
  var r = u64_divmod(i64_abs(a), i64_abs(b))[1];
  if (i64_neg_p(a)) { r = i64_neg(r); }
  if ((r.x != 0u || r.y != 0u) && (i64_neg_p(r) != i64_neg_p(b))) { r = i64_add(r, b); }
  return r;
}""",
    "i64_pow": """fn i64_pow(a: vec2<u32>, b: vec2<u32>, is_signed: bool) -> vec2<u32> {
  if (is_signed && i64_neg_p(b)) {
    if (a.x == 1u && a.y == 0u) { return a; }
    if (a.x == 0xffffffffu && a.y == 0xffffffffu) { return select(vec2<u32>(1u, 0u), a, (b.x & 1u) != 0u); }
    return vec2<u32>(0u, 0u);
  }
  var r = vec2<u32>(1u, 0u);
  var base = a;
  var e = b;
  loop {
    if (e.x == 0u && e.y == 0u) { break; }
    if ((e.x & 1u) != 0u) { r = i64_mul(r, base); }
    base = i64_mul(base, base);
    e = vec2<u32>((e.x >> 1u) | (e.y << 31u), e.y >> 1u);
  }
  return r;
}""",
    "i64_max": "fn i64_max(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return select(b, a, i64_lt(b, a)); }",
    "i64_min": "fn i64_min(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return select(b, a, i64_lt(a, b)); }",
    "u64_max": "fn u64_max(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return select(b, a, u64_lt(b, a)); }",
    "u64_min": "fn u64_min(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> { return select(b, a, u64_lt(a, b)); }",
    "i64_from_i32": """fn i64_from_i32(x: i32) -> vec2<u32> {
  return vec2<u32>(bitcast<u32>(x), select(0u, 0xffffffffu, x < 0));
}""",
    "u64_to_f32": """fn u64_to_f32(a: vec2<u32>) -> f32 {
  if (a.y == 0u) { return f32(a.x); }
  let lz = countLeadingZeros(a.y);
  var top = a.y;
  var rest = a.x;
  if (lz > 0u) {
    top = (a.y << lz) | (a.x >> (32u - lz));
    rest = a.x << lz;
  }
  top = top | select(0u, 1u, rest != 0u);
  return ldexp(f32(top), i32(32u - lz));
}""",
    "i64_to_f32": """fn i64_to_f32(a: vec2<u32>) -> f32 {
  if (i64_neg_p(a)) { return -u64_to_f32(i64_neg(a)); }
  return u64_to_f32(a);
}""",
    "i64_from_f32": """fn i64_from_f32(f: f32) -> vec2<u32> {
  if (is_nan(f)) { return vec2<u32>(0u, 0x80000000u); }
  let t = min(trunc(abs(f)), 9.2233715e18);
  let hi = floor(t * 2.3283064365386963e-10);
  let lo = t - hi * 4294967296.0;
  var r = vec2<u32>(u32(lo), u32(hi));
  if (f < 0.0) { r = i64_neg(r); }
  return r;
}""",
    "u64_from_f32": """fn u64_from_f32(f: f32) -> vec2<u32> {
  if (f < 0.0) { return i64_from_f32(f); }
  let t = min(trunc(f), 1.8446743e19);
  let hi = floor(t * 2.3283064365386963e-10);
  return vec2<u32>(u32(t - hi * 4294967296.0), u32(hi));
}""",
}

HELPERS.update(COMPLEX_HELPERS)  # complex64 as vec2<f32>

_NAME = re.compile(r"\b([a-z][a-z0-9_]*)\s*\(")
_DEPS: dict[str, frozenset[str]] = {}


def _deps(name: str) -> frozenset[str]:
    found = _DEPS.get(name)
    if found is None:
        code = HELPERS[name]
        body = code.split("{", 1)[1]
        found = frozenset(n for n in _NAME.findall(body) if n in HELPERS and n != name)
        _DEPS[name] = found
    return found


def with_helpers(body: str) -> str:
    """The helper functions ``body`` calls (transitively, each once, dependencies first)."""
    wanted = [n for n in dict.fromkeys(_NAME.findall(body)) if n in HELPERS]
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for dep in sorted(_deps(name)):
            visit(dep)
        order.append(name)

    for name in wanted:
        visit(name)
    return "\n".join(HELPERS[n] for n in order)

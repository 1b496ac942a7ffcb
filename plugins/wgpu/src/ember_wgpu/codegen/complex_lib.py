"""complex64 in WGSL: a ``vec2<f32>`` of (real, imaginary), numpy's byte layout.

WGSL has no complex type; these helpers are the arithmetic and the standard's functions over
the pair, on the f32 library of :mod:`.wgsl_lib` (``m_exp``, ``m_atan2``, ...: exact special
values where the driver's builtins are not). Special values follow C99 Annex G as numpy's
complex128 does (the same rules as ember-opencl's float2 library). complex128 would need f64,
which WGSL lacks.
"""

from __future__ import annotations

__all__ = ["COMPLEX_HELPERS", "COMPLEX_OPS", "REAL_RESULT"]

_INF = "bitcast<f32>(0x7f800000u)"
_NAN = "bitcast<f32>(0x7fc00000u)"
_PI2 = "1.5707963267948966"

#: elementwise ops the standard defines for complex operands
COMPLEX_OPS = frozenset(
    "neg abs sign exp log sqrt sin cos tanh round reciprocal isnan isinf expm1 log2 log10 log1p square tan "
    "asin acos atan sinh cosh asinh acosh atanh isfinite add sub mul div pow eq ne conj real imag angle".split()
)
#: ops whose result is the real dtype of a complex operand
REAL_RESULT = frozenset(["abs", "real", "imag", "angle"])

_C = "vec2<f32>"

COMPLEX_HELPERS: dict[str, str] = {
    "f_finite": "fn f_finite(x: f32) -> bool { return !(is_nan(x) || is_inf(x)); }",
    "f_signbit": "fn f_signbit(x: f32) -> bool { return (bitcast<u32>(x) & 0x80000000u) != 0u; }",
    # -x by its sign bit: -(+0) must be -0, which decides a branch cut's side (i z for asin); NVIDIA's
    # OpenCL compiler got that wrong for ember-opencl's float2 library (its README), so neither relies on it
    "f_flip": "fn f_flip(x: f32) -> f32 { return bitcast<f32>(bitcast<u32>(x) ^ 0x80000000u); }",
    "c_times_i": f"fn c_times_i(z: {_C}) -> {_C} {{ return {_C}(f_flip(z.y), z.x); }}",
    "c_times_minus_i": f"fn c_times_minus_i(w: {_C}) -> {_C} {{ return {_C}(w.y, f_flip(w.x)); }}",
    # p / +0 spelled out: some drivers' 0 / 0 is 0, not NaN
    "f_over_zero": f"""fn f_over_zero(p: f32) -> f32 {{
  return select(copysign({_INF}, p), {_NAN}, p == 0.0 || is_nan(p));
}}""",
    "c_mul": f"""fn c_mul(a: {_C}, b: {_C}) -> {_C} {{
  return {_C}(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}}""",
    # Smith's division: scaled by b's larger part, so |b|^2 is never formed
    "c_div": f"""fn c_div(a: {_C}, b: {_C}) -> {_C} {{
  let bx = abs(b.x);
  let by = abs(b.y);
  if (bx >= by) {{
    if (bx == 0.0) {{ return {_C}(f_over_zero(a.x), f_over_zero(a.y)); }}
    let r = b.y / b.x;
    let d = b.x + b.y * r;
    return {_C}((a.x + a.y * r) / d, (a.y - a.x * r) / d);
  }}
  if (is_nan(bx) || is_nan(by)) {{ return {_C}({_NAN}, {_NAN}); }}
  let r = b.x / b.y;
  let d = b.y + b.x * r;
  return {_C}((a.x * r + a.y) / d, (a.y * r - a.x) / d);
}}""",
    "c_exp": f"""fn c_exp(z: {_C}) -> {_C} {{
  let x = z.x;
  let y = z.y;
  if (is_inf(x)) {{
    if (x < 0.0) {{
      if (f_finite(y)) {{ return {_C}(0.0 * m_cos(y), 0.0 * m_sin(y)); }}
      return {_C}(0.0, 0.0);
    }}
    if (y == 0.0) {{ return z; }}
    if (!f_finite(y)) {{ return {_C}(x, {_NAN}); }}
    return {_C}(x * m_cos(y), x * m_sin(y));
  }}
  if (is_nan(x)) {{ return select({_C}(x, x), z, y == 0.0); }}
  if (!f_finite(y)) {{ return {_C}({_NAN}, {_NAN}); }}
  if (y == 0.0) {{ return {_C}(m_exp(x), y); }}
  if (x > 88.0) {{
    let h = m_exp(x * 0.5);
    return {_C}(h * m_cos(y) * h, h * m_sin(y) * h);
  }}
  let e = m_exp(x);
  return {_C}(e * m_cos(y), e * m_sin(y));
}}""",
    "c_logabs": """fn c_logabs(x: f32, y: f32) -> f32 {
  let h = m_hypot(x, y);
  if (h > 0.7 && h < 1.4) { return 0.5 * m_log1p((x - 1.0) * (x + 1.0) + y * y); }
  return m_log(h);
}""",
    "c_log": f"fn c_log(z: {_C}) -> {_C} {{ return {_C}(c_logabs(z.x, z.y), m_atan2(z.y, z.x)); }}",
    "c_sqrt": f"""fn c_sqrt(z: {_C}) -> {_C} {{
  let x = z.x;
  let y = z.y;
  if (is_inf(y)) {{ return {_C}({_INF}, y); }}
  if (is_nan(x)) {{ return {_C}(x, x); }}
  if (is_inf(x)) {{
    if (x > 0.0) {{ return {_C}(x, select(copysign(0.0, y), y, is_nan(y))); }}
    return {_C}(select(0.0, y, is_nan(y)), copysign({_INF}, y));
  }}
  if (is_nan(y)) {{ return {_C}(y, y); }}
  if (x == 0.0 && y == 0.0) {{ return {_C}(0.0, y); }}
  let ax = abs(x);
  let ay = abs(y);
  var t: f32;
  if (ax > 1e37 || ay > 1e37) {{
    t = 2.0 * sqrt((ax * 0.25 + m_hypot(ax * 0.25, ay * 0.25)) * 0.5);
  }} else {{
    t = sqrt((ax + m_hypot(ax, ay)) * 0.5);
  }}
  if (x >= 0.0) {{ return {_C}(t, y / (2.0 * t)); }}
  return {_C}(ay / (2.0 * t), copysign(t, y));
}}""",
    "c_sinh": f"""fn c_sinh(z: {_C}) -> {_C} {{
  let x = z.x;
  let y = z.y;
  if (f_finite(x) && f_finite(y)) {{
    if (y == 0.0) {{ return {_C}(m_sinh(x), y); }}
    if (abs(x) > 88.0) {{
      let h = m_exp(abs(x) * 0.5);
      return {_C}(copysign(h * 0.5, x) * m_cos(y) * h, h * 0.5 * m_sin(y) * h);
    }}
    return {_C}(m_sinh(x) * m_cos(y), m_cosh(x) * m_sin(y));
  }}
  if (x == 0.0) {{ return {_C}(x, {_NAN}); }}
  if (y == 0.0) {{ return {_C}(x, y); }}
  if (is_inf(x)) {{
    if (!f_finite(y)) {{ return {_C}(abs(x), {_NAN}); }}
    return {_C}(x * m_cos(y), {_INF} * m_sin(y));
  }}
  return {_C}({_NAN}, {_NAN});
}}""",
    "c_cosh": f"""fn c_cosh(z: {_C}) -> {_C} {{
  let x = z.x;
  let y = z.y;
  if (f_finite(x) && f_finite(y)) {{
    if (y == 0.0) {{ return {_C}(m_cosh(x), x * y); }}
    if (abs(x) > 88.0) {{
      let h = m_exp(abs(x) * 0.5);
      return {_C}(h * 0.5 * m_cos(y) * h, copysign(h * 0.5, x) * m_sin(y) * h);
    }}
    return {_C}(m_cosh(x) * m_cos(y), m_sinh(x) * m_sin(y));
  }}
  if (x == 0.0) {{ return {_C}({_NAN}, 0.0); }}
  if (y == 0.0) {{ return {_C}(abs(x), select(select(y, -y, f_signbit(x)), y, is_nan(x))); }}
  if (is_inf(x)) {{
    if (!f_finite(y)) {{ return {_C}({_INF}, {_NAN}); }}
    return {_C}({_INF} * m_cos(y), x * m_sin(y));
  }}
  return {_C}({_NAN}, {_NAN});
}}""",
    # Kahan's form for finite values; the standard's +-1 +- 0i at infinite real parts
    "c_tanh": f"""fn c_tanh(z: {_C}) -> {_C} {{
  let x = z.x;
  let y = z.y;
  if (is_inf(x)) {{ return {_C}(copysign(1.0, x), copysign(0.0, y)); }}
  if (is_nan(x)) {{ return {_C}(x, select(x, y, y == 0.0)); }}
  if (!f_finite(y)) {{ return {_C}(select({_NAN}, x, x == 0.0), {_NAN}); }}
  if (y == 0.0) {{ return {_C}(m_tanh(x), y); }}
  if (abs(x) > 11.0) {{
    let e = m_exp(-2.0 * abs(x));
    return {_C}(copysign(1.0, x), 4.0 * m_sin(y) * m_cos(y) * e);
  }}
  let t = m_sin(y) / m_cos(y);
  let b = 1.0 + t * t;
  let s = m_sinh(x);
  let r = sqrt(1.0 + s * s);
  let d = 1.0 + b * s * s;
  return {_C}(b * r * s / d, t / d);
}}""",
    "c_asinh": f"""fn c_asinh(z: {_C}) -> {_C} {{
  if (is_nan(z.x) && z.y == 0.0) {{ return z; }}
  let neg = f_signbit(z.x);
  let u = select(z, -z, neg);
  var w: {_C};
  if (!f_finite(u.x) || !f_finite(u.y) || u.x > 1e18 || abs(u.y) > 1e18) {{
    w = c_log(u);
    w.x = w.x + 0.6931471805599453;
  }} else if (u.x == 0.0 && abs(u.y) <= 1.0) {{
    w = {_C}(u.x, m_asin(u.y));
  }} else if (m_hypot(u.x, u.y) < 1e-3) {{
    let z2 = c_mul(u, u);
    w = c_mul(u, {_C}(1.0, 0.0) + c_mul(z2, {_C}(-1.0 / 6.0, 0.0) + z2 * (3.0 / 40.0)));
  }} else {{
    var q = c_mul(u, u);
    q.x = q.x + 1.0;
    w = c_log(u + c_sqrt(q));
  }}
  return select(w, -w, neg);
}}""",
    "c_atanh": f"""fn c_atanh(z: {_C}) -> {_C} {{
  let x = z.x;
  let y = z.y;
  let ax = abs(x);
  if (is_inf(x) || is_inf(y)) {{ return {_C}(copysign(0.0, x), select(copysign({_PI2}, y), y, is_nan(y))); }}
  if (is_nan(x) || is_nan(y)) {{ return {_C}(select({_NAN}, x, x == 0.0), {_NAN}); }}
  if (ax > 1e18 || abs(y) > 1e18) {{
    let h = m_hypot(x, y);
    return {_C}((x / h) / h, copysign({_PI2}, y));
  }}
  if (m_hypot(x, y) < 1e-3) {{
    let z2 = c_mul(z, z);
    return c_mul(z, {_C}(1.0, 0.0) + c_mul(z2, {_C}(1.0 / 3.0, 0.0) + z2 * 0.2));
  }}
  let re = 0.25 * m_log1p(4.0 * ax / ((1.0 - ax) * (1.0 - ax) + y * y));
  return {_C}(copysign(re, x), 0.5 * m_atan2(2.0 * y, (1.0 - ax) * (1.0 + ax) - y * y));
}}""",
    "c_asin": f"fn c_asin(z: {_C}) -> {_C} {{ return c_times_minus_i(c_asinh(c_times_i(z))); }}",
    "c_atan": f"fn c_atan(z: {_C}) -> {_C} {{ return c_times_minus_i(c_atanh(c_times_i(z))); }}",
    "c_acos": f"""fn c_acos(z: {_C}) -> {_C} {{
  let w = c_asin(z);
  return {_C}({_PI2} - w.x, -w.y);
}}""",
    "c_acosh": f"""fn c_acosh(z: {_C}) -> {_C} {{
  let w = c_acos(z);
  return {_C}(abs(w.y), copysign(w.x, z.y));
}}""",
    "c_sin": f"""fn c_sin(z: {_C}) -> {_C} {{
  let w = c_sinh(c_times_i(z));
  return {_C}(w.y, select(f_flip(w.x), {_INF}, is_nan(w.y) && is_inf(w.x)));
}}""",
    "c_cos": f"fn c_cos(z: {_C}) -> {_C} {{ return c_cosh(c_times_i(z)); }}",
    "c_tan": f"fn c_tan(z: {_C}) -> {_C} {{ return c_times_minus_i(c_tanh(c_times_i(z))); }}",
    "c_expm1": f"""fn c_expm1(z: {_C}) -> {_C} {{
  let e = c_exp(z);
  if (!f_finite(z.x) || !f_finite(z.y)) {{ return {_C}(e.x - 1.0, e.y); }}
  if (z.x == 0.0 && z.y == 0.0) {{ return {_C}(0.0, z.y); }}
  let s = m_sin(z.y * 0.5);
  return {_C}(m_expm1(z.x) * m_cos(z.y) - 2.0 * s * s, e.y);
}}""",
    "c_log1p": f"""fn c_log1p(z: {_C}) -> {_C} {{
  if (!f_finite(z.x) || !f_finite(z.y)) {{ return c_log({_C}(z.x + 1.0, z.y)); }}
  let h = m_hypot(z.x + 1.0, z.y);
  var re = m_log(h);
  if (h > 0.5 && h < 2.0) {{ re = 0.5 * m_log1p(z.x * (2.0 + z.x) + z.y * z.y); }}
  return {_C}(re, m_atan2(z.y, z.x + 1.0));
}}""",
    # numpy's rules: z**0 = 1, 0**b = 0 where Re(b) > 0 (else NaN), small integer powers by squaring
    "c_pow": f"""fn c_pow(a: {_C}, b: {_C}) -> {_C} {{
  if (b.x == 0.0 && b.y == 0.0) {{ return {_C}(1.0, 0.0); }}
  if (a.x == 0.0 && a.y == 0.0) {{ return select({_C}({_NAN}, {_NAN}), {_C}(0.0, 0.0), b.x > 0.0); }}
  if (b.y == 0.0 && b.x == trunc(b.x) && abs(b.x) < 100.0) {{
    var n = u32(abs(b.x));
    var r = {_C}(1.0, 0.0);
    var p = a;
    var first = true;
    while (n != 0u) {{
      if ((n & 1u) != 0u) {{
        r = select(c_mul(r, p), p, first);
        first = false;
      }}
      n = n >> 1u;
      if (n != 0u) {{ p = c_mul(p, p); }}
    }}
    return select(r, c_div({_C}(1.0, 0.0), r), b.x < 0.0);
  }}
  return c_exp(c_mul(b, c_log(a)));
}}""",
    # sign(z) = z / |z|: 0 at 0, NaN where a part is NaN, the unit direction of an infinite part
    "c_sign": f"""fn c_sign(z: {_C}) -> {_C} {{
  let x = z.x;
  let y = z.y;
  if (is_inf(x) != is_inf(y)) {{
    return select({_C}(0.0, copysign(1.0, y)), {_C}(copysign(1.0, x), 0.0), is_inf(x));
  }}
  if (!f_finite(x) || !f_finite(y)) {{ return {_C}({_NAN}, {_NAN}); }}
  if (x == 0.0 && y == 0.0) {{ return {_C}(0.0, 0.0); }}
  let h = m_hypot(x, y);
  return {_C}(x / h, y / h);
}}""",
}

#: op -> WGSL template over complex operands ``{0}``, ``{1}`` (see :mod:`.ops`)
TEMPLATES: dict[str, str] = {
    "identity": "{0}",
    "neg": "(-{0})",
    "conj": f"{_C}({{0}}.x, -{{0}}.y)",
    "real": "{0}.x",
    "imag": "{0}.y",
    "abs": "m_hypot({0}.x, {0}.y)",
    "angle": "m_atan2({0}.y, {0}.x)",
    "round": "round({0})",
    "square": "c_mul({0}, {0})",
    "reciprocal": f"c_div({_C}(1.0, 0.0), {{0}})",
    "isnan": "(is_nan({0}.x) || is_nan({0}.y))",
    "isinf": "(is_inf({0}.x) || is_inf({0}.y))",
    "isfinite": "(f_finite({0}.x) && f_finite({0}.y))",
    "log2": "(c_log({0}) * 1.44269504088896341)",
    "log10": "(c_log({0}) * 0.434294481903251828)",
    **{
        op: f"c_{op}({{0}})"
        for op in "exp log sqrt sin cos tan sinh cosh tanh asin acos atan asinh acosh atanh expm1 log1p sign".split()
    },
    "add": "({0} + {1})",
    "sub": "({0} - {1})",
    "mul": "c_mul({0}, {1})",
    "div": "c_div({0}, {1})",
    "pow": "c_pow({0}, {1})",
    "eq": "all({0} == {1})",
    "ne": "(!all({0} == {1}))",
}

"""The elementwise generator: layouts, signatures, parameter packing, helper selection, and
generated kernels checked against numpy (fused chains, int64 emulation, narrow ints, casts)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import dtypes as D
from ember.lazy.program import Const, FusedProgram
from ember_wgpu.codegen import elementwise as gen
from ember_wgpu.codegen.elementwise import layout_of
from ember_wgpu.codegen.wgsl_lib import with_helpers
from ember_wgpu.kernels import elementwise as ew
from ember_wgpu.typemap import TypeMap

TYPES = TypeMap(f16_native=True)
F = "float32"

#: y = gelu(x * a + b) * sigmoid(x): the W6 fusion probe as one program
GELU_CHAIN = FusedProgram(
    ((F, "tensor"), (F, "tensor"), (F, "tensor")),
    (("mul", F, (0, 1)), ("add", F, (3, 2)), ("gelu", F, (4,)), ("sigmoid", F, (0,)), ("mul", F, (5, 6))),
    (7,),
)


def test_layout_classes():
    assert layout_of((2, 3), (3, 1)) == "c"
    assert layout_of((2, 3), (0, 0)) == "s"
    assert layout_of((2, 3), (1, 2)) == "g"
    assert layout_of((2, 1, 3), (3, 99, 1)) == "c"  # size-1 axes may have any stride
    assert layout_of((1,), (5,)) == "s"


def test_layouts_ignore_shapes_and_offsets():
    """The kernel depends on the program and layout classes, not on shapes or offsets."""
    a = gen.layouts((4, 5), [((5, 1), 0)], [((5, 1), 0)])
    b = gen.layouts((7, 9), [((9, 1), 3)], [((9, 1), 0)])
    assert a == b == (("c",), ("c",))
    c = gen.layouts((7, 9), [((1, 7), 0)], [((9, 1), 0)])  # transposed: general layout
    assert c == (("g",), ("c",))


def test_pack_matches_format():
    p = FusedProgram(((F, "tensor"), ("int64", "scalar")), (("identity", F, (0,)),), (2,))
    lay = (("g",), ("c",))
    k = gen.generate(p, TYPES, 2, lay)
    data = gen.pack(p, TYPES, k, (3, 4), [((1, 3), 2)], [((4, 1), 0)], [-(2**40)], lay)
    assert len(data) == k.param_bytes and k.param_bytes % 16 == 0
    words = np.frombuffer(data, dtype=np.uint32)
    assert words[0] == 12  # element count
    assert list(words[1:3]) == [3, 4]  # shape (general layout)
    assert words[3] == 2 and list(words[4:6].view(np.int32)) == [1, 3]  # offset, strides
    lo, hi = words[7], words[8]  # output offset at 6, then the int64 scalar
    assert (int(hi) << 32 | int(lo)) == (-(2**40)) & 0xFFFFFFFFFFFFFFFF


def test_vec4_when_contiguous_from_aligned_offsets():
    c3, c1 = [((1,), 0)] * 3, [((1,), 0)]
    lay = gen.layouts((1024,), c3, c1)
    assert gen.vec_width(GELU_CHAIN, TYPES, 1024, c3, c1, lay) == 4
    assert gen.vec_width(GELU_CHAIN, TYPES, 1022, c3, c1, lay) == 4  # a partial last vec4
    neg = FusedProgram(((F, "tensor"),), (("neg", F, (0,)),), (1,))
    strided = [((2,), 0)]
    assert gen.vec_width(neg, TYPES, 8, strided, c1, gen.layouts((8,), strided, c1)) == 1
    odd = [((1,), 3)]  # an offset that is not a multiple of 4
    assert gen.vec_width(neg, TYPES, 8, odd, c1, gen.layouts((8,), odd, c1)) == 1
    i64 = FusedProgram((("int64", "tensor"),), (("neg", "int64", (0,)),), (1,))
    assert gen.vec_width(i64, TYPES, 8, c1, c1, (("c",), ("c",))) == 1


def test_literals_are_bit_exact():
    """Const literals are compiled in as bit patterns: inf, NaN, -0.0 and float16 rounding hold."""
    assert gen.literal(Const(float("inf"), F), TYPES) == "bitcast<f32>(0x7f800000u)"
    assert gen.literal(Const(-0.0, F), TYPES) == "bitcast<f32>(0x80000000u)"
    assert (
        gen.literal(Const(0.1, "float16"), TYPES) == f"bitcast<f32>({np.float32(np.float16(0.1)).view(np.uint32):#x}u)"
    )
    assert gen.literal(Const(-1, "int32"), TYPES) == "bitcast<i32>(0xffffffffu)"
    assert gen.literal(Const(-(2**40), "int64"), TYPES) == "vec2<u32>(0x0u, 0xffffff00u)"
    assert gen.literal(Const(True, "bool"), TYPES) == "true"


def test_helpers_included_transitively_and_only_when_used():
    src = gen.generate(GELU_CHAIN, TYPES, 1, (("c",) * 3, ("c",))).source
    assert "fn m_erf" in src and "fn m_sigmoid" in src and "fn m_exp" in src and "fn is_nan" in src
    assert "fn i64_add" not in src and "fn m_log(" not in src
    assert with_helpers("let x = i64_floordiv(a, b);").count("fn u64_divmod") == 1


def test_generate_rejects_bad_programs():
    bad = FusedProgram(((F, "tensor"),), (("add", F, (0, 2)),), (1,))
    with pytest.raises(ValueError, match="not defined before"):
        gen.generate(bad, TYPES, 1, (("c",), ("c",)))
    unknown = FusedProgram(((F, "tensor"),), (("frobnicate", F, (0,)),), (1,))
    with pytest.raises(ValueError, match="no elementwise op named 'frobnicate'"):
        gen.generate(unknown, TYPES, 1, (("c",), ("c",)))
    arity = FusedProgram(((F, "tensor"),), (("add", F, (0,)),), (1,))
    with pytest.raises(ValueError, match="add takes 2 operands, got 1"):
        gen.generate(arity, TYPES, 1, (("c",), ("c",)))


# -- generated kernels on the device -------------------------------------------------------
def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


def test_fused_chain_matches_numpy(rt):
    rng = np.random.default_rng(0)
    x, a, b = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
    ins = [rt.upload(v, D.float32) for v in (x, a, b)]
    (out,) = ew.run_program(rt, GELU_CHAIN, ins, (4096,))
    z = x.astype(np.float64) * a + b
    expected = 0.5 * z * (1 + _erf(z / math.sqrt(2))) / (1 + np.exp(-x.astype(np.float64)))
    # 1 + erf(z) cancels for z << 0 in float32 (as on every backend): absolute error ~ eps * |z|
    np.testing.assert_allclose(rt.read([out])[0], expected, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "floordiv", "remainder", "maximum", "lt", "ge", "eq", "pow"])
def test_int64_emulation_matches_numpy(rt, op):
    big = np.array([0, 1, -1, 7, -7, 2**31, -(2**31) - 1, 2**40 + 3, -(2**45), 2**62, -(2**63), 2**63 - 1], np.int64)
    other = np.array([3, -3, 2, -2, 5, 7, 2**33, -(2**20), 3, -1, 1, 1], np.int64)
    if op == "pow":
        big, other = big % 13 - 6, np.abs(other) % 9
    fn = {
        "add": np.add, "sub": np.subtract, "mul": np.multiply, "floordiv": np.floor_divide,
        "remainder": np.remainder, "maximum": np.maximum, "lt": np.less, "ge": np.greater_equal,
        "eq": np.equal, "pow": np.power,
    }[op]  # fmt: skip
    with np.errstate(over="ignore"):
        expected = fn(big, other)
    got = rt.read([ew.apply_op(rt, op, [rt.upload(big, D.int64), rt.upload(other, D.int64)])])[0]
    np.testing.assert_array_equal(got, expected)


def test_int64_casts_round_trip(rt):
    vals = np.array([0, -1, 2**53, -(2**40) - 5, 123456789012], np.int64)
    f = rt.read([ew.apply_op(rt, "cast", [rt.upload(vals, D.int64)], dtype=D.float32)])[0]
    np.testing.assert_array_equal(f, vals.astype(np.float32))
    floats = np.array([1.5, -2.5, 3.0e12, -7.9e15], np.float32)
    i = rt.read([ew.apply_op(rt, "cast", [rt.upload(floats, D.float32)], dtype=D.int64)])[0]
    np.testing.assert_array_equal(i, floats.astype(np.int64))


def test_narrow_integers_wrap(rt):
    a = np.array([200, 250, 3], np.uint8)
    got = rt.read([ew.apply_op(rt, "add", [rt.upload(a, D.uint8), 100])])[0]
    np.testing.assert_array_equal(got, a + np.uint8(100))
    b = np.array([100, -100, 5], np.int8)
    got = rt.read([ew.apply_op(rt, "mul", [rt.upload(b, D.int8), 3])])[0]
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, b * np.int8(3))


def test_float_nan_rules(rt):
    x = np.array([np.nan, 1.0, -0.0, np.inf], np.float32)
    y = np.array([np.nan, np.nan, 0.0, 1.0], np.float32)
    X, Y = rt.upload(x, D.float32), rt.upload(y, D.float32)
    np.testing.assert_array_equal(rt.read([ew.apply_op(rt, "ne", [X, Y])])[0], x != y)
    np.testing.assert_array_equal(rt.read([ew.apply_op(rt, "maximum", [X, Y])])[0], np.maximum(x, y))
    np.testing.assert_array_equal(rt.read([ew.apply_op(rt, "isnan", [X])])[0], np.isnan(x))


def test_math_library_accuracy(rt):
    x = np.linspace(-20, 20, 4001).astype(np.float32)
    X = rt.upload(x, D.float32)
    xd = x.astype(np.float64)
    for op, ref in [("exp", np.exp), ("sin", np.sin), ("cos", np.cos), ("tanh", np.tanh), ("erf", _erf)]:
        got = rt.read([ew.apply_op(rt, op, [X])])[0].astype(np.float64)
        expected = ref(xd)
        err = np.abs(got - expected) / np.maximum(np.abs(expected), 1e-30)
        ok = (err < 4e-7) | (np.abs(got - expected) < 2e-7)
        assert ok.all(), f"{op}: worst at x={x[~ok][0]} got {got[~ok][0]} expected {expected[~ok][0]}"
    pos = (np.abs(x) + np.float32(1e-3)).astype(np.float32)
    got = rt.read([ew.apply_op(rt, "log", [rt.upload(pos, D.float32)])])[0].astype(np.float64)
    np.testing.assert_allclose(got, np.log(pos.astype(np.float64)), rtol=3e-7, atol=1e-7)


def test_backend_runs_a_fused_program(dev):
    import ember as em

    x = em.tensor(np.linspace(-3, 3, 64, dtype=np.float32), device=dev)
    (out,) = dev.backend.run_fused(GELU_CHAIN, [x._data, x._data, x._data], shape=(64,))
    xs = x.numpy().astype(np.float64)
    z = xs * xs + xs
    expected = 0.5 * z * (1 + _erf(z / math.sqrt(2))) / (1 + np.exp(-xs))
    np.testing.assert_allclose(dev.backend.to_numpy(out), expected, rtol=2e-6, atol=1e-6)

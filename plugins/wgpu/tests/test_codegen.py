"""The elementwise generator: layouts, signatures, parameter packing, helper selection, and
generated kernels checked against numpy (fused chains, int64 emulation, narrow ints, casts)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ember import dtypes as D
from ember_wgpu.codegen import elementwise as gen
from ember_wgpu.codegen.program import Const, Instr, Operand, Out, Program, layout_of
from ember_wgpu.codegen.wgsl_lib import with_helpers
from ember_wgpu.kernels import elementwise as ew
from ember_wgpu.typemap import TypeMap

TYPES = TypeMap(f16_native=True)


def _gelu_chain(n: int) -> Program:
    """y = gelu(x * a + b) * sigmoid(x): the W6 fusion probe as one program."""
    f = D.float32
    return Program(
        shape=(n,),
        inputs=(Operand(f, (1,)), Operand(f, (1,)), Operand(f, (1,))),
        instrs=(
            Instr("mul", f, (("in", 0), ("in", 1))),
            Instr("add", f, (("v", 0), ("in", 2))),
            Instr("gelu", f, (("v", 1),)),
            Instr("sigmoid", f, (("in", 0),)),
            Instr("mul", f, (("v", 2), ("v", 3))),
        ),
        outputs=(Out(f, ("v", 4)),),
        name="w6",
    )


def test_layout_classes():
    assert layout_of((2, 3), (3, 1)) == "c"
    assert layout_of((2, 3), (0, 0)) == "s"
    assert layout_of((2, 3), (1, 2)) == "g"
    assert layout_of((2, 1, 3), (3, 99, 1)) == "c"  # size-1 axes may have any stride
    assert layout_of((1,), (5,)) == "s"


def test_signature_ignores_shapes_and_values():
    f = D.float32
    a = Program((4, 5), (Operand(f, (5, 1)),), (Const(f, 1.0),), (Instr("add", f, (("in", 0), ("const", 0))),),
                (Out(f, ("v", 0)),))  # fmt: skip
    b = Program((7, 9), (Operand(f, (9, 1), 3),), (Const(f, -2.5),), a.instrs, a.outputs)
    assert gen.signature(a, 1) == gen.signature(b, 1)
    c = Program((7, 9), (Operand(f, (1, 7)),), a.consts, a.instrs, a.outputs)  # transposed: general layout
    assert gen.signature(a, 1) != gen.signature(c, 1)


def test_pack_matches_format():
    f = D.float32
    p = Program((3, 4), (Operand(f, (1, 3), 2),), (Const(D.int64, -(2**40)),), (Instr("identity", f, (("in", 0),)),),
                (Out(f, ("v", 0)),))  # fmt: skip
    k = gen.generate(p, TYPES)
    data = gen.pack(p, TYPES, k)
    assert len(data) == k.param_bytes and k.param_bytes % 16 == 0
    words = np.frombuffer(data, dtype=np.uint32)
    assert words[0] == 12  # element count
    assert list(words[1:3]) == [3, 4]  # shape (general layout)
    assert words[3] == 2 and list(words[4:6].view(np.int32)) == [1, 3]  # offset, strides
    lo, hi = words[7], words[8]  # output offset at 6, then the int64 constant
    assert (int(hi) << 32 | int(lo)) == (-(2**40)) & 0xFFFFFFFFFFFFFFFF


def test_vec4_only_when_contiguous_and_divisible():
    assert gen.vec_width(_gelu_chain(1024), TYPES) == 4
    assert gen.vec_width(_gelu_chain(1022), TYPES) == 1
    f = D.float32
    strided = Program((8,), (Operand(f, (2,)),), (), (Instr("neg", f, (("in", 0),)),), (Out(f, ("v", 0)),))
    assert gen.vec_width(strided, TYPES) == 1
    i64 = Program(
        (8,), (Operand(D.int64, (1,)),), (), (Instr("neg", D.int64, (("in", 0),)),), (Out(D.int64, ("v", 0)),)
    )
    assert gen.vec_width(i64, TYPES) == 1


def test_helpers_included_transitively_and_only_when_used():
    src = gen.generate(_gelu_chain(16), TYPES).source
    assert "fn m_erf" in src and "fn m_sigmoid" in src and "fn m_exp" in src and "fn is_nan" in src
    assert "fn i64_add" not in src and "fn m_log(" not in src
    assert with_helpers("let x = i64_floordiv(a, b);").count("fn u64_divmod") == 1


def test_program_check_rejects_forward_refs():
    f = D.float32
    bad = Program((2,), (Operand(f, (1,)),), (), (Instr("add", f, (("in", 0), ("v", 1))),), (Out(f, ("v", 0)),))
    with pytest.raises(ValueError, match="not defined before"):
        bad.check()


# -- generated kernels on the device -------------------------------------------------------
def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf)(x.astype(np.float64))


def test_fused_chain_matches_numpy(rt):
    rng = np.random.default_rng(0)
    x, a, b = (rng.standard_normal(4096).astype(np.float32) for _ in range(3))
    ins = [rt.upload(v, D.float32) for v in (x, a, b)]
    out = rt.empty((4096,), D.float32)
    ew.run_program(rt, _gelu_chain(4096), ins, [out])
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
    program = _gelu_chain(64)
    (out,) = dev.backend.run_program(program, x._data, x._data, x._data)
    xs = x.numpy().astype(np.float64)
    z = xs * xs + xs
    expected = 0.5 * z * (1 + _erf(z / math.sqrt(2))) / (1 + np.exp(-xs))
    np.testing.assert_allclose(dev.backend.to_numpy(out), expected, rtol=2e-6, atol=1e-6)

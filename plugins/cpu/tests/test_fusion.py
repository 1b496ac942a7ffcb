"""The cpu backend's fused kernels (numba): each program gives what the unfused numpy kernels
give, op by op, for every op and dtype class the generator compiles, over contiguous, broadcast
and strided inputs and scalar arguments; the counters show that a numba kernel ran."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import ember as em
from ember.lazy.program import Const, FusedProgram

pytest.importorskip("numba", reason="the numba kernels need numba (pip install 'ember-cpu[numba]')")

from ember_cpu import fusion  # noqa: E402 - after the skip
from ember_cpu.backend import _KERNELS, FUSED  # noqa: E402

N = 1 << 12  # under MIN_ELEMENTS: the tests lower the threshold so that small arrays compile


@pytest.fixture(autouse=True)
def _compile_everything(monkeypatch, tmp_path):
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 0)
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))


def _multi(ops: list[tuple[str, tuple[int, ...]]], inputs: tuple[tuple[str, str], ...], dtype_of) -> FusedProgram:
    """One program whose outputs are ``op(args)`` for each (op, args) (one kernel for many ops)."""
    n_in = len(inputs)
    body = tuple((op, dtype_of(op, args), args) for op, args in ops)
    return FusedProgram(inputs, body, tuple(range(n_in, n_in + len(body))))


def _run_both(prog: FusedProgram, operands: list, shape: tuple[int, ...]):
    before = FUSED.counts["numba"]
    got = FUSED.run(prog, operands, shape)
    assert FUSED.counts["numba"] == before + 1, "the program did not run as a numba kernel"
    want = fusion.interpret(prog, operands, shape, _KERNELS)
    return got, want


def _special(gen: np.random.Generator, dtype, n: int) -> np.ndarray:
    v = gen.standard_normal(n) * 3
    v[:8] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 0.5]
    gen.shuffle(v)
    return v.astype(dtype)


FLOAT_UNARY = (
    "neg abs sign exp log sqrt rsqrt sin cos tanh erf floor ceil round trunc reciprocal isnan isinf isfinite "
    "logical_not exp2 expm1 log2 log10 log1p tan asin acos atan sinh cosh asinh acosh atanh square relu "
    "sigmoid gelu silu softplus signbit"
).split()
FLOAT_BINARY = (
    "add sub mul div floordiv remainder pow maximum minimum atan2 hypot logaddexp copysign eq ne lt le gt ge"
).split()
BOOLEAN_RESULTS = frozenset("isnan isinf isfinite logical_not signbit eq ne lt le gt ge".split())


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_ops_match_the_numpy_kernels(dtype):
    gen = np.random.default_rng(0)
    x = _special(gen, dtype, N).reshape(64, 64)
    y = _special(gen, dtype, N).reshape(64, 64)
    inputs = ((dtype, "tensor"), (dtype, "tensor"))
    ops = [(op, (0,)) for op in FLOAT_UNARY] + [(op, (0, 1)) for op in FLOAT_BINARY]

    def dtype_of(op, _):
        return "bool" if op in BOOLEAN_RESULTS else dtype

    prog = _multi(ops, inputs, dtype_of)
    with np.errstate(all="ignore"):
        got, want = _run_both(prog, [x, y], (64, 64))
    tol = 2e-6 if dtype == "float32" else 1e-13
    for (op, _), g, w in zip(ops, got, want):
        assert g.dtype == w.dtype, op
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=op)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
def test_integer_ops_wrap_floor_and_divide_by_zero_as_numpy(dtype):
    gen = np.random.default_rng(1)
    info = np.iinfo(dtype)
    x = gen.integers(info.min, info.max, N, endpoint=True, dtype=dtype)
    y = gen.integers(max(info.min, -9), 9, N, endpoint=True, dtype=dtype)  # zeros and -1 among them
    x[:4] = [info.min, info.max, 0, 7]
    y[:4] = [-1 if info.min else 1, 0, 0, 0]
    e = gen.integers(0, 5, N, dtype=dtype)
    inputs = ((dtype, "tensor"), (dtype, "tensor"), (dtype, "tensor"))
    binary = "add sub mul floordiv remainder maximum minimum bitwise_and bitwise_or bitwise_xor eq ne lt le gt ge"
    unary = "neg abs sign square bitwise_not logical_not floor round"
    ops = [(op, (0,)) for op in unary.split()] + [(op, (0, 1)) for op in binary.split()] + [("pow", (1, 2))]
    ops += [("logical_and", (0, 1)), ("logical_xor", (0, 1))]

    def dtype_of(op, _):
        return "bool" if op in "eq ne lt le gt ge logical_not logical_and logical_xor".split() else dtype

    prog = _multi(ops, inputs, dtype_of)
    with np.errstate(all="ignore"):
        got, want = _run_both(prog, [x, y, e], (N,))
    for (op, _), g, w in zip(ops, got, want):
        assert g.dtype == w.dtype, op
        np.testing.assert_array_equal(g, w, err_msg=op)


def test_casts_where_and_booleans():
    gen = np.random.default_rng(2)
    f = (gen.standard_normal(N) * 300).astype(np.float32)
    i = gen.integers(-1000, 1000, N).astype(np.int32)
    b = gen.random(N) < 0.5
    inputs = (("float32", "tensor"), ("int32", "tensor"), ("bool", "tensor"))
    body = (
        ("cast", "int32", (0,)),  # 3: truncates toward zero
        ("cast", "int8", (0,)),  # 4: wraps after truncation
        ("cast", "uint8", (1,)),  # 5
        ("cast", "float64", (1,)),  # 6
        ("cast", "bool", (0,)),  # 7
        ("cast", "float32", (2,)),  # 8
        ("where", "float32", (2, 0, 8)),  # 9
        ("logical_or", "bool", (2, 7)),  # 10
        ("bitwise_xor", "bool", (2, 7)),  # 11
        ("add", "bool", (2, 7)),  # 12
        ("cast", "int64", (2,)),  # 13
    )
    prog = FusedProgram(inputs, body, tuple(range(3, 14)))
    with np.errstate(all="ignore"):
        got, want = _run_both(prog, [f, i, b], (N,))
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, body[k]
        np.testing.assert_array_equal(g, w, err_msg=str(body[k]))


def test_broadcast_strided_scalar_and_constant_inputs():
    """Modes c (contiguous), z (one element), s (a transposed view, a broadcast row), scalars and literals."""
    gen = np.random.default_rng(3)
    a = gen.standard_normal((48, 40)).astype(np.float32)
    t = gen.standard_normal((40, 48)).astype(np.float32).T  # strided
    row = gen.standard_normal((1, 40)).astype(np.float32)  # broadcast along axis 0
    one = gen.standard_normal((1, 1)).astype(np.float32)
    inputs = (("float32", "tensor"), ("float32", "tensor"), ("float32", "tensor"), ("float32", "tensor"))
    inputs += (("float32", "scalar"),)
    body = (
        ("mul", "float32", (0, 1)),  # 5
        ("add", "float32", (5, 2)),  # 6
        ("mul", "float32", (6, 3)),  # 7
        ("sub", "float32", (7, 4)),  # 8
        ("maximum", "float32", (8, Const(0.25, "float32"))),  # 9
    )
    prog = FusedProgram(inputs, body, (9, 6))
    got, want = _run_both(prog, [a, t, row, one, -1.5], (48, 40))
    ref = np.maximum((a.astype(np.float64) * t + row) * one + 1.5, 0.25)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_allclose(got[0], ref, rtol=1e-5, atol=1e-6)
    assert got[0].flags.c_contiguous and got[1].shape == (48, 40)
    # a new shape of the same layout compiles nothing; new scalar values are arguments
    compiled = FUSED.counts["compiled"]
    b = gen.standard_normal((7, 9)).astype(np.float32)
    bt = gen.standard_normal((9, 7)).astype(np.float32).T
    got2, want2 = _run_both(prog, [b, bt, b[:1], b[:1, :1], 3.0], (7, 9))
    np.testing.assert_allclose(got2[0], want2[0], rtol=1e-6)
    assert FUSED.counts["compiled"] == compiled


def test_strided_inputs_read_flat_memory_at_offsets():
    """Modes r (rows contiguous: a bias over a 3-D batch, a (B, 1, C) slab), b (a column
    broadcast along the last axis), f (a transposed view) and s (a reversed view) in one loop
    nest, with the float32 exp/erfc helpers; against float64."""
    gen = np.random.default_rng(5)
    shape = (3, 5, 8)
    x = gen.standard_normal(shape).astype(np.float32)
    bias = gen.standard_normal(8).astype(np.float32)  # r over the collapsed (15, 8)... with the slab: rank 3
    slab = gen.standard_normal((3, 1, 8)).astype(np.float32)  # r, broadcast along axis 1
    col = gen.standard_normal((3, 5, 1)).astype(np.float32)  # b
    tr = gen.standard_normal((8, 5, 3)).astype(np.float32).T  # f
    rev = gen.standard_normal(shape).astype(np.float32)[::-1]  # s (a negative stride)
    inputs = tuple(("float32", "tensor") for _ in range(6))
    body = (
        ("add", "float32", (0, 1)),  # 6
        ("add", "float32", (6, 2)),  # 7
        ("mul", "float32", (7, 3)),  # 8
        ("add", "float32", (8, 4)),  # 9
        ("sub", "float32", (9, 5)),  # 10
        ("gelu", "float32", (10,)),  # 11
        ("sigmoid", "float32", (10,)),  # 12
    )
    prog = FusedProgram(inputs, body, (11, 12))
    operands = [x, bias, slab, col, tr, rev]
    layout, cshape, _, _ = fusion.plan(shape, operands)
    assert layout.modes == ("c", "r", "r", "b", "f", "s") and layout.rank == 3 and cshape == shape
    got, want = _run_both(prog, operands, shape)
    v = (x.astype(np.float64) + bias + slab) * col + tr - rev
    from math import erf

    gelu = 0.5 * v * (1 + np.vectorize(erf)(v / np.sqrt(2)))
    np.testing.assert_allclose(got[0], gelu, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], 1 / (1 + np.exp(-v)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    # a collapsed 2-D nest: the bias alone over (3, 5, 8) is (15, 8) rows
    prog2 = FusedProgram(inputs[:2], (("add", "float32", (0, 1)),), (2,))
    layout2, cshape2, _, steps = fusion.plan(shape, [x, bias])
    assert layout2.modes == ("c", "r") and cshape2 == (15, 8) and steps == [0]
    got2, _ = _run_both(prog2, [x, bias], shape)
    np.testing.assert_array_equal(got2[0], x + bias)


def test_a_strided_loop_nest_indexes_unsigned_and_vectorises():
    """A bias over rows (W2's bias-add ReLU, layout (c, r)) and a transposed operand (f) read
    flat memory at offsets cast to unsigned: numba's wraparound of a possibly negative signed
    index had LLVM gather and scatter lane by lane (4 masked gathers/scatters in the bias-add
    ReLU's IR, 6x slower); the IR now has contiguous vector loads and no gathers, and the values
    match float64 in place and into a new array."""
    import re

    gen = np.random.default_rng(13)
    x = gen.standard_normal((128, 96)).astype(np.float32)
    bias = gen.standard_normal(96).astype(np.float32)
    tr = gen.standard_normal((96, 128)).astype(np.float32).T
    inputs = (("float32", "tensor"), ("float32", "tensor"))
    prog = FusedProgram(inputs, (("add", "float32", (0, 1)), ("relu", "float32", (2,))), (3,))
    for operands, modes in (([x, bias], ("c", "r")), ([x, tr], ("c", "f"))):
        layout, cshape, arrays, steps = fusion.plan(x.shape, operands)
        assert layout.modes == modes and layout.rank == 2
        text = fusion._source(prog, layout, cache=False)
        namespace: dict = {}
        exec(compile(text, "<test kernel>", "exec"), namespace)  # noqa: S102 - the generator's own text
        kernel = namespace[fusion.KERNEL_NAME]
        out = np.empty(x.size, np.float32)
        kernel(x.size, *cshape, *steps, *arrays, out)
        ref = np.maximum(x.astype(np.float64) + operands[1], 0)
        np.testing.assert_allclose(out.reshape(x.shape), ref, rtol=1e-6, atol=1e-7)
        ir = "".join(kernel.inspect_llvm().values())
        if modes[1] == "r":  # f's stride is an argument: LLVM may still gather it
            assert not re.search(r"llvm\.masked\.(gather|scatter)", ir), "the (c, r) nest gathers lane by lane"
            assert re.search(r"load <\d+ x float>", ir), "the (c, r) nest has no vector loads"
        assert "np.uint64(" in text
    # in place (the lazy layer's offer): the result is stored into x
    got = FUSED.run(prog, [x.copy(), bias], x.shape)
    np.testing.assert_allclose(got[0], np.maximum(x.astype(np.float64) + bias, 0), rtol=1e-6, atol=1e-7)


def test_a_launch_is_planned_once_per_shapes_and_strides():
    """The second call with arrays of the same shapes and strides reuses the planned launch (no
    new plan, no new kernel) and reads the new arrays; a new stride pattern of the same shapes
    (a transposed view, an offset slice, a one-element handle with leading unit axes) plans
    anew (a contiguous slice at an offset shares the contiguous array's), and every result
    matches float64."""
    gen = np.random.default_rng(11)
    inputs = (("float32", "tensor"), ("float32", "tensor"), ("float32", "scalar"))
    prog = FusedProgram(inputs, (("mul", "float32", (1, 2)), ("sub", "float32", (0, 3))), (4,))
    shape = (24, 16)
    planned = []
    real_plan = fusion._plan  # plan()'s body, which the launch calls

    def counting_plan(*args):
        planned.append(args[0])
        return real_plan(*args)

    mp = pytest.MonkeyPatch()
    mp.setattr(fusion, "_plan", counting_plan)
    try:
        cases = [  # (a gradient, the plans it adds)
            (lambda: gen.standard_normal(shape).astype(np.float32), 1),  # contiguous
            (lambda: gen.standard_normal(shape[::-1]).astype(np.float32).T, 1),  # transposed
            (lambda: gen.standard_normal((26, 16)).astype(np.float32)[1:25], 0),  # contiguous, at an offset
            (lambda: gen.standard_normal((24, 18)).astype(np.float32)[:, 2:], 1),  # rows at an offset
            (lambda: gen.standard_normal((1, 1, 1)).astype(np.float32), 1),  # a one-element handle
        ]
        for make, new in cases:
            plans = len(planned)
            for call in range(2):
                p, g, lr = gen.standard_normal(shape).astype(np.float32), make(), float(gen.uniform(0.1, 2))
                got, _ = _run_both(prog, [p, g, lr], shape)
                want = p.astype(np.float64) - np.float32(lr) * np.broadcast_to(g.reshape(g.shape[-2:]), shape)
                np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6)
                assert got[0].shape == shape and got[0].flags.c_contiguous
                assert len(planned) == plans + new, f"call {call} planned {len(planned) - plans} times"
    finally:
        mp.undo()


def _sgd() -> FusedProgram:
    """``p - lr * g`` (inputs p, g, lr) and ``lr * g``: an update and a second output."""
    inputs = (("float32", "tensor"), ("float32", "tensor"), ("float32", "scalar"))
    return FusedProgram(inputs, (("mul", "float32", (1, 2)), ("sub", "float32", (0, 3))), (4, 3))


def test_an_output_given_as_its_own_operand_is_written_in_place():
    """``outs=[p, None]`` for ``p - lr * g``: the kernel stores into ``p`` through its input
    argument (no separate output argument) and returns ``p``; the other output is fresh; the
    values are float64's of the old ``p``."""
    gen = np.random.default_rng(12)
    shape = (40, 64)
    prog = _sgd()
    p = gen.standard_normal(shape).astype(np.float32)
    g = gen.standard_normal(shape).astype(np.float32)
    want = p.astype(np.float64) - np.float32(0.5) * g.astype(np.float64)
    before, in_place = FUSED.counts["numba"], FUSED.counts["in_place"]
    got = FUSED.run(prog, [p, g, 0.5], shape, outs=[p, None])
    assert FUSED.counts["numba"] == before + 1 and FUSED.counts["in_place"] == in_place + 1
    assert got[0] is p
    np.testing.assert_allclose(p, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got[1], 0.5 * g.astype(np.float64), rtol=1e-6)
    text = fusion._source(prog, fusion.Layout(("c", "c"), 0, (0, -1)), cache=False)
    assert "in0[i] = v4" in text and "out1[i] = v3" in text and "out0" not in text


def test_outs_that_overlap_an_operand_otherwise_are_left_alone():
    """An offered array that no operand touches is written directly; one that a strided
    operand reads (``g`` is ``d.T``) or that two operands share, and any offer to a region run
    op by op, is left untouched and the result is fresh; results as float64's."""
    gen = np.random.default_rng(13)
    shape = (48, 48)
    prog = _sgd()
    p = gen.standard_normal(shape).astype(np.float32)
    d = gen.standard_normal(shape).astype(np.float32)
    g = gen.standard_normal(shape).astype(np.float32)
    in_place = FUSED.counts["in_place"]
    got = FUSED.run(prog, [p, g, 2.0], shape, outs=[d, None])  # no overlap: written directly
    assert got[0] is d
    np.testing.assert_allclose(d, p.astype(np.float64) - 2.0 * g, rtol=1e-6, atol=1e-6)
    for operands, offer in (([p, d.T, 2.0], d), ([p, p[::-1], 2.0], p)):  # d read transposed; p reversed too
        saved = offer.copy()
        want = operands[0].astype(np.float64) - 2.0 * operands[1].astype(np.float64)
        got = FUSED.run(prog, operands, shape, outs=[offer, None])
        assert got[0] is not offer
        np.testing.assert_array_equal(offer, saved)
        np.testing.assert_allclose(got[0], want, rtol=1e-6, atol=1e-6)
    assert FUSED.counts["in_place"] == in_place


def test_offers_to_a_region_run_op_by_op_are_left_alone(monkeypatch):
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 1 << 30)
    gen = np.random.default_rng(14)
    p = gen.standard_normal((8, 8)).astype(np.float32)
    g = gen.standard_normal((8, 8)).astype(np.float32)
    saved = p.copy()
    got = FUSED.run(_sgd(), [p, g, 0.25], (8, 8), outs=[p, None])
    assert got[0] is not p
    np.testing.assert_array_equal(p, saved)
    np.testing.assert_allclose(got[0], saved.astype(np.float64) - 0.25 * g, rtol=1e-6, atol=1e-6)


def test_float32_exp_helpers_at_the_edges():
    """sigmoid and gelu of float32 through ember_exp32: infinities, NaN, huge and tiny values."""
    v = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 88.0, -88.0, 104.0, -104.0, 1e-30, -1e-30, 30.0, -30.0]
                 + list(np.linspace(-20, 20, 51)), dtype=np.float32)  # fmt: skip
    inputs = (("float32", "tensor"),)
    prog = FusedProgram(inputs, (("sigmoid", "float32", (0,)), ("gelu", "float32", (0,))), (1, 2))
    got, want = _run_both(prog, [v], v.shape)
    from math import erfc

    d = v.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        sig = 1 / (1 + np.exp(-d))
        gelu = np.array([0.5 * t * erfc(-t / np.sqrt(2)) if np.isfinite(t) else t * (t > 0) for t in d])
    gelu[np.isnan(d)] = np.nan
    np.testing.assert_allclose(got[0], sig.astype(np.float32), rtol=1e-6, atol=0)  # rounded: 0 at -104
    np.testing.assert_allclose(got[1], gelu.astype(np.float32), rtol=1e-5, atol=1e-44)  # denormals: ulps
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=0)


def test_a_large_chain_through_the_lazy_layer_is_one_numba_kernel(monkeypatch):
    """W6's chain on the cpu device, above the threshold, against numpy float64 (erf from math)."""
    from math import erf

    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 1 << 14)
    dev = em.Device("cpu")
    if not dev.capabilities.fusion or not em.lazy.fusion_enabled():
        pytest.skip("fusion is off for this run (EMBER_FUSION=0)")
    monkeypatch.setattr(dev._defer, "least", 1 << 14)  # the lazy layer's copy of the threshold
    monkeypatch.setattr(dev, "_least", 1 << 14)  # and dispatch's (small ops skip the hook)
    gen = np.random.default_rng(4)
    x, a, b = (gen.standard_normal(1 << 15).astype(np.float32) for _ in range(3))
    tx, ta, tb = (em.tensor(v, device=dev) for v in (x, a, b))
    before, kernels = FUSED.counts["numba"], em.lazy.stats(dev)["kernels"]
    got = (em.gelu(tx * ta + tb) * em.sigmoid(tx)).numpy()
    assert FUSED.counts["numba"] == before + 1
    assert em.lazy.stats(dev)["kernels"] == kernels + 1
    t = x.astype(np.float64) * a + b
    ref = 0.5 * t * (1 + np.vectorize(erf)(t / np.sqrt(2))) / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_sgd_updates_through_the_lazy_layer_write_the_parameter_in_place(monkeypatch):
    """With run_fused taking ``outs`` (Backend.fusion_outs, forwarded to FusedKernels.run here),
    ``p.copy_(p - lr * g)`` runs as a numba kernel storing into p's old buffer: the same
    address every step, values as float64's."""
    from ember.device import RUN_FUSED

    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 1 << 14)
    dev = em.Device("cpu")
    if not dev.capabilities.fusion or not em.lazy.fusion_enabled():
        pytest.skip("fusion is off for this run (EMBER_FUSION=0)")
    monkeypatch.setattr(dev._defer, "least", 1 << 14)
    monkeypatch.setattr(dev, "_least", 1 << 14)
    monkeypatch.setattr(dev._defer, "donate", True)

    def run_fused(program, operands, *, shape, outs=None):  # what CpuBackend.run_fused would forward
        return FUSED.run(program, operands, shape, outs)

    monkeypatch.setitem(dev._state.impls, RUN_FUSED, run_fused)
    gen = np.random.default_rng(15)
    p0 = gen.standard_normal((128, 256)).astype(np.float32)
    g0 = gen.standard_normal((128, 256)).astype(np.float32)
    p = em.tensor(p0, device=dev)
    g = em.tensor(g0, device=dev)
    p.copy_(p - 0.25 * g)  # the first result is a fresh buffer (em.tensor's own may be shared)
    p.realize()
    where = em.lazy.materialize(p._data).ctypes.data
    in_place = FUSED.counts["in_place"]
    for step in range(3):
        p.copy_(p - 0.25 * g)
        p.realize()
        assert em.lazy.materialize(p._data).ctypes.data == where, f"step {step}: a new buffer"
    assert FUSED.counts["in_place"] == in_place + 3
    want = p0.astype(np.float64) - 4 * np.float32(0.25) * g0.astype(np.float64)
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-5, atol=1e-5)


def test_small_regions_and_half_floats_run_op_by_op(monkeypatch):
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 1 << 10)
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    prog = FusedProgram((("float32", "tensor"),), (("exp", "float32", (0,)),), (1,))
    before = dict(FUSED.counts)
    np.testing.assert_array_equal(FUSED.run(prog, [x], (64,))[0], _KERNELS["exp"](x))
    h = np.linspace(-3, 3, 2048).astype(np.float16)
    prog16 = FusedProgram((("float16", "tensor"),), (("exp", "float16", (0,)),), (1,))
    np.testing.assert_array_equal(FUSED.run(prog16, [h], (2048,))[0], _KERNELS["exp"](h))
    assert FUSED.counts["op_by_op"] == before["op_by_op"] + 2 and FUSED.counts["numba"] == before["numba"]


def test_kernels_are_cached_on_disk(tmp_path):
    prog = FusedProgram((("float64", "tensor"),), (("sin", "float64", (0,)), ("mul", "float64", (1, 1))), (2,))
    FUSED.run(prog, [np.linspace(0, 1, 100)], (100,))
    files = list((tmp_path / "cpu-numba").glob("ember_cpu_fused_*.py"))
    assert files, "no generated source in the cache directory"
    assert list((tmp_path / "cpu-numba" / "__pycache__").glob("*.nbi")), "numba wrote no cache index"


def test_a_tampered_cache_file_is_never_run(tmp_path):
    """What runs is the source generated in this process: a cache file rewritten by someone else (here
    to write a marker file and return zeros) neither executes nor changes the result, and numba's disk
    cache still serves the kernel (the file is rewritten with the same text and stamp)."""
    prog = FusedProgram((("float64", "tensor"),), (("exp", "float64", (0,)), ("add", "float64", (1, 0))), (2,))
    x = np.linspace(-2, 2, 300)
    fusion.FusedKernels(_KERNELS).run(prog, [x], (300,))
    (path,) = (tmp_path / "cpu-numba").glob("ember_cpu_fused_*.py")
    marker = tmp_path / "tampered-code-ran"
    path.write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        f"{fusion.KERNEL_NAME} = lambda *args: args[-1].fill(0.0)\n"
        "def __getattr__(name):\n"
        f"    open({str(marker)!r}, 'w').close()\n",
        encoding="utf-8",
    )
    fresh = fusion.FusedKernels(_KERNELS)  # nothing in memory: loads the kernel again
    (got,) = fresh.run(prog, [x], (300,))
    assert fresh.counts["compiled"] == 1 and fresh.counts["numba"] == 1, "the program did not run as a numba kernel"
    assert not marker.exists(), "code read from the cache directory ran"
    np.testing.assert_allclose(got, np.exp(x) + x, rtol=1e-12)
    assert fusion.KERNEL_NAME in path.read_text(encoding="utf-8") and "tampered" not in path.read_text()
    (dispatcher,) = fresh._cache.values()
    assert sum(dispatcher.stats.cache_hits.values()) == 1, "numba compiled again instead of using its cache"


@pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX file modes: the check is skipped on Windows")
def test_a_cache_folder_everyone_can_write_is_not_used(tmp_path):
    """numba loads compiled kernels from the folder: with one that anyone can write, the kernel compiles
    in memory and nothing is written there."""
    folder = tmp_path / "cpu-numba"
    folder.mkdir()
    folder.chmod(0o777)
    prog = FusedProgram((("float64", "tensor"),), (("cos", "float64", (0,)), ("mul", "float64", (1, 0))), (2,))
    x = np.linspace(-2, 2, 300)
    kernels = fusion.FusedKernels(_KERNELS)
    (got,) = kernels.run(prog, [x], (300,))
    assert kernels.counts["numba"] == 1, "the program did not run as a numba kernel"
    np.testing.assert_allclose(got, np.cos(x) * x, rtol=1e-12)
    assert list(folder.iterdir()) == []


def test_without_numba_the_backend_does_not_fuse_and_says_why():
    code = (
        "import sys; sys.modules['numba'] = None;"  # numba cannot be imported in this interpreter
        "import ember as em; d = em.Device('cpu'); c = d.capabilities;"
        "print(c.fusion, c.notes['fusion']); x = em.arange(4, dtype=em.float32);"
        "print((x * 2.0 + 1.0).numpy().tolist())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    note = "off: numba is not installed (pip install 'ember-cpu[numba]'); every op runs its own numpy kernel"
    assert out.splitlines() == [f"False {note}", "[1.0, 3.0, 5.0, 7.0]"]


def test_ember_cpu_numba_0_switches_fusion_and_the_numba_kernels_off():
    """In a fresh process (the switch is read at import): no fusion, no numba kernel, numpy results."""
    import subprocess
    import sys

    code = (
        "import numpy as np, ember as em\n"
        "from ember_cpu import backend as b\n"
        "d = em.Device.cpu()\n"
        "assert not d.capabilities.fusion, d.capabilities\n"
        "assert 'EMBER_CPU_NUMBA=0' in d.capabilities.notes['fusion']\n"
        "x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)\n"
        "y = em.nn.functional.layer_norm(em.tensor(x), (8,)).numpy()\n"
        "x64 = x.astype(np.float64)\n"
        "ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)\n"
        "np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)\n"
        "assert sum(b.NATIVE_CALLS.values()) == 0, b.NATIVE_CALLS\n"
    )
    env = {**os.environ, "EMBER_CPU_NUMBA": "0"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# -- programs with a trailing reduction (FusedProgram.reduce) ------------------------------------
from ember.lazy.program import Reduce  # noqa: E402


def _reduce_program(dtype: str, op: str, axes: tuple[int, ...], keepdims: bool, write_full: bool) -> FusedProgram:
    """exp-free chain ``(x * a + s) * x`` (float) or ``x * a + s`` (int), reduced; optionally the
    chain's value written out at full size too."""
    inputs = ((dtype, "tensor"), (dtype, "tensor"), (dtype, "scalar"))
    body: tuple = (("mul", dtype, (0, 1)), ("add", dtype, (3, 2)))
    if dtype.startswith("float"):
        body += (("mul", dtype, (4, 0)),)
    last = len(inputs) + len(body) - 1
    return FusedProgram(inputs, body, (last,) if write_full else (), Reduce(op, last, axes, keepdims))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize(("axes", "keepdims"), [((2,), False), ((0,), True), ((1,), False), ((0, 1, 2), False)])
def test_reductions_match_the_numpy_kernels(dtype, op, axes, keepdims):
    if op == "mean" and not dtype.startswith("float"):
        pytest.skip("mean takes floats")
    gen = np.random.default_rng(1)
    shape = (5, 6, 7)
    if dtype.startswith("float"):
        x = gen.uniform(0.5, 1.5, shape).astype(dtype)
        a = gen.uniform(0.5, 1.5, (1, 6, 1)).astype(dtype)  # broadcast
        s = 0.25
    else:
        x = gen.integers(-50, 50, shape).astype(dtype)
        a = gen.integers(-3, 4, (1, 6, 1)).astype(dtype)
        s = 3
    xt = np.ascontiguousarray(x.transpose(2, 1, 0)).transpose(2, 1, 0)  # a strided input
    prog = _reduce_program(dtype, op, axes, keepdims, write_full=True)
    # a reduction keeping the last axis runs a numba loop and then the reduction kernel (split)
    path = "split" if 2 not in axes else "numba_reduce"
    before = FUSED.counts[path]
    got = FUSED.run(prog, [xt, a, s], shape)
    assert FUSED.counts[path] == before + 1, f"the reduction did not run as {path}"
    want = fusion.interpret(prog, [x, a, s], shape, _KERNELS)
    if path == "split":  # the unfused path's own reduction kernel over the same values
        np.testing.assert_array_equal(got[1], want[1])
    assert [g.shape for g in got] == [w.shape for w in want] and [g.dtype for g in got] == [w.dtype for w in want]
    np.testing.assert_array_equal(got[0], want[0])  # the full-size output: the same ops, one rounding each
    if dtype.startswith("float"):
        x64, a64 = x.astype(np.float64), a.astype(np.float64)
        ref = getattr(np, op)((x64 * a64 + s) * x64, axis=axes, keepdims=keepdims)
        rtol = 1e-5 if dtype == "float32" else 1e-12
        np.testing.assert_allclose(got[1], ref, rtol=rtol)
        np.testing.assert_allclose(got[1], want[1], rtol=rtol)
    else:  # integers wrap in their width, as numpy's kernels do
        np.testing.assert_array_equal(got[1], want[1])


def test_reductions_propagate_nan_and_start_from_the_identity():
    x = np.array([[1.0, np.nan, 3.0], [-np.inf, -np.inf, -np.inf], [2.0, 5.0, -1.0]], dtype=np.float32)
    for op in ("max", "min", "sum"):
        prog = FusedProgram((("float32", "tensor"),), (("copy", "float32", (0,)),), (), Reduce(op, 1, (1,)))
        (got,) = FUSED.run(prog, [x], x.shape)
        np.testing.assert_array_equal(got, _KERNELS[op](x, axes=(1,), keepdims=False))


def test_a_reduction_through_the_lazy_layer_is_one_numba_kernel(monkeypatch):
    monkeypatch.setattr(fusion, "MIN_ELEMENTS", 1 << 14)
    dev = em.Device("cpu")
    if not dev.capabilities.fusion or not em.lazy.fusion_enabled():
        pytest.skip("fusion is off for this run (EMBER_FUSION=0)")
    assert {"sum", "max", "mean"} <= dev.capabilities.fusion_reductions
    monkeypatch.setattr(dev._defer, "least", 1 << 14)
    monkeypatch.setattr(dev, "_least", 1 << 14)
    gen = np.random.default_rng(8)
    x, a = gen.standard_normal((256, 128)).astype(np.float32), gen.standard_normal(128).astype(np.float32)
    tx, ta = em.tensor(x, device=dev), em.tensor(a, device=dev)
    before, stats = dict(FUSED.counts), em.lazy.stats(dev)
    got = ((tx * ta + 0.5) * tx).sum(axis=-1).numpy()
    assert FUSED.counts["numba_reduce"] == before["numba_reduce"] + 1
    assert FUSED.counts["numba"] == before["numba"] + 1, "a second kernel ran"
    assert em.lazy.stats(dev)["reductions"] == stats["reductions"] + 1
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got, ((x64 * a + 0.5) * x64).sum(axis=-1), rtol=1e-5, atol=1e-4)
    # exp is a scalar libm call in numba: the region runs tile by tile through numpy's SIMD loops
    before = dict(FUSED.counts)
    got = ((tx * ta + 0.5).exp()).sum(axis=-1).numpy()
    assert FUSED.counts["tiled"] == before["tiled"] + 1 and FUSED.counts["numba"] == before["numba"]
    assert em.lazy.stats(dev)["reductions"] == stats["reductions"] + 2
    np.testing.assert_allclose(got, np.exp(x64 * a + 0.5).sum(axis=-1), rtol=1e-6)


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize(
    ("shape", "axes", "keepdims"),
    [((6, 5, 7), (2,), False), ((6, 5, 7), (0,), True), ((6, 5, 7), (1,), False), ((6, 5, 7), (0, 1, 2), False),
     ((300,), (0,), False)],
)  # fmt: skip
def test_tiled_reductions_match_numpy(monkeypatch, op, shape, axes, keepdims):
    monkeypatch.setattr(fusion, "TILE", 16)  # many tiles, split reduced axes and kept ones
    gen = np.random.default_rng(3)
    x = gen.uniform(0.5, 1.5, shape).astype(np.float32)
    a = gen.uniform(0.5, 1.5, shape[-1:]).astype(np.float32)
    inputs = (("float32", "tensor"), ("float32", "tensor"), ("float32", "scalar"))
    body = (("mul", "float32", (0, 1)), ("add", "float32", (3, 2)), ("tanh", "float32", (4,)))
    prog = FusedProgram(inputs, body, (4,), Reduce(op, 5, axes, keepdims))
    before = FUSED.counts["tiled"]
    full, red = FUSED.run(prog, [x, a, 0.25], shape)
    assert FUSED.counts["tiled"] == before + 1, "the reduction did not run tile by tile"
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(full, x64 * a + 0.25, rtol=1e-6)
    ref = getattr(np, op)(np.tanh(x64 * a + 0.25), axis=axes, keepdims=keepdims)
    assert red.shape == ref.shape and red.dtype == np.float32
    np.testing.assert_allclose(red, ref, rtol=1e-5)


def test_half_float_reductions_run_op_by_op_with_the_unfused_kernels():
    h = np.linspace(-3, 3, 4096).astype(np.float16).reshape(64, 64)
    prog = FusedProgram((("float16", "tensor"),), (("exp", "float16", (0,)),), (), Reduce("sum", 1, (1,)))
    before = dict(FUSED.counts)
    (got,) = FUSED.run(prog, [h], h.shape)
    np.testing.assert_array_equal(got, _KERNELS["sum"](_KERNELS["exp"](h), axes=(1,), keepdims=False))
    assert got.dtype == np.float16
    assert FUSED.counts["op_by_op"] == before["op_by_op"] + 1 and FUSED.counts["numba"] == before["numba"]


@pytest.mark.parametrize("axes", [(0, 1), (2,)])
def test_gelu_backward_with_its_bias_gradient_runs_split(axes):
    """W4's GELU backward region (erf and exp in float32) reduced over the rows or the last axis:
    one vectorised numba loop, then the reduction kernel; against float64."""
    from math import erf

    gen = np.random.default_rng(6)
    shape = (4, 8, 40)
    x = (gen.standard_normal(shape) * 2).astype(np.float32)
    g = gen.standard_normal(shape).astype(np.float32)
    inputs = (("float32", "tensor"), ("float32", "tensor"))
    c = lambda v: Const(v, "float32")  # noqa: E731
    body = (
        ("mul", "float32", (0, c(0.7071067811865476))),  # 2
        ("erf", "float32", (2,)),  # 3
        ("add", "float32", (3, c(1.0))),  # 4
        ("mul", "float32", (4, c(0.5))),  # 5
        ("mul", "float32", (0, 0)),  # 6
        ("mul", "float32", (6, c(-0.5))),  # 7
        ("exp", "float32", (7,)),  # 8
        ("mul", "float32", (8, c(0.3989422804014327))),  # 9
        ("mul", "float32", (9, 0)),  # 10
        ("add", "float32", (5, 10)),  # 11
        ("mul", "float32", (11, 1)),  # 12
    )
    prog = FusedProgram(inputs, body, (12,), Reduce("sum", 12, axes, False))
    before = dict(FUSED.counts)
    got = FUSED.run(prog, [x, g], shape)
    assert FUSED.counts["split"] == before["split"] + 1 and FUSED.counts["numba"] == before["numba"] + 1
    x64 = x.astype(np.float64)
    d = (0.5 * (1 + np.vectorize(erf)(x64 / np.sqrt(2))) + x64 * np.exp(-0.5 * x64 * x64) / np.sqrt(2 * np.pi)) * g
    np.testing.assert_allclose(got[0], d, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], d.sum(axis=axes), rtol=1e-5, atol=1e-5)


def test_a_kernel_writing_an_operand_in_place_drops_its_conv_columns():
    """The conv kernels keep a forward pass's im2col columns by input array for the weight
    gradient; a fused kernel that rewrites that array (``outs``) must drop them, or the gradient
    would read the old values' columns. A run without ``outs`` leaves them."""
    from ember_cpu import conv_kernels

    backend = em.Device("cpu").backend
    gen = np.random.default_rng(16)
    shape = (40, 64)
    p = gen.standard_normal(shape).astype(np.float32)
    g = gen.standard_normal(shape).astype(np.float32)
    key = ("probe", shape)
    conv_kernels.COLUMNS.put(p, key, np.ones((4, 4), np.float32))
    backend.run_fused(_sgd(), [p, g, 0.5], shape=shape)  # fresh results: p unchanged
    assert conv_kernels.COLUMNS.take(p, key) is not None
    conv_kernels.COLUMNS.put(p, key, np.ones((4, 4), np.float32))
    got = backend.run_fused(_sgd(), [p, g, 0.5], shape=shape, outs=[p, None])
    assert got[0] is p  # written in place
    assert conv_kernels.COLUMNS.take(p, key) is None

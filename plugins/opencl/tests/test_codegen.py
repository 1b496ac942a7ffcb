"""The elementwise generator and the handle type, as units (no device needed for most)."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.dtypes import as_dtype
from ember.lazy import materialize
from ember_opencl.array import CLArray
from ember_opencl.codegen import Const, FusedProgram, Layout, elementwise_source

F32 = em.float32


def prog_w6() -> FusedProgram:
    """y = gelu(x * a + b) * sigmoid(x) as one program."""
    return FusedProgram(
        inputs=(("float32", "tensor"), ("float32", "tensor"), ("float32", "tensor")),
        instructions=(
            ("mul", "float32", (0, 1)),
            ("add", "float32", (3, 2)),
            ("gelu", "float32", (4,)),
            ("sigmoid", "float32", (0,)),
            ("mul", "float32", (5, 6)),
        ),
        outputs=(7,),
    )


def test_single_op_is_a_one_instruction_program():
    prog = FusedProgram((("float32", "tensor"), ("float32", "scalar")), (("add", "float32", (0, 1)),), (2,))
    src, argtypes = elementwise_source(prog, Layout(1, ("c",), ("c",)))
    assert "__kernel void ember_ew(" in src
    assert "(v0 + v1)" in src
    assert "in0[in0_off + i]" in src
    assert "const float in1" in src  # the scalar is a kernel argument, not baked into the source
    assert argtypes[0] == np.int32 and None in argtypes


def test_layout_modes_and_index_type():
    prog = FusedProgram((("float16", "tensor"), ("bfloat16", "tensor")), (("cast", "float32", (0,)),), (2,))
    src, argtypes = elementwise_source(prog, Layout(2, ("s", "z"), ("c",), index="long", grid_stride=True))
    assert "vload_half(in0_off + c0 * in0_s0 + c1 * in0_s1, in0)" in src
    assert "as_float(((uint)in1[in1_off]) << 16)" in src
    assert "ember_f2bf" in src  # bfloat16 helpers come with bfloat16 operands
    assert "get_global_size(0)" in src
    assert "const long n" in src and all(t is None or t in (np.int64,) for t in argtypes)


def test_constants_and_helpers():
    prog = FusedProgram(
        (("int32", "tensor"),),
        (("floordiv", "int32", (0, Const(3, "int32"))), ("remainder", "int32", (1, Const(-2, "int32")))),
        (2,),
    )
    src, _ = elementwise_source(prog, Layout(1, ("c",), ("c",)))
    assert "inline int ember_floordiv_int" in src and "inline int ember_remainder_int" in src
    assert "((int)3)" in src


def test_program_check_rejects_forward_references():
    bad = FusedProgram((("float32", "tensor"),), (("add", "float32", (0, 2)),), (1,))
    with pytest.raises(ValueError, match="not defined before"):
        bad.check()


def test_float64_pragma_only_when_used():
    f32 = FusedProgram((("float32", "tensor"),), (("exp", "float32", (0,)),), (1,))
    f64 = FusedProgram((("float64", "tensor"),), (("exp", "float64", (0,)),), (1,))
    assert "cl_khr_fp64" not in elementwise_source(f32, Layout(1, ("c",), ("c",)))[0]
    assert "cl_khr_fp64" in elementwise_source(f64, Layout(1, ("c",), ("c",)))[0]


def test_handles_are_views_of_their_block():
    """CLArray is an ember.views.View: view ops keep the block and dtype (the arithmetic is core's, tested there)."""
    block = object()
    a = CLArray(block, (2, 3, 4), None, 0, F32)  # type: ignore[arg-type]
    for v in (a.permute((2, 0, 1)), a.expand((5, 2, 3, 4)), a.slice((0, 1, 0), (2, 3, 4), (1, 1, 2)), a.flip((1,))):
        assert type(v) is CLArray and v.block is block and v.dtype is F32
    assert a.permute((2, 1, 0)).reshape((4, 6)) is None  # numpy must copy here too
    sliced = a.slice((0, 0, 1), (2, 3, 4), (1, 1, 2))  # a[:, :, 1::2]
    v = sliced.reshape((6, 2))
    assert v is not None and v.strides == (4, 2) and v.offset == 1 and v.block is block


def test_fused_program_matches_unfused_ops(dev):
    rng = np.random.default_rng(1)
    x, a, b = (em.tensor(rng.standard_normal(1000).astype(np.float32), device=dev) for _ in range(3))
    (fused,) = dev.backend.run_fused(prog_w6(), [materialize(t._data) for t in (x, a, b)], shape=(1000,))
    got = dev.backend.to_numpy(fused)
    want = (em.gelu(x * a + b) * em.sigmoid(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_kernels_are_reused_across_shapes(dev):
    x = em.ones((7,), device=dev)
    _ = (x * 2.0).numpy()
    cache = dev.memory_stats()["extra"]["kernel_cache"]
    built = cache["builds"] + cache["disk_loads"]
    for n in (3, 100, 4097):
        _ = (em.ones((n,), device=dev) * 3.0).numpy()
    after = dev.memory_stats()["extra"]["kernel_cache"]
    assert after["builds"] + after["disk_loads"] == built


@pytest.mark.parametrize("dtype", [dt.name for dt in em.dtypes.ALL_DTYPES])
def test_every_op_compiles_for_every_dtype(dev, dtype):
    """All unary and binary ops valid for a dtype build, in one program per operand layout."""
    from ember_opencl.codegen import elementwise_sources
    from ember_opencl.elementwise import binary_program, unary_program
    from ember_opencl.ops_table import BINARY_OPS, BOOL_RESULT, UNARY_OPS

    if as_dtype(dtype) not in dev.backend.supported_dtypes:
        pytest.skip(dev.backend.unsupported_dtype_reasons[dtype])
    rt = dev.backend.rt

    def out(op: str) -> str:
        return "bool" if op in BOOL_RESULT else dtype

    families = [
        ([unary_program(o, dtype, out(o)) for o in sorted(UNARY_OPS)], Layout(2, ("s",), ("c",))),
        ([binary_program(o, dtype, out(o), False) for o in sorted(BINARY_OPS)], Layout(2, ("s", "z"), ("c",))),
        ([binary_program(o, dtype, out(o), True) for o in sorted(BINARY_OPS)], Layout(1, ("c",), ("c",))),
    ]
    for progs, layout in families:
        names = [f"k{i}" for i in range(len(progs))]
        source, kept, _ = elementwise_sources(progs, layout, names)
        rt.programs.program(source, rt.options)
        assert len(kept) >= 4


def test_four_wide_kernels_match_numpy(dev, monkeypatch):
    """The 128-bit load/store form GPUs get (forced on here), against float64 numpy."""
    from ember_opencl import elementwise

    monkeypatch.setattr(elementwise, "VECTOR_ON_CPU", True)
    monkeypatch.setattr(elementwise, "_PLANS", {})
    rng = np.random.default_rng(5)
    x, a = rng.standard_normal(1024).astype(np.float32), rng.standard_normal(1024).astype(np.float32)
    tx, ta = em.tensor(x, device=dev), em.tensor(a, device=dev)
    y = em.gelu(tx * ta + 0.25) * em.sigmoid(tx)
    keep = tx * ta  # held: a second output of the same kernel
    got = y.numpy()
    t = x.astype(np.float64) * a + 0.25
    from math import erf

    want = 0.5 * t * (1 + np.vectorize(erf)(t / np.sqrt(2))) / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(keep.numpy(), x.astype(np.float64) * a, rtol=1e-6)
    xi = em.tensor(np.arange(-8, 8, dtype=np.int32), device=dev)
    np.testing.assert_array_equal(((xi * 3) // 2 - 1).numpy(), (np.arange(-8, 8) * 3) // 2 - 1)
    four_wide = [k for k in dev.backend.rt._kernels if k[0] == "ew" and k[2].vec == 4]
    assert len(four_wide) >= 2, "no 4-wide kernel was built: the scalar path ran"

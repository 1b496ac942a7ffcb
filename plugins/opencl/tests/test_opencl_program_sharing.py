"""Sizes and layouts that share one elementwise program (fewer cold builds), against float64 numpy."""

from __future__ import annotations

import numpy as np
import pytest

from ember.dtypes import as_dtype
from ember_opencl import elementwise
from ember_opencl.elementwise import binary_program, run_program, unary_program

F32 = as_dtype("float32")


def _ew_layouts(rt, prog, since=frozenset()):
    """The layouts ``prog`` was compiled for in ``rt`` (one program each), but those in ``since``."""
    return [k[2] for k in rt._kernels if k[0] == "ew" and k[1] is prog and k not in since]


def _only(rt, prog, known, ok):
    """Every layout compiled for ``prog`` since ``known`` passes ``ok``, and ``prog`` has one that does
    (compiled by this test or, for the same program, an earlier one)."""
    new = _ew_layouts(rt, prog, known)
    assert all(ok(lay) for lay in new), new
    assert any(ok(lay) for lay in _ew_layouts(rt, prog)), _ew_layouts(rt, prog)


def _keys(rt):
    """The kernels ``rt`` holds now (an earlier test may have compiled the same program)."""
    return frozenset(rt._kernels)


def _run(rt, prog, arrays, shape):
    (out,) = run_program(rt, prog, arrays, shape)
    return rt.download(out).astype(np.float64)


@pytest.fixture
def four_wide(monkeypatch):
    """The GPU's 4-wide kernels on this device (PoCL runs them too), with no plans cached."""
    monkeypatch.setattr(elementwise, "VECTOR_ON_CPU", True)
    monkeypatch.setattr(elementwise, "_PLANS", {})


def test_four_wide_kernel_takes_every_size(dev, four_wide):
    """n = 1, 3, 5, 1023, 1024: one 4-wide program, the last n % 4 elements done one at a time."""
    rt = dev.backend.rt
    known = _keys(rt)
    prog = binary_program("hypot", "float32", "float32", False)
    rng = np.random.default_rng(11)
    for n in (1024, 1023, 5, 3, 1):
        a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        got = _run(rt, prog, [rt.upload(a, F32), rt.upload(b, F32)], (n,))
        want = np.hypot(a.astype(np.float64), b.astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=f"n={n}")
    _only(rt, prog, known, lambda lay: lay.vec == 4)


def test_four_wide_tail_with_broadcast_and_offsets(dev, four_wide):
    """A broadcast element and offset (multiple of 4) views: the tail reads the same places."""
    rt = dev.backend.rt
    known = _keys(rt)
    prog = binary_program("sub", "float32", "float32", False)
    rng = np.random.default_rng(12)
    host = rng.standard_normal(64).astype(np.float32)
    buf = rt.upload(host, F32)
    view = buf.with_layout((23,), (1,), 8)  # elements 8..30
    one = buf.with_layout((23,), (0,), 41)  # element 41, broadcast
    got = _run(rt, prog, [view, one], (23,))
    np.testing.assert_allclose(got, host[8:31].astype(np.float64) - np.float64(host[41]), rtol=1e-7)
    _only(rt, prog, known, lambda lay: lay.vec == 4)


def test_one_element_shares_the_contiguous_program(dev):
    """A 0-d tensor, a broadcast element and a one-element view run the contiguous kernel."""
    rt = dev.backend.rt
    known = _keys(rt)
    prog = unary_program("expm1", "float64" if rt.fp64 else "float32", "float64" if rt.fp64 else "float32")
    dt = as_dtype(prog.inputs[0][0])
    host = np.linspace(-2.0, 2.0, 12).astype(dt.numpy)
    buf = rt.upload(host, dt)
    want = np.expm1(host.astype(np.float64))
    got = _run(rt, prog, [buf], (12,))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    got = _run(rt, prog, [buf.with_layout((), (), 5)], ())
    np.testing.assert_allclose(got, want[5], rtol=1e-6)
    got = _run(rt, prog, [buf.with_layout((1, 1), (0, 0), 7)], (1, 1))
    np.testing.assert_allclose(got, want[7:8].reshape(1, 1), rtol=1e-6)
    got = _run(rt, prog, [buf.with_layout((1,), (3,), 9)], (1,))
    np.testing.assert_allclose(got, want[9:10], rtol=1e-6)
    _only(rt, prog, known, lambda lay: lay.in_modes == ("c",) and lay.out_modes == ("c",))


@pytest.fixture
def gpu_like(dev, monkeypatch):
    """A GPU's launch paths on this device (grid-stride loops), with no plans cached."""
    rt = dev.backend.rt
    monkeypatch.setattr(elementwise, "_PLANS", {})
    saved = rt.is_cpu, rt.compute_units
    rt.is_cpu, rt.compute_units = False, 4
    yield rt
    rt.is_cpu, rt.compute_units = saved


def test_gpu_strided_mixes_share_one_program(gpu_like):
    """On a GPU, (c, s), (s, c), (s, s) and (s, z) of rank 2, into a new tensor or a strided
    view, are one strided kernel."""
    rt = gpu_like
    known = _keys(rt)
    prog = binary_program("atan2", "float32", "float32", False)
    rng = np.random.default_rng(13)
    a = rng.standard_normal((6, 10)).astype(np.float32)
    b = rng.standard_normal((10, 6)).astype(np.float32)
    ta, tb = rt.upload(a, F32), rt.upload(b, F32)
    tb_t = tb.with_layout((6, 10), (1, 6), 0)  # b transposed: strided
    row = ta.with_layout((6, 10), (0, 1), 20)  # a[2] broadcast down the rows
    one = ta.with_layout((6, 10), (0, 0), 13)  # a.flat[13] everywhere
    a64, bt64 = a.astype(np.float64), b.T.astype(np.float64)
    cases = [
        ([ta, tb_t], np.arctan2(a64, bt64)),
        ([tb_t, ta], np.arctan2(bt64, a64)),
        ([tb_t, tb_t], np.arctan2(bt64, bt64)),
        ([tb_t, one], np.arctan2(bt64, a64.flat[13])),
        ([row, tb_t], np.arctan2(np.broadcast_to(a64[2], (6, 10)), bt64)),
    ]
    for arrays, want in cases:
        np.testing.assert_allclose(_run(rt, prog, arrays, (6, 10)), want, rtol=1e-6, atol=1e-7)
    dest = rt.empty((10, 6), F32)
    (out,) = run_program(rt, prog, [ta, row], (6, 10), outs=[dest.with_layout((6, 10), (1, 6), 0)])
    want = np.arctan2(a64, np.broadcast_to(a64[2], (6, 10)))
    np.testing.assert_allclose(rt.download(dest).astype(np.float64).T, want, rtol=1e-6, atol=1e-7)
    _only(rt, prog, known, lambda lay: (lay.rank, lay.in_modes, lay.out_modes) == (2, ("s", "s"), ("s",)))


def _program_of(knl):
    import pyopencl as cl

    return knl.get_info(cl.kernel_info.PROGRAM).int_ptr


def test_gather_and_scatter_add_take_the_axis_as_an_argument(dev):
    """take_along_axis and scatter-add along each axis of a rank-3 tensor: one kernel a rank."""
    from ember_opencl.indexing import gather, scatter_add

    rt = dev.backend.rt
    known = _keys(rt)
    i64 = as_dtype("int64")
    rng = np.random.default_rng(14)
    a = rng.standard_normal((3, 4, 5)).astype(np.float32)
    ta = rt.upload(a, F32)
    for axis in range(3):
        shape = list(a.shape)
        shape[axis] = 6
        ix = rng.integers(0, a.shape[axis], size=shape)
        got = rt.download(gather(rt, ta, rt.upload(ix, i64), axis))
        np.testing.assert_array_equal(got, np.take_along_axis(a, ix, axis))
        v = rng.standard_normal(shape).astype(np.float32)
        got = rt.download(scatter_add(rt, ta, rt.upload(ix, i64), rt.upload(v, F32), axis)).astype(np.float64)
        want = a.astype(np.float64)
        for pos in np.ndindex(*shape):
            at = list(pos)
            at[axis] = ix[pos]
            want[tuple(at)] += v[pos]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    new = [k for k in rt._kernels if k not in known and k[0] in ("gather", "scatter") and k[1] == "float32"]
    assert len([k for k in new if k[0] == "gather"]) <= 1 and len([k for k in new if k[0] == "scatter"]) <= 1, new
    assert ("gather", "float32", 3) in rt._kernels


def test_index_put_passes_share_one_program(dev):
    """``a[rows] = v`` (claim, then write): both kernels in one program; last write wins as numpy's."""
    from ember_opencl.indexing import index_put

    rt = dev.backend.rt
    i64 = as_dtype("int64")
    a = np.arange(20, dtype=np.float32).reshape(5, 4)
    rows = np.array([3, 0, 3, 1])
    v = np.arange(16, dtype=np.float32).reshape(4, 4) + 100
    got = rt.download(index_put(rt, rt.upload(a, F32), rt.upload(v, F32), [rt.upload(rows, i64)], False))
    want = a.copy()
    want[rows] = v
    np.testing.assert_array_equal(got, want)
    claim = rt._kernels[("put", "float32", 1, "claim", False)][0]
    write = rt._kernels[("put", "float32", 1, "write", False)][0]
    assert _program_of(claim) == _program_of(write)

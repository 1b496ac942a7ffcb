"""The lazy layer (ember.lazy) on a fusing test backend: what is deferred, how a region becomes
one FusedProgram, when it is realized, and that results equal the eager ones.

The backend here ("lazyfake") is the CPU backend plus ``fusion = True``: its ``run_fused``
interprets each program instruction by instruction with the CPU kernels and records every
program it receives, so the tests can look at the exact programs the layer builds.
"lazyreduce" is the same backend declaring ``fusion_reductions``: a reduction of a deferred
region reaches it as one program with a trailing ``Reduce``, which it computes with the CPU
reduction kernels (so its results equal the eager ones exactly).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import TwinBackend

import ember as em
from ember.dtypes import ALL_DTYPES, COMPLEX_DTYPES
from ember.errors import InvalidArgumentError
from ember.lazy import FusedProgram, LazyBuffer
from ember.lazy.program import Reduce
from ember.plugins import BackendSpec, PluginRegistry, get_registry

FUSABLE = frozenset("add sub mul div neg exp tanh sigmoid maximum gt lt where cast logical_and sqrt square pow".split())


class LazyFakeBackend(TwinBackend):
    """The CPU kernels, with fusion: programs are interpreted op by op and recorded."""

    name = "lazyfake"
    fusion = True
    supported_dtypes = frozenset(ALL_DTYPES) | frozenset(COMPLEX_DTYPES)

    def __init__(self, device: em.Device) -> None:
        super().__init__(device)
        self.programs: list[tuple[FusedProgram, tuple[int, ...]]] = []

    def fusion_ops(self) -> frozenset[str]:
        return FUSABLE

    def handle_meta(self, a):
        return a.shape, em.dtypes.as_dtype(a.dtype).name

    def run_fused(self, program, operands, *, shape):
        program.check()
        self.programs.append((program, tuple(shape)))
        values = []
        for (dt, kind), x in zip(program.inputs, operands):
            if kind == "tensor":
                assert isinstance(x, np.ndarray), f"a tensor input is {type(x).__name__}, not a handle"
                values.append(np.broadcast_to(x, shape))
            else:
                assert isinstance(x, (bool, int, float)), f"a scalar input is {type(x).__name__}"
                values.append(np.full(shape, x, dtype=em.dtypes.as_dtype(dt).numpy))
        for op, dt, args in program.instructions:
            xs = [values[a] for a in args]
            if op == "cast":
                values.append(self.implementation("cast")(xs[0], dtype=em.dtypes.as_dtype(dt)))
            else:
                values.append(np.asarray(self.implementation(op)(*xs)))
        out = [np.ascontiguousarray(values[o]) for o in program.outputs]
        r = program.reduce
        if r is not None:
            reduced = self.implementation(r.op)(np.ascontiguousarray(values[r.value]), axes=r.axes, keepdims=r.keepdims)
            out.append(np.asarray(reduced, order="C"))
        return out


class LazyReduceBackend(LazyFakeBackend):
    """lazyfake that also takes programs ending with a reduction."""

    name = "lazyreduce"
    fusion_reductions = frozenset({"sum", "prod", "max", "min", "mean"})


class LazyOutsBackend(LazyFakeBackend):
    """lazyfake whose run_fused takes ``outs=`` (Backend.fusion_outs): copies into them, records
    their (address, shape)."""

    name = "lazyouts"
    fusion_outs = True

    def __init__(self, device: em.Device) -> None:
        super().__init__(device)
        self.outs: list[list] = []

    def run_fused(self, program, operands, *, shape, outs=None):
        results = super().run_fused(program, operands, shape=shape)
        # the addresses only: a reference kept here would hold the buffer for the next update
        self.outs.append(None if outs is None else [None if d is None else (d.ctypes.data, d.shape) for d in outs])
        for k, d in enumerate(outs or ()):
            if d is not None:
                np.copyto(d, results[k])  # the values of every operand were read above
                results[k] = d
        return results


class LazyFakePlugin:
    @em.hookimpl
    def ember_register_backends(self, registry: PluginRegistry) -> None:
        registry.add_backend(BackendSpec(name="lazyfake", kinds=("lazyfake",), loader=lambda: LazyFakeBackend))
        registry.add_backend(BackendSpec(name="lazyreduce", kinds=("lazyreduce",), loader=lambda: LazyReduceBackend))
        registry.add_backend(BackendSpec(name="lazyouts", kinds=("lazyouts",), loader=lambda: LazyOutsBackend))


def _device(kind: str) -> em.Device:
    reg = get_registry()
    if "lazyfake" not in reg.specs:
        reg.discover()
        reg.register(LazyFakePlugin(), name="lazyfake-test-plugin")
    d = em.Device(f"{kind}:0")
    d.synchronize()
    d.backend.programs.clear()
    return d


@pytest.fixture
def dev() -> Iterator[em.Device]:
    d = _device("lazyfake")
    with em.lazy.fusion(True, d):  # these tests are about fusion: on whatever EMBER_FUSION says
        yield d


@pytest.fixture
def rdev() -> Iterator[em.Device]:
    d = _device("lazyreduce")
    with em.lazy.fusion(True, d):
        yield d


def arr(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_elementwise_ops_are_deferred_until_read(dev):
    x = em.tensor(arr(4, 5), device=dev)
    y = em.exp(x) * 2.0 + x
    assert type(y._data) is LazyBuffer and dev.backend.programs == []
    np.testing.assert_allclose(y.numpy(), np.exp(arr(4, 5)) * 2.0 + arr(4, 5), rtol=1e-6)
    ((program, shape),) = dev.backend.programs
    assert shape == (4, 5)
    assert [op for op, _, _ in program.instructions] == ["exp", "mul", "add"]
    # x is read once although two ops use it; the scalar is a run-time input, not compiled in
    assert program.inputs == (("float32", "tensor"), ("float32", "scalar"))


def test_the_program_form_describes_itself(dev):
    x = em.tensor(arr(3), device=dev)
    (em.tanh(x) - 1.0).numpy()
    ((program, _),) = dev.backend.programs
    assert program.describe().splitlines() == [
        "%0 = tensor float32",
        "%1 = scalar float32",
        "%2 = tanh(%0) : float32",
        "%3 = sub(%2, %1) : float32",
        "out %3",
    ]


def test_broadcasting_region_runs_over_the_result_shape(dev):
    a, b = arr(3, 1), arr(1, 4, seed=1)
    ta, tb = em.tensor(a, device=dev), em.tensor(b, device=dev)
    y = em.maximum(em.sigmoid(ta), tb) * ta
    np.testing.assert_allclose(y.numpy(), np.maximum(1 / (1 + np.exp(-a)), b) * a, rtol=1e-6)
    ((_, shape),) = dev.backend.programs
    assert shape == (3, 4)


def test_full_becomes_a_scalar_input(dev):
    x = em.tensor(arr(5), device=dev)
    y = 2.0 - x  # the core makes the 2 a 0-d full(); in a region it is a broadcast scalar
    np.testing.assert_allclose(y.numpy(), 2.0 - arr(5))
    ((program, _),) = dev.backend.programs
    assert ("float32", "scalar") in program.inputs and len(program.instructions) == 1
    z = em.full((2, 3), 7.0, device=dev)  # a lone full is the backend's own fill
    np.testing.assert_array_equal(z.numpy(), np.full((2, 3), 7.0))
    assert len(dev.backend.programs) == 1


def test_non_fusable_ops_realize_their_inputs_first(dev):
    x = em.tensor(arr(4, 6), device=dev)
    s = (em.exp(x) * 3.0).sum(axis=0)
    assert type(s._data) is not LazyBuffer
    assert len(dev.backend.programs) == 1
    np.testing.assert_allclose(s.numpy(), (np.exp(arr(4, 6)) * 3.0).sum(axis=0), rtol=1e-5)


def test_a_lone_op_runs_its_own_kernel(dev):
    x = em.tensor(arr(5), device=dev)
    before = em.lazy.stats(dev)["single"]
    np.testing.assert_allclose((x * 3.0).sum().numpy(), (arr(5) * 3.0).sum(), rtol=1e-6)
    assert dev.backend.programs == [] and em.lazy.stats(dev)["single"] == before + 1


def test_held_intermediates_are_extra_outputs(dev):
    x = em.tensor(arr(8), device=dev)
    kept = em.exp(x) + 1.0
    out = em.tanh(kept) * 2.0
    out.realize()
    ((program, _),) = dev.backend.programs
    assert len(program.outputs) == 2, "the intermediate `kept` holds was not written out"
    np.testing.assert_allclose(kept.numpy(), np.exp(arr(8)) + 1.0, rtol=1e-6)
    assert len(dev.backend.programs) == 1, "reading `kept` ran another kernel"


def test_dropped_intermediates_stay_in_registers(dev):
    x = em.tensor(arr(8), device=dev)
    out = em.tanh(em.exp(x) + 1.0) * 2.0
    out.realize()
    ((program, _),) = dev.backend.programs
    assert len(program.outputs) == 1


def test_synchronize_realizes_held_values_as_one_kernel(dev):
    x = em.tensor(arr(6), device=dev)
    a = x * 2.0
    b = a + 1.0
    dev.synchronize()
    assert len(dev.backend.programs) == 1
    ((program, _),) = dev.backend.programs
    assert len(program.outputs) == 2
    assert a._data.real is not None and b._data.real is not None


def test_regions_are_bounded(dev):
    x = em.tensor(arr(16), device=dev)
    y = x
    for _ in range(5 * em.lazy.MAX_REGION):
        y = y * 1.001 + 0.001
    want = arr(16).astype(np.float64)
    for _ in range(5 * em.lazy.MAX_REGION):
        want = want * 1.001 + 0.001
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-5)
    sizes = [len(p.inputs) + len(p.instructions) for p, _ in dev.backend.programs]
    assert len(sizes) >= 5 and max(sizes) <= em.lazy.MAX_REGION + 3


def test_dtypes_casts_and_bool_results(dev):
    xi = np.arange(-6, 6, dtype=np.int32)
    t = em.tensor(xi, device=dev)
    mask = (t > 0) & (t < 4)
    y = em.where(mask, t.astype(em.float32) * 0.5, -1.0)
    np.testing.assert_array_equal(y.numpy(), np.where((xi > 0) & (xi < 4), xi * 0.5, -1.0).astype(np.float32))
    dtypes = {dt for p, _ in dev.backend.programs for dt in p.value_dtypes()}
    assert {"int32", "bool", "float32"} <= dtypes


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_scalar_powers_follow_numpy(dev):
    x = em.tensor(np.array([-np.inf, -1.0, 4.0], dtype=np.float32), device=dev)
    np.testing.assert_array_equal((x**0.5).numpy(), np.sqrt(np.array([-np.inf, -1.0, 4.0], dtype=np.float32)))
    np.testing.assert_array_equal((x**2.0).numpy(), np.array([np.inf, 1.0, 16.0], dtype=np.float32))
    assert (x**0.5)._data.op == "sqrt" and (x**2.0)._data.op == "square"  # the unary op, deferred


def test_ops_outside_the_generator_run_eagerly(dev):
    x = em.tensor(arr(5), device=dev)
    y = em.sin(x)  # not in this backend's fusion_ops
    assert type(y._data) is not LazyBuffer
    np.testing.assert_allclose(y.numpy(), np.sin(arr(5)), rtol=1e-6)


def test_fusion_switch_per_device(dev):
    x = em.tensor(arr(5), device=dev)
    with em.lazy.fusion(False, dev):
        y = x * 2.0
        assert type(y._data) is not LazyBuffer
    z = x * 2.0
    assert type(z._data) is LazyBuffer
    np.testing.assert_array_equal(y.numpy(), z.numpy())


def test_gradients_flow_through_deferred_regions(dev):
    ad = dev.autodiff()
    xv = arr(3, 4)
    x = em.tensor(xv, device=ad, requires_grad=True)
    loss = (em.tanh(x * 2.0) * x).sum()
    loss.backward()
    t = np.tanh(xv.astype(np.float64) * 2)
    np.testing.assert_allclose(x.grad.numpy(), (1 - t**2) * 2 * xv + t, rtol=1e-5, atol=1e-6)
    assert any(len(p.instructions) > 1 for p, _ in dev.backend.programs), "the backward pass fused nothing"


def test_lazy_values_cross_devices_and_dlpack(dev):
    x = em.tensor(arr(4), device=dev)
    y = x + 1.0
    on_cpu = y.to("cpu")
    np.testing.assert_allclose(on_cpu.numpy(), arr(4) + 1.0)
    z = x * 3.0
    np.testing.assert_allclose(np.from_dlpack(z), arr(4) * 3.0)


def test_realized_region_releases_its_inputs(dev):
    x = em.tensor(arr(1000), device=dev)
    y = em.exp(x) + 1.0
    y.realize()
    assert y._data.args is None, "a realized value still holds the handles it was computed from"
    del x
    gc.collect()
    np.testing.assert_allclose(y.numpy(), np.exp(arr(1000)) + 1.0, rtol=1e-6)


@pytest.fixture
def odev() -> Iterator[em.Device]:
    d = _device("lazyouts")
    d.backend.outs.clear()
    with em.lazy.fusion(True, d):
        yield d


def test_an_update_copied_into_its_tensor_is_written_into_the_old_buffer(odev):
    """``p.copy_(p - lr * g)``: the old buffer of ``p`` is held by nothing but the region, so
    run_fused gets it as the target's ``outs`` (the backend writes in place); the values are
    float64's of the old ones, and the next update does the same with the buffer it got."""
    gen = np.random.default_rng(21)
    p0 = gen.standard_normal((6, 5)).astype(np.float32)
    g0 = gen.standard_normal((6, 5)).astype(np.float32)
    p = em.tensor(p0, device=odev)
    g = em.tensor(g0, device=odev)
    before = em.lazy.stats(odev)["in_place"]
    for step in range(2):
        old = em.lazy.materialize(p._data)
        where = old.ctypes.data
        del old
        p.copy_(p - 0.5 * g)
        want = p0.astype(np.float64) - (step + 1) * 0.5 * g0.astype(np.float64)
        np.testing.assert_allclose(p.numpy(), want, rtol=1e-6, atol=1e-6)  # (a kept result would hold the buffer)
        outs = odev.backend.outs[-1]
        assert outs is not None and outs[0][0] == where, f"step {step}: not written in place"
        assert em.lazy.stats(odev)["in_place"] == before + step + 1


def test_an_operand_something_else_holds_is_never_written(odev):
    """The old buffer stays untouched while a tensor, a raw handle or a pending region of another
    target still needs it, and a broadcast operand never takes the target."""
    gen = np.random.default_rng(22)
    p0 = gen.standard_normal((4, 3)).astype(np.float32)
    before = em.lazy.stats(odev)["in_place"]
    p = em.tensor(p0, device=odev)
    keep = p.detach()  # another tensor on the same handle
    p.copy_(p * 2.0 + 1.0)
    p.numpy()
    assert odev.backend.outs[-1] is None
    np.testing.assert_array_equal(keep.numpy(), p0)
    handle = em.lazy.materialize(p._data)  # a raw reference
    saved = handle.copy()
    p.copy_(p * 2.0 + 1.0)
    p.numpy()
    assert odev.backend.outs[-1] is None
    np.testing.assert_array_equal(handle, saved)
    del handle
    q = p * 3.0 + 0.0  # another pending region reads the same buffer
    p.copy_(p - 1.0)
    p.numpy()
    assert odev.backend.outs[-1] is None
    np.testing.assert_allclose(q.numpy(), (2 * (2 * p0.astype(np.float64) + 1) + 1) * 3, rtol=1e-6)
    row = em.tensor(p0[:1], device=odev)  # broadcast: a (1, 3) operand cannot take a (4, 3) target
    s = em.tensor(np.zeros((4, 3), np.float32), device=odev)
    s.copy_(row * 2.0 + s * 0.0)
    s.numpy()
    assert odev.backend.outs[-1] is not None and odev.backend.outs[-1][0][1] == (4, 3)
    # two: q's region took the buffer once p's update had run (it was then q's alone), and s's
    # old zeros; never row
    assert em.lazy.stats(odev)["in_place"] == before + 2


def test_an_operand_a_later_region_recomputes_from_is_never_written(odev):
    """A value inside the region that a pending node outside still reads (``n`` below, held
    only by ``q``'s node) is recomputed from its arguments when ``q`` is realized, so the old
    buffer those arguments name keeps its values: no in-place write (the bug the opencl in-place
    offer hit in gelu_tanh's gradient: 54 of 60 values wrong)."""
    gen = np.random.default_rng(23)
    p0 = gen.standard_normal((4, 3)).astype(np.float32)
    p = em.tensor(p0, device=odev)
    n = p * 2.0
    q = n * 3.0  # pending: reads n, which it will recompute from p's old buffer
    p.copy_(p + n)
    del n
    p.numpy()
    np.testing.assert_allclose(p.numpy(), p0.astype(np.float64) * 3.0, rtol=1e-6)
    np.testing.assert_allclose(q.numpy(), p0.astype(np.float64) * 6.0, rtol=1e-6)
    p.copy_(p * 2.0)  # nothing reads the old buffer any more: the offer is made again
    p.numpy()
    assert odev.backend.outs[-1] is not None


def test_stats_count_deferred_ops_and_kernels(dev):
    before = em.lazy.stats(dev)
    x = em.tensor(arr(4), device=dev)
    (em.exp(x) * x - 1.0).numpy()
    after = em.lazy.stats(dev)
    assert after["deferred"] - before["deferred"] == 3
    assert after["kernels"] - before["kernels"] == 1
    assert after["fused_values"] - before["fused_values"] == 3


def test_small_ops_on_cpu_run_at_once():
    """cpu defers only regions large enough for a numba kernel to pay (or nothing, without numba)."""
    caps = em.Device.cpu().capabilities
    assert not caps.fusion or caps.fusion_min_elements > 1
    y = em.ones(3) * 2.0
    assert type(y._data) is np.ndarray
    np.testing.assert_array_equal(y.numpy(), [2.0, 2.0, 2.0])


def test_complex_operands_run_op_by_op(dev):
    z = em.tensor(np.array([3 + 4j, -1j, 2.0], dtype=np.complex64), device=dev)
    r = em.abs(z) * 2.0 + 1.0  # abs of a complex tensor: a real result over a complex operand
    np.testing.assert_allclose(r.numpy(), np.abs(np.array([3 + 4j, -1j, 2.0])) * 2.0 + 1.0, rtol=1e-6)
    assert all(dt != "complex64" for p, _ in dev.backend.programs for dt, _ in p.inputs)


# -- trailing reductions (Backend.fusion_reductions) -----------------------------------------------
def _eager(dev, fn):
    with em.lazy.fusion(False, dev):
        return fn().numpy()


def test_a_reduction_of_a_region_is_one_program(rdev):
    xv, av = arr(6, 8), arr(8, seed=1)
    x, a = em.tensor(xv, device=rdev), em.tensor(av, device=rdev)
    before = em.lazy.stats(rdev)
    s = (x * a + 0.5).exp().sum(axis=-1)
    assert type(s._data) is LazyBuffer and rdev.backend.programs == [], "the reduction ran before it was read"
    got = s.numpy()
    ((program, shape),) = rdev.backend.programs
    assert shape == (6, 8), "the kernel iterates over the region's shape, not the reduced one"
    assert program.outputs == () and program.reduce == Reduce("sum", 5, (1,), False)
    assert program.describe().splitlines()[-1] == "reduce sum(%5, axes=(1,)) : float32"
    after = em.lazy.stats(rdev)
    assert after["kernels"] - before["kernels"] == 1 and after["reductions"] - before["reductions"] == 1
    np.testing.assert_array_equal(got, _eager(rdev, lambda: (x * a + 0.5).exp().sum(axis=-1)))
    np.testing.assert_allclose(got, np.exp(xv.astype(np.float64) * av + 0.5).sum(axis=-1), rtol=1e-5)


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize(("axis", "keepdims"), [(-1, False), (1, True), ((0, 2), False), (None, True)])
def test_fused_reductions_equal_the_unfused_ones(rdev, op, axis, keepdims):
    xv = arr(3, 4, 5) * 0.3
    x = em.tensor(xv, device=rdev)

    def run():
        return getattr(em.tanh(x) * 0.5 + 1.0, op)(axis=axis, keepdims=keepdims)

    before = em.lazy.stats(rdev)["reductions"]
    got = run().numpy()
    assert em.lazy.stats(rdev)["reductions"] == before + 1
    ((program, _),) = rdev.backend.programs
    assert program.reduce is not None and program.reduce.op == op and program.reduce.keepdims is keepdims
    want = _eager(rdev, run)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    ref = getattr(np, op)(np.tanh(xv.astype(np.float64)) * 0.5 + 1.0, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(got, ref, rtol=1e-5)


def test_held_values_of_a_reduced_region_are_full_size_outputs(rdev):
    x = em.tensor(arr(5, 7), device=rdev)
    kept = em.exp(x) * 2.0  # held here: the reducing kernel writes it out too
    s = (kept + 1.0).max(axis=0)
    got = s.numpy()
    ((program, _),) = rdev.backend.programs
    assert len(program.outputs) == 1 and program.reduce is not None and program.reduce.value not in program.outputs
    np.testing.assert_array_equal(kept.numpy(), _eager(rdev, lambda: em.exp(x) * 2.0))
    assert len(rdev.backend.programs) == 1, "reading the held value ran another kernel"
    np.testing.assert_array_equal(got, (np.exp(arr(5, 7)) * 2.0 + 1.0).max(axis=0))


def test_integer_and_bool_sums_cast_in_the_program(rdev):
    xi = np.arange(-10, 14, dtype=np.int32).reshape(4, 6)
    t = em.tensor(xi, device=rdev)
    s = (t * 3 - 1).sum(axis=1)  # the core casts to int64 first: that cast is part of the region
    c = (t > 2).sum()
    assert s.dtype == em.int64 and c.dtype == em.int64
    np.testing.assert_array_equal(s.numpy(), (xi.astype(np.int64) * 3 - 1).sum(axis=1))
    np.testing.assert_array_equal(c.numpy(), (xi > 2).sum())
    programs = [p for p, _ in rdev.backend.programs]
    assert len(programs) == 2 and all(p.reduce is not None for p in programs)
    assert all(p.instructions[-1][:2] == ("cast", "int64") for p in programs)


def test_float16_reductions_keep_the_unfused_rules(rdev):
    xv = arr(4, 64).astype(np.float16)
    x = em.tensor(xv, device=rdev)
    got = (x * 0.5 + 1.0).sum(axis=-1)
    assert got.dtype == em.float16
    np.testing.assert_array_equal(got.numpy(), _eager(rdev, lambda: (x * 0.5 + 1.0).sum(axis=-1)))
    ((program, _),) = rdev.backend.programs
    assert program.reduce is not None and program.value_dtypes()[program.reduce.value] == "float16"
    assert program.reduce.accumulator("float16") == "float32"


def test_a_reduced_value_feeds_later_regions(rdev):
    xv = arr(3, 9)
    x = em.tensor(xv, device=rdev)
    e = em.exp(x)
    y = e / e.sum(axis=-1, keepdims=True)  # softmax: the sum's kernel writes e out (it is held)
    got = y.numpy()
    kinds = [p.reduce is not None for p, _ in rdev.backend.programs]
    assert kinds == [True], "the division should read the reduced value and the written-out e"
    ex = np.exp(xv.astype(np.float64))
    np.testing.assert_allclose(got, ex / ex.sum(axis=-1, keepdims=True), rtol=1e-5)


def test_a_reduction_after_its_region_was_read(rdev):
    x = em.tensor(arr(4, 4), device=rdev)
    e = em.exp(x) + 1.0
    s = e.min(axis=1)
    e.numpy()  # the region runs on its own first; the deferred min then reduces its result
    np.testing.assert_array_equal(s.numpy(), (np.exp(arr(4, 4)) + 1.0).min(axis=1))
    assert [p.reduce for p, _ in rdev.backend.programs] == [None]


def test_gradients_through_a_fused_reduction(rdev):
    ad = rdev.autodiff()
    xv, av = arr(4, 6), arr(6, seed=2)
    x = em.tensor(xv, device=ad, requires_grad=True)
    a = em.tensor(av, device=ad, requires_grad=True)
    loss = (em.tanh(x * a).max(axis=-1) + (x * x).sum(axis=-1)).sum()
    loss.backward()
    t = np.tanh(xv.astype(np.float64) * av)
    hit = t == t.max(axis=-1, keepdims=True)
    np.testing.assert_allclose(x.grad.numpy(), hit * (1 - t**2) * av + 2 * xv, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a.grad.numpy(), (hit * (1 - t**2) * xv).sum(axis=0), rtol=1e-4, atol=1e-5)
    assert any(p.reduce is not None for p, _ in rdev.backend.programs), "no reduction was fused"


def test_backends_without_the_capability_get_no_reductions(dev):
    assert dev.capabilities.fusion_reductions == frozenset()
    x = em.tensor(arr(4, 5), device=dev)
    s = (em.exp(x) * 3.0).sum(axis=0)
    assert type(s._data) is not LazyBuffer
    assert [p.reduce for p, _ in dev.backend.programs] == [None]


def test_the_reduce_field_is_checked_hashed_and_optional():
    base = ((("float32", "tensor"),), (("exp", "float32", (0,)),))
    assert FusedProgram(*base, (1,)) == FusedProgram(*base, (1,), None)  # today's programs are unchanged
    with_sum = FusedProgram(*base, (), Reduce("sum", 1, (0, 2)))
    assert hash(with_sum) == hash(FusedProgram(*base, (), Reduce("sum", 1, (0, 2))))
    assert with_sum != FusedProgram(*base, (), Reduce("sum", 1, (0, 2), keepdims=True))
    with_sum.check()
    assert with_sum.result_dtypes() == ["float32"]
    assert Reduce("sum", 1, (0, 2)).shape((3, 4, 5)) == (4,)
    assert Reduce("max", 1, (1,), True).shape((3, 4, 5)) == (3, 1, 5)
    bad = [
        Reduce("median", 1, (0,)),
        Reduce("sum", 2, (0,)),
        Reduce("sum", 1, ()),
        Reduce("sum", 1, (1, 0)),
    ]
    for r in bad:
        with pytest.raises(ValueError):
            FusedProgram(*base, (), r).check()
    with pytest.raises(ValueError):
        FusedProgram(*base, ()).check()  # neither outputs nor a reduction
    with pytest.raises(ValueError):
        Reduce("sum", 1, (3,)).shape((2, 2))


def test_fuse_reduce_off_keeps_reductions_out_of_regions(rdev, monkeypatch):
    """EMBER_FUSE_REDUCE=0: the region still fuses into one program, the reduction runs after it."""
    from ember.lazy.graph import _switch

    xv, av = arr(6, 8), arr(8, seed=1)
    x, a = em.tensor(xv, device=rdev), em.tensor(av, device=rdev)
    monkeypatch.setenv("EMBER_FUSE_REDUCE", "0")
    _switch(rdev, False)
    _switch(rdev, True)  # a new lazy layer reads the setting
    try:
        rdev.backend.programs.clear()
        got = (x * a + 0.5).exp().sum(axis=-1).numpy()
        ((program, shape),) = rdev.backend.programs
        assert program.reduce is None and shape == (6, 8)
        np.testing.assert_allclose(got, np.exp(xv.astype(np.float64) * av + 0.5).sum(axis=-1), rtol=1e-5)
    finally:
        monkeypatch.setenv("EMBER_FUSE_REDUCE", "1")
        _switch(rdev, False)
        _switch(rdev, True)
    rdev.backend.programs.clear()
    (x * a + 0.5).exp().sum(axis=-1).numpy()
    ((program, _),) = rdev.backend.programs
    assert program.reduce is not None, "with the setting back on the reduction joins the region again"


def test_small_ops_on_computed_operands_skip_the_lazy_hook(monkeypatch):
    """Below the backend's fusion_min_elements the hook would run an op at once: dispatch calls the
    kernel itself then; a larger op, or one on a deferred operand, still goes through the hook."""
    cpu = em.Device("cpu")
    hook = cpu._defer
    if hook is None or not cpu._least:
        pytest.skip("the cpu backend does not fuse here (numba is not installed): no hook to skip")
    small = em.tensor(np.arange(8, dtype=np.float32), device=cpu)
    big = em.tensor(np.ones(cpu._least, dtype=np.float32), device=cpu)
    calls = []
    plain = type(hook).__call__
    monkeypatch.setattr(type(hook), "__call__", lambda self, *a, **k: calls.append(a[0].name) or plain(self, *a, **k))
    np.testing.assert_array_equal((small + small).numpy(), 2 * np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(em.exp(small).numpy(), np.exp(np.arange(8, dtype=np.float32)))
    assert calls == []
    y = em.exp(big) + 1.0  # deferred: the add joins the exp's region
    assert calls == ["exp", "add"]
    np.testing.assert_allclose(y.numpy(), np.e + 1.0, rtol=1e-6)


def test_the_setting_moves_the_size_below_which_ops_run_at_once(monkeypatch):
    """EMBER_FUSION_MIN_ELEMENTS overrides the backend's fusion_min_elements (read when a device's
    lazy layer is made): smaller ops with no deferred operand run at once, larger ones defer."""
    from ember.device import set_defer
    from ember.lazy.graph import Lazy

    d = _device("lazyfake")
    with em.lazy.fusion(True, d):
        installed = d._state.defer
        monkeypatch.setenv("EMBER_FUSION_MIN_ELEMENTS", "16")
        set_defer(d, Lazy(d))
        try:
            assert d._least == 16
            small = em.tensor(arr(8), device=d)
            large = em.tensor(arr(32), device=d)
            before = em.lazy.stats(d)["deferred"]
            s = em.exp(small) + 1.0
            assert em.lazy.stats(d)["deferred"] == before
            y = em.exp(large) + 1.0
            assert em.lazy.stats(d)["deferred"] == before + 2
            np.testing.assert_allclose(s.numpy(), np.exp(arr(8)) + 1.0, rtol=1e-6)
            np.testing.assert_allclose(y.numpy(), np.exp(arr(32)) + 1.0, rtol=1e-6)
            monkeypatch.setenv("EMBER_FUSION_MIN_ELEMENTS", "lots")
            with pytest.raises(InvalidArgumentError, match="EMBER_FUSION_MIN_ELEMENTS='lots'"):
                Lazy(d)
        finally:
            set_defer(d, installed)
        assert d._least == installed.least


def test_a_region_seen_before_gets_the_same_program_and_another_structure_its_own(dev):
    x = em.tensor(arr(6), device=dev)
    c = em.tensor(arr(6, seed=1) > 0, device=dev)
    h = em.tensor(arr(6, seed=2).astype(np.float64), device=dev)

    def region(a, b):
        # a handle read twice (one input), a constant (where's 0.5) before the tensors, a cast
        return em.where(c, 0.5, a * a + b.astype(em.float32))

    want = np.where(arr(6, seed=1) > 0, 0.5, arr(6) ** 2 + arr(6, seed=2))
    for _ in range(2):
        np.testing.assert_allclose(region(x, h).numpy(), want, rtol=1e-6)
    (first, _), (second, _) = dev.backend.programs
    assert first is second  # interned: a backend's caches hit by identity
    assert first.describe().splitlines() == [
        "%0 = scalar float32",
        "%1 = tensor float32",
        "%2 = tensor float64",
        "%3 = tensor bool",
        "%4 = mul(%1, %1) : float32",
        "%5 = cast(%2) : float32",
        "%6 = add(%4, %5) : float32",
        "%7 = where(%3, %0, %6) : float32",
        "out %7",
    ]
    region(h.astype(em.float32) * 1.0, h).numpy()  # the same ops on a computed operand: another program
    assert len(dev.backend.programs) == 3 and dev.backend.programs[2][0] is not first


def test_repeated_regions_with_held_values_or_a_reduction_reuse_their_programs(rdev):
    x = em.tensor(arr(5, 7), device=rdev)
    for _ in range(2):
        kept = em.exp(x) * 2.0  # held: written out beside the target (and beside the reduction below)
        (em.tanh(kept) + 1.0).realize()
        kept = em.exp(x) * 2.0
        s = (kept + 1.0).sum(axis=1)
        np.testing.assert_allclose(s.numpy(), (np.exp(arr(5, 7)) * 2.0 + 1.0).sum(axis=1), rtol=1e-5)
        np.testing.assert_allclose(kept.numpy(), np.exp(arr(5, 7)) * 2.0, rtol=1e-6)
    (held, _), (reduced, _), (held2, _), (reduced2, _) = rdev.backend.programs
    assert held2 is held and reduced2 is reduced
    assert held.outputs == (6, 4) and held.reduce is None  # tanh(kept) + 1, then kept
    assert reduced.outputs == (4,) and reduced.reduce == Reduce("sum", 5, (1,))  # kept; sum of kept + 1


def test_program_caches_stay_bounded_and_right_when_they_are_emptied(rdev, monkeypatch):
    from ember.lazy import graph

    monkeypatch.setattr(graph, "_MAX_PROGRAMS", 2)  # every few new regions empties the caches
    x, kv = em.tensor(arr(3, 4), device=rdev), arr(3, 4)
    z = em.tensor(np.array([3 + 4j, -1j, 2.0], dtype=np.complex64), device=rdev)
    for _ in range(3):
        np.testing.assert_allclose((x * 2.0 + 1.0).numpy(), kv * 2.0 + 1.0, rtol=1e-6)
        np.testing.assert_allclose((em.exp(x) - x).sum(axis=1).numpy(), (np.exp(kv) - kv).sum(axis=1), rtol=1e-5)
        # a complex operand after the caches were emptied is still known as one (run op by op)
        r = em.abs(z) * 2.0 + 1.0
        np.testing.assert_allclose(r.numpy(), np.abs(np.array([3 + 4j, -1j, 2.0])) * 2.0 + 1.0, rtol=1e-6)
        kept = em.tanh(x) * 3.0
        np.testing.assert_allclose((kept + 1.0).numpy(), np.tanh(kv) * 3.0 + 1.0, rtol=1e-6)
        np.testing.assert_allclose(kept.numpy(), np.tanh(kv) * 3.0, rtol=1e-6)
        assert len(graph._SIGNATURES) <= 2 and len(graph._VARIANTS) <= 2 and len(graph._PROGRAMS) <= 2
    assert all(dt != "complex64" for p, _ in rdev.backend.programs for dt, _ in p.inputs)

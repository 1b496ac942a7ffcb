"""Fusion (DESIGN.md section 7): deferred elementwise regions give the unfused results.

On a backend that fuses, each case computes the same program twice, with the lazy layer on
(regions fused into one kernel) and off (``ember.lazy.fusion(False, device)``: every op its own
kernel), and checks both against numpy float64. The kernel counters of ``ember.lazy.stats``
show that a region ran as one kernel. On a backend that does not fuse, the fusion-specific
checks skip with that reason and the programs are still checked eagerly.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em

from .checks import require_dtype

RNG_SEEDS = range(6)

#: unary ops of the random chains: ember op, numpy float64 reference, a domain-safe input map
UNARY = {
    "exp": (em.exp, np.exp, lambda v: np.clip(v, -4, 4)),
    "tanh": (em.tanh, np.tanh, None),
    "sigmoid": (em.sigmoid, lambda v: 1 / (1 + np.exp(-v)), None),
    "abs": (em.abs, np.abs, None),
    "neg": (em.negative, np.negative, None),
    "sqrt_abs": (lambda t: em.sqrt(em.abs(t)), lambda v: np.sqrt(np.abs(v)), None),
    "sin": (em.sin, np.sin, None),
    "relu": (em.relu, lambda v: np.maximum(v, 0), None),
}
BINARY = {
    "add": (em.add, np.add),
    "sub": (em.subtract, np.subtract),
    "mul": (em.multiply, np.multiply),
    "max": (em.maximum, np.maximum),
    "min": (em.minimum, np.minimum),
}


def _fuses(device: em.Device) -> bool:
    return bool(device.capabilities.fusion) and em.lazy.fusion_enabled()


def _at_least(device: em.Device, n: int) -> int:
    """``n``, or the backend's ``fusion_min_elements`` if larger: a case sized so that its ops
    are deferred on a backend that runs small ops at once (cpu with numba)."""
    return max(n, device.capabilities.fusion_min_elements)


def _require_fusion(device: em.Device) -> None:
    if not device.capabilities.fusion:
        pytest.skip(f"the {device.backend.name} backend does not fuse (capabilities.fusion is False)")
    if not em.lazy.fusion_enabled():
        pytest.skip("EMBER_FUSION=0: the lazy layer is off for this run")


def _kernels(device: em.Device) -> int:
    return em.lazy.stats(device)["kernels"]


def _random_program(seed: int, batch: int = 1):
    """A random elementwise DAG over three inputs of broadcasting shapes, as (ember fn, numpy fn);
    ``batch`` > 1 adds a leading axis of that size to every input."""
    gen = np.random.default_rng(seed)
    shapes = [(4, 1, 6), (1, 5, 6), (1, 5, 1)]
    if batch > 1:
        shapes = [(batch, *s) for s in shapes]
    steps = []
    n_values = 3
    for _ in range(int(gen.integers(4, 12))):
        if gen.random() < 0.45:
            steps.append(("u", str(gen.choice(sorted(UNARY))), int(gen.integers(n_values))))
        elif gen.random() < 0.8:
            pick = str(gen.choice(sorted(BINARY)))
            steps.append(("b", pick, int(gen.integers(n_values)), int(gen.integers(n_values))))
        else:
            steps.append(("s", float(np.round(gen.normal(), 3)), int(gen.integers(n_values))))
        n_values += 1

    def run(values, lib, ops=None):
        """The program over ``values``; ``ops`` (a list) gets one entry per elementwise op run."""
        ops = [] if ops is None else ops
        vals = list(values)
        for step in steps:
            if step[0] == "u":
                fn_em, fn_np, domain = UNARY[step[1]]
                x = vals[step[2]]
                if lib == "np":
                    vals.append(fn_np(domain(x) if domain else x))
                else:
                    if domain is not None:
                        x = em.clip(x, -4.0, 4.0)
                        ops.append("clip")
                    vals.append(fn_em(x))
                    ops.append(step[1])
            elif step[0] == "b":
                fn_em, fn_np = BINARY[step[1]]
                vals.append((fn_np if lib == "np" else fn_em)(vals[step[2]], vals[step[3]]))
                ops.append(step[1])
            else:
                vals.append(vals[step[2]] * step[1] + 0.5)
                ops += ["mul", "add"]
        # every value feeds the result, so the whole DAG is one region
        out = vals[-1]
        for v in vals[3:-1]:
            out = out + v * 0.125
            ops += ["mul", "add"]
        return out

    inputs = [gen.standard_normal(s) for s in shapes]
    return run, inputs


@pytest.mark.parametrize("seed", RNG_SEEDS)
def test_random_chain_matches_numpy_and_unfused(device, seed):
    # batch: the smallest input that most ops read (4 x 6) at least fusion_min_elements large
    run, inputs = _random_program(seed, batch=-(-_at_least(device, 24) // 24))
    want = run(inputs, "np")
    xs = [em.tensor(v.astype(np.float32), device=device) for v in inputs]
    before = _kernels(device)
    ops: list[str] = []
    fused = run(xs, "em", ops).numpy()
    ran = _kernels(device) - before
    with em.lazy.fusion(False, device):
        eager = run(xs, "em").numpy()
    np.testing.assert_allclose(fused, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(fused, eager, rtol=2e-5, atol=2e-6)
    if _fuses(device):
        # an op outside the backend's generator (clip, or what fusion_ops leaves out) closes a
        # region; still, far fewer kernels than ops ran
        assert 1 <= ran <= len(ops) // 2, f"{ran} fused kernels for {len(ops)} elementwise ops"


def test_a_chain_runs_as_one_kernel(device):
    _require_fusion(device)
    gen = np.random.default_rng(7)
    x, a, b = (gen.standard_normal(_at_least(device, 1000)).astype(np.float32) for _ in range(3))
    tx, ta, tb = (em.tensor(v, device=device) for v in (x, a, b))
    before = _kernels(device)
    y = em.gelu(tx * ta + tb) * em.sigmoid(tx)
    assert _kernels(device) == before, "an elementwise op ran before anything needed its value"
    got = y.numpy()
    assert _kernels(device) == before + 1, "the five-op chain did not run as one kernel"
    t = x.astype(np.float64) * a + b
    from math import erf

    ref = 0.5 * t * (1 + np.vectorize(erf)(t / np.sqrt(2))) / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_values_held_elsewhere_come_out_of_the_same_kernel(device):
    _require_fusion(device)
    n = _at_least(device, 64)
    x = em.tensor(np.linspace(-2, 2, n, dtype=np.float32), device=device)
    before = _kernels(device)
    mid = em.exp(x) * 2.0  # kept by this test: written out by the kernel that computes `out`
    out = em.tanh(mid) + 1.0
    got_out = out.numpy()
    assert _kernels(device) == before + 1
    got_mid = mid.numpy()
    assert _kernels(device) == before + 1, "the held intermediate was computed a second time"
    xd = np.linspace(-2, 2, n)
    np.testing.assert_allclose(got_mid, np.exp(xd) * 2, rtol=1e-5)
    np.testing.assert_allclose(got_out, np.tanh(np.exp(xd) * 2) + 1, rtol=1e-5)


def test_synchronize_computes_what_tensors_hold(device):
    _require_fusion(device)
    n = _at_least(device, 10)
    x = em.tensor(np.arange(n, dtype=np.float32), device=device)
    device.synchronize()  # what earlier tests left held on the device is computed first: not counted below
    y = x * 3.0 + 1.0
    before = _kernels(device)
    device.synchronize()
    assert _kernels(device) == before + 1, "synchronize() left a held value unrealized"
    np.testing.assert_array_equal(y.numpy(), np.arange(n) * 3.0 + 1.0)


def test_non_fusable_op_realizes_its_inputs(device):
    x = em.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    y = (x * 2.0 - 1.0).sum(axis=1)  # a reduction takes the deferred region as its input
    z = em.matmul(x * 0.5, em.ones((4, 2), device=device))
    np.testing.assert_allclose(y.numpy(), (np.arange(12).reshape(3, 4) * 2.0 - 1.0).sum(axis=1))
    np.testing.assert_allclose(z.numpy(), np.arange(12).reshape(3, 4) @ np.ones((4, 2)) * 0.5)


def test_mixed_dtypes_casts_and_comparisons(device):
    gen = np.random.default_rng(3)
    xi = gen.integers(-50, 50, (7, 9)).astype(np.int32)
    xf = gen.standard_normal((7, 9)).astype(np.float32)
    ti, tf = em.tensor(xi, device=device), em.tensor(xf, device=device)
    mask = (ti > 3) & (tf < 0.5)
    out = em.where(mask, ti.astype(em.float32) * tf, tf - 1.0)
    counts = ((ti % 7) == 2).astype(em.int32) + ti // 3
    want_mask = (xi > 3) & (xf < 0.5)
    np.testing.assert_allclose(out.numpy(), np.where(want_mask, xi * xf.astype(np.float64), xf - 1.0), rtol=1e-6)
    np.testing.assert_array_equal(mask.numpy(), want_mask)
    np.testing.assert_array_equal(counts.numpy(), ((xi % 7) == 2).astype(np.int32) + xi // 3)


def test_long_chains_split_into_bounded_regions(device):
    x = em.tensor(np.linspace(0, 1, 33, dtype=np.float32), device=device)
    y = x
    for k in range(3 * em.lazy.MAX_REGION):
        y = y * 0.99 + 0.01 * (k % 3)
    want = np.linspace(0, 1, 33)
    for k in range(3 * em.lazy.MAX_REGION):
        want = want * 0.99 + 0.01 * (k % 3)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4)


def test_gradients_through_a_fused_region(ad_device):
    device = ad_device
    gen = np.random.default_rng(11)
    xv, av = gen.standard_normal((2, 16)), gen.standard_normal((16,))
    x = em.tensor(xv.astype(np.float32), device=device, requires_grad=True)
    a = em.tensor(av.astype(np.float32), device=device, requires_grad=True)
    loss = (em.tanh(x * a + 0.5) * em.sigmoid(x)).sum()
    loss.backward()
    t = np.tanh(xv * av + 0.5)
    s = 1 / (1 + np.exp(-xv))
    dt = (1 - t**2) * s  # d/d(x*a)
    gx = dt * av + t * s * (1 - s)
    ga = (dt * xv).sum(axis=0)
    np.testing.assert_allclose(x.grad.numpy(), gx, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a.grad.numpy(), ga, rtol=1e-4, atol=1e-5)


def test_scalar_values_are_kernel_arguments(device):
    """Running a chain with new scalar values gives their results (values are not compiled in)."""
    x = em.tensor(np.arange(8, dtype=np.float32), device=device)
    for c in (0.5, 1.5, -3.0):
        np.testing.assert_allclose((em.exp(x * c) + c).numpy(), np.exp(np.arange(8) * c) + c, rtol=1e-5)


# -- a trailing reduction in the region's kernel (capabilities.fusion_reductions) ---------------
REDUCTIONS = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean}
#: (op, axis, keepdims) over a 3-D region: every op over the last axis, then a middle axis, two
#: trailing, all and the first, each with one or two ops (each case compiles a kernel: the
#: PoCL run is CI's longest, so not every op with every axis)
REDUCE_CASES = [(op, -1, False) for op in sorted(REDUCTIONS)] + [
    ("sum", 1, False),
    ("max", (1, 2), True),
    ("prod", None, False),
    ("mean", None, False),
    ("min", 0, True),
]


def _fuses_reduction(device: em.Device, op: str) -> bool:
    """Whether ``op`` of a deferred region runs in the region's kernel (``mean``: through ``sum``
    where the backend's mean is ember's composite, sum then a scale). Where it does not, the
    cases still check the eager results, and only the kernel counts are left out."""
    caps = device.capabilities
    need = "sum" if op == "mean" and "mean" not in caps.fusion_reductions else op
    return _fuses(device) and need in caps.fusion_reductions


def _region_shape(device: em.Device) -> tuple[int, int, int]:
    """A 3-D region of at least ``fusion_min_elements`` elements, rows long enough for a work-group."""
    return (4, 8, max(96, -(-device.capabilities.fusion_min_elements // 32)))


def _reduced_once(device: em.Device, fn):
    """``fn()``'s value, and whether it ran as one fused kernel that reduced (lazy layer counts)."""
    before = em.lazy.stats(device)
    got = fn().numpy()
    after = em.lazy.stats(device)
    return got, after["kernels"] - before["kernels"], after["reductions"] - before["reductions"]


@pytest.mark.parametrize(("op", "axis", "keepdims"), REDUCE_CASES)
def test_fused_reduction_matches_numpy_and_unfused(device, op, axis, keepdims):
    gen = np.random.default_rng(17)
    shape = _region_shape(device)
    x, a = gen.standard_normal(shape).astype(np.float32), gen.standard_normal(shape[-1:]).astype(np.float32)
    tx, ta = em.tensor(x, device=device), em.tensor(a, device=device)
    # values near 1 so that a product over the whole region stays finite
    scale = 1e-3 if op == "prod" else 0.25

    def run():
        return getattr(em.tanh(tx * ta + 0.5) * scale + 1.0, op)(axis=axis, keepdims=keepdims)

    got, kernels, reduced = _reduced_once(device, run)
    with em.lazy.fusion(False, device):
        eager = run().numpy()
    ref = REDUCTIONS[op](np.tanh(x.astype(np.float64) * a + 0.5) * scale + 1.0, axis=axis, keepdims=keepdims)
    assert got.shape == ref.shape == eager.shape and got.dtype == eager.dtype == np.float32
    rtol = {"prod": 2e-3, "sum": 2e-4, "mean": 2e-4}.get(op, 2e-5)
    np.testing.assert_allclose(got, ref, rtol=rtol)
    np.testing.assert_allclose(got, eager, rtol=rtol)
    if _fuses_reduction(device, op):
        assert reduced == 1, f"{op} did not run in the region's kernel"
        assert kernels == 1, f"{kernels} fused kernels for one region and its {op}"


@pytest.mark.parametrize("axis", [None, 1])
def test_a_reduction_of_constants_only(device, axis):
    """A region whose operands are all filled constants reads no tensor: its reduction still runs
    (ember-opencl's fused reduction once failed on such a program with no tensor operand)."""
    x = em.full((3, 5), 2.0, device=device)
    got = (x * x + 1.0).sum(axis=axis).numpy()
    np.testing.assert_allclose(got, np.sum(np.full((3, 5), 5.0), axis=axis), rtol=1e-6)


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_fused_integer_and_bool_reductions_are_exact(device, op):
    fused = _fuses_reduction(device, op)
    gen = np.random.default_rng(5)
    shape = _region_shape(device)
    xi = gen.integers(-1000, 1000, shape).astype(np.int32)
    t = em.tensor(xi, device=device)
    got, kernels, reduced = _reduced_once(device, lambda: getattr(t * 3 + 7, op)(axis=-1))
    want = REDUCTIONS[op](xi.astype(np.int64) * 3 + 7, axis=-1)
    assert got.dtype == (np.int64 if op == "sum" else np.int32), "the unfused dtype rules changed"
    np.testing.assert_array_equal(got, want)
    assert not fused or (kernels, reduced) == (1, 1)
    if op == "sum":  # booleans count in int64
        got, kernels, reduced = _reduced_once(device, lambda: (t > 10).sum(axis=(0, 2)))
        assert got.dtype == np.int64 and (not fused or (kernels, reduced) == (1, 1))
        np.testing.assert_array_equal(got, (xi > 10).sum(axis=(0, 2)))


@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_fused_float16_reductions_accumulate_as_unfused(device, op):
    require_dtype(device, em.float16)
    gen = np.random.default_rng(9)
    shape = _region_shape(device)
    x = gen.uniform(0.0, 1.0, shape).astype(np.float16)
    t = em.tensor(x, device=device)

    def run():
        return getattr(t * 0.5 + 0.25, op)(axis=-1)

    got, kernels, reduced = _reduced_once(device, run)
    with em.lazy.fusion(False, device):
        eager = run().numpy()
    # a float16 accumulator would be off by far more than this over rows of >= 96 values
    ref = REDUCTIONS[op](x.astype(np.float64) * 0.5 + 0.25, axis=-1)
    assert got.dtype == eager.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-3)
    np.testing.assert_allclose(got.astype(np.float64), eager.astype(np.float64), rtol=2e-3)
    assert not _fuses_reduction(device, op) or (kernels, reduced) == (1, 1)


def test_a_reduced_region_writes_the_values_still_held(device):
    gen = np.random.default_rng(3)
    shape = _region_shape(device)
    x = gen.standard_normal(shape).astype(np.float32)
    t = em.tensor(x, device=device)
    e = em.exp(t * 0.5)  # held: the summing kernel writes it out too
    before = em.lazy.stats(device)
    total = e.sum(axis=-1, keepdims=True)
    soft = (e / total).numpy()
    after = em.lazy.stats(device)
    if _fuses_reduction(device, "sum"):
        ran = (after["kernels"] - before["kernels"], after["reductions"] - before["reductions"])
        assert ran == (1, 1), "the held value was not written out by the kernel that reduced it"
    ex = np.exp(x.astype(np.float64) * 0.5)
    np.testing.assert_allclose(e.numpy(), ex, rtol=1e-5)
    np.testing.assert_allclose(soft, ex / ex.sum(axis=-1, keepdims=True), rtol=1e-4)

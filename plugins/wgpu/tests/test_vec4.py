"""The vec4 forms: the elementwise generator's fused W6 regions on element counts that do not
divide by 4 (a partial last vec4), views written in place (the lanes past the end keep their
values), and non-contiguous inputs (the scalar form); fused reductions along a contiguous axis.
Each against numpy float64 with a check of which form ran (the plan's kernel, the dispatch and
launch counters)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ember as em
from ember.lazy.program import FusedProgram, Reduce
from ember_wgpu.kernels import elementwise as ew
from ember_wgpu.kernels import fused_reduce

F = "float32"
RNG = np.random.default_rng(11)

#: y = gelu(x * a + b) * sigmoid(x) (W6)
W6 = FusedProgram(
    ((F, "tensor"), (F, "tensor"), (F, "tensor")),
    (("mul", F, (0, 1)), ("add", F, (3, 2)), ("gelu", F, (4,)), ("sigmoid", F, (0,)), ("mul", F, (5, 6))),
    (7,),
)


def _w6(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x, a, b = (np.asarray(v, dtype=np.float64) for v in (x, a, b))
    t = x * a + b
    return 0.5 * t * (1.0 + np.vectorize(math.erf)(t / math.sqrt(2.0))) / (1.0 + np.exp(-x))


def _vec_of_plan(rt, key: tuple) -> int:  # noqa: ANN001
    """The vec width of the kernel that the launch plan ``key`` (of ``rt.plans``) runs."""
    pipe = rt.plans[key].pipe
    kernels = [v[0] for k, v in rt.kernels.items() if k[0] == "ew" and v[1] is pipe]
    assert kernels, "the plan's pipeline is not in the kernel table"
    return kernels[0].vec


def _plans(rt, shape: tuple[int, ...], program: FusedProgram | None = None) -> list[tuple]:  # noqa: ANN001
    """Keys of the launch plans over ``shape`` of ``program`` (default: any 5-instruction W6 region)."""
    return [k for k in rt.plans if k[1] == shape and (k[0] == program if program else len(k[0].instructions) == 5)]


@pytest.mark.parametrize("n", [2, 3, 5, 6, 7, 1022, 1023, 4097, 65537])
def test_w6_on_counts_not_dividing_by_4(dev, n):
    """The lazy layer's fused W6 region runs the vec4 kernel on any count, in one dispatch."""
    rt = dev.backend.rt
    xs = [RNG.standard_normal(n).astype(np.float32) for _ in range(3)]
    x, a, b = (em.tensor(v, device=dev) for v in xs)
    dev.synchronize()
    before = rt.dispatches
    y = em.gelu(x * a + b) * em.sigmoid(x)
    got = y.numpy()
    assert rt.dispatches == before + 1  # one fused kernel
    np.testing.assert_allclose(got, _w6(*xs), rtol=2e-5, atol=1e-6)
    keys = _plans(rt, (n,))
    assert keys and all(_vec_of_plan(rt, k) == 4 for k in keys)


@pytest.mark.parametrize(("total", "start", "stop"), [(1024, 0, 1022), (1032, 4, 1027), (12, 4, 6), (64, 8, 63)])
def test_partial_vec4_store_keeps_the_lanes_past_the_end(dev, total, start, stop):
    """Writing W6 into a view of a larger buffer (offset a multiple of 4, length not): the elements
    around the view keep their values, those in it get numpy's."""
    rt = dev.backend.rt
    n = stop - start
    xs = [RNG.standard_normal(n).astype(np.float32) for _ in range(3)]
    base = RNG.standard_normal(total).astype(np.float32)
    dst = dev.backend.from_numpy(base)
    view = dst.slice((start,), (stop,), (1,))
    before = rt.dispatches
    ew.run_program(rt, W6, [dev.backend.from_numpy(v) for v in xs], (n,), [view])
    got = dev.backend.to_numpy(dst)
    assert rt.dispatches == before + 1
    keys = [k for k in _plans(rt, (n,), W6) if k[3] == (((1,), start),)]
    assert len(keys) == 1 and _vec_of_plan(rt, keys[0]) == 4
    np.testing.assert_array_equal(got[:start], base[:start])
    np.testing.assert_array_equal(got[stop:], base[stop:])
    np.testing.assert_allclose(got[start:stop], _w6(*xs), rtol=2e-5, atol=1e-6)


def test_non_contiguous_inputs_take_the_scalar_form(dev):
    """A transposed input and a strided slice (general layouts) give numpy's values through the
    scalar kernel; the same region on contiguous copies of them takes the vec4 kernel."""
    rt = dev.backend.rt
    x = RNG.standard_normal((33, 10)).astype(np.float32)
    a = RNG.standard_normal((10, 33)).astype(np.float32)
    b = RNG.standard_normal((33, 20)).astype(np.float32)
    tx, ta, tb = (em.tensor(v, device=dev) for v in (x, a, b))
    want = _w6(x, a.T, b[:, ::2])

    y = em.gelu(tx * ta.mT + tb[:, ::2]) * em.sigmoid(tx)
    np.testing.assert_allclose(y.numpy(), want, rtol=2e-5, atol=1e-6)
    strided = [k for k in _plans(rt, (33, 10)) if any(s != (10, 1) for _, s, _ in k[2])]
    assert strided and all(_vec_of_plan(rt, k) == 1 for k in strided)
    ca, cb = (em.tensor(np.ascontiguousarray(v), device=dev) for v in (a.T, b[:, ::2]))
    y2 = em.gelu(tx * ca + cb) * em.sigmoid(tx)
    np.testing.assert_allclose(y2.numpy(), want, rtol=2e-5, atol=1e-6)
    contiguous = [k for k in _plans(rt, (33, 10)) if all(s == (10, 1) for _, s, _ in k[2])]
    assert contiguous and all(_vec_of_plan(rt, k) == 4 for k in contiguous)


# -- the vec4 form of fused reductions (kernels/fused_reduce.py) --------------------------------
def _reduce_chain(op: str, axes: tuple[int, ...]) -> FusedProgram:
    """``x * a + s`` written out at full size, and ``tanh(x * a + s)`` reduced over ``axes``."""
    inputs = ((F, "tensor"), (F, "tensor"), (F, "scalar"))
    body = (("mul", F, (0, 1)), ("add", F, (3, 2)), ("tanh", F, (4,)))
    return FusedProgram(inputs, body, (4,), Reduce(op, 5, axes))


@pytest.mark.parametrize(
    ("shape", "axes", "start", "vec"),
    [
        ((64, 48), (1,), 0, 4),  # rows of 48: a workgroup per row, vec4
        ((2, 40000), (1,), 0, 4),  # two long rows: chunks (multiples of 4) and the combining pass
        ((64, 50), (1,), 0, 1),  # rows of 50: not a multiple of 4, the scalar form
        ((64, 48), (1,), 2, 1),  # x a view from offset 2: rows not 16-byte aligned, the scalar form
        ((48, 64), (0,), 0, 1),  # a leading axis reduced: strided rows, the scalar form
    ],
)
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
def test_fused_reduction_vec4_form(dev, shape, axes, start, vec, op):
    """The fused reduction's value and full-size output against numpy float64, and which form ran."""
    x = RNG.standard_normal(shape).astype(np.float32)
    a = RNG.standard_normal(shape[-1:]).astype(np.float32)
    size = x.size
    base = dev.backend.from_numpy(np.concatenate([np.zeros(start, np.float32), x.ravel()]))
    hx = base.slice((start,), (start + size,), (1,)).reshape(shape)
    before = fused_reduce.VEC4_LAUNCHES["vec4"]
    full, red = dev.backend.run_fused(_reduce_chain(op, axes), [hx, dev.backend.from_numpy(a), 0.25], shape=shape)
    assert fused_reduce.VEC4_LAUNCHES["vec4"] == before + (vec == 4)
    t = x.astype(np.float64) * a + 0.25
    want = getattr(np, op)(np.tanh(t), axis=axes)
    np.testing.assert_allclose(dev.backend.to_numpy(red), want, rtol=2e-5, atol=2e-5 * shape[axes[-1]])
    np.testing.assert_allclose(dev.backend.to_numpy(full), t, rtol=1e-6, atol=1e-6)

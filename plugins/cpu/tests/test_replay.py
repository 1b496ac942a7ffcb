"""em.jit replays on the cpu (ember_cpu.replay): two-array elementwise steps run as raw numpy
ufuncs where the result is not 0-d; results match eager runs, float64 references and 0-d,
broadcast and mixed-dtype cases that keep the shared kernels."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember_cpu import replay


def _chain(x, s, v, i):
    y = x
    for _ in range(5):
        y = y + x
    y = em.maximum(y * v, x - v)  # broadcast (4, 3) with (3,)
    z = s + s * s  # 0-d: the shared kernel keeps it an array
    return y, z, i + i  # int64


@pytest.mark.parametrize("native", ["1", "0"])
def test_raw_ufunc_replay_matches_eager_and_float64(monkeypatch, native):
    monkeypatch.setenv("EMBER_JIT_NATIVE", native)
    gen = np.random.default_rng(0)
    xs = gen.standard_normal((4, 3)).astype(np.float32)
    vs = gen.standard_normal(3).astype(np.float32)
    dev = em.Device("cpu")
    x, v = em.tensor(xs, device=dev), em.tensor(vs, device=dev)
    s = em.tensor(np.float32(1.5), device=dev)
    i = em.tensor(np.arange(6, dtype=np.int64), device=dev)
    compiled = []
    original = replay.compile_replay

    def spy(program, kernels):
        out = original(program, kernels)
        compiled.append(out)
        return out

    monkeypatch.setattr(replay, "compile_replay", spy)
    fn = em.jit(_chain)
    for _ in range(3):  # capture, then replays
        y, z, k = fn(x, s, v, i)
    if native == "1":
        assert compiled and compiled[0] is not None, "the cpu replay was not compiled"
    else:  # EMBER_JIT_NATIVE=0: ember replays its own step list
        assert compiled == []
    x64, v64 = xs.astype(np.float64), vs.astype(np.float64)
    want = np.maximum(6 * x64 * v64, x64 - v64)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    assert z.numpy().shape == () and float(z.numpy()) == pytest.approx(1.5 + 2.25)
    assert k.numpy().dtype == np.int64 and list(k.numpy()) == [0, 2, 4, 6, 8, 10]
    ey, ez, ek = _chain(x, s, v, i)
    np.testing.assert_array_equal(y.numpy(), ey.numpy())
    np.testing.assert_array_equal(z.numpy(), ez.numpy())


def test_steps_after_unknown_shapes_keep_the_shared_kernel():
    from ember_cpu.backend import _KERNELS

    class _Step:
        def __init__(self, kernel, holes, outs):
            self.kernel, self.args, self.holes, self.nested = kernel, [None] * len(holes), holes, ()
            self.params, self.outs, self.drops = {}, outs, ()

    class _Program:
        sample = {0: np.ones((2, 2), np.float32), 1: np.ones((), np.float32)}
        steps = [
            _Step(_KERNELS["matmul"], ((0, 0), (1, 0)), 2),  # unknown output shape
            _Step(_KERNELS["add"], ((0, 2), (1, 0)), 3),  # after it: kept
            _Step(_KERNELS["add"], ((0, 1), (1, 1)), 4),  # 0-d: kept
        ]

    assert replay.compile_replay(_Program(), _KERNELS) is None
    _Program.steps.append(_Step(_KERNELS["mul"], ((0, 0), (1, 0)), 5))
    fn = replay.compile_replay(_Program(), _KERNELS)
    vals = [np.full((2, 2), 2.0, np.float32), np.float32(3.0) * np.ones((), np.float32)] + [None] * 4
    fn(vals)
    np.testing.assert_array_equal(vals[5], np.full((2, 2), 4.0, np.float32))
    assert type(vals[4]) is np.ndarray and vals[4].shape == ()

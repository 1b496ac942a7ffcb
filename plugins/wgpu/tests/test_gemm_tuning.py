"""The parameterised tiled matmul (vec4 loads, odd tiles) against numpy float64, the adapter-limit
filter, and the tuner's cache (the cached config is the one that runs; a torn entry is ignored)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ember import dtypes as D
from ember.tuning import covering
from ember_conformance.tuning_checks import check_torn_choice_is_not_tuned
from ember_wgpu import tune
from ember_wgpu.kernels import matmul

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _no_autotune(monkeypatch):
    monkeypatch.setenv("EMBER_AUTOTUNE", "0")


@pytest.mark.parametrize("m, k, n", [(67, 36, 72), (1, 12, 40), (45, 8, 1)])
def test_vec4_odd_tile_matches_numpy(rt, m, k, n):
    """vec4 loads where the contiguous axis is aligned (k=36, n=72), scalar fallbacks elsewhere."""
    a = RNG.standard_normal((2, m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    cfg = matmul.CONFIGS["odd"]
    bt = rt.upload(np.ascontiguousarray(b.T), D.float32).permute((1, 0))
    for B in (rt.upload(b, D.float32), bt):
        got = rt.read([matmul.matmul(rt, rt.upload(a, D.float32), B, cfg)])[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_limits_filter_candidates(rt, monkeypatch):
    every = [matmul.Config(*spec) for spec in tune._FAMILY]
    monkeypatch.setattr(rt, "shared_bytes", 8192)
    kept = tune.candidates(rt)
    assert kept and all(matmul.shared_bytes(c) <= 8192 for c in kept)
    assert len(kept) < len(every)


def test_cached_choice_is_used(rt, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    tune.forget(rt)
    choice = matmul.Config(32, 32, 16, 4, 4, True)
    best, rows = tune.tune(rt, "float32", 40, 72, 48, choices=[choice], budget_s=30, reps=1)
    assert best == choice and rows[0]["gflops"] > 0, rows
    tune.forget(rt)
    assert tune.lookup(rt, "float32", 40, 72, 48) == choice  # read back from disk
    rt.kernels = {k: v for k, v in rt.kernels.items() if not (k[0] == "matmul" and choice in k)}
    a = RNG.standard_normal((40, 48)).astype(np.float32)
    b = RNG.standard_normal((48, 72)).astype(np.float32)
    got = rt.read([matmul.matmul(rt, rt.upload(a, D.float32), rt.upload(b, D.float32))])[0]
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert any(k[0] == "matmul" and choice in k for k in rt.kernels), "the cached config did not run"
    check_torn_choice_is_not_tuned(tune, rt, "float32", 40, 72, 48)


@pytest.mark.parametrize(
    "xs, ws, stride, pads, dil, groups",
    [
        ((2, 4, 9, 8), (6, 2, 3, 3), (2, 1), ((1, 1), (2, 0)), (1, 2), 2),
        ((3, 3, 11), (5, 3, 4), (3,), ((2, 1),), (1,), 1),
    ],
)
def test_implicit_conv_and_input_grad(rt, xs, ws, stride, pads, dil, groups):
    """Against core's unfold + matmul composite on the cpu device in float64 (another algorithm)."""
    import ember as em
    from ember_wgpu.kernels import conv

    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    bias = RNG.standard_normal(ws[0]).astype(np.float32)
    pad_arg = tuple(lo for lo, _ in pads) if all(lo == hi for lo, hi in pads) else None
    cpu = em.Device.cpu().autodiff()
    xc = em.tensor(x.astype(np.float64), device=cpu, requires_grad=True)
    wc, bc = em.tensor(w.astype(np.float64), device=cpu), em.tensor(bias.astype(np.float64), device=cpu)
    xp = xc if pad_arg is not None else em.pad(xc, ((0, 0), (0, 0)) + tuple(pads))
    want = em.conv(xp, wc, bc, stride=stride, padding=pad_arg or 0, dilation=dil, groups=groups)
    g = RNG.standard_normal(want.shape).astype(np.float32)
    (want * em.tensor(g.astype(np.float64), device=cpu)).sum().backward()
    up = lambda a: rt.upload(a, D.float32)  # noqa: E731
    got = rt.read([conv.conv(rt, up(x), up(w), up(bias), stride, pads, dil, groups, matmul.CONFIGS["odd"])])[0]
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)
    gx = conv.conv_transpose(rt, up(g), up(w), None, xs[2:], stride, pads, dil, groups, matmul.CONFIGS["odd"])
    np.testing.assert_allclose(rt.read([gx])[0], xc.grad.numpy(), rtol=1e-4, atol=1e-4)
    assert {k[1] for k in rt.kernels if k[0] == "conv_igemm"} == {"conv", "transpose"}  # the implicit kernels ran


def _every_candidate() -> list[matmul.Config]:
    """The tuner's family (so a new candidate is tested automatically) and the named configs."""
    found = [matmul.Config(*spec) for spec in tune._FAMILY]
    return list(dict.fromkeys(found + list(matmul.CONFIGS.values())))


def _view(rt, base, shape, strides):
    """A strided view (element strides) of ``base`` uploaded flat: transposes and slices at no copy."""
    return rt.upload(np.ascontiguousarray(base).reshape(-1), D.float32).with_layout(tuple(shape), tuple(strides), 0)


@pytest.mark.parametrize("cfg", _every_candidate(), ids=lambda c: "-".join(str(int(v)) for v in c.as_dict().values()))
def test_every_candidate_matches_numpy(rt, cfg, monkeypatch):
    """Each candidate on the kernel variants it can run: vec4-bound operands (what big GEMMs take)
    with a broadcast batch and edge tiles, and transposed, unaligned operands with k tails, also at
    k=1 through sliced views (the same kernel); the launched pipeline is the candidate's."""
    if not matmul.fits(rt, cfg):
        pytest.skip(f"{cfg} is beyond this adapter's workgroup limits (the tuner drops it)")
    cpu = rt.adapter.info.get("adapter_type") == "CPU"
    everything = os.environ.get("EMBER_TEST_ALL_TILINGS")
    if cpu and cfg not in covering(_every_candidate(), ("vec", "split", "pf", "sw")) and not everything:
        pytest.skip(
            "a CPU adapter (lavapipe) runs each candidate's kernels slowly: it checks a covering subset "
            "(each vec4, split, prefetch and band option at least once); EMBER_TEST_ALL_TILINGS=1 checks them all"
        )
    ran = []
    dispatch = rt.dispatch
    monkeypatch.setattr(rt, "dispatch", lambda pipe, *args: (ran.append(pipe), dispatch(pipe, *args))[1])
    # a banded walk (sw > 1) gets two whole bands of tile rows and a short one, over several columns
    rows, cols = (2 * cfg.sw + 1, 3) if cfg.sw > 1 else (1, 1)
    m, k, n = cfg.bm * rows + 4, 36, cfg.bn * cols + 4
    mt, kt, nt = cfg.bm * rows + 3, 37, cfg.bn * cols + 5
    a = RNG.standard_normal((2, m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    at = RNG.standard_normal((2, kt, mt)).astype(np.float32)  # stored transposed
    bt = RNG.standard_normal((nt, kt)).astype(np.float32)
    a1 = RNG.standard_normal((2, 4, mt)).astype(np.float32)  # k=1: row 0 of each, transposed
    b1 = RNG.standard_normal((nt, 4)).astype(np.float32)  # k=1: column 0, transposed
    cases = [
        (rt.upload(a, D.float32), rt.upload(b, D.float32), a.astype(np.float64) @ b, (cfg.vec, cfg.vec)),
        (
            _view(rt, at, (2, mt, kt), (kt * mt, 1, mt)),
            _view(rt, bt, (kt, nt), (1, kt)),
            np.swapaxes(at, -1, -2).astype(np.float64) @ bt.T,
            (False, False),
        ),
        (
            _view(rt, a1, (2, mt, 1), (4 * mt, 1, mt)),
            _view(rt, b1, (1, nt), (1, 4)),
            np.swapaxes(a1[:, :1], -1, -2).astype(np.float64) @ b1[:, :1].T,
            (False, False),
        ),
    ]
    for x, y, want, vec in cases:
        ran.clear()
        got = rt.read([matmul.matmul(rt, x, y, cfg)])[0]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-4)
        mine = {v[0] for key, v in rt.kernels.items() if key[0] == "matmul" and key[3] == cfg and key[6:8] == vec}
        assert any(p in mine for p in ran), f"{cfg}'s kernel (vec4 A, B: {vec}) did not run"


def test_tuner_drops_failing_and_oversized_candidates(rt, tmp_path, monkeypatch):
    """A candidate beyond the adapter's limits is never tried; one the driver cannot build and one
    that computes wrong get an error row, and the tuner still picks a working one."""
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    tune.forget(rt)
    good, broken, wrong = matmul.Config(32, 32, 16, 4, 4, True), matmul.CONFIGS["small"], matmul.CONFIGS["scalar"]
    big = matmul.Config(256, 256, 8, 4, 4, True)  # 4096 invocations per workgroup: beyond WebGPU's limits
    assert not matmul.fits(rt, big)
    real = tune.matmul

    def flaky(rt_, a, b, c):
        if c == broken:
            raise RuntimeError("createComputePipeline failed (simulated)")
        if c == wrong:
            return rt_.upload(np.zeros((a.shape[0], b.shape[1]), np.float32), D.float32)
        return real(rt_, a, b, c)

    monkeypatch.setattr(tune, "matmul", flaky)
    best, rows = tune.tune(rt, "float32", 40, 72, 48, choices=[big, broken, wrong, good], budget_s=60, reps=1)
    assert best == good, rows
    assert [matmul.Config(**r["config"]) for r in rows] == [broken, wrong, good]
    assert "simulated" in rows[0]["error"] and rows[1]["error"] == "wrong result" and rows[2]["gflops"] > 0
    tune.forget(rt)

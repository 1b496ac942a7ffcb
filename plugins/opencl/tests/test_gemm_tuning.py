"""The tiled GEMM family on edge shapes and dtypes, every tuner candidate, the tuner's cache and
filter, and implicit-GEMM conv, against numpy float64. A CPU device picks the vector matmul and
im2col conv by itself, so these call the kernels directly (PoCL compiles each kernel variant cold
in ~10-30 s: each candidate gets the two variants that cover its code paths)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import conv_reference as ref
import numpy as np
import pytest

import ember as em
from ember.tuning import covering
from ember_conformance.tuning_checks import check_torn_choice_is_not_tuned
from ember_opencl import conv, runtime, tune
from ember_opencl.gemm_source import Tiling, local_bytes
from ember_opencl.matmul import TILINGS, matmul

RNG = np.random.default_rng(11)


def _up(rt, arr):
    return rt.upload(np.ascontiguousarray(arr), em.dtypes.as_dtype(arr.dtype))


def _tiled_keys(rt, kind):
    return [k for k in rt._kernels if isinstance(k, tuple) and k and k[0] == kind]


@pytest.fixture
def gpu_like(dev):
    rt = dev.backend.rt
    saved = rt.is_cpu
    rt.is_cpu = False
    yield rt
    rt.is_cpu = saved


@pytest.mark.parametrize(
    "dtype, sa, sb, tol",
    [
        ("float32", (2, 1, 67, 45), (3, 45, 70), 1e-4),  # broadcast batch, edge tiles on every side
        ("float32", (1, 9), (9, 130), 1e-4),  # one row
        ("float32", (131, 5), (5, 1), 1e-4),  # one column
        ("float64", (33, 19), (19, 66), 1e-10),
        ("float16", (3, 34, 21), (21, 35), 2e-2),
    ],
)
def test_tiled_family_matches_numpy(dev, dtype, sa, sb, tol):
    """chunk-4, double-buffered, 2-wide vector loads ("odd"), plain and transposed operands."""
    if dtype == "float64" and "float64" not in {d.name for d in dev.backend.supported_dtypes}:
        pytest.skip("this OpenCL device has no float64 (cl_khr_fp64)")
    rt = dev.backend.rt
    a = RNG.standard_normal(sa).astype(dtype)
    b = RNG.standard_normal(sb).astype(dtype)
    want = a.astype(np.float64) @ b.astype(np.float64)
    A, B = _up(rt, a), _up(rt, b)
    At = _up(rt, np.swapaxes(a, -1, -2)).permute(tuple(range(a.ndim - 2)) + (a.ndim - 1, a.ndim - 2))
    for x, y in [(A, B), (At, B)]:
        got = dev.backend.to_numpy(matmul(rt, x, y, TILINGS["odd"]))
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol)


def test_cached_choice_is_used(dev, gpu_like, tmp_path, monkeypatch):
    """tune() stores the winner; a matmul of that shape class then runs it, in this process and
    (read from disk) in a new one; a corrupt entry reads as untuned."""
    rt = gpu_like
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    tune.forget(rt)
    choice = Tiling(32, 32, 8, 2, 4, vw=2, chunk=1, db=True)
    best, rows = tune.tune(rt, "float32", 40, 70, 50, choices=[choice], budget_s=30, reps=1)
    assert best == choice and rows[0]["gflops"] > 0, rows
    tune.forget(rt)
    a = RNG.standard_normal((40, 50)).astype(np.float32)
    b = RNG.standard_normal((50, 70)).astype(np.float32)
    rt._kernels = {k: v for k, v in rt._kernels.items() if not (k[0] == "matmul" and k[1:3] == ("float32", choice))}
    x, y = em.tensor(a, device=dev), em.tensor(b, device=dev)
    np.testing.assert_allclose((x @ y).numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    assert any(k[2] == choice for k in _tiled_keys(rt, "matmul")), "the cached tiling did not run"
    code = (
        "import json, ember as em; from ember_opencl import tune; "
        f"rt = em.Device('opencl:{rt.index}').backend.rt; t = tune.lookup(rt, 'float32', 40, 70, 50); "
        "print(json.dumps(t.as_dict() if t else None))"
    )
    env = {**os.environ, "EMBER_CACHE_DIR": str(tmp_path), "EMBER_AUTOTUNE": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == choice.as_dict(), out.stderr
    check_torn_choice_is_not_tuned(tune, rt, "float32", 40, 70, 50)


CONVS = [  # x shape, w shape, stride, padding (lo, hi), dilation, groups
    ((2, 4, 9, 8), (6, 2, 3, 3), (2, 1), ((1, 1), (2, 0)), (1, 2), 2),
    ((3, 3, 11), (5, 3, 4), (3,), ((2, 1),), (1,), 1),
]


@pytest.mark.parametrize("xs, ws, stride, pads, dil, groups", CONVS)
def test_implicit_conv_and_input_grad(dev, gpu_like, xs, ws, stride, pads, dil, groups):
    rt = gpu_like
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    bias = RNG.standard_normal(ws[0]).astype(np.float32)
    want = ref.conv(x, w, bias, stride, pads, dil, groups)
    y = conv.conv(rt, _up(rt, x), _up(rt, w), _up(rt, bias), stride, pads, dil, groups, TILINGS["odd"])
    np.testing.assert_allclose(dev.backend.to_numpy(y), want, rtol=1e-4, atol=1e-4)
    g = RNG.standard_normal(want.shape).astype(np.float32)
    size = xs[2:]
    want_gx = ref.conv_transpose(g, w, size, stride, pads, dil, groups)
    gx = conv.conv_transpose(rt, _up(rt, g), _up(rt, w), None, size, stride, pads, dil, groups, TILINGS["odd"])
    np.testing.assert_allclose(dev.backend.to_numpy(gx), want_gx, rtol=1e-4, atol=1e-4)
    assert {"conv", "transpose"} <= {k[1] for k in _tiled_keys(rt, "conv_igemm")}  # the implicit kernels ran
    assert conv.implicit_wins(rt)  # a GPU device takes this path through dispatch


def _every_candidate() -> list[Tiling]:
    """The tuner's family (so a new candidate is tested automatically) and the named tilings."""
    found = [Tiling(*spec) for spec in tune._GPU_FAMILY]
    return list(dict.fromkeys(found + list(TILINGS.values())))


#: the options that change the kernel's code paths (the tile sizes only change its constants)
_CODE_PATHS = ("vw", "chunk", "db", "rp", "sw")


def _view(rt, base, shape, strides, offset=0):
    """A strided view (element strides) of ``base`` uploaded flat: transposes and slices at no copy."""
    flat = np.ascontiguousarray(base).reshape(-1)
    return _up(rt, flat).with_layout(tuple(shape), tuple(strides), offset)


@pytest.mark.parametrize("t", _every_candidate(), ids=lambda t: "-".join(str(int(v)) for v in t.as_dict().values()))
def test_every_candidate_matches_numpy(dev, t, monkeypatch):
    """Each candidate on the kernel variants it can run: aligned rows (vector-pointer loads and
    stores, what big GEMMs take) with a broadcast batch and edge tiles, k=1 through sliced views
    (the same kernel), and transposed, unaligned operands with k tails (vload and scalar paths);
    the launched kernel is the candidate's."""
    rt = dev.backend.rt
    if not tune._TUNER.fits(rt, t, "float32"):
        pytest.skip(f"{t} is beyond this device's work-group size or local memory (the tuner drops it)")
    everything = os.environ.get("EMBER_TEST_ALL_TILINGS")
    if rt.is_cpu and t not in covering(_every_candidate(), _CODE_PATHS) and not everything:
        pytest.skip(
            "a CPU OpenCL device (PoCL) compiles each candidate in 10-30 s: it checks a covering subset (each "
            "load, chunk, double-buffer and prefetch option at least once); EMBER_TEST_ALL_TILINGS=1 checks all"
        )
    m, k, n = t.tm + 4, 40, t.tn + 4
    a = RNG.standard_normal((2, m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    a1 = RNG.standard_normal((2, m, 4)).astype(np.float32)  # k=1: column 0 of each row, row stride 4
    b1 = RNG.standard_normal((4, n)).astype(np.float32)  # k=1: row 0
    mt, kt, nt = t.tm + 3, 37, t.tn + 5
    at = RNG.standard_normal((2, kt, mt)).astype(np.float32)  # stored transposed
    bt = RNG.standard_normal((nt, kt)).astype(np.float32)
    cases = [
        (_up(rt, a), _view(rt, b, (1, k, n), (0, n, 1)), a.astype(np.float64) @ b),
        (
            _view(rt, a1, (2, m, 1), (4 * m, 4, 1)),
            _view(rt, b1, (1, 1, n), (0, n, 1)),
            a1[..., :1].astype(np.float64) @ b1[:1],
        ),
        (
            _view(rt, at, (2, mt, kt), (kt * mt, 1, mt)),
            _view(rt, bt, (1, kt, nt), (0, 1, kt)),
            np.swapaxes(at, -1, -2).astype(np.float64) @ bt.T,
        ),
    ]
    ran = []
    launch = rt.launch
    monkeypatch.setattr(rt, "launch", lambda knl, *args: (ran.append(knl), launch(knl, *args))[1])
    for (x, y, want), aligned in zip(cases, [t.vw > 1, t.vw > 1, False]):
        ran.clear()
        got = dev.backend.to_numpy(matmul(rt, x, y, t))
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-4)
        mine = {v[0] for key, v in rt._kernels.items() if key[:3] == ("matmul", "float32", t) and key[-1][0] == aligned}
        real = [knl.kernel if type(knl) is runtime._Pending else knl for knl in ran]  # (built in the background)
        assert any(knl in mine for knl in real), f"{t}'s kernel (aligned A: {aligned}) did not run"


def test_tuner_drops_failing_and_oversized_candidates(dev, gpu_like, tmp_path, monkeypatch):
    """A candidate beyond the device's limits is never tried; one the driver cannot build and one
    that computes wrong get an error row, and the tuner still picks a working one."""
    rt = gpu_like
    monkeypatch.setenv("EMBER_CACHE_DIR", str(tmp_path))
    tune.forget(rt)
    good, broken, wrong = Tiling(32, 32, 8, 2, 4, vw=2, chunk=1, db=True), TILINGS["tiny"], TILINGS["odd"]
    big = Tiling(128, 128, 32, 1, 1)  # 16384 work items per group: beyond any device's limit
    assert not tune._TUNER.fits(rt, big, "float32")
    real = tune.as_tuned_runs

    def flaky(rt_, a, b, t):
        if t == broken:
            raise RuntimeError("clBuildProgram failed (simulated)")
        if t == wrong:
            return _up(rt_, np.zeros((a.shape[0], b.shape[1]), np.float32))
        return real(rt_, a, b, t)

    monkeypatch.setattr(tune, "as_tuned_runs", flaky)
    best, rows = tune.tune(rt, "float32", 40, 70, 50, choices=[big, broken, wrong, good], budget_s=60, reps=1)
    assert best == good, rows
    assert [Tiling(**r["tiling"]) for r in rows] == [broken, wrong, good]
    assert "simulated" in rows[0]["error"] and rows[1]["error"] == "wrong result" and rows[2]["gflops"] > 0
    monkeypatch.setattr(rt, "local_mem", 4096)
    kept = tune.candidates(rt, "float32")
    assert kept and all(local_bytes(c, "float32") <= 4096 for c in kept) and len(kept) < len(tune._GPU_FAMILY)
    tune.forget(rt)

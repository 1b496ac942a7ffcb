"""The flash attention backward (``attention_backward.py``) checked without a GPU (CI has none):
its sources compile under NVRTC as CuPy would compile them; its blocked algorithm, written once
more in numpy with the kernels' tiles, lse/delta pass and causal rule, matches float64; the
CUDA source itself, run on the CPU by g++ (``cuda_on_cpu.py``, under AddressSanitizer and
ThreadSanitizer), matches float64; the Python side's launches match the kernels' signatures
(a stand-in CuPy); and the chunked fallback (masks, float64, other head sizes) matches float64,
run over numpy as its array module. ``test_cuda_attention_backward.py`` runs the kernels on a GPU."""

from __future__ import annotations

import cuda_on_cpu
import numpy as np
import pytest
from ember_cuda import attention, attention_backward
from ember_cuda.attention import _LOG2E

LOG2E = np.float32(_LOG2E)


def reference(q, k, v, g, causal: bool, scale: float, mask=None):  # noqa: ANN001, ANN201
    """(dq, dk, dv) of softmax(q k^T * scale [+ mask]) v at cotangent g, in float64; a row that
    sees no key has zero gradients."""
    q, k, v, g = (np.asarray(a, dtype=np.float64) for a in (q, k, v, g))
    s = q @ np.swapaxes(k, -1, -2) * scale
    L, S = s.shape[-2:]
    if causal:
        s = np.where(np.arange(S)[None, :] <= np.arange(L)[:, None] + (S - L), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask
    mx = s.max(-1, keepdims=True, initial=-np.inf)
    e = np.exp(s - np.where(np.isinf(mx), 0, mx))
    total = e.sum(-1, keepdims=True)
    p = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    dp = g @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    return ds @ k, np.swapaxes(ds, -1, -2) @ q, np.swapaxes(p, -1, -2) @ g


def blocked(q, k, v, g, causal: bool, scale: float):  # noqa: ANN001, ANN201
    """The kernels' algorithm in float32 numpy over (batch, L, D) arrays, tile for tile: the stats
    pass (64 queries, keys 64 at a time, online max/sum in log2 units, delta = dO . O / l), dK/dV
    per key tile over query tiles from the first that sees it, dQ per query tile over the key tiles
    it sees; P = exp2(q k * scale * log2(e) - lse)."""
    f32 = np.float32
    batch, L, D = q.shape
    S = k.shape[1]
    off = S - L
    qs = (q * f32(scale * _LOG2E)).astype(f32)
    lse = np.empty((batch, L), f32)
    delta = np.empty((batch, L), f32)

    def visible(r0: int, rows: int, n0: int, cols: int) -> np.ndarray:
        r = np.arange(r0, r0 + rows)[:, None]
        n = np.arange(n0, n0 + cols)[None, :]
        return (n < S) & ~(causal & (n > r + off))

    for b in range(batch):
        for q0 in range(0, L, 64):
            rows = min(64, L - q0)
            m = np.full(rows, -np.inf, f32)
            ell = np.zeros(rows, f32)
            o = np.zeros((rows, D), f32)
            n_end = min(S, q0 + 64 + off) if causal else S
            for n0 in range(0, n_end, 64):
                cols = min(64, S - n0)
                s = np.where(visible(q0, rows, n0, cols), qs[b, q0 : q0 + rows] @ k[b, n0 : n0 + cols].T, -np.inf)
                mnew = np.maximum(m, s.max(1))
                muse = np.where(np.isneginf(mnew), f32(0), mnew)
                alpha = np.exp2(m - muse)
                p = np.exp2(s - muse[:, None])
                ell = ell * alpha + p.sum(1)
                o = o * alpha[:, None] + p @ v[b, n0 : n0 + cols]
                m = mnew
            seen = ell > 0
            with np.errstate(divide="ignore", invalid="ignore"):
                lse[b, q0 : q0 + rows] = np.where(seen, m + np.log2(ell), np.inf)
                delta[b, q0 : q0 + rows] = np.where(seen, (g[b, q0 : q0 + rows] * o).sum(1) / ell, 0)

    def tile(b: int, r0: int, rows: int, n0: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        """P and dS of queries [r0, r0 + rows) and keys [n0, n0 + cols)."""
        s = qs[b, r0 : r0 + rows] @ k[b, n0 : n0 + cols].T
        with np.errstate(over="ignore"):
            p = np.where(visible(r0, rows, n0, cols), np.exp2(s - lse[b, r0 : r0 + rows, None]), f32(0))
        dp = g[b, r0 : r0 + rows] @ v[b, n0 : n0 + cols].T
        return p, p * (dp - delta[b, r0 : r0 + rows, None])

    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    bn, bm = attention_backward.tiles(D)["dkdv"]
    for b in range(batch):
        for k0 in range(0, S, bn):
            cols = min(bn, S - k0)
            first = max(0, k0 - off) if causal else 0
            for q0 in range((first // bm) * bm, L, bm):
                rows = min(bm, L - q0)
                p, ds = tile(b, q0, rows, k0, cols)
                dv[b, k0 : k0 + cols] += p.T @ g[b, q0 : q0 + rows]
                dk[b, k0 : k0 + cols] += ds.T @ qs[b, q0 : q0 + rows]
        dk[b] /= LOG2E  # qs held q * scale * log2(e)
    qm, qn = attention_backward.tiles(D)["dq"]
    for b in range(batch):
        for q0 in range(0, L, qm):
            rows = min(qm, L - q0)
            n_end = min(S, q0 + qm + off) if causal else S
            for n0 in range(0, max(n_end, 0), qn):
                cols = min(qn, S - n0)
                dq[b, q0 : q0 + rows] += tile(b, q0, rows, n0, cols)[1] @ k[b, n0 : n0 + cols]
        dq[b] *= f32(scale)
    return dq, dk, dv


CASES = [  # (batch, L, S, head, causal)
    (2, 70, 45, 64, False),  # tiles cut short on both axes
    (1, 200, 200, 64, True),  # causal: dK/dV skip the query tiles before their first, dQ the later keys
    (1, 65, 200, 32, True),  # causal with more keys than queries
    (1, 100, 37, 128, True),  # causal with more queries: the first 63 rows see nothing, zero gradients
    (2, 33, 90, 96, False),
    (1, 1, 1, 64, False),
]


def _operands(batch: int, L: int, S: int, head: int) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(L * 1000 + S + head)
    q, g = (rng.standard_normal((batch, L, head)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((batch, S, head)).astype(np.float32) for _ in range(2))
    return q, k, v, g


def _close(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...], atol: float) -> None:
    for name, a, w in zip(("dq", "dk", "dv"), got, want):
        assert a.shape == w.shape, name
        assert np.isfinite(a).all(), name
        np.testing.assert_allclose(a, w, rtol=1e-4, atol=atol, err_msg=name)


def test_the_backward_kernels_compile_under_nvrtc() -> None:
    """CuPy compiles RawKernels with NVRTC (no C headers): the stats pass and both backward kernels."""
    from nvrtc import compile_log, library

    lib = library()
    if lib is None:
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed (pip install 'nvidia-cuda-nvrtc==13.*')")
    sources = {f"stats_d{h}": attention.source(h, stats=True) for h in attention.HEAD_SIZES}
    sources.update({f"backward_d{h}": attention_backward.source(h) for h in attention.HEAD_SIZES})
    failed = {name: log for name, src in sources.items() if not (done := compile_log(lib, src))[0] for log in [done[1]]}
    assert not failed, failed


def test_shared_memory_fits_a_hopper_block() -> None:
    """Each launch's dynamic shared memory is under the 227 KiB a block may opt in to (the
    kernels set max_dynamic_shared_size_bytes, so more than 48 KiB is allowed)."""
    for h in attention.HEAD_SIZES:
        for which, size in attention_backward.shared_bytes(h).items():
            assert size <= 227 * 1024, (h, which, size)


@pytest.mark.parametrize(("batch", "L", "S", "head", "causal"), CASES)
def test_the_blocked_algorithm_matches_float64(batch, L, S, head, causal) -> None:  # noqa: ANN001
    q, k, v, g = _operands(batch, L, S, head)
    scale = 1 / np.sqrt(head)
    _close(blocked(q, k, v, g, causal, scale), reference(q, k, v, g, causal, scale), atol=2e-5)


@pytest.mark.skipif(not cuda_on_cpu.available(), reason="g++ is not installed (it builds the kernels for the CPU)")
@pytest.mark.parametrize(("batch", "L", "S", "head", "causal"), CASES[:5])
def test_the_cuda_kernels_run_on_the_cpu_match_float64(batch, L, S, head, causal) -> None:  # noqa: ANN001
    """The kernels' own source: stats pass, dK/dV and dQ (and the forward, for the harness)."""
    q, k, v, g = _operands(batch, L, S, head)
    scale = 1 / np.sqrt(head)
    got = cuda_on_cpu.run(q, k, v, g, causal=causal, scale=scale)
    _close((got["dq"], got["dk"], got["dv"]), reference(q, k, v, g, causal, scale), atol=2e-5)
    if causal and L > S:  # rows that see no key: lse = +inf, delta = 0, zero gradients
        assert np.isposinf(got["lse"][:, : L - S]).all() and not got["delta"][:, : L - S].any()
    # the forward kernel through the same harness (its rows that see nothing are NaN)
    s = np.where(np.isnan(got["o"]), 0, got["o"])
    p = q.astype(np.float64) @ np.swapaxes(k, 1, 2) * scale
    if causal:
        p = np.where(np.arange(S)[None, :] <= np.arange(L)[:, None] + (S - L), p, -np.inf)
    mx = p.max(-1, keepdims=True)
    e = np.exp(p - np.where(np.isinf(mx), 0, mx))
    total = e.sum(-1, keepdims=True)
    want = np.divide(e, total, out=np.zeros_like(e), where=total > 0) @ v
    np.testing.assert_allclose(s, want, rtol=1e-4, atol=2e-5)


@pytest.mark.skipif(
    not (cuda_on_cpu.available() and cuda_on_cpu.sanitizer_available("thread")),
    reason="g++ with ThreadSanitizer is not installed (it builds the kernels for the CPU)",
)
@pytest.mark.parametrize(("L", "S", "head", "causal"), [(70, 90, 64, True), (100, 37, 128, False)])
def test_the_cuda_kernels_have_no_shared_memory_race(L, S, head, causal) -> None:  # noqa: ANN001
    """Every shared-memory slot one thread writes and another reads has a __syncthreads between."""
    q, k, v, g = _operands(1, L, S, head)
    got = cuda_on_cpu.run(q, k, v, g, causal=causal, scale=0.125, sanitizer="thread")
    assert np.isfinite(got["dq"]).all()


def _numpy_softmax(s: np.ndarray, *, axis: int) -> np.ndarray:
    mx = s.max(axis, keepdims=True)
    e = np.exp(s - np.where(np.isinf(mx), 0, mx))
    with np.errstate(invalid="ignore"):
        return e / e.sum(axis, keepdims=True)


def _numpy_softmax_backward(y: np.ndarray, g: np.ndarray, *, axis: int) -> np.ndarray:
    return y * (g - (g * y).sum(axis, keepdims=True))


@pytest.mark.parametrize(
    ("qshape", "kshape", "mask", "causal", "dtype"),
    [
        ((2, 3, 20, 16), (2, 3, 30, 16), "bool", False, np.float32),  # a head size the kernels do not take
        ((2, 3, 20, 8), (1, 3, 30, 8), "float", True, np.float64),  # broadcast k/v, additive mask, float64
        ((40, 8), (25, 8), None, True, np.float16),  # 2-D, rows that see no key
        ((2, 5, 8), (2, 0, 8), None, False, np.float32),  # no keys: zero gradients
    ],
)
def test_the_chunked_fallback_matches_float64(qshape, kshape, mask, causal, dtype, monkeypatch) -> None:  # noqa: ANN001
    """The fallback over numpy (its array module), with a score budget small enough to slice."""
    monkeypatch.setattr(attention_backward, "SCORE_BUDGET", 700)
    rng = np.random.default_rng(5)
    q, g = (rng.standard_normal(qshape).astype(dtype) for _ in range(2))
    k = rng.standard_normal(kshape).astype(dtype)
    v = rng.standard_normal(kshape[:-1] + (12,)).astype(dtype)
    g = rng.standard_normal(np.broadcast_shapes(qshape[:-2], kshape[:-2]) + (qshape[-2], 12)).astype(dtype)
    L, S = qshape[-2], kshape[-2]
    m = None
    if mask == "bool":
        m = rng.random((L, S)) < 0.7
        m[3] = False  # a row that sees no key
    elif mask == "float":
        m = rng.standard_normal((3, L, S)).astype(dtype)
    run = attention_backward.chunked_backward(np, _numpy_softmax, _numpy_softmax_backward)
    scale = 0.3
    with np.errstate(invalid="ignore"):
        packed = run(g, q, k, v, *(() if m is None else (m,)), is_causal=causal, scale=scale)
    assert packed.dtype == dtype
    want = reference(q, k, v, g, causal, scale, m)
    lead = np.broadcast_shapes(qshape[:-2], kshape[:-2])
    shapes = [lead + qshape[-2:], lead + kshape[-2:], lead + v.shape[-2:]]
    parts, start = [], 0
    for s in shapes:
        n = int(np.prod(s))
        parts.append(packed[start : start + n].reshape(s).astype(np.float64))
        start += n
    tol = 2e-2 if dtype == np.float16 else 1e-5
    for name, a, w in zip(("dq", "dk", "dv"), parts, want):
        np.testing.assert_allclose(a, np.broadcast_to(w, a.shape), rtol=tol, atol=tol, err_msg=name)


class _Array(np.ndarray):
    """numpy standing in for a CuPy array: ``.data.ptr`` is its address."""

    @property
    def data(self):  # noqa: ANN201
        from types import SimpleNamespace

        return SimpleNamespace(ptr=self.ctypes.data)


def _signature(source: str, name: str) -> list[str]:
    """The kinds (pointer, int, float) of kernel ``name``'s parameters, after the preprocessor."""
    import re
    import subprocess

    text = subprocess.run(["g++", "-E", "-P", "-x", "c++", "-"], input=source, capture_output=True, text=True).stdout
    params = text[text.index(name + "(") + len(name) + 1 :].split(")")[0]
    kinds = []
    for p in params.split(","):
        kinds.append("pointer" if "*" in p else "int" if re.search(r"\bint\b", p) else "float")
    return kinds


class _FakeCupy:
    """Enough of CuPy over numpy for ``flash_attention_backward``'s launches: each RawKernel call
    is checked against the kernel's CUDA signature and recorded, not run."""

    float32, float16, float64, bool_ = np.float32, np.float16, np.float64, np.bool_

    def __init__(self) -> None:
        self.launches: list[tuple[str, tuple, tuple, int]] = []
        fake = self

        class RawKernel:
            def __init__(self, source: str, name: str) -> None:
                self.kinds, self.name = _signature(source, name), name
                self.max_dynamic_shared_size_bytes = 0

            def __call__(self, grid, block, args, shared_mem=0) -> None:  # noqa: ANN001
                assert len(args) == len(self.kinds), (self.name, len(args), self.kinds)
                for a, kind in zip(args, self.kinds):
                    want = {"pointer": _Array, "int": np.int32, "float": np.float32}[kind]
                    assert isinstance(a, want), (self.name, kind, type(a))
                    if kind == "pointer":
                        assert a.flags.c_contiguous and a.dtype == np.float32 and a.ctypes.data % 16 == 0
                assert block == (128,) and 0 < shared_mem <= self.max_dynamic_shared_size_bytes
                fake.launches.append((self.name, grid, args, shared_mem))

        self.RawKernel = RawKernel

    def broadcast_to(self, a, shape):  # noqa: ANN001, ANN201
        return np.broadcast_to(a, shape).view(_Array)

    def ascontiguousarray(self, a):  # noqa: ANN001, ANN201
        return np.ascontiguousarray(a).view(_Array)

    def empty(self, n, dtype):  # noqa: ANN001, ANN201
        return np.zeros(n, dtype).view(_Array)


@pytest.mark.skipif(not cuda_on_cpu.available(), reason="g++ is not installed (its preprocessor reads the signatures)")
@pytest.mark.parametrize(("qlead", "klead", "L", "S", "head", "dtype"), [
    ((2, 3), (1, 3), 70, 90, 64, np.float32),
    ((), (), 130, 33, 128, np.float16),
    ((4,), (4,), 1, 200, 32, np.float32),
])  # fmt: skip
def test_the_launches_match_the_kernels_signatures(qlead, klead, L, S, head, dtype) -> None:  # noqa: ANN001
    """Each launch passes as many arguments as its kernel takes, of the kinds it declares
    (contiguous, 16-byte-aligned float32 arrays for the pointers), a grid of one block per tile
    and no more shared memory than the kernel was allowed; the result has the packed size."""
    fake = _FakeCupy()
    run = attention_backward.flash_attention_backward(fake, {"softmax": None, "softmax_backward": None})
    batch = int(np.prod(np.broadcast_shapes(qlead, klead)))
    q = np.zeros(qlead + (L, head), dtype)
    k = np.zeros(klead + (S, head), dtype)
    g = np.zeros(np.broadcast_shapes(qlead, klead) + (L, head), dtype)
    out = run(g, q, k, k, is_causal=True, scale=0.5)
    assert out.shape == (batch * (L + 2 * S) * head,) and out.dtype == dtype
    names = [n for n, *_ in fake.launches]
    assert names == [f"ember_flash_attention_{w}_d{head}" for w in ("stats", "dkdv", "dq")]
    bn, bm = attention_backward.tiles(head)["dkdv"][0], attention_backward.tiles(head)["dq"][0]
    assert [grid for _, grid, *_ in fake.launches] == [
        (batch * -(-L // 64),),
        (batch * -(-S // bn),),
        (batch * -(-L // bm),),
    ]
    stats, dkdv, dq = (args for _, _, args, _ in fake.launches)
    assert stats[4] is dkdv[4] is dq[4] and stats[5] is dkdv[5] is dq[5]  # lse and delta flow from the stats pass
    assert dkdv[6].size == dkdv[7].size == batch * S * head and dq[6].size == batch * L * head

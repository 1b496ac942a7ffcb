"""Products split over ember's threads with numpy's BLAS on one thread (ember_cpu.gemm): results
against float64 for odd, batched, broadcast, transposed, strided and 16-bit operands, bit for bit
the whole product at the default sizes, the counters showing the split ran, small products and
busy cores left whole, the BLAS's thread count put back after every call, and the setting checked."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import ember as em
from ember.errors import InvalidArgumentError
from ember_cpu import gemm, parallel


@pytest.fixture
def split(monkeypatch):
    """Products split from 2^12 flops in blocks of at least 2^10 over 3 threads (no load gate)."""
    monkeypatch.setattr(gemm, "MIN_SPLIT_FLOPS", 1 << 12)
    monkeypatch.setattr(gemm, "MIN_BLOCK_FLOPS", 1 << 10)
    s = parallel.Splitter(3)
    monkeypatch.setattr(gemm, "splitter", s)
    monkeypatch.setattr(gemm.policy, "on", True)
    return s


def _rand(shape, dtype=np.float32, seed=0):
    r = np.random.default_rng(seed).standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        r = r + 1j * np.random.default_rng(seed + 1).standard_normal(shape)
    return r.astype(dtype)


def _check(a, b, split, rtol=2e-5):
    before = split.counts["split"]
    got = gemm.matmul(a, b)
    assert got is not None and split.counts["split"] == before + 1  # the split path ran
    wide = np.complex128 if a.dtype.kind == "c" else np.float64
    want = np.matmul(a.astype(wide), b.astype(wide))
    assert got.shape == want.shape and got.dtype == a.dtype
    scale = np.abs(a).max() * np.abs(b).max() * a.shape[-1]
    np.testing.assert_allclose(got.astype(want.dtype), want, rtol=rtol, atol=rtol * scale)
    return got


@pytest.mark.parametrize(
    "sa, sb",
    [
        ((97, 61), (61, 133)),  # odd sizes, more columns than rows: blocks of columns
        ((301, 45), (45, 7)),  # many rows: blocks of rows
        ((5, 33, 47), (5, 47, 29)),  # batched: blocks of matrices
        ((1, 203, 40), (3, 40, 31)),  # a broadcast batch
        ((4, 2, 37, 19), (19, 23)),  # a stack times one matrix
        ((1, 150, 30), (30, 40)),  # a batch of one: blocks of rows
    ],
)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64])
def test_split_products_match_float64(split, sa, sb, dtype):
    _check(_rand(sa, dtype), _rand(sb, dtype, 1), split)


def test_transposed_strided_and_broadcast_operands(split):
    a, b = _rand((120, 90)), _rand((70, 120), seed=1)
    _check(a.T, b.T, split)  # both Fortran-ordered
    _check(a[::2, ::3], b.T[1::4, ::-1], split)  # strided rows and columns, a reversed axis
    _check(np.broadcast_to(np.float32(1.5), (64, 90)), a[:90, :80], split)  # zero strides (a sum's gradient)
    _check(np.broadcast_to(a[:40, :30], (3, 40, 30)), _rand((3, 30, 50), seed=2), split)


def test_into_a_given_output_and_16_bit_floats(split):
    a, b = _rand((80, 50)), _rand((50, 60), seed=1)
    out = np.full((80, 70), np.nan, np.float32)
    r = gemm.matmul(a, b, out[:, 5:65])
    assert r.base is out and np.isnan(out[:, :5]).all() and np.isnan(out[:, 65:]).all()
    np.testing.assert_allclose(out[:, 5:65], a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    from ml_dtypes import bfloat16

    for half in (np.float16, bfloat16):
        ah, bh = a.astype(half), b.astype(half)
        got = gemm.matmul(ah, bh)
        assert got.dtype == half  # computed in float32 and rounded once, as the whole product is
        want = (ah.astype(np.float32) @ bh.astype(np.float32)).astype(half)
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_a_default_size_product_is_bit_for_bit_the_whole_one():
    """At the default thresholds every block is large enough for OpenBLAS's packed kernel, the one
    the whole product takes; OpenBLAS never cuts K, so each element is summed in the same order."""
    s = parallel.Splitter(2)
    for sa, sb in (((1024, 256), (256, 256)), ((200, 1024), (1024, 768)), ((6, 128, 256), (6, 256, 192))):
        a, b = _rand(sa), _rand(sb, seed=1)
        gemm.blas_pin.enter()
        try:
            whole = np.matmul(a, b)
        finally:
            gemm.blas_pin.leave()
        saved = gemm.splitter
        gemm.splitter = s
        try:
            got = gemm.matmul(a, b)
            fortran = gemm.matmul(np.asfortranarray(a), b)
        finally:
            gemm.splitter = saved
        np.testing.assert_array_equal(got, whole)
        np.testing.assert_array_equal(fortran, whole)
    assert s.counts["split"] == 6


def test_small_products_vectors_integers_and_one_thread_are_left_whole(split, monkeypatch):
    a = _rand((64, 64))
    monkeypatch.setattr(gemm, "MIN_SPLIT_FLOPS", 2 * 64**3 + 1)
    assert gemm.matmul(a, a) is None  # under the size
    monkeypatch.setattr(gemm, "MIN_SPLIT_FLOPS", 1)
    assert gemm.matmul(a, a[:, :1]) is None and gemm.matmul(a[:1], a) is None  # GEMV
    assert gemm.matmul(a.astype(np.int64), a.astype(np.int64)) is None
    assert gemm.matmul(a, a.astype(np.float64)) is None  # mixed dtypes: the shared kernel's promotion
    monkeypatch.setattr(gemm, "splitter", parallel.Splitter(1))
    assert gemm.matmul(a, a) is None
    np.testing.assert_array_equal(gemm.product(a, a), np.matmul(a, a))  # the whole product


def test_busy_cores_leave_the_product_to_the_caller(split):
    split.load = parallel.Load()
    split.load.cores, split.load.others, split.load._next = 3, 2.5, float("inf")  # others hold 2.5 cores
    a, b = _rand((90, 40)), _rand((40, 70), seed=1)
    got = gemm.matmul(a, b)
    assert split.counts == {"split": 0, "busy": 1, "helper_chunks": 0}
    np.testing.assert_allclose(got, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)


class _FakeBlas:
    def __init__(self, n: int) -> None:
        self.n, self.calls = n, []

    def get(self) -> int:
        return self.n

    def set(self, n: int) -> None:
        self.calls.append(n)
        self.n = n


def test_the_pin_puts_the_callers_count_back_after_the_last_call():
    pin = gemm.BlasPin()
    lib = _FakeBlas(4)
    pin._ready, pin.funcs = True, [(lib.get, lib.set)]
    pin.enter()
    assert lib.n == 1
    pin.enter()  # nested (an op inside an op, or another thread): nothing changes
    pin.leave()
    assert lib.n == 1
    pin.leave()
    assert lib.n == 4 and lib.calls == [1, 4]
    lib.n = 1  # the user's count is already 1: nothing is set
    pin.enter()
    pin.leave()
    assert lib.calls == [1, 4]


def test_backend_ops_run_with_the_blas_on_one_thread_and_put_it_back(monkeypatch):
    if not gemm.blas_pin.available:
        pytest.skip(f"numpy's BLAS cannot be pinned here: {gemm.blas_pin.why_not}")
    from ember_cpu.backend import _fits_threads  # noqa: PLC0415

    monkeypatch.setattr(gemm.policy, "on", True)
    monkeypatch.setattr(gemm, "RECENT", 1e9)
    monkeypatch.setattr(gemm.splitter, "last_own", 0.0)  # as if ember's threads had split a kernel of their own
    get = gemm.blas_pin.funcs[0][0]
    before = get()
    seen = []
    kernel = _fits_threads(lambda a, b: seen.append(get()) or a @ b)
    a = np.ones((3, 3), np.float32)
    np.testing.assert_array_equal(kernel(a, a), a @ a)
    assert seen == [1] and get() == before
    dev = em.Device("cpu")
    x = em.tensor(_rand((300, 200)), device=dev)
    y = (x @ em.tensor(_rand((200, 400), seed=1), device=dev)).numpy()  # large enough to split
    assert y.shape == (300, 400) and get() == before


def test_blocks_of_attention_over_embers_threads_give_the_serial_result(monkeypatch):
    """Attention's blocks (ember_cpu.attention) over the splitter: the same bits as in order."""
    from ember_cpu import attention as attn  # noqa: PLC0415

    monkeypatch.setattr(gemm.policy, "on", True)
    monkeypatch.setattr(attn, "BLOCK_SCORES", 64)
    q, k, v, g = (_rand((2, 3, 9, 8), seed=i) for i in range(4))

    def both():
        return (
            attn.attention_forward(q, k, v, None, is_causal=True, scale=0.3),
            attn.attention_backward(g, q, k, v, None, is_causal=True, scale=0.3),
        )

    s = parallel.Splitter(3)
    monkeypatch.setattr(gemm, "splitter", s)
    threaded = both()
    assert s.counts["split"] == 2
    monkeypatch.setattr(gemm, "splitter", parallel.Splitter(1))
    for a, b in zip(threaded, both()):
        np.testing.assert_array_equal(a, b)


def test_convolutions_split_their_products(split, monkeypatch):
    pytest.importorskip("numba", reason="the conv kernels need numba")
    from ember_cpu import conv_kernels  # noqa: PLC0415

    x, w = _rand((3, 6, 11, 9)), _rand((8, 3, 3, 3), seed=1)
    pads = ((1, 0), (2, 1))
    gemm.blas_pin.enter()  # as the backend's conv ops do while ember's threads are in use
    try:
        got = [
            conv_kernels.conv2d(x, w, None, (1, 1), pads, (1, 1), 2),
            conv_kernels.conv2d_weight_grad(_rand((3, 8, 10, 10), seed=2), x, (3, 3), (1, 1), pads, (1, 1), 2),
            conv_kernels.conv2d_transpose(_rand((3, 8, 10, 10), seed=3), w, None, (11, 9), (1, 1), pads, (1, 1), 2),
        ]
    finally:
        gemm.blas_pin.leave()
    assert split.counts["split"] >= 3
    monkeypatch.setattr(gemm.policy, "on", False)
    want = [
        conv_kernels.conv2d(x, w, None, (1, 1), pads, (1, 1), 2),
        conv_kernels.conv2d_weight_grad(_rand((3, 8, 10, 10), seed=2), x, (3, 3), (1, 1), pads, (1, 1), 2),
        conv_kernels.conv2d_transpose(_rand((3, 8, 10, 10), seed=3), w, None, (11, 9), (1, 1), pads, (1, 1), 2),
    ]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_the_setting_is_checked(monkeypatch):
    from ember_cpu import settings

    for value, on in (("", True), ("1", True), (" 0 ", False), ("off", False)):
        monkeypatch.setenv("EMBER_CPU_SPLIT_GEMM", value)
        assert settings.split_gemm() is on
    monkeypatch.setenv("EMBER_CPU_SPLIT_GEMM", "split")
    with pytest.raises(InvalidArgumentError, match="EMBER_CPU_SPLIT_GEMM='split': expected 1 or 0"):
        settings.split_gemm()
    monkeypatch.delenv("EMBER_CPU_SPLIT_GEMM")
    monkeypatch.setattr(gemm.policy, "on", None)
    monkeypatch.setenv("EMBER_CPU_BLAS_THREADS", "auto")  # the BLAS is handed its threads: no split
    assert gemm.active() is False
    monkeypatch.setattr(gemm.policy, "on", None)
    monkeypatch.delenv("EMBER_CPU_BLAS_THREADS")
    assert gemm.active() is (gemm.SPLIT_GEMM and gemm.blas_pin.available)


def test_concurrent_callers_each_get_their_product(split):
    a, b = _rand((150, 60)), _rand((60, 90), seed=1)
    want = a.astype(np.float64) @ b
    results = [None] * 4

    def one(i):
        results[i] = gemm.matmul(a, b)

    ts = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for r in results:
        np.testing.assert_allclose(r, want, rtol=1e-5, atol=1e-4)


def test_products_are_split_only_while_embers_threads_have_kernels_of_their_own(split, monkeypatch):
    """Without a recent kernel of ember's own (a fused region, attention's blocks) the BLAS keeps
    its threads and products are not split; after one, the ops pin it and split."""
    from ember_cpu.backend import _fits_threads, _product  # noqa: PLC0415

    split.last_own = float("-inf")
    kernel = _fits_threads(lambda a, b: (gemm.blas_pin.held(), _product(a, b)))
    a, b = _rand((90, 40)), _rand((40, 70), seed=1)
    held, r = kernel(a, b)
    assert not held and split.counts["split"] == 0
    split.run(lambda lo, hi: None, 10, 1)  # a kernel of ember's own
    held, r = kernel(a, b)
    assert held and split.counts["split"] == 2  # that kernel and the product
    np.testing.assert_allclose(r, a.astype(np.float64) @ b, rtol=1e-5, atol=1e-4)
    gemm.matmul(a, b)  # a product does not count as a kernel of ember's own
    split.last_own = float("-inf")
    gemm.matmul(a, b)
    assert split.last_own == float("-inf")


def _mlp_grads_float64(x, y, w1, b1, w2, b2, w3, b3):
    """W2's MLP gradients by hand in float64: relu(x w1 + b1), relu(. w2 + b2), . w3 + b3, mean
    softmax cross-entropy."""
    z1 = x @ w1 + b1
    h1 = np.maximum(z1, 0)
    z2 = h1 @ w2 + b2
    h2 = np.maximum(z2, 0)
    logits = h2 @ w3 + b3
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    g = e / e.sum(axis=1, keepdims=True)
    g[np.arange(len(y)), y] -= 1.0
    g /= len(y)
    grads = {"w3": h2.T @ g, "b3": g.sum(axis=0)}
    g = (g @ w3.T) * (z2 > 0)
    grads.update(w2=h1.T @ g, b2=g.sum(axis=0))
    g = (g @ w2.T) * (z1 > 0)
    grads.update(w1=x.T @ g, b1=g.sum(axis=0))
    return grads


def test_an_mlp_step_issues_eight_products_on_views_and_none_for_the_input(monkeypatch):
    """W2's step (784 inputs, two hidden layers, 10 classes; smaller hidden and batch): 3 forward
    products and 5 backward ones, as torch: no product for the input's gradient (the input needs
    none), each transposed operand handed to the BLAS as a view of the saved array (no copy),
    every gradient against float64."""
    n, hid = 16, 48
    gen = np.random.default_rng(21)
    dims = ((784, hid), (hid, hid), (hid, 10))
    p_np = {}
    for i, (fan_in, fan_out) in enumerate(dims, start=1):
        p_np[f"w{i}"] = (gen.standard_normal((fan_in, fan_out)) * fan_in**-0.5).astype(np.float32)
        p_np[f"b{i}"] = (gen.standard_normal(fan_out) * 0.1).astype(np.float32)
    x_np = gen.standard_normal((n, 784)).astype(np.float32)
    y_np = gen.integers(0, 10, n)
    dev = em.Device("cpu").autodiff()
    seen = []
    kernel = dev._state.impls["matmul"]

    def counting(a, b):
        seen.append(
            (a.shape, b.shape, *((t.flags.c_contiguous, t.flags.f_contiguous, t.base is not None) for t in (a, b)))
        )
        return kernel(a, b)

    monkeypatch.setitem(dev._state.impls, "matmul", counting)
    x, y = em.tensor(x_np, device=dev), em.tensor(y_np, device=dev)
    p = {k: em.tensor(v, device=dev, requires_grad=True) for k, v in p_np.items()}
    h = em.relu(x @ p["w1"] + p["b1"])
    h = em.relu(h @ p["w2"] + p["b2"])
    em.cross_entropy(h @ p["w3"] + p["b3"], y).backward()
    grads = {k: t.grad.numpy() for k, t in p.items()}
    shapes = [(a, b) for a, b, *_ in seen]
    assert shapes == [
        ((n, 784), (784, hid)), ((n, hid), (hid, hid)), ((n, hid), (hid, 10)),  # forward
        ((n, 10), (10, hid)), ((hid, n), (n, 10)),  # layer 3: input gradient, weight gradient
        ((n, hid), (hid, hid)), ((hid, n), (n, hid)),  # layer 2
        ((784, n), (n, hid)),  # layer 1: the weight gradient alone
    ], shapes  # fmt: skip
    # the 5 transposed operands (W^T, then X^T or H^T) come as F-ordered views of the saved arrays
    flags = [f for s in seen for f in s[2:]]
    assert sum(not c for c, _, _ in flags) == 5 and all(f and v for c, f, v in flags if not c), seen
    wide = {k: v.astype(np.float64) for k, v in p_np.items()}
    want = _mlp_grads_float64(x_np.astype(np.float64), y_np, **wide)
    for k in p_np:
        np.testing.assert_allclose(grads[k], want[k], rtol=1e-4, atol=1e-6, err_msg=k)

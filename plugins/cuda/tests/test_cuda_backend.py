"""ember-cuda's own tests: what the conformance suite does not cover (streams, graphs, DLPack,
memory accounting, errors, the native paths actually running). They need an NVIDIA GPU and
CuPy; elsewhere they skip with the reason the backend gives (CI has no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cuda import runtime

import ember as em
from ember.errors import DeviceUnavailableError, EmberError

pytestmark = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)


@pytest.fixture
def dev() -> em.Device:
    return em.Device.cuda(0)


def test_a_missing_index_lists_the_devices_there_are(dev: em.Device) -> None:
    n = runtime.device_count()
    with pytest.raises(DeviceUnavailableError, match=rf"cuda:{n} does not exist.*cuda:0 \("):
        _ = em.Device.cuda(n).backend


def test_random_bits_are_the_cpu_stream() -> None:
    on_gpu = em.random.uniform(shape=(4099,), key=em.random.key(1234), device="cuda:0").numpy()
    on_cpu = em.random.uniform(shape=(4099,), key=em.random.key(1234), device="cpu").numpy()  # a key is a stream
    np.testing.assert_array_equal(on_gpu, on_cpu)


def test_matmul_is_strict_float32_by_default(dev: em.Device) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((256, 512)), rng.standard_normal((512, 128))
    got = (em.tensor(a, dtype="float32", device=dev) @ em.tensor(b, dtype="float32", device=dev)).numpy()
    want = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
    # TF32 would leave ~1e-3 relative error; IEEE float32 accumulation stays near 1e-6
    assert np.max(np.abs(got - want)) / np.max(np.abs(want)) < 2e-5
    assert dev.backend.tf32 is False


def test_memory_stats_count_live_tensors(dev: em.Device) -> None:
    before = dev.memory_stats()["in_use_bytes"]
    x = em.zeros((1024, 1024), device=dev).realize()  # 4 MiB (realize: a lazy zeros holds no memory)
    during = dev.memory_stats()["in_use_bytes"]
    assert during - before >= 4 * 2**20
    del x
    assert dev.memory_stats()["in_use_bytes"] == before
    stats = dev.memory_stats()
    assert stats["reserved_bytes"] >= stats["in_use_bytes"]
    assert stats["extra"]["driver_total_bytes"] > 0


def test_out_of_memory_says_how_much_and_what_to_try(dev: em.Device) -> None:
    total = dev.memory_stats()["extra"]["driver_total_bytes"]
    with pytest.raises(MemoryError, match=r"out of memory allocating .*reserved.*Try a smaller batch") as info:
        em.zeros((total // 2,), dtype="float32", device=dev).realize()  # twice the GPU's memory
    assert isinstance(info.value, EmberError)


def test_dlpack_with_cupy_and_torch_shares_memory(dev: em.Device) -> None:
    cp = runtime.cupy()
    x = em.arange(12, dtype="float32", device=dev)
    c = cp.from_dlpack(x)
    assert c.data.ptr == x._data.data.ptr
    back = em.from_dlpack(c, device=dev)
    assert back._data.data.ptr == c.data.ptr
    torch = pytest.importorskip("torch", reason="torch is the DLPack peer of this check")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    t = torch.from_dlpack(x)
    assert t.data_ptr() == x._data.data.ptr
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(12, dtype=np.float32))
    y = em.from_dlpack(torch.ones(3, device="cuda"), device=dev)
    np.testing.assert_array_equal(y.numpy(), np.ones(3, np.float32))


def test_a_graph_replays_to_the_same_result(dev: em.Device) -> None:
    cp = runtime.cupy()
    backend = dev.backend
    w = cp.asarray(np.random.default_rng(1).standard_normal((64, 64)).astype(np.float32))

    def step(x):  # noqa: ANN001, ANN202 - CuPy arrays in and out (no matmul: CuPy refuses cuBLAS in capture)
        return cp.tanh(x * w[:32]).sum(axis=1) * 2.0 + 1.0

    x0 = cp.asarray(np.random.default_rng(2).standard_normal((32, 64)).astype(np.float32))
    graph = backend.capture(step, x0)
    first = graph.replay().get()
    np.testing.assert_allclose(first, step(x0).get(), rtol=1e-6)
    x1 = cp.asarray(np.random.default_rng(3).standard_normal((32, 64)).astype(np.float32))
    second = graph.replay(x1).get()
    want = np.tanh(x1.get().astype(np.float64) * w.get()[:32].astype(np.float64)).sum(axis=1) * 2 + 1
    np.testing.assert_allclose(second, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(graph.replay().get(), second, rtol=0)  # same inputs, same result


def test_fused_activation_kernels_run(dev: em.Device, monkeypatch: pytest.MonkeyPatch) -> None:
    """gelu on float32 goes through the fused kernel, not the shared five-pass path."""
    from ember.array_module import nn as shared

    calls = []
    monkeypatch.setitem(shared.KERNELS, "gelu", lambda a: calls.append(a) or a)  # would be wrong
    from ember.device import invalidate

    backend = em.Device.cuda(0).backend
    backend._kernels = None  # rebuild the table with the patched fallback
    invalidate("cuda", "gelu")
    x = np.linspace(-4, 4, 1001)
    got = em.tensor(x, dtype="float32", device=dev).gelu().numpy()
    from math import erf

    want = np.array([0.5 * v * (1 + erf(v / np.sqrt(2))) for v in x.astype(np.float32).astype(np.float64)])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert calls == []  # the fallback never ran for float32
    em.tensor(x, dtype="float16", device=dev).gelu().realize()  # (a lazy op runs when realized)
    assert len(calls) == 1  # 16-bit floats take the shared path
    backend._kernels = None
    invalidate("cuda", "gelu")


def test_device_to_device_copy_stays_on_the_gpu(dev: em.Device) -> None:
    backend = dev.backend
    x = em.arange(10, dtype="float32", device=dev)
    assert backend.receive(em.Device.cpu().backend, x._data) is None  # from the host: the host path
    copied = backend.receive(backend, x._data)
    assert copied.data.ptr != x._data.data.ptr
    np.testing.assert_array_equal(copied.get(), np.arange(10, dtype=np.float32))


def test_a_failing_kernel_names_the_op_and_shapes(dev: em.Device) -> None:
    from ember_cuda.errors import KernelLaunchError

    backend = dev.backend
    cp = runtime.cupy()
    broken = backend._guard("demo", lambda a: cp.RawKernel("this is not CUDA", "k")((1,), (1,), (a,)), False)
    with pytest.raises(KernelLaunchError, match=r"demo\(float32\[3\]\) failed in CUDA"):
        broken(cp.zeros(3, cp.float32))


def test_another_stream_can_carry_the_work(dev: em.Device) -> None:
    import ember_cuda

    cp = runtime.cupy()
    s = cp.cuda.Stream(non_blocking=True)
    with ember_cuda.use_stream(s):
        assert ember_cuda.current_stream() == s
        y = (em.ones((4,), device=dev) * 3).numpy()
    np.testing.assert_array_equal(y, np.full(4, 3, np.float32))
    assert ember_cuda.current_stream() == dev.backend.stream


def test_training_on_the_gpu_matches_the_cpu() -> None:
    """A few SGD steps of a small MLP give the same losses on cuda as on cpu."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((64, 20)).astype(np.float32), rng.integers(0, 5, 64)
    losses = {}
    for name in ("cpu", "cuda:0"):
        dev = em.Device(name).autodiff()
        em.seed(7)
        model = em.nn.Sequential(em.nn.Linear(20, 32), em.nn.ReLU(), em.nn.Linear(32, 5)).to(dev)
        opt = em.optim.SGD(model.parameters(), lr=0.1)
        xs, ys = em.tensor(x, device=dev), em.tensor(y, device=dev)
        run = []
        for _ in range(5):
            loss = em.nn.functional.cross_entropy(model(xs), ys)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.append(float(loss.item()))
        losses[name] = run
    np.testing.assert_allclose(losses["cuda:0"], losses["cpu"], rtol=1e-4)

"""ember-cuda's own kernels: flash-style attention, the NF4/int8 dequantizing kernels, the
softmax row kernels and the direct launches of the elementwise kernels; each checked against
numpy float64 and checked to have run (their launch counters). They need an
NVIDIA GPU and CuPy; elsewhere they skip with the reason the backend gives (CI has no GPU)."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cuda import attention, kernels, quant, rows, runtime

import ember as em
import ember.nn.functional as F
from ember.ops.nn import softmax_backward
from ember.quant import dequant_matmul, dequantize
from ember.quant.formats import quantize_int8, quantize_nf4

pytestmark = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)


def reference_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, scale: float) -> np.ndarray:
    """softmax(q k^T * scale) v in float64; rows with no visible key are NaN, as in softmax."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if causal:
        n, m = q.shape[-2], k.shape[-2]
        s = np.where(np.arange(m)[None, :] <= np.arange(n)[:, None] + (m - n), s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
    return np.matmul(p, v)


CASES = [  # (q lead, k lead, L, S, head, causal)
    ((2, 4), (2, 4), 128, 128, 64, False),
    ((2, 4), (2, 4), 100, 77, 64, False),  # tiles cut short on both axes
    ((3,), (3,), 65, 200, 32, True),  # causal with more keys than queries
    ((1, 2), (1, 2), 150, 96, 128, True),  # causal with more queries: the first rows see nothing
    ((2, 3), (1, 3), 64, 64, 96, False),  # k and v broadcast over the first axis
    ((), (), 1, 1, 64, False),
]


@pytest.mark.parametrize(("qlead", "klead", "L", "S", "head", "causal"), CASES)
def test_flash_attention_matches_float64(qlead, klead, L, S, head, causal) -> None:  # noqa: ANN001
    rng = np.random.default_rng(L * 1000 + S)
    q = rng.standard_normal(qlead + (L, head)).astype(np.float32)
    k = rng.standard_normal(klead + (S, head)).astype(np.float32)
    v = rng.standard_normal(klead + (S, head)).astype(np.float32)
    before = attention.CALLS["scaled_dot_product_attention"]
    got = F.scaled_dot_product_attention(*(em.tensor(a, device="cuda:0") for a in (q, k, v)), is_causal=causal).numpy()
    assert attention.CALLS["scaled_dot_product_attention"] == before + 1, "the flash kernel did not run"
    want = reference_attention(*(a.astype(np.float64) for a in (q, k, v)), causal, 1 / np.sqrt(head))
    assert got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-4, atol=2e-5)


def test_flash_attention_in_bfloat16_and_its_gradient() -> None:
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 2, 70, 64)).astype(np.float32) for _ in range(3))
    gpu = em.Device.cuda(0).autodiff()
    tq, tk, tv = (em.tensor(a, device=gpu, requires_grad=True) for a in (q, k, v))
    out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    cot = rng.standard_normal(out.shape).astype(np.float32)
    (out * em.tensor(cot, device=gpu)).sum().backward()
    # the gradient goes through the composite rule on the same device: compare with the cpu backend
    cpu = em.Device.cpu().autodiff()
    cq, ck, cv = (em.tensor(a, device=cpu, requires_grad=True) for a in (q, k, v))
    (F.scaled_dot_product_attention(cq, ck, cv, is_causal=True) * em.tensor(cot, device=cpu)).sum().backward()
    for g, c in ((tq, cq), (tk, ck), (tv, cv)):
        np.testing.assert_allclose(g.grad.numpy(), c.grad.numpy(), rtol=1e-3, atol=1e-4)
    half = F.scaled_dot_product_attention(*(em.tensor(a, dtype="bfloat16", device="cuda:0") for a in (q, k, v)))
    want = reference_attention(*(a.astype(np.float64) for a in (q, k, v)), False, 1 / 8)
    assert half.dtype == em.bfloat16
    np.testing.assert_allclose(half.numpy().astype(np.float64), want, atol=3e-2)


def test_an_explicit_mask_goes_to_the_shared_kernel() -> None:
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 16, 32)).astype(np.float32) for _ in range(3))
    mask = rng.random((16, 16)) < 0.8
    mask[:, 0] = True
    before = attention.CALLS["scaled_dot_product_attention"]
    got = F.scaled_dot_product_attention(
        *(em.tensor(a, device="cuda:0") for a in (q, k, v)), attn_mask=em.tensor(mask, device="cuda:0")
    ).numpy()
    assert attention.CALLS["scaled_dot_product_attention"] == before
    s = np.where(mask, q.astype(np.float64) @ np.swapaxes(k, -1, -2) / np.sqrt(32), -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(got, (p / p.sum(-1, keepdims=True)) @ v, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("fmt", ["int8", "nf4"])
def test_dequantizing_kernels_run_and_decode_exactly(fmt: str) -> None:
    """The conformance suite checks dequant_matmul's values on every device; here: these kernels
    are the ones that ran, and the decoded weight is the CPU backend's, bit for bit."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((96, 130)).astype(np.float32)  # 96 * 130 is not a multiple of 64: a short block
    qw = quantize_int8(w) if fmt == "int8" else quantize_nf4(w, 64)
    params = {"format": qw.format, "shape": qw.shape, "block_size": qw.block_size or 64}
    x = rng.standard_normal((5, 130)).astype(np.float32)
    before = dict(quant.CALLS)
    on = {d: (em.tensor(qw.qweight, device=d), em.tensor(qw.absmax(), device=d)) for d in ("cpu", "cuda:0")}
    got_w = dequantize(*on["cuda:0"], dtype=em.float32, **params).numpy()
    got_y = dequant_matmul(em.tensor(x, device="cuda:0"), *on["cuda:0"], **params).numpy()
    assert quant.CALLS["dequantize"] == before.get("dequantize", 0) + 1
    assert quant.CALLS["dequant_matmul"] == before.get("dequant_matmul", 0) + 1
    want_w = dequantize(*on["cpu"], dtype=em.float32, **params).numpy()
    np.testing.assert_array_equal(got_w, want_w)
    np.testing.assert_allclose(got_y, x.astype(np.float64) @ want_w.T.astype(np.float64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(7, 513), (3, 4, 64), (1, 1), (2, 100000)])
def test_softmax_row_kernels_match_float64(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    x.reshape(-1, shape[-1])[0, :3] = -np.inf  # a few masked entries
    g = rng.standard_normal(shape).astype(np.float32)
    before = dict(rows.CALLS)
    t = em.tensor(x, device="cuda:0")
    y = em.softmax(t, axis=-1).numpy()
    ly = em.log_softmax(t, axis=-1).numpy()
    gy = softmax_backward(em.tensor(y, device="cuda:0"), em.tensor(g, device="cuda:0"), -1).numpy()
    for op in ("softmax", "log_softmax", "softmax_backward"):
        assert rows.CALLS[op] == before.get(op, 0) + 1, f"the {op} row kernel did not run"
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(y, want, rtol=2e-6, atol=1e-7)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(ly, np.log(want), rtol=2e-6, atol=2e-6)
    y64 = y.astype(np.float64)
    np.testing.assert_allclose(gy, y64 * (g - (g * y64).sum(-1, keepdims=True)), rtol=1e-5, atol=1e-6)


def _ce_float64(x: np.ndarray, t: np.ndarray, smoothing: float, ignore: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-row softmax cross-entropy and d(sum of g * loss)/dx for g = 1 / rows, in float64."""
    rows, n = x.shape
    z = x - x.max(1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    valid = t != ignore
    safe = np.where(valid, t, 0)
    loss = -(1 - smoothing) * logp[np.arange(rows), safe] - smoothing / n * logp.sum(1)
    hot = np.eye(n)[safe] * (1 - smoothing) + smoothing / n
    grad = (np.exp(logp) - hot) / rows * valid[:, None]
    return np.where(valid, loss, 0.0), grad


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("shape", [(512, 10), (37, 1000), (3, 1)])
def test_cross_entropy_row_kernels_match_float64(shape: tuple[int, int], smoothing: float) -> None:
    """The forward and the logits' gradient each run as one kernel (W3's and W2's loss), with an
    ignored target (-100) among the rows."""
    rng = np.random.default_rng(shape[1])
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    t = rng.integers(0, shape[1], shape[0])
    t[shape[0] // 2] = -100
    before = dict(rows.CALLS)
    dev = em.Device("cuda:0").autodiff()
    xt = em.tensor(x, device=dev).requires_grad_()
    per = F.cross_entropy(xt, em.tensor(t, device=dev), reduction="none", label_smoothing=smoothing)
    (per.sum() / shape[0]).backward()
    got_loss, got_grad = per.numpy(), xt.grad.numpy()
    for op in ("cross_entropy", "cross_entropy_backward"):
        assert rows.CALLS[op] == before.get(op, 0) + 1, f"the {op} row kernel did not run"
    want_loss, want_grad = _ce_float64(x.astype(np.float64), t, smoothing, -100)
    np.testing.assert_allclose(got_loss, want_loss, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(got_grad, want_grad, rtol=2e-5, atol=1e-7)


def test_softmax_of_a_fully_masked_row_is_nan_as_on_the_cpu() -> None:
    x = np.array([[-np.inf, -np.inf], [0.0, 1.0]], dtype=np.float32)
    got = em.softmax(em.tensor(x, device="cuda:0")).numpy()
    want = em.softmax(em.tensor(x)).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6)  # expf and numpy's exp may differ in the last bit


def test_elementwise_kernels_launch_directly(monkeypatch: pytest.MonkeyPatch) -> None:
    """add/mul/... and the activations reach the GPU through :class:`kernels.Launcher`, on small
    tensors (one element per thread) and large ones (float4), tensor-tensor and tensor-scalar."""
    from ember.device import invalidate

    launches = []
    real = kernels.Launcher.__call__
    monkeypatch.setattr(kernels.Launcher, "__call__", lambda self, *a: launches.append(a) or real(self, *a))
    backend = em.Device.cuda(0).backend
    backend._kernels = None
    for op in ("add", "mul", "sub", "div", "gelu"):
        invalidate("cuda", op)
    rng = np.random.default_rng(5)
    for n in (5, 64, 4096, 4099):
        for dt in ("float32", "float64", "int32", "int64"):
            a = (rng.standard_normal(n) * 100).astype(dt)
            b = (rng.standard_normal(n) * 100).astype(dt)
            b[b == 0] = 1
            ta, tb = em.tensor(a, device="cuda:0"), em.tensor(b, device="cuda:0")
            np.testing.assert_array_equal((ta + tb).numpy(), a + b)
            np.testing.assert_array_equal((ta * 3).numpy(), a * a.dtype.type(3))
            np.testing.assert_array_equal((ta - tb).numpy(), a - b)
            if dt.startswith("float"):
                np.testing.assert_allclose((ta / tb).numpy(), a / b, rtol=1e-7 if dt == "float32" else 1e-15)
                np.testing.assert_allclose((ta * 0.5).numpy(), a * a.dtype.type(0.5), rtol=1e-7)
    assert len(launches) == 4 * (3 * 4 + 2 * 2), "an elementwise op did not take the direct launch"
    backend._kernels = None
    for op in ("add", "mul", "sub", "div", "gelu"):
        invalidate("cuda", op)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_remainder_edge_cases_are_numpys(dtype: str) -> None:
    """Signed zeros, infinite and zero divisors and NaN, as numpy's remainder (ONNX's Mod too)."""
    v = np.array([0.0, -0.0, 1, -1, 5, -5, 3.5, -3.5, np.inf, -np.inf, np.nan, 1e30, 7, -7])
    a, b = np.meshgrid(v, np.array([1, -1, 2, -2, 0, -0.0, np.inf, -np.inf, np.nan, 0.3, -0.3, 3]))
    a, b = a.astype(dtype).ravel(), b.astype(dtype).ravel()
    got = em.remainder(em.tensor(a, device="cuda:0"), em.tensor(b, device="cuda:0")).numpy()
    with np.errstate(all="ignore"):
        want = np.remainder(a, b)
    np.testing.assert_array_equal(got, want)
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got)[ok], np.signbit(want)[ok])

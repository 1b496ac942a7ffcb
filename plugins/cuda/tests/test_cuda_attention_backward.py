"""The flash attention backward on a GPU (``attention_backward.py``): the packed op and autodiff
through it against numpy float64, each checked to have run its kernels (``attention.CALLS``);
the chunked fallback for a mask. They need an NVIDIA GPU and CuPy; elsewhere they skip with
the reason the backend gives (``test_attention_backward_without_gpu.py`` runs everywhere)."""

from __future__ import annotations

import numpy as np
import pytest
from ember_cuda import attention, runtime
from test_attention_backward_without_gpu import reference

import ember as em
import ember.nn.functional as F
from ember.ops.attention import attention_backward, packed_shapes

pytestmark = pytest.mark.skipif(
    runtime.device_count() == 0, reason=f"no CUDA device: {runtime.why_unavailable() or 'unknown'}"
)

FLASH = "scaled_dot_product_attention_backward"
CHUNKED = "attention_backward_chunked"


def _operands(qlead, klead, L, S, head, dtype=np.float32, seed=0):  # noqa: ANN001, ANN201
    rng = np.random.default_rng(seed + L * 1000 + S + head)
    q = rng.standard_normal(qlead + (L, head)).astype(dtype)
    k = rng.standard_normal(klead + (S, head)).astype(dtype)
    v = rng.standard_normal(klead + (S, head)).astype(dtype)
    g = rng.standard_normal(np.broadcast_shapes(qlead, klead) + (L, head)).astype(dtype)
    return q, k, v, g


def _packed(q, k, v, g, causal: bool, mask=None, dtype=None):  # noqa: ANN001, ANN201
    """The packed op on cuda:0, unpacked into numpy float64 gq, gk, gv."""
    args = [em.tensor(a, device="cuda:0", dtype=dtype) for a in (g, q, k, v)]
    if mask is not None:
        args.append(em.tensor(mask, device="cuda:0"))
    packed = attention_backward(*args, is_causal=causal).numpy().astype(np.float64)
    out, start = [], 0
    for shape in packed_shapes(q.shape, k.shape, v.shape):
        n = int(np.prod(shape))
        out.append(packed[start : start + n].reshape(shape))
        start += n
    return out


def _check(got, want, rtol: float, atol: float) -> None:  # noqa: ANN001
    for name, a, w in zip(("dq", "dk", "dv"), got, want):
        assert a.shape == w.shape, (name, a.shape, w.shape)
        np.testing.assert_allclose(a, w, rtol=rtol, atol=atol, err_msg=name)


CASES = [  # (q lead, k lead, L, S, head, causal)
    ((2, 4), (2, 4), 128, 128, 64, False),  # plain, whole tiles
    ((2, 4), (2, 4), 100, 77, 64, False),  # tiles cut short on both axes
    ((1, 2), (1, 2), 200, 200, 64, True),  # causal, L == S: tiles skipped on both sides
    ((3,), (3,), 65, 200, 32, True),  # causal with more keys than queries
    ((1, 2), (1, 2), 150, 96, 128, True),  # causal with more queries: the first 54 rows see nothing
    ((2, 3), (1, 3), 64, 64, 96, False),  # k and v broadcast over the first axis: gk, gv over (2, 3)
    ((), (), 1, 1, 64, False),
    ((2,), (2,), 77, 51, 32, False),  # odd lengths, each head size
    ((2,), (2,), 77, 51, 96, True),
    ((2,), (2,), 51, 77, 128, False),
]


@pytest.mark.parametrize(("qlead", "klead", "L", "S", "head", "causal"), CASES)
def test_flash_backward_matches_float64(qlead, klead, L, S, head, causal) -> None:  # noqa: ANN001
    q, k, v, g = _operands(qlead, klead, L, S, head)
    before = attention.CALLS[FLASH]
    got = _packed(q, k, v, g, causal)
    assert attention.CALLS[FLASH] == before + 1, "the flash backward did not run"
    want = [np.broadcast_to(w, a.shape) for w, a in zip(reference(q, k, v, g, causal, 1 / np.sqrt(head)), got)]
    _check(got, want, rtol=1e-4, atol=3e-5)
    if causal and L > S:  # rows that see no key: zero gradients
        assert not got[0][..., : L - S, :].any()


def test_flash_backward_is_deterministic() -> None:
    q, k, v, g = _operands((2, 4), (2, 4), 300, 300, 64)
    first = _packed(q, k, v, g, True)
    second = _packed(q, k, v, g, True)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_flash_backward_in_16_bits(dtype: str) -> None:
    """16-bit inputs computed in float32 and rounded back: compared with float64 over the rounded inputs."""
    q, k, v, g = _operands((2, 2), (2, 2), 90, 70, 64)
    before = attention.CALLS[FLASH]
    got = _packed(q, k, v, g, True, dtype=dtype)
    assert attention.CALLS[FLASH] == before + 1, "the flash backward did not run"
    rounded = [em.tensor(a, dtype=dtype).numpy().astype(np.float64) for a in (q, k, v, g)]
    want = reference(*rounded, True, 1 / 8)
    _check(got, want, rtol=2e-2, atol=2e-2 if dtype == "bfloat16" else 4e-3)


def test_autodiff_takes_the_flash_backward() -> None:
    """F.scaled_dot_product_attention's gradient on cuda runs the packed op (one flash backward),
    and the broadcast k/v's gradients are summed over the batch axis they were broadcast on."""
    q, k, v, _ = _operands((2, 3), (1, 3), 70, 90, 64)
    gpu = em.Device.cuda(0).autodiff()
    tq, tk, tv = (em.tensor(a, device=gpu, requires_grad=True) for a in (q, k, v))
    out = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    cot = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    before = attention.CALLS[FLASH]
    (out * em.tensor(cot, device=gpu)).sum().backward()
    assert attention.CALLS[FLASH] == before + 1, "autodiff did not take the flash backward"
    dq, dk, dv = reference(q, k, v, cot, True, 1 / 8)
    for t, w in ((tq, dq), (tk, dk.sum(0, keepdims=True)), (tv, dv.sum(0, keepdims=True))):
        np.testing.assert_allclose(t.grad.numpy(), w, rtol=1e-4, atol=5e-5)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_a_mask_takes_the_chunked_fallback(kind: str) -> None:
    q, k, v, g = _operands((2, 3), (2, 3), 40, 30, 64)
    rng = np.random.default_rng(2)
    if kind == "bool":
        mask = rng.random((40, 30)) < 0.7
        mask[5] = False  # a row that sees no key: zero gradients
    else:
        mask = rng.standard_normal((3, 40, 30)).astype(np.float32)
    flash, chunked = attention.CALLS[FLASH], attention.CALLS[CHUNKED]
    got = _packed(q, k, v, g, False, mask=mask)
    assert attention.CALLS[FLASH] == flash and attention.CALLS[CHUNKED] == chunked + 1
    _check(got, reference(q, k, v, g, False, 1 / 8, mask), rtol=1e-4, atol=3e-5)


def test_other_head_sizes_and_float64_take_the_chunked_fallback() -> None:
    for head, dtype in ((48, np.float32), (64, np.float64)):
        q, k, v, g = _operands((2,), (2,), 33, 45, head, dtype=dtype)
        chunked = attention.CALLS[CHUNKED]
        got = _packed(q, k, v, g, True)
        assert attention.CALLS[CHUNKED] == chunked + 1
        tol = 1e-10 if dtype == np.float64 else 3e-5
        _check(got, reference(q, k, v, g, True, 1 / np.sqrt(head)), rtol=1e-4, atol=tol)


def test_the_chunked_path_agrees_with_the_kernels() -> None:
    """EMBER_CUDA_FLASH_BACKWARD=chunked's path (cuBLAS over batch slices) on the kernels' own case."""
    from ember_cuda.attention_backward import flash_attention_backward

    backend = em.Device.cuda(0).backend
    cp = backend.cp
    table = {op: backend.implementation(op) for op in ("softmax", "softmax_backward")}
    flash = flash_attention_backward(cp, table)
    chunked = flash_attention_backward(cp, table, chunked=True)
    q, k, v, g = (cp.asarray(a) for a in _operands((2, 4), (2, 4), 130, 130, 64))
    before = attention.CALLS[CHUNKED]
    a = flash(g, q, k, v, is_causal=True, scale=0.125)
    b = chunked(g, q, k, v, is_causal=True, scale=0.125)
    assert attention.CALLS[CHUNKED] == before + 1
    np.testing.assert_allclose(cp.asnumpy(a), cp.asnumpy(b), rtol=1e-4, atol=3e-5)

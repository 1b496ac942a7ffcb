"""The flash attention kernels (ember_opencl.attention) against a numpy float64 reference:
the output and the three gradients, that the kernels ran (attention.CALLS), and their fallbacks."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember.dtypes import as_dtype
from ember_opencl import attention
from ember_opencl.backend import OpenCLBackend

RNG = np.random.default_rng(7)


@pytest.fixture(autouse=True)
def kernels_on_cpu_devices(monkeypatch):
    """The kernels run on CPU devices too (PoCL, where they are not the default: attention.ON_CPU)."""
    monkeypatch.setattr(attention, "ON_CPU", True)


def reference(q, k, v, g, mask=None, is_causal=False, scale=None):
    """(out, gq, gk, gv) in float64; rows that see no key: NaN out, zero gradients (the composite's)."""
    q, k, v, g = (np.asarray(a, np.float64) for a in (q, k, v, g))
    sc = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * sc
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        s = np.where(np.arange(S)[None, :] <= np.arange(L)[:, None] + (S - L), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    with np.errstate(invalid="ignore"):
        m = s.max(axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isinf(m), 0.0, m))
        p = e / e.sum(axis=-1, keepdims=True)
    out = p @ v
    p = np.where(np.isnan(p), 0.0, p)
    gp = g @ np.swapaxes(v, -1, -2)
    gs = p * (gp - np.sum(gp * p, axis=-1, keepdims=True)) * sc
    batch = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    gq, gk, gv = gs @ k, np.swapaxes(gs, -1, -2) @ q, np.swapaxes(p, -1, -2) @ g
    # the leaves' gradients sum over the axes they were broadcast along
    return out, _sum_to(gq, q.shape, batch), _sum_to(gk, k.shape, batch), _sum_to(gv, v.shape, batch)


def _sum_to(a: np.ndarray, shape: tuple[int, ...], batch: tuple[int, ...]) -> np.ndarray:
    a = np.broadcast_to(a, batch + a.shape[-2:])
    lead = a.ndim - len(shape)
    a = a.sum(axis=tuple(range(lead))) if lead else a
    axes = tuple(i for i, (n, m) in enumerate(zip(shape, a.shape)) if n == 1 and m != 1)
    return a.sum(axis=axes, keepdims=True) if axes else a


def run(dev, q, k, v, g, dtype="float32", **kw):
    """Forward and backward on the device: (out, gq, gk, gv) as float64 arrays."""
    ad = dev.autodiff()
    tq, tk, tv = (em.tensor(a.astype(as_dtype(dtype).numpy), device=ad, requires_grad=True) for a in (q, k, v))
    out = em.scaled_dot_product_attention(tq, tk, tv, **kw)
    (out * em.tensor(g.astype(as_dtype(dtype).numpy), device=ad)).sum().backward()
    return tuple(t.numpy().astype(np.float64) for t in (out, tq.grad, tk.grad, tv.grad))


def rounded(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` as the device holds it (the reference starts from the same rounded inputs)."""
    return a.astype(as_dtype(dtype).numpy).astype(np.float64)


def check(got, want, dtype: str) -> None:
    for name, x, w in zip(("out", "gq", "gk", "gv"), got, want):
        assert x.shape == w.shape, (name, x.shape, w.shape)
        np.testing.assert_array_equal(np.isnan(x), np.isnan(w), err_msg=name)
        size = float(np.nanmax(np.abs(w))) if np.isfinite(w).any() else 1.0
        rtol, atol = {"float32": (2e-5, 2e-6), "float16": (2e-2, 4e-3), "bfloat16": (5e-2, 3e-2)}[dtype]
        np.testing.assert_allclose(x, w, rtol=rtol, atol=atol * size, equal_nan=True, err_msg=name)


CASES = [
    # (q shape, k shape (v the same), causal)
    ((2, 3, 70, 64), (2, 3, 90, 64), False),  # L != S, batch dims, partial tiles
    ((2, 3, 70, 64), (2, 3, 90, 64), True),
    ((1, 2, 100, 32), (1, 2, 40, 32), True),  # L > S: the first 60 rows see no key
    ((3, 33, 96), (3, 47, 96), False),
    ((2, 65, 128), (2, 66, 128), True),
    ((2, 2, 40, 64), (1, 2, 50, 64), False),  # k and v broadcast along the first batch axis
    ((17, 32), (130, 32), True),  # no batch dims, S > L
]


@pytest.mark.parametrize("qs, ks, causal", CASES)
def test_matches_reference(dev, qs, ks, causal):
    q, k, v, g = (RNG.standard_normal(s) for s in (qs, ks, ks, qs))
    before = dict(attention.CALLS)
    got = run(dev, q, k, v, g, is_causal=causal)
    check(got, reference(q, k, v, g, is_causal=causal), "float32")
    # autodiff's backward read the log-sum-exp the forward kept (no stats pass)
    for op in (
        "scaled_dot_product_attention",
        "scaled_dot_product_attention_backward",
        "attention_backward_from_output",
    ):
        assert attention.CALLS[op] == before.get(op, 0) + 1, op


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_half_inputs_computed_in_float(dev, dtype, causal):
    if as_dtype(dtype) not in dev.capabilities.dtypes:
        pytest.skip(f"{dev} has no {dtype}")
    q, k, v, g = (rounded(RNG.standard_normal(s), dtype) for s in [(2, 2, 50, 64)] * 4)
    before = attention.CALLS["scaled_dot_product_attention_backward"]
    got = run(dev, q, k, v, g, dtype, is_causal=causal)
    check(got, reference(q, k, v, g, is_causal=causal), dtype)
    assert attention.CALLS["scaled_dot_product_attention_backward"] == before + 1


def test_heads_read_in_place(dev):
    """q, k, v as (B, h, L, E) views of (B, L, h, E) projections (strided rows, no copy), and a scale."""
    ad = dev.autodiff()
    x = [RNG.standard_normal((2, 37, 3, 32)) for _ in range(3)]
    g = RNG.standard_normal((2, 3, 37, 32))
    leaves = [em.tensor(a.astype(np.float32), device=ad, requires_grad=True) for a in x]
    q, k, v = (t.permute((0, 2, 1, 3)) for t in leaves)
    before = attention.CALLS["scaled_dot_product_attention"]
    out = em.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)
    (out * em.tensor(g.astype(np.float32), device=ad)).sum().backward()
    assert attention.CALLS["scaled_dot_product_attention"] == before + 1
    want = reference(*(a.transpose(0, 2, 1, 3) for a in x), g, is_causal=True, scale=0.3)
    got = (out.numpy(),) + tuple(t.grad.numpy().transpose(0, 2, 1, 3) for t in leaves)
    check(tuple(a.astype(np.float64) for a in got), want, "float32")


def test_backward_is_deterministic(dev):
    q, k, v, g = (RNG.standard_normal((2, 90, 64)).astype(np.float32) for _ in range(4))
    first = run(dev, q, k, v, g)
    again = run(dev, q, k, v, g)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_work_groups_of_64(dev, monkeypatch):
    """The 64-item variant (a device taking no more than 64 items a group) on this device."""
    small = attention._plan(64, 64, 48 * 1024)
    assert small is not None and small.items == 64
    monkeypatch.setattr(attention, "plan", lambda rt, head: small)
    q, k, v, g = (RNG.standard_normal(s) for s in ((2, 45, 64), (2, 70, 64), (2, 70, 64), (2, 45, 64)))
    got = run(dev, q, k, v, g, is_causal=True)
    check(got, reference(q, k, v, g, is_causal=True), "float32")


@pytest.mark.parametrize("head", attention.HEAD_SIZES)
def test_tiles_fit_nvidia_local_memory(head):
    """128 items a group and at most 48 KiB of local memory per kernel; a smaller device gets smaller
    tiles, or none (the composite paths)."""
    p = attention._plan(head, 1024, 48 * 1024)
    assert p is not None and p.items == 128
    assert attention.forward_bytes(head, *p.forward) <= 48 * 1024
    assert attention.dkdv_bytes(head, *p.dkdv) <= 48 * 1024
    assert attention.dq_bytes(head, *p.dq) <= 48 * 1024
    q = attention._plan(head, 1024, 16 * 1024)
    assert q is None or attention.forward_bytes(head, *q.forward) <= 16 * 1024
    assert attention._plan(head, 1024, 1024) is None
    assert attention._plan(head + 8, 1024, 48 * 1024) is None  # other head sizes: the composite paths


@pytest.mark.parametrize(
    "case",
    ["mask", "head40", "float64"],
)
def test_uncovered_cases_take_the_composite(dev, case):
    """A mask, another head size or float64: the composite forward and the composite backward
    on this backend's kernels, with the reference's results."""
    dtype = "float64" if case == "float64" else "float32"
    if as_dtype(dtype) not in dev.capabilities.dtypes:
        pytest.skip(f"{dev} has no {dtype}")
    E = 40 if case == "head40" else 32
    # (3, 2) batches of 20 x 30 scores: the kernel declines the backward, the core's composite runs it
    q, k, v, g = (RNG.standard_normal(s) for s in ((3, 2, 20, E), (3, 2, 30, E), (3, 2, 30, E), (3, 2, 20, E)))
    kw: dict = {"is_causal": True}
    mask = None
    if case == "mask":
        mask = RNG.random((20, 30)) < 0.6
        mask[0] = False  # a row that sees no key
        kw = {"attn_mask": em.tensor(mask, device=dev.autodiff())}
    before = dict(attention.CALLS)
    got = run(dev, q, k, v, g, dtype, **kw)
    want = reference(q, k, v, g, mask=mask, is_causal=mask is None)
    check(got, want, "float32")
    for op in ("attention_forward_composite", "attention_backward_declined"):
        assert attention.CALLS[op] == before.get(op, 0) + 1, op
    assert attention.CALLS["scaled_dot_product_attention"] == before.get("scaled_dot_product_attention", 0)


def test_cpu_devices_take_the_composite_by_default(dev, monkeypatch):
    if not dev.backend.rt.is_cpu:
        pytest.skip("a GPU runs the kernels by default")
    monkeypatch.setattr(attention, "ON_CPU", False)
    q, k, v, g = (RNG.standard_normal((2, 20, 64)) for _ in range(4))
    before = dict(attention.CALLS)
    check(run(dev, q, k, v, g), reference(q, k, v, g), "float32")
    assert attention.CALLS["attention_forward_composite"] == before.get("attention_forward_composite", 0) + 1
    assert attention.CALLS["attention_backward_declined"] == before.get("attention_backward_declined", 0) + 1


def test_switch_off(dev, monkeypatch):
    """EMBER_OPENCL_FLASH=0: the composite forward, and no native backward (autodiff's rule)."""
    backend = dev.backend
    monkeypatch.setenv("EMBER_OPENCL_FLASH", "0")
    table = OpenCLBackend.native_kernels(backend)
    assert "scaled_dot_product_attention_backward" not in table
    assert table["scaled_dot_product_attention"] == backend._attention_composite
    monkeypatch.setenv("EMBER_OPENCL_FLASH", "1")
    assert "scaled_dot_product_attention_backward" in OpenCLBackend.native_kernels(backend)


def _launched(monkeypatch, names: list[str]) -> None:
    from ember_opencl.runtime import Runtime

    plain = Runtime.launch

    def counted(self, knl, gsize, lsize, args):
        names.append(knl.function_name)
        plain(self, knl, gsize, lsize, args)

    monkeypatch.setattr(Runtime, "launch", counted)


@pytest.mark.parametrize("causal", [False, True])
def test_backward_given_the_output_reads_the_kept_statistics(dev, monkeypatch, causal):
    """``attention_backward_from_output`` with the flash forward's output runs the delta pass, not the
    stats pass; without kept statistics (the same values in another handle) it runs the stats pass;
    both match the reference, and the plain backward op."""
    from ember.ops.attention import attention_backward, attention_backward_from_output

    q, k, v, g = (RNG.standard_normal(s) for s in ((2, 2, 100, 32), (2, 2, 40, 32), (2, 2, 40, 32), (2, 2, 100, 32)))
    tq, tk, tv, tg = (em.tensor(a.astype(np.float32), device=dev) for a in (q, k, v, g))
    out = em.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    _, *want = reference(q, k, v, g, is_causal=causal)
    names: list[str] = []
    _launched(monkeypatch, names)

    def unpacked(packed):
        a = packed.numpy().astype(np.float64)
        n_q, n_k = q.size, k.size
        return a[:n_q].reshape(q.shape), a[n_q : n_q + n_k].reshape(k.shape), a[n_q + n_k :].reshape(v.shape)

    kept = unpacked(attention_backward_from_output(tg, tq, tk, tv, out, is_causal=causal))
    assert names == ["ember_flash_delta", "ember_flash_dkdv", "ember_flash_dq"]
    names.clear()
    copied = unpacked(attention_backward_from_output(tg, tq, tk, tv, out + 0.0, is_causal=causal))
    assert [n for n in names if n.startswith("ember_flash")] == [
        "ember_flash_stats",
        "ember_flash_dkdv",
        "ember_flash_dq",
    ]
    names.clear()
    plain = unpacked(attention_backward(tg, tq, tk, tv, is_causal=causal))
    assert names == ["ember_flash_stats", "ember_flash_dkdv", "ember_flash_dq"]
    for got in (kept, copied, plain):
        check((np.zeros(1),) + got, (np.zeros(1),) + tuple(want), "float32")
    names.clear()
    other = unpacked(attention_backward_from_output(tg, tq, tk, tv, out, is_causal=causal, scale=0.5))
    assert names[0] == "ember_flash_stats"  # kept for another scale: not used
    _, *want = reference(q, k, v, g, is_causal=causal, scale=0.5)
    check((np.zeros(1),) + other, (np.zeros(1),) + tuple(want), "float32")


def test_em_jit_replays_the_backward_given_the_output(dev):
    """A step (forward, backward through the kept statistics, SGD on q, k, v) replayed by em.jit
    matches the same steps run eagerly."""

    def make():
        em.seed(0)
        ad = dev.autodiff()
        init = np.random.default_rng(3)
        leaves = [em.tensor(init.standard_normal((2, 2, 48, 32)).astype(np.float32), device=ad, requires_grad=True)
                  for _ in range(3)]  # fmt: skip

        def step(g):
            for t in leaves:
                t.grad = None
            out = em.scaled_dot_product_attention(*leaves, is_causal=True)
            loss = (out * g).sum()
            loss.backward()
            with em.no_grad():
                for t in leaves:
                    t -= 0.05 * t.grad
            return loss

        return leaves, step

    eager_leaves, eager = make()
    jit_leaves, jitted = make()
    jitted = em.jit(jitted)
    rng = np.random.default_rng(4)
    before = attention.CALLS["attention_backward_from_output"]
    for i in range(6):
        g = rng.standard_normal((2, 2, 48, 32)).astype(np.float32)
        a = eager(em.tensor(g, device=dev.autodiff()))
        b = jitted(em.tensor(g, device=dev.autodiff()))
        np.testing.assert_allclose(b.item(), a.item(), rtol=1e-5, err_msg=f"loss, step {i}")
        for x, y in zip(jit_leaves, eager_leaves):
            np.testing.assert_allclose(x.numpy(), y.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"step {i}")
    assert attention.CALLS["attention_backward_from_output"] > before
    assert jitted.captures and jitted.captures[0].replays >= 3

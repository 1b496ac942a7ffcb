"""The host-time shortcuts of a training step (conv's and max_pool's remembered argument checks,
where's scalar operand, the lazy layer's inline paths) give the answers and the errors of the
general paths, whatever ran before; and the shortcuts are taken (counted calls, no clocks)."""

import sys
from collections import Counter

import numpy as np
import pytest

import ember as em
from ember.errors import ArgumentTypeError, DTypeError, ShapeError
from ember.ops import conv as conv_module
from ember.ops import pooling as pooling_module


def _conv_ref(x, w, b=None, stride=(1, 1), padding=(0, 0)):
    """Cross-correlation of (N, C, H, W) with (O, C, KH, KW) in float64, by loops."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride[0] + 1, (wd - kw) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * stride[0] : i * stride[0] + kh, j * stride[1] : j * stride[1] + kw]
            out[:, :, i, j] = np.tensordot(patch, w.astype(np.float64), axes=([1, 2, 3], [1, 2, 3]))
    if b is not None:
        out += b.astype(np.float64)[None, :, None, None]
    return out


def _pool_ref(x, k):
    n, c, h, w = x.shape
    return x.astype(np.float64)[:, :, : h // k * k, : w // k * k].reshape(n, c, h // k, k, w // k, k).max(axis=(3, 5))


@pytest.fixture
def conv_data(rng):
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    return x, w, b


@pytest.mark.parametrize(
    ("kwargs", "ref_kwargs"),
    [
        ({}, {}),
        ({"padding": 1}, {"padding": (1, 1)}),
        ({"padding": "same"}, {"padding": (1, 1)}),
        ({"stride": (2, 1), "padding": (1, 0)}, {"stride": (2, 1), "padding": (1, 0)}),
        ({"stride": [2, 2]}, {"stride": (2, 2)}),  # unhashable: the general path every time
    ],
)
def test_conv_repeated_matches_reference(conv_data, kwargs, ref_kwargs):
    x, w, b = conv_data
    tx, tw, tb = em.tensor(x), em.tensor(w), em.tensor(b)
    ref = _conv_ref(x, w, b, **ref_kwargs)
    for _ in range(3):
        np.testing.assert_allclose(em.conv(tx, tw, tb, **kwargs).numpy(), ref, rtol=1e-5, atol=1e-5)
    ref = _conv_ref(x[:1], w, None, **ref_kwargs)[0]
    for _ in range(2):  # unbatched (C, H, W): the batch axis added and taken away on the remembered path too
        np.testing.assert_allclose(em.conv(tx[0], tw, **kwargs).numpy(), ref, rtol=1e-5, atol=1e-5)


def test_conv_gradients_on_the_remembered_path(conv_data):
    x, w, b = conv_data
    tw = em.tensor(w, device=em.Device("cpu").autodiff()).requires_grad_()
    tx = em.tensor(x, device=tw.device)
    grads = []
    for _ in range(2):
        tw.grad = None
        em.conv(tx, tw, padding=1).sum().backward()
        grads.append(tw.grad.numpy())
    # d(sum)/dw[o, c, i, j] = sum over n, positions of the padded input's window element
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros(w.shape)
    for i in range(3):
        for j in range(3):
            ref[:, :, i, j] = xp[:, :, i : i + 7, j : j + 6].sum(axis=(0, 2, 3))[None, :]
    for g in grads:
        np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ({"stride": True}, ArgumentTypeError),
        ({"dilation": True}, ArgumentTypeError),
        ({"groups": True}, ShapeError),
        ({"padding": True}, ArgumentTypeError),
        ({"stride": 0}, ShapeError),
    ],
)
def test_conv_refuses_after_the_accepted_arguments_were_seen(conv_data, bad, error):
    x, w, _ = conv_data
    tx, tw = em.tensor(x), em.tensor(w)
    good = {k: 1 for k in bad}
    em.conv(tx, tw, **good)
    em.conv(tx, tw, **good)
    with pytest.raises(error, match="conv"):
        em.conv(tx, tw, **bad)


def test_conv_dtype_check_follows_autocast(conv_data):
    x, w, _ = conv_data
    tx, tw = em.tensor(x), em.tensor(w).astype(em.float16)
    with em.autocast():  # both run in float16: the weight matches
        em.conv(tx, tw)
        em.conv(tx, tw)
    with pytest.raises(DTypeError, match="weight"):
        em.conv(tx, tw)


def test_conv_errors_are_not_remembered(conv_data):
    x, w, _ = conv_data
    tx, tw = em.tensor(x), em.tensor(w[:, :2])  # 2 input channels for a 3-channel input
    for _ in range(2):
        with pytest.raises(ShapeError, match="input channels"):
            em.conv(tx, tw)


def test_conv_remembered_path_skips_the_checks(conv_data, monkeypatch):
    x, w, b = conv_data
    tx, tw, tb = em.tensor(x), em.tensor(w), em.tensor(b)
    em.conv(tx, tw, tb, padding=1)

    def checks(*args, **kwargs):
        raise AssertionError("the argument checks ran again")

    monkeypatch.setattr(conv_module, "_conv_args", checks)
    np.testing.assert_allclose(
        em.conv(tx, tw, tb, padding=1).numpy(), _conv_ref(x, w, b, padding=(1, 1)), rtol=1e-5, atol=1e-5
    )


def test_conv_remembered_table_is_bounded(conv_data, monkeypatch):
    x, w, _ = conv_data
    monkeypatch.setattr(conv_module, "_MAX_ARGS", 2)
    monkeypatch.setattr(conv_module, "_CONV_ARGS", {})
    tx, tw = em.tensor(x), em.tensor(w)
    for p in range(4):
        np.testing.assert_allclose(
            em.conv(tx, tw, padding=p).numpy(), _conv_ref(x, w, padding=(p, p)), rtol=1e-5, atol=1e-5
        )
        assert len(conv_module._CONV_ARGS) <= 2


@pytest.mark.parametrize("k", [2, (2, 2), 3])
def test_max_pool_repeated_matches_reference(rng, k):
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    kk = k if isinstance(k, int) else k[0]
    for _ in range(3):
        np.testing.assert_array_equal(em.max_pool(em.tensor(x), k).numpy(), _pool_ref(x, kk))
        if not isinstance(k, int):  # (C, H, W) with a 2-d kernel: unbatched (an int kernel reads it as 1-d)
            np.testing.assert_array_equal(em.max_pool(em.tensor(x[0]), k).numpy(), _pool_ref(x[:1], kk)[0])


def test_max_pool_refuses_after_the_accepted_arguments_were_seen(rng):
    x = em.tensor(rng.standard_normal((1, 2, 6, 6)).astype(np.float32))
    em.max_pool(x, 2, stride=1)
    em.max_pool(x, 2, stride=1)
    with pytest.raises(ArgumentTypeError, match="max_pool"):
        em.max_pool(x, 2, stride=True)
    with pytest.raises(ShapeError, match="padding"):
        em.max_pool(x, 2, padding=2)
    with pytest.raises(ShapeError, match="padding"):
        em.max_pool(x, 2, padding=2)


def test_max_pool_remembered_path_skips_the_checks(rng, monkeypatch):
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    em.max_pool(em.tensor(x), 2)

    def checks(*args, **kwargs):
        raise AssertionError("the argument checks ran again")

    monkeypatch.setattr(pooling_module, "_pool_args", checks)
    np.testing.assert_array_equal(em.max_pool(em.tensor(x), 2).numpy(), _pool_ref(x, 2))


def test_where_scalar_operands_match_numpy():
    ref = np.array([1.5, -2.0, 0.0, 3.0], dtype=np.float32)
    x = em.tensor(ref)
    np.testing.assert_array_equal(em.where(x > 0, x, 0.0).numpy(), np.where(ref > 0, ref, 0.0))
    np.testing.assert_array_equal(em.where(x > 0, 2, x).numpy(), np.where(ref > 0, 2.0, ref))
    out = em.where(x > 0, x, 1j)
    assert out.dtype == em.complex64
    np.testing.assert_array_equal(out.numpy(), np.where(ref > 0, ref, 1j))
    i = em.tensor(np.array([1, 2, 3], dtype=np.int8))
    with pytest.raises(DTypeError, match="does not fit"):
        em.where(i > 1, i, 300)
    col = em.tensor(np.array([[1.0], [2.0]], dtype=np.float32))
    np.testing.assert_array_equal(em.where(x > 0, x, col).numpy(), np.where(ref > 0, ref, [[1.0], [2.0]]))


def _calls(fn, where):
    """Python calls into functions whose file path contains ``where`` while ``fn`` runs."""
    counts = Counter()

    def prof(frame, event, arg):
        if event == "call" and where in frame.f_code.co_filename:
            counts[frame.f_code.co_name] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts


def test_conv_and_pool_repeat_in_few_calls(conv_data):
    """A repeated conv + max_pool passes through few core functions (measured 1 and 2 with the
    remembered checks, 36 and 21 without): a guard against losing the shortcut."""
    x, w, b = conv_data
    tx, tw, tb = em.tensor(x), em.tensor(w), em.tensor(b)
    y = em.conv(tx, tw, tb, padding=1)
    em.max_pool(y, 2)
    conv_calls = _calls(lambda: em.conv(tx, tw, tb, padding=1), "/ember/ops/")
    pool_calls = _calls(lambda: em.max_pool(y, 2), "/ember/ops/")
    assert sum(conv_calls.values()) <= 6, conv_calls
    assert sum(pool_calls.values()) <= 6, pool_calls


def test_planned_pool_requests_take_few_calls():
    """A step plan's request and release (the recorded W3 trace, planned on a fake paged device) pass
    through at most 3 Python functions together on average (measured 2.3: acquire, Block.__del__, the
    odd request off the inline path; 5 before the inline paths); blocks and counters stay right."""
    import json
    from pathlib import Path

    from ember.memory import BufferPool

    trace = json.loads((Path(__file__).parent / "memory_traces" / "w3_batch64_steps.json").read_text())
    starts = trace["step_starts"] + [len(trace["events"])]
    steps = [trace["events"][a:b] for a, b in zip(starts, starts[1:])]
    made = []

    def allocate(nbytes):
        made.append(nbytes)
        return len(made)

    pool = BufferPool(
        allocate, lambda raw: None, strategy="adaptive", cache_limit=None, sub_allocate=lambda p, o, n: (p, o, n)
    )
    live = {}

    def run(events, check=False):
        for event in events:
            if len(event) == 2:
                block = live[event[0]] = pool.acquire(event[1])
                if check:
                    assert block.nbytes >= event[1] and block.pool is pool
            else:
                live.pop(event[0], None)

    for events in steps[:6]:
        run(events, check=True)
    assert pool._plan is not None
    planned, allocs = pool.planned, len(made)
    counts = _calls(lambda: run(steps[6]), "/ember/memory/")
    requests = sum(len(e) == 2 for e in steps[6])
    assert pool.planned - planned >= requests // 2 and len(made) == allocs  # served by the plan, no driver call
    assert sum(counts.values()) <= 3 * requests, counts
    run(steps[7], check=True)
    live.clear()
    assert pool.in_use == 0


def test_small_training_step_core_calls():
    """A small CNN training step (conv, relu, max_pool, linear, cross_entropy, backward, SGD by hand,
    W3's shape) passes through at most 400 core functions, comprehension frames aside (measured 348;
    647 before this session's host-time work): a guard against losing the shortcuts, no clock read.
    The loss after the steps matches a float64 numpy reference of the same steps."""
    import os

    dev = em.Device("cpu").autodiff()
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((2, 1, 8, 8)).astype(np.float32)
    ys = np.array([1, 3])
    init = {
        "cw": rng.standard_normal((4, 1, 3, 3)).astype(np.float32) * 0.3,
        "cb": np.zeros(4, np.float32),
        "w": rng.standard_normal((64, 5)).astype(np.float32) * 0.1,
        "b": np.zeros(5, np.float32),
    }
    x, y = em.tensor(xs, device=dev), em.tensor(ys, device=dev)
    p = {k: em.tensor(v, device=dev).requires_grad_() for k, v in init.items()}
    losses = []

    def step():
        for t in p.values():
            t.grad = None
        h = em.max_pool(em.relu(em.conv(x, p["cw"], p["cb"], padding=1)), 2)
        loss = em.cross_entropy(h.reshape((2, 64)) @ p["w"] + p["b"], y)
        loss.backward()
        with em.no_grad():
            for t in p.values():
                t.copy_(t - 0.1 * t.grad)
        losses.append(loss)

    for _ in range(3):
        step()
    core = os.path.dirname(em.__file__) + os.sep
    counts = Counter()

    def prof(frame, event, arg):
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(core) and code.co_name not in ("<listcomp>", "<dictcomp>", "<setcomp>"):
                counts[code.co_name] += 1

    sys.setprofile(prof)
    try:
        step()
    finally:
        sys.setprofile(None)
    assert sum(counts.values()) <= 400, counts.most_common(20)

    # the same four steps in float64 numpy: conv (pad 1), relu, 2x2 max pool, linear, mean cross-entropy
    q = {k: v.astype(np.float64) for k, v in init.items()}
    for _ in range(4):
        xp = np.pad(xs.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.stack([xp[:, 0, i : i + 8, j : j + 8] for i in range(3) for j in range(3)], axis=1)  # (2, 9, 8, 8)
        z = np.einsum("nkhw,ok->nohw", cols, q["cw"].reshape(4, 9)) + q["cb"][None, :, None, None]
        r = np.maximum(z, 0)
        pooled = r.reshape(2, 4, 4, 2, 4, 2).max(axis=(3, 5))
        flat = pooled.reshape(2, 64)
        logits = flat @ q["w"] + q["b"]
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        prob = e / e.sum(axis=1, keepdims=True)
        ref_loss = -np.mean(np.log(prob[np.arange(2), ys]))
        dlogits = prob.copy()
        dlogits[np.arange(2), ys] -= 1
        dlogits /= 2
        dw, db = flat.T @ dlogits, dlogits.sum(axis=0)
        dflat = dlogits @ q["w"].T
        dpooled = dflat.reshape(2, 4, 4, 4)
        win = r.reshape(2, 4, 4, 2, 4, 2)
        hit = win == pooled[:, :, :, None, :, None]
        first = hit & (np.cumsum(np.cumsum(hit, axis=3), axis=5) == 1)  # one winner per window (ties: first)
        dr = (first * dpooled[:, :, :, None, :, None]).reshape(2, 4, 8, 8)
        dz = dr * (z > 0)
        dcw = np.einsum("nohw,nkhw->ok", dz, cols).reshape(4, 1, 3, 3)
        dcb = dz.sum(axis=(0, 2, 3))
        for k, g in (("cw", dcw), ("cb", dcb), ("w", dw), ("b", db)):
            q[k] = q[k] - 0.1 * g
        np.testing.assert_allclose(losses.pop(0).numpy(), ref_loss, rtol=1e-4)

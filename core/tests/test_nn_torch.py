"""Golden tests: ember.nn layers against PyTorch's, in float64 on the CPU.

Each test builds the PyTorch layer, loads its ``state_dict`` into the ember layer with
``strict=True`` (so parameter and buffer names must match PyTorch's), runs both on the same
inputs and compares outputs, updated buffers, and gradients of a random cotangent with respect
to the inputs and every parameter. Skipped when PyTorch is not importable.
"""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import functional as F

torch = pytest.importorskip("torch", reason="PyTorch is not installed; the golden tests compare with torch.nn")
tnn = torch.nn
TF = torch.nn.functional

AD = em.Device.cpu().autodiff()
F64 = torch.float64


def _load(tmod, emod) -> None:
    """Copy PyTorch's state into the ember layer (strict: the names must agree)."""
    tkeys = list(tmod.state_dict())
    assert list(emod.state_dict()) == tkeys, "ember's state_dict keys (and order) differ from PyTorch's"
    emod.load_state_dict({k: v.detach().numpy() for k, v in tmod.state_dict().items()})


def _outs(value) -> list:
    """Flatten (output, (h, c)) style results into a list of tensors."""
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _outs(v)]
    return [] if value is None else [value]


def _compare(tmod, emod, inputs, call=None, rtol=1e-9, atol=1e-10, ember_call=None):
    """Load PyTorch's state into the ember layer, run both on ``inputs`` (numpy arrays; integer
    arrays are not differentiated) and compare."""
    _load(tmod, emod)
    call = call or (lambda m, *xs: m(*xs))
    ember_call = ember_call or call
    tin = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in inputs]
    ein = [em.tensor(a, device=AD) for a in inputs]
    for t in ein:
        if t.dtype.is_floating:
            t.requires_grad_()
    tout, eout = _outs(call(tmod, *tin)), _outs(ember_call(emod, *ein))
    assert len(tout) == len(eout)
    rng = np.random.default_rng(0)
    cots = [rng.uniform(-1, 1, tuple(t.shape)) for t in tout]
    for i, (t, e) in enumerate(zip(tout, eout)):
        np.testing.assert_allclose(e.numpy(), t.detach().numpy(), rtol=rtol, atol=atol, err_msg=f"output {i}")
    sum((t * torch.tensor(c)).sum() for t, c in zip(tout, cots)).backward()
    sum((e * em.tensor(c, device=AD)).sum() for e, c in zip(eout, cots)).backward()
    for i, (t, e) in enumerate(zip(tin, ein)):
        if t.grad is None:
            assert e.grad is None, f"input {i}: ember has a gradient where PyTorch has none"
        else:
            np.testing.assert_allclose(e.grad.numpy(), t.grad.numpy(), rtol=rtol, atol=atol, err_msg=f"input {i}")
    eparams = dict(emod.named_parameters())
    for name, p in tmod.named_parameters():
        if p.grad is None:
            continue
        np.testing.assert_allclose(eparams[name].grad.numpy(), p.grad.numpy(), rtol=rtol, atol=atol, err_msg=name)
    ebuf = dict(emod.named_buffers())
    for name, b in tmod.named_buffers():
        np.testing.assert_allclose(ebuf[name].numpy(), b.numpy(), rtol=rtol, atol=atol, err_msg=name)


def _rand(*shape, seed=1):
    return np.random.default_rng(seed + len(shape)).standard_normal(shape)


def test_linear():
    _compare(tnn.Linear(5, 3, dtype=F64), nn.Linear(5, 3, device=AD, dtype="float64"), [_rand(2, 4, 5)])


@pytest.mark.parametrize(
    "kwargs",
    [{"stride": 2, "padding": 1, "groups": 2}, {"padding": "same", "dilation": 2}, {"padding": (0, 2), "bias": False}],
)
def test_conv2d(kwargs):
    t = tnn.Conv2d(4, 6, (3, 2), dtype=F64, **kwargs)
    e = nn.Conv2d(4, 6, (3, 2), device=AD, dtype="float64", **kwargs)
    _compare(t, e, [_rand(2, 4, 7, 6)])


def test_conv1d_and_transpose():
    t, e = tnn.Conv1d(3, 4, 3, stride=2, dtype=F64), nn.Conv1d(3, 4, 3, stride=2, device=AD, dtype="float64")
    _compare(t, e, [_rand(2, 3, 9)])
    kw = {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}
    t = tnn.ConvTranspose2d(4, 6, 3, dtype=F64, **kw)
    e = nn.ConvTranspose2d(4, 6, 3, device=AD, dtype="float64", **kw)
    _compare(t, e, [_rand(2, 4, 3, 4)])


def test_pooling():
    x = [_rand(2, 3, 7, 6)]
    for t, e in [
        (tnn.MaxPool2d(3, stride=2, padding=1), nn.MaxPool2d(3, stride=2, padding=1)),
        (
            tnn.AvgPool2d(2, ceil_mode=True, count_include_pad=False),
            nn.AvgPool2d(2, ceil_mode=True, count_include_pad=False),
        ),
        (tnn.AdaptiveAvgPool2d((3, None)), nn.AdaptiveAvgPool2d((3, None))),
        (tnn.AdaptiveMaxPool2d(2), nn.AdaptiveMaxPool2d(2)),
    ]:
        _compare(t, e, x)


@pytest.mark.parametrize("cls", ["BatchNorm1d", "BatchNorm2d"])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batch_norm_train_then_eval(cls, momentum):
    shape = (4, 3, 5) if cls == "BatchNorm1d" else (4, 3, 2, 5)
    t = getattr(tnn, cls)(3, momentum=momentum, dtype=F64)
    e = getattr(nn, cls)(3, momentum=momentum, device=AD, dtype="float64")
    _compare(t, e, [_rand(*shape)])  # training: batch statistics, running stats updated
    _compare(t, e, [_rand(*shape, seed=2)])
    t.eval(), e.eval()
    _compare(t, e, [_rand(*shape, seed=3)])


def test_norms():
    cases = [
        (tnn.LayerNorm((3, 4), dtype=F64), nn.LayerNorm((3, 4), device=AD, dtype="float64"), (2, 3, 4)),
        (tnn.LayerNorm(4, bias=False, dtype=F64), nn.LayerNorm(4, bias=False, device=AD, dtype="float64"), (3, 4)),
        (tnn.GroupNorm(2, 6, dtype=F64), nn.GroupNorm(2, 6, device=AD, dtype="float64"), (2, 6, 3, 2)),
        (tnn.RMSNorm(5, dtype=F64), nn.RMSNorm(5, device=AD, dtype="float64"), (3, 5)),
    ]
    for t, e, shape in cases:
        with torch.no_grad():
            for p in t.parameters():
                p.uniform_(0.5, 1.5)
        _load(t, e)
        _compare(t, e, [_rand(*shape)])


def test_embedding_with_padding_idx():
    t = tnn.Embedding(6, 3, padding_idx=2, dtype=F64)
    e = nn.Embedding(6, 3, padding_idx=2, device=AD, dtype="float64")
    _compare(t, e, [np.array([[2, 1, 5], [2, 2, 0]])])


def test_activations():
    x = [_rand(3, 5) * 3]
    pairs = [
        (tnn.ReLU(), nn.ReLU()),
        (tnn.GELU(), nn.GELU()),
        (tnn.GELU("tanh"), nn.GELU("tanh")),
        (tnn.SiLU(), nn.SiLU()),
        (tnn.Tanh(), nn.Tanh()),
        (tnn.Sigmoid(), nn.Sigmoid()),
        (tnn.Softmax(dim=0), nn.Softmax(dim=0)),
        (tnn.LogSoftmax(dim=1), nn.LogSoftmax()),
        (tnn.LeakyReLU(0.2), nn.LeakyReLU(0.2)),
        (tnn.ELU(0.5), nn.ELU(0.5)),
        (tnn.Softplus(2.0), nn.Softplus(2.0)),
        (tnn.Mish(), nn.Mish()),
        (tnn.Flatten(0), nn.Flatten(0)),
    ]
    for t, e in pairs:
        _compare(t, e, x)


@pytest.mark.parametrize("cls", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layout", [{"num_layers": 2}, {"batch_first": True, "bidirectional": True}])
def test_recurrent(cls, layout):
    t = getattr(tnn, cls)(3, 4, dtype=F64, **layout)
    e = getattr(nn, cls)(3, 4, device=AD, dtype="float64", **layout)
    dirs = 2 if layout.get("bidirectional") else 1
    x = _rand(2, 5, 3) if layout.get("batch_first") else _rand(5, 2, 3)
    h0 = _rand(layout.get("num_layers", 1) * dirs, 2, 4, seed=4)
    if cls == "LSTM":
        c0 = _rand(layout.get("num_layers", 1) * dirs, 2, 4, seed=5)
        _compare(t, e, [x, h0, c0], call=lambda m, x, h, c: m(x, (h, c)))
    else:
        _compare(t, e, [x, h0])


def test_lstm_unbatched():
    t, e = tnn.LSTM(3, 2, dtype=F64), nn.LSTM(3, 2, device=AD, dtype="float64")
    _compare(t, e, [_rand(4, 3)])


def _causal(n):
    return np.triu(np.ones((n, n), dtype=bool), 1)


def test_multi_head_attention_masks():
    t = tnn.MultiheadAttention(6, 2, batch_first=True, dtype=F64)
    e = nn.MultiHeadAttention(6, 2, batch_first=True, device=AD, dtype="float64")
    pad = np.array([[False] * 4, [False, False, True, True]])
    _compare(
        t,
        e,
        [_rand(2, 4, 6), pad],
        call=lambda m, x, p: m(x, x, x, key_padding_mask=p, attn_mask=torch.tensor(_causal(4))),
        ember_call=lambda m, x, p: m(x, key_padding_mask=p, is_causal=True),
    )
    float_mask = _rand(4, 4, seed=7)
    _compare(
        t,
        e,
        [_rand(2, 4, 6), float_mask],
        call=lambda m, x, msk: m(x, x, x, attn_mask=msk.detach(), average_attn_weights=False),
        ember_call=lambda m, x, msk: m(x, attn_mask=msk.detach(), average_attn_weights=False),
    )


def test_multi_head_attention_kdim_vdim_seq_first():
    t = tnn.MultiheadAttention(4, 2, kdim=3, vdim=5, dtype=F64)
    e = nn.MultiHeadAttention(4, 2, kdim=3, vdim=5, device=AD, dtype="float64")
    mask = np.array([[False, True, False], [False, False, False]])
    _compare(
        t,
        e,
        [_rand(2, 2, 4), _rand(3, 2, 3), _rand(3, 2, 5)],
        call=lambda m, q, k, v: m(q, k, v, attn_mask=torch.tensor(mask)),
        ember_call=lambda m, q, k, v: m(q, k, v, attn_mask=em.tensor(mask)),
    )


@pytest.mark.parametrize("norm_first,activation", [(False, "relu"), (True, "gelu")])
def test_transformer_layers(norm_first, activation):
    kw = {
        "dim_feedforward": 10,
        "dropout": 0.0,
        "activation": activation,
        "batch_first": True,
        "norm_first": norm_first,
    }
    t = tnn.TransformerEncoderLayer(6, 2, dtype=F64, **kw)
    e = nn.TransformerEncoderLayer(6, 2, device=AD, dtype="float64", **kw)
    pad = np.array([[False] * 4, [False, False, False, True]])
    _compare(t, e, [_rand(2, 4, 6), pad], call=lambda m, x, p: m(x, src_key_padding_mask=p))
    t = tnn.TransformerDecoderLayer(6, 2, dtype=F64, **kw)
    e = nn.TransformerDecoderLayer(6, 2, device=AD, dtype="float64", **kw)
    _compare(
        t,
        e,
        [_rand(2, 3, 6), _rand(2, 4, 6, seed=3)],
        call=lambda m, x, mem: m(x, mem, tgt_mask=torch.tensor(_causal(3))),
        ember_call=lambda m, x, mem: m(x, mem, tgt_is_causal=True),
    )


def test_transformer_encoder_stack():
    layer = tnn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, dtype=F64)
    t = tnn.TransformerEncoder(layer, 2, norm=tnn.LayerNorm(4, dtype=F64), enable_nested_tensor=False)
    e = nn.TransformerEncoderConfig(
        nn.TransformerEncoderLayerConfig(4, 2, 8, dropout=0.0), 2, nn.LayerNormConfig(4)
    ).init(AD, "float64")
    _compare(t, e, [_rand(3, 2, 4)])


LOSSES = [
    ("cross_entropy", {"weight": [0.5, 1.0, 2.0], "label_smoothing": 0.1, "ignore_index": 1}, "index"),
    ("cross_entropy", {"reduction": "none", "label_smoothing": 0.2}, "index"),
    ("cross_entropy", {"label_smoothing": 0.1}, "probs"),
    ("nll_loss", {"weight": [0.5, 1.0, 2.0], "ignore_index": 0}, "index"),
    ("mse_loss", {}, "same"),
    ("l1_loss", {"reduction": "sum"}, "same"),
    ("smooth_l1_loss", {"beta": 0.5}, "same"),
    ("huber_loss", {"delta": 0.5, "reduction": "none"}, "same"),
    ("binary_cross_entropy", {"weight": [1.0, 2.0, 0.5]}, "prob_pair"),
    ("binary_cross_entropy_with_logits", {"pos_weight": [1.0, 3.0, 0.5]}, "logits"),
    ("kl_div", {"reduction": "batchmean"}, "kl"),
    ("kl_div", {"log_target": True, "reduction": "sum"}, "kl_log"),
]


@pytest.mark.parametrize("name,kwargs,kind", LOSSES, ids=[f"{n}-{k}" for n, _, k in LOSSES])
def test_losses(name, kwargs, kind):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, 3)) * 2
    target = {
        "index": rng.integers(0, 3, 6),
        "probs": rng.dirichlet(np.ones(3), 6),
        "same": rng.standard_normal((6, 3)),
        "prob_pair": rng.uniform(0, 1, (6, 3)),
        "logits": rng.uniform(0, 1, (6, 3)),
        "kl": rng.dirichlet(np.ones(3), 6),
        "kl_log": np.log(rng.dirichlet(np.ones(3), 6)),
    }[kind]
    if kind == "prob_pair":
        x = 1 / (1 + np.exp(-x))
    if kind.startswith("kl"):
        x = x - np.log(np.exp(x).sum(1, keepdims=True))
    tk = {k: torch.tensor(v, dtype=F64) if isinstance(v, list) else v for k, v in kwargs.items()}
    ek = {k: em.tensor(v, dtype="float64") if isinstance(v, list) else v for k, v in kwargs.items()}
    tx = torch.tensor(x, requires_grad=True)
    ex = em.tensor(x, device=AD).requires_grad_()
    tout = getattr(TF, name)(tx, torch.tensor(target), **tk)
    eout = getattr(F, name)(ex, em.tensor(target), **ek)
    np.testing.assert_allclose(eout.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    cot = np.random.default_rng(4).uniform(-1, 1, tuple(tout.shape))
    (tout * torch.tensor(cot)).sum().backward()
    (eout * em.tensor(cot)).sum().backward()
    np.testing.assert_allclose(ex.grad.numpy(), tx.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_state_dict_keys_match_pytorch_for_stacks():
    t = tnn.Sequential(tnn.Conv2d(3, 4, 3), tnn.BatchNorm2d(4), tnn.ReLU(), tnn.Flatten(), tnn.Linear(4, 2))
    e = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4, 2))
    assert list(e.state_dict()) == list(t.state_dict())

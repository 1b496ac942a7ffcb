"""ember.nn module mechanics: registration, state dicts, devices, freezing, modes, repr,
configs, initialisers and error messages. Numerical checks of every layer against numpy
references are in the conformance suite (ember_conformance/test_nn_modules.py)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import math

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ShapeError
from ember.nn import functional as F

CPU = em.Device.cpu()
AD = CPU.autodiff()


class Net(nn.Module):
    def __init__(self, device=None):
        super().__init__()
        self.fc1 = nn.Linear(4, 8, device=device)
        self.act = nn.ReLU()
        self.block = nn.Sequential(nn.Linear(8, 8, device=device), nn.BatchNorm1d(8, device=device))
        self.scale = nn.Parameter(em.ones((1,), device=device))
        self.register_buffer("steps", em.zeros((), dtype="int64", device=device))
        self.register_buffer("cache", em.zeros((2,), device=device), persistent=False)

    def forward(self, x):
        return self.block(self.act(self.fc1(x))) * self.scale


def _net(seed=0, device=AD):
    em.seed(seed)
    return Net(device)


# -- registration ------------------------------------------------------------------------
def test_registration_and_traversal():
    net = _net()
    assert type(net.scale) is em.Tensor  # the Parameter marker is unwrapped
    names = [n for n, _ in net.named_parameters()]
    assert names == [
        "scale",
        "fc1.weight",
        "fc1.bias",
        "block.0.weight",
        "block.0.bias",
        "block.1.weight",
        "block.1.bias",
    ]
    assert [n for n, _ in net.named_buffers()] == [
        "steps", "cache", "block.1.running_mean", "block.1.running_var", "block.1.num_batches_tracked"
    ]  # fmt: skip
    assert [n for n, _ in net.named_children()] == ["fc1", "act", "block"]
    assert len(list(net.modules())) == 6
    assert len(list(net.parameters())) == 7 and len(list(net.buffers())) == 5
    assert net.num_parameters() == 1 + 4 * 8 + 8 + 8 * 8 + 8 + 8 + 8
    assert net.get_submodule("block.1") is net.block[1]
    assert "fc1" in dir(net) and "scale" in dir(net)


def test_shared_parameter_listed_once():
    a = nn.Linear(3, 3, device=AD)
    seq = nn.Sequential(a, a)
    assert len(list(seq.parameters())) == 2


def test_parameters_require_grad_only_on_autodiff_devices():
    assert all(p.requires_grad for p in _net(device=AD).parameters())
    plain = _net(device=CPU)
    assert not any(p.requires_grad for p in plain.parameters())
    assert not any(b.requires_grad for b in _net(device=AD).buffers())
    m = nn.Module()
    m.frozen = nn.Parameter(em.ones((2,), device=AD), requires_grad=False)
    assert not m.frozen.requires_grad


def test_assignment_rules():
    net = _net()
    with pytest.raises(TypeError, match=r"scale is a parameter; assign nn.Parameter"):
        net.scale = em.ones((1,))
    net.scale = nn.Parameter(em.full((1,), 2.0, device=AD))
    assert net.scale.tolist() == [2.0] and net.scale.requires_grad
    net.steps = em.ones((), dtype="int64")  # a buffer may be replaced by a tensor
    assert dict(net.named_buffers())["steps"].item() == 1
    net.fc1 = None
    assert "fc1" not in [n for n, _ in net.named_children()]
    del net.scale
    assert "scale" not in dict(net.named_parameters())

    class Forgot(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Forgot()


def test_call_runs_forward_and_backward_fills_grads():
    net = _net()
    x = em.randn((5, 4), device=AD)
    net(x).square().mean().backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


# -- state dicts -------------------------------------------------------------------------
def test_state_dict_round_trip():
    a, b = _net(1), _net(2)
    x = em.randn((5, 4), device=AD)
    a.eval(), b.eval()
    assert not np.allclose(a(x).numpy(), b(x).numpy())
    sd = a.state_dict()
    assert list(sd) == [
        "scale", "steps", "fc1.weight", "fc1.bias", "block.0.weight", "block.0.bias", "block.1.weight",
        "block.1.bias", "block.1.running_mean", "block.1.running_var", "block.1.num_batches_tracked",
    ]  # fmt: skip
    assert "cache" not in sd  # non-persistent
    weight = b.fc1.weight
    result = b.load_state_dict(sd)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert b.fc1.weight is weight  # values are copied into the existing tensors
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    b.load_state_dict({k: v.numpy() for k, v in sd.items()})  # numpy arrays load too


def test_state_dict_is_a_snapshot():
    net = _net()
    sd = net.state_dict()
    before = sd["fc1.weight"].numpy().copy()
    with em.no_grad():
        net.fc1.weight.copy_(net.fc1.weight + 1.0)
    np.testing.assert_array_equal(sd["fc1.weight"].numpy(), before)
    assert not sd["fc1.weight"].requires_grad


def test_strict_load_lists_every_problem():
    net = _net()
    sd = net.state_dict()
    del sd["fc1.bias"], sd["block.1.running_var"]
    sd["head.weight"] = em.ones((2, 2))
    sd["fc1.weight"] = em.ones((3, 3))
    with pytest.raises(nn.StateDictError) as info:
        net.load_state_dict(sd)
    msg = str(info.value)
    assert "missing keys (2): fc1.bias, block.1.running_var" in msg
    assert "unexpected keys (1): head.weight" in msg
    assert "fc1.weight: checkpoint (3, 3), model (8, 4)" in msg
    assert isinstance(info.value, ValueError) and isinstance(info.value, em.EmberError)


def test_non_strict_load_reports_keys_but_shapes_must_fit():
    net = _net()
    sd = net.state_dict()
    del sd["fc1.bias"]
    sd["extra"] = em.ones((1,))
    result = net.load_state_dict(sd, strict=False)
    assert result.missing_keys == ["fc1.bias"] and result.unexpected_keys == ["extra"]
    sd["fc1.weight"] = em.ones((1,))
    with pytest.raises(nn.StateDictError, match="shape mismatches"):
        net.load_state_dict(sd, strict=False)


# -- devices, dtypes, modes --------------------------------------------------------------
def test_to_keeps_the_autodiff_choice(twin):
    net = _net(device=AD)
    net.to(twin)  # a trainable model stays trainable on the target
    assert net.device == twin.autodiff()
    assert all(p.device is twin.autodiff() and p.requires_grad for p in net.parameters())
    assert all(b.device.same_hardware(twin) for b in net.buffers())
    x = em.randn((3, 4), device=twin.autodiff())
    net(x).sum().backward()
    assert net.fc1.weight.grad.device.same_hardware(twin)
    net.to(CPU, autodiff=False)  # inference only
    assert not any(p.requires_grad for p in net.parameters()) and net.device is CPU
    net.to(AD)  # the target's autodiff flag turns training on
    assert all(p.requires_grad for p in net.parameters()) and net.device is AD
    weight = net.fc1.weight
    assert net.to(CPU).fc1.weight is weight  # already in place: the same tensor


def test_to_dtype_casts_floating_tensors_only():
    net = _net().to(em.float64)
    assert all(p.dtype is em.float64 for p in net.parameters())
    assert dict(net.named_buffers())["steps"].dtype is em.int64
    assert net.block[1].running_mean.dtype is em.float64
    assert all(p.requires_grad for p in net.parameters())
    assert net.to("float32").fc1.weight.dtype is em.float32


def test_to_keeps_tied_weights_tied_and_frozen_frozen(twin):
    emb = nn.Embedding(5, 3, device=AD)
    head = nn.Linear(3, 5, bias=False, device=AD)
    model = nn.Sequential(emb, head)
    head.register_parameter("weight", nn.Parameter(emb.weight))  # tie
    emb.freeze()
    model.to(twin)
    assert model[0].weight is model[1].weight
    assert not model[0].weight.requires_grad


def test_freeze_unfreeze():
    net = _net()
    net.fc1.freeze()
    assert not any(p.requires_grad for p in net.fc1.parameters())
    assert net.block[0].weight.requires_grad
    assert net.num_parameters(trainable_only=True) == net.num_parameters() - 4 * 8 - 8
    x = em.randn((5, 4), device=AD)
    net(x).sum().backward()
    assert net.fc1.weight.grad is None and net.block[0].weight.grad is not None
    net.unfreeze()
    assert all(p.requires_grad for p in net.parameters())
    plain = _net(device=CPU).unfreeze()  # a plain device stays inference-only
    assert not any(p.requires_grad for p in plain.parameters())


def test_train_eval():
    net = _net()
    assert all(m.training for m in net.modules())
    net.eval()
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    drop = nn.Dropout(0.5)
    x = em.ones((1000,))
    assert (drop(x) == 0).sum().item() > 300
    assert (drop.eval()(x) == x).all().item()


def test_batch_norm_modes_and_running_stats():
    em.seed(0)
    bn = nn.BatchNorm1d(3, momentum=None, device=AD)
    xs = [em.randn((6, 3)) * (i + 1) for i in range(3)]
    for x in xs:
        bn(x)
    assert bn.num_batches_tracked.item() == 3
    mean = np.mean([x.numpy().mean(axis=0) for x in xs], axis=0)  # momentum None: cumulative average
    np.testing.assert_allclose(bn.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    bn.eval()
    y = bn(xs[0]).numpy()
    want = (xs[0].numpy() - bn.running_mean.numpy()) / np.sqrt(bn.running_var.numpy() + 1e-5)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    stats_free = nn.BatchNorm1d(3, track_running_stats=False).eval()
    assert stats_free.running_mean is None
    np.testing.assert_allclose(stats_free(xs[0]).numpy().mean(axis=0), 0.0, atol=1e-5)


def test_deepcopy_gives_independent_tensors():
    a = nn.Linear(2, 2, device=AD)
    b = copy.deepcopy(a)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    assert b.weight is not a.weight and b.weight.requires_grad
    with em.no_grad():
        b.weight.copy_(em.zeros((2, 2)))
    assert a.weight.abs().sum().item() > 0


# -- repr --------------------------------------------------------------------------------
def test_repr_nested_like_pytorch():
    net = _net()
    assert repr(net) == (
        "Net(\n"
        "  (fc1): Linear(in_features=4, out_features=8, bias=True)\n"
        "  (act): ReLU()\n"
        "  (block): Sequential(\n"
        "    (0): Linear(in_features=8, out_features=8, bias=True)\n"
        "    (1): BatchNorm1d(num_features=8, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)\n"
        "  )\n"
        ")"
    )
    assert repr(nn.Dropout(0.25)) == "Dropout(p=0.25)"
    assert repr(nn.Conv2d(3, 4, 3)).startswith("Conv2d(in_channels=3, out_channels=4, kernel_size=3, stride=1")


# -- configs -----------------------------------------------------------------------------
CONFIGS = [
    nn.LinearConfig(4, 3, bias=False),
    nn.Conv1dConfig(2, 4, 3, padding="same"),
    nn.Conv2dConfig(3, 6, (3, 2), stride=2, groups=3),
    nn.ConvTranspose1dConfig(2, 2, 3),
    nn.ConvTranspose2dConfig(4, 2, 2, stride=2),
    nn.MaxPool1dConfig(2),
    nn.MaxPool2dConfig(2, stride=1, padding=1),
    nn.AvgPool1dConfig(2),
    nn.AvgPool2dConfig(3, count_include_pad=False),
    nn.AdaptiveAvgPool2dConfig((2, None)),
    nn.AdaptiveMaxPool2dConfig(1),
    nn.BatchNorm1dConfig(4, momentum=None),
    nn.BatchNorm2dConfig(4, affine=False),
    nn.LayerNormConfig((2, 3), bias=False),
    nn.RMSNormConfig(5, eps=1e-6),
    nn.GroupNormConfig(2, 4),
    nn.DropoutConfig(0.2),
    nn.EmbeddingConfig(10, 4, padding_idx=1),
    nn.MultiHeadAttentionConfig(8, 2, kdim=4, batch_first=True),
    nn.TransformerEncoderLayerConfig(8, 2, 16, activation="gelu", norm_first=True),
    nn.TransformerDecoderLayerConfig(8, 2, 16),
    nn.TransformerEncoderConfig(nn.TransformerEncoderLayerConfig(8, 2, 16), 2, nn.LayerNormConfig(8)),
    nn.TransformerDecoderConfig(nn.TransformerDecoderLayerConfig(8, 2, 16), 2),
    nn.LSTMConfig(3, 4, num_layers=2, bidirectional=True),
    nn.GRUConfig(3, 4, batch_first=True),
    nn.RNNConfig(3, 4, nonlinearity="relu"),
    nn.RotaryEmbeddingConfig(8, interleaved=True),
    nn.SinusoidalPositionalEncodingConfig(8, max_len=16),
    nn.FlattenConfig(0),
    nn.IdentityConfig(),
    nn.ReLUConfig(),
    nn.GELUConfig("tanh"),
    nn.SiLUConfig(),
    nn.TanhConfig(),
    nn.SigmoidConfig(),
    nn.SoftmaxConfig(1),
    nn.LogSoftmaxConfig(),
    nn.LeakyReLUConfig(0.2),
    nn.ELUConfig(),
    nn.SoftplusConfig(2.0),
    nn.MishConfig(),
    nn.SequentialConfig([nn.LinearConfig(2, 3), nn.ReLUConfig()]),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: type(c).__name__)
def test_config_builds_the_layer_and_round_trips_through_json(cfg):
    layer = cfg.init(AD)
    assert isinstance(layer, type(cfg).module_class)
    assert layer.config() == cfg
    text = json.dumps(cfg.to_dict())
    assert type(cfg).from_dict(json.loads(text)).init(AD).config() == cfg
    json.dumps(dataclasses.asdict(cfg))  # plain asdict is JSON-ready too
    assert nn.config_from_dict(type(cfg).__name__, json.loads(text)) == cfg


def test_every_layer_has_a_config():
    covered = {type(c).module_class for c in CONFIGS}
    skip = {nn.Module, nn.ModuleList, nn.ModuleDict}
    layers = {
        obj
        for obj in vars(nn).values()
        if inspect.isclass(obj) and issubclass(obj, nn.Module) and obj not in skip and not obj.__name__.endswith("Loss")
    }
    assert layers - covered == set()


def test_config_and_direct_construction_agree():
    em.seed(3)
    a = nn.LinearConfig(4, 2).init(CPU)
    em.seed(3)
    b = nn.Linear(4, 2, device=CPU)
    np.testing.assert_array_equal(a.weight.numpy(), b.weight.numpy())
    assert nn.LinearConfig(4, 2).init(CPU, em.float64).weight.dtype is em.float64


def test_transformer_stack_from_layer_copies_from_config_fresh():
    layer = nn.TransformerEncoderLayer(8, 2, 16, device=AD)
    stack = nn.TransformerEncoder(layer, 2)
    w0, w1 = (stack.layers[i].linear1.weight.numpy() for i in range(2))
    np.testing.assert_array_equal(w0, w1)  # PyTorch: clones of one layer
    assert stack.layers[0].linear1.weight is not stack.layers[1].linear1.weight
    fresh = nn.TransformerEncoder(layer.config(), 2, device=AD)
    assert not np.array_equal(fresh.layers[0].linear1.weight.numpy(), fresh.layers[1].linear1.weight.numpy())


# -- init --------------------------------------------------------------------------------
def test_init_is_identical_on_every_device(twin):
    for dev in (CPU, AD, twin):
        em.seed(7)
        w = nn.Linear(16, 8, device=dev).weight.numpy()
        if dev is CPU:
            first = w
        np.testing.assert_array_equal(w, first)


def test_pytorch_default_inits():
    em.seed(0)
    lin = nn.Linear(50, 400)
    bound = 1 / math.sqrt(50)
    for t in (lin.weight, lin.bias):
        a = t.numpy()
        assert a.min() >= -bound and a.max() < bound and a.max() > 0.9 * bound
    conv = nn.Conv2d(3, 8, 3)
    assert np.abs(conv.weight.numpy()).max() <= 1 / math.sqrt(27)
    emb = nn.Embedding(1000, 20, padding_idx=3)
    w = emb.weight.numpy()
    assert abs(w.std() - 1) < 0.05 and not w[3].any()
    lstm = nn.LSTM(4, 25)
    assert np.abs(lstm.weight_hh_l0.numpy()).max() <= 0.2


def test_init_functions():
    assert nn.init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert nn.init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    assert nn.init.calculate_gain("tanh") == pytest.approx(5 / 3)
    w = em.zeros((30, 20, 3, 3))
    assert nn.init.fan_in_and_fan_out(w) == (180, 270)
    em.seed(1)
    nn.init.xavier_uniform_(w, gain=2.0)
    assert np.abs(w.numpy()).max() <= 2 * math.sqrt(6 / 450)
    nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert w.numpy().std() == pytest.approx(math.sqrt(2 / 270), rel=0.05)
    nn.init.constant_(w, 0.5)
    assert (w == 0.5).all().item()
    p = em.zeros((3,), device=AD, requires_grad=True)
    nn.init.normal_(p)  # in place on a tensor that requires grad (under no_grad)
    assert p.requires_grad and p.abs().sum().item() > 0
    with pytest.raises(ValueError, match="unknown nonlinearity"):
        nn.init.calculate_gain("swish")


# -- errors teach ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "layer,x,pattern",
    [
        (nn.Linear(4, 2), em.ones((3, 5)), r"Linear: expected input of shape \(\.\.\., 4\).*got \(3, 5\)"),
        (nn.Conv2d(3, 4, 3), em.ones((2, 3, 5)), r"Conv2d: expected 3 input channels.*\(2, 3, 5\)"),
        (nn.Conv2d(3, 4, 3), em.ones((5,)), r"Conv2d: expected a 3-D \(C, H, W\) or 4-D \(N, C, H, W\).*\(5,\)"),
        (nn.BatchNorm2d(3), em.ones((2, 4, 2, 2)), r"BatchNorm2d: .*num_features=3 on axis 1, got shape \(2, 4, 2"),
        (nn.BatchNorm1d(3), em.ones((2, 3, 2, 2)), r"BatchNorm1d: expected input of shape \(N, C\) or \(N, C, L\)"),
        (nn.LayerNorm(4), em.ones((2, 3)), r"LayerNorm: expected input of shape \(\.\.\., 4\), got \(2, 3\)"),
        (nn.LSTM(3, 4), em.ones((5, 2, 2)), r"LSTM: expected input of shape \(L, N, H_in\).*=3, got \(5, 2, 2\)"),
        (nn.MultiHeadAttention(4, 2), em.ones((3, 2, 5)), r"MultiHeadAttention: expected query .*E=4, got \(3, 2, 5\)"),
        (nn.GroupNorm(2, 4), em.ones((2, 6, 3)), r"GroupNorm: .*num_channels=4 on axis 1, got shape \(2, 6, 3\)"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else None,
)
def test_errors_name_layer_expected_and_actual(layer, x, pattern):
    with pytest.raises(ShapeError, match=pattern):
        layer(x)


def test_more_errors():
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiHeadAttention(5, 2)
    with pytest.raises(ShapeError, match=r"LSTM: expected h_0 of shape \(1, 2, 4\)"):
        nn.LSTM(3, 4)(em.ones((5, 2, 3)), (em.zeros((1, 3, 4)), em.zeros((1, 3, 4))))
    with pytest.raises(ShapeError, match=r"key_padding_mask must have shape \(2, 3\)"):
        nn.MultiHeadAttention(4, 2, batch_first=True)(em.ones((2, 3, 4)), key_padding_mask=em.ones((3, 2)) > 0)
    with pytest.raises(em.DTypeError, match="Embedding: expected a tensor of integer ids"):
        nn.Embedding(3, 2)(em.ones((2,)))


# -- layer behaviour not covered by the conformance references ---------------------------
def test_mha_variants_agree():
    em.seed(0)
    mha = nn.MultiHeadAttention(8, 2, batch_first=True)
    x = em.randn((2, 5, 8))
    out, w = mha(x)
    fused, none = mha(x, need_weights=False)
    assert none is None and w.shape == (2, 5, 5)
    np.testing.assert_allclose(out.numpy(), fused.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.numpy().sum(-1), 1.0, rtol=1e-6)
    single, w1 = mha(x[0])  # unbatched
    np.testing.assert_allclose(single.numpy(), out.numpy()[0], rtol=1e-5, atol=1e-6)
    _, per_head = mha(x, average_attn_weights=False)
    assert per_head.shape == (2, 2, 5, 5)
    seq_first = nn.MultiHeadAttention(8, 2)
    seq_first.load_state_dict(mha.state_dict())
    np.testing.assert_allclose(seq_first(x.swapaxes(0, 1))[0].numpy(), out.swapaxes(0, 1).numpy(), atol=1e-6)


def test_key_padding_mask_true_means_ignore():
    em.seed(0)
    mha = nn.MultiHeadAttention(4, 2, batch_first=True)
    q, kv = em.randn((1, 2, 4)), em.randn((1, 3, 4))
    pad = em.tensor([[False, False, True]])
    changed = em.concat([kv[:, :2], kv[:, 2:] + 100.0], axis=1)
    a, w = mha(q, kv, kv, key_padding_mask=pad)
    b, _ = mha(q, changed, changed, key_padding_mask=pad)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    assert (w.numpy()[..., 2] == 0).all()


def test_rnn_layouts_agree():
    em.seed(0)
    lstm = nn.LSTM(3, 4, num_layers=2)
    x = em.randn((5, 2, 3))
    out, (h, c) = lstm(x)
    bf = nn.LSTM(3, 4, num_layers=2, batch_first=True)
    bf.load_state_dict(lstm.state_dict())
    out2, (h2, _) = bf(x.swapaxes(0, 1))
    np.testing.assert_allclose(out2.swapaxes(0, 1).numpy(), out.numpy(), rtol=1e-6)
    np.testing.assert_allclose(h2.numpy(), h.numpy(), rtol=1e-6)
    single, (hs, cs) = lstm(x[:, 0])
    np.testing.assert_allclose(single.numpy(), out.numpy()[:, 0], rtol=1e-5, atol=1e-6)
    assert hs.shape == (2, 4) and cs.shape == (2, 4)
    np.testing.assert_allclose(out.numpy()[-1], h.numpy()[-1], rtol=1e-6)
    rnn = nn.RNN(3, 4)
    o, hn = rnn(x)
    s = rnn.state_dict()
    hh = np.zeros((2, 4))
    for t in range(5):
        pre = x.numpy()[t] @ s["weight_ih_l0"].numpy().T + s["bias_ih_l0"].numpy()
        hh = np.tanh(pre + hh @ s["weight_hh_l0"].numpy().T + s["bias_hh_l0"].numpy())
    np.testing.assert_allclose(hn.numpy()[0], hh, rtol=1e-5, atol=1e-6)


def test_embedding_padding_row_gets_no_gradient():
    emb = nn.Embedding(4, 3, padding_idx=2, device=AD)
    emb(em.tensor([[2, 1, 2, 0]])).sum().backward()
    g = emb.weight.grad.numpy()
    assert not g[2].any() and g[1].all() and not g[3].any()


def test_rotary_embedding():
    rope = nn.RotaryEmbedding(8)
    q = em.randn((1, 6, 8))
    r = rope(q)
    np.testing.assert_allclose(np.linalg.norm(r.numpy(), axis=-1), np.linalg.norm(q.numpy(), axis=-1), rtol=1e-5)
    np.testing.assert_allclose(r.numpy()[:, 0], q.numpy()[:, 0], rtol=1e-6)  # position 0: no rotation
    # relative: <rope(q)_m, rope(k)_n> depends on m - n only
    a, b = em.randn((8,)), em.randn((8,))
    qs, ks = em.stack([a] * 6).reshape((1, 6, 8)), em.stack([b] * 6).reshape((1, 6, 8))
    dots = rope(qs).numpy()[0] @ rope(ks).numpy()[0].T
    np.testing.assert_allclose(dots[3, 1], dots[4, 2], rtol=1e-4)
    shifted = rope(em.concat([em.zeros((1, 2, 8)), q], 1)).numpy()[:, 2:]
    np.testing.assert_allclose(rope(q, offset=2).numpy(), shifted, rtol=1e-5, atol=1e-6)
    pos = np.array([3, 0, 5, 1, 2, 4])
    placed = rope(em.tensor(q.numpy()[:, np.argsort(pos)])).numpy()[:, pos]  # q[:, i] sits at position pos[i]
    np.testing.assert_allclose(rope(q, positions=em.tensor(pos)).numpy(), placed, rtol=1e-5, atol=1e-6)
    inter = nn.RotaryEmbedding(4, interleaved=True)(em.tensor([[0.0, 0, 0, 0], [1.0, 0, 1, 0]]))
    np.testing.assert_allclose(inter.numpy()[1], [math.cos(1), math.sin(1), math.cos(0.01), math.sin(0.01)], rtol=1e-6)
    partial = nn.RotaryEmbedding(4)(em.ones((3, 6)))
    np.testing.assert_array_equal(partial.numpy()[:, 4:], 1.0)
    long = rope(em.ones((1, 3000, 8)))  # past max_seq_len: the table grows
    assert long.shape == (1, 3000, 8)


def test_sinusoidal_positional_encoding():
    pe = nn.SinusoidalPositionalEncoding(6, max_len=10)
    out = pe(em.zeros((2, 4, 6))).numpy()
    pos, i = 3, 1
    assert out[0, pos, 2 * i] == pytest.approx(math.sin(pos / 10000 ** (2 * i / 6)), rel=1e-6)
    assert out[1, pos, 2 * i + 1] == pytest.approx(math.cos(pos / 10000 ** (2 * i / 6)), rel=1e-6)
    seq_first = nn.SinusoidalPositionalEncoding(6, batch_first=False)(em.zeros((4, 2, 6))).numpy()
    np.testing.assert_allclose(seq_first.swapaxes(0, 1), out, rtol=1e-6)
    assert pe(em.zeros((1, 12, 6))).shape == (1, 12, 6)
    assert pe.state_dict() == {}


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
    seq.append(nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear)
    assert isinstance(seq[:2], nn.Sequential) and len(seq[:2]) == 2
    assert seq(em.ones((4, 2))).shape == (4, 1)
    named = nn.Sequential({"enc": nn.Linear(2, 2), "act": nn.Tanh()})
    assert [n for n, _ in named.named_children()] == ["enc", "act"]
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(list(ml.parameters())) == 6 and "2.bias" in ml.state_dict()
    md = nn.ModuleDict({"a": nn.Linear(1, 1)})
    md["b"] = nn.ReLU()
    assert list(md) == ["a", "b"] and "a" in md and len(md) == 2
    with pytest.raises(TypeError, match="expected an nn.Module"):
        nn.Sequential(lambda x: x)


def test_functional_extras():
    x = em.arange(6, dtype="float32").reshape((1, 2, 3))
    assert F.pad(x, (1, 0, 0, 1)).shape == (1, 3, 4)
    assert F.pad(x, (1, 0, 0, 1)).numpy()[0, 2].tolist() == [0, 0, 0, 0]
    assert F.one_hot(em.tensor([0, 2])).tolist() == [[1, 0, 0], [0, 0, 1]]
    np.testing.assert_allclose(np.linalg.norm(F.normalize(em.randn((3, 4)), dim=1).numpy(), axis=1), 1.0, rtol=1e-6)
    assert F.softmax(x, dim=1).shape == x.shape
    gn = F.group_norm(em.randn((2, 4, 3)), 2)
    np.testing.assert_allclose(gn.numpy().reshape(2, 2, 6).mean(-1), 0.0, atol=1e-6)


def test_loss_modules_match_functional():
    em.seed(0)
    logits, target = em.randn((4, 3)), em.tensor([0, 2, 1, 1])
    w = em.tensor([1.0, 2.0, 0.5])
    assert nn.CrossEntropyLoss(w, label_smoothing=0.1)(logits, target).item() == pytest.approx(
        F.cross_entropy(logits, target, weight=w, label_smoothing=0.1).item()
    )
    a, b = em.randn((3, 2)), em.randn((3, 2))
    assert nn.MSELoss(reduction="sum")(a, b).item() == pytest.approx(F.mse_loss(a, b, "sum").item())
    assert nn.BCEWithLogitsLoss()(a, b.sigmoid()).item() == pytest.approx(
        F.binary_cross_entropy_with_logits(a, b.sigmoid()).item()
    )
    assert nn.L1Loss(reduction="none")(a, b).shape == (3, 2)
    big = F.binary_cross_entropy_with_logits(em.tensor([1000.0, -1000.0]), em.tensor([0.0, 1.0]), reduction="none")
    assert big.tolist() == [1000.0, 1000.0]  # stable: no inf or nan
    with pytest.raises(ValueError, match="reduction must be"):
        F.mse_loss(a, b, reduction="avg")
    with pytest.raises(ShapeError, match=r"input has shape \(3, 2\) but target has shape \(2,\)"):
        F.mse_loss(a, em.ones((2,)))

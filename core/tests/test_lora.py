"""LoRA: outputs against numpy float64 references of W + scale * B @ A, adapter gradients,
merge/unmerge, named adapters, targets idioms, save/load (and refusing a different base or a
hostile file), and, when torch and peft are importable, the same adapter built by peft."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ArgumentTypeError, InvalidArgumentError, NotImplementedOpError
from ember.nn import lora
from ember.nn.lora import AdapterMismatchError, LoraConfig, apply_lora

AD = em.Device.cpu().autodiff()
F64 = "float64"

try:
    import peft
    import torch
except ImportError:  # pragma: no cover - the golden test needs both
    torch = peft = None
needs_peft = pytest.mark.skipif(
    torch is None or peft is None, reason="torch and peft are not installed: the golden LoRA test against peft"
)


class Net(nn.Module):
    def __init__(self, dtype=F64) -> None:
        super().__init__()
        self.embed = nn.Embedding(11, 6, device=AD, dtype=dtype)
        self.conv = nn.Conv2d(2, 3, 3, padding=1, device=AD, dtype=dtype)
        self.fc1 = nn.Linear(6, 8, device=AD, dtype=dtype)
        self.fc2 = nn.Linear(8, 4, device=AD, dtype=dtype)

    def forward(self, ids, img):
        h = self.fc2(self.fc1(self.embed(ids)).relu())
        return h.sum(axis=1), self.conv(img)


def _randomize_b(model, seed=1):
    """B starts at zero; give every adapter a random B so the delta is visible."""
    rng = np.random.default_rng(seed)
    with em.no_grad():
        for _, layer in lora.lora_layers(model):
            for ad in layer.lora._modules.values():
                ad.B.copy_(em.tensor(rng.normal(size=ad.B.shape), dtype=ad.B.dtype))


def _np(t):
    return t.numpy().astype(np.float64)


def _conv2d_ref(x, w, b, pad):
    """Direct float64 2-D convolution (stride 1)."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    out = np.zeros((n, o, h - kh + 1, wd - kw + 1))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i : i + out.shape[2], j : j + out.shape[3]], w[:, :, i, j])
    return out + (0 if b is None else b[None, :, None, None])


@pytest.fixture
def net():
    em.random.seed(3)
    return Net()


@pytest.fixture
def inputs():
    rng = np.random.default_rng(0)
    ids = em.tensor(rng.integers(0, 11, size=(2, 5)), dtype="int64", device=AD)
    img = em.tensor(rng.normal(size=(2, 2, 5, 5)), dtype=F64, device=AD)
    return ids, img


@pytest.mark.parametrize("rslora", [False, True])
def test_outputs_match_numpy_reference_of_w_plus_scaled_ba(net, inputs, rslora):
    ids, img = inputs
    cfg = LoraConfig(rank=3, alpha=6.0, targets=["embed", "conv", "fc1", "fc2"], rslora=rslora)
    assert cfg.scale == (6.0 / math.sqrt(3) if rslora else 2.0)
    base = {k: _np(v) for k, v in net.state_dict().items()}
    apply_lora(net, cfg)
    _randomize_b(net)
    s = cfg.scale
    ad = {p: layer.adapter("default") for p, layer in lora.lora_layers(net)}
    emb_w = base["embed.weight"] + s * (_np(ad["embed"].B) @ _np(ad["embed"].A)).T
    h = emb_w[ids.numpy()]
    for name in ("fc1", "fc2"):
        w = base[f"{name}.weight"] + s * _np(ad[name].B) @ _np(ad[name].A)
        h = h @ w.T + base[f"{name}.bias"]
        if name == "fc1":
            h = np.maximum(h, 0)
    a = _np(ad["conv"].A)
    conv_w = base["conv.weight"] + s * (_np(ad["conv"].B).reshape(3, 3) @ a.reshape(3, -1)).reshape(3, 2, 3, 3)
    out, conv = net(ids, img)
    np.testing.assert_allclose(out.numpy(), h.sum(axis=1), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(
        conv.numpy(), _conv2d_ref(img.numpy(), conv_w, base["conv.bias"], 1), rtol=1e-10, atol=1e-10
    )


def test_fresh_adapter_is_identity_and_inits_follow_config(net, inputs):
    before = [o.numpy() for o in net(*inputs)]
    apply_lora(net, LoraConfig(rank=4, targets=["fc1", "fc2"]))
    after = [o.numpy() for o in net(*inputs)]
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)
    ad = net.fc1.adapter("default")
    assert np.all(ad.B.numpy() == 0) and np.abs(ad.A.numpy()).max() <= 1 / math.sqrt(6) + 1e-12
    seq = nn.Sequential(nn.Linear(512, 4, device=AD, dtype=F64))
    apply_lora(seq, LoraConfig(rank=64, targets="all-linear", init="gaussian"))
    a = seq[0].adapter("default").A.numpy()
    assert abs(a.std() - 1 / 64) < 0.05 / 64 and abs(a.mean()) < 0.05 / 64


def test_only_adapters_train_and_their_gradients_match_numpy(net, inputs):
    ids, _ = inputs
    cfg = LoraConfig(rank=2, alpha=5.0, targets=["fc2"])
    apply_lora(net, cfg)
    _randomize_b(net)
    trainable = [p for p, t in net.named_parameters() if t.requires_grad]
    assert trainable == ["fc2.lora.default.A", "fc2.lora.default.B"]
    x = net.fc1(net.embed(ids)).relu()  # the input of fc2 (no grad flows into frozen layers)
    g = np.random.default_rng(5).normal(size=(2, 5, 4))
    (net.fc2(x) * em.tensor(g, dtype=F64)).sum().backward()
    ad = net.fc2.adapter("default")
    xs, a, b = _np(x).reshape(-1, 8), _np(ad.A), _np(ad.B)
    gs = g.reshape(-1, 4)
    np.testing.assert_allclose(ad.B.grad.numpy(), cfg.scale * gs.T @ (xs @ a.T), rtol=1e-10)
    np.testing.assert_allclose(ad.A.grad.numpy(), cfg.scale * b.T @ gs.T @ xs, rtol=1e-10)
    assert net.fc2.base_layer.weight.grad is None


def test_merge_unmerge_agree_with_unmerged_outputs(net, inputs):
    apply_lora(net, LoraConfig(rank=3, targets=["embed", "conv", "fc1", "fc2"]))
    _randomize_b(net)
    w0 = net.fc1.base_layer.weight.numpy().copy()
    plain = [o.numpy() for o in net(*inputs)]
    lora.merge(net)
    assert all(layer.merged == "default" for _, layer in lora.lora_layers(net))
    merged = [o.numpy() for o in net(*inputs)]
    lora.unmerge(net)
    for p, m in zip(plain, merged):
        np.testing.assert_allclose(m, p, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(net.fc1.base_layer.weight.numpy(), w0, rtol=0, atol=1e-12)


def test_named_adapters_switch_disable_delete(net, inputs):
    base_out = net(*inputs)[0].numpy()
    apply_lora(net, LoraConfig(rank=2, targets=["fc1"]), name="one")
    apply_lora(net, LoraConfig(rank=4, targets=["fc1", "fc2"]), name="two")
    _randomize_b(net)
    assert lora.adapter_names(net) == ["one", "two"]
    out_two = net(*inputs)[0].numpy()
    assert [p for p, t in net.named_parameters() if t.requires_grad] == [
        "fc1.lora.two.A", "fc1.lora.two.B", "fc2.lora.two.A", "fc2.lora.two.B",
    ]  # fmt: skip
    lora.set_adapter(net, "one")
    out_one = net(*inputs)[0].numpy()
    assert net.fc2.active is None and net.fc1.active == "one"
    assert not np.allclose(out_one, out_two)
    with lora.adapters_disabled(net):
        np.testing.assert_array_equal(net(*inputs)[0].numpy(), base_out)
    np.testing.assert_array_equal(net(*inputs)[0].numpy(), out_one)
    lora.delete_adapter(net, "two")
    assert isinstance(net.fc2, nn.Linear) and lora.adapter_names(net) == ["one"]
    with pytest.raises(InvalidArgumentError, match="no adapter 'two'"):
        lora.set_adapter(net, "two")


def test_targets_idioms(net):
    def chosen(targets):
        model = Net()
        apply_lora(model, LoraConfig(targets=targets))
        return [p for p, _ in lora.lora_layers(model)]

    assert chosen("all-linear") == ["fc1", "fc2"]
    assert chosen(r"fc\d") == ["fc1", "fc2"]
    assert chosen(["conv", "2"]) == ["conv"]  # a suffix is a whole path component
    nested = nn.Sequential(Net())
    apply_lora(nested, LoraConfig(targets=["fc2", "conv"]))
    assert [p for p, _ in lora.lora_layers(nested)] == ["0.conv", "0.fc2"]
    assert chosen(nn.ParamGroup(types=nn.Embedding)) == ["embed"]
    assert chosen(nn.ParamGroup("fc*.weight")) == ["fc1", "fc2"]
    with pytest.raises(InvalidArgumentError, match="matched no Linear, Conv or Embedding.*embed, conv, fc1, fc2"):
        chosen("attn.*")
    with pytest.raises(ArgumentTypeError, match="targets"):
        LoraConfig(targets=3)
    with pytest.raises(InvalidArgumentError, match="rank"):
        LoraConfig(rank=0)
    with pytest.raises(InvalidArgumentError, match="init"):
        LoraConfig(init="xavier")
    cfg = LoraConfig.from_peft(r=4, lora_alpha=8, target_modules=["fc1"], use_rslora=True)
    assert (cfg.rank, cfg.alpha, cfg.targets, cfg.rslora) == (4, 8, ["fc1"], True)


def test_modules_to_save_and_bias(net):
    apply_lora(net, LoraConfig(targets=["fc1"], modules_to_save=["fc2"], bias="lora_only"))
    trainable = [p for p, t in net.named_parameters() if t.requires_grad]
    assert trainable == ["fc1.base_layer.bias", "fc1.lora.default.A", "fc1.lora.default.B", "fc2.weight", "fc2.bias"]


def test_conv_with_groups_is_refused():
    seq = nn.Sequential(nn.Conv2d(4, 4, 3, groups=2, device=AD))
    with pytest.raises(NotImplementedOpError, match="groups=2"):
        apply_lora(seq, LoraConfig(targets="0"))


def test_save_load_reproduces_outputs_exactly(net, inputs, tmp_path):
    cfg = LoraConfig(rank=3, alpha=4.0, targets=["fc1", "fc2", "conv"], modules_to_save=["embed"])
    em.random.seed(3)
    fresh = Net()  # the same base weights as net (same seed)
    apply_lora(net, cfg, name="task")
    _randomize_b(net)
    with em.no_grad():
        net.embed.weight.copy_(net.embed.weight * 2.0)  # a trained module_to_save
    want = [o.numpy() for o in net(*inputs)]
    lora.save_adapter(net, tmp_path / "ad", name="task")
    rec = json.loads((tmp_path / "ad" / "adapter_config.json").read_text())
    assert rec["config"]["targets"] == ["conv", "fc1", "fc2"] and rec["trained_paths"] == ["embed.weight"]
    assert lora.load_adapter(fresh, tmp_path / "ad") == "task"
    got = [o.numpy() for o in fresh(*inputs)]
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def _same_base():
    em.random.seed(3)  # as the net fixture
    return Net()


def test_load_refuses_another_base_and_hostile_files(net, tmp_path):
    apply_lora(net, LoraConfig(rank=2, targets=["fc1"]))
    d = lora.save_adapter(net, tmp_path / "ad")
    em.random.seed(99)
    other = Net()
    with pytest.raises(AdapterMismatchError, match="trained on another base model"):
        lora.load_adapter(other, d)
    assert lora.adapter_names(other) == []
    with pytest.raises(AdapterMismatchError, match="over the 10-byte limit"):
        lora.load_adapter(_same_base(), d, max_bytes=10)
    blob = (d / "adapter_model.safetensors").read_bytes()
    (d / "adapter_model.safetensors").write_bytes(blob[:-1] + bytes([blob[-1] ^ 1]))
    with pytest.raises(AdapterMismatchError, match="SHA-256"):
        lora.load_adapter(_same_base(), d)
    (d / "adapter_model.safetensors").write_bytes(blob)
    rec = json.loads((d / "adapter_config.json").read_text())
    (d / "adapter_config.json").write_text(json.dumps({**rec, "format": "pickle"}))
    with pytest.raises(AdapterMismatchError, match="not an ember LoRA record"):
        lora.load_adapter(_same_base(), d)
    (d / "adapter_config.json").write_text(json.dumps(rec).replace('"alpha": 8.0', '"alpha": NaN'))
    with pytest.raises(AdapterMismatchError, match="NaN"):
        lora.load_adapter(_same_base(), d)
    (d / "adapter_config.json").unlink()
    os.symlink(tmp_path / "elsewhere.json", d / "adapter_config.json")
    with pytest.raises(AdapterMismatchError, match="not a regular file"):
        lora.load_adapter(_same_base(), d)


def test_lora_trains_with_adamw(inputs):
    em.random.seed(0)
    model = Net(dtype="float32")
    apply_lora(model, LoraConfig(rank=4, alpha=8, targets="all-linear"))
    opt = em.optim.AdamW([nn.ParamGroup("*").bind(model)], lr=1e-2)
    ids, _ = inputs
    target = em.tensor(np.random.default_rng(1).normal(size=(2, 4)), dtype="float32")
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = (model(ids, em.zeros((1, 2, 3, 3)))[0] - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]


@needs_peft
def test_golden_peft_same_outputs_and_adapter_gradients(net, inputs):
    ids, img = inputs

    class TorchNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(11, 6)
            self.conv = torch.nn.Conv2d(2, 3, 3, padding=1)
            self.fc1 = torch.nn.Linear(6, 8)
            self.fc2 = torch.nn.Linear(8, 4)

        def forward(self, ids, img):
            return self.fc2(self.fc1(self.embed(ids)).relu()).sum(1), self.conv(img)

    tnet = TorchNet().double()
    tnet.load_state_dict({k: torch.tensor(v.numpy()) for k, v in net.state_dict().items()})
    targets = ["embed", "conv", "fc1", "fc2"]
    pcfg = peft.LoraConfig(r=3, lora_alpha=6, target_modules=targets, use_rslora=True)
    pmodel = peft.get_peft_model(tnet, pcfg)
    apply_lora(net, LoraConfig.from_peft(r=3, lora_alpha=6, target_modules=targets, use_rslora=True))
    _randomize_b(net)
    for path, layer in lora.lora_layers(net):
        ad = layer.adapter("default")
        tl = pmodel.base_model.model.get_submodule(path)
        with torch.no_grad():
            if path == "embed":
                tl.lora_embedding_A["default"].copy_(torch.tensor(ad.A.numpy()))
                tl.lora_embedding_B["default"].copy_(torch.tensor(ad.B.numpy()))
            else:
                tl.lora_A["default"].weight.copy_(torch.tensor(ad.A.numpy()))
                tl.lora_B["default"].weight.copy_(torch.tensor(ad.B.numpy()))
    out, conv = net(ids, img)
    tout, tconv = pmodel(torch.tensor(ids.numpy()), torch.tensor(img.numpy()))
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(conv.numpy(), tconv.detach().numpy(), rtol=1e-10, atol=1e-12)
    ((out * out).sum() + conv.sum()).backward()
    ((tout * tout).sum() + tconv.sum()).backward()
    for path, layer in lora.lora_layers(net):
        ad = layer.adapter("default")
        tl = pmodel.base_model.model.get_submodule(path)
        if path == "embed":
            ta, tb = tl.lora_embedding_A["default"], tl.lora_embedding_B["default"]
        else:
            ta, tb = tl.lora_A["default"].weight, tl.lora_B["default"].weight
        np.testing.assert_allclose(ad.A.grad.numpy(), ta.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=path)
        np.testing.assert_allclose(ad.B.grad.numpy(), tb.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=path)


def test_conv1d_adapter_merges_to_its_forward():
    em.random.seed(4)
    model = nn.Sequential(nn.Conv1d(3, 5, 3, stride=2, padding=1, device=AD, dtype=F64))
    apply_lora(model, LoraConfig(rank=2, alpha=3.0, targets="0"))
    _randomize_b(model)
    x = em.tensor(np.random.default_rng(8).normal(size=(2, 3, 9)), dtype=F64, device=AD)
    two_convs = model(x).numpy()
    lora.merge(model)
    np.testing.assert_allclose(model(x).numpy(), two_convs, rtol=1e-10, atol=1e-12)

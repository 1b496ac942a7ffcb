"""nn.ParamGroup: selection by glob, regex, type and list; freezing and saving; per-group
optimizer settings checked against numpy float64 updates."""

from __future__ import annotations

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.errors import ArgumentTypeError, InvalidArgumentError

AD = em.Device.cpu().autodiff()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4, device=AD)
        self.encoder = nn.Sequential(nn.Linear(4, 6, device=AD), nn.ReLU(), nn.Linear(6, 6, device=AD))
        self.norm = nn.LayerNorm(6, device=AD)
        self.head = nn.Linear(6, 3, device=AD)

    def forward(self, ids):
        return self.head(self.norm(self.encoder(self.embed(ids))))


@pytest.fixture
def net():
    em.random.seed(0)
    return Net()


def test_glob_selects_parameter_paths(net):
    assert list(nn.ParamGroup("*.bias").select(net)) == ["encoder.0.bias", "encoder.2.bias", "norm.bias", "head.bias"]
    assert list(nn.ParamGroup("encoder.*.weight").select(net)) == ["encoder.0.weight", "encoder.2.weight"]


def test_glob_on_a_module_path_selects_its_parameters(net):
    assert list(nn.ParamGroup("head").select(net)) == ["head.weight", "head.bias"]


def test_regex_must_match_the_whole_path(net):
    assert list(nn.ParamGroup(regex=r"encoder\.\d\.weight").select(net)) == ["encoder.0.weight", "encoder.2.weight"]
    assert list(nn.ParamGroup(regex=r"weight").select(net)) == []


def test_types_and_explicit_lists(net):
    assert list(nn.ParamGroup(types=nn.LayerNorm).select(net)) == ["norm.weight", "norm.bias"]
    assert list(nn.ParamGroup(types=(nn.Embedding, nn.LayerNorm)).select(net)) == [
        "embed.weight", "norm.weight", "norm.bias",
    ]  # fmt: skip
    group = nn.ParamGroup(params=["head.bias", net.embed.weight])
    assert list(group.select(net)) == ["embed.weight", "head.bias"]


def test_exclude_wins_over_selectors(net):
    group = nn.ParamGroup("*", exclude=["*.bias", "norm.*"])
    assert list(group.select(net)) == ["embed.weight", "encoder.0.weight", "encoder.2.weight", "head.weight"]


def test_select_modules(net):
    paths = [p for p, _ in nn.ParamGroup(types=nn.Linear).select_modules(net)]
    assert paths == ["encoder.0", "encoder.2", "head"]
    paths = [p for p, _ in nn.ParamGroup("encoder.*.weight").select_modules(net)]
    assert paths == ["encoder.0", "encoder.2"]


def test_freeze_unfreeze_and_state_dict(net):
    frozen = nn.ParamGroup("encoder.*").freeze(net)
    assert frozen == ["encoder.0.weight", "encoder.0.bias", "encoder.2.weight", "encoder.2.bias"]
    assert not net.encoder[0].weight.requires_grad and net.head.weight.requires_grad
    assert net.num_parameters(trainable_only=True) == net.num_parameters() - (4 * 6 + 6 + 6 * 6 + 6)
    nn.ParamGroup("encoder.0.*").unfreeze(net)
    assert net.encoder[0].weight.requires_grad and not net.encoder[2].weight.requires_grad
    saved = nn.ParamGroup("head").state_dict(net)
    assert list(saved) == ["head.weight", "head.bias"]
    np.testing.assert_array_equal(saved["head.weight"].numpy(), net.head.weight.numpy())


def test_bad_selectors_name_the_argument(net):
    with pytest.raises(InvalidArgumentError, match="at least one selector"):
        nn.ParamGroup()
    with pytest.raises(InvalidArgumentError, match="regex"):
        nn.ParamGroup(regex="(")
    with pytest.raises(ArgumentTypeError, match="types"):
        nn.ParamGroup(types=int)
    with pytest.raises(InvalidArgumentError, match="no parameter 'head.wieght'"):
        nn.ParamGroup(params=["head.wieght"]).select(net)
    with pytest.raises(InvalidArgumentError, match="not bound to a model"):
        nn.ParamGroup("*").select()


def _sgd_groups_reference(net, lrs, order):
    """One SGD step per group setting, in numpy float64: p - lr * grad."""
    return {name: net_p.numpy().astype(np.float64) - lrs[order(name)] * net_p.grad.numpy() for name, net_p in
            net.named_parameters()}  # fmt: skip


def test_optimizer_groups_first_match_wins_against_numpy(net):
    ids = em.tensor([[1, 2, 3], [4, 5, 6]], dtype="int64", device=AD)
    groups = [
        nn.ParamGroup("head.*", lr=0.5).bind(net),
        nn.ParamGroup("*.bias", lr=0.1).bind(net),
        nn.ParamGroup("*", lr=0.01).bind(net),
    ]
    opt = em.optim.SGD(groups, lr=1.0)
    assert [len(g["params"]) for g in opt.param_groups] == [2, 3, 4]
    net(ids).square().mean().backward()

    def lr_of(name):
        return 0 if name.startswith("head.") else 1 if name.endswith(".bias") else 2

    expected = _sgd_groups_reference(net, [0.5, 0.1, 0.01], lr_of)
    opt.step()
    for name, p in net.named_parameters():
        np.testing.assert_allclose(p.numpy(), expected[name], rtol=1e-6, atol=1e-7, err_msg=name)


def test_adamw_groups_take_their_weight_decay_and_betas(net):
    opt = em.optim.AdamW(
        [nn.ParamGroup("*.bias", weight_decay=0.0, betas=(0.8, 0.99)).bind(net), nn.ParamGroup("*", lr=3e-3).bind(net)]
    )
    first, rest = opt.param_groups
    assert (first["weight_decay"], first["betas"], first["lr"]) == (0.0, (0.8, 0.99), 1e-3)
    assert (rest["weight_decay"], rest["betas"], rest["lr"]) == (1e-2, (0.9, 0.999), 3e-3)
    # AdamW's first step moves each parameter by lr * sign(g) (m / sqrt(v) = g / |g|) after decay
    p = net.head.weight
    before = p.numpy().astype(np.float64)
    ids = em.tensor([[1, 2]], dtype="int64", device=AD)
    net(ids).sum().backward()
    g = p.grad.numpy().astype(np.float64)
    opt.step()
    expected = before * (1 - 3e-3 * 1e-2) - 3e-3 * g / (np.abs(g) + 1e-8)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_optimizer_skips_frozen_parameters_and_rejects_unknown_settings(net):
    nn.ParamGroup("encoder.*").freeze(net)
    opt = em.optim.AdamW([nn.ParamGroup("*").bind(net)])
    assert len(opt.param_groups[0]["params"]) == 5
    with pytest.raises(InvalidArgumentError, match="momentum"):
        em.optim.AdamW([nn.ParamGroup("*", momentum=0.9).bind(net)])
    with pytest.raises(InvalidArgumentError, match="selects no trainable parameter"):
        em.optim.AdamW([nn.ParamGroup("encoder.*").bind(net)])
    with pytest.raises(InvalidArgumentError, match="not bound"):
        em.optim.AdamW([nn.ParamGroup("*")])

"""ember.nn layers and losses on the device under test against numpy float64 references.

Each case builds a layer under ``em.seed`` (so its weights are the same on every device), runs
it, and compares the outputs (and updated buffers) with :mod:`.nn_reference` fed the layer's
own weights. Gradients with respect to the inputs and every parameter come from the layer on
``ad_device`` and are compared with central differences of the numpy reference. The suite
computes in float64 where the device has it, else in float32 at float32 tolerances.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import ember as em
from ember import nn
from ember.nn import functional as F

from . import nn_reference as ref
from .checks import GRAD_TOLERANCES, assert_close, numeric_gradient, require_dtype

SEED = 20240611


def _dtype(device: em.Device) -> em.DType:
    """float64 where the device has it, else float32; skip (with the backend's reason) if neither."""
    caps = device.capabilities
    for dt in (em.float64, em.float32):
        if caps.supports(dt):
            return dt
    pytest.skip(f"{device.kind}:{device.index} has neither float64 nor float32: {caps.why_not(em.float32)}")


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


@dataclass(frozen=True)
class ModuleCase:
    """One layer configuration: how to build and call it, its inputs and its numpy reference."""

    name: str
    build: Callable[[em.Device, em.DType], nn.Module]
    inputs: Callable[[np.random.Generator], list[np.ndarray]]
    reference: Callable[[dict[str, np.ndarray], list[np.ndarray]], tuple[np.ndarray, ...]]
    call: Callable[[Any, list[em.Tensor]], tuple[em.Tensor, ...]] = lambda m, xs: (m(*xs),)
    training: bool = True
    setup: Callable[[Any, np.random.Generator], None] | None = None
    #: expected buffers after the forward pass, from the state before it and the inputs
    buffers: Callable[[dict[str, np.ndarray], list[np.ndarray]], dict[str, np.ndarray]] | None = None
    #: which inputs to differentiate (default: every floating-point one)
    grad_inputs: tuple[int, ...] | None = None
    scale: float = 10.0


def _normal(*shapes: tuple[int, ...]) -> Callable[[np.random.Generator], list[np.ndarray]]:
    return lambda rng: [rng.standard_normal(s) for s in shapes]


def _bn_setup(module: Any, rng: np.random.Generator) -> None:
    c = module.num_features
    with em.no_grad():
        module.running_mean.copy_(em.tensor(rng.standard_normal(c), dtype=module.running_mean.dtype))
        module.running_var.copy_(em.tensor(rng.uniform(0.5, 2.0, c), dtype=module.running_var.dtype))
        module.weight.copy_(em.tensor(rng.uniform(0.5, 1.5, c), dtype=module.weight.dtype))
        module.bias.copy_(em.tensor(rng.standard_normal(c), dtype=module.bias.dtype))


def _bn_buffers(s: dict[str, np.ndarray], xs: list[np.ndarray]) -> dict[str, np.ndarray]:
    _, rm, rv = ref.batch_norm_train(xs[0], s, 0.1, 1e-5)
    return {"running_mean": rm, "running_var": rv}


def _lstm_call(m: Any, xs: list[em.Tensor]) -> tuple[em.Tensor, ...]:
    out, (h, c) = m(xs[0], (xs[1], xs[2])) if len(xs) == 3 else m(xs[0])
    return out, h, c


def _gru_call(m: Any, xs: list[em.Tensor]) -> tuple[em.Tensor, ...]:
    out, h = m(*xs)
    return out, h


def _mha_self_call(m: Any, xs: list[em.Tensor]) -> tuple[em.Tensor, ...]:
    padding = em.tensor([[False] * 5, [False] * 3 + [True] * 2], device=xs[0].device)
    return m(xs[0], key_padding_mask=padding, is_causal=True)


def _mha_cross_call(m: Any, xs: list[em.Tensor]) -> tuple[em.Tensor, ...]:
    return m(xs[0], xs[1], xs[2], attn_mask=xs[3].detach(), need_weights=True)


_PAD = np.array([[False] * 5, [False] * 3 + [True] * 2])
_BOOL_MASK = np.array([[False, True, False, False], [False, False, True, True], [True, False, False, False]])
_EMB_IDX = np.array([[1, 0, 4], [3, 3, 0]])

MODULE_CASES = [
    ModuleCase(
        "linear",
        lambda d, dt: nn.Linear(4, 3, device=d, dtype=dt),
        _normal((2, 5, 4)),
        lambda s, xs: (ref.linear(xs[0], s["weight"], s["bias"]),),
    ),
    ModuleCase(
        "linear_no_bias",
        lambda d, dt: nn.LinearConfig(3, 2, bias=False).init(d, dt),
        _normal((4, 3)),
        lambda s, xs: (ref.linear(xs[0], s["weight"]),),
    ),
    ModuleCase(
        "conv2d_stride_groups",
        lambda d, dt: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2, device=d, dtype=dt),
        _normal((2, 4, 6, 5)),
        lambda s, xs: (ref.conv2d(xs[0], s["weight"], s["bias"], (2, 2), (1, 1), (1, 1), 2),),
    ),
    ModuleCase(
        "conv2d_dilation",
        lambda d, dt: nn.Conv2d(2, 3, (3, 2), padding=(2, 0), dilation=(2, 1), bias=False, device=d, dtype=dt),
        _normal((1, 2, 5, 4)),
        lambda s, xs: (ref.conv2d(xs[0], s["weight"], None, (1, 1), (2, 0), (2, 1), 1),),
    ),
    ModuleCase(
        "conv_transpose2d",
        lambda d, dt: nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1, groups=2, device=d, dtype=dt),
        _normal((2, 2, 3, 3)),
        lambda s, xs: (ref.conv_transpose2d(xs[0], s["weight"], s["bias"], (2, 2), (1, 1), (1, 1), (1, 1), 2),),
    ),
    ModuleCase(
        "lstm_2_layers",
        lambda d, dt: nn.LSTM(3, 4, num_layers=2, device=d, dtype=dt),
        _normal((5, 2, 3)),
        lambda s, xs: ref.lstm(xs[0], s, 2, 4, False, False),
        call=_lstm_call,
    ),
    ModuleCase(
        "lstm_bidirectional_batch_first_h0",
        lambda d, dt: nn.LSTM(3, 2, batch_first=True, bidirectional=True, device=d, dtype=dt),
        _normal((2, 4, 3), (2, 2, 2), (2, 2, 2)),
        lambda s, xs: ref.lstm(xs[0], s, 1, 2, True, True, xs[1], xs[2]),
        call=_lstm_call,
    ),
    ModuleCase(
        "gru_2_layers_batch_first_h0",
        lambda d, dt: nn.GRU(3, 4, num_layers=2, batch_first=True, device=d, dtype=dt),
        _normal((2, 4, 3), (2, 2, 4)),
        lambda s, xs: ref.gru(xs[0], s, 2, 4, False, True, xs[1]),
        call=_gru_call,
    ),
    ModuleCase(
        "mha_self_causal_padding",
        lambda d, dt: nn.MultiHeadAttention(6, 2, batch_first=True, device=d, dtype=dt),
        _normal((2, 5, 6)),
        lambda s, xs: ref.multi_head_attention(xs[0], xs[0], xs[0], s, 2, True, key_padding_mask=_PAD, is_causal=True),
        call=_mha_self_call,
    ),
    ModuleCase(
        "mha_cross_kdim_vdim_seq_first_float_mask",
        lambda d, dt: nn.MultiHeadAttention(4, 2, kdim=3, vdim=5, device=d, dtype=dt),
        lambda rng: [
            rng.standard_normal((3, 2, 4)),
            rng.standard_normal((4, 2, 3)),
            rng.standard_normal((4, 2, 5)),
            rng.standard_normal((3, 4)),
        ],
        lambda s, xs: ref.multi_head_attention(xs[0], xs[1], xs[2], s, 2, False, attn_mask=xs[3]),
        call=_mha_cross_call,
        grad_inputs=(0, 1, 2),
    ),
    ModuleCase(
        "mha_bool_attn_mask",
        lambda d, dt: nn.MultiHeadAttention(4, 1, batch_first=True, bias=False, device=d, dtype=dt),
        _normal((2, 3, 4), (2, 4, 4)),
        lambda s, xs: ref.multi_head_attention(xs[0], xs[1], xs[1], s, 1, True, attn_mask=_BOOL_MASK),
        call=lambda m, xs: m(xs[0], xs[1], xs[1], attn_mask=em.tensor(_BOOL_MASK, device=xs[0].device)),
    ),
    ModuleCase(
        "layer_norm",
        lambda d, dt: nn.LayerNorm((3, 4), device=d, dtype=dt),
        _normal((2, 3, 4)),
        lambda s, xs: (ref.layer_norm(xs[0], 2, s["weight"], s["bias"], 1e-5),),
        setup=lambda m, rng: _randomize(m, rng),
    ),
    ModuleCase(
        "rms_norm",
        lambda d, dt: nn.RMSNorm(5, eps=1e-6, device=d, dtype=dt),
        _normal((3, 5)),
        lambda s, xs: (ref.rms_norm(xs[0], 1, s["weight"], 1e-6),),
        setup=lambda m, rng: _randomize(m, rng),
    ),
    ModuleCase(
        "group_norm",
        lambda d, dt: nn.GroupNorm(2, 4, device=d, dtype=dt),
        _normal((2, 4, 3, 2)),
        lambda s, xs: (ref.group_norm(xs[0], 2, s["weight"], s["bias"], 1e-5),),
        setup=lambda m, rng: _randomize(m, rng),
    ),
    ModuleCase(
        "batch_norm1d_train",
        lambda d, dt: nn.BatchNorm1d(3, device=d, dtype=dt),
        _normal((4, 3, 2)),
        lambda s, xs: (ref.batch_norm_train(xs[0], s, 0.1, 1e-5)[0],),
        setup=_bn_setup,
        buffers=_bn_buffers,
    ),
    ModuleCase(
        "batch_norm2d_train",
        lambda d, dt: nn.BatchNorm2d(3, device=d, dtype=dt),
        _normal((3, 3, 2, 2)),
        lambda s, xs: (ref.batch_norm_train(xs[0], s, 0.1, 1e-5)[0],),
        setup=_bn_setup,
        buffers=_bn_buffers,
    ),
    ModuleCase(
        "batch_norm2d_eval",
        lambda d, dt: nn.BatchNorm2d(3, device=d, dtype=dt),
        _normal((2, 3, 2, 2)),
        lambda s, xs: (ref.batch_norm_eval(xs[0], s, 1e-5),),
        training=False,
        setup=_bn_setup,
        buffers=lambda s, xs: {"running_mean": s["running_mean"], "running_var": s["running_var"]},
    ),
    ModuleCase(
        "embedding_padding_idx",
        lambda d, dt: nn.Embedding(5, 3, padding_idx=0, device=d, dtype=dt),
        lambda rng: [_EMB_IDX],
        lambda s, xs: (ref.embedding(xs[0], s["weight"], 0, s["frozen"]),),
    ),
    ModuleCase(
        "transformer_encoder_layer_post_norm_relu",
        lambda d, dt: nn.TransformerEncoderLayer(4, 2, 6, dropout=0.0, device=d, dtype=dt),
        _normal((3, 2, 4)),
        lambda s, xs: (ref.encoder_layer(xs[0], s, 2, False, "relu", 1e-5, False),),
    ),
    ModuleCase(
        "transformer_encoder_layer_pre_norm_gelu_causal",
        lambda d, dt: nn.TransformerEncoderLayer(
            4, 2, 6, dropout=0.0, activation="gelu", norm_first=True, batch_first=True, device=d, dtype=dt
        ),
        _normal((2, 3, 4)),
        lambda s, xs: (ref.encoder_layer(xs[0], s, 2, True, "gelu", 1e-5, True, is_causal=True),),
        call=lambda m, xs: (m(xs[0], is_causal=True),),
    ),
]


def _randomize(module: Any, rng: np.random.Generator) -> None:
    """Give affine norm weights values other than ones and zeros, so they matter."""
    with em.no_grad():
        for p in module.parameters():
            p.copy_(em.tensor(rng.uniform(0.5, 1.5, p.shape), dtype=p.dtype))


def _state(module: Any) -> dict[str, np.ndarray]:
    out = {k: np.asarray(t.numpy(), dtype=np.float64) for k, t in module.named_parameters()}
    out.update({k: np.asarray(t.numpy(), dtype=np.float64) for k, t in module.named_buffers()})
    if "weight" in out and isinstance(module, nn.Embedding):
        out["frozen"] = out["weight"].copy()
    return out


def _make(case: ModuleCase, device: em.Device, dt: em.DType) -> tuple[Any, list[np.ndarray]]:
    em.seed(SEED)
    module = case.build(device, dt)
    rng = _rng(case.name)
    if case.setup is not None:
        case.setup(module, rng)
    module.train(case.training)
    return module, case.inputs(rng)


def _tensors(arrays: list[np.ndarray], dt: em.DType, device: em.Device, grad: bool) -> list[em.Tensor]:
    """Float arrays as ``dt`` tensors (requiring grad if ``grad``); integer arrays as int64 indices."""
    if any(a.dtype.kind in "iu" for a in arrays):
        require_dtype(device, em.int64)
    out = []
    for a in arrays:
        if a.dtype.kind == "f":
            t = em.tensor(a, dtype=dt, device=device)
            out.append(t.requires_grad_() if grad else t)
        else:
            out.append(em.tensor(a, device=device))
    return out


@pytest.mark.parametrize("case", MODULE_CASES, ids=lambda c: c.name)
def test_module_forward(case, device):
    """Outputs (and buffers updated by the pass) match the numpy reference; plain device: no grads."""
    dt = _dtype(device)
    module, arrays = _make(case, device, dt)
    before = _state(module)
    for name, p in module.named_parameters():
        assert not p.requires_grad, f"{case.name}: parameter {name} requires grad on {device}, which has no autodiff"
    outs = case.call(module, _tensors(arrays, dt, device, grad=False))
    want = case.reference(before, arrays)
    assert len(outs) == len(want), f"{case.name}: {len(outs)} outputs, the reference has {len(want)}"
    for i, (o, w) in enumerate(zip(outs, want)):
        assert_close(o, w, dt, scale=case.scale, what=f"{case.name} output {i}")
    if case.buffers is not None:
        after = dict(module.named_buffers())
        for name, w in case.buffers(before, arrays).items():
            assert_close(after[name], w, dt, scale=case.scale, what=f"{case.name} buffer {name}")


@pytest.mark.parametrize("case", MODULE_CASES, ids=lambda c: c.name)
def test_module_gradients(case, ad_device):
    """Gradients w.r.t. float inputs and every parameter match central differences of the reference."""
    dt = _dtype(ad_device)
    module, arrays = _make(case, ad_device, dt)
    state = _state(module)
    names = [n for n, _ in module.named_parameters()]
    params = dict(module.named_parameters())
    for name, p in params.items():
        assert p.requires_grad, f"{case.name}: parameter {name} does not require grad on {ad_device}"
    inputs = _tensors(arrays, dt, ad_device, grad=True)
    outs = case.call(module, inputs)
    rng = _rng(case.name + "/cotangent")
    cots = [rng.uniform(-1.0, 1.0, o.shape) for o in outs]
    loss = None
    for o, c in zip(outs, cots):
        term = (o * em.tensor(c, dtype=dt, device=ad_device)).sum()
        loss = term if loss is None else loss + term
    loss.backward()

    n_in = len(arrays)

    def scalar(args: list[np.ndarray]) -> float:
        s = dict(state)
        s.update(zip(names, args[n_in:]))
        with np.errstate(all="ignore"):
            return float(sum(np.sum(r * c) for r, c in zip(case.reference(s, list(args[:n_in])), cots)))

    args = list(arrays) + [state[n] for n in names]
    wrt = case.grad_inputs
    if wrt is None:
        wrt = tuple(i for i, t in enumerate(inputs) if t.dtype.is_floating)
    targets = [(f"input {i}", inputs[i]) for i in wrt] + [(f"parameter {n}", params[n]) for n in names]
    positions = list(wrt) + [n_in + i for i in range(len(names))]
    rtol, atol = GRAD_TOLERANCES.get(dt.name, GRAD_TOLERANCES["float32"])
    for (label, leaf), pos in zip(targets, positions):
        assert leaf.grad is not None, f"{case.name}: no gradient reached {label}"
        assert leaf.grad.shape == leaf.shape, f"{case.name}: gradient of {label} has shape {leaf.grad.shape}"
        want = numeric_gradient(scalar, args, pos)
        have = np.asarray(leaf.grad.numpy(), dtype=np.float64)
        size = max(1.0, float(np.max(np.abs(want)))) if want.size else 1.0
        bad = ~(np.abs(have - want) <= atol * size + rtol * np.abs(want))
        if bad.any():
            idx = tuple(np.argwhere(bad)[0])
            pytest.fail(
                f"{case.name}: {int(bad.sum())} of {want.size} gradient values of {label} differ from central "
                f"differences; first at {idx}: ember {have[idx]!r}, finite differences {want[idx]!r}"
            )


# -- losses ------------------------------------------------------------------------------
def _log_softmax(x: np.ndarray, axis: int = 1) -> np.ndarray:
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def _ce_ref(x: np.ndarray, t: np.ndarray, w: np.ndarray, smoothing: float, ignore: int) -> np.ndarray:
    """Mean weighted cross-entropy with label smoothing and an ignored class (PyTorch's definition)."""
    logp = _log_softmax(x)
    c = x.shape[1]
    valid = t != ignore
    safe = np.where(valid, t, 0)
    nll = -np.take_along_axis(logp, safe[:, None], 1)[:, 0] * w[safe]
    smooth = -(logp * w[None, :]).sum(axis=1) / c
    loss = np.where(valid, (1 - smoothing) * nll + smoothing * smooth, 0.0)
    return np.asarray(loss.sum() / np.where(valid, w[safe], 0.0).sum())


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


_T_IDX = np.array([0, 2, 1, 2, 1])
_T_IGN = np.array([0, 2, -100, 1, 1])
_CLASS_W = np.array([0.5, 1.0, 2.0])

#: name -> (ember loss of (input, target), numpy reference, input, target)
LOSS_CASES: dict[str, tuple[Callable[..., em.Tensor], Callable[..., np.ndarray], Callable[..., Any]]] = {
    "cross_entropy_weight_smoothing_ignore": (
        lambda x, t, w: F.cross_entropy(x, t, weight=w, ignore_index=-100, label_smoothing=0.1),
        lambda x, t, w: _ce_ref(x, t, w, 0.1, -100),
        lambda rng: (rng.standard_normal((5, 3)), _T_IGN, _CLASS_W),
    ),
    "nll_loss_weight_ignore": (
        lambda x, t, w: F.nll_loss(F.log_softmax(x, 1), t, weight=w),
        lambda x, t, w: _ce_ref(x, t, w, 0.0, -100),
        lambda rng: (rng.standard_normal((5, 3)), _T_IGN, _CLASS_W),
    ),
    "mse_loss_sum": (
        lambda x, t: F.mse_loss(x, t, reduction="sum"),
        lambda x, t: np.asarray(((x - t) ** 2).sum()),
        lambda rng: (rng.standard_normal((3, 4)), rng.standard_normal((3, 4))),
    ),
    "l1_loss": (
        lambda x, t: F.l1_loss(x, t),
        lambda x, t: np.asarray(np.abs(x - t).mean()),
        lambda rng: (rng.standard_normal((3, 4)), rng.standard_normal((3, 4))),
    ),
    "smooth_l1_loss_beta": (
        lambda x, t: F.smooth_l1_loss(x, t, beta=0.7, reduction="none"),
        lambda x, t: np.where(np.abs(x - t) < 0.7, 0.5 * (x - t) ** 2 / 0.7, np.abs(x - t) - 0.35),
        lambda rng: (rng.standard_normal((3, 4)), rng.standard_normal((3, 4))),
    ),
    "huber_loss_delta": (
        lambda x, t: F.huber_loss(x, t, delta=0.7),
        lambda x, t: np.asarray(np.where(np.abs(x - t) < 0.7, 0.5 * (x - t) ** 2, 0.7 * (np.abs(x - t) - 0.35)).mean()),
        lambda rng: (rng.standard_normal((3, 4)), rng.standard_normal((3, 4))),
    ),
    "binary_cross_entropy": (
        lambda p, t: F.binary_cross_entropy(p, t),
        lambda p, t: np.asarray(-(t * np.log(p) + (1 - t) * np.log(1 - p)).mean()),
        lambda rng: (rng.uniform(0.05, 0.95, (3, 4)), rng.uniform(0, 1, (3, 4))),
    ),
    "binary_cross_entropy_with_logits_pos_weight": (
        lambda x, t, pw: F.binary_cross_entropy_with_logits(x, t, pos_weight=pw, reduction="sum"),
        lambda x, t, pw: np.asarray((pw * t * _softplus(-x) + (1 - t) * _softplus(x)).sum()),
        lambda rng: (rng.standard_normal((3, 4)) * 30, rng.uniform(0, 1, (3, 4)), rng.uniform(0.5, 2, 4)),
    ),
    "kl_div_batchmean": (
        lambda x, t: F.kl_div(F.log_softmax(x, 1), t, reduction="batchmean"),
        lambda x, t: np.asarray(
            (np.where(t > 0, t * np.log(np.where(t > 0, t, 1)), 0) - t * _log_softmax(x)).sum() / 3
        ),
        lambda rng: (rng.standard_normal((3, 4)), np.array([[0.1, 0.2, 0.3, 0.4], [0.0, 0.5, 0.5, 0.0], [1, 0, 0, 0]])),
    ),
}


def _loss_args(name: str, dt: em.DType, device: em.Device, grad: bool) -> tuple[list[em.Tensor], list[np.ndarray]]:
    arrays = [np.asarray(a) for a in LOSS_CASES[name][2](_rng(name))]
    tensors = _tensors(arrays, dt, device, grad=False)
    if grad:
        tensors[0].requires_grad_()
    return tensors, arrays


@pytest.mark.parametrize("name", list(LOSS_CASES))
def test_loss_forward(name, device):
    dt = _dtype(device)
    fn, reference, _ = LOSS_CASES[name]
    tensors, arrays = _loss_args(name, dt, device, grad=False)
    assert_close(fn(*tensors), reference(*arrays), dt, scale=10.0, what=name)


@pytest.mark.parametrize("name", list(LOSS_CASES))
def test_loss_gradient(name, ad_device):
    """Gradient with respect to the prediction (the first argument)."""
    dt = _dtype(ad_device)
    fn, reference, _ = LOSS_CASES[name]
    tensors, arrays = _loss_args(name, dt, ad_device, grad=True)
    out = fn(*tensors)
    cot = _rng(name + "/cotangent").uniform(-1.0, 1.0, out.shape)
    (out * em.tensor(cot, dtype=dt, device=ad_device)).sum().backward()
    want = numeric_gradient(lambda a: float(np.sum(reference(*a) * cot)), arrays, 0)
    have = np.asarray(tensors[0].grad.numpy(), dtype=np.float64)
    rtol, atol = GRAD_TOLERANCES.get(dt.name, GRAD_TOLERANCES["float32"])
    np.testing.assert_allclose(have, want, rtol=rtol, atol=atol * max(1.0, float(np.abs(want).max())), err_msg=name)
